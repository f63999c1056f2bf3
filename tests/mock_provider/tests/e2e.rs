//! Starts the real binary on port 0 and talks to it over raw TCP.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mock-provider"))
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn mock-provider");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("mock-provider listening on ")
            .unwrap_or_else(|| panic!("unexpected banner {line:?}"))
            .to_string();
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        Server { child, addr }
    }

    fn conn(&self) -> Conn {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn { reader: BufReader::new(stream) }
    }

    fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Resp {
        self.conn().send(method, path, headers, body.map(Value::to_string).as_deref())
    }

    fn get_json(&self, path: &str) -> Value {
        self.call("GET", path, &[], None).json()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Conn {
    reader: BufReader<TcpStream>,
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Chunk payloads with arrival times (chunked responses only).
    chunks: Vec<(Instant, String)>,
    /// Saw the terminating zero-size chunk (or the full Content-Length body).
    complete: bool,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// SSE events as (event name or "", data) from the chunks, one event per chunk.
    fn events(&self) -> Vec<(String, String)> {
        self.chunks
            .iter()
            .map(|(_, text)| {
                assert!(text.ends_with("\n\n"), "one whole event per chunk: {text:?}");
                let mut name = String::new();
                let mut data = String::new();
                for line in text.trim_end().lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_string();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = d.to_string();
                    }
                }
                (name, data)
            })
            .collect()
    }
}

impl Conn {
    fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Resp {
        let mut out = format!("{method} {path} HTTP/1.1\r\nhost: test\r\n");
        for (n, v) in headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        if let Some(b) = body {
            out.push_str(&format!("content-type: application/json\r\ncontent-length: {}\r\n", b.len()));
        }
        out.push_str("\r\n");
        out.push_str(body.unwrap_or(""));
        self.reader.get_mut().write_all(out.as_bytes()).unwrap();
        self.read_response()
    }

    fn line(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\r', '\n']).to_string()),
        }
    }

    fn read_response(&mut self) -> Resp {
        let status_line = self.line().expect("status line");
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        while let Some(line) = self.line().filter(|l| !l.is_empty()) {
            let (n, v) = line.split_once(':').unwrap();
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let mut resp = Resp { status, headers, body: Vec::new(), chunks: Vec::new(), complete: false };
        if resp.header("transfer-encoding") == Some("chunked") {
            while let Some(size) = self.line() {
                let size = usize::from_str_radix(&size, 16).unwrap();
                if size == 0 {
                    self.line();
                    resp.complete = true;
                    break;
                }
                let mut data = vec![0; size + 2];
                if self.reader.read_exact(&mut data).is_err() {
                    break;
                }
                data.truncate(size);
                resp.body.extend_from_slice(&data);
                resp.chunks.push((Instant::now(), String::from_utf8(data).unwrap()));
            }
        } else {
            let len: usize = resp.header("content-length").unwrap().parse().unwrap();
            resp.body = vec![0; len];
            self.reader.read_exact(&mut resp.body).unwrap();
            resp.complete = true;
        }
        resp
    }
}

const OPENAI: &[(&str, &str)] = &[("authorization", "Bearer sk-test")];
const ANTHROPIC: &[(&str, &str)] = &[("x-api-key", "sk-ant-test"), ("anthropic-version", "2023-06-01")];

