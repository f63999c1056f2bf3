//! What the gateway knows about one client request once its key is accepted.

use crate::config::keys::KeyRecord;
use crate::http::header_map::HeaderMap;
use crate::support::clock::now_ms;
use crate::support::entropy;
use std::rc::Rc;
use worker::Env;

#[derive(Clone)]
pub struct RequestContext {
    pub request_id: String,
    pub started_ms: u64,
    pub key: Rc<KeyRecord>,
    pub env: Env,
    /// How long this request may wait for a limiter's capacity before it is refused.
    pub max_wait_ms: u64,
    /// `x-gateway-task`: picks the logical model by task instead of the request's model.
    pub task: Option<String>,
    /// `x-session-id`: the same session keeps its deployment while it is healthy.
    pub session_id: Option<String>,
    /// `x-gateway-timeout-ms`: the client's deadline, bounded by the route's maximum.
    pub timeout_override_ms: Option<u64>,
    /// One draw per request for weighted selection and backoff jitter.
    pub random: u64,
    /// `x-gateway-tags` as sent (`k=v,k=v`): usage attribution tags.
    pub tags: Option<String>,
    pub cache_control: Option<String>,
    /// `x-gateway-cache-ttl`: seconds, bounded by the route's `cache.max_ttl_s`.
    pub cache_ttl_s: Option<u64>,
    /// The request's headers, read once.
    pub headers: HeaderMap,
}

pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if !entropy::fill(&mut bytes) {
        return now_ms().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    u64::from_le_bytes(bytes)
}

/// Interactive requests wait briefly for capacity; batch requests (`x-gateway-priority: batch`) longer.
pub const INTERACTIVE_MAX_WAIT_MS: u64 = 1_000;
pub const BATCH_MAX_WAIT_MS: u64 = 30_000;
pub const MAX_WAIT_CAP_MS: u64 = 60_000;

/// The wait cap from `x-gateway-priority` and an explicit `x-gateway-max-wait-ms` (bounded).
pub fn max_wait_ms(priority: Option<&str>, explicit: Option<u64>) -> u64 {
    if let Some(ms) = explicit {
        return ms.min(MAX_WAIT_CAP_MS);
    }
    match priority.map(str::trim) {
        Some(p) if p.eq_ignore_ascii_case("batch") => BATCH_MAX_WAIT_MS,
        _ => INTERACTIVE_MAX_WAIT_MS,
    }
}

thread_local! {
    static FALLBACK_COUNTER: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A request id from 12 random bytes, hex.
pub fn new_request_id() -> String {
    let mut bytes = [0u8; 12];
    if !entropy::fill(&mut bytes) {
        // No entropy source: time plus a per-isolate counter still never repeats within an isolate.
        let n = FALLBACK_COUNTER.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        bytes[..8].copy_from_slice(&now_ms().to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
    }
    let mut id = String::with_capacity(28);
    id.push_str("req_");
    for b in bytes {
        id.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
        id.push(char::from_digit((b & 0xf) as u32, 16).unwrap_or('0'));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_cap_by_priority_and_override() {
        assert_eq!(max_wait_ms(None, None), INTERACTIVE_MAX_WAIT_MS);
        assert_eq!(max_wait_ms(Some("batch"), None), BATCH_MAX_WAIT_MS);
        assert_eq!(max_wait_ms(Some("interactive"), None), INTERACTIVE_MAX_WAIT_MS);
        assert_eq!(max_wait_ms(Some("batch"), Some(0)), 0);
        assert_eq!(max_wait_ms(None, Some(999_999)), MAX_WAIT_CAP_MS);
    }
}
