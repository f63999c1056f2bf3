//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages door (what
//! Claude Code and the `anthropic` SDKs speak). Any query string (`?beta=true`) is accepted; the
//! key comes from `x-api-key` or `Authorization: Bearer`; every error is in Anthropic's format.
//!
//! To an Anthropic deployment the body passes through with only the model name spliced
//! (`providers::passthrough`); to an OpenAI-format deployment it is translated both ways
//! (`providers::messages_openai`). Limits, budgets, fallback, the decision log and the usage
//! event (ingress `messages`) come from the pipeline.

use super::messages_body::MessagesBody;
use crate::auth;
use crate::auth::context::RequestContext;
use crate::cache;
use crate::cache::store::CacheUse;
use crate::cache::AnswerFormat;
use crate::config::routes::{Deployment, ProviderKind};
use crate::endpoints::route;
use crate::http;
use crate::http::anthropic_error;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::incoming::Incoming;
use crate::http::reply::Reply;
use crate::idempotency;
use crate::idempotency::gate::Entry;
use crate::pipeline::gate::Needs;
use crate::pipeline::run::{self, Trip};
use crate::pipeline::step::{Answer, ClientStream, VendorStep};
use crate::providers::messages_openai::{self, OpenaiStreamToMessages};
use crate::providers::passthrough::{self, ClientHeaders, MessagesCall, PassthroughStream};
use crate::providers::splice::Span;
use crate::providers::{StreamEnd, UpstreamCall, UpstreamError};
use crate::usage::estimate;
use crate::usage::output_history;
use crate::usage::record::{Ingress, RequestOutcome, RequestShape};
use serde_json::Value;
use std::cell::OnceCell;
use worker::{Context, Env};

