//! Rebuilds a `chat.completion` from the OpenAI SSE chunks a client received, so a streamed
//! answer can be stored in the response cache like a JSON one.

use crate::cache::message::MessageAssembler;
use crate::cache::AnswerFormat;
use crate::http::sse::SseParser;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Rebuilds a streamed answer in its door's format.
pub enum Assembler {
    Chat(StreamAssembler),
    Message(MessageAssembler),
}

impl Assembler {
    pub fn new(format: AnswerFormat) -> Self {
        match format {
            AnswerFormat::ChatCompletion => Assembler::Chat(StreamAssembler::new()),
            AnswerFormat::Message => Assembler::Message(MessageAssembler::new()),
        }
    }

    /// Feeds bytes exactly as they were sent to the client.
    pub fn feed(&mut self, bytes: &[u8]) {
        match self {
            Assembler::Chat(a) => a.feed(bytes),
            Assembler::Message(a) => a.feed(bytes),
        }
    }

    /// The rebuilt answer, only for a stream that ended cleanly.
    pub fn finish(self) -> Option<String> {
        match self {
            Assembler::Chat(a) => a.finish(),
            Assembler::Message(a) => a.finish(),
        }
    }
}

#[derive(Default)]
struct ToolCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
pub struct StreamAssembler {
    parser: SseParser,
    id: Option<String>,
    model: Option<String>,
    created: Option<u64>,
    content: String,
    saw_content: bool,
    tool_calls: BTreeMap<u64, ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    broken: bool,
    done: bool,
}

impl StreamAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes exactly as they were sent to the client.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.feed(bytes);
        while let Some(event) = self.parser.next_event() {
            self.take(&event.data);
        }
    }

    fn take(&mut self, data: &str) {
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let Ok(chunk) = crate::support::lone_surrogates::parse::<Value>(data, "relayed chunk") else {
            self.broken = true;
            return;
        };
        if chunk.get("error").is_some() {
            self.broken = true;
            return;
        }
        self.id = self.id.take().or_else(|| chunk["id"].as_str().map(str::to_string));
        self.model = self.model.take().or_else(|| chunk["model"].as_str().map(str::to_string));
        self.created = self.created.or_else(|| chunk["created"].as_u64());
        if chunk["usage"].is_object() {
            self.usage = Some(chunk["usage"].clone());
        }
        let Some(choices) = chunk["choices"].as_array() else { return };
        for choice in choices {
            if choice["index"].as_u64().unwrap_or(0) != 0 {
                // Several choices (n > 1) are not rebuilt: such answers are not cached.
                self.broken = true;
                continue;
            }
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str() {
                self.content.push_str(text);
                self.saw_content = true;
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let entry = self.tool_calls.entry(call["index"].as_u64().unwrap_or(0)).or_default();
                if let Some(id) = call["id"].as_str() {
                    entry.id = id.to_string();
                }
                entry.name.push_str(call["function"]["name"].as_str().unwrap_or(""));
                entry.arguments.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(reason.to_string());
            }
        }
    }

    /// The rebuilt `chat.completion` body, only for a stream that ended cleanly.
    pub fn finish(self) -> Option<String> {
        if self.broken || !self.done {
            return None;
        }
        let finish_reason = self.finish_reason?;
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), if self.saw_content { json!(self.content) } else { Value::Null });
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .into_values()
                .map(
                    |c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
                )
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut body = json!({
            "id": self.id?,
            "object": "chat.completion",
            "created": self.created.unwrap_or(0),
            "model": self.model.unwrap_or_default(),
            "choices": [{"index": 0, "message": Value::Object(message), "logprobs": null, "finish_reason": finish_reason}],
        });
        if let Some(usage) = self.usage {
            body["usage"] = usage;
        }
        Some(body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(chunks: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        out
    }

    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    #[test]
    fn rebuilds_text_split_anywhere() {
        let bytes = sse(&[
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "Hel"}), None),
            chunk(json!({"content": "lo 世界"}), None),
            chunk(json!({}), Some("stop")),
        ]);
        for cut in 0..bytes.len() {
            let mut a = StreamAssembler::new();
            a.feed(&bytes[..cut]);
            a.feed(&bytes[cut..]);
            let v: Value = serde_json::from_str(&a.finish().unwrap()).unwrap();
            assert_eq!(v["choices"][0]["message"]["content"], "Hello 世界");
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
            assert_eq!(v["object"], "chat.completion");
            assert_eq!(v["id"], "c1");
        }
    }

    #[test]
    fn rebuilds_tool_calls_and_usage() {
        let mut usage_chunk =
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": []});
        usage_chunk["usage"] = json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7});
        let bytes = sse(&[
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
                None,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}), None),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk,
        ]);
        let mut a = StreamAssembler::new();
        a.feed(&bytes);
        let v: Value = serde_json::from_str(&a.finish().unwrap()).unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_1");
        assert_eq!(call["function"]["arguments"], "{\"a\":1}");
        assert!(v["choices"][0]["message"]["content"].is_null());
        assert_eq!(v["usage"]["total_tokens"], 7);
    }

    #[test]
    fn incomplete_or_failed_streams_are_not_rebuilt() {
        let mut cut = StreamAssembler::new();
        cut.feed(b"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n");
        assert!(cut.finish().is_none(), "no [DONE]");
        let mut failed = StreamAssembler::new();
        failed.feed(&sse(&[chunk(json!({"content": "x"}), None)]));
        failed.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\n");
        assert!(failed.finish().is_none(), "error event");
        let mut unfinished = StreamAssembler::new();
        unfinished.feed(&sse(&[chunk(json!({"content": "x"}), None)]));
        assert!(unfinished.finish().is_none(), "no finish_reason");
    }
}
