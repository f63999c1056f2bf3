//! `POST /v1/embeddings` for OpenAI-compatible deployments, through the same key, route and limiter path.

use crate::auth::context::RequestContext;
use crate::config;
use crate::http;
use crate::http::error::ApiError;
use crate::limits::admission::{self, Admit};
use crate::limits::budget;
use crate::pipeline::attempt::{
    credential, final_error, now_ms, refusal_error, set_remaining, settle_failure, signals_of, with_route_headers,
    Refusal,
};
use crate::pipeline::upstream;
use crate::providers::{self, UpstreamError};
use crate::usage::estimate;
use crate::usage::event::RequestShape;
use crate::usage::record::{Attempt, RequestOutcome};
use limiter::protocol::{TokenUsage, UpstreamSignals};
use serde_json::Value;
use worker::{Context, Env, Response};

/// Checks the fields every embeddings request needs; the rest passes through untouched.
pub fn parse(body: &[u8]) -> Result<(Value, String, usize), ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid_request("invalid_json", format!("The request body is not valid JSON: {e}")))?;
    let Some(obj) = value.as_object() else {
        return Err(ApiError::invalid_request("invalid_type", "The request body must be a JSON object."));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => {
            return Err(ApiError::invalid_request("invalid_type", "'model' must be a string.").with_param("model"))
        }
        None => {
            return Err(ApiError::invalid_request("missing_required_parameter", "Missing required parameter: 'model'.")
                .with_param("model"))
        }
    };
    let chars = match obj.get("input") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(items)) if !items.is_empty() => items.iter().map(|i| i.to_string().len()).sum(),
        Some(_) => {
            return Err(ApiError::invalid_request(
                "invalid_type",
                "'input' must be a non-empty string or array of strings or token arrays.",
            )
            .with_param("input"))
        }
        None => {
            return Err(ApiError::invalid_request("missing_required_parameter", "Missing required parameter: 'input'.")
                .with_param("input"))
        }
    };
    Ok((value, model, chars))
}

pub async fn create(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Response, ApiError> {
    let (request, model, chars) = parse(&body)?;
    let table = config::store::route_table(env, rc.started_ms).await?;
    let chain =
        table.chain(&model, rc.random, rc.session_id.as_deref()).ok_or_else(|| ApiError::model_not_found(&model))?;
    if !rc.key.allows_model(&model) {
        return Err(ApiError::new(
            403,
            "permission_error",
            "model_not_allowed",
            format!("This key may not use model '{model}'."),
        )
        .with_param("model"));
    }
    let mut outcome = RequestOutcome::new(&rc, &model, false);
    outcome.shape = Some(RequestShape { text_chars: chars, messages: 0, max_output: Some(0) });
    let deadline = rc.started_ms + budget::DEFAULT_DEADLINE_MS;
    let soft_budget = budget::admit(env, ctx, &rc, &mut outcome, &chain, deadline).await?;
    let estimate = estimate::estimate(chars, 0, Some(0), None);
    // Key, then tenant, before any deployment: released again if no deployment takes the request.
    let scopes = match admission::admit_scopes(env, ctx, &rc, estimate).await {
        Ok(scopes) => scopes,
        Err(refused) => {
            let api_error = refusal_error(&refused);
            outcome.fail(&api_error);
            outcome.finish(ctx, env);
            return Err(api_error);
        }
    };
    let mut last_error: Option<UpstreamError> = None;
    let mut refusal: Option<Refusal> = None;
    let mut unsupported: Option<ApiError> = None;
    for (n, (id, deployment)) in chain.into_iter().enumerate() {
        let Some(credential) = credential(env, &deployment.credential) else { continue };
        let call = match providers::build_embeddings(deployment, &request, &credential) {
            Ok(call) => call,
            // A chain may mix vendors: one without embeddings is skipped, not fatal.
            Err(e) if e.code == "unsupported_endpoint" => {
                unsupported = Some(e);
                continue;
            }
            Err(e) => {
                scopes.finish_failed(ctx, !outcome.attempts.is_empty(), last_error.as_ref()).await;
                return Err(e);
            }
        };
        let admission = match admission::admit(
            env,
            ctx,
            id,
            deployment,
            &rc.key.tenant,
            format!("{}:{n}", rc.request_id),
            estimate,
            rc.max_wait_ms,
        )
        .await
        {
            Admit::Admitted(a) => a,
            Admit::Refused { code, retry_after_ms } => {
                Refusal::keep_soonest(&mut refusal, id, code, retry_after_ms);
                continue;
            }
        };
        let remaining = (admission.remaining_requests, admission.remaining_tokens);
        let started = now_ms();
        let attempts = outcome.attempts.len() + 1;
        let result = match upstream::send(&call, deployment.timeouts.total_ms).await {
            Ok(mut up) => {
                let body = upstream::read_body(&mut up, deployment.timeouts.total_ms).await;
                let signals = signals_of(&up, None);
                match body {
                    Ok(b) if (200..300).contains(&up.status) => {
                        match providers::translate_embeddings_response(deployment, &b) {
                            Ok((text, usage)) => Ok((text, usage, signals)),
                            Err(err) => Err((err, None, signals)),
                        }
                    }
                    Ok(b) => {
                        let retry_after = upstream::header(&up, "retry-after");
                        let err = providers::classify(deployment.provider, up.status, retry_after.as_deref(), &b);
                        let signals = signals_of(&up, err.retry_after_ms);
                        Err((err, Some(TokenUsage::default()), signals))
                    }
                    Err(err) => Err((err, None, signals)),
                }
            }
            Err(err) => Err((err, None, UpstreamSignals::default())),
        };
        match result {
            Ok((text, usage, signals)) => {
                let settled = usage.as_ref().map(admission::token_usage);
                ctx.wait_until(admission.settle(admission::outcome_for(None, None), settled, signals));
                scopes.settle(ctx, settled);
                outcome.attempts.push(Attempt::succeeded(id, deployment, usage, started, now_ms(), None));
                outcome.finish(ctx, env);
                let mut response =
                    with_route_headers(http::io::json_response(200, text.into_bytes())?, &rc, id, deployment, attempts);
                set_remaining(&mut response, remaining);
                budget::mark(&mut response, soft_budget);
                return Ok(response);
            }
            Err((err, usage, signals)) => {
                settle_failure(admission, &err, usage, signals).await;
                outcome.attempts.push(Attempt::failed(id, deployment, &err, started));
                let may_fall_back = err.class.may_fall_back();
                last_error = Some(err);
                if !may_fall_back {
                    break;
                }
            }
        }
    }
    let nothing_tried = unsupported.unwrap_or_else(|| {
        ApiError::unavailable("no_deployment_available", "No deployment of this model can serve embeddings.")
    });
    scopes.finish_failed(ctx, !outcome.attempts.is_empty(), last_error.as_ref()).await;
    let api_error = final_error(last_error.as_ref(), refusal, nothing_tried);
    outcome.fail(&api_error);
    outcome.finish(ctx, env);
    Err(api_error)
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
