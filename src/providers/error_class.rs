//! What went wrong upstream, classified once so that retry, breaker and fallback agree.

use super::retry_after::{hint_in_message, parse_retry_after};
use crate::config::routes::ProviderKind;
use crate::http::codes;
use crate::http::error::ApiError;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    RateLimited,
    /// Out of credit or over a spend cap: waiting will not help, another deployment might.
    QuotaExhausted,
    Overloaded,
    ServerError,
    Timeout,
    Connection,
    EmptyResponse,
    BadRequest,
    ContextLengthExceeded,
    /// The vendor rejected the gateway's credentials (the client's virtual key was fine).
    Auth,
    ContentFilter,
    /// The deployment's model or URL does not exist at the vendor: a route-table problem.
    NotFound,
    /// The request's own deadline or the attempt's total bound passed: not the deployment's
    /// failure, and too late to try elsewhere.
    DeadlineExceeded,
    /// The answer outgrew the route's `max_answer_bytes`: what the client asked this route for,
    /// not the deployment's health (no breaker count, no retry, no fallback).
    TooLarge,
}

impl ErrorClass {
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorClass::RateLimited
                | ErrorClass::Overloaded
                | ErrorClass::ServerError
                | ErrorClass::Timeout
                | ErrorClass::Connection
                | ErrorClass::EmptyResponse
        )
    }

    /// A 429 is not a health problem: it slows the deployment down instead of opening its breaker.
    /// A vendor refusing the deployment's own credential or model is: it takes it out of rotation.
    pub fn counts_for_breaker(self) -> bool {
        matches!(
            self,
            ErrorClass::Overloaded
                | ErrorClass::ServerError
                | ErrorClass::Timeout
                | ErrorClass::Connection
                | ErrorClass::EmptyResponse
                | ErrorClass::Auth
                | ErrorClass::NotFound
        )
    }

    /// Whether the next deployment in the chain may be tried; a bad request fails the same everywhere,
    /// but a wrong or revoked vendor key is that deployment's fault, not the client's.
    pub fn may_fall_back(self) -> bool {
        self.retryable() || matches!(self, ErrorClass::QuotaExhausted | ErrorClass::NotFound | ErrorClass::Auth)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::QuotaExhausted => "quota_exhausted",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::ServerError => "server_error",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Connection => "connection",
            ErrorClass::EmptyResponse => "empty_response",
            ErrorClass::BadRequest => "bad_request",
            ErrorClass::ContextLengthExceeded => "context_length_exceeded",
            ErrorClass::Auth => "auth",
            ErrorClass::ContentFilter => "content_filter",
            ErrorClass::NotFound => "not_found",
            ErrorClass::DeadlineExceeded => "deadline_exceeded",
            ErrorClass::TooLarge => "answer_too_large",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    pub class: ErrorClass,
    /// The vendor's HTTP status; 0 when there was none (transport failure, mid-stream error event).
    pub status: u16,
    /// The vendor's message with anything key-like redacted; safe to log.
    pub message: String,
    pub retry_after_ms: Option<u64>,
    /// The vendor's `error.code`, else its `error.type`.
    pub vendor_code: Option<String>,
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (status {}): {}", self.class, self.status, self.message)
    }
}

impl std::error::Error for UpstreamError {}

const MAX_MESSAGE_CHARS: usize = 1000;

impl UpstreamError {
    pub fn new(class: ErrorClass, status: u16, message: impl Into<String>) -> Self {
        UpstreamError { class, status, message: redact(&message.into()), retry_after_ms: None, vendor_code: None }
    }

