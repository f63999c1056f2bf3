use e2e::client::stream;
use e2e::{stack, KEY};
use serde_json::json;
use std::time::Duration;

fn assert_incremental(model: &str) {
    let s = stack();
    let body = json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "count"}]});
    let r = stream(&s.url("/v1/chat/completions"), KEY, &body);
    assert_eq!(r.status, 200);
    assert!(r.done(), "stream must end with [DONE]: {:?}", r.events);
    let content: Vec<Duration> = r
        .events
        .iter()
        .filter(|(_, d)| d.contains("\"content\":\"") && !d.contains("\"content\":\"\""))
        .map(|(t, _)| *t)
        .collect();
    assert!(content.len() >= 5, "expected several content chunks, got {:?}", r.events);
    // The mock sleeps 150 ms before each chunk: arrivals must spread out, not land together at the end.
    let spread = *content.last().unwrap() - content[0];
    assert!(spread >= Duration::from_millis(150 * (content.len() as u64 - 2)), "chunks arrived together: {content:?}");
    // Most chunks arrive apart; a busy machine may stall the runtime long enough to merge a few.
    let apart = content.windows(2).filter(|pair| pair[1] - pair[0] >= Duration::from_millis(60)).count();
    assert!(apart * 2 >= content.len() - 1, "chunks arrived in bunches: {content:?}");
    assert!(!r.text().is_empty());
}

#[test]
fn openai_stream_arrives_chunk_by_chunk() {
    assert_incremental("slow-openai");
}

#[test]
fn anthropic_stream_is_translated_chunk_by_chunk() {
    assert_incremental("slow-anthropic");
}

