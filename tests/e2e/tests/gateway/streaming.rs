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

#[test]
fn stream_cut_midway_ends_with_an_error_event() {
    let s = stack();
    let body = json!({"model": "cut-stream", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = stream(&s.url("/v1/chat/completions"), KEY, &body);
    assert_eq!(r.status, 200);
    let last = &r.events.last().expect("events").1;
    let v: serde_json::Value = serde_json::from_str(last).expect("last event is JSON");
    assert!(v["error"]["message"].is_string(), "last event must be an error: {last}");
    assert_eq!(v["error"]["code"], "upstream_stream_interrupted", "{last}");
    assert!(!v["error"]["message"].as_str().unwrap().contains("could not connect"), "bytes were relayed: {last}");
    assert!(!r.text().is_empty(), "content before the cut is delivered");
    assert_eq!(s.mock_calls("e2e-fallback-cut"), 0, "no fallback after the first byte");
}