/// Serves either Messages URL; every failure is answered in Anthropic's error format.
pub async fn serve(
    req: Incoming,
    call: MessagesCall,
    env: &Env,
    ctx: &Context,
    request_id: &str,
    started_ms: u64,
) -> Reply {
    let result = match auth::authenticate(&req, env, request_id, started_ms).await {
        Ok(rc) => match http::io::read_body(&req).await {
            Ok(body) => dispatch(&req, rc, body, call, env, ctx).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    // The caller adds `x-request-id` as it hands the response to the runtime.
    result.unwrap_or_else(|err| anthropic_error::error_response(&err, Some(request_id)))
}

async fn dispatch(
    req: &Incoming,
    rc: RequestContext,
    body: Vec<u8>,
    call: MessagesCall,
    env: &Env,
    ctx: &Context,
) -> Result<Reply, ApiError> {
    let header = |name: &str| rc.headers.get_owned(name);
    let query = req.query.clone();
    let client = ClientHeaders { version: header("anthropic-version"), beta: header("anthropic-beta"), query };
    let session = header("x-claude-code-session-id");
    if call == MessagesCall::CountTokens {
        return handle(rc, body, call, client, session, env, ctx).await;
    }
    match idempotency::gate::enter(&rc, env, &body).await? {
        Entry::Open => handle(rc, body, call, client, session, env, ctx).await,
        Entry::Replay(response) => Ok(response),
        Entry::Proceed(claim) => {
            let request_id = rc.request_id.clone();
            let answer = handle(rc, body, call, client, session, env, ctx).await;
            claim.finish(answer, |e| anthropic_error::error_response(e, Some(&request_id))).await
        }
    }
}

async fn handle(
    mut rc: RequestContext,
    body: Vec<u8>,
    call: MessagesCall,
    client: ClientHeaders,
    session_header: Option<String>,
    env: &Env,
    ctx: &Context,
) -> Result<Reply, ApiError> {
    let request = MessagesRequest::parse(&body, call)?;
    let table = route::table(env, &rc).await?;
    let logical = match rc.task.clone() {
        Some(task) => task,
        None => table.resolve(&request.model).map(str::to_string).ok_or_else(|| not_found(&request.model))?,
    };
    let model = route::model(&table, &rc, &logical)?;
    // Prompt-cache affinity: one agent session keeps hitting the deployment that cached its prefix.
    if rc.session_id.is_none() {
        rc.session_id = session_header.or_else(|| request.session.clone());
    }
    let chain = table.chain(&logical, rc.random, rc.session_id.as_deref()).unwrap_or_default();
    // Agents ask for 32k output on every call: reserve what these deployments have lately returned.
    let expected = request.max_output.map(|max| output_history::estimate(&chain, Ingress::Messages, max));
    let shape =
        RequestShape { text_chars: request.text_chars, messages: request.messages, max_output: expected, choices: 1 };
    if call == MessagesCall::CountTokens && !chain.iter().any(|(_, d)| d.provider == ProviderKind::Anthropic) {
        // No vendor to ask: the gateway's own estimate, the same one its limiter reserves.
        let tokens = estimate::estimate(shape.text_chars, shape.messages, Some(0), None).input;
        return Ok(Reply::json(200, format!("{{\"input_tokens\":{tokens}}}").into_bytes()));
    }
    let cache = (call == MessagesCall::Create).then(|| {
        if !model.cache.enabled {
            return CacheUse::disabled();
        }
        let deployments: Vec<&str> = chain.iter().map(|(id, _)| *id).collect();
        let route = cache_route(&logical, &deployments, &client);
        CacheUse::decide_message(&model.cache, request.value(&body), &rc, &route)
    });
    if let Some(hit) = match &cache {
        Some(c) => c.lookup(env, rc.started_ms).await,
        None => None,
    } {
        let outcome = outcome_of(&rc, &logical, &request, shape);
        let replay = |body: &str| cache::message::replay_as_sse(body).map(String::into_bytes);
        return route::serve_cached(hit, outcome, request.stream, replay, ctx, env);
    }
    let trip = Trip {
        rc: &rc,
        logical_model: &logical,
        model,
        chain,
        body: &body,
        stream: request.stream,
        shape,
        needs: request.needs,
        outcome: outcome_of(&rc, &logical, &request, shape),
        cache: cache.as_ref(),
        unserved: "No deployment of this model can serve this request.",
    };
    let step = MessagesStep { call, client, request: &request };
    run::run(trip, &step, env, ctx).await
}

fn outcome_of(rc: &RequestContext, logical: &str, request: &MessagesRequest, shape: RequestShape) -> RequestOutcome {
    let mut outcome = RequestOutcome::new(rc, logical, request.stream);
    outcome.ingress = Ingress::Messages;
    outcome.shape = Some(shape);
    outcome.end_user = request.user_id.clone();
    outcome
}

/// What selects a Messages answer besides the body: the route, the door (a body can be valid at
/// both doors, the answers are not) and the `anthropic-beta` / `anthropic-version` sent.
fn cache_route(logical: &str, deployments: &[&str], client: &ClientHeaders) -> String {
    let scope = cache::key::route_scope(logical, deployments);
    let (beta, version) = (client.beta.as_deref().unwrap_or(""), client.version.as_deref().unwrap_or(""));
    format!("messages\0{scope}\0{beta}\0{version}")
}

fn not_found(model: &str) -> ApiError {
    ApiError::new(404, "invalid_request_error", codes::MODEL_NOT_FOUND, format!("model: {model}")).with_param("model")
}

/// What the door reads from a Messages body; the body itself is kept as bytes, and made a `Value`
/// only where one is needed (the cache's key, a translation to another vendor's format).
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    pub model: String,
    pub stream: bool,
    pub max_output: Option<u64>,
    pub text_chars: usize,
    pub messages: usize,
    pub needs: Needs,
    /// The session in `metadata.user_id` (Claude Code puts a JSON string with `session_id` there).
    pub session: Option<String>,
    /// `metadata.user_id` as sent: Anthropic's end-user id, the usage event's `end_user`.
    pub user_id: Option<String>,
    /// Where the walk found the values the splice replaces.
    pub spans: Option<Vec<Span>>,
    value: OnceCell<Value>,
}

impl MessagesRequest {
    pub fn parse(body: &[u8], call: MessagesCall) -> Result<MessagesRequest, ApiError> {
        let facts = MessagesBody::parse(body).map_err(|e| {
            ApiError::invalid_request(codes::INVALID_JSON, format!("The request body is not valid JSON: {e}"))
        })?;
        if !facts.object {
            return Err(ApiError::invalid_request(codes::INVALID_TYPE, "The request body must be a JSON object."));
        }
        let model = match &facts.model {
            Some(m) if !m.is_empty() => m.clone(),
            _ => return Err(required("model", "a non-empty string")),
        };
        let Some(messages) = facts.messages else {
            return Err(required("messages", "an array"));
        };
        let max_output = match (call, facts.max_tokens) {
            (MessagesCall::CountTokens, _) => Some(0),
            (MessagesCall::Create, Some(v)) => Some(v.ok_or_else(|| required("max_tokens", "an integer"))?),
            (MessagesCall::Create, None) => return Err(required("max_tokens", "an integer")),
        };
        let stream = call == MessagesCall::Create && facts.stream.unwrap_or(false);
        let needs = Needs { tools: facts.has_tools(), json_mode: false, vision: facts.has_image(), context_tokens: 0 };
        let session = facts.user_id.as_deref().and_then(session_of_user_id);
        Ok(MessagesRequest {
            model,
            stream,
            max_output,
            text_chars: facts.text_chars(),
            messages: messages.len.unwrap_or(0),
            needs,
            session,
            user_id: facts.user_id.filter(|u| !u.is_empty()),
            spans: facts.spans,
            value: OnceCell::new(),
        })
    }

    /// The body as a `Value`, parsed on first use; `body` is the one `parse` read (the door hands the
    /// same bytes to the pipeline), so it is a JSON object and `Null` is never what comes back.
    pub fn value(&self, body: &[u8]) -> &Value {
        self.value.get_or_init(|| serde_json::from_slice(body).unwrap_or(Value::Null))
    }
}

fn required(field: &str, kind: &str) -> ApiError {
    ApiError::invalid_request(codes::INVALID_REQUEST, format!("{field}: Field required (must be {kind})"))
        .with_param(field)
}

/// Claude Code's `metadata.user_id` is a JSON string holding `session_id`; anything else is used
/// whole as the session.
fn session_of_user_id(user_id: &str) -> Option<String> {
    if user_id.is_empty() {
        return None;
    }
    match serde_json::from_str::<Value>(user_id) {
        Ok(v) => v.get("session_id").and_then(Value::as_str).map(str::to_string),
        Err(_) => Some(user_id.to_string()),
    }
}

/// The Messages door's per-vendor work.
pub struct MessagesStep<'a> {
    pub call: MessagesCall,
    pub client: ClientHeaders,
    pub request: &'a MessagesRequest,
}

