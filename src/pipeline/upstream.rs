//! Fetching from a vendor with real timeouts: a timed-out attempt aborts its fetch. How long
//! each wait may last comes from the attempt's clock (`pipeline::timeouts`); how large an answer
//! may grow, from the route (`pipeline::answer_limit`).

use crate::http::header_map::{HeaderMap, HeaderText};
use crate::pipeline::answer_limit::AnswerLimit;
use crate::pipeline::stream_body::BodyReader;
use crate::pipeline::timeouts::Wait;
use crate::providers::{rate_headers, ErrorClass, UpstreamCall, UpstreamError};
use crate::support::promise;
use worker::js_sys::{self, Uint8Array};
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::web_sys;

/// A vendor response whose headers have arrived; a JSON answer's (or an error's) body is already
/// read, a stream's is still coming.
pub struct UpstreamResponse {
    pub status: u16,
    /// The headers the gateway reads (`rate_headers::READ`), fetched in the one call.
    pub headers: HeaderMap,
    /// A stream's body reader, kept only for a stream.
    reader: Option<web_sys::ReadableStreamDefaultReader>,
    /// The whole body, or why it could not be read, for an answer that does not stream.
    body: Option<Result<Vec<u8>, UpstreamError>>,
    /// Aborting it cancels the stream still being read.
    pub abort: AbortHandle,
}

/// Cancels an upstream fetch (at most once; later calls do nothing).
pub struct AbortHandle(Option<web_sys::AbortController>);

impl AbortHandle {
    pub fn abort(&mut self) {
        if let Some(controller) = self.0.take() {
            controller.abort();
        }
    }
}

fn failure(class: ErrorClass, message: String) -> UpstreamError {
    UpstreamError { class, status: 0, message, retry_after_ms: None, vendor_code: None }
}

/// The header carrying the gateway's request id upstream (OpenAI's documented correlation header;
/// other vendors ignore it), so a request can be traced across the gateway's and the vendor's logs.
pub const CORRELATION_HEADER: &str = "x-client-request-id";

// One call into the runtime per attempt: the fetch, the wait for its headers, the body read in one
// `arrayBuffer()` (or counted chunk by chunk against the limit when its length is unknown) and one
// timer for both waits, in JS. From wasm each of these was a promise (or a timer closure) woken
// through the futures queue: four per JSON answer instead of one.
#[wasm_bindgen(inline_js = "
export function exchange(url, headerText, body, headersMs, bodyMs, limit, stream) {
  const headers = Object.create(null);
  const p = headerText.split('\\n');
  for (let i = 0; i + 1 < p.length; i += 2) headers[p[i]] = p[i + 1];
  const ctl = new AbortController();
  const start = Date.now();
  return new Promise((resolve) => {
    let got = null, done = false, timer;
    const finish = (out) => { if (!done) { done = true; clearTimeout(timer); resolve(out); } };
    const described = (res, out) => { out.status = res.status; out.headers = res.headers; return out; };
    const expire = () => {
      if (done) return;
      if (got === null) { done = true; ctl.abort(); resolve({ kind: 1 }); return; }
      const left = start + bodyMs - Date.now();
      if (left > 0) { timer = setTimeout(expire, left); return; }
      done = true; ctl.abort(); resolve(described(got, { kind: 2 }));
    };
    timer = setTimeout(expire, headersMs);
    fetch(url, { method: 'POST', headers, body: body.slice(), signal: ctl.signal }).then(async (res) => {
      if (done) return;
      got = res;
      if (stream && res.status >= 200 && res.status < 300) {
        finish(described(res, { kind: 0, reader: res.body === null ? null : res.body.getReader(), abort: ctl }));
        return;
      }
      const length = res.headers.get('content-length');
      const encoding = res.headers.get('content-encoding');
      const plain = encoding === null || encoding.trim().toLowerCase() === 'identity';
      const declared = plain && length !== null && /^\\s*\\d+\\s*$/.test(length) ? Number(length) : -1;
      try {
        if (declared > limit) { ctl.abort(); finish(described(res, { kind: 5, size: declared })); return; }
        if (declared >= 0) { finish(described(res, { kind: 0, body: new Uint8Array(await res.arrayBuffer()) })); return; }
        const parts = [];
        let seen = 0;
        if (res.body !== null) {
          const reader = res.body.getReader();
          for (;;) {
            const { done: end, value } = await reader.read();
            if (end) break;
            if (done) return;
            seen += value.byteLength;
            if (seen > limit) { ctl.abort(); finish(described(res, { kind: 5, size: seen })); return; }
            parts.push(value);
          }
        }
        const whole = new Uint8Array(seen);
        let at = 0;
        for (const part of parts) { whole.set(part, at); at += part.byteLength; }
        finish(described(res, { kind: 0, body: whole }));
      } catch (e) {
        finish(described(res, { kind: 4, error: String(e) }));
      }
    }, (e) => finish({ kind: 3, error: String(e) }));
  });
}
")]
extern "C" {
    /// Sends the call and settles with an `Exchanged` (never rejects); a header the runtime
    /// refuses fails the fetch (kind 3), though `HeaderText::add` refuses what it can first.
    #[wasm_bindgen(catch)]
    fn exchange(
        url: &str,
        header_text: &str,
        body: &[u8],
        headers_ms: f64,
        body_ms: f64,
        limit: f64,
        stream: bool,
    ) -> Result<js_sys::Promise, JsValue>;

    /// What `exchange` settled with.
    type Exchanged;
    /// 0 answered, 1 no headers in time, 2 no whole body in time, 3 the fetch failed, 4 reading
    /// the body failed, 5 the body is over the limit.
    #[wasm_bindgen(method, getter)]
    fn kind(this: &Exchanged) -> u8;
    #[wasm_bindgen(method, getter)]
    fn status(this: &Exchanged) -> u16;
    #[wasm_bindgen(method, getter)]
    fn headers(this: &Exchanged) -> web_sys::Headers;
    #[wasm_bindgen(method, getter)]
    fn body(this: &Exchanged) -> Option<Uint8Array>;
    #[wasm_bindgen(method, getter)]
    fn size(this: &Exchanged) -> f64;
    #[wasm_bindgen(method, getter)]
    fn error(this: &Exchanged) -> String;
    #[wasm_bindgen(method, getter)]
    fn reader(this: &Exchanged) -> Option<web_sys::ReadableStreamDefaultReader>;
    #[wasm_bindgen(method, getter)]
    fn abort(this: &Exchanged) -> Option<web_sys::AbortController>;
}

