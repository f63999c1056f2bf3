//! OpenAI chat-completion chunks → Anthropic Messages stream events: `message_start`, one
//! content block per text run or tool call (`content_block_start` / `_delta` / `_stop`),
//! `message_delta` with the stop reason and the usage, `message_stop`.
//!
//! Nothing is written until the first text or tool call arrives, so a failure before it can still
//! fall back to another deployment.

use super::{stop_reason, usage_json};
use crate::canonical::usage::Usage;
use crate::config::routes::ProviderKind;
use crate::http::sse::{SseEvent, SseParser};
use crate::providers::{classify, StreamEnd, UpstreamError};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    None,
    Text,
    /// A tool call, by its OpenAI `tool_calls[].index`.
    Tool(u64),
}

pub struct OpenaiStreamToMessages {
    parser: SseParser,
    model: String,
    started: bool,
    block: Block,
    /// The index of the block open (or next to open) in the Messages stream.
    index: u64,
    finish_reason: Option<String>,
    any_tool: bool,
    usage: Option<Usage>,
    done: bool,
    failed: bool,
    /// The vendor's completion id: Claude Code tells assistant turns apart by their message id.
    vendor_id: Option<String>,
    /// Reasoning (`reasoning_content`) has come; it is not shown on this door.
    reasoning: bool,
    /// The id of the tool call whose block is open.
    open_call_id: Option<String>,
}

