//! Provider adapters: the canonical OpenAI request to each vendor's wire format, and each vendor's
//! responses, streams and errors back to OpenAI's format. Pure: no clocks, no I/O.

// ApiError is the client-facing error, built at most once per request; boxing it buys nothing here.

#[cfg(test)]
macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/providers/", $name))
    };
}

mod anthropic;
mod chunk_view;
mod error_class;
pub mod messages_openai;
mod openai;
pub mod rate_headers;
pub mod responses;
mod retry_after;
pub mod splice;
#[cfg(test)]
mod stream_split_tests;

pub use anthropic::passthrough;
pub use error_class::{classify, stream_error_event, ErrorClass, UpstreamError};
pub use retry_after::parse_retry_after;

use crate::canonical::usage::Usage;
use crate::canonical::{ChatFacts, ChatRequest};
use crate::config::routes::{AuthScheme, Deployment, ProviderKind};
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::sse::SseParser;
use serde_json::Value;

/// One HTTP POST to a vendor; the caller adds nothing but transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamCall {
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The bytes sent. perf: a pass-through's are the client's with the model spliced, sent without
    /// a UTF-8 check of tens of kB (the door's parse already read every string in them).
    pub body: Vec<u8>,
}

/// Builds the vendor request for a chat completion. `force_usage` asks an OpenAI-compatible vendor
/// for stream usage (when `quirks.stream_options` allows) even if the client did not; the
/// translator then drops the usage-only chunk the client did not ask for.
pub fn build_chat(
    dep: &Deployment,
    req: &ChatRequest,
    credential: &str,
    force_usage: bool,
) -> Result<UpstreamCall, ApiError> {
    match dep.provider {
        ProviderKind::Openai => openai::build_chat(dep, req, credential, force_usage),
        ProviderKind::Anthropic => anthropic::build_chat(dep, req, credential),
    }
}

/// A client's body as it came, and where its top-level `model` values lie when the door found them.
#[derive(Clone, Copy)]
pub struct Raw<'a> {
    pub body: &'a [u8],
    pub spans: Option<&'a [splice::Span]>,
}

/// The chat request for `dep`, forwarded as the client's bytes (model spliced) when an
/// OpenAI-format vendor would get nothing else changed (`facts` tell); built from `req` otherwise.
pub fn build_chat_from_raw<'a>(
    dep: &Deployment,
    facts: &ChatFacts,
    req: impl FnOnce() -> &'a ChatRequest,
    raw: Raw,
    credential: &str,
    force_usage: bool,
) -> Result<UpstreamCall, ApiError> {
    if dep.provider == ProviderKind::Openai {
        if let Some(call) = openai::passthrough_chat(dep, facts, raw, credential, force_usage) {
            return Ok(call);
        }
    }
    build_chat(dep, req(), credential, force_usage)
}