    pub fn connection(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Connection, 0, message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Timeout, 0, message)
    }

    pub fn empty_response(status: u16, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::EmptyResponse, status, message)
    }

    pub fn too_large(limit: u64) -> Self {
        Self::new(ErrorClass::TooLarge, 0, format!("the answer exceeded this route's max_answer_bytes ({limit} bytes)"))
    }

    /// A body the adapter could not read: the vendor is misbehaving, which counts against it.
    pub fn malformed(status: u16, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::ServerError, status, message)
    }

    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    fn too_large_api_error(&self) -> ApiError {
        let message =
            format!("The upstream answer was cut off: {}. Ask for less, or use a route allowing more.", self.message);
        ApiError::new(502, "upstream_error", codes::UPSTREAM_ANSWER_TOO_LARGE, message)
    }

    /// The client-facing error: vendor 400s keep the vendor's message; the gateway's own
    /// credentials, org ids and raw 5xx pages never reach the client.
    pub fn to_api_error(&self) -> ApiError {
        let vendor = |status: u16, kind: &'static str, code: &str| {
            ApiError::new(status, kind, code, format!("The upstream provider rejected the request: {}", self.message))
        };
        let err = match self.class {
            ErrorClass::RateLimited => ApiError::new(
                429,
                "rate_limit_error",
                codes::UPSTREAM_RATE_LIMITED,
                "The upstream provider is rate limiting this model. Retry after the indicated delay.",
            ),
            ErrorClass::QuotaExhausted => ApiError::new(
                429,
                "insufficient_quota",
                codes::UPSTREAM_QUOTA_EXHAUSTED,
                "The gateway's account with the upstream provider is out of quota for this model.",
            ),
            ErrorClass::Overloaded => ApiError::new(
                503,
                "server_error",
                codes::UPSTREAM_OVERLOADED,
                "The upstream provider is overloaded. Retry shortly.",
            ),
            ErrorClass::ServerError => {
                ApiError::bad_gateway(format!("The upstream provider failed (status {}).", self.status))
            }
            ErrorClass::Timeout => ApiError::new(
                504,
                "upstream_error",
                codes::UPSTREAM_TIMEOUT,
                "The upstream provider did not respond in time.",
            ),
            ErrorClass::Connection => ApiError::new(
                502,
                "upstream_error",
                codes::UPSTREAM_CONNECTION_ERROR,
                "The gateway could not connect to the upstream provider.",
            ),
            ErrorClass::EmptyResponse => ApiError::new(
                502,
                "upstream_error",
                codes::UPSTREAM_EMPTY_RESPONSE,
                "The upstream provider returned an empty response.",
            ),
            ErrorClass::TooLarge => self.too_large_api_error(),
            ErrorClass::BadRequest => {
                let symbolic = |c: &&str| !c.is_empty() && !c.bytes().all(|b| b.is_ascii_digit());
                let code = self.vendor_code.as_deref().filter(symbolic).unwrap_or("upstream_bad_request");
                vendor(400, "invalid_request_error", code)
            }
            ErrorClass::ContextLengthExceeded => {
                vendor(400, "invalid_request_error", codes::CONTEXT_LENGTH_EXCEEDED).with_param("messages")
            }
            ErrorClass::ContentFilter => vendor(400, "invalid_request_error", codes::CONTENT_FILTER),
            ErrorClass::Auth => ApiError::new(
                502,
                "upstream_error",
                codes::UPSTREAM_AUTH_ERROR,
                "The upstream provider rejected the gateway's credentials for this model.",
            ),
            ErrorClass::NotFound => ApiError::new(
                502,
                "upstream_error",
                codes::UPSTREAM_MODEL_NOT_FOUND,
                "The upstream provider does not know the model this gateway routes to.",
            ),
            ErrorClass::DeadlineExceeded => self.deadline_api_error(),
        };
        match self.retry_after_ms {
            Some(ms) if self.class.retryable() || self.class == ErrorClass::QuotaExhausted => {
                err.with_retry_after_ms(ms)
            }
            _ => err,
        }
    }
}

impl UpstreamError {
    /// The request's own time ran out (its deadline, or a stream's total bound): the message says which.
    fn deadline_api_error(&self) -> ApiError {
        let message = format!("The request ran out of time: {}.", self.message);
        ApiError::new(504, "upstream_error", codes::UPSTREAM_TIMEOUT, message)
    }

    /// The error a client is sent when a stream that already relayed bytes breaks off: a transport
    /// failure then is an interruption, not a failure to connect.
    pub fn to_stream_api_error(&self) -> ApiError {
        let what = match self.class {
            ErrorClass::Timeout => "no data arrived within the idle timeout",
            ErrorClass::DeadlineExceeded => "the stream reached its time limit (total_ms)",
            ErrorClass::Connection => "the upstream stream broke off before it was complete",
            _ => return self.to_api_error(),
        };
        ApiError::new(
            502,
            "upstream_error",
            codes::UPSTREAM_STREAM_INTERRUPTED,
            format!("The upstream provider's stream stopped part-way: {what}. The answer above is incomplete."),
        )
    }
}

