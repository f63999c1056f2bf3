//! A tiny client for the gateway's OpenAI-compatible API, recording when stream events arrive.

use std::io::Read;
use std::time::{Duration, Instant};

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Asserts an OpenAI-format error and returns its `error` object.
    pub fn error(&self, status: u16) -> serde_json::Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        let v = self.json();
        let e = v["error"].clone();
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "error without message: {}", self.body);
        assert!(e["type"].is_string(), "error without type: {}", self.body);
        assert!(e["code"].is_string(), "error without code: {}", self.body);
        e
    }
}

pub struct StreamReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// `data:` payloads with the time since the request was sent.
    pub events: Vec<(Duration, String)>,
    /// When the body ended, since the request was sent.
    pub ended: Duration,
}

impl StreamReply {
    pub fn chunks(&self) -> Vec<serde_json::Value> {
        self.events
            .iter()
            .filter(|(_, d)| d != "[DONE]")
            .map(|(_, d)| serde_json::from_str(d).expect("chunk JSON"))
            .collect()
    }

    pub fn text(&self) -> String {
        self.chunks().iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string)).collect()
    }

    pub fn done(&self) -> bool {
        self.events.last().is_some_and(|(_, d)| d == "[DONE]")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).build()
}

/// The status, headers and body of an answer the caller sent itself.
pub fn collect(resp: ureq::Response) -> Reply {
    let status = resp.status();
    let headers =
        resp.headers_names().into_iter().map(|n| (n.clone(), resp.header(&n).unwrap_or("").to_string())).collect();
    let body = resp.into_string().unwrap_or_default();
    Reply { status, headers, body }
}

pub fn request(method: &str, url: &str, key: Option<&str>, body: Option<&str>) -> Reply {
    let mut req = agent().request(method, url).set("content-type", "application/json");
    if let Some(k) = key {
        req = req.set("authorization", &format!("Bearer {k}"));
    }
    let result = match body {
        Some(b) => req.send_string(b),
        None => req.call(),
    };
    match result {
        Ok(resp) | Err(ureq::Error::Status(_, resp)) => collect(resp),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

pub fn post(url: &str, key: &str, body: &serde_json::Value) -> Reply {
    request("POST", url, Some(key), Some(&body.to_string()))
}

pub fn post_with(url: &str, key: &str, body: &serde_json::Value, headers: &[(&str, &str)]) -> Reply {
    let mut req =
        agent().post(url).set("content-type", "application/json").set("authorization", &format!("Bearer {key}"));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    match req.send_string(&body.to_string()) {
        Ok(resp) | Err(ureq::Error::Status(_, resp)) => collect(resp),
        Err(e) => panic!("POST {url}: {e}"),
    }
}

/// Posts and reads the SSE body incrementally, timestamping each event as it arrives.
pub fn stream(url: &str, key: &str, body: &serde_json::Value) -> StreamReply {
    let sent = Instant::now();
    let result = agent()
        .post(url)
        .set("authorization", &format!("Bearer {key}"))
        .set("content-type", "application/json")
        .send_string(&body.to_string());
    let resp = match result {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    let status = resp.status();
    let headers =
        resp.headers_names().into_iter().map(|n| (n.clone(), resp.header(&n).unwrap_or("").to_string())).collect();
    let mut reader = resp.into_reader();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = find_event_end(&buf) {
            let raw: Vec<u8> = buf.drain(..end).collect();
            let text = String::from_utf8_lossy(&raw);
            let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            if !data.is_empty() {
                events.push((sent.elapsed(), data.join("\n")));
            }
        }
    }
    StreamReply { status, headers, events, ended: sent.elapsed() }
}

fn find_event_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\n\n").map(|p| p + 2)
}
