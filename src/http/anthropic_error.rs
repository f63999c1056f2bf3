//! Client-facing errors in Anthropic's format, for the Messages door:
//! `{"type":"error","error":{"type","message"},"request_id"}` with Anthropic's statuses and types.
//!
//! The gateway's own machine-readable code (which limit, which scope) travels in the
//! `x-gateway-error-code` header, beside `retry-after` and the limit headers, since Anthropic's
//! error object has no field for it.

use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use serde::Serialize;

/// Anthropic's status and error type for a gateway error.
pub fn status_and_type(err: &ApiError) -> (u16, &'static str) {
    let overloaded = err.code == codes::UPSTREAM_OVERLOADED || err.code == codes::NO_DEPLOYMENT_AVAILABLE;
    match err.status {
        _ if overloaded => (529, "overloaded_error"),
        400 | 409 | 422 => (err.status, "invalid_request_error"),
        405 => (405, "not_found_error"),
        401 => (401, "authentication_error"),
        402 => (402, "billing_error"),
        403 => (403, "permission_error"),
        404 => (404, "not_found_error"),
        413 => (413, "request_too_large"),
        429 => (429, "rate_limit_error"),
        504 => (504, "timeout_error"),
        529 => (529, "overloaded_error"),
        s if (400..500).contains(&s) => (s, "invalid_request_error"),
        _ => (500, "api_error"),
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: Body<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
}

/// The error body, in Anthropic's key order; `request_id` is the gateway's.
pub fn to_json(err: &ApiError, request_id: Option<&str>) -> String {
    let (_, kind) = status_and_type(err);
    let envelope = Envelope { kind: "error", error: Body { kind, message: &err.message }, request_id };
    serde_json::to_string(&envelope)
        .unwrap_or_else(|_| String::from(r#"{"type":"error","error":{"type":"api_error","message":"error"}}"#))
}

/// The SSE frame that ends a stream which failed after its first byte.
pub fn stream_error_event(err: &ApiError) -> Vec<u8> {
    let mut out = b"event: error\n".to_vec();
    crate::http::sse::write_data(&mut out, &to_json(err, None));
    out
}

pub fn error_response(err: &ApiError, request_id: Option<&str>) -> Reply {
    let (status, _) = status_and_type(err);
    let mut reply = Reply::json(status, to_json(err, request_id).into_bytes());
    reply.set_header("x-gateway-error-code", &err.code);
    crate::http::io::set_error_headers(&mut reply, err, request_id);
    // Anthropic's SDKs read the request id from their own header.
    if let Some(id) = request_id {
        reply.set_header("request-id", id);
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn kind(status: u16, code: &str) -> (u16, &'static str) {
        status_and_type(&ApiError::new(status, "x", code, "m"))
    }

    #[test]
    fn statuses_and_types_follow_anthropic() {
        assert_eq!(kind(400, codes::INVALID_JSON), (400, "invalid_request_error"));
        assert_eq!(kind(401, codes::INVALID_API_KEY), (401, "authentication_error"));
        assert_eq!(kind(402, codes::BUDGET_EXCEEDED), (402, "billing_error"));
        assert_eq!(kind(403, codes::MODEL_NOT_ALLOWED), (403, "permission_error"));
        assert_eq!(kind(404, codes::MODEL_NOT_FOUND), (404, "not_found_error"));
        assert_eq!(kind(413, codes::REQUEST_TOO_LARGE), (413, "request_too_large"));
        assert_eq!(kind(429, "key_rpm"), (429, "rate_limit_error"));
        assert_eq!(kind(503, codes::NO_DEPLOYMENT_AVAILABLE), (529, "overloaded_error"));
        assert_eq!(kind(503, codes::UPSTREAM_OVERLOADED), (529, "overloaded_error"));
        assert_eq!(kind(502, codes::UPSTREAM_ERROR), (500, "api_error"));
        assert_eq!(kind(500, codes::INTERNAL_ERROR), (500, "api_error"));
        assert_eq!(kind(504, codes::UPSTREAM_TIMEOUT), (504, "timeout_error"));
        assert_eq!(kind(405, codes::METHOD_NOT_ALLOWED), (405, "not_found_error"));
    }

    #[test]
    fn body_and_stream_frame() {
        let err = ApiError::model_not_found("claude-x");
        let v: Value = serde_json::from_str(&to_json(&err, Some("req-1"))).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert!(v["error"]["message"].as_str().unwrap().contains("claude-x"));
        assert_eq!(v["request_id"], "req-1");
        let frame = String::from_utf8(stream_error_event(&err)).unwrap();
        assert!(frame.starts_with("event: error\ndata: {\"type\":\"error\""), "{frame}");
        assert!(frame.ends_with("\n\n"));
    }
}