fn chat(model: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": "What is the weather?"}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

fn messages(model: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": "Hi"}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

fn weather_tools_openai() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location", "unit"]}}}])
}

#[test]
fn openai_json_completion() {
    let s = Server::start();
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&chat("gpt-4o-mini", json!({}))));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("x-request-id").is_some());
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(
        v["choices"][0],
        json!({"index": 0, "message": {"role": "assistant", "content": "Hello from gpt-4o-mini: this is reply number 1.", "refusal": null}, "logprobs": null, "finish_reason": "stop"})
    );
    // "user" + "What is the weather?" = 24 chars = 6 tokens.
    assert_eq!(v["usage"]["prompt_tokens"], 6);
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(v["usage"]["total_tokens"], 14);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(v["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

    let r = s.call("POST", "/v1/chat/completions", &[], Some(&chat("gpt-4o-mini", json!({}))));
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    let r = s.call("POST", "/v1/chat/completions", &[("api-key", "azure")], Some(&chat("m", json!({}))));
    assert_eq!(r.status, 200);
}

#[test]
fn openai_stream_with_include_usage() {
    let s = Server::start();
    let body = chat("gpt-4o-mini+words=4", json!({"stream": true, "stream_options": {"include_usage": true}}));
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&body));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.complete);
    let events = r.events();
    assert_eq!(events.len(), 1 + 4 + 1 + 1 + 1, "{events:?}");
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let id = &chunks[0]["id"];
    for c in &chunks {
        assert_eq!(&c["id"], id);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "gpt-4o-mini+words=4");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": "", "refusal": null}));
    let text: String = chunks[1..5].iter().map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
    assert_eq!(text, "Hello from gpt-4o-mini: this");
    for c in &chunks[..6] {
        assert!(c.as_object().unwrap().contains_key("usage"));
        assert_eq!(c["usage"], Value::Null);
    }
    assert_eq!(chunks[5]["choices"][0]["delta"], json!({}));
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[6]["choices"], json!([]));
    assert_eq!(chunks[6]["usage"]["completion_tokens"], 4);
    assert_eq!(chunks[6]["usage"]["total_tokens"], 10);
}

#[test]
fn openai_tool_call_stream() {
    let s = Server::start();
    let body = chat("gpt-4o", json!({"stream": true, "tools": weather_tools_openai(), "tool_choice": "auto"}));
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&body));
    let events = r.events();
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let first = &chunks[0]["choices"][0]["delta"];
    assert_eq!(first["role"], "assistant");
    let call = &first["tool_calls"][0];
    assert_eq!(call["index"], 0);
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"], json!({"name": "get_weather", "arguments": ""}));
    let fragments: Vec<&str> = chunks[1..chunks.len() - 1]
        .iter()
        .map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap())
        .collect();
    assert!(fragments.len() >= 3, "{fragments:?}");
    let args: Value = serde_json::from_str(&fragments.concat()).unwrap();
    assert_eq!(args, json!({"location": "mock", "unit": "celsius"}));
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn anthropic_json_and_auth() {
    let s = Server::start();
    let body = messages("claude-x+cached=4+cache_write=2", json!({"system": "sys"}));
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&body));
    assert_eq!(r.status, 200);
    assert!(r.header("request-id").unwrap().starts_with("req_"));
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-x+cached=4+cache_write=2");
    assert_eq!(v["content"], json!([{"type": "text", "text": "Hello from claude-x: this is reply number 1."}]));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["stop_sequence"], Value::Null);
    // "sys" + "user" + "Hi" = 9 chars = 3 tokens.
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 3, "output_tokens": 8, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 4,
            "cache_creation": {"ephemeral_5m_input_tokens": 2, "ephemeral_1h_input_tokens": 0}, "service_tier": "standard"})
    );

    let r = s.call("POST", "/v1/messages", &[("anthropic-version", "2023-06-01")], Some(&body));
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"], json!({"type": "authentication_error", "message": "x-api-key header is required"}));
    let r = s.call("POST", "/v1/messages", &[("x-api-key", "k")], Some(&body));
    assert_eq!((r.status, r.json()["error"]["type"].clone()), (400, json!("invalid_request_error")));
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&json!({"model": "c", "messages": []})));
    assert_eq!(r.json()["error"]["message"], "max_tokens: Field required");
}

