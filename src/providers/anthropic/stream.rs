//! Anthropic Messages stream events → OpenAI `chat.completion.chunk` events.

use super::finish_reason;
use crate::canonical::completion::{Chunk, ChunkChoice, Delta, FunctionDelta, ToolDelta, ToolFunction, CHUNK_OBJECT};
use crate::canonical::usage::{AnthropicStreamUsage, OpenaiUsage, Usage};
use crate::canonical::usage_counts::AnthropicCounts;
use crate::config::routes::ProviderKind;
use crate::http::sse::{write_data, SseEvent};
use crate::providers::{classify, UpstreamError};
use serde_json::Value;
use std::collections::BTreeMap;

pub(crate) struct AnthropicStream {
    wants_usage: bool,
    created: u64,
    id: String,
    model: String,
    /// The role chunk waits for the first output, so a failure before it can still be retried.
    started: bool,
    /// Anthropic content-block index → OpenAI tool-call index (tool blocks only, in order).
    tool_index: BTreeMap<u64, usize>,
    usage: AnthropicStreamUsage,
    done: bool,
}

impl AnthropicStream {
    pub(in crate::providers) fn new(wants_usage: bool, created: u64) -> Self {
        AnthropicStream {
            wants_usage,
            created,
            id: String::new(),
            model: String::new(),
            started: false,
            tool_index: BTreeMap::new(),
            usage: AnthropicStreamUsage::default(),
            done: false,
        }
    }

    pub(in crate::providers) fn done(&self) -> bool {
        self.done
    }

