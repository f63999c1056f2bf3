//! `POST /v1/responses`: the OpenAI Responses API door (Codex, the Agents SDK). Deployments that
//! declare `"apis": ["responses"]` get the client's body with only the model spliced and their
//! events relayed unchanged; the others get it translated to chat completions (and, through the
//! chat adapters, to Anthropic), answered back as a response object or Responses events. The
//! gateway stores nothing: `previous_response_id` and `conversation` are refused (docs/responses.md).

use crate::auth::context::RequestContext;
use crate::canonical::usage::Usage;
use crate::canonical::ChatRequest;
use crate::config::routes::{Api, Deployment, RouteTable};
use crate::endpoints::responses_body::ResponsesBody;
use crate::endpoints::route;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use crate::pipeline::gate::Needs;
use crate::pipeline::run::{self, Trip};
use crate::pipeline::step::{Answer, ClientStream, VendorStep};
use crate::providers::responses::facts::{Field, RequestFields};
use crate::providers::responses::stream::{FromChat, PassThrough};
use crate::providers::responses::{self, answer, request};
use crate::providers::splice::{self, Span};
use crate::providers::{self, StreamEnd, StreamTranslator, UpstreamCall, UpstreamError};
use crate::usage::record::{Ingress, RequestOutcome, RequestShape};
use serde_json::{Map, Value};
use std::cell::OnceCell;
use worker::{Context, Env};

/// The header naming what a translated request left out (tools, reasoning items).
pub const WARNING_HEADER: &str = "x-gateway-warning";

/// `GET /v1/responses/{id}`: nothing is stored to retrieve.
pub fn not_stored() -> ApiError {
    ApiError::invalid_request(
        codes::UNSUPPORTED_ENDPOINT,
        "This gateway does not store responses, so they cannot be retrieved. Send the whole conversation \
         in 'input' on every request (with \"store\": false).",
    )
}

/// A Responses request checked for what every deployment needs: a JSON object with a model and input.
pub fn parse(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid_request(codes::INVALID_JSON, format!("The request body is not valid JSON: {e}"))
    })?;
    let Value::Object(req) = value else {
        return Err(ApiError::invalid_request(codes::INVALID_TYPE, "The request body must be a JSON object."));
    };
    match req.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
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
    }
    for param in ["previous_response_id", "conversation"] {
        if req.get(param).is_some_and(|v| !v.is_null()) {
            return Err(request::stateless_only(param));
        }
    }
    if req.get("input").is_none_or(Value::is_null) {
        return Err(ApiError::invalid_request(
            codes::MISSING_REQUIRED_PARAMETER,
            "Missing required parameter: 'input'.",
        )
        .with_param("input"));
    }
    Ok(req)
}

