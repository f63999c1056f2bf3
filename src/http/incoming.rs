//! The client's request as the runtime hands it over, read once: method, path, query and the
//! headers the gateway reads in three calls into JS. worker's `Request` wrapper would also read
//! the `cf` object and parse the URL with the `url` crate, and every header lookup through it is
//! two more calls.

use crate::http::header_map::HeaderMap;
use worker::wasm_bindgen::JsValue;
use worker::{web_sys, ByteStream, Method};

/// Every request header the gateway reads (a header not named here reads as absent; a unit test
/// in `gateway` holds every literal header name in the source to this list or the vendor's).
pub const READ: &[&str] = &[
    "authorization",
    "x-api-key",
    "content-length",
    "cache-control",
    "idempotency-key",
    "x-gateway-priority",
    "x-gateway-task",
    "x-gateway-tags",
    "x-gateway-timeout-ms",
    "x-gateway-max-wait-ms",
    "x-gateway-cache-ttl",
    "x-session-id",
    "anthropic-version",
    "anthropic-beta",
    "x-claude-code-session-id",
];

thread_local! {
    /// `READ` as one JS string, made once per isolate.
    static READ_NAMES: JsValue = JsValue::from_str(&READ.join("\n"));
}

pub struct Incoming {
    raw: web_sys::Request,
    pub method: Method,
    pub path: String,
    /// The query string without its `?`, when there is one.
    pub query: Option<String>,
    pub headers: HeaderMap,
}

impl Incoming {
    pub fn new(raw: web_sys::Request) -> Incoming {
        let (path, query) = split_url(&raw.url());
        let headers = READ_NAMES.with(|names| HeaderMap::of_named(&raw.headers(), names));
        Incoming { method: Method::from(raw.method()), path, query, headers, raw }
    }

    /// The whole body in one `arrayBuffer()` call.
    pub async fn bytes(&self) -> Result<Vec<u8>, worker::Error> {
        array_buffer(self.raw.array_buffer()).await
    }

    /// The body as a stream of chunks (to discard an oversized one without holding it).
    pub fn stream(&self) -> Option<ByteStream> {
        self.raw.body().map(ByteStream::from)
    }
}

/// A body the runtime reads whole (`arrayBuffer()`), copied into wasm in one call: worker's own
/// `bytes()` reads it chunk by chunk through a stream reader.
pub async fn array_buffer(
    promise: Result<worker::js_sys::Promise, worker::wasm_bindgen::JsValue>,
) -> Result<Vec<u8>, worker::Error> {
    use worker::wasm_bindgen::JsCast;
    let buffer: worker::js_sys::ArrayBuffer = crate::support::promise::settled(&promise?).await?.unchecked_into();
    Ok(worker::js_sys::Uint8Array::new(&buffer).to_vec())
}

/// The path (percent-encoded, as sent) and query of an absolute URL, without parsing the rest.
pub fn split_url(url: &str) -> (String, Option<String>) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let path_start = url[after_scheme..].find('/').map_or(url.len(), |i| after_scheme + i);
    let rest = &url[path_start..];
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query.to_string())),
        None => (rest, None),
    };
    (if path.is_empty() { "/".to_string() } else { path.to_string() }, query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_query_of_absolute_urls() {
        let q = |s: &str| Some(s.to_string());
        assert_eq!(split_url("http://127.0.0.1:8787/v1/messages?beta=true"), ("/v1/messages".into(), q("beta=true")));
        assert_eq!(split_url("https://gw.example.com/v1/chat/completions"), ("/v1/chat/completions".into(), None));
        assert_eq!(split_url("https://gw.example.com"), ("/".into(), None));
        // The runtime serialises URLs (WHATWG): an http(s) URL always has a path, if only "/".
        assert_eq!(split_url("https://gw.example.com/?x=1"), ("/".into(), q("x=1")));
        assert_eq!(split_url("https://h/a%20b/?x=1&y=2#frag"), ("/a%20b/".into(), q("x=1&y=2")));
        assert_eq!(split_url("https://h/p#frag?notquery"), ("/p".into(), None));
        assert_eq!(split_url("https://h/p?"), ("/p".into(), q("")));
    }
}
