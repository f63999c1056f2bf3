//! `Idempotency-Key` on the worker side: the header, which object holds a key, the body hash,
//! what of a response is kept, when to complete or abandon, and the 409/422 refusals.
//!
//! The state machine and its messages live with the Durable Object in [`limiter::idempotency`],
//! so the worker and the object share one definition; they are re-exported here.

pub mod gate;

use crate::cache::key::canonical_json;
use crate::config::keys::hash_key;
use crate::http::codes;
use crate::http::error::ApiError;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use limiter::idempotency::{
    Begin, IdempotencyRequest, IdempotencyResponse, StoredResponse, DEFAULT_IN_FLIGHT_MS, DEFAULT_WINDOW_MS,
};

pub const HEADER: &str = "idempotency-key";

/// Set on a replayed response (Stripe's name for it).
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

pub const MAX_KEY_LEN: usize = 255;

/// An in-flight mark outlives the request's own deadline by this much before it goes stale.
pub const IN_FLIGHT_MARGIN_MS: u64 = 30_000;

/// Headers that describe the answer itself; limit, retry and timing headers are about the moment.
pub const REPLAYED_HEADERS: &[&str] = &[
    "content-type",
    "x-request-id",
    "x-gateway-deployment",
    "x-gateway-provider",
    "x-gateway-attempts",
    "x-gateway-cache",
];

/// The key from the `Idempotency-Key` header: `None` when absent, 400 when malformed
/// (empty, longer than [`MAX_KEY_LEN`], or not printable ASCII).
pub fn parse_key(header: Option<&str>) -> Result<Option<&str>, ApiError> {
    let Some(raw) = header else { return Ok(None) };
    let key = raw.trim();
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(ApiError::invalid_request(
            codes::INVALID_IDEMPOTENCY_KEY,
            format!("The Idempotency-Key header must be 1 to {MAX_KEY_LEN} printable ASCII characters."),
        ));
    }
    Ok(Some(key))
}

/// The Durable Object name for a tenant's key: the same key under another tenant is another object.
pub fn object_name(tenant: &str, key: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update((tenant.len() as u64).to_be_bytes());
    hasher.update(tenant.as_bytes());
    hasher.update(key.as_bytes());
    let mut name = String::with_capacity(5 + 64);
    name.push_str("idem:");
    for byte in hasher.finalize() {
        name.push(char::from_digit((byte >> 4) as u32, 16).unwrap_or('0'));
        name.push(char::from_digit((byte & 0xf) as u32, 16).unwrap_or('0'));
    }
    name
}

/// SHA-256 of the whole canonical body (field order and whitespace don't count, `stream` does:
/// a streamed retry of a plain request would get the wrong format back).
pub fn body_hash(body: &Value) -> String {
    hash_key(&canonical_json(body))
}

/// The `Begin` for a request whose attempts all end within `deadline_ms`.
pub fn begin(body: &Value, owner: &str, deadline_ms: u64) -> IdempotencyRequest {
    IdempotencyRequest::Begin(Begin {
        body_hash: body_hash(body),
        owner: owner.to_string(),
        window_ms: DEFAULT_WINDOW_MS,
        in_flight_ms: deadline_ms.saturating_add(IN_FLIGHT_MARGIN_MS).max(DEFAULT_IN_FLIGHT_MS),
    })
}

/// What to keep of a response for replay: its status, the [`REPLAYED_HEADERS`] and the body.
pub fn stored_response<'a>(
    status: u16,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    body: String,
) -> StoredResponse {
    let headers = headers
        .into_iter()
        .filter(|(name, _)| REPLAYED_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name)))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_string()))
        .collect();
    StoredResponse { status, headers, body }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Store the response: a retry gets it back (the request was answered, perhaps billed).
    Complete,
    /// Free the key: a retry may succeed where this attempt did not.
    Abandon,
}

/// Final answers are kept, including client errors (the same body fails the same way) and a
/// stream that broke after its first byte (it was billed); transient refusals and 5xx are not.
pub fn settle_for(status: u16) -> Settle {
    match status {
        // 402 (budget) may clear when the budget is raised: a retry must be allowed to run.
        402 | 408 | 409 | 425 | 429 => Settle::Abandon,
        200..=499 => Settle::Complete,
        _ => Settle::Abandon,
    }
}