pub async fn create(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Reply, ApiError> {
    // One walk over the bytes reads a plain request; the rest (a refusal, a part only the chat form
    // can judge) is parsed into a `Value` and judged by the form, as before. A request whose model
    // has no deployment that speaks the Responses API needs the form anyway: it is not walked first.
    let table = route::table(env, &rc).await;
    let walk = table.as_ref().map_or(true, |t| may_pass_through(t, &rc, &body));
    let walked = if walk { ResponsesBody::parse(&body).ok() } else { None };
    let plain = walked.as_ref().and_then(|w| Some((&w.fields, w.fields.facts()?)));
    let form = match plain {
        Some(_) => ChatForm::new(&body),
        None => ChatForm::parsed(&body, parse(&body)?),
    };
    let read = match &plain {
        Some((fields, _)) => Read::of_fields(fields),
        None => Read::of_value(form.req()),
    };
    let logical = rc.task.clone().unwrap_or_else(|| read.model.to_string());
    let table = table?;
    let model = route::model(&table, &rc, &logical)?;
    // Codex's `prompt_cache_key` is its session id: the session keeps one deployment while healthy.
    let session = rc.session_id.as_deref().or(read.session);
    let chain = table.chain(&logical, rc.random, session).unwrap_or_default();
    let mut outcome = RequestOutcome::new(&rc, &logical, read.stream);
    outcome.ingress = Ingress::Responses;
    // Tags come from the Responses request's own `metadata`.
    let (shape, needs) = match &plain {
        Some((_, f)) => {
            let shape =
                RequestShape { text_chars: f.text_chars, messages: f.messages, max_output: f.max_output, choices: 1 };
            let needs = Needs { tools: f.tools, json_mode: f.json_mode, vision: f.vision, context_tokens: 0 };
            (outcome.describe_as(read.metadata, f.user.as_deref(), shape), needs)
        }
        // Only the form can tell, or it refuses the request (its error waits until a chat deployment is tried).
        None => match form.chat() {
            Ok(chat) => {
                (outcome.describe_as(read.metadata, chat.user.as_deref(), RequestShape::of(chat)), Needs::of(chat))
            }
            Err(_) => {
                let max_output = form.req().get("max_output_tokens").and_then(Value::as_u64);
                let shape = RequestShape { text_chars: body.len(), messages: 1, max_output, choices: 1 };
                outcome.shape = Some(shape);
                (shape, Needs::default())
            }
        },
    };
    let trip = Trip {
        rc: &rc,
        logical_model: &logical,
        model,
        chain,
        body: &body,
        stream: read.stream,
        shape,
        needs,
        outcome,
        cache: None,
        unserved: "No deployment of this model can serve this request.",
    };
    let spans = plain.and_then(|_| walked.as_ref()?.spans.as_deref());
    let step = ResponsesStep { form: &form, template: OnceCell::new(), spans };
    let mut response = run::run(trip, &step, env, ctx).await?;
    let served = response.sent_header("x-gateway-deployment");
    let translated = served.and_then(|id| table.deployments.get(id)).is_some_and(|d| !d.accepts(Api::Responses));
    // A translated request built its form, which knows what it left out.
    if let (Some(warning), true) = (form.warning(), translated) {
        response.set_header(WARNING_HEADER, warning);
    }
    Ok(response)
}

/// Whether a deployment of the model the request names may take its body as it is; true when unsure
/// (the walk's read is then the one that counts).
fn may_pass_through(table: &RouteTable, rc: &RequestContext, body: &[u8]) -> bool {
    let named = if rc.task.is_none() { splice::leading_model(body) } else { None };
    let Some(model) = rc.task.as_deref().or(named.as_deref()).and_then(|m| table.models.get(m)) else {
        return true;
    };
    model.chain.iter().any(|e| table.deployments.get(e.deployment()).is_none_or(|d| d.accepts(Api::Responses)))
}

/// What the door reads of a request, from the walk or from its `Value`.
struct Read<'a> {
    model: &'a str,
    stream: bool,
    session: Option<&'a str>,
    metadata: Option<&'a Map<String, Value>>,
}

impl<'a> Read<'a> {
    fn of_fields(f: &'a RequestFields) -> Self {
        Read {
            model: f.model.as_str().map_or("", String::as_str),
            stream: f.stream == Field::Bool(true),
            session: f.prompt_cache_key.as_str().map(String::as_str),
            metadata: f.metadata.as_ref().and_then(Value::as_object),
        }
    }

    fn of_value(req: &'a Map<String, Value>) -> Self {
        Read {
            model: req.get("model").and_then(Value::as_str).unwrap_or_default(),
            stream: req.get("stream") == Some(&Value::Bool(true)),
            session: req.get("prompt_cache_key").and_then(Value::as_str),
            metadata: req.get("metadata").and_then(Value::as_object),
        }
    }
}

/// The request as a `Value` and its chat form, each built the first time it is asked for: a
/// plain request to a deployment that speaks the Responses API needs neither.
/// perf: an agent's body is tens of kB, its form as many of copied strings.
pub struct ChatForm<'a> {
    body: &'a [u8],
    req: OnceCell<Map<String, Value>>,
    built: OnceCell<(Result<ChatRequest, ApiError>, Option<String>)>,
}

