//! What a vendor answers, however odd (issue 18 items 2 and 6): a lone-surrogate escape (legal
//! JSON) reaches the client intact where the answer passes through, and as U+FFFD where it is
//! translated, on every door and both vendor formats, JSON and streams; never a dropped delta or a 502.

use e2e::client::{post, stream, StreamReply};
use e2e::{stack, KEY};
use serde_json::{json, Value};

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