/// Builds an embeddings request; only OpenAI-compatible vendors have one.
pub fn build_embeddings(dep: &Deployment, body: &Value, credential: &str) -> Result<UpstreamCall, ApiError> {
    match dep.provider {
        ProviderKind::Openai => openai::build_embeddings(dep, body, credential),
        ProviderKind::Anthropic => Err(ApiError::invalid_request(
            codes::UNSUPPORTED_ENDPOINT,
            "Embeddings are not available for this model: it is served by Anthropic, which has no embeddings API.",
        )
        .with_param("model")),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatResult {
    /// An OpenAI `chat.completion` JSON body for the client.
    pub body: Vec<u8>,
    pub usage: Option<Usage>,
}

/// Translates a successful (2xx) chat response. `created` (Unix seconds) stamps responses the
/// gateway writes itself (Anthropic); OpenAI-compatible bodies pass through byte for byte.
pub fn translate_chat_response(dep: &Deployment, body: Vec<u8>, created: u64) -> Result<ChatResult, UpstreamError> {
    match dep.provider {
        ProviderKind::Openai => openai::translate_chat_response(body),
        ProviderKind::Anthropic => anthropic::translate_chat_response(&body, created),
    }
}

/// Passes an embeddings body through and reads its usage (prompt tokens only).
pub fn translate_embeddings_response(
    dep: &Deployment,
    body: Vec<u8>,
) -> Result<(Vec<u8>, Option<Usage>), UpstreamError> {
    match dep.provider {
        ProviderKind::Openai => openai::translate_embeddings_response(body),
        ProviderKind::Anthropic => Err(UpstreamError::malformed(200, "Anthropic has no embeddings API")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The vendor's terminator arrived (`[DONE]`, `message_stop`) and the client got `data: [DONE]`.
    Complete,
    /// The upstream ended without its terminator, or sent an error event: the caller owes the
    /// client a `stream_error_event` and bills the partial usage.
    Truncated,
}

/// Turns one upstream SSE stream into OpenAI chat-completion chunks, chunk by chunk.
pub struct StreamTranslator {
    parser: SseParser,
    flavor: Flavor,
    emitted: bool,
    failure: Option<UpstreamError>,
}

enum Flavor {
    Openai(openai::OpenaiStream),
    Anthropic(anthropic::AnthropicStream),
}

impl Flavor {
    fn on_event(&mut self, ev: &crate::http::sse::SseEvent, out: &mut Vec<u8>) -> Result<(), UpstreamError> {
        match self {
            Flavor::Openai(s) => s.on_event(ev, out),
            Flavor::Anthropic(s) => s.on_event(ev, out),
        }
    }

    fn done(&self) -> bool {
        match self {
            Flavor::Openai(s) => s.done(),
            Flavor::Anthropic(s) => s.done(),
        }
    }
}

impl StreamTranslator {
    /// `created` (Unix seconds) stamps the chunks the gateway writes itself (Anthropic).
    pub fn new(dep: &Deployment, client_wants_usage: bool, created: u64) -> Self {
        let flavor = match dep.provider {
            ProviderKind::Openai => Flavor::Openai(openai::OpenaiStream::new(client_wants_usage)),
            ProviderKind::Anthropic => Flavor::Anthropic(anthropic::AnthropicStream::new(client_wants_usage, created)),
        };
        StreamTranslator { parser: SseParser::new(), flavor, emitted: false, failure: None }
    }

    /// Appends client SSE bytes for every complete upstream event in `chunk`. Returns the vendor's
    /// mid-stream error the first time one arrives; after that, and after the terminator, input is ignored.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        if self.failure.is_some() || self.flavor.done() {
            return None;
        }
        self.parser.feed(chunk);
        let before = out.len();
        while let Some(ev) = self.parser.next_event() {
            if let Err(e) = self.flavor.on_event(&ev, out) {
                self.failure = Some(e.clone());
                self.emitted |= out.len() > before;
                return Some(e);
            }
            if self.flavor.done() {
                break;
            }
        }
        self.emitted |= out.len() > before;
        if self.parser.overflowed() {
            let e = UpstreamError {
                class: ErrorClass::ServerError,
                status: 0,
                message: format!("the vendor sent an SSE line over {} bytes", crate::http::sse::MAX_LINE_BYTES),
                retry_after_ms: None,
                vendor_code: None,
            };
            self.failure = Some(e.clone());
            return Some(e);
        }
        None
    }

    /// Upstream closed: flushes a last unterminated event and reports how the stream ended.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        let before = out.len();
        while self.failure.is_none() && !self.flavor.done() {
            let Some(ev) = self.parser.finish() else { break };
            if let Err(e) = self.flavor.on_event(&ev, out) {
                self.failure = Some(e);
            }
        }
        let end = match &mut self.flavor {
            _ if self.failure.is_some() => StreamEnd::Truncated,
            Flavor::Openai(s) => s.finish(out),
            Flavor::Anthropic(s) if s.done() => StreamEnd::Complete,
            Flavor::Anthropic(_) => StreamEnd::Truncated,
        };
        self.emitted |= out.len() > before;
        end
    }

    /// What the vendor reported so far; for a cut stream, the partial counts (e.g. Anthropic's
    /// input, with the output estimated from what was delivered).
    pub fn usage(&self) -> Option<Usage> {
        match &self.flavor {
            Flavor::Openai(s) => s.usage(),
            Flavor::Anthropic(s) => s.usage(),
        }
    }

    /// Whether [`usage`](Self::usage)'s output is an estimate (the vendor's final count never came).
    pub fn usage_estimated(&self) -> bool {
        match &self.flavor {
            Flavor::Openai(_) => false,
            Flavor::Anthropic(s) => s.usage_estimated(),
        }
    }

    /// Whether the vendor's end of stream (`[DONE]`, `message_stop`) was translated.
    pub fn ended(&self) -> bool {
        self.failure.is_none() && self.flavor.done()
    }

    /// Whether any byte for the client was produced; until then a failed attempt can still be retried.
    pub fn emitted_any(&self) -> bool {
        self.emitted
    }

    /// The mid-stream error the vendor sent, if any (also returned once by `feed`).
    pub fn failure(&self) -> Option<&UpstreamError> {
        self.failure.as_ref()
    }
}

/// Appends `path` to the base URL, before any query string (Azure's `?api-version=`).
fn endpoint(base_url: &str, path: &str) -> String {
    let (base, query) = base_url.split_once('?').map_or((base_url, None), |(b, q)| (b, Some(q)));
    let url = format!("{}{path}", base.trim_end_matches('/'));
    match query {
        Some(q) => format!("{url}?{q}"),
        None => url,
    }
}

/// Content type, the credential per `dep.auth`, the adapter's own headers, then `quirks.headers`
/// (which replace a header of the same name).
fn headers(dep: &Deployment, credential: &str, own: &[(&str, &str)]) -> Vec<(String, String)> {
    let bearer = || ("authorization".to_string(), format!("Bearer {credential}"));
    let auth = match (&dep.auth, dep.provider) {
        (AuthScheme::Header { name }, _) => (name.clone(), credential.to_string()),
        (AuthScheme::Bearer, _) | (AuthScheme::Default, ProviderKind::Openai) => bearer(),
        (AuthScheme::Default, ProviderKind::Anthropic) => ("x-api-key".to_string(), credential.to_string()),
    };
    let mut out = vec![("content-type".to_string(), "application/json".to_string()), auth];
    out.extend(own.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    for (name, value) in &dep.quirks.headers {
        out.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        out.push((name.clone(), value.clone()));
    }
    out
}

/// A 2xx body as JSON: empty means the vendor sent nothing (a breaker failure), garbage is a server
/// error. `Ok` only for a body that is UTF-8, so a door may pass it on as bytes unchecked.
fn read_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, UpstreamError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(UpstreamError::empty_response(200, "the upstream returned an empty body"));
    }
    crate::support::lone_surrogates::parse_slice(body, "vendor answer")
        .map_err(|e| UpstreamError::malformed(200, format!("the upstream returned a malformed body: {e}")))
}

