//! `POST /v1/embeddings` for OpenAI-compatible deployments: the body checked, then sent down the
//! same pipeline as chat (retries, capability gate, decision log) with the embeddings vendor step.

use crate::auth::context::RequestContext;
use crate::config::routes::{Api, Deployment};
use crate::endpoints::route;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use crate::pipeline::gate::Needs;
use crate::pipeline::run::{self, Trip};
use crate::pipeline::step::{Answer, ClientStream, VendorStep};
use crate::providers::{self, StreamTranslator, UpstreamCall, UpstreamError};
use crate::usage::record::RequestShape;
use crate::usage::record::{Ingress, RequestOutcome};
use serde_json::Value;
use worker::{Context, Env};

/// Checks the fields every embeddings request needs; the rest passes through untouched.
pub fn parse(body: &[u8]) -> Result<(Value, String, usize), ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid_request(codes::INVALID_JSON, format!("The request body is not valid JSON: {e}"))
    })?;
    let Some(obj) = value.as_object() else {
        return Err(ApiError::invalid_request(codes::INVALID_TYPE, "The request body must be a JSON object."));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => {
            return Err(ApiError::invalid_request(codes::INVALID_TYPE, "'model' must be a string.").with_param("model"))
        }
        None => {
            return Err(ApiError::invalid_request(
                codes::MISSING_REQUIRED_PARAMETER,
                "Missing required parameter: 'model'.",
            )
            .with_param("model"))
        }
    };
    let chars = match obj.get("input") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(items)) if !items.is_empty() => items.iter().map(|i| i.to_string().len()).sum(),
        Some(_) => {
            return Err(ApiError::invalid_request(
                codes::INVALID_TYPE,
                "'input' must be a non-empty string or array of strings or token arrays.",
            )
            .with_param("input"))
        }
        None => {
            return Err(ApiError::invalid_request(
                codes::MISSING_REQUIRED_PARAMETER,
                "Missing required parameter: 'input'.",
            )
            .with_param("input"))
        }
    };
    Ok((value, model, chars))
}

pub async fn create(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Reply, ApiError> {
    let (request, logical, chars) = parse(&body)?;
    let table = route::table(env, &rc).await?;
    let chain = table
        .chain(&logical, rc.random, rc.session_id.as_deref())
        .ok_or_else(|| ApiError::model_not_found(&logical))?;
    let model = route::model(&table, &rc, &logical)?;
    let shape = RequestShape { text_chars: chars, messages: 0, max_output: Some(0), choices: 1 };
    let mut outcome = RequestOutcome::new(&rc, &logical, false);
    outcome.ingress = Ingress::Embeddings;
    outcome.shape = Some(shape);
    let trip = Trip {
        rc: &rc,
        logical_model: &logical,
        model,
        chain,
        body: &body,
        stream: false,
        shape,
        needs: Needs::default(),
        outcome,
        cache: None,
        unserved: "No deployment of this model can serve embeddings.",
    };
    run::run(trip, &EmbeddingsStep { request: &request }, env, ctx).await
}

/// Embeddings: OpenAI-compatible vendors only; the body passes through, read for its usage.
pub struct EmbeddingsStep<'a> {
    pub request: &'a Value,
}

impl VendorStep for EmbeddingsStep<'_> {
    fn build(&self, deployment: &Deployment, _body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError> {
        if !deployment.accepts(Api::Embeddings) {
            return Err(ApiError::invalid_request(
                codes::UNSUPPORTED_ENDPOINT,
                "This model's deployment does not accept embeddings.",
            ));
        }
        providers::build_embeddings(deployment, self.request, credential)
    }

    fn translate(&self, deployment: &Deployment, body: Vec<u8>, _now_ms: u64) -> Result<Answer, UpstreamError> {
        let (body, usage) = providers::translate_embeddings_response(deployment, body)?;
        Ok(Answer { body, usage })
    }

    fn stream(&self, deployment: &Deployment, now_ms: u64) -> Box<dyn ClientStream> {
        // Embeddings never stream; a translator that passes nothing through keeps the contract.
        Box::new(StreamTranslator::new(deployment, false, now_ms / 1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requires_model_and_input() {
        assert_eq!(parse(br#"{"input":"x"}"#).unwrap_err().param.as_deref(), Some("model"));
        assert_eq!(parse(br#"{"model":"e"}"#).unwrap_err().param.as_deref(), Some("input"));
        assert_eq!(parse(br#"{"model":"e","input":[]}"#).unwrap_err().param.as_deref(), Some("input"));
        assert_eq!(parse(br#"{"model":"e","input":5}"#).unwrap_err().code, "invalid_type");
        assert_eq!(parse(b"nope").unwrap_err().code, "invalid_json");
        let (_, model, chars) = parse(r#"{"model":"e","input":"héllo","dimensions":8}"#.as_bytes()).unwrap();
        assert_eq!((model.as_str(), chars), ("e", 5));
    }
}
