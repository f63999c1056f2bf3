//! The OpenAI Responses API (`POST /v1/responses`) towards vendors: passed through to deployments
//! that declare `"apis": [..., "responses"]` (body with only the model spliced, and an output cap
//! above the deployment's `max_output`; events relayed, usage read from `response.completed` or
//! the JSON body), otherwise translated to chat
//! completions (`request`) and the answer written back as a response object or events
//! (`answer`, `stream`). Pure: no clocks, no I/O.

pub mod answer;
pub mod facts;
pub mod request;
pub mod stream;
mod view;

use super::splice::{splice_at, Ceiling, Span};
use super::{endpoint, headers, read_json, UpstreamCall, UpstreamError};
use crate::canonical::usage::Usage;
use crate::config::routes::Deployment;
use crate::http::error::ApiError;

/// The field a Responses deployment's `max_output` holds down.
pub const CEILING_FIELD: &str = "max_output_tokens";

/// The client's body to the vendor's `/responses`, unchanged but for the model name and a
/// `max_output_tokens` above the deployment's `max_output`; `spans` where the door's own parse
/// found them (else the body is scanned).
pub fn build_passthrough(
    dep: &Deployment,
    body: &[u8],
    spans: Option<&[Span]>,
    credential: &str,
) -> Result<UpstreamCall, ApiError> {
    let ceiling = Ceiling::max_output(dep, CEILING_FIELD);
    let body = splice_at(body, spans, &dep.model, ceiling)?;
    Ok(UpstreamCall { url: endpoint(&dep.base_url, "/responses"), headers: headers(dep, credential, &[]), body })
}

/// `POST /responses/input_tokens` with the client's body, the model spliced as for `/responses`.
pub fn build_input_tokens(dep: &Deployment, body: &[u8], credential: &str) -> Result<UpstreamCall, ApiError> {
    let mut call = build_passthrough(dep, body, None, credential)?;
    call.url = endpoint(&dep.base_url, "/responses/input_tokens");
    Ok(call)
}

/// A vendor's input-token count, passed through as is.
pub fn translate_input_tokens(body: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
    let value = read_json::<serde_json::Value>(&body)?;
    if value.get("input_tokens").and_then(|n| n.as_u64()).is_none() {
        return Err(UpstreamError::malformed(200, "the upstream answer carries no input_tokens count"));
    }
    Ok(body)
}

/// A vendor's Responses JSON body, passed through as is, with its usage.
pub fn translate_passthrough(body: Vec<u8>) -> Result<(Vec<u8>, Option<Usage>), UpstreamError> {
    let view = read_json::<view::AnswerView>(&body)?;
    if !view.is_response {
        return Err(UpstreamError::malformed(200, "the upstream answer is not a Responses API response object"));
    }
    let usage = answer::usage_of_counts(view.usage);
    Ok((body, usage))
}

#[cfg(test)]
mod tests;
