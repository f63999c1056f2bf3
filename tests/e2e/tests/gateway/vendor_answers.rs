//! What a vendor answers, however odd or heavy (issue 18 items 2 and 6). A lone-surrogate escape (legal
//! JSON) reaches the client intact where the answer passes through, and as U+FFFD where it is
//! translated, on every door and both vendor formats, JSON and streams; never a dropped delta or a 502.
//! An answer over its route's `max_answer_bytes` is cut off while it is read.

use e2e::client::{post, post_with, stream, StreamReply};
use e2e::{stack, KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The escape as the mock sends it, after the reply's first word.
const RAW: &str = "Hello\\ud800";
/// What a translated answer carries instead: the replacement character.
const REPLACED: &str = "Hello\u{fffd}";

fn body(door: &str, model: &str, streamed: bool) -> Value {
    match door {
        "/v1/chat/completions" => {
            json!({"model": model, "stream": streamed, "messages": [{"role": "user", "content": "hi"}]})
        }
        "/v1/messages" => {
            json!({"model": model, "stream": streamed, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
        }
        _ => json!({"model": model, "stream": streamed, "input": "hi", "store": false}),
    }
}

/// Every data payload of a stream, JSON-decoded where it decodes, as one text to search.
fn decoded(r: &StreamReply) -> String {
    r.events
        .iter()
        .map(|(_, d)| serde_json::from_str::<Value>(d).map(|v| v.to_string()).unwrap_or_else(|_| d.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The stream ended as its door ends a complete answer, with no error event.
fn completed(door: &str, r: &StreamReply) -> bool {
    let last = r.events.last().map(|(_, d)| d.as_str()).unwrap_or("");
    let error =
        |d: &str| d.starts_with("{\"error\"") || d.contains("\"type\":\"error\"") || d.contains("response.failed");
    let no_error = !r.events.iter().any(|(_, d)| error(d));
    no_error
        && match door {
            "/v1/chat/completions" => last == "[DONE]",
            "/v1/messages" => last.contains("message_stop"),
            _ => r.events.iter().any(|(_, d)| d.contains("response.completed")),
        }
}

#[test]
fn a_lone_surrogate_escape_passes_through_or_is_replaced_on_every_door_never_dropped() {
    let s = stack();
    // (door, logical model, whether the door passes that vendor's answer through unchanged)
    let cases = [
        ("/v1/chat/completions", "surrogate-openai", true),
        ("/v1/chat/completions", "surrogate-anthropic", false),
        ("/v1/messages", "surrogate-anthropic", true),
        ("/v1/messages", "surrogate-openai-chat", false),
        ("/v1/responses", "surrogate-openai", true),
        ("/v1/responses", "surrogate-openai-chat", false),
        ("/v1/responses", "surrogate-anthropic", false),
    ];
    for (door, model, intact) in cases {
        let want = if intact { RAW } else { REPLACED };
        let r = post(&s.url(door), KEY, &body(door, model, false));
        assert_eq!(r.status, 200, "{door} {model} JSON: {}", r.body);
        let text = if intact {
            r.body.clone()
        } else {
            serde_json::from_str::<Value>(&r.body).expect("a translated answer is valid JSON").to_string()
        };
        assert!(text.contains(&format!("{want} from")), "{door} {model} JSON lost or garbled the word: {}", r.body);

        let r = stream(&s.url(door), KEY, &body(door, model, true));
        assert_eq!(r.status, 200, "{door} {model} stream");
        let text = decoded(&r);
        assert!(text.contains(want), "{door} {model} stream dropped the delta:\n{text}");
        assert!(text.contains(" from"), "{door} {model} stream lost the words after it:\n{text}");
        assert!(completed(door, &r), "{door} {model} stream did not complete cleanly:\n{text}");
    }
}

fn chat(model: &str, streamed: bool) -> Value {
    body("/v1/chat/completions", model, streamed)
}

/// The stream's last payload is the gateway's error event with `code`.
fn ends_with_error(r: &StreamReply, code: &str) -> bool {
    r.events.iter().rev().find(|(_, d)| d != "[DONE]").is_some_and(|(_, d)| d.contains(&format!("\"{code}\"")))
}

/// A route's `max_answer_bytes` cuts off a heavier answer while it is read, JSON or stream, with a
/// 502 in the door's format; the deployment is not blamed for the route's choice (item 2).
#[test]
fn an_answer_over_the_routes_max_answer_bytes_is_a_502_and_not_the_deployments_fault() {
    let s = stack();
    // 20,000 words are ~120 KB of JSON against a route allowing 64 KiB.
    let r = post(&s.url("/v1/chat/completions"), KEY, &chat("heavy-capped", false));
    let e = r.error(502);
    assert_eq!(e["code"], "upstream_answer_too_large", "{}", r.body);
    assert!(e["message"].as_str().unwrap().contains("65536"), "{}", r.body);
    assert_eq!(s.upstream_calls(&r).len(), 1, "not retried, no fallback");
    // The same deployment through a route with the default bound serves at once: its breaker
    // (which opens after one counted failure) did not count the cut-off answer.
    let roomy = post(&s.url("/v1/chat/completions"), KEY, &chat("heavy-roomy", false));
    assert_eq!(roomy.status, 200, "the deployment was blamed: {}", roomy.body);
    assert!(roomy.body.len() > 65_536);

    // A body without Content-Length is counted as it arrives.
    let r = post(&s.url("/v1/chat/completions"), KEY, &chat("heavy-chunked-capped", false));
    assert_eq!(r.error(502)["code"], "upstream_answer_too_large", "{}", r.body);

    // A stream is cut where it crosses the bound: what was relayed, then the error event.
    let r = stream(&s.url("/v1/chat/completions"), KEY, &chat("heavy-capped", true));
    assert_eq!(r.status, 200);
    assert!(r.events.len() > 10 && ends_with_error(&r, "upstream_answer_too_large"), "{:?}", r.events.last());
    let roomy = post(&s.url("/v1/chat/completions"), KEY, &chat("heavy-roomy", false));
    assert_eq!(roomy.status, 200, "the deployment was blamed for the stream: {}", roomy.body);

    // The Messages door says it in Anthropic's format, whose upstream failures are 500 `api_error`.
    let body =
        json!({"model": "heavy-capped-an", "max_tokens": 30000, "messages": [{"role": "user", "content": "hi"}]});
    let r = post_with(&s.url("/v1/messages"), KEY, &body, &[]);
    assert_eq!(r.status, 500, "{}", r.body);
    let v = r.json();
    assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some("api_error")), "{}", r.body);
    assert_eq!(r.header("x-gateway-error-code"), Some("upstream_answer_too_large"));
}

/// The probe's reproduction: a 52 MB answer used to grow workerd by 760 MB. Under the default
/// 16 MiB bound it is refused by its declared length, cut off at the bound when it has none (JSON
/// or stream) or when the length is the compressed one (52 MB of gzip is ~50 KB on the wire), and
/// the gateway keeps serving. Bounds are generous for a loaded machine.
#[test]
fn a_52_mb_answer_is_refused_under_the_default_bound_and_the_gateway_keeps_serving() {
    let s = stack();
    for model in ["huge", "huge-chunked", "huge-gzip"] {
        let started = Instant::now();
        let r = post(&s.url("/v1/chat/completions"), KEY, &chat(model, false));
        assert_eq!(r.error(502)["code"], "upstream_answer_too_large", "{model}: {}", r.body);
        assert!(r.error(502)["message"].as_str().unwrap().contains("16777216"), "{}", r.body);
        assert!(started.elapsed() < Duration::from_secs(60), "{model}: {:?}", started.elapsed());
    }
    let r = stream(&s.url("/v1/chat/completions"), KEY, &chat("huge", true));
    assert_eq!(r.status, 200);
    assert!(ends_with_error(&r, "upstream_answer_too_large"), "{:?}", r.events.last());
    let fine = post(&s.url("/v1/chat/completions"), KEY, &chat("gpt-4o-mini", false));
    assert_eq!(fine.status, 200, "{}", fine.body);
}