    pub(in crate::providers) fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }

    pub(in crate::providers) fn usage_estimated(&self) -> bool {
        self.usage.estimated()
    }

    pub(in crate::providers) fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<u8>) -> Result<(), UpstreamError> {
        let Ok(data) = crate::support::lone_surrogates::parse::<Value>(&ev.data, "anthropic stream event") else {
            return Ok(());
        };
        let kind = data.get("type").and_then(Value::as_str).or(ev.event.as_deref()).unwrap_or("");
        match kind {
            "message_start" => {
                let msg = &data["message"];
                self.id = msg["id"].as_str().unwrap_or_default().to_string();
                self.model = msg["model"].as_str().unwrap_or_default().to_string();
                self.usage.start(AnthropicCounts::of(&msg["usage"]));
            }
            "content_block_start" => {
                let block = &data["content_block"];
                match block["type"].as_str() {
                    Some("text") => self.text(block["text"].as_str().unwrap_or(""), out),
                    Some("tool_use") => {
                        let index = self.tool_index.len();
                        self.tool_index.insert(data["index"].as_u64().unwrap_or(0), index);
                        let arguments = match block.get("input") {
                            Some(Value::Object(o)) if !o.is_empty() => block["input"].to_string(),
                            _ => String::new(),
                        };
                        let function = FunctionDelta { name: block["name"].as_str(), arguments: &arguments };
                        let tool = ToolDelta {
                            index,
                            id: block["id"].as_str(),
                            kind: Some("function"),
                            function: Some(ToolFunction::Piece(function)),
                        };
                        self.emit(out, Delta { tool_calls: Some([tool]), ..Delta::default() }, None);
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => self.text(delta["text"].as_str().unwrap_or(""), out),
                    // Not shown on this door, but generated and billed.
                    Some("thinking_delta") => self.usage.delivered(delta["thinking"].as_str().unwrap_or("")),
                    Some("input_json_delta") => {
                        let partial = delta["partial_json"].as_str().unwrap_or("");
                        self.usage.delivered(partial);
                        let index = data["index"].as_u64().and_then(|i| self.tool_index.get(&i)).copied();
                        if let (Some(index), false) = (index, partial.is_empty()) {
                            let function = FunctionDelta { name: None, arguments: partial };
                            let function = Some(ToolFunction::Piece(function));
                            let tool = ToolDelta { index, id: None, kind: None, function };
                            self.emit(out, Delta { tool_calls: Some([tool]), ..Delta::default() }, None);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                self.usage.delta(AnthropicCounts::of(&data["usage"]));
                if let Some(stop) = data["delta"]["stop_reason"].as_str() {
                    self.emit(out, Delta::default(), Some(finish_reason(stop)));
                }
            }
            "message_stop" => {
                self.start(out);
                if self.wants_usage {
                    let usage = self.usage.usage().unwrap_or_default().to_openai();
                    self.write(out, Vec::new(), Some(usage));
                }
                write_data(out, "[DONE]");
                self.done = true;
            }
            "error" => return Err(classify(ProviderKind::Anthropic, 0, None, ev.data.as_bytes())),
            _ => {}
        }
        Ok(())
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        self.usage.delivered(text);
        if !text.is_empty() {
            self.emit(out, Delta { content: Some(text), ..Delta::default() }, None);
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            let delta = Delta { role: Some("assistant"), content: Some(""), ..Delta::default() };
            self.write(out, vec![ChunkChoice { index: 0, delta, logprobs: None, finish_reason: None }], None);
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>, delta: Delta, finish_reason: Option<&'static str>) {
        self.start(out);
        self.write(out, vec![ChunkChoice { index: 0, delta, logprobs: None, finish_reason }], None);
    }

    fn write(&self, out: &mut Vec<u8>, choices: Vec<ChunkChoice>, usage: Option<OpenaiUsage>) {
        let chunk = Chunk {
            id: &self.id,
            object: CHUNK_OBJECT,
            created: self.created,
            model: &self.model,
            system_fingerprint: None,
            choices,
            usage,
        };
        if let Ok(json) = serde_json::to_string(&chunk) {
            write_data(out, &json);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::canonical::usage::Usage;
    use crate::providers::testing::deployment;
    use crate::providers::{ErrorClass, StreamEnd, StreamTranslator, UpstreamError};

    pub(crate) const CREATED: u64 = 1_700_000_000;

    fn run(wants_usage: bool, transcript: &str) -> (String, Option<Usage>, Option<UpstreamError>, StreamEnd) {
        let mut t = StreamTranslator::new(&deployment("anthropic"), wants_usage, CREATED);
        let mut out = Vec::new();
        let err = t.feed(transcript.as_bytes(), &mut out);
        let end = t.finish(&mut out);
        (String::from_utf8(out).unwrap(), t.usage(), err, end)
    }

    #[test]
    fn only_a_stream_whose_final_count_never_came_is_estimated() {
        for (transcript, estimated) in [
            (fixture!("anthropic_stream_text.sse"), false),
            (fixture!("anthropic_stream_truncated.sse"), true),
            (fixture!("anthropic_stream_error.sse"), true),
        ] {
            let mut t = StreamTranslator::new(&deployment("anthropic"), true, CREATED);
            t.feed(transcript.as_bytes(), &mut Vec::new());
            t.finish(&mut Vec::new());
            assert_eq!(t.usage_estimated(), estimated, "{transcript}");
        }
    }

    #[test]
    fn golden_text() {
        let (out, usage, err, end) = run(false, fixture!("anthropic_stream_text.sse"));
        assert_eq!(out, fixture!("anthropic_stream_text.expected.sse"));
        assert_eq!((err, end), (None, StreamEnd::Complete));
        assert_eq!(usage, Some(Usage { input: 25, output: 15, ..Usage::default() }));
    }

    #[test]
    fn golden_tool_use_with_usage_chunk() {
        let (out, usage, err, end) = run(true, fixture!("anthropic_stream_tool_use.sse"));
        assert_eq!(out, fixture!("anthropic_stream_tool_use.expected.sse"));
        assert_eq!((err, end), (None, StreamEnd::Complete));
        assert_eq!(
            usage,
            Some(Usage { input: 472, output: 89, cached_read: 1024, cache_write: 0, reasoning: 0, cache_write_1h: 0 })
        );
    }

    #[test]
    fn golden_error_mid_stream() {
        let (out, usage, err, end) = run(true, fixture!("anthropic_stream_error.sse"));
        assert_eq!(out, fixture!("anthropic_stream_error.expected.sse"));
        let err = err.expect("the error event is returned");
        assert_eq!((err.class, err.status, err.message.as_str()), (ErrorClass::Overloaded, 0, "Overloaded"));
        assert_eq!(end, StreamEnd::Truncated);
        // "Once upon a time, 🐉 " went out: 20 characters, 5 tokens, not message_start's placeholder 1.
        assert_eq!(usage, Some(Usage { input: 25, output: 5, ..Usage::default() }));
    }

    #[test]
    fn golden_truncated() {
        let (out, usage, err, end) = run(true, fixture!("anthropic_stream_truncated.sse"));
        assert_eq!(out, fixture!("anthropic_stream_truncated.expected.sse"));
        assert_eq!((err, end), (None, StreamEnd::Truncated));
        assert_eq!(
            usage,
            // "部分的な答え… partial": 15 characters delivered before the cut, so 4 output tokens.
            Some(Usage { input: 12, output: 4, cached_read: 0, cache_write: 300, reasoning: 0, cache_write_1h: 0 })
        );
    }

    #[test]
    fn nothing_emitted_before_first_output() {
        let mut t = StreamTranslator::new(&deployment("anthropic"), false, CREATED);
        let mut out = Vec::new();
        let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
        assert_eq!(t.feed(start.as_bytes(), &mut out), None);
        assert!(!t.emitted_any() && out.is_empty());
        assert_eq!(t.usage().map(|u| u.input), Some(3));
        let delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
        t.feed(delta.as_bytes(), &mut out);
        assert!(t.emitted_any());
    }
}