/// A well-formed SSE error event for a stream that already started: `data: {"error":{…}}\n\n`.
pub fn stream_error_event(err: &ApiError) -> Vec<u8> {
    let mut out = Vec::new();
    crate::http::sse::write_data(&mut out, &err.to_json());
    out
}

/// Classifies a vendor error response. `retry_after` is the raw `Retry-After` header: delay
/// seconds are honoured; an HTTP-date is treated as unknown here because it needs the current
/// time (call `parse_retry_after(value, Some(now_ms))` and `with_retry_after_ms` for that).
/// Bodies that are not JSON (an HTML 502 page) are classified by status alone.
pub fn classify(provider: ProviderKind, status: u16, retry_after: Option<&str>, body: &[u8]) -> UpstreamError {
    let vendor = VendorError::parse(body);
    let class = class_of(provider, status, &vendor);
    let message = vendor.message.clone().unwrap_or_else(|| match status {
        0 => "the upstream stream reported an error".to_string(),
        s => format!("upstream returned HTTP {s}"),
    });
    let retry_after_ms = retry_after.and_then(|v| parse_retry_after(v, None)).or_else(|| match class {
        ErrorClass::RateLimited => vendor.message.as_deref().and_then(hint_in_message),
        _ => None,
    });
    UpstreamError {
        class,
        status,
        message: redact(&message),
        retry_after_ms,
        vendor_code: vendor.code.or(vendor.kind).filter(|c| !c.is_empty()),
    }
}

/// The parts of an error body that matter, from OpenAI's, Anthropic's or a compatible vendor's shape.
#[derive(Debug, Default)]
struct VendorError {
    message: Option<String>,
    kind: Option<String>,
    code: Option<String>,
    detail_code: Option<String>,
}