thread_local! {
    /// The vendor headers the gateway reads (`rate_headers::READ`), made a JS string once per isolate.
    static READ_NAMES: JsValue = JsValue::from_str(rate_headers::READ);
}

/// Sends the call and, unless it is a stream being answered, reads its whole body: fails with
/// `headers`' expiry if no response headers arrive within it; a body that does not arrive within
/// `body`'s wait, or grows past `limit`, is aborted and kept as the answer's failure. A body over
/// the limit is refused by its declared length when it has one, else cut off as it grows.
pub async fn send(
    call: &UpstreamCall,
    request_id: &str,
    headers: Wait,
    body: Wait,
    limit: AnswerLimit,
    stream: bool,
) -> Result<UpstreamResponse, UpstreamError> {
    let mut text = HeaderText::default();
    let invalid = |e: String| failure(ErrorClass::Connection, format!("invalid upstream header: {e}"));
    text.add(CORRELATION_HEADER, request_id).map_err(invalid)?;
    // Vendors compress only when asked; the runtime's fetch decodes gzip, so usage stays readable.
    text.add("accept-encoding", "gzip").map_err(invalid)?;
    for (name, value) in &call.headers {
        text.add(name, value).map_err(invalid)?;
    }
    let pending =
        exchange(&call.url, text.as_str(), &call.body, headers.ms as f64, body.ms as f64, limit.max() as f64, stream)
            .map_err(|e| invalid(worker::Error::from(e).to_string()))?;
    let out: Exchanged = match promise::settled(&pending).await {
        Ok(value) => value.unchecked_into(),
        Err(e) => {
            return Err(failure(
                ErrorClass::Connection,
                format!("upstream connection failed: {}", worker::Error::from(e)),
            ))
        }
    };
    let kind = out.kind();
    match kind {
        1 => return Err(headers.expired()),
        3 => return Err(failure(ErrorClass::Connection, format!("upstream connection failed: {}", out.error()))),
        _ => {}
    }
    let read = match kind {
        0 => out.body().map(|bytes| Ok(bytes.to_vec())),
        2 => Some(Err(body.expired())),
        4 => Some(Err(failure(ErrorClass::Connection, format!("reading upstream body failed: {}", out.error())))),
        _ => Some(Err(limit.check_declared(out.size() as u64).err().unwrap_or_else(|| limit.exceeded()))),
    };
    Ok(UpstreamResponse {
        status: out.status(),
        headers: READ_NAMES.with(|names| HeaderMap::of_named(&out.headers(), names)),
        reader: out.reader(),
        body: read,
        abort: AbortHandle(out.abort()),
    })
}

/// The body `send` read (empty for a stream, whose body is read with `body_stream`).
pub fn read_body(upstream: &mut UpstreamResponse) -> Result<Vec<u8>, UpstreamError> {
    upstream.body.take().unwrap_or_else(|| Ok(Vec::new()))
}

/// A stream's body, read chunk by chunk with `next_chunk`.
pub fn body_stream(upstream: &mut UpstreamResponse) -> Result<BodyReader, UpstreamError> {
    let reader = upstream.reader.take();
    reader.map(BodyReader::new).ok_or_else(|| failure(ErrorClass::Connection, "upstream body unreadable".into()))
}

pub fn header<'a>(upstream: &'a UpstreamResponse, name: &str) -> Option<&'a str> {
    upstream.headers.get(name)
}
