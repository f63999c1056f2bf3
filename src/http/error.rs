//! Client-facing errors in OpenAI's format: `{"error":{"message","type","param","code"}}`.

use crate::http::codes;
use serde::Serialize;

/// An error the gateway answers with; every refusal names a machine-readable `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    /// Seconds the client should wait before retrying, sent as `Retry-After`.
    pub retry_after_s: Option<u64>,
    /// Machine-readable detail sent as response headers (which limit, which scope).
    pub headers: Vec<(&'static str, String)>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: &'a str,
}

impl ApiError {
    pub fn new(status: u16, kind: &'static str, code: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            code: code.into(),
            message: message.into(),
            param: None,
            retry_after_s: None,
            headers: Vec::new(),
        }
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_s = Some(ms.div_ceil(1000).max(1));
        self
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn invalid_request(code: &str, message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", code, message)
    }

    pub fn missing_key() -> Self {
        Self::new(
            401,
            "invalid_request_error",
            codes::MISSING_API_KEY,
            "You didn't provide an API key. Send it as 'Authorization: Bearer <virtual key>'.",
        )
    }

    pub fn invalid_key() -> Self {
        Self::new(401, "invalid_request_error", codes::INVALID_API_KEY, "Incorrect API key provided.")
    }

    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            404,
            "invalid_request_error",
            codes::MODEL_NOT_FOUND,
            format!("The model '{model}' does not exist or you do not have access to it."),
        )
        .with_param("model")
    }

    pub fn not_found(path: &str) -> Self {
        Self::new(404, "invalid_request_error", codes::UNKNOWN_URL, format!("Unknown request URL: {path}."))
    }

    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            405,
            "invalid_request_error",
            codes::METHOD_NOT_ALLOWED,
            format!("{method} is not allowed on {path}."),
        )
    }

    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            413,
            "invalid_request_error",
            codes::REQUEST_TOO_LARGE,
            format!("Request body exceeds the gateway's limit of {limit} bytes."),
        )
    }

    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(502, "upstream_error", codes::UPSTREAM_ERROR, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "server_error", codes::INTERNAL_ERROR, message)
    }

    pub fn unavailable(code: &str, message: impl Into<String>) -> Self {
        Self::new(503, "server_error", code, message)
    }

    pub fn to_json(&self) -> String {
        let env = Envelope {
            error: Body { message: &self.message, kind: self.kind, param: self.param.as_deref(), code: &self.code },
        };
        serde_json::to_string(&env).unwrap_or_else(|_| {
            String::from(r#"{"error":{"message":"error","type":"server_error","param":null,"code":"internal_error"}}"#)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_openai_shape() {
        let e = ApiError::model_not_found("gpt-x");
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["param"], "model");
        assert!(v["error"]["message"].as_str().unwrap().contains("gpt-x"));
        assert_eq!(e.status, 404);
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(ApiError::internal("x").with_retry_after_ms(1).retry_after_s, Some(1));
        assert_eq!(ApiError::internal("x").with_retry_after_ms(1001).retry_after_s, Some(2));
        assert_eq!(ApiError::internal("x").with_retry_after_ms(0).retry_after_s, Some(1));
    }
}
