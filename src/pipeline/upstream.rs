//! Fetching from a vendor with real timeouts: a timed-out attempt aborts its fetch. How long
//! each wait may last comes from the attempt's clock (`pipeline::timeouts`).

use crate::pipeline::answer_limit::AnswerLimit;
use crate::pipeline::timeouts::Wait;
use crate::providers::{ErrorClass, UpstreamCall, UpstreamError};
use futures::future::{select, Either};
use std::time::Duration;
use worker::{AbortController, ByteStream, Delay, Fetch, Headers, Method, Request, RequestInit, Response};

/// A vendor response whose headers have arrived.
pub struct UpstreamResponse {
    pub status: u16,
    pub headers: Headers,
    pub response: Response,
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
    let headers = Headers::new();
    let _ = headers.set(CORRELATION_HEADER, request_id);
    // Vendors compress only when asked; the runtime's fetch decodes gzip, so usage stays readable.
    let _ = headers.set("accept-encoding", "gzip");
    for (name, value) in &call.headers {
        headers
            .set(name, value)
            .map_err(|e| failure(ErrorClass::Connection, format!("invalid upstream header {name}: {e}")))?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_headers(headers).with_body(Some(call.body.as_str().into()));
    let request = Request::new_with_init(&call.url, &init)
        .map_err(|e| failure(ErrorClass::Connection, format!("invalid upstream request: {e}")))?;
    let abort = AbortController::default();
    let signal = abort.signal();
    let fetch = Fetch::Request(request);
    let sending = Box::pin(fetch.send_with_signal(&signal));
    let timer = Box::pin(Delay::from(Duration::from_millis(wait.ms)));
    let raced = select(sending, timer).await;
    match raced {
        Either::Left((Ok(response), _)) => {
            let headers = response.headers().clone();
            Ok(UpstreamResponse { status: response.status_code(), headers, response, abort: AbortHandle(Some(abort)) })
        }
        Either::Left((Err(e), _)) => Err(failure(ErrorClass::Connection, format!("upstream connection failed: {e}"))),
        Either::Right(_) => {
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
        within(async { upstream.response.bytes().await.map_err(read_failed) }, wait.ms).await
    } else {
        within(read_capped(&mut upstream.response, limit), wait.ms).await
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
async fn read_capped(response: &mut Response, mut limit: AnswerLimit) -> Result<Vec<u8>, UpstreamError> {
    use futures::StreamExt;
    let mut stream = response.stream().map_err(read_failed)?;
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(read_failed)?;
        limit.take(chunk.len())?;
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

pub fn body_stream(upstream: &mut UpstreamResponse) -> Result<ByteStream, UpstreamError> {
    upstream.response.stream().map_err(|e| failure(ErrorClass::Connection, format!("upstream body unreadable: {e}")))
}

/// The next chunk of a streamed body, or the wait's expiry.
pub async fn next_chunk(stream: &mut ByteStream, wait: Wait) -> Result<Option<Vec<u8>>, UpstreamError> {
    use futures::StreamExt;
    let next = stream.next();
    let timer = Box::pin(Delay::from(Duration::from_millis(wait.ms)));
    let raced = select(next, timer).await;
    match raced {
        Either::Left((Some(Ok(bytes)), _)) => Ok(Some(bytes)),
        Either::Left((Some(Err(e)), _)) => Err(failure(ErrorClass::Connection, format!("upstream stream broke: {e}"))),
        Either::Left((None, _)) => Ok(None),
        Either::Right(_) => Err(wait.expired()),
    }
}

pub fn header(upstream: &UpstreamResponse, name: &str) -> Option<String> {
    upstream.headers.get(name).ok().flatten()
}