#[cfg(test)]
pub(crate) mod testing {
    use crate::config::routes::Deployment;

    pub fn deployment(provider: &str) -> Deployment {
        let (base, model) = match provider {
            "anthropic" => ("https://api.anthropic.com/v1", "claude-sonnet-4-5"),
            _ => ("https://api.openai.com/v1/", "gpt-4o-mini"),
        };
        serde_json::from_value(serde_json::json!({
            "provider": provider, "base_url": base, "model": model, "credential": "VENDOR_KEY"
        }))
        .unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::deployment;
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_follow_auth_scheme_and_quirks() {
        let mut dep = deployment("anthropic");
        let h = headers(&dep, "k", &[("anthropic-version", "2023-06-01")]);
        assert_eq!(h[1], ("x-api-key".to_string(), "k".to_string()));
        dep.auth = AuthScheme::Bearer;
        dep.quirks.headers.insert("Anthropic-Version".into(), "2024-01-01".into());
        dep.quirks.headers.insert("anthropic-beta".into(), "prompt-caching-2024-07-31".into());
        let h = headers(&dep, "k", &[("anthropic-version", "2023-06-01")]);
        assert_eq!(
            h,
            vec![
                ("content-type".into(), "application/json".into()),
                ("authorization".into(), "Bearer k".into()),
                ("Anthropic-Version".into(), "2024-01-01".into()),
                ("anthropic-beta".into(), "prompt-caching-2024-07-31".into()),
            ]
        );
        let mut dep = deployment("openai");
        dep.auth = AuthScheme::Header { name: "api-key".into() };
        assert_eq!(headers(&dep, "k", &[])[1], ("api-key".to_string(), "k".to_string()));
    }

    #[test]
    fn a_lone_surrogate_in_a_json_answer_is_replaced_not_a_502() {
        let openai = br#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,
            "message":{"role":"assistant","content":"Hi\ud800!"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;
        let anthropic = br#"{"id":"m","type":"message","role":"assistant","model":"c","stop_reason":"end_turn",
            "content":[{"type":"text","text":"Hi\ud800!"}],"usage":{"input_tokens":3,"output_tokens":2}}"#;
        // OpenAI-format bodies pass through byte for byte: the escape reaches the client intact.
        let got = translate_chat_response(&deployment("openai"), openai.to_vec(), 1).unwrap();
        assert_eq!((&got.body[..], got.usage.map(|u| u.output)), (&openai[..], Some(2)));
        // Translated answers cannot hold the lone half in a Rust string: U+FFFD takes its place.
        let got = translate_chat_response(&deployment("anthropic"), anthropic.to_vec(), 1).unwrap();
        let v: Value = serde_json::from_slice(&got.body).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "Hi\u{fffd}!");
        assert_eq!(got.usage.map(|u| u.output), Some(2));
    }