#[test]
fn anthropic_stream_event_order_with_tool() {
    let s = Server::start();
    let tools = json!([{"name": "get_weather", "input_schema": {"type": "object",
        "properties": {"location": {"type": "string"}}, "required": ["location"]}}]);
    let body = messages("claude-x+words=3", json!({"stream": true, "tools": tools}));
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&body));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.complete);
    let events = r.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let data: Vec<Value> = events.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let json_deltas = names.len() - 11;
    assert!(json_deltas >= 4, "{names:?}");
    let mut expected = vec![
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
    ];
    expected.extend(std::iter::repeat_n("content_block_delta", json_deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    assert_eq!(data[0]["message"]["usage"]["output_tokens"], 1);
    assert_eq!(data[0]["message"]["content"], json!([]));
    assert_eq!(data[3]["delta"], json!({"type": "text_delta", "text": "Hello"}));
    assert_eq!(data[7]["content_block"]["type"], "tool_use");
    assert_eq!(data[7]["content_block"]["input"], json!({}));
    let partial: String = data[8..8 + json_deltas]
        .iter()
        .map(|d| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), json!({"location": "mock"}));
    let delta = &data[data.len() - 2];
    assert_eq!(delta["delta"], json!({"stop_reason": "tool_use", "stop_sequence": null}));
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 3);
}

#[test]
fn rate_limited_429_carries_headers() {
    let s = Server::start();
    let fault = [("authorization", "Bearer k"), ("x-mock-fault", "status=429,retry_after=2")];
    let r = s.call("POST", "/v1/chat/completions", &fault, Some(&chat("gpt-4o-mini", json!({}))));
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("2"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(r.header("x-ratelimit-reset-requests"), Some("2s"));
    assert!(r.header("x-ratelimit-limit-requests").is_some());
    assert!(r.header("x-ratelimit-limit-tokens").is_some());
    assert!(r.header("x-ratelimit-remaining-tokens").is_some());
    assert!(r.header("x-ratelimit-reset-tokens").is_some());
    let e = r.json()["error"].clone();
    assert_eq!((e["type"].as_str(), e["code"].as_str()), (Some("requests"), Some("rate_limit_exceeded")));

    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&messages("claude-x+status=429", json!({}))));
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("anthropic-ratelimit-requests-remaining"), Some("0"));
    let reset = r.header("anthropic-ratelimit-requests-reset").unwrap();
    assert!(reset.len() == 20 && reset.ends_with('Z') && reset.as_bytes()[10] == b'T', "{reset}");
    assert!(r.header("anthropic-ratelimit-tokens-limit").is_some());
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");

    let model = "gpt-4o-mini+remaining_requests=7+remaining_tokens=99+reset_ms=6000";
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&chat(model, json!({}))));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("7"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("99"));
    assert_eq!(r.header("x-ratelimit-reset-tokens"), Some("6s"));
    assert_eq!(r.header("retry-after"), None);
}

#[test]
fn quota_errors_in_each_vendor_format() {
    let s = Server::start();
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&chat("gpt-4o-mini+quota", json!({}))));
    assert_eq!(r.status, 429);
    let e = r.json()["error"].clone();
    assert_eq!((e["type"].as_str(), e["code"].as_str()), (Some("insufficient_quota"), Some("insufficient_quota")));
    assert!(e["message"].as_str().unwrap().starts_with("You exceeded your current quota"));
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&messages("claude-x+quota", json!({}))));
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["type"], "error");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("Your credit balance is too low"));
}

#[test]
fn cut_after_closes_without_terminator() {
    let s = Server::start();
    let body = chat("gpt-4o-mini+cut_after=3", json!({"stream": true}));
    let mut conn = s.conn();
    let r = conn.send("POST", "/v1/chat/completions", OPENAI, Some(&body.to_string()));
    assert_eq!(r.status, 200);
    assert!(!r.complete);
    let events = r.events();
    assert_eq!(events.len(), 1 + 3);
    assert!(events.iter().all(|(_, d)| d != "[DONE]"));
    let mut rest = Vec::new();
    assert_eq!(conn.reader.read_to_end(&mut rest).unwrap_or(0), 0);

    let body = messages("claude-x+cut_after=2", json!({"stream": true}));
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&body));
    assert!(!r.complete);
    let names: Vec<String> = r.events().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta"]);
}