impl<'a> ChatForm<'a> {
    /// A body the walk read as plain, so that [`parse`] accepts it.
    pub fn new(body: &'a [u8]) -> Self {
        ChatForm { body, req: OnceCell::new(), built: OnceCell::new() }
    }

    pub fn parsed(body: &'a [u8], req: Map<String, Value>) -> Self {
        ChatForm { body, req: OnceCell::from(req), built: OnceCell::new() }
    }

    /// The request as a `Value`. A body the walk read as plain parses: the same parser read the
    /// same bytes, and `facts` holds every check of `parse`.
    pub fn req(&self) -> &Map<String, Value> {
        self.req.get_or_init(|| parse(self.body).unwrap_or_default())
    }

    /// The form, or why the request cannot be sent as chat completions.
    pub fn chat(&self) -> Result<&ChatRequest, &ApiError> {
        self.built().0.as_ref()
    }

    /// What the form left out, once it is built.
    pub fn warning(&self) -> Option<&str> {
        self.built.get().and_then(|(_, warning)| warning.as_deref())
    }

    fn built(&self) -> &(Result<ChatRequest, ApiError>, Option<String>) {
        self.built.get_or_init(|| match request::to_chat(self.req()) {
            // The plan's chat form is moved into the typed request, not copied.
            Ok(plan) => {
                let warning = plan.warning();
                (ChatRequest::from_json(plan.chat), warning)
            }
            Err(e) => (Err(e), None),
        })
    }
}

/// `POST /v1/responses/input_tokens`: counted by the first deployment that speaks the Responses
/// API (the request is not translated; counting is not billed, so its usage event has 0 tokens).
pub async fn input_tokens(rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Reply, ApiError> {
    let req = parse(&body)?;
    let requested = req.get("model").and_then(Value::as_str).unwrap_or_default().to_string();
    let logical = rc.task.clone().unwrap_or(requested);
    let table = route::table(env, &rc).await?;
    let model = route::model(&table, &rc, &logical)?;
    let chain = table.chain(&logical, rc.random, rc.session_id.as_deref()).unwrap_or_default();
    let mut outcome = RequestOutcome::new(&rc, &logical, false);
    outcome.ingress = Ingress::Responses;
    let shape = RequestShape { text_chars: body.len(), messages: 1, max_output: Some(0), choices: 1 };
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
        unserved: "No deployment of this model can count input tokens.",
    };
    run::run(trip, &InputTokensStep, env, ctx).await
}

/// Counting: only deployments that declare the Responses API.
pub struct InputTokensStep;

impl VendorStep for InputTokensStep {
    fn build(&self, deployment: &Deployment, body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError> {
        if !deployment.accepts(Api::Responses) {
            return Err(ApiError::invalid_request(
                codes::UNSUPPORTED_ENDPOINT,
                "Counting input tokens needs a deployment that declares the Responses API (\"apis\": [\"responses\"]); this model has none.",
            ));
        }
        responses::build_input_tokens(deployment, body, credential)
    }

    fn translate(&self, _deployment: &Deployment, body: Vec<u8>, _now_ms: u64) -> Result<Answer, UpstreamError> {
        let body = responses::translate_input_tokens(body)?;
        Ok(Answer { body, usage: Some(Usage::default()) })
    }

    fn stream(&self, _deployment: &Deployment, _now_ms: u64) -> Box<dyn ClientStream> {
        Box::new(ResponsesStream::Pass(PassThrough::new()))
    }
}

/// Pass-through to Responses deployments, translation through chat completions to the others.
pub struct ResponsesStep<'a> {
    pub form: &'a ChatForm<'a>,
    /// The response object a translated answer is written into, made when first needed.
    pub template: OnceCell<Value>,
    /// Where the walk found the values the splice replaces (none when the body was not walked).
    pub spans: Option<&'a [Span]>,
}

impl ResponsesStep<'_> {
    fn template(&self) -> &Value {
        self.template.get_or_init(|| answer::template(self.form.req()))
    }
}