impl VendorError {
    fn parse(body: &[u8]) -> VendorError {
        let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(body) else { return VendorError::default() };
        let text = |v: Option<&Value>| match v {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        match top.get("error") {
            Some(Value::Object(e)) => VendorError {
                message: text(e.get("message")),
                kind: text(e.get("type")),
                code: text(e.get("code")),
                detail_code: text(e.get("details").and_then(|d| d.get("error_code"))),
            },
            Some(Value::String(s)) => {
                VendorError { message: Some(s.clone()), code: text(top.get("code")), ..Default::default() }
            }
            _ => VendorError {
                message: text(top.get("message")).or_else(|| text(top.get("detail"))),
                kind: text(top.get("type")).filter(|t| t != "error"),
                code: text(top.get("code")),
                detail_code: None,
            },
        }
    }
}

fn class_of(provider: ProviderKind, status: u16, e: &VendorError) -> ErrorClass {
    let code = e.code.as_deref().unwrap_or("");
    let kind = e.kind.as_deref().unwrap_or("");
    let message = e.message.as_deref().unwrap_or("").to_ascii_lowercase();
    let client_side = status == 0 || (400..500).contains(&status);

    // Zhipu GLM reports an empty balance as code 1113 and an over-long prompt as 1261; DashScope as Arrearage.
    let quota = code == "insufficient_quota"
        || kind == "insufficient_quota"
        || kind == "billing_error"
        || code == "Arrearage"
        || code == "1113"
        || e.detail_code.as_deref() == Some("enforced_spend_limit_reached")
        || status == 402
        || message.contains("credit balance is too low")
        || message.contains("exceeded your current quota")
        || message.contains("insufficient balance");
    if quota && client_side {
        return ErrorClass::QuotaExhausted;
    }
    let context = code == "context_length_exceeded"
        || code == "1261"
        || message.contains("prompt is too long")
        || message.contains("maximum context length")
        || message.contains("context length")
        || message.contains("context window")
        || (provider == ProviderKind::Anthropic && message.contains("exceed context limit"));
    if context && client_side {
        return ErrorClass::ContextLengthExceeded;
    }
    if matches!(code, "content_policy_violation" | "content_filter") || kind == "content_filter" {
        return ErrorClass::ContentFilter;
    }
    if (status == 0 || status >= 500) && message.contains("overloaded") {
        return ErrorClass::Overloaded;
    }
    match (kind, code) {
        ("overloaded_error", _) => return ErrorClass::Overloaded,
        ("rate_limit_error", _) | (_, "rate_limit_exceeded") => return ErrorClass::RateLimited,
        ("authentication_error" | "permission_error", _) | (_, "invalid_api_key") => return ErrorClass::Auth,
        ("not_found_error", _) | (_, "model_not_found") => return ErrorClass::NotFound,
        ("api_error" | "server_error", _) => return ErrorClass::ServerError,
        ("timeout_error", _) => return ErrorClass::Timeout,
        ("request_too_large", _) => return ErrorClass::BadRequest,
        ("invalid_request_error", _) if status == 0 => return ErrorClass::BadRequest,
        _ => {}
    }
    match status {
        401 | 403 => ErrorClass::Auth,
        404 => ErrorClass::NotFound,
        408 => ErrorClass::Timeout,
        429 => ErrorClass::RateLimited,
        503 | 529 => ErrorClass::Overloaded,
        // 524 is Cloudflare's origin timeout in front of a vendor.
        504 | 524 => ErrorClass::Timeout,
        400..=499 => ErrorClass::BadRequest,
        _ => ErrorClass::ServerError,
    }
}

/// Masks anything shaped like a credential or account id before a message is stored or shown.
fn redact(message: &str) -> String {
    let message = &*crate::support::redact::without_secrets(message);
    const SECRET_PREFIXES: [&str; 6] = ["sk-", "sk_", "org-", "proj_", "key-", "AIza"];
    let token_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*' | '.');
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE_CHARS));
    let mut rest = message;
    let mut prev: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        let at_word_start = prev.is_none_or(|p| !token_char(p));
        if at_word_start && SECRET_PREFIXES.iter().any(|p| rest.starts_with(p)) {
            let end = rest.find(|c: char| !token_char(c)).unwrap_or(rest.len());
            let token = rest[..end].trim_end_matches('.');
            out.push_str("[redacted]");
            rest = &rest[token.len()..];
            prev = Some('x');
            continue;
        }
        out.push(c);
        prev = Some(c);
        rest = &rest[c.len_utf8()..];
    }
    if out.chars().count() > MAX_MESSAGE_CHARS {
        out = out.chars().take(MAX_MESSAGE_CHARS).chain("…".chars()).collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorClass::*;
    use ProviderKind::{Anthropic as A, Openai as O};

    #[test]
    fn classification_table() {
        let anthropic = |kind: &str, message: &str| {
            format!(
                r#"{{"type":"error","error":{{"type":"{kind}","message":"{message}"}},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}}"#
            )
        };
        let openai = |kind: &str, code: &str, message: &str| {
            format!(r#"{{"error":{{"message":"{message}","type":"{kind}","param":null,"code":"{code}"}}}}"#)
        };
        let cases: Vec<(ProviderKind, u16, String, ErrorClass)> = vec![
            (O, 429, openai("requests", "rate_limit_exceeded", "Rate limit reached for gpt-4o in organization org-AbC123 on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms."), RateLimited),
            (O, 429, openai("insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."), QuotaExhausted),
            (O, 400, openai("invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens."), ContextLengthExceeded),
            (O, 400, openai("invalid_request_error", "content_policy_violation", "Your request was rejected as a result of our safety system."), ContentFilter),
            (O, 400, r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}"#.to_string(), ContentFilter),
            (O, 401, openai("invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys."), Auth),
            (O, 403, openai("invalid_request_error", "unsupported_country_region_territory", "Country, region, or territory not supported"), Auth),
            (O, 404, openai("invalid_request_error", "model_not_found", "The model `gpt-9` does not exist or you do not have access to it."), NotFound),
            (O, 400, openai("invalid_request_error", "invalid_value", "Invalid value for 'temperature'."), BadRequest),
            (O, 500, openai("server_error", "", "The server had an error while processing your request. Sorry about that!"), ServerError),
            (O, 503, openai("server_error", "", "The engine is currently overloaded, please try again later."), Overloaded),
            (O, 503, "Service Unavailable".to_string(), Overloaded),
            (O, 502, "<html><head><title>502 Bad Gateway</title></head><body>cloudflare</body></html>".to_string(), ServerError),
            (O, 504, String::new(), Timeout),
            (O, 408, String::new(), Timeout),
            (O, 402, r#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#.to_string(), QuotaExhausted),
            (O, 422, r#"{"object":"error","message":"This model's maximum context length is 32768 tokens.","type":"BadRequestError","param":null,"code":400}"#.to_string(), ContextLengthExceeded),
            (O, 400, r#"{"object":"error","message":"[{'type': 'missing', 'loc': ('body', 'messages')}]","type":"BadRequestError","param":null,"code":400}"#.to_string(), BadRequest),
            (O, 429, r#"{"error":{"code":"1113","message":"余额不足或无可用资源包,请充值。"}}"#.to_string(), QuotaExhausted),
            (O, 429, r#"{"error":{"code":"1302","message":"您当前使用该API的并发数过高"}}"#.to_string(), RateLimited),
            (O, 400, r#"{"error":{"code":"Arrearage","message":"Access denied, please make sure your account is in good standing.","type":"Arrearage"}}"#.to_string(), QuotaExhausted),
            (A, 400, anthropic("invalid_request_error", "messages: roles must alternate between \\\"user\\\" and \\\"assistant\\\""), BadRequest),
            (A, 400, anthropic("invalid_request_error", "prompt is too long: 215000 tokens > 200000 maximum"), ContextLengthExceeded),
            (A, 400, anthropic("invalid_request_error", "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000"), ContextLengthExceeded),
            (A, 400, anthropic("invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."), QuotaExhausted),
            (A, 401, anthropic("authentication_error", "invalid x-api-key"), Auth),
            (A, 403, anthropic("permission_error", "Your API key does not have permission to use the specified resource."), Auth),
            (A, 404, anthropic("not_found_error", "model: claude-9"), NotFound),
            (A, 413, anthropic("request_too_large", "Request exceeds the maximum allowed number of bytes."), BadRequest),
            (A, 429, anthropic("rate_limit_error", "This request would exceed your organization's rate limit."), RateLimited),
            (A, 429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"spend limit","details":{"error_code":"enforced_spend_limit_reached"}}}"#.to_string(), QuotaExhausted),
            (A, 402, anthropic("billing_error", "billing issue"), QuotaExhausted),
            (A, 500, anthropic("api_error", "Internal server error"), ServerError),
            (A, 529, anthropic("overloaded_error", "Overloaded"), Overloaded),
            (A, 504, anthropic("timeout_error", "Request timeout"), Timeout),
            (A, 529, String::new(), Overloaded),
            (A, 0, r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#.to_string(), Overloaded),
            (A, 0, r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#.to_string(), BadRequest),
            (A, 0, r#"{"type":"error","error":{"type":"something_new","message":"?"}}"#.to_string(), ServerError),
        ];
        for (provider, status, body, want) in cases {
            let e = classify(provider, status, None, body.as_bytes());
            assert_eq!(e.class, want, "{provider:?} {status} {body}");
            assert_eq!(e.status, status);
        }
    }

    #[test]
    fn class_rules() {
        let all = [
            RateLimited,
            QuotaExhausted,
            Overloaded,
            ServerError,
            Timeout,
            Connection,
            EmptyResponse,
            BadRequest,
            ContextLengthExceeded,
            Auth,
            ContentFilter,
            NotFound,
        ];
        let retryable: Vec<_> = all.iter().filter(|c| c.retryable()).collect();
        assert_eq!(retryable, [&RateLimited, &Overloaded, &ServerError, &Timeout, &Connection, &EmptyResponse]);
        let breaker: Vec<_> = all.iter().filter(|c| c.counts_for_breaker()).collect();
        assert_eq!(breaker, [&Overloaded, &ServerError, &Timeout, &Connection, &EmptyResponse, &Auth, &NotFound]);
        for c in [BadRequest, ContextLengthExceeded, ContentFilter] {
            assert!(!c.retryable() && !c.may_fall_back() && !c.counts_for_breaker(), "{c}");
        }
        for c in [Auth, NotFound] {
            assert!(!c.retryable() && c.may_fall_back() && c.counts_for_breaker(), "{c}: the deployment's fault");
        }
        assert!(!QuotaExhausted.retryable() && QuotaExhausted.may_fall_back());
        assert!(RateLimited.may_fall_back() && !RateLimited.counts_for_breaker());
        let names: std::collections::BTreeSet<_> = all.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), all.len());
    }

    #[test]
    fn retry_after_from_header_or_message() {
        let body = br#"{"error":{"message":"Rate limit reached. Please try again in 1.5s.","type":"tokens","code":"rate_limit_exceeded"}}"#;
        assert_eq!(classify(O, 429, Some("20"), body).retry_after_ms, Some(20_000));
        assert_eq!(classify(O, 429, None, body).retry_after_ms, Some(1_500));
        assert_eq!(classify(O, 429, Some("Wed, 21 Oct 2015 07:28:00 GMT"), body).retry_after_ms, Some(1_500));
        assert_eq!(classify(A, 529, Some("3"), b"").retry_after_ms, Some(3_000));
        let server = br#"{"error":{"message":"Please try again in 1.5s.","type":"server_error"}}"#;
        assert_eq!(classify(O, 500, None, server).retry_after_ms, None);
    }

    #[test]
    fn client_errors_never_leak_keys_or_org_ids() {
        let e = classify(
            O,
            401,
            None,
            br#"{"error":{"message":"Incorrect API key provided: sk-proj-****abcd.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        );
        assert_eq!(e.message, "Incorrect API key provided: [redacted].");
        let api = e.to_api_error();
        assert_eq!((api.status, api.code.as_str(), api.kind), (502, "upstream_auth_error", "upstream_error"));
        assert!(!api.message.contains("sk-"));

        let rate = classify(O, 429, Some("2"), br#"{"error":{"message":"Rate limit reached in organization org-AbC123 on tokens","code":"rate_limit_exceeded"}}"#);
        assert!(rate.message.contains("organization [redacted] on"), "{}", rate.message);
        let api = rate.to_api_error();
        assert_eq!((api.status, api.retry_after_s), (429, Some(2)));
        assert!(!api.message.contains("org-"));
    }

    #[test]
    fn client_status_per_class() {
        let cases = [
            (RateLimited, 429, "upstream_rate_limited"),
            (QuotaExhausted, 429, "upstream_quota_exhausted"),
            (Overloaded, 503, "upstream_overloaded"),
            (ServerError, 502, "upstream_error"),
            (Timeout, 504, "upstream_timeout"),
            (Connection, 502, "upstream_connection_error"),
            (EmptyResponse, 502, "upstream_empty_response"),
            (ContextLengthExceeded, 400, "context_length_exceeded"),
            (ContentFilter, 400, "content_filter"),
            (Auth, 502, "upstream_auth_error"),
            (NotFound, 502, "upstream_model_not_found"),
            (BadRequest, 400, "upstream_bad_request"),
        ];
        for (class, status, code) in cases {
            let api = UpstreamError::new(class, 0, "details").to_api_error();
            assert_eq!((api.status, api.code.as_str()), (status, code), "{class}");
        }
        let bad = classify(
            A,
            400,
            None,
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be positive"}}"#,
        );
        let api = bad.to_api_error();
        assert_eq!((api.status, api.kind, api.code.as_str()), (400, "invalid_request_error", "invalid_request_error"));
        assert!(api.message.ends_with("max_tokens: must be positive"));
        let vllm = classify(O, 400, None, br#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#);
        assert_eq!(vllm.to_api_error().code, "upstream_bad_request");
    }

    #[test]
    fn a_stream_cut_part_way_is_an_interruption_not_a_failure_to_connect() {
        for err in [UpstreamError::connection("reset"), UpstreamError::timeout("idle")] {
            let e = err.to_stream_api_error();
            assert_eq!((e.status, e.code.as_str()), (502, "upstream_stream_interrupted"));
            assert!(!e.message.contains("could not connect"), "{}", e.message);
        }
        let vendor = UpstreamError::new(Overloaded, 0, "overloaded_error");
        assert_eq!(
            vendor.to_stream_api_error().code,
            "upstream_overloaded",
            "a vendor's own error event keeps its code"
        );
    }

    #[test]
    fn stream_error_event_is_one_sse_event() {
        let ev = stream_error_event(&UpstreamError::new(Overloaded, 0, "x").to_api_error());
        let text = String::from_utf8(ev).unwrap();
        assert!(text.starts_with("data: {\"error\":{") && text.ends_with("}\n\n"), "{text}");
        let v: Value = serde_json::from_str(text.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(v["error"]["code"], "upstream_overloaded");
    }

    #[test]
    fn redaction_and_truncation() {
        assert_eq!(redact("key sk-ant-api03-AAA_bb-c, ok"), "key [redacted], ok");
        assert_eq!(redact("task-1 disk-2 sk-x."), "task-1 disk-2 [redacted].");
        assert_eq!(redact("密钥 sk-abc"), "密钥 [redacted]");
        assert_eq!(redact(&"é".repeat(2000)).chars().count(), MAX_MESSAGE_CHARS + 1);
    }
}