impl VendorStep for MessagesStep<'_> {
    fn build(&self, deployment: &Deployment, body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError> {
        match (deployment.provider, self.call) {
            (ProviderKind::Anthropic, call) => {
                passthrough::build(deployment, body, self.request.spans.as_deref(), credential, &self.client, call)
            }
            (ProviderKind::Openai, MessagesCall::Create) => {
                messages_openai::build(deployment, self.request.value(body), credential)
            }
            (ProviderKind::Openai, MessagesCall::CountTokens) => Err(ApiError::invalid_request(
                codes::UNSUPPORTED_ENDPOINT,
                "count_tokens needs an Anthropic deployment.",
            )),
        }
    }

    fn translate(&self, deployment: &Deployment, body: Vec<u8>, _now_ms: u64) -> Result<Answer, UpstreamError> {
        match (deployment.provider, self.call) {
            (ProviderKind::Anthropic, MessagesCall::Create) => {
                let (body, usage) = passthrough::read_answer(body)?;
                Ok(Answer { body, usage })
            }
            // A token count costs nothing: zero usage, so nothing is billed or estimated.
            (_, MessagesCall::CountTokens) => {
                let (body, _) = passthrough::read_answer(body)?;
                Ok(Answer { body, usage: Some(Default::default()) })
            }
            (ProviderKind::Openai, MessagesCall::Create) => {
                let (body, usage) = messages_openai::translate_response(&body, &deployment.model)?;
                Ok(Answer { body: body.into_bytes(), usage })
            }
        }
    }

    fn cache_format(&self) -> Option<AnswerFormat> {
        (self.call == MessagesCall::Create).then_some(AnswerFormat::Message)
    }

    fn stream(&self, deployment: &Deployment, _now_ms: u64) -> Box<dyn ClientStream> {
        match deployment.provider {
            ProviderKind::Anthropic => Box::new(PassthroughStream::new()),
            ProviderKind::Openai => Box::new(OpenaiStreamToMessages::new(&deployment.model)),
        }
    }
}

