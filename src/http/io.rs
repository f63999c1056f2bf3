//! Building responses and reading request bodies.

use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::incoming::Incoming;
use crate::http::reply::Reply;
use worker::{ResponseBody, ResponseBuilder};

/// Largest request body accepted; image-bearing chat requests can be several MiB.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// A body declared larger than the limit but under this is read and dropped before the 413, so
/// the client, still writing, reads the answer instead of a connection reset; past it, closing
/// is cheaper than reading.
const MAX_DRAINED_BYTES: usize = 4 * MAX_BODY_BYTES;

pub fn error_response(err: &ApiError, request_id: Option<&str>) -> Reply {
    let mut reply = Reply::json(err.status, err.to_json().into_bytes());
    set_error_headers(&mut reply, err, request_id);
    reply
}

/// The headers every error answer carries, whatever its format: `retry-after`, the request id
/// and the error's own (a limit's scope and reset).
pub fn set_error_headers(reply: &mut Reply, err: &ApiError, request_id: Option<&str>) {
    if let Some(s) = err.retry_after_s {
        reply.set_header("retry-after", &s.to_string());
    }
    if let Some(id) = request_id {
        reply.set_header("x-request-id", id);
    }
    for (name, value) in &err.headers {
        reply.set_header(name, value);
    }
}

/// An SSE answer whose body is made from a Rust stream (a cached answer's replay).
pub fn sse_response<S>(stream: S) -> Result<Reply, ApiError>
where
    S: futures::Stream<Item = worker::Result<Vec<u8>>> + 'static,
{
    let response = ResponseBuilder::new().from_stream(stream).map_err(|e| ApiError::internal(e.to_string()))?;
    match response.body() {
        ResponseBody::Stream(stream) => Ok(Reply::sse(stream.clone())),
        _ => Err(ApiError::internal("a stream's answer has no stream")),
    }
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
    let body = match declared {
        Some(_) => req.bytes().await.map_err(unreadable)?,
        // No length to check first (a chunked upload): read it piece by piece so an endless one
        // is refused at the limit instead of filling the isolate's memory.
        None => read_capped(req).await?,
    };
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::body_too_large(MAX_BODY_BYTES));
    }
    Ok(body)
}

fn unreadable(e: worker::Error) -> ApiError {
    ApiError::invalid_request(codes::UNREADABLE_BODY, e.to_string())
}

/// A body of undeclared length, kept up to `MAX_BODY_BYTES` and drained up to `MAX_DRAINED_BYTES`.
async fn read_capped(req: &Incoming) -> Result<Vec<u8>, ApiError> {
    use futures::StreamExt;
    let Some(mut stream) = req.stream() else { return Ok(Vec::new()) };
    let mut body = CappedBody::default();
    while let Some(chunk) = stream.next().await {
        if !body.push(&chunk.map_err(unreadable)?) {
            break;
        }
    }
    body.finish()
}

/// The pieces of a body read so far: kept while under the limit, only counted past it.
#[derive(Default)]
struct CappedBody {
    kept: Vec<u8>,
    seen: usize,
}

impl CappedBody {
    /// Whether reading should go on.
    fn push(&mut self, chunk: &[u8]) -> bool {
        self.seen = self.seen.saturating_add(chunk.len());
        if self.seen <= MAX_BODY_BYTES {
            self.kept.extend_from_slice(chunk);
        } else {
            self.kept = Vec::new();
        }
        self.seen <= MAX_DRAINED_BYTES
    }

    fn finish(self) -> Result<Vec<u8>, ApiError> {
        if self.seen > MAX_BODY_BYTES {
            return Err(ApiError::body_too_large(MAX_BODY_BYTES));
        }
        Ok(self.kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undeclared_body_is_kept_under_the_limit_and_refused_past_it() {
        let mut body = CappedBody::default();
        assert!(body.push(b"{\"a\":"));
        assert!(body.push(b"1}"));
        assert_eq!(body.finish().unwrap(), b"{\"a\":1}");

        let mut exact = CappedBody::default();
        assert!(exact.push(&vec![b'x'; MAX_BODY_BYTES]));
        assert_eq!(exact.finish().unwrap().len(), MAX_BODY_BYTES);

        let mut over = CappedBody::default();
        let piece = vec![b'x'; 1 << 20];
        let mut reads = 0;
        while over.push(&piece) {
            reads += 1;
            assert!(reads < 64, "reading stops past the drain limit");
        }
        assert!(over.kept.is_empty(), "nothing past the limit is held");
        assert_eq!(over.seen, MAX_DRAINED_BYTES + piece.len());
        assert_eq!(over.finish().unwrap_err().status, 413);
        assert!(CappedBody::default().finish().unwrap().is_empty());
    }
}