#[test]
fn error_after_and_stall_after() {
    let s = Server::start();
    let body = chat("gpt-4o-mini+error_after=2", json!({"stream": true}));
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&body));
    assert!(r.complete);
    let events = r.events();
    assert_eq!(events.len(), 1 + 2 + 1);
    let err: Value = serde_json::from_str(&events[3].1).unwrap();
    assert_eq!(err["error"]["type"], "server_error");
    let body = messages("claude-x+error_after=1", json!({"stream": true}));
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&body));
    let (name, data) = r.events().pop().unwrap();
    assert_eq!(name, "error");
    assert_eq!(
        serde_json::from_str::<Value>(&data).unwrap(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    let body = chat("gpt-4o-mini+stall_after=1", json!({"stream": true})).to_string();
    let mut conn = s.conn();
    conn.reader.get_ref().set_read_timeout(Some(Duration::from_millis(700))).unwrap();
    let r = conn.send("POST", "/v1/chat/completions", OPENAI, Some(&body));
    assert!(!r.complete);
    assert_eq!(r.events().len(), 2);
}

#[test]
fn delay_ms_spreads_events_over_time() {
    let s = Server::start();
    let body = chat("gpt-4o-mini+words=4+delay_ms=80", json!({"stream": true}));
    let start = Instant::now();
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&body));
    assert!(r.complete);
    let times: Vec<Duration> = r.chunks.iter().map(|(t, _)| *t - start).collect();
    assert_eq!(times.len(), 1 + 4 + 1 + 1);
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(50), "{times:?}");
    }

    let body = chat("gpt-4o-mini+delay_first_ms=150", json!({}));
    let start = Instant::now();
    assert_eq!(s.call("POST", "/v1/chat/completions", OPENAI, Some(&body)).status, 200);
    assert!(start.elapsed() >= Duration::from_millis(150));
}

#[test]
fn counters_and_last_request() {
    let s = Server::start();
    let body = chat("gpt-4o-mini", json!({}));
    let headers = [("authorization", "Bearer sk-abc"), ("X-Custom", "v")];
    for _ in 0..2 {
        s.call("POST", "/v1/chat/completions", &headers, Some(&body));
    }
    s.call("POST", "/v1/chat/completions", OPENAI, Some(&chat("gpt-4o-mini+status=500", json!({}))));
    s.call("POST", "/v1/messages", ANTHROPIC, Some(&messages("claude-x", json!({}))));
    s.call("GET", "/v1/models", OPENAI, None);
    let calls = s.get_json("/_mock/calls");
    assert_eq!(calls["total"], 5);
    assert_eq!(calls["by_model"], json!({"gpt-4o-mini": 2, "gpt-4o-mini+status=500": 1, "claude-x": 1}));
    assert_eq!(calls["by_path"], json!({"/v1/chat/completions": 3, "/v1/messages": 1, "/v1/models": 1}));
    assert_eq!(s.get_json("/_mock/calls?model=gpt-4o-mini"), json!({"model": "gpt-4o-mini", "calls": 2}));
    assert_eq!(s.get_json("/_mock/calls?model=gpt-4o-mini%2Bstatus%3D500")["calls"], 1);
    let last = s.get_json("/_mock/last?model=gpt-4o-mini");
    assert_eq!(last["method"], "POST");
    assert_eq!(last["path"], "/v1/chat/completions");
    assert_eq!(last["headers"]["authorization"], "Bearer sk-abc");
    assert_eq!(last["headers"]["x-custom"], "v");
    assert_eq!(last["body"], body);
    assert_eq!(s.call("GET", "/_mock/health", &[], None).body, b"ok");
    assert_eq!(s.call("POST", "/_mock/reset", &[], None).status, 200);
    assert_eq!(s.get_json("/_mock/calls")["total"], 0);
    assert_eq!(s.call("GET", "/_mock/last?model=gpt-4o-mini", &[], None).status, 404);
}