impl ClientStream for PassthroughStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        PassthroughStream::feed(self, chunk, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        PassthroughStream::finish(self, out)
    }

    fn usage(&self) -> Option<crate::canonical::usage::Usage> {
        PassthroughStream::usage(self)
    }

    fn usage_estimated(&self) -> bool {
        PassthroughStream::usage_estimated(self)
    }

    fn emitted_any(&self) -> bool {
        PassthroughStream::emitted_any(self)
    }

    fn error_event(&self, err: &ApiError) -> Vec<u8> {
        PassthroughStream::error_event(self, err)
    }

    fn ended(&self) -> bool {
        PassthroughStream::ended(self)
    }
}

impl ClientStream for OpenaiStreamToMessages {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        OpenaiStreamToMessages::feed(self, chunk, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        OpenaiStreamToMessages::finish(self, out)
    }

    fn usage(&self) -> Option<crate::canonical::usage::Usage> {
        OpenaiStreamToMessages::usage(self)
    }

    fn emitted_any(&self) -> bool {
        OpenaiStreamToMessages::emitted_any(self)
    }

    fn thinking(&self) -> bool {
        OpenaiStreamToMessages::thinking(self)
    }

    fn error_event(&self, err: &ApiError) -> Vec<u8> {
        anthropic_error::stream_error_event(err)
    }

    fn ended(&self) -> bool {
        OpenaiStreamToMessages::ended(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_what_the_pipeline_needs() {
        let body = br#"{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,
            "system":[{"type":"text","text":"abcd"}],
            "messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"hi"}]}],
            "tools":[{"name":"Read","input_schema":{"type":"object"}}],
            "metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s-1\"}"}}"#;
        let r = MessagesRequest::parse(body, MessagesCall::Create).unwrap();
        assert_eq!(r.model, "claude-sonnet-4-5");
        assert!(r.stream && r.needs.tools && r.needs.vision);
        assert_eq!(r.max_output, Some(32000));
        assert_eq!(r.session.as_deref(), Some("s-1"));
        assert_eq!(r.user_id.as_deref(), Some(r#"{"device_id":"d","session_id":"s-1"}"#));
        assert_eq!(r.messages, 1);
        // image bytes are not text
        assert_eq!(
            r.text_chars,
            "abcd".len()
                + "text".len()
                + "user".len()
                + "image".len()
                + "base64".len()
                + "image/png".len()
                + "text".len()
                + "hi".len()
                + "Read".len()
                + "object".len()
        );
        let count =
            MessagesRequest::parse(br#"{"model":"m","messages":[],"stream":true}"#, MessagesCall::CountTokens).unwrap();
        assert!(!count.stream);
        assert_eq!(count.max_output, Some(0));
    }

    #[test]
    fn parse_refuses_with_anthropic_style_messages() {
        for (body, param) in [
            (&br#"{"messages":[],"max_tokens":1}"#[..], "model"),
            (br#"{"model":"m","max_tokens":1}"#, "messages"),
            (br#"{"model":"m","messages":[]}"#, "max_tokens"),
            (br#"{"model":"m","messages":[],"max_tokens":-1}"#, "max_tokens"),
        ] {
            let err = MessagesRequest::parse(body, MessagesCall::Create).unwrap_err();
            assert_eq!((err.status, err.param.as_deref()), (400, Some(param)));
        }
        assert_eq!(MessagesRequest::parse(b"[1]", MessagesCall::Create).unwrap_err().code, codes::INVALID_TYPE);
        assert_eq!(MessagesRequest::parse(b"{", MessagesCall::Create).unwrap_err().code, codes::INVALID_JSON);
    }

    #[test]
    fn session_from_user_id() {
        assert_eq!(session_of_user_id(r#"{"session_id":"abc"}"#).as_deref(), Some("abc"));
        assert_eq!(session_of_user_id("user-42").as_deref(), Some("user-42"));
        assert_eq!(session_of_user_id(r#"{"device_id":"d"}"#), None);
        assert_eq!(session_of_user_id(""), None);
    }
}
