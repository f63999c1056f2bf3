//! Building responses and reading request bodies.

use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::incoming::Incoming;
use worker::{web_sys, Response, ResponseBuilder};

/// Largest request body accepted; image-bearing chat requests can be several MiB.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// A body declared larger than the limit but under this is read and dropped before the 413, so
/// the client, still writing, reads the answer instead of a connection reset; past it, closing
/// is cheaper than reading.
const MAX_DRAINED_BYTES: usize = 4 * MAX_BODY_BYTES;

pub fn json_response(status: u16, body: Vec<u8>) -> Result<Response, ApiError> {
    ResponseBuilder::new()
        .with_status(status)
        .with_header("content-type", "application/json")
        .map_err(|e| ApiError::internal(e.to_string()))
        .map(|b| b.fixed(body))
}

pub fn error_response(err: &ApiError, request_id: Option<&str>) -> Response {
    let mut builder = ResponseBuilder::new().with_status(err.status);
    let mut headers = vec![("content-type", "application/json".to_string())];
    if let Some(s) = err.retry_after_s {
        headers.push(("retry-after", s.to_string()));
    }
    if let Some(id) = request_id {
        headers.push(("x-request-id", id.to_string()));
    }
    for (name, value) in &err.headers {
        headers.push((name, value.clone()));
    }
    for (name, value) in headers {
        builder = match builder.with_header(name, &value) {
            Ok(b) => b,
            Err(_) => ResponseBuilder::new().with_status(err.status),
        };
    }
    builder.fixed(err.to_json().into_bytes())
}

pub fn sse_response<S>(stream: S) -> Result<Response, ApiError>
where
    S: futures::Stream<Item = worker::Result<Vec<u8>>> + 'static,
{
    sse_builder()?.from_stream(stream).map_err(|e| ApiError::internal(e.to_string()))
}

/// An SSE answer whose body is a stream the runtime already holds.
pub fn sse_stream(body: web_sys::ReadableStream) -> Result<Response, ApiError> {
    sse_builder().map(|b| b.stream(body))
}

fn sse_builder() -> Result<ResponseBuilder, ApiError> {
    ResponseBuilder::new()
        .with_status(200)
        .with_header("content-type", "text/event-stream; charset=utf-8")
        .and_then(|b| b.with_header("cache-control", "no-cache"))
        .map_err(|e| ApiError::internal(e.to_string()))
}

async fn drain(req: &Incoming) {
    use futures::StreamExt;
    if let Some(mut body) = req.stream() {
        while let Some(Ok(_)) = body.next().await {}
    }
}

/// Reads the body, refusing anything over `MAX_BODY_BYTES` (by header first, then by size).
pub async fn read_body(req: &Incoming) -> Result<Vec<u8>, ApiError> {
    let declared = req.headers.get("content-length").and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY_BYTES) {
        if n <= MAX_DRAINED_BYTES {
            drain(req).await;
        }
        return Err(ApiError::body_too_large(MAX_BODY_BYTES));
    }
    let body = req.bytes().await.map_err(|e| ApiError::invalid_request(codes::UNREADABLE_BODY, e.to_string()))?;
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::body_too_large(MAX_BODY_BYTES));
    }
    Ok(body)
}