    #[test]
    fn endpoint_keeps_query_after_path() {
        assert_eq!(
            endpoint("https://api.deepseek.com/", "/chat/completions"),
            "https://api.deepseek.com/chat/completions"
        );
        assert_eq!(
            endpoint("https://x.openai.azure.com/openai/deployments/gpt4o?api-version=2024-10-21", "/chat/completions"),
            "https://x.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"
        );
    }

    #[test]
    fn embeddings_only_for_openai_compatible() {
        let body = json!({"model": "embed", "input": ["a", "b"], "encoding_format": "float"});
        let call = build_embeddings(&deployment("openai"), &body, "k").unwrap();
        assert_eq!(call.url, "https://api.openai.com/v1/embeddings");
        let sent: Value = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(sent, json!({"model": "gpt-4o-mini", "input": ["a", "b"], "encoding_format": "float"}));
        let err = build_embeddings(&deployment("anthropic"), &body, "k").unwrap_err();
        assert_eq!((err.status, err.code.as_str()), (400, "unsupported_endpoint"));
    }

    #[test]
    fn empty_and_malformed_bodies_are_upstream_failures() {
        for dep in [deployment("openai"), deployment("anthropic")] {
            let empty = translate_chat_response(&dep, b" \n".to_vec(), 0).unwrap_err();
            assert_eq!(empty.class, ErrorClass::EmptyResponse);
            assert!(empty.class.counts_for_breaker());
            let garbage = translate_chat_response(&dep, b"<html>502</html>".to_vec(), 0).unwrap_err();
            assert_eq!(garbage.class, ErrorClass::ServerError);
        }
    }

    #[test]
    fn translator_ignores_input_after_failure_and_terminator() {
        let dep = deployment("anthropic");
        let mut t = StreamTranslator::new(&dep, false, 1);
        let mut out = Vec::new();
        let err = t.feed(
            b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n",
            &mut out,
        );
        assert_eq!(err.map(|e| e.class), Some(ErrorClass::ServerError));
        assert!(!t.emitted_any() && out.is_empty());
        assert_eq!(t.feed(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", &mut out), None);
        assert_eq!(t.finish(&mut out), StreamEnd::Truncated);
        assert_eq!(t.failure().map(|e| e.message.as_str()), Some("boom"));
        assert!(out.is_empty());
    }
}
