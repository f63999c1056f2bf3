//! Authentication: the bearer (or `x-api-key`) key checked against its KV record, and what the gateway then knows
//! about the request.

pub mod admin_guard;
pub mod context;
pub mod headers;

use crate::auth::context::RequestContext;
use crate::auth::headers::NumericHeaders;
use crate::config;
use crate::config::keys::{self, KeyRefusal};
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::incoming::Incoming;
use worker::Env;

/// The bearer key checked against its KV record; the request's context once it is accepted.
pub async fn authenticate(
    req: &Incoming,
    env: &Env,
    request_id: &str,
    now_ms: u64,
) -> Result<RequestContext, ApiError> {
    let headers = req.headers.clone();
    let header = headers.get_owned("authorization");
    // Anthropic's SDKs send the key as `x-api-key`; `Authorization: Bearer` wins when both are set.
    let api_key = headers.get_owned("x-api-key");
    let secret = keys::bearer(header.as_deref())
        .or_else(|| api_key.as_deref().map(str::trim).filter(|k| !k.is_empty()))
        .ok_or_else(ApiError::missing_key)?;
    let record = config::warm::key_and_documents(env, secret, now_ms).await?.ok_or_else(ApiError::invalid_key)?;
    match record.check(now_ms) {
        Ok(()) => {}
        Err(KeyRefusal::Revoked) => {
            return Err(ApiError::new(
                401,
                "invalid_request_error",
                codes::KEY_REVOKED,
                "This API key has been revoked.",
            ))
        }
        Err(KeyRefusal::Expired) => {
            return Err(ApiError::new(401, "invalid_request_error", codes::KEY_EXPIRED, "This API key has expired."))
        }
        Err(_) => return Err(ApiError::invalid_key()),
    }
    let header = |name: &str| headers.get_owned(name);
    let numbers = NumericHeaders::read(header)?;
    let max_wait_ms = context::max_wait_ms(header("x-gateway-priority").as_deref(), numbers.max_wait_ms);
    let non_empty = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    Ok(RequestContext {
        request_id: request_id.to_string(),
        started_ms: now_ms,
        key: record,
        env: env.clone(),
        max_wait_ms,
        task: non_empty(header("x-gateway-task")),
        session_id: non_empty(header("x-session-id")),
        timeout_override_ms: numbers.timeout_ms,
        random: context::random_u64(),
        tags: header("x-gateway-tags"),
        cache_control: header("cache-control"),
        cache_ttl_s: numbers.cache_ttl_s,
        headers,
    })
}
