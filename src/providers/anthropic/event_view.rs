//! What the Messages pass-through reads of an Anthropic stream event, and nothing more: its type,
//! the usage of `message_start` and `message_delta`, and how much a `content_block_delta` delivered.
//! The event is relayed as sent, so nothing else of it is built. perf: a `Value` per event.

use crate::canonical::usage_counts::AnthropicCounts;
use crate::support::json_view::{from_members, Chars, MemberOf, TextAs};

/// The event types the pass-through acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MessageStart,
    MessageDelta,
    ContentBlockDelta,
    MessageStop,
    Error,
    Ping,
    Other,
}

impl Kind {
    pub fn of(name: &str) -> Kind {
        match name {
            "message_start" => Kind::MessageStart,
            "message_delta" => Kind::MessageDelta,
            "content_block_delta" => Kind::ContentBlockDelta,
            "message_stop" => Kind::MessageStop,
            "error" => Kind::Error,
            "ping" => Kind::Ping,
            _ => Kind::Other,
        }
    }
}

/// An event's data as the pass-through reads it (`Value`'s rules: see `support::json_view`).
#[derive(Debug, Default, PartialEq)]
pub struct EventView {
    /// `type`, when it is a string.
    pub kind: Option<Kind>,
    /// `message.usage`.
    pub message_usage: AnthropicCounts,
    /// `usage`.
    pub usage: AnthropicCounts,
    /// The characters of `delta.text`, `delta.partial_json` and `delta.thinking`, where strings.
    pub delta: [Option<u64>; 3],
}

impl EventView {
    /// The generated output a `content_block_delta` delivered: its text, tool-argument JSON or
    /// thinking, the first of them that is a string, in characters.
    pub fn delivered_chars(&self) -> u64 {
        self.delta.iter().find_map(|c| *c).unwrap_or(0)
    }
}

const MEMBERS: [&str; 4] = ["type", "message", "usage", "delta"];
const DELTA: [&str; 3] = ["text", "partial_json", "thinking"];

from_members!(EventView, MEMBERS, |view, i, map| match i {
    0 => view.kind = map.next_value_seed(TextAs(Kind::of))?,
    1 => view.message_usage = map.next_value_seed(MemberOf::<AnthropicCounts>::new(&["usage"]))?,
    2 => view.usage = map.next_value()?,
    _ => view.delta = map.next_value::<Delta>()?.0,
});

/// `delta`'s strings, counted.
#[derive(Default)]
struct Delta([Option<u64>; 3]);

from_members!(Delta, DELTA, |out, i, map| out.0[i] = map.next_value::<Chars>()?.0);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// What the pass-through read from a whole `Value` before: the reference the view must agree with.
    fn reference(text: &str) -> Option<EventView> {
        let data: Value = serde_json::from_str(text).ok()?;
        let delta = &data["delta"];
        let chars = |k: &str| delta[k].as_str().map(|s| s.chars().count() as u64);
        Some(EventView {
            kind: data.get("type").and_then(Value::as_str).map(Kind::of),
            message_usage: AnthropicCounts::of(&data["message"]["usage"]),
            usage: AnthropicCounts::of(&data["usage"]),
            delta: [chars("text"), chars("partial_json"), chars("thinking")],
        })
    }

    fn view(text: &str) -> Option<EventView> {
        serde_json::from_str::<EventView>(text).ok()
    }

    #[test]
    fn real_events_read_as_before() {
        for text in [
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":60,"ephemeral_1h_input_tokens":40},"output_tokens":1}}}"#,
            r#"{"type": "ping"}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hello \u00e9\ud83d\ude00 \"there\""}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15,"output_tokens_details":{"thinking_tokens":7}}}"#,
            r#"{"type":"message_stop"}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ] {
            assert_eq!(view(text), reference(text), "{text}");
            assert!(view(text).is_some(), "{text}");
        }
    }

    #[test]
    fn odd_events_read_as_before() {
        for text in [
            "5",
            "null",
            "[]",
            "\"message_start\"",
            "{}",
            r#"{"type":5}"#,
            r#"{"type":null,"usage":{"output_tokens":3}}"#,
            r#"{"type":"message_start","type":"ping"}"#,
            r#"{"type":"message_start","message":[]}"#,
            r#"{"type":"message_start","message":{"usage":5}}"#,
            r#"{"type":"message_start","message":{"usage":{"input_tokens":1}},"message":{}}"#,
            r#"{"type":"message_start","message":{"usage":{"input_tokens":1},"usage":{"input_tokens":-1}}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":2.5}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":"9"},"usage":{"output_tokens":9}}"#,
            r#"{"type":"content_block_delta","delta":"text"}"#,
            r#"{"type":"content_block_delta","delta":{"text":5,"thinking":"abc"}}"#,
            r#"{"type":"content_block_delta","delta":{"partial_json":"{}","text":"x"}}"#,
            r#"{"type":"content_block_delta","delta":{"text":"x"},"delta":{"thinking":"yz"}}"#,
            r#"{"type":"content_block_delta","delta":{"text":"x","text":null}}"#,
            r#"{"ty\u0070e":"message_stop"}"#,
        ] {
            assert_eq!(view(text), reference(text), "{text}");
        }
    }

    #[test]
    fn what_is_not_json_fails_as_a_value_does() {
        for text in ["", "{", r#"{"type":"ping""#, "{\"type\":\"ping\",}", "nul"] {
            assert_eq!(view(text), None, "{text}");
            assert_eq!(reference(text), None, "{text}");
        }
    }

    #[test]
    fn the_first_string_of_text_json_and_thinking_is_what_was_delivered() {
        let v = view(r#"{"delta":{"thinking":"four","partial_json":"abc","text":"é😀"}}"#).unwrap();
        assert_eq!(v.delivered_chars(), 2);
        let v = view(r#"{"delta":{"thinking":"four","partial_json":"abc"}}"#).unwrap();
        assert_eq!(v.delivered_chars(), 3);
        assert_eq!(view(r#"{"delta":{"text":7}}"#).unwrap().delivered_chars(), 0);
    }
}
