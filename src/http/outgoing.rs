//! The reply handed to the runtime in one call: the `Response` is made with its status and body,
//! then its own headers are set from one text. worker's conversion built a `ResponseInit` field by
//! field and a `Headers` object the runtime then copied, each step a crossing into JS; a stream's
//! response is built once its first token has come, so each crossing delayed that token.

use crate::http::error::ApiError;
use crate::http::reply::{Body, Reply};
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::web_sys;

// Setting the new response's own headers costs less than a `Headers` (or an object) in the
// init, which the runtime copies: a median 9.2 µs against 12.5 for a JSON answer's eight headers
// (`scripts/lib/bench/js_parts.cjs`). A header the runtime refuses is left out, not fatal.
#[wasm_bindgen(inline_js = "
export function respond(body, stream, status, text) {
  const r = new Response(stream !== undefined ? stream : body === undefined ? null : body.slice(), { status });
  const h = r.headers, p = text.split('\\n');
  for (let i = 0; i + 1 < p.length; i += 2) { try { h.set(p[i], p[i + 1]); } catch (e) {} }
  return r;
}
")]
extern "C" {
    /// `body` is a view of wasm memory: copied before the runtime holds it; `stream` is the body
    /// instead when given. Throws (a `RangeError`) only for a status the runtime refuses.
    #[wasm_bindgen(catch)]
    fn respond(
        body: Option<&[u8]>,
        stream: Option<&web_sys::ReadableStream>,
        status: u16,
        text: &str,
    ) -> Result<web_sys::Response, worker::wasm_bindgen::JsValue>;
}

/// The runtime's response for `reply`, with `x-request-id` when one is given.
pub fn into_runtime(mut reply: Reply, request_id: Option<&str>) -> web_sys::Response {
    if let Some(id) = request_id {
        reply.set_header("x-request-id", id);
    }
    let (body, stream) = match &reply.body {
        Body::Bytes(bytes) => (Some(bytes.as_slice()), None),
        Body::Empty => (None, None),
        Body::Stream(stream) => (None, Some(stream)),
    };
    match respond(body, stream, reply.status, reply.headers().as_str()) {
        Ok(raw) => raw,
        Err(e) => {
            let err = ApiError::internal(format!("the gateway's answer could not be made: {}", worker::Error::from(e)));
            let fallback = Reply::json(err.status, err.to_json().into_bytes());
            respond(fallback.bytes(), None, fallback.status, fallback.headers().as_str())
                .unwrap_or_else(|_| web_sys::Response::error())
        }
    }
}
