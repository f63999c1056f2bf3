//! The response handed to the runtime in one call: worker's conversion builds a `ResponseInit`,
//! sets its status and headers, allocates and fills a `Uint8Array` and constructs the
//! `Response`, each a separate crossing into JS, and the request id was one more. A stream's
//! response too: it is built once its first token has come, so each crossing delays that token.

use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::{web_sys, Response, ResponseBody};

#[wasm_bindgen(inline_js = "
export function respond(body, stream, status, headers, name, value) {
  if (name.length > 0) headers.set(name, value);
  return new Response(stream !== undefined ? stream : body === undefined ? null : body.slice(), { status, headers });
}
")]
extern "C" {
    /// `body` is a view of wasm memory: copied before the runtime holds it; `stream` is the body
    /// instead when given.
    #[wasm_bindgen(catch)]
    fn respond(
        body: Option<&[u8]>,
        stream: Option<&web_sys::ReadableStream>,
        status: u16,
        headers: &web_sys::Headers,
        name: &str,
        value: &str,
    ) -> Result<web_sys::Response, worker::wasm_bindgen::JsValue>;
}

/// The runtime's response for `response`, with `x-request-id` when one is given.
pub fn into_runtime(response: Response, request_id: Option<&str>) -> web_sys::Response {
    let (name, value) = request_id.map_or(("", ""), |id| ("x-request-id", id));
    let (body, stream) = match response.body() {
        ResponseBody::Body(bytes) => (Some(bytes.as_slice()), None),
        ResponseBody::Empty => (None, None),
        ResponseBody::Stream(stream) => (None, Some(stream)),
    };
    match respond(body, stream, response.status_code(), &response.headers().0, name, value) {
        Ok(raw) => raw,
        // An invalid status or header: what worker's own conversion does with it.
        Err(_) => response.into(),
    }
}