impl VendorStep for ResponsesStep<'_> {
    fn build(&self, deployment: &Deployment, body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError> {
        if deployment.accepts(Api::Responses) {
            return responses::build_passthrough(deployment, body, self.spans, credential);
        }
        if !deployment.accepts(Api::Chat) {
            return Err(ApiError::invalid_request(
                codes::UNSUPPORTED_ENDPOINT,
                "This model's deployment accepts neither the Responses API nor chat completions.",
            ));
        }
        let chat = self.form.chat().map_err(Clone::clone)?;
        providers::build_chat(deployment, chat, credential, deployment.quirks.stream_options)
    }

    fn translate(&self, deployment: &Deployment, body: Vec<u8>, now_ms: u64) -> Result<Answer, UpstreamError> {
        if deployment.accepts(Api::Responses) {
            let (body, usage) = responses::translate_passthrough(body)?;
            return Ok(Answer { body, usage });
        }
        let completion = providers::translate_chat_response(deployment, body, now_ms / 1000)?;
        let body = answer::from_chat(self.template(), &completion.body, completion.usage.as_ref(), now_ms / 1000)?;
        Ok(Answer { body: body.into_bytes(), usage: completion.usage })
    }

    fn stream(&self, deployment: &Deployment, now_ms: u64) -> Box<dyn ClientStream> {
        if deployment.accepts(Api::Responses) {
            return Box::new(ResponsesStream::Pass(PassThrough::new()));
        }
        let chat = StreamTranslator::new(deployment, true, now_ms / 1000);
        Box::new(ResponsesStream::Chat(Box::new(FromChat::new(chat, self.template().clone(), now_ms / 1000))))
    }
}

/// The client's Responses event stream, relayed or written from chat chunks.
pub enum ResponsesStream {
    Pass(PassThrough),
    Chat(Box<FromChat>),
}

impl ClientStream for ResponsesStream {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        match self {
            ResponsesStream::Pass(s) => s.feed(chunk, out),
            ResponsesStream::Chat(s) => s.feed(chunk, out),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        match self {
            ResponsesStream::Pass(s) => s.finish(out),
            ResponsesStream::Chat(s) => s.finish(out),
        }
    }

    fn usage(&self) -> Option<Usage> {
        match self {
            ResponsesStream::Pass(s) => s.usage(),
            ResponsesStream::Chat(s) => s.usage(),
        }
    }

    fn usage_estimated(&self) -> bool {
        match self {
            ResponsesStream::Pass(_) => false,
            ResponsesStream::Chat(s) => s.usage_estimated(),
        }
    }

    fn emitted_any(&self) -> bool {
        match self {
            ResponsesStream::Pass(s) => s.emitted_any(),
            ResponsesStream::Chat(s) => s.emitted_any(),
        }
    }

    fn thinking(&self) -> bool {
        match self {
            ResponsesStream::Pass(_) => false,
            ResponsesStream::Chat(s) => s.thinking(),
        }
    }

    fn ended(&self) -> bool {
        match self {
            ResponsesStream::Pass(s) => s.ended(),
            ResponsesStream::Chat(s) => s.ended(),
        }
    }

    fn error_event(&self, err: &ApiError) -> Vec<u8> {
        match self {
            ResponsesStream::Pass(s) => s.error_event(err),
            ResponsesStream::Chat(s) => s.error_event(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_requires_model_and_input_and_refuses_stored_state() {
        assert_eq!(parse(br#"{"input":"x"}"#).unwrap_err().param.as_deref(), Some("model"));
        assert_eq!(parse(br#"{"model":"m"}"#).unwrap_err().param.as_deref(), Some("input"));
        assert_eq!(parse(b"[1]").unwrap_err().code, "invalid_type");
        assert_eq!(parse(b"{").unwrap_err().code, "invalid_json");
        let stored = parse(br#"{"model":"m","input":"x","previous_response_id":"resp_1"}"#).unwrap_err();
        assert_eq!((stored.status, stored.param.as_deref()), (400, Some("previous_response_id")));
        assert!(stored.message.contains("\"store\": false"), "{}", stored.message);
        assert!(parse(br#"{"model":"m","input":"x","previous_response_id":null,"store":false}"#).is_ok());
    }
}
