//! What the Responses pass-through reads of a vendor's answer and of each stream event, and
//! nothing more: whether a body is a response object, an event's type and sequence number, and
//! the usage of either. Both are relayed as sent, so nothing else of them is built.
//! perf: a `Value` per answer and per event (`response.completed` carries the whole response).

use crate::canonical::usage_counts::{ResponsesCounts, UsageOf};
use crate::support::json_view::{from_members, Count, TextAs};

/// A JSON answer (`Value`'s rules: see `support::json_view`).
#[derive(Debug, Default, PartialEq)]
pub struct AnswerView {
    /// `object` is `"response"`.
    pub is_response: bool,
    pub usage: ResponsesCounts,
}

const ANSWER: [&str; 2] = ["object", "usage"];

from_members!(AnswerView, ANSWER, |view, i, map| match i {
    0 => view.is_response = map.next_value_seed(TextAs(|s| s == "response"))? == Some(true),
    _ => view.usage = map.next_value()?,
});

/// The event types the pass-through acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Error,
    /// `response.completed` or `response.incomplete`: the vendor's last event.
    Ended,
    Failed,
    /// An event that carries no output yet (held back until one does).
    Preamble,
    Other,
}

impl Kind {
    pub fn of(name: &str) -> Kind {
        match name {
            "error" => Kind::Error,
            "response.completed" | "response.incomplete" => Kind::Ended,
            "response.failed" => Kind::Failed,
            "response.created"
            | "response.in_progress"
            | "response.queued"
            | "response.output_item.added"
            | "response.content_part.added" => Kind::Preamble,
            _ => Kind::Other,
        }
    }
}

/// A stream event's data.
#[derive(Debug, Default, PartialEq)]
pub struct EventView {
    /// `type`, when it is a string.
    pub kind: Option<Kind>,
    pub sequence_number: Option<u64>,
    /// `response.usage`.
    pub usage: ResponsesCounts,
}

const EVENT: [&str; 3] = ["type", "sequence_number", "response"];

from_members!(EventView, EVENT, |view, i, map| match i {
    0 => view.kind = map.next_value_seed(TextAs(Kind::of))?,
    1 => view.sequence_number = map.next_value::<Count>()?.0,
    _ => view.usage = map.next_value::<UsageOf<ResponsesCounts>>()?.0,
});

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::Value;

    fn counts(v: &Value) -> ResponsesCounts {
        ResponsesCounts::deserialize(v).unwrap()
    }

    /// What the pass-through read from a whole `Value` before.
    fn answer_reference(text: &str) -> Option<AnswerView> {
        let v: Value = serde_json::from_str(text).ok()?;
        Some(AnswerView {
            is_response: v.get("object").and_then(Value::as_str) == Some("response"),
            usage: counts(&v["usage"]),
        })
    }

    fn event_reference(text: &str) -> Option<EventView> {
        let v: Value = serde_json::from_str(text).ok()?;
        Some(EventView {
            kind: v.get("type").and_then(Value::as_str).map(Kind::of),
            sequence_number: v.get("sequence_number").and_then(Value::as_u64),
            usage: counts(v.pointer("/response/usage").unwrap_or(&Value::Null)),
        })
    }

    #[test]
    fn answers_read_as_before() {
        for text in [
            r#"{"id":"resp_1","object":"response","created_at":1,"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi","annotations":[]}]}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}"#,
            r#"{"object":"response","usage":null}"#,
            r#"{"object":"chat.completion","usage":{"input_tokens":1}}"#,
            r#"{"object":"response","object":5}"#,
            r#"{"object":["response"]}"#,
            r#"{"usage":{"output_tokens":2},"usage":{"input_tokens":3}}"#,
            "[]",
            "\"response\"",
            "",
            "{",
        ] {
            assert_eq!(serde_json::from_str::<AnswerView>(text).ok(), answer_reference(text), "{text}");
        }
    }

    #[test]
    fn events_read_as_before() {
        for text in [
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}"#,
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}"#,
            r#"{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message"}],"usage":{"input_tokens":36,"output_tokens":87,"output_tokens_details":{"reasoning_tokens":5}}}}"#,
            r#"{"type":"response.failed","sequence_number":3,"response":{"error":{"code":"server_error","message":"m"},"usage":null}}"#,
            r#"{"type":"error","code":"rate_limit_exceeded","message":"slow down","sequence_number":2}"#,
            r#"{"type":"response.incomplete","response":{"usage":{"input_tokens":1},"usage":5}}"#,
            r#"{"type":5,"sequence_number":-1}"#,
            r#"{"sequence_number":2.0,"response":[]}"#,
            r#"{"type":"response.queued","type":"response.in_progress","sequence_number":1,"sequence_number":"2"}"#,
            "null",
            "{}",
            "{\"type\":}",
        ] {
            assert_eq!(serde_json::from_str::<EventView>(text).ok(), event_reference(text), "{text}");
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(Kind::of("response.completed"), Kind::Ended);
        assert_eq!(Kind::of("response.incomplete"), Kind::Ended);
        assert_eq!(Kind::of("response.failed"), Kind::Failed);
        assert_eq!(Kind::of("error"), Kind::Error);
        for preamble in [
            "response.created",
            "response.in_progress",
            "response.queued",
            "response.output_item.added",
            "response.content_part.added",
        ] {
            assert_eq!(Kind::of(preamble), Kind::Preamble);
        }
        assert_eq!(Kind::of("response.output_text.delta"), Kind::Other);
        assert_eq!(Kind::of(""), Kind::Other);
    }
}
