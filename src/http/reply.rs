//! The gateway's reply to its client before the runtime sees it: status, headers as text and body.
//! worker's `Response` made a `Headers` object in JS up front and set each header with a call of
//! its own; a reply's headers are collected in wasm and set in the one call that makes the runtime's
//! response (`outgoing::into_runtime`).

use crate::http::header_map::HeaderText;
use worker::web_sys;

pub enum Body {
    Empty,
    Bytes(Vec<u8>),
    /// A stream the runtime already holds (the relay's, or one made from a Rust stream).
    Stream(web_sys::ReadableStream),
}

pub struct Reply {
    pub status: u16,
    headers: HeaderText,
    pub body: Body,
}

impl Reply {
    pub fn new(status: u16, body: Body) -> Reply {
        Reply { status, headers: HeaderText::default(), body }
    }

    /// A JSON body with its content type.
    pub fn json(status: u16, body: Vec<u8>) -> Reply {
        let mut reply = Reply::new(status, Body::Bytes(body));
        reply.set_header("content-type", "application/json");
        reply
    }

    /// A server-sent-events answer: 200, its content type, and no caching on the way.
    pub fn sse(stream: web_sys::ReadableStream) -> Reply {
        let mut reply = Reply::new(200, Body::Stream(stream));
        reply.set_header("content-type", "text/event-stream; charset=utf-8");
        reply.set_header("cache-control", "no-cache");
        reply
    }

    /// Sets `name` (a later value wins); a value the runtime would refuse is left out.
    pub fn set_header(&mut self, name: &str, value: &str) {
        let _ = self.headers.add(name, value);
    }

    /// Adds every header of `text`, in order.
    pub fn set_headers(&mut self, text: &HeaderText) {
        self.headers.extend(text);
    }

    /// The value of `name` (lower-case) the client will see: the last one set.
    pub fn sent_header(&self, name: &str) -> Option<&str> {
        self.headers.pairs().filter(|(n, _)| *n == name).last().map(|(_, v)| v)
    }

    /// Each header once, with the value the client will see, in the order first set.
    pub fn header_pairs(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = Vec::new();
        for (name, value) in self.headers.pairs() {
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(pair) => pair.1 = value,
                None => out.push((name, value)),
            }
        }
        out
    }

    pub fn headers(&self) -> &HeaderText {
        &self.headers
    }

    /// The body's bytes when it is not a stream.
    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.body {
            Body::Bytes(bytes) => Some(bytes),
            Body::Empty => Some(&[]),
            Body::Stream(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_as_the_client_will_see_them() {
        let mut reply = Reply::json(201, b"{}".to_vec());
        reply.set_header("X-Gateway-Replayed", "false");
        reply.set_header("x-gateway-replayed", "true");
        reply.set_header("x-bad", "line\nbreak");
        assert_eq!(reply.status, 201);
        assert_eq!(reply.sent_header("content-type"), Some("application/json"));
        assert_eq!(reply.sent_header("x-gateway-replayed"), Some("true"), "the last one set wins");
        assert_eq!(reply.sent_header("x-bad"), None, "a refused value is left out");
        assert_eq!(
            reply.header_pairs(),
            vec![("content-type", "application/json"), ("x-gateway-replayed", "true")],
            "each name once, in the order first set"
        );
        assert_eq!(reply.bytes(), Some(&b"{}"[..]));
        let mut text = HeaderText::default();
        text.add("x-gateway-cache", "hit").unwrap();
        text.add("age", "3").unwrap();
        reply.set_headers(&text);
        assert_eq!((reply.sent_header("x-gateway-cache"), reply.sent_header("age")), (Some("hit"), Some("3")));
        assert_eq!(Reply::new(204, Body::Empty).bytes(), Some(&[][..]));
    }
}
