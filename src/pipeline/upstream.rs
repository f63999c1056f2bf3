//! Fetching from a vendor with real timeouts: a timed-out attempt aborts its fetch. How long
//! each wait may last comes from the attempt's clock (`pipeline::timeouts`).

use crate::http::header_map::{HeaderMap, HeaderText};
use crate::http::incoming;
use crate::pipeline::answer_limit::AnswerLimit;
use crate::pipeline::timeouts::Wait;
use crate::providers::{ErrorClass, UpstreamCall, UpstreamError};
use futures::future::{select, Either};
use std::time::Duration;
use worker::js_sys::futures::JsFuture;
use worker::js_sys::{self, Uint8Array};
use worker::wasm_bindgen::JsCast;
use worker::{web_sys, AbortController, ByteStream, Delay, Headers};

/// A vendor response whose headers have arrived.
pub struct UpstreamResponse {
    pub status: u16,
    /// Read once: the rate-limit signals alone look up eight names.
    pub headers: HeaderMap,
    /// The runtime's own response: its body is read in one `arrayBuffer()` call or as a stream.
    response: web_sys::Response,
    /// Aborting it cancels the body still being read.
    pub abort: AbortHandle,
}

/// Cancels an upstream fetch (at most once; later calls do nothing).
pub struct AbortHandle(Option<AbortController>);

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

/// Sends the call; fails with the wait's expiry if no response headers arrive within it.
pub async fn send(call: &UpstreamCall, request_id: &str, wait: Wait) -> Result<UpstreamResponse, UpstreamError> {
    let mut text = HeaderText::default();
    let invalid = |e: String| failure(ErrorClass::Connection, format!("invalid upstream header: {e}"));
    text.add(CORRELATION_HEADER, request_id).map_err(invalid)?;
    // Vendors compress only when asked; the runtime's fetch decodes gzip, so usage stays readable.
    text.add("accept-encoding", "gzip").map_err(invalid)?;
    for (name, value) in &call.headers {
        text.add(name, value).map_err(invalid)?;
    }
    let headers = Headers::new();
    text.apply(&headers.0).map_err(invalid)?;
    let abort = AbortController::default();
    let signal = abort.signal();
    // The runtime's fetch(url, init) directly: no Request object, the body handed over as bytes.
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_headers(&headers.0);
    init.set_body(&Uint8Array::from(call.body.as_bytes()));
    init.set_signal(Some(&signal));
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    let sending = JsFuture::from(global.fetch_with_str_and_init(&call.url, &init));
    match within(sending, wait.ms).await {
        Some(Ok(value)) => {
            let response: web_sys::Response = value.unchecked_into();
            let headers = HeaderMap::of(&response.headers());
            Ok(UpstreamResponse { status: response.status(), headers, response, abort: AbortHandle(Some(abort)) })
        }
        Some(Err(e)) => {
            let e = worker::Error::from(e);
            Err(failure(ErrorClass::Connection, format!("upstream connection failed: {e}")))
        }
        None => {
            abort.abort();
            Err(wait.expired())
        }
    }
}

/// Reads a whole body within the route's `limit`, giving up (and aborting) when the wait runs out;
/// a body over the limit is refused by its declared length when it has one, else cut off as it
/// grows (and aborted).
pub async fn read_body(
    upstream: &mut UpstreamResponse,
    wait: Wait,
    limit: AnswerLimit,
) -> Result<Vec<u8>, UpstreamError> {
    let declared = header(upstream, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
    // The runtime decodes a compressed body: then its declared length bounds nothing.
    let plain = header(upstream, "content-encoding").is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
    let known = declared.filter(|_| plain);
    if let Some(Err(too_large)) = known.map(|n| limit.check_declared(n)) {
        upstream.abort.abort();
        return Err(too_large);
    }
    let read = if known.is_some() {
        // Declared and within the limit: one read, as before the limit existed.
        within(async { incoming::array_buffer(upstream.response.array_buffer()).await.map_err(read_failed) }, wait.ms)
            .await
    } else {
        within(read_capped(&upstream.response, limit), wait.ms).await
    };
    match read {
        Some(Ok(body)) => Ok(body),
        Some(Err(e)) => {
            upstream.abort.abort();
            Err(e)
        }
        None => {
            upstream.abort.abort();
            Err(wait.expired())
        }
    }
}

/// `work`'s output, or `None` once `timeout_ms` has passed.
async fn within<T>(work: impl std::future::Future<Output = T>, timeout_ms: u64) -> Option<T> {
    let timer = Box::pin(Delay::from(Duration::from_millis(timeout_ms)));
    match select(Box::pin(work), timer).await {
        Either::Left((out, _)) => Some(out),
        Either::Right(_) => None,
    }
}

fn read_failed(e: worker::Error) -> UpstreamError {
    failure(ErrorClass::Connection, format!("reading upstream body failed: {e}"))
}

/// Reads chunk by chunk, counting each against `limit`.
async fn read_capped(response: &web_sys::Response, mut limit: AnswerLimit) -> Result<Vec<u8>, UpstreamError> {
    use futures::StreamExt;
    let mut stream = byte_stream(response)?;
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(read_failed)?;
        limit.take(chunk.len())?;
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

pub fn body_stream(upstream: &mut UpstreamResponse) -> Result<ByteStream, UpstreamError> {
    byte_stream(&upstream.response)
}

fn byte_stream(response: &web_sys::Response) -> Result<ByteStream, UpstreamError> {
    let body = response.body().ok_or_else(|| failure(ErrorClass::Connection, "upstream body unreadable".into()))?;
    Ok(ByteStream::from(body))
}

/// The next chunk of a streamed body, or the wait's expiry.
pub async fn next_chunk(stream: &mut ByteStream, wait: Wait) -> Result<Option<Vec<u8>>, UpstreamError> {
    use futures::StreamExt;
    match within(stream.next(), wait.ms).await {
        Some(Some(Ok(bytes))) => Ok(Some(bytes)),
        Some(Some(Err(e))) => Err(failure(ErrorClass::Connection, format!("upstream stream broke: {e}"))),
        Some(None) => Ok(None),
        None => Err(wait.expired()),
    }
}

pub fn header<'a>(upstream: &'a UpstreamResponse, name: &str) -> Option<&'a str> {
    upstream.headers.get(name)
}
