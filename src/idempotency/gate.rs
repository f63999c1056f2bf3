//! `Idempotency-Key` in the request path: one `IdempotencyStore` object per tenant+key decides
//! whether this request proceeds, waits (409), replays the stored answer, or is refused (422).

use crate::auth::context::RequestContext;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use crate::idempotency::{self, IdempotencyRequest, IdempotencyResponse, Settle, REPLAYED_HEADER};
use limiter::idempotency::call;
use serde_json::Value;
use worker::{Env, Stub};

pub const IDEMPOTENCY_BINDING: &str = "IDEMPOTENCY";

/// The first request under a key: it must report how it ended.
pub struct Claim {
    stub: Stub,
    owner: String,
}

/// What the request's `Idempotency-Key` lets it do.
pub enum Entry {
    /// No key: nothing to do.
    Open,
    Proceed(Claim),
    Replay(Reply),
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(codes::IDEMPOTENCY_UNAVAILABLE, format!("The idempotency store is unavailable: {e}"))
}

/// Longest a first request may run before its key stops blocking retries (the routes' maximum deadline).
const MAX_DEADLINE_MS: u64 = 900_000;

pub async fn enter(rc: &RequestContext, env: &Env, body: &[u8]) -> Result<Entry, ApiError> {
    let (tenant, request_id) = (rc.key.tenant.as_str(), rc.request_id.as_str());
    let Some(key) = idempotency::parse_key(rc.headers.get(idempotency::HEADER))? else { return Ok(Entry::Open) };
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if parsed.get("stream") == Some(&Value::Bool(true)) {
        return Err(ApiError::invalid_request(
            codes::IDEMPOTENCY_NOT_SUPPORTED_FOR_STREAMS,
            "Idempotency-Key is supported for non-streaming requests only.",
        ));
    }
    let stub = env
        .durable_object(IDEMPOTENCY_BINDING)
        .and_then(|ns| ns.id_from_name(&idempotency::object_name(tenant, key))?.get_stub())
        .map_err(unavailable)?;
    let answer = call(&stub, &idempotency::begin(&parsed, request_id, MAX_DEADLINE_MS)).await.map_err(unavailable)?;
    if let Some(refusal) = idempotency::refusal(&answer) {
        return Err(refusal);
    }
    match answer {
        IdempotencyResponse::Proceed => Ok(Entry::Proceed(Claim { stub, owner: request_id.to_string() })),
        IdempotencyResponse::Replay { response, .. } => {
            let mut replay = Reply::json(response.status, response.body.into_bytes());
            for (name, value) in &response.headers {
                replay.set_header(name, value);
            }
            replay.set_header(REPLAYED_HEADER, "true");
            Ok(Entry::Replay(replay))
        }
        other => Err(ApiError::internal(format!("unexpected idempotency answer: {other:?}"))),
    }
}

impl Claim {
    /// Stores the answer for replays (or releases the key after a failure a retry may fix).
    /// `format` writes a failure in the door's own error format, which replays then repeat.
    pub async fn finish(
        self,
        result: Result<Reply, ApiError>,
        format: impl FnOnce(&ApiError) -> Reply,
    ) -> Result<Reply, ApiError> {
        let mut response = result.unwrap_or_else(|e| format(&e));
        let status = response.status;
        let request = match idempotency::settle_for(status) {
            Settle::Abandon => IdempotencyRequest::Abandon { owner: self.owner },
            Settle::Complete => {
                let body = String::from_utf8_lossy(response.bytes().unwrap_or_default()).into_owned();
                let stored = idempotency::stored_response(status, response.header_pairs(), body);
                IdempotencyRequest::Complete { owner: self.owner, response: stored }
            }
        };
        if let Err(e) = call(&self.stub, &request).await {
            crate::support::log::error(
                serde_json::json!({"event": "idempotency_store_failed", "error": e.to_string()}),
            );
        }
        response.set_header(REPLAYED_HEADER, "false");
        Ok(response)
    }
}
