//! Every error code the gateway sends in `error.code`, in one place. Vendor 400s pass the vendor's
//! own symbolic code through (see `providers::error_class`); everything else is listed here.

// Authentication and access
/// No `Authorization: Bearer` key was sent (401).
pub const MISSING_API_KEY: &str = "missing_api_key";
/// The key is unknown (401).
pub const INVALID_API_KEY: &str = "invalid_api_key";
/// The key was revoked (401).
pub const KEY_REVOKED: &str = "key_revoked";
/// The key has expired (401).
pub const KEY_EXPIRED: &str = "key_expired";
/// The key could not be looked up (503).
pub const KEY_STORE_UNAVAILABLE: &str = "key_store_unavailable";
/// The key may not use this model (403).
pub const MODEL_NOT_ALLOWED: &str = "model_not_allowed";
/// `/admin/status` with a wrong token (401).
pub const INVALID_ADMIN_TOKEN: &str = "invalid_admin_token";
/// `/admin/status` without `ADMIN_TOKEN` configured.
pub const ADMIN_DISABLED: &str = "admin_disabled";
/// Too many bad admin tokens lately (per isolate): 429 with `Retry-After`.
pub const ADMIN_AUTH_RATE_LIMITED: &str = "admin_auth_rate_limited";

// The request itself (400, 404, 405, 413)
/// The body is not JSON.
pub const INVALID_JSON: &str = "invalid_json";
/// The body does not decode as the endpoint's request.
pub const INVALID_REQUEST: &str = "invalid_request";
/// A field has the wrong JSON type.
pub const INVALID_TYPE: &str = "invalid_type";
/// A field's value is out of its domain.
pub const INVALID_VALUE: &str = "invalid_value";
/// A required field is absent.
pub const MISSING_REQUIRED_PARAMETER: &str = "missing_required_parameter";
/// An array that must not be empty is.
pub const EMPTY_ARRAY: &str = "empty_array";
/// A number is below its minimum.
pub const INTEGER_BELOW_MIN_VALUE: &str = "integer_below_min_value";
/// The body could not be read.
pub const UNREADABLE_BODY: &str = "unreadable_body";
/// A gateway header (`x-gateway-timeout-ms`, …) with a value it cannot use; `param` names it.
pub const INVALID_HEADER: &str = "invalid_header_value";
/// The body exceeds the gateway's limit (413).
pub const REQUEST_TOO_LARGE: &str = "request_too_large";
/// No such endpoint (404).
pub const UNKNOWN_URL: &str = "unknown_url";
/// Wrong method for the endpoint (405).
pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
/// No such logical model in the route table (404).
pub const MODEL_NOT_FOUND: &str = "model_not_found";
/// The prompt and output exceed the model's context window (the vendor said so).
pub const CONTEXT_LENGTH_EXCEEDED: &str = "context_length_exceeded";
/// The vendor's content filter refused the request.
pub const CONTENT_FILTER: &str = "content_filter";
/// A field the serving vendor cannot express (e.g. `n > 1` for Anthropic).
pub const UNSUPPORTED_PARAMETER: &str = "unsupported_parameter";
/// The model's vendor has no such API (e.g. embeddings on Anthropic).
pub const UNSUPPORTED_ENDPOINT: &str = "unsupported_endpoint";
/// No deployment declares what the request needs (tools, vision, …).
pub const CAPABILITY_NOT_SUPPORTED: &str = "capability_not_supported";

// Idempotency-Key
/// The header's value is unusable (400).
pub const INVALID_IDEMPOTENCY_KEY: &str = "invalid_idempotency_key";
/// The same key is still in flight (409).
pub const IDEMPOTENCY_KEY_IN_USE: &str = "idempotency_key_in_use";
/// The key was used with a different body (422).
pub const IDEMPOTENCY_KEY_REUSED: &str = "idempotency_key_reused";
/// Streams cannot be replayed (400).
pub const IDEMPOTENCY_NOT_SUPPORTED_FOR_STREAMS: &str = "idempotency_not_supported_for_streams";
/// The idempotency store could not be reached (503).
pub const IDEMPOTENCY_UNAVAILABLE: &str = "idempotency_unavailable";

// Limits and budgets (429, 402; limiter refusals are `<scope>_<limit>`, see [`limit_refused`])
/// The tenant's hard budget would be passed (402).
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