/// The client-facing refusal for an object's answer, if it is one.
pub fn refusal(resp: &IdempotencyResponse) -> Option<ApiError> {
    match resp {
        IdempotencyResponse::InFlight { retry_after_ms } => Some(
            ApiError::new(
                409,
                "invalid_request_error",
                codes::IDEMPOTENCY_KEY_IN_USE,
                "A request with this Idempotency-Key is still in progress. Retry after it finishes.",
            )
            .with_retry_after_ms(*retry_after_ms),
        ),
        IdempotencyResponse::Mismatch => Some(ApiError::new(
            422,
            "invalid_request_error",
            codes::IDEMPOTENCY_KEY_REUSED,
            "This Idempotency-Key was already used with a different request body. Use a new key.",
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_parsing() {
        assert_eq!(parse_key(None), Ok(None));
        assert_eq!(parse_key(Some(" abc-123 ")), Ok(Some("abc-123")));
        assert_eq!(parse_key(Some("a b")), Ok(Some("a b")));
        let longest = "k".repeat(MAX_KEY_LEN);
        assert_eq!(parse_key(Some(&longest)), Ok(Some(longest.as_str())));
        for bad in ["", "   ", "k".repeat(MAX_KEY_LEN + 1).as_str(), "clé", "a\tb", "a\u{7f}"] {
            let e = parse_key(Some(bad)).unwrap_err();
            assert_eq!((e.status, e.code.as_str()), (400, "invalid_idempotency_key"), "{bad:?}");
        }
    }

    #[test]
    fn object_names_are_per_tenant() {
        let a = object_name("tenant-a", "k1");
        assert!(a.starts_with("idem:") && a.len() == 5 + 64);
        assert_eq!(a, object_name("tenant-a", "k1"));
        assert_ne!(a, object_name("tenant-b", "k1"));
        assert_ne!(a, object_name("tenant-a", "k2"));
        assert_ne!(object_name("ab", "c"), object_name("a", "bc"));
    }

    #[test]
    fn body_hash_ignores_layout_but_not_content() {
        let a: Value =
            serde_json::from_str(r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":1}"#)
                .unwrap();
        let b: Value = serde_json::from_str(
            r#"{ "temperature": 1.0, "messages": [ {"content": "hi", "role": "user"} ], "model": "m" }"#,
        )
        .unwrap();
        assert_eq!(body_hash(&a), body_hash(&b));
        assert_eq!(body_hash(&a).len(), 64);
        let mut streamed = a.clone();
        streamed["stream"] = json!(true);
        assert_ne!(body_hash(&a), body_hash(&streamed));
        let mut other_user = a.clone();
        other_user["user"] = json!("u1");
        assert_ne!(body_hash(&a), body_hash(&other_user));
    }

    #[test]
    fn begin_outlives_the_request_deadline() {
        let body = json!({"model": "m"});
        let IdempotencyRequest::Begin(b) = begin(&body, "req-1", 600_000) else { panic!("not a begin") };
        assert_eq!((b.owner.as_str(), b.body_hash.clone()), ("req-1", body_hash(&body)));
        assert_eq!((b.window_ms, b.in_flight_ms), (DEFAULT_WINDOW_MS, 630_000));
        let IdempotencyRequest::Begin(short) = begin(&body, "req-1", 10_000) else { panic!("not a begin") };
        assert_eq!(short.in_flight_ms, DEFAULT_IN_FLIGHT_MS);
    }

    #[test]
    fn only_answer_headers_are_stored() {
        let headers = [
            ("Content-Type", "text/event-stream"),
            ("x-gateway-deployment", "gpt4o-east"),
            ("Retry-After", "3"),
            ("x-ratelimit-remaining-requests", "9"),
            ("set-cookie", "a=b"),
            ("X-Request-Id", "req_1"),
        ];
        let stored = stored_response(200, headers, "data: [DONE]\n\n".into());
        assert_eq!(stored.status, 200);
        assert_eq!(
            stored.headers,
            vec![
                ("content-type".to_string(), "text/event-stream".to_string()),
                ("x-gateway-deployment".to_string(), "gpt4o-east".to_string()),
                ("x-request-id".to_string(), "req_1".to_string()),
            ]
        );
        assert_eq!(stored.body, "data: [DONE]\n\n");
    }

    #[test]
    fn final_answers_complete_and_transient_failures_abandon() {
        for status in [200, 201, 400, 401, 403, 404, 413, 422] {
            assert_eq!(settle_for(status), Settle::Complete, "{status}");
        }
        for status in [408, 409, 425, 429, 500, 502, 503, 504, 100] {
            assert_eq!(settle_for(status), Settle::Abandon, "{status}");
        }
    }

    #[test]
    fn refusals() {
        let busy = refusal(&IdempotencyResponse::InFlight { retry_after_ms: 1_000 }).unwrap();
        assert_eq!((busy.status, busy.code.as_str(), busy.retry_after_s), (409, "idempotency_key_in_use", Some(1)));
        let reused = refusal(&IdempotencyResponse::Mismatch).unwrap();
        assert_eq!((reused.status, reused.code.as_str(), reused.retry_after_s), (422, "idempotency_key_reused", None));
        for ok in [
            IdempotencyResponse::Proceed,
            IdempotencyResponse::Stored,
            IdempotencyResponse::Released,
            IdempotencyResponse::Stale,
        ] {
            assert!(refusal(&ok).is_none());
        }
    }
}
