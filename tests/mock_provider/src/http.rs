//! Minimal HTTP/1.1: request parsing (Content-Length and chunked bodies) and
//! the response model shared by all endpoints.

use crate::sse::Sse;
use serde_json::Value;
use std::io::{self, BufRead, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

pub const MAX_BODY: usize = 32 * 1024 * 1024;
const MAX_LINE: usize = 16 * 1024;
const MAX_HEADERS: usize = 200;

#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Arc<Vec<u8>>,
    pub keep_alive: bool,
    /// The TCP connection that carried it (set by the server; none in unit tests).
    pub connection: Option<Arc<Connection>>,
}

/// One accepted TCP connection: a caller that keeps its connections (a pool) sends several
/// requests over one, and one that cancels a body mid-way closes it.
#[derive(Debug, Default)]
pub struct Connection {
    /// 1-based, in accept order.
    pub id: u64,
    /// Requests read from it so far.
    pub requests: AtomicU64,
    /// False once the peer closed it (or it failed).
    pub open: AtomicBool,
}

impl Connection {
    pub fn new(id: u64) -> Self {
        Connection { id, requests: AtomicU64::new(0), open: AtomicBool::new(true) }
    }
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Percent-decodes the value; `+` stays literal because model names use it.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
            .find(|(k, _)| percent_decode(k) == name)
            .map(|(_, v)| percent_decode(v))
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug)]
pub enum ReadError {
    /// Peer closed, idle timeout or socket error: just drop the connection.
    Closed,
    TooLarge {
        path: String,
    },
    Bad(String),
}

impl From<io::Error> for ReadError {
    fn from(_: io::Error) -> Self {
        ReadError::Closed
    }
}

/// Reads one request; `out` receives `100 Continue` when the client asks for it.
pub fn read_request(r: &mut impl BufRead, out: &mut impl Write) -> Result<Request, ReadError> {
    let mut line = Vec::new();
    let request_line = loop {
        if read_line(r, &mut line)? == 0 {
            return Err(ReadError::Closed);
        }
        let text = trim_crlf(&line);
        if !text.is_empty() {
            break text.to_string();
        }
    };
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(ReadError::Bad(format!("bad request line `{request_line}`")));
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req =
        Request { method: method.to_string(), path: path.to_string(), query: query.to_string(), ..Request::default() };
    loop {
        if read_line(r, &mut line)? == 0 {
            return Err(ReadError::Closed);
        }
        let text = trim_crlf(&line);
        if text.is_empty() {
            break;
        }
        if req.headers.len() >= MAX_HEADERS {
            return Err(ReadError::Bad("too many headers".into()));
        }
        let Some((name, value)) = text.split_once(':') else {
            return Err(ReadError::Bad(format!("bad header line `{text}`")));
        };
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim().to_string();
        match req.headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            None => req.headers.push((name, value)),
        }
    }
    let connection = req.header("connection").unwrap_or("").to_ascii_lowercase();
    req.keep_alive =
        if version == "HTTP/1.0" { connection.contains("keep-alive") } else { !connection.contains("close") };
    let chunked = req.header("transfer-encoding").is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    let length = match req.header("content-length") {
        Some(v) if !chunked => {
            Some(v.parse::<usize>().map_err(|_| ReadError::Bad(format!("bad content-length `{v}`")))?)
        }
        _ => None,
    };
    if length.is_some_and(|n| n > MAX_BODY) {
        return Err(ReadError::TooLarge { path: req.path });
    }
    let expects_body = chunked || length.is_some_and(|n| n > 0);
    let wants_continue = req.header("expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
    if expects_body && wants_continue {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        out.flush()?;
    }
    let body = if chunked {
        read_chunked(r, &req.path)?
    } else {
        let mut body = vec![0; length.unwrap_or(0)];
        r.read_exact(&mut body)?;
        body
    };
    req.body = Arc::new(body);
    Ok(req)
}

fn read_chunked(r: &mut impl BufRead, path: &str) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    let mut line = Vec::new();
    loop {
        if read_line(r, &mut line)? == 0 {
            return Err(ReadError::Closed);
        }
        let text = trim_crlf(&line);
        let size_hex = text.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_hex, 16).map_err(|_| ReadError::Bad(format!("bad chunk size `{text}`")))?;
        if size == 0 {
            loop {
                if read_line(r, &mut line)? == 0 || trim_crlf(&line).is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(ReadError::TooLarge { path: path.to_string() });
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        read_line(r, &mut line)?;
    }
}

fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> Result<usize, ReadError> {
    buf.clear();
    let n = r.take(MAX_LINE as u64).read_until(b'\n', buf)?;
    if n == MAX_LINE && buf.last() != Some(&b'\n') {
        return Err(ReadError::Bad("line too long".into()));
    }
    Ok(n)
}

