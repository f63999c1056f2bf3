//! The exact cache for the Anthropic Messages door: which `message` answers may be kept, a
//! streamed answer rebuilt into one from the SSE events the client received, and a kept answer
//! replayed as the event sequence Anthropic streams (`message_start` … `message_stop`).

use crate::http::sse::SseParser;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Whether a `message` answer may be cached: complete, and not a refusal or a paused server-tool turn.
pub fn storable(body: &Value) -> bool {
    body.get("type").and_then(Value::as_str) == Some("message")
        && body.get("content").is_some_and(Value::is_array)
        && matches!(
            body.get("stop_reason").and_then(Value::as_str),
            Some("end_turn" | "max_tokens" | "stop_sequence" | "tool_use")
        )
}

/// The text the cache policy's skip patterns are matched against: `system` and every message's
/// text, one piece per line.
pub fn prompt_text(body: &Value) -> String {
    let mut pieces: Vec<&str> = Vec::new();
    texts(&body["system"], &mut pieces);
    for message in body["messages"].as_array().into_iter().flatten() {
        texts(&message["content"], &mut pieces);
    }
    pieces.join("\n")
}

fn texts<'v>(content: &'v Value, out: &mut Vec<&'v str>) {
    match content {
        Value::String(s) => out.push(s),
        Value::Array(blocks) => out.extend(blocks.iter().filter_map(|b| b["text"].as_str())),
        _ => {}
    }
}

#[derive(Default)]
struct Block {
    value: Map<String, Value>,
    /// `input_json_delta` pieces of a `tool_use` block, parsed at `content_block_stop`.
    partial_json: String,
}

/// Rebuilds the `message` from the Messages SSE events a client received.
#[derive(Default)]
pub struct MessageAssembler {
    parser: SseParser,
    message: Option<Map<String, Value>>,
    blocks: BTreeMap<u64, Block>,
    stopped: bool,
    broken: bool,
}

impl MessageAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes exactly as they were sent to the client.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.feed(bytes);
        while let Some(event) = self.parser.next_event() {
            if !self.broken {
                self.broken = self.take(&event.data).is_none();
            }
        }
    }

    /// `None` when the event cannot be rebuilt faithfully (the answer is then not cached).
    fn take(&mut self, data: &str) -> Option<()> {
        let event: Value = serde_json::from_str(data).ok()?;
        let index = event["index"].as_u64();
        match event["type"].as_str()? {
            "message_start" => self.message = Some(event["message"].as_object()?.clone()),
            "content_block_start" => {
                let value = event["content_block"].as_object()?.clone();
                self.blocks.insert(index?, Block { value, partial_json: String::new() });
            }
            "content_block_delta" => apply_delta(self.blocks.get_mut(&index?)?, &event["delta"])?,
            "content_block_stop" => {
                let block = self.blocks.get_mut(&index?)?;
                if !block.partial_json.is_empty() {
                    let input = serde_json::from_str(&std::mem::take(&mut block.partial_json)).ok()?;
                    block.value.insert("input".into(), input);
                }
            }
            "message_delta" => {
                let message = self.message.as_mut()?;
                for (k, v) in event["delta"].as_object()? {
                    message.insert(k.clone(), v.clone());
                }
                if let Some(usage) = event["usage"].as_object() {
                    // A vendor's `usage` that is not an object leaves nothing to merge into: no copy.
                    let merged = message.entry("usage").or_insert_with(|| json!({})).as_object_mut()?;
                    for (k, v) in usage {
                        merged.insert(k.clone(), v.clone());
                    }
                }
            }
            "message_stop" => self.stopped = true,
            "ping" => {}
            _ => return None,
        }
        Some(())
    }

    /// The rebuilt `message` body, only for a stream that ended with `message_stop`.
    pub fn finish(self) -> Option<String> {
        if self.broken || !self.stopped {
            return None;
        }
        let mut message = self.message?;
        let content: Vec<Value> = self.blocks.into_values().map(|b| Value::Object(b.value)).collect();
        message.insert("content".into(), Value::Array(content));
        Some(Value::Object(message).to_string())
    }
}

fn apply_delta(block: &mut Block, delta: &Value) -> Option<()> {
    let append = |block: &mut Block, field: &str, piece: &str| {
        let entry = block.value.entry(field).or_insert_with(|| json!(""));
        let mut text = entry.as_str().unwrap_or("").to_string();
        text.push_str(piece);
        *entry = Value::String(text);
    };
    match delta["type"].as_str()? {
        "text_delta" => append(block, "text", delta["text"].as_str()?),
        "thinking_delta" => append(block, "thinking", delta["thinking"].as_str()?),
        "signature_delta" => {
            block.value.insert("signature".into(), json!(delta["signature"].as_str()?));
        }
        "input_json_delta" => block.partial_json.push_str(delta["partial_json"].as_str()?),
        "citations_delta" => {
            let list = block.value.entry("citations").or_insert_with(|| json!([]));
            list.as_array_mut()?.push(delta["citation"].clone());
        }
        _ => return None,
    }
    Some(())
}