#[test]
fn stream_usage_only_when_asked() {
    let s = stack();
    let plain = json!({"model": "gpt-4o-mini", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = stream(&s.url("/v1/chat/completions"), KEY, &plain);
    assert!(r.chunks().iter().all(|c| c["usage"].is_null()), "usage chunk leaked: {:?}", r.events);
    let mut asked = plain.clone();
    asked["stream_options"] = json!({"include_usage": true});
    for model in ["gpt-4o-mini", "claude-sonnet"] {
        asked["model"] = json!(model);
        let r = stream(&s.url("/v1/chat/completions"), KEY, &asked);
        let last = r.chunks().last().cloned().unwrap();
        assert_eq!(last["choices"], json!([]), "{model}: {:?}", r.events);
        assert!(last["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{model}");
    }
}

/// Usage asked or not (its chunk passes, or is held back), the same ending.
#[test]
fn stream_cut_midway_ends_with_an_error_event() {
    let s = stack();
    for asked in [false, true] {
        let body = json!({"model": "cut-stream", "stream": true, "stream_options": {"include_usage": asked},
                          "messages": [{"role": "user", "content": "hi"}]});
        let r = stream(&s.url("/v1/chat/completions"), KEY, &body);
        assert_eq!(r.status, 200);
        let last = &r.events.last().expect("events").1;
        let v: serde_json::Value = serde_json::from_str(last).expect("last event is JSON");
        assert!(v["error"]["message"].is_string(), "last event must be an error: {last}");
        assert_eq!(v["error"]["code"], "upstream_stream_interrupted", "{last}");
        assert!(!v["error"]["message"].as_str().unwrap().contains("could not connect"), "bytes were relayed: {last}");
        assert!(!r.text().is_empty(), "content before the cut is delivered");
        assert!(r.chunks().len() >= 2, "{asked}: every event parses: {:?}", r.events);
    }
    assert_eq!(s.mock_calls("e2e-fallback-cut"), 0, "no fallback after the first byte");
}

/// A client that asked for usage has nothing held back from it: the gateway's stream is the mock's
/// own, byte for byte, once ids and times are set aside.
#[test]
fn a_stream_whose_client_asked_for_usage_arrives_as_the_vendor_sent_it() {
    let s = stack();
    let body = json!({"model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "the same words twice"}]});
    let raw = |url: &str, key: &str| {
        let r = ureq::post(url)
            .set("authorization", &format!("Bearer {key}"))
            .set("content-type", "application/json")
            .send_string(&body.to_string())
            .expect("200");
        without_ids(&r.into_string().expect("body"))
    };
    let through = raw(&s.url("/v1/chat/completions"), KEY);
    let direct = raw(&format!("{}/v1/chat/completions", s.mock), "sk-mock-openai-local");
    assert!(through.contains("\"usage\":{") && through.ends_with("data: [DONE]\n\n"), "{through}");
    assert_eq!(through, direct);
}

/// A stream that ends with the vendor's last event (`[DONE]`, `message_stop`) leaves the vendor's
/// connection to the runtime's pool: its body is read to the end, not cancelled (a cancelled body
/// closes the connection: a new one, in production a new TLS handshake, for every stream).
#[test]
fn a_finished_stream_leaves_the_vendor_connection_for_the_next_request() {
    let s = stack();
    let openai = json!({"model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true},
                        "messages": [{"role": "user", "content": "keep the line"}]});
    let anthropic = json!({"model": "claude-sonnet", "stream": true, "max_tokens": 64,
                           "messages": [{"role": "user", "content": "keep the line"}]});
    for (path, body) in [("/v1/chat/completions", openai), ("/v1/messages", anthropic)] {
        let r = stream(&s.url(path), KEY, &body);
        assert_eq!(r.status, 200, "{path}: {:?}", r.events);
        let id = r.header("x-request-id").expect("x-request-id").to_string();
        // A cancelled body's connection is closed at once; a generous wait for a busy machine.
        std::thread::sleep(Duration::from_millis(500));
        let call = s.upstream_calls_for(&id).pop().expect("the upstream call");
        let c = &call["connection"];
        // Open, or already carrying a later request (another test's): either way it was kept.
        let kept = c["open"] == true || c["requests"].as_u64() > c["request"].as_u64();
        assert!(kept, "{path}: the vendor's connection was closed after a whole stream: {c}");
    }
}

/// The text with each `"id":"…"` and `"created":N` value emptied, and the reply's number (`" 41."`)
/// left out: the mock makes new ones per call.
fn without_ids(text: &str) -> String {
    let numbered = |t: &str| t.trim_start_matches(|c: char| c.is_ascii_digit()).starts_with(".\"");
    let mut out = text
        .split("\"content\":\" ")
        .map(|part| {
            if numbered(part) {
                part.trim_start_matches(|c: char| c.is_ascii_digit()).to_string()
            } else {
                part.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\"content\":\" ");
    for (field, end) in [("\"id\":\"", '"'), ("\"created\":", ',')] {
        let mut from = 0;
        while let Some(at) = out[from..].find(field).map(|i| from + i + field.len()) {
            let stop = out[at..].find(end).map_or(out.len(), |i| at + i);
            out.replace_range(at..stop, "");
            from = at;
        }
    }
    out
}

#[test]
fn streams_close_with_the_vendors_last_event_not_its_connection_end() {
    // The mock holds each connection 20 s after the last event (`linger_ms`); the client's stream
    // must end with that event, at every door and translation (10 s: generous on a busy machine).
    let s = stack();
    let ask = |path: &str, body: serde_json::Value, last: &str| {
        let r = stream(&s.url(path), KEY, &body);
        assert_eq!(r.status, 200, "{path} {body}: {:?}", r.events);
        let (_, data) = r.events.last().unwrap_or_else(|| panic!("{path} {body}: no events"));
        assert!(data.contains(last), "{path} {body}: ends with {data}");
        assert!(r.ended < Duration::from_secs(10), "{path} {body}: the body ended after {:?}", r.ended);
    };
    let chat = |model: &str| json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    ask("/v1/chat/completions", chat("linger-chat"), "[DONE]");
    ask("/v1/chat/completions", chat("linger-claude"), "[DONE]");
    let responses = |model: &str| json!({"model": model, "stream": true, "input": "hi"});
    ask("/v1/responses", responses("linger-resp"), "\"response.completed\"");
    ask("/v1/responses", responses("linger-chat"), "\"response.completed\"");
    let messages = |model: &str| json!({"model": model, "stream": true, "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]});
    ask("/v1/messages", messages("linger-claude"), "\"message_stop\"");
    ask("/v1/messages", messages("linger-chat"), "\"message_stop\"");
}