fn trim_crlf(line: &[u8]) -> &str {
    std::str::from_utf8(line).unwrap_or("").trim_end_matches(['\r', '\n'])
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    pub delay_first_ms: u64,
    pub delay_ms: u64,
    pub cut_after: Option<u64>,
    pub stall_after: Option<u64>,
    pub error_after: Option<u64>,
    pub ping_ms: Option<u64>,
    /// A stream's connection is held this long after its last event before the body ends.
    pub linger_ms: u64,
    /// A JSON body goes out chunked (64 KiB chunks), without `Content-Length`.
    pub chunked: bool,
}

#[derive(Debug)]
pub enum Body {
    Full { content_type: &'static str, bytes: Vec<u8> },
    Sse(Sse),
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    pub timing: Timing,
    /// Send the body gzip-encoded (`content-encoding: gzip`), as vendors do when the client accepts it.
    pub gzip: bool,
}

impl Response {
    pub fn json(status: u16, v: &Value) -> Response {
        Response::full(status, "application/json", v.to_string().into_bytes())
    }

    pub fn text(status: u16, s: &str) -> Response {
        Response::full(status, "text/plain; charset=utf-8", s.as_bytes().to_vec())
    }

    pub fn sse(sse: Sse) -> Response {
        Response { status: 200, headers: Vec::new(), body: Body::Sse(sse), timing: Timing::default(), gzip: false }
    }

    fn full(status: u16, content_type: &'static str, bytes: Vec<u8>) -> Response {
        let body = Body::Full { content_type, bytes };
        Response { status, headers: Vec::new(), body, timing: Timing::default(), gzip: false }
    }

    pub fn with_header(mut self, name: &str, value: impl ToString) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    #[cfg(test)]
    pub fn body_json(&self) -> Option<Value> {
        match &self.body {
            Body::Full { bytes, .. } => serde_json::from_slice(bytes).ok(),
            Body::Sse(_) => None,
        }
    }
}

/// Status line plus headers; `length` None means chunked.
pub fn head(resp: &Response, content_type: &str, length: Option<usize>, keep_alive: bool) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    out.push_str(&format!("content-type: {content_type}\r\n"));
    match length {
        Some(n) => out.push_str(&format!("content-length: {n}\r\n")),
        None => out.push_str("transfer-encoding: chunked\r\ncache-control: no-cache\r\n"),
    }
    if resp.gzip {
        out.push_str("content-encoding: gzip\r\n");
    }
    for (name, value) in &resp.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(if keep_alive { "connection: keep-alive\r\n\r\n" } else { "connection: close\r\n\r\n" });
    out.into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Site Overloaded",
        _ if status < 500 => "Client Error",
        _ => "Server Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn parse(raw: &str) -> (Result<Request, ReadError>, Vec<u8>) {
        let mut out = Vec::new();
        let r = read_request(&mut Cursor::new(raw.as_bytes().to_vec()), &mut out);
        (r, out)
    }

    #[test]
    fn content_length_body_and_headers() {
        let (r, _) = parse(
            "POST /v1/chat/completions?model=a%2Bb+c HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nContent-Length: 2\r\n\r\n{}",
        );
        let r = r.unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/chat/completions"));
        assert_eq!(r.header("x-api-key"), Some("k"));
        assert_eq!(r.body.as_slice(), b"{}");
        assert!(r.keep_alive);
        assert_eq!(r.query_param("model").as_deref(), Some("a+b+c"));
    }

    #[test]
    fn chunked_body_with_continue() {
        let (r, out) = parse(
            "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n",
        );
        assert_eq!(r.unwrap().body.as_slice(), b"abcde");
        assert_eq!(out, b"HTTP/1.1 100 Continue\r\n\r\n");
    }

    #[test]
    fn connection_close_and_http10() {
        assert!(!parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").0.unwrap().keep_alive);
        assert!(!parse("GET / HTTP/1.0\r\n\r\n").0.unwrap().keep_alive);
        assert!(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").0.unwrap().keep_alive);
    }

    #[test]
    fn too_large_and_bad_input() {
        let big = format!("POST /v1/messages HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_BODY + 1);
        assert!(matches!(parse(&big).0, Err(ReadError::TooLarge { path }) if path == "/v1/messages"));
        let chunk = format!("POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n", MAX_BODY + 1);
        assert!(matches!(parse(&chunk).0, Err(ReadError::TooLarge { .. })));
        assert!(matches!(parse("garbage\r\n\r\n").0, Err(ReadError::Bad(_))));
        assert!(matches!(parse("").0, Err(ReadError::Closed)));
    }

    #[test]
    fn head_formats() {
        let resp = Response::text(429, "x").with_header("retry-after", 1);
        let h = String::from_utf8(head(&resp, "text/plain", Some(1), true)).unwrap();
        assert!(h.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(h.contains("content-length: 1\r\nretry-after: 1\r\n"));
        assert!(h.ends_with("connection: keep-alive\r\n\r\n"));
    }
}