/// A kept `message` as the SSE events Anthropic would have streamed for it.
pub fn replay_as_sse(body: &str) -> Option<String> {
    let message: Value = serde_json::from_str(body).ok()?;
    let blocks = message["content"].as_array()?;
    let mut start = message.as_object()?.clone();
    start.insert("content".into(), json!([]));
    start.insert("stop_reason".into(), Value::Null);
    start.insert("stop_sequence".into(), Value::Null);
    let mut out = String::new();
    event(&mut out, "message_start", &json!({"type": "message_start", "message": start}));
    for (index, block) in blocks.iter().enumerate() {
        replay_block(&mut out, index, block);
    }
    let delta = json!({"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]});
    let usage = message.get("usage").cloned().unwrap_or_else(|| json!({}));
    event(&mut out, "message_delta", &json!({"type": "message_delta", "delta": delta, "usage": usage}));
    event(&mut out, "message_stop", &json!({"type": "message_stop"}));
    Some(out)
}

fn replay_block(out: &mut String, index: usize, block: &Value) {
    let kind = block["type"].as_str().unwrap_or("");
    let (empty, deltas) = match kind {
        "text" => {
            let mut start = block.clone();
            start["text"] = json!("");
            start.as_object_mut().map(|b| b.remove("citations"));
            let mut deltas: Vec<Value> = block["citations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| json!({"type": "citations_delta", "citation": c}))
                .collect();
            deltas.push(json!({"type": "text_delta", "text": block["text"]}));
            (start, deltas)
        }
        "thinking" => (
            json!({"type": "thinking", "thinking": ""}),
            vec![
                json!({"type": "thinking_delta", "thinking": block["thinking"]}),
                json!({"type": "signature_delta", "signature": block["signature"]}),
            ],
        ),
        "tool_use" | "server_tool_use" => {
            let mut start = block.clone();
            start["input"] = json!({});
            let input = block.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into());
            (start, vec![json!({"type": "input_json_delta", "partial_json": input})])
        }
        // Blocks Anthropic sends whole (redacted thinking, tool results): the start carries them.
        _ => (block.clone(), Vec::new()),
    };
    event(out, "content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": empty}));
    for delta in deltas {
        event(out, "content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta}));
    }
    event(out, "content_block_stop", &json!({"type": "content_block_stop", "index": index}));
}

fn event(out: &mut String, name: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Value {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [
                {"type": "thinking", "thinking": "Let me think.", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Héllo, wörld.", "citations": [{"type": "char_location", "cited_text": "x"}]},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "a \"quoted\" value", "n": 2}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 40}
        })
    }

    #[test]
    fn storable_only_for_complete_answers() {
        assert!(storable(&message()));
        for reason in [json!("refusal"), json!("pause_turn"), Value::Null] {
            let mut m = message();
            m["stop_reason"] = reason.clone();
            assert!(!storable(&m), "{reason}");
        }
        assert!(!storable(&json!({"type": "error", "error": {}})));
        let mut m = message();
        m.as_object_mut().unwrap().remove("content");
        assert!(!storable(&m));
    }

    #[test]
    fn replay_then_reassembly_gives_back_the_message_at_every_split() {
        let body = message().to_string();
        let sse = replay_as_sse(&body)
            .unwrap()
            .replace("\n\nevent: content_block_stop", "\n\n: keep-alive\n\nevent: content_block_stop");
        assert!(sse.starts_with("event: message_start\ndata: "));
        assert!(sse.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        // Every byte boundary, inside multi-byte characters too.
        for split in 0..sse.len() {
            let mut a = MessageAssembler::new();
            a.feed(&sse.as_bytes()[..split]);
            a.feed(&sse.as_bytes()[split..]);
            let rebuilt: Value = serde_json::from_str(&a.finish().unwrap()).unwrap();
            assert_eq!(rebuilt, message(), "split at {split}");
        }
    }

    #[test]
    fn a_vendor_stream_with_pings_and_split_deltas_is_rebuilt() {
        let sse = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"1}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let mut a = MessageAssembler::new();
        a.feed(sse.as_bytes());
        let m: Value = serde_json::from_str(&a.finish().unwrap()).unwrap();
        assert_eq!(
            m["content"],
            json!([{"type": "text", "text": "Hi there"}, {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}])
        );
        assert_eq!(m["usage"], json!({"input_tokens": 5, "output_tokens": 9}));
        assert_eq!(m["stop_reason"], "tool_use");
        assert!(storable(&m));
    }

    #[test]
    fn cut_errored_or_unknown_streams_are_not_rebuilt() {
        let full = replay_as_sse(&message().to_string()).unwrap();
        let cut = &full[..full.find("event: message_stop").unwrap()];
        let mut a = MessageAssembler::new();
        a.feed(cut.as_bytes());
        assert!(a.finish().is_none(), "no message_stop");
        let errored = format!("{cut}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"x\"}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n");
        let mut a = MessageAssembler::new();
        a.feed(errored.as_bytes());
        assert!(a.finish().is_none(), "an error event");
        let unknown = full.replace("text_delta", "future_delta");
        let mut a = MessageAssembler::new();
        a.feed(unknown.as_bytes());
        assert!(a.finish().is_none(), "a delta it cannot rebuild");
        let odd_usage = full.replacen("\"usage\":{", "\"usage\":[],\"was\":{", 1);
        assert_ne!(odd_usage, full);
        let mut a = MessageAssembler::new();
        a.feed(odd_usage.as_bytes());
        assert!(a.finish().is_none(), "a start whose usage is not an object");
    }

    #[test]
    fn prompt_text_reads_system_and_message_text() {
        let body = json!({"system": [{"type": "text", "text": "Be terse."}],
            "messages": [{"role": "user", "content": "first"},
                         {"role": "user", "content": [{"type": "image", "source": {}}, {"type": "text", "text": "second"}]}]});
        assert_eq!(prompt_text(&body), "Be terse.\nfirst\nsecond");
        assert_eq!(prompt_text(&json!({"system": "s", "messages": []})), "s");
    }
}