impl OpenaiStreamToMessages {
    /// `model` names the model in `message_start`.
    pub fn new(model: &str) -> Self {
        OpenaiStreamToMessages {
            parser: SseParser::new(),
            model: model.to_string(),
            started: false,
            block: Block::None,
            index: 0,
            finish_reason: None,
            any_tool: false,
            usage: None,
            done: false,
            failed: false,
            vendor_id: None,
            reasoning: false,
            open_call_id: None,
        }
    }

    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        if self.done || self.failed {
            return None;
        }
        self.parser.feed(chunk);
        while let Some(ev) = self.parser.next_event() {
            if let Err(e) = self.on_event(&ev, out) {
                self.failed = true;
                return Some(e);
            }
            if self.done {
                break;
            }
        }
        None
    }

    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<u8>) -> Result<(), UpstreamError> {
        if ev.data.trim() == "[DONE]" {
            self.end(out);
            return Ok(());
        }
        let Ok(chunk) = crate::support::lone_surrogates::parse::<Value>(&ev.data, "openai stream event") else {
            return Ok(());
        };
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(classify(ProviderKind::Openai, 0, None, ev.data.as_bytes()));
        }
        if let Some(u) = chunk.get("usage").and_then(Usage::from_openai) {
            self.usage = Some(u);
        }
        if self.vendor_id.is_none() {
            self.vendor_id = chunk["id"].as_str().map(str::to_string);
        }
        let Some(choice) = chunk.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
            return Ok(());
        };
        let delta = &choice["delta"];
        let reasoning = |field: &str| delta[field].as_str().is_some_and(|t| !t.is_empty());
        self.reasoning |= reasoning("reasoning_content") || reasoning("reasoning");
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            if self.block != Block::Text {
                self.open(out, Block::Text, json!({"type": "text", "text": ""}));
            }
            self.event(
                out,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": self.index,
                "delta": {"type": "text_delta", "text": text}}),
            );
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let at = call["index"].as_u64().unwrap_or(0);
            let function = &call["function"];
            // Some compatible vendors send parallel calls without `index` (or all at 0): a new id is a new call.
            let id = call["id"].as_str().filter(|id| !id.is_empty());
            let another_call = id.is_some() && id != self.open_call_id.as_deref();
            if self.block != Block::Tool(at) || another_call {
                let block = json!({"type": "tool_use", "id": call["id"], "name": function["name"], "input": {}});
                self.open(out, Block::Tool(at), block);
                self.open_call_id = id.map(str::to_string);
                self.any_tool = true;
            }
            if let Some(args) = function["arguments"].as_str().filter(|a| !a.is_empty()) {
                self.event(
                    out,
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.index,
                    "delta": {"type": "input_json_delta", "partial_json": args}}),
                );
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(())
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            let id = format!("msg_{}", self.vendor_id.as_deref().unwrap_or("translated"));
            let message = json!({"id": id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}});
            self.event(out, "message_start", json!({"type": "message_start", "message": message}));
        }
    }

    fn open(&mut self, out: &mut Vec<u8>, block: Block, content_block: Value) {
        self.start(out);
        self.close(out);
        self.block = block;
        self.event(
            out,
            "content_block_start",
            json!({"type": "content_block_start", "index": self.index,
            "content_block": content_block}),
        );
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.block != Block::None {
            self.event(out, "content_block_stop", json!({"type": "content_block_stop", "index": self.index}));
            self.index += 1;
            self.block = Block::None;
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        self.start(out);
        self.close(out);
        let reason = stop_reason(self.finish_reason.as_deref(), self.any_tool);
        self.event(
            out,
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": null},
            "usage": usage_json(&self.usage.unwrap_or_default())}),
        );
        self.event(out, "message_stop", json!({"type": "message_stop"}));
        self.done = true;
    }

    fn event(&self, out: &mut Vec<u8>, name: &str, data: Value) {
        out.extend_from_slice(format!("event: {name}\ndata: {data}\n\n").as_bytes());
    }

    /// The upstream closed; a stream that gave its finish reason without `[DONE]` is complete.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        if !self.done && !self.failed {
            while let Some(ev) = self.parser.finish() {
                if self.on_event(&ev, out).is_err() || self.done {
                    break;
                }
            }
            if !self.done && self.finish_reason.is_some() {
                self.end(out);
            }
        }
        if self.done && !self.failed {
            StreamEnd::Complete
        } else {
            StreamEnd::Truncated
        }
    }

    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Reasoning has come and nothing has been written: the model has started.
    pub fn thinking(&self) -> bool {
        self.reasoning && !self.started
    }

    pub fn emitted_any(&self) -> bool {
        self.started
    }

    /// Whether `[DONE]` came and `message_stop` was written (after it, nothing more is).
    pub fn ended(&self) -> bool {
        self.done && !self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOL_STREAM: &str = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" look.\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"Read\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a\\\"}\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":9,\"total_tokens\":59}}\n\n\
data: [DONE]\n\n";

    fn events(out: &[u8]) -> Vec<(String, Value)> {
        let mut p = SseParser::new();
        p.feed(out);
        std::iter::from_fn(|| p.next_event())
            .map(|e| (e.event.unwrap_or_default(), serde_json::from_str(&e.data).unwrap()))
            .collect()
    }

    #[test]
    fn text_then_tool_call_at_any_split() {
        for size in [1, 5, 33, 4096] {
            let mut s = OpenaiStreamToMessages::new("gpt-4o-mini");
            let mut out = Vec::new();
            for chunk in TOOL_STREAM.as_bytes().chunks(size) {
                assert_eq!(s.feed(chunk, &mut out), None);
            }
            assert_eq!(s.finish(&mut out), StreamEnd::Complete);
            let ev = events(&out);
            let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(
                names,
                [
                    "message_start",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_delta",
                    "content_block_stop",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_delta",
                    "content_block_stop",
                    "message_delta",
                    "message_stop"
                ],
                "split {size}"
            );
            assert_eq!(ev[0].1["message"]["model"], "gpt-4o-mini");
            assert_eq!(ev[0].1["message"]["id"], "msg_c1", "each turn its own id, the vendor's");
            assert_eq!(
                ev[5].1["content_block"],
                json!({"type": "tool_use", "id": "call_1", "name": "Read", "input": {}})
            );
            assert_eq!(ev[5].1["index"], 1);
            let args: String = ev[6..8].iter().map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap()).collect();
            assert_eq!(args, "{\"path\":\"a\"}");
            assert_eq!(ev[9].1["delta"]["stop_reason"], "tool_use");
            assert_eq!(ev[9].1["usage"]["input_tokens"], 50);
            assert_eq!(ev[9].1["usage"]["output_tokens"], 9);
            assert_eq!(s.usage().map(|u| (u.input, u.output)), Some((50, 9)));
        }
    }

    #[test]
    fn reasoning_is_held_back_but_says_the_model_has_started() {
        let chunk = |delta: &str| format!("data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n");
        let mut s = OpenaiStreamToMessages::new("m");
        let mut out = Vec::new();
        s.feed(chunk(r#"{"role":"assistant","content":""}"#).as_bytes(), &mut out);
        assert!(!s.thinking() && !s.emitted_any());
        s.feed(chunk(r#"{"reasoning_content":"Hmm."}"#).as_bytes(), &mut out);
        assert!(s.thinking() && !s.emitted_any());
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        s.feed(chunk(r#"{"content":"Hi"}"#).as_bytes(), &mut out);
        assert!(s.emitted_any() && !s.thinking());
    }

    #[test]
    fn parallel_calls_without_an_index_are_told_apart_by_id() {
        let chunk = |delta: &str| format!("data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n");
        let mut s = OpenaiStreamToMessages::new("m");
        let mut out = Vec::new();
        s.feed(
            chunk(r#"{"tool_calls":[{"id":"call_a","function":{"name":"f","arguments":"{\"a\":1}"}}]}"#).as_bytes(),
            &mut out,
        );
        s.feed(
            chunk(r#"{"tool_calls":[{"id":"call_b","function":{"name":"g","arguments":"{\"b\":2}"}}]}"#).as_bytes(),
            &mut out,
        );
        s.feed(b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n", &mut out);
        let ev = events(&out);
        let starts: Vec<&Value> =
            ev.iter().filter(|(n, _)| n == "content_block_start").map(|(_, d)| &d["content_block"]).collect();
        assert_eq!(
            starts,
            [
                &json!({"type": "tool_use", "id": "call_a", "name": "f", "input": {}}),
                &json!({"type": "tool_use", "id": "call_b", "name": "g", "input": {}})
            ]
        );
        let args: Vec<(u64, &str)> = ev
            .iter()
            .filter(|(n, _)| n == "content_block_delta")
            .map(|(_, d)| (d["index"].as_u64().unwrap(), d["delta"]["partial_json"].as_str().unwrap()))
            .collect();
        assert_eq!(args, [(0, "{\"a\":1}"), (1, "{\"b\":2}")]);
    }

    #[test]
    fn ended_once_done_is_translated_whatever_the_split() {
        let done = TOOL_STREAM.find("data: [DONE]").unwrap();
        for size in [1, 7, 4096] {
            let mut s = OpenaiStreamToMessages::new("m");
            let mut out = Vec::new();
            for chunk in TOOL_STREAM.as_bytes()[..done + 12].chunks(size) {
                s.feed(chunk, &mut out);
            }
            assert!(!s.ended(), "[DONE] without its blank line, split {size}");
            s.feed(&TOOL_STREAM.as_bytes()[done + 12..], &mut out);
            assert!(s.ended(), "split {size}");
            assert_eq!(events(&out).last().unwrap().0, "message_stop");
            let before = out.len();
            assert_eq!(s.finish(&mut out), StreamEnd::Complete);
            assert_eq!(out.len(), before, "nothing after message_stop");
        }
        let mut failed = OpenaiStreamToMessages::new("m");
        failed.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", &mut Vec::new());
        assert!(!failed.ended());
    }

    #[test]
    fn nothing_before_content_so_early_errors_fall_back() {
        let mut s = OpenaiStreamToMessages::new("m");
        let mut out = Vec::new();
        s.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n", &mut out);
        assert!(out.is_empty() && !s.emitted_any());
        let err = s.feed(b"data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n", &mut out);
        assert!(err.is_some_and(|e| e.class.retryable()));
        assert!(out.is_empty());
        assert_eq!(s.finish(&mut out), StreamEnd::Truncated);
    }

    #[test]
    fn cut_stream_is_truncated_and_finish_without_done_is_complete() {
        let cut = TOOL_STREAM
            .split("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\"")
            .next()
            .unwrap();
        let mut s = OpenaiStreamToMessages::new("m");
        let mut out = Vec::new();
        s.feed(cut.as_bytes(), &mut out);
        assert!(s.emitted_any());
        assert_eq!(s.finish(&mut out), StreamEnd::Truncated);
        let no_done = TOOL_STREAM.replace("data: [DONE]\n\n", "");
        let mut s = OpenaiStreamToMessages::new("m");
        let mut out = Vec::new();
        s.feed(no_done.as_bytes(), &mut out);
        assert_eq!(s.finish(&mut out), StreamEnd::Complete);
        assert_eq!(events(&out).last().unwrap().0, "message_stop");
    }
}