#[test]
fn scripted_faults_with_times() {
    let s = Server::start();
    let set = json!({"model": "gpt-4o-mini", "fault": "status=503", "times": 2});
    assert_eq!(s.call("POST", "/_mock/faults", &[], Some(&set)).status, 200);
    let body = chat("gpt-4o-mini", json!({}));
    let statuses: Vec<u16> =
        (0..3).map(|_| s.call("POST", "/v1/chat/completions", OPENAI, Some(&body)).status).collect();
    assert_eq!(statuses, [503, 503, 200]);
    assert_eq!(s.get_json("/_mock/calls?model=gpt-4o-mini")["calls"], 3);

    let set = json!({"model": "claude-x", "fault": "status=529"});
    s.call("POST", "/_mock/faults", &[], Some(&set));
    for _ in 0..2 {
        let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&messages("claude-x", json!({}))));
        assert_eq!((r.status, r.json()["error"]["type"].clone()), (529, json!("overloaded_error")));
    }
    s.call("POST", "/_mock/faults", &[], Some(&json!({"model": "claude-x", "fault": null})));
    assert_eq!(s.call("POST", "/v1/messages", ANTHROPIC, Some(&messages("claude-x", json!({})))).status, 200);
    let bad = json!({"model": "m", "fault": "stauts=500"});
    assert_eq!(s.call("POST", "/_mock/faults", &[], Some(&bad)).status, 400);
}

#[test]
fn keep_alive_chunked_bodies_and_http_errors() {
    let s = Server::start();
    let mut conn = s.conn();
    for i in 1..=3 {
        let r = conn.send("POST", "/v1/chat/completions", OPENAI, Some(&chat("m", json!({})).to_string()));
        assert_eq!(r.status, 200);
        let content = r.json()["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        assert!(content.ends_with(&format!("number {i}.")), "{content}");
    }
    let stream = chat("m", json!({"stream": true})).to_string();
    assert!(conn.send("POST", "/v1/chat/completions", OPENAI, Some(&stream)).complete);
    assert_eq!(conn.send("GET", "/v1/models", OPENAI, None).json()["object"], "list");

    let body = chat("chunky", json!({})).to_string();
    let (a, b) = body.split_at(10);
    let raw = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nauthorization: Bearer k\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    conn.reader.get_mut().write_all(raw.as_bytes()).unwrap();
    assert_eq!(conn.read_response().json()["model"], "chunky");

    let r = s.call("POST", "/v1/nope", OPENAI, Some(&json!({})));
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["message"], "Invalid URL (POST /v1/nope)");
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&chat("m+statu=500", json!({}))));
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("unknown fault key `statu`"));

    let mut conn = s.conn();
    let huge = format!("POST /v1/messages HTTP/1.1\r\ncontent-length: {}\r\n\r\n", 33 * 1024 * 1024);
    conn.reader.get_mut().write_all(huge.as_bytes()).unwrap();
    let r = conn.read_response();
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["type"], "request_too_large");
}

#[test]
fn empty_and_malformed_bodies() {
    let s = Server::start();
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&chat("m+empty", json!({}))));
    assert_eq!((r.status, r.header("content-length")), (200, Some("0")));
    let r = s.call("POST", "/v1/chat/completions", OPENAI, Some(&chat("m+malformed", json!({}))));
    assert_eq!(r.status, 200);
    assert!(serde_json::from_slice::<Value>(&r.body).is_err());
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&messages("c+malformed", json!({"stream": true}))));
    assert!(r.complete);
    let bad = r.events().iter().filter(|(_, d)| serde_json::from_str::<Value>(d).is_err()).count();
    assert_eq!(bad, 1);
}

#[test]
fn embeddings_and_models() {
    let s = Server::start();
    let body = json!({"model": "text-embedding-3-small", "input": ["a", "b"]});
    let v = s.call("POST", "/v1/embeddings", OPENAI, Some(&body)).json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][1]["embedding"].as_array().unwrap().len(), 8);
    assert_eq!(v["usage"], json!({"prompt_tokens": 2, "total_tokens": 2}));
    let v = s.call("GET", "/v1/models", ANTHROPIC, None).json();
    assert_eq!(v["data"][0]["type"], "model");
}

