//! The fetch handler: routing, authentication, and the small endpoints.

use crate::auth;
use crate::auth::context::{new_request_id, RequestContext};
use crate::endpoints;
use crate::endpoints::admin;
use crate::endpoints::chat;
use crate::endpoints::embeddings;
use crate::endpoints::responses;
use crate::http;
use crate::http::error::ApiError;
use crate::http::incoming::Incoming;
use crate::http::outgoing;
use crate::http::reply::Reply;
use crate::idempotency;
use crate::idempotency::gate::Entry;
use crate::providers::passthrough::MessagesCall;
use crate::support::clock::now_ms;
use futures::FutureExt;
use std::future::Future;
use worker::{Context, Env, Method};

/// Each endpoint's future is boxed (`boxed_local`) so that its code stays a function of its own: V8
/// optimises what requests run, not every endpoint inlined into one handler (docs/benchmarks.md).
pub async fn handle(req: Incoming, env: Env, ctx: Context) -> worker::web_sys::Response {
    let request_id = new_request_id();
    let started_ms = now_ms();
    let path = req.path.clone();
    let method = req.method.clone();
    // The Messages door answers in Anthropic's format, errors included.
    let messages_call = match path.as_str() {
        "/v1/messages" => Some(MessagesCall::Create),
        "/v1/messages/count_tokens" => Some(MessagesCall::CountTokens),
        _ => None,
    };
    match (&method, messages_call) {
        (Method::Post, Some(call)) => {
            let response =
                endpoints::messages::serve(req, call, &env, &ctx, &request_id, started_ms).boxed_local().await;
            return outgoing::into_runtime(response, Some(&request_id));
        }
        (_, Some(_)) => {
            let err = ApiError::method_not_allowed(&format!("{method:?}").to_uppercase(), &path);
            return outgoing::into_runtime(http::anthropic_error::error_response(&err, Some(&request_id)), None);
        }
        // The Messages API's other paths (batches, files) are not served, in the SDK's own format.
        _ if path.starts_with("/v1/messages/") => {
            let err = ApiError::not_found(&path);
            return outgoing::into_runtime(http::anthropic_error::error_response(&err, Some(&request_id)), None);
        }
        _ => {}
    }
    let result = match (method.clone(), path.as_str()) {
        (Method::Get, "/admin/status") => admin::status(&req, &env, started_ms).boxed_local().await,
        (Method::Get, "/healthz") => endpoints::health::healthz(&env, started_ms).boxed_local().await,
        (Method::Get, "/v1/models") => match auth::authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => endpoints::models::list(&rc, &env).boxed_local().await,
            Err(e) => Err(e),
        },
        (Method::Post, "/v1/chat/completions") => {
            let chat = |rc, body| idempotent(rc, body, &env, &ctx, Door::Chat);
            with_body(&req, &env, &request_id, started_ms, chat).await
        }
        (Method::Post, "/v1/responses") => {
            let create = |rc, body| idempotent(rc, body, &env, &ctx, Door::Responses);
            with_body(&req, &env, &request_id, started_ms, create).await
        }
        (Method::Post, "/v1/responses/input_tokens") => {
            let count = |rc, body| responses::input_tokens(rc, body, &env, &ctx).boxed_local();
            with_body(&req, &env, &request_id, started_ms, count).await
        }
        (Method::Get, p) if p.starts_with("/v1/responses/") => Err(responses::not_stored()),
        (Method::Post, "/v1/embeddings") => {
            let embed = |rc, body| embeddings::create(rc, body, &env, &ctx).boxed_local();
            with_body(&req, &env, &request_id, started_ms, embed).await
        }
        (_, "/v1/models" | "/v1/chat/completions" | "/v1/embeddings" | "/v1/responses" | "/healthz") => {
            Err(ApiError::method_not_allowed(&format!("{method:?}").to_uppercase(), &path))
        }
        _ => Err(ApiError::not_found(&path)),
    };
    match result {
        Ok(response) => outgoing::into_runtime(response, Some(&request_id)),
        Err(err) => outgoing::into_runtime(http::io::error_response(&err, Some(&request_id)), None),
    }
}

/// An endpoint of the caller and the body: both are read here, and the first failure is the answer.
/// A single-caller endpoint comes boxed; `idempotent`, shared by two doors, stays a function anyway.
async fn with_body<F: Future<Output = Result<Reply, ApiError>>>(
    req: &Incoming,
    env: &Env,
    request_id: &str,
    started_ms: u64,
    endpoint: impl FnOnce(RequestContext, Vec<u8>) -> F,
) -> Result<Reply, ApiError> {
    let rc = auth::authenticate(req, env, request_id, started_ms).await?;
    let body = http::io::read_body(req).await?;
    endpoint(rc, body).await
}

/// The doors behind the `Idempotency-Key` gate.
#[derive(Clone, Copy)]
enum Door {
    Chat,
    Responses,
}

async fn door(door: Door, rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Reply, ApiError> {
    match door {
        Door::Chat => chat::completions(rc, body, env, ctx).boxed_local().await,
        Door::Responses => responses::create(rc, body, env, ctx).boxed_local().await,
    }
}

async fn idempotent(
    rc: RequestContext,
    body: Vec<u8>,
    env: &Env,
    ctx: &Context,
    which: Door,
) -> Result<Reply, ApiError> {
    match idempotency::gate::enter(&rc, env, &body).await? {
        Entry::Open => door(which, rc, body, env, ctx).await,
        Entry::Replay(response) => Ok(response),
        Entry::Proceed(claim) => {
            claim.finish(door(which, rc, body, env, ctx).await, |e| http::io::error_response(e, None)).await
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::auth::headers::{CACHE_TTL, MAX_WAIT_MS, TIMEOUT_MS};
    use crate::http::incoming::READ;
    use crate::providers::rate_headers;
    use std::path::Path;

    /// Header names read with a literal anywhere in `src`: `header("…")`, `headers.get("…")`,
    /// `headers.get_owned("…")` (a lower-case name of letters, digits and dashes).
    fn literal_header_reads(dir: &Path, found: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                literal_header_reads(&path, found);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for opener in ["header(\"", "headers.get(\"", "headers.get_owned(\""] {
                for (at, _) in text.match_indices(opener) {
                    let before = text[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                        continue;
                    }
                    let rest = &text[at + opener.len()..];
                    let name = &rest[..rest.find('"').unwrap_or(0)];
                    if !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    {
                        found.push((name.to_string(), path.display().to_string()));
                    }
                }
            }
        }
    }

    #[test]
    fn every_request_header_the_gateway_reads_is_fetched() {
        // The request's headers are fetched by name (`http::incoming::READ`): one read elsewhere
        // by a name not in that list would always see it absent.
        for name in [TIMEOUT_MS, MAX_WAIT_MS, CACHE_TTL, crate::idempotency::HEADER] {
            assert!(READ.contains(&name), "{name} is read from requests but not in http::incoming::READ");
        }
        let mut found = Vec::new();
        literal_header_reads(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut found);
        assert!(found.iter().any(|(n, _)| n == "x-claude-code-session-id"), "the scan sees the reads: {found:?}");
        let vendor: Vec<&str> = rate_headers::READ.split('\n').collect();
        for (name, file) in &found {
            assert!(
                READ.contains(&name.as_str()) || vendor.contains(&name.as_str()),
                "{file} reads the header {name}, which neither http::incoming::READ nor rate_headers::READ fetches"
            );
        }
    }
}