// The gateway and its vendors (5xx, and vendor 429s)
/// No valid route table has been uploaded (503).
pub const NO_ROUTE_TABLE: &str = "no_route_table";
/// No deployment could be tried (503).
pub const NO_DEPLOYMENT_AVAILABLE: &str = "no_deployment_available";
/// A bug or an unexpected runtime failure (500).
pub const INTERNAL_ERROR: &str = "internal_error";
/// The vendor failed (5xx or a malformed answer) (502).
pub const UPSTREAM_ERROR: &str = "upstream_error";
/// The vendor is rate limiting (429).
pub const UPSTREAM_RATE_LIMITED: &str = "upstream_rate_limited";
/// The gateway's vendor account is out of quota (429).
pub const UPSTREAM_QUOTA_EXHAUSTED: &str = "upstream_quota_exhausted";
/// The vendor is overloaded (503).
pub const UPSTREAM_OVERLOADED: &str = "upstream_overloaded";
/// The vendor did not answer in time, or the deadline passed (504).
pub const UPSTREAM_TIMEOUT: &str = "upstream_timeout";
/// The vendor could not be reached (502).
pub const UPSTREAM_CONNECTION_ERROR: &str = "upstream_connection_error";
/// The vendor answered with nothing (502).
pub const UPSTREAM_EMPTY_RESPONSE: &str = "upstream_empty_response";
/// A stream broke off after bytes reached the client (in-stream error event).
pub const UPSTREAM_STREAM_INTERRUPTED: &str = "upstream_stream_interrupted";
/// The vendor refused the gateway's own credential (502).
pub const UPSTREAM_AUTH_ERROR: &str = "upstream_auth_error";
/// The vendor does not know the deployment's model (502).
pub const UPSTREAM_MODEL_NOT_FOUND: &str = "upstream_model_not_found";
/// The vendor's answer outgrew the route's `max_answer_bytes`.
pub const UPSTREAM_ANSWER_TOO_LARGE: &str = "upstream_answer_too_large";

/// A limiter refusal (429): which scope (`key`, `tenant`, `deployment`) and which limit
/// (`rpm`, `tpm`, `breaker_open`, …), e.g. `tenant_rpm`.
pub fn limit_refused(scope: &str, limit: &str) -> String {
    format!("{scope}_{limit}")
}

/// Every listed code, for tests and docs.
pub const ALL: &[&str] = &[
    MISSING_API_KEY,
    INVALID_API_KEY,
    KEY_REVOKED,
    KEY_EXPIRED,
    KEY_STORE_UNAVAILABLE,
    MODEL_NOT_ALLOWED,
    INVALID_ADMIN_TOKEN,
    ADMIN_DISABLED,
    ADMIN_AUTH_RATE_LIMITED,
    INVALID_JSON,
    INVALID_REQUEST,
    INVALID_TYPE,
    INVALID_VALUE,
    MISSING_REQUIRED_PARAMETER,
    EMPTY_ARRAY,
    INTEGER_BELOW_MIN_VALUE,
    UNREADABLE_BODY,
    INVALID_HEADER,
    REQUEST_TOO_LARGE,
    UNKNOWN_URL,
    METHOD_NOT_ALLOWED,
    MODEL_NOT_FOUND,
    CONTEXT_LENGTH_EXCEEDED,
    CONTENT_FILTER,
    UNSUPPORTED_PARAMETER,
    UNSUPPORTED_ENDPOINT,
    CAPABILITY_NOT_SUPPORTED,
    INVALID_IDEMPOTENCY_KEY,
    IDEMPOTENCY_KEY_IN_USE,
    IDEMPOTENCY_KEY_REUSED,
    IDEMPOTENCY_NOT_SUPPORTED_FOR_STREAMS,
    IDEMPOTENCY_UNAVAILABLE,
    BUDGET_EXCEEDED,
    NO_ROUTE_TABLE,
    NO_DEPLOYMENT_AVAILABLE,
    INTERNAL_ERROR,
    UPSTREAM_ERROR,
    UPSTREAM_RATE_LIMITED,
    UPSTREAM_QUOTA_EXHAUSTED,
    UPSTREAM_OVERLOADED,
    UPSTREAM_TIMEOUT,
    UPSTREAM_CONNECTION_ERROR,
    UPSTREAM_EMPTY_RESPONSE,
    UPSTREAM_STREAM_INTERRUPTED,
    UPSTREAM_AUTH_ERROR,
    UPSTREAM_MODEL_NOT_FOUND,
    UPSTREAM_ANSWER_TOO_LARGE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_snake_case() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ALL {
            assert!(code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{code}");
            assert!(seen.insert(*code), "listed twice: {code}");
        }
        assert_eq!(limit_refused("tenant", "rpm"), "tenant_rpm");
    }
}
