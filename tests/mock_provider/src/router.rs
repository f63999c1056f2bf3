//! Dispatch: admin API under /_mock, vendor endpoints under /v1.

use crate::counters::State;
use crate::http::Request;
use crate::http::{Body, Response};
use crate::vendor::{self, Api, Call};
use crate::{admin, anthropic, embeddings, models, openai, responses};
use serde_json::Value;

pub fn route(state: &State, req: &Request) -> Response {
    if req.path == "/_mock" || req.path.starts_with("/_mock/") {
        return admin::handle(state, req);
    }
    if !req.path.starts_with("/v1/") {
        // Recorded too, so a client's probes outside the API (an agent's update or OAuth checks) show up.
        state.arrive(req, None);
        return openai::not_found(req);
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let model = body.get("model").and_then(Value::as_str);
    let arrival = state.arrive(req, model);
    let mut call = Call::new(req, body, arrival.number, arrival.scripted);
    call.prompt_cache = Some(&state.prompt_cache);
    let mut response = vendor_response(req, &call);
    if matches!(response.body, Body::Sse(_)) && response.timing.delay_ms == 0 {
        response.timing.delay_ms = state.stream_pace_ms;
    }
    response
}

fn vendor_response(req: &Request, call: &Call) -> Response {
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/v1/chat/completions") => vendor::respond(Api::OpenAi, call, openai::chat),
        ("POST", "/v1/responses") => vendor::respond(Api::OpenAi, call, responses::create),
        ("POST", "/v1/responses/input_tokens") => vendor::respond(Api::OpenAi, call, responses::input_tokens),
        ("POST", "/v1/embeddings") => vendor::respond(Api::OpenAi, call, embeddings::create),
        ("POST", "/v1/messages") => vendor::respond(Api::Anthropic, call, anthropic::messages),
        ("POST", "/v1/messages/count_tokens") => vendor::respond(Api::Anthropic, call, anthropic::count_tokens),
        ("GET", "/v1/models") => vendor::respond(models::api_for(req), call, models::list),
        ("GET", p) if p.len() > "/v1/models/".len() && p.starts_with("/v1/models/") => {
            vendor::respond(models::api_for(req), call, models::get)
        }
        _ => openai::not_found(req),
    }
}

/// 413 in the format of the vendor the path belongs to.
pub fn too_large(path: &str) -> Response {
    let message = "Request exceeds the maximum allowed number of bytes.";
    if path.starts_with("/v1/messages") {
        anthropic::error(413, "request_too_large", message, &crate::reply::id("req_"))
    } else {
        openai::error(413, message, "invalid_request_error", None, None)
    }
}