#[test]
fn anthropic_prompt_cache_thinking_replay_and_raw_bodies() {
    let s = Server::start();
    let system = json!([{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]);
    let thinking = json!({"type": "enabled", "budget_tokens": 1024, "display": "omitted"});
    let first = messages(
        "claude-x",
        json!({"system": system, "thinking": thinking, "max_tokens": 2048,
        "context_management": {"edits": []}, "metadata": {"user_id": "{\"session_id\":\"s\"}"}}),
    );
    let headers =
        [ANTHROPIC, &[("anthropic-beta", "interleaved-thinking-2025-05-14"), ("x-client-request-id", "t1")]].concat();
    let r = s.call("POST", "/v1/messages?beta=true", &headers, Some(&first));
    assert_eq!(r.status, 200);
    assert!(r.header("anthropic-beta").is_none(), "betas are not echoed");
    let v = r.json();
    // text(4) + "You are terse."(14) + ephemeral(9) = 27 chars = 7 tokens written, then read.
    assert_eq!(v["usage"]["cache_creation"]["ephemeral_5m_input_tokens"], 7);
    assert_eq!(v["content"][0]["type"], "thinking");
    assert_eq!(v["content"][0]["thinking"], "");

    let mut next = first.clone();
    next["messages"] = json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": v["content"]},
        {"role": "user", "content": "Again"}]);
    let r = s.call("POST", "/v1/messages?beta=true", &headers, Some(&next));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        (
            r.json()["usage"]["cache_read_input_tokens"].clone(),
            r.json()["usage"]["cache_creation_input_tokens"].clone()
        ),
        (json!(7), json!(0))
    );

    next["messages"][1]["content"][0]["signature"] = json!("bm90IGEgc2lnbmF0dXJl");
    let r = s.call("POST", "/v1/messages", ANTHROPIC, Some(&next));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["message"], "messages.1.content.0: Invalid `signature` in `thinking` block");

    let seen = s.get_json("/_mock/calls?request_id=t1");
    assert_eq!(seen["calls"], 2);
    let recorded = &seen["requests"][0];
    assert_eq!(recorded["query"], "beta=true");
    assert_eq!(recorded["headers"]["anthropic-beta"], "interleaved-thinking-2025-05-14");
    assert_eq!(recorded["body_raw"], first.to_string(), "the bytes as sent");

    let counted = s.call("POST", "/v1/messages/count_tokens?beta=true", ANTHROPIC, Some(&first)).json();
    let u = &v["usage"];
    let sum = ["input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]
        .iter()
        .map(|k| u[*k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(counted["input_tokens"], sum);
}

#[test]
fn responses_stream_and_error_after() {
    let s = Server::start();
    let body = json!({"model": "gpt-x+words=3", "input": "Hi", "stream": true, "store": false});
    let r = s.call("POST", "/v1/responses", OPENAI, Some(&body));
    assert_eq!((r.status, r.header("content-type")), (200, Some("text/event-stream")));
    assert!(r.complete);
    let events = r.events();
    let data: Vec<Value> = events.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    for (i, ((name, _), d)) in events.iter().zip(&data).enumerate() {
        assert_eq!((d["type"].as_str(), d["sequence_number"].as_u64()), (Some(name.as_str()), Some(i as u64)));
    }
    let text: String = data
        .iter()
        .filter(|d| d["type"] == "response.output_text.delta")
        .map(|d| d["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "Hello from gpt-x:");
    let done = &data.last().unwrap()["response"];
    assert_eq!((done["status"].as_str(), done["store"].as_bool()), (Some("completed"), Some(false)));
    assert_eq!(done["usage"]["output_tokens"], 3);

    let failing = json!({"model": "gpt-x+error_after=1", "input": "Hi", "stream": true});
    let events = s.call("POST", "/v1/responses", OPENAI, Some(&failing)).events();
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(serde_json::from_str::<Value>(last).unwrap()["code"], "server_error");
    assert_eq!(s.call("POST", "/v1/responses", &[], Some(&body)).status, 401);
}
