//! Responses API streams for the client: relayed unchanged from a Responses-capable vendor (read
//! on the side for usage), or written from chat-completion chunks (the vendor's own, or the
//! gateway's translation of an Anthropic stream).

use super::answer::{self, function_call_item, message_item, output_text};
use super::view::{EventView, Kind};
use crate::canonical::usage::Usage;
use crate::http::error::ApiError;
use crate::http::sse::SseParser;
use crate::providers::{ErrorClass, StreamEnd, StreamTranslator, UpstreamError};
use serde_json::{json, Value};

/// A Responses `error` event (`sequence_number` continues the stream's numbering).
pub fn error_event(err: &ApiError, sequence_number: u64) -> Vec<u8> {
    let data = json!({
        "type": "error",
        "code": err.code,
        "message": err.message,
        "param": err.param,
        "sequence_number": sequence_number,
    });
    format!("event: error\ndata: {data}\n\n").into_bytes()
}

fn vendor_error(data: &Value) -> UpstreamError {
    let err = data.get("error").unwrap_or(data);
    let message = err.get("message").and_then(Value::as_str).unwrap_or("the upstream stream reported an error");
    let code = err.get("code").and_then(Value::as_str);
    let class = match code {
        Some("rate_limit_exceeded") => ErrorClass::RateLimited,
        Some("context_length_exceeded" | "invalid_prompt") => ErrorClass::BadRequest,
        _ => ErrorClass::ServerError,
    };
    let mut e = UpstreamError::new(class, 0, message);
    e.vendor_code = code.map(str::to_string);
    e
}

/// A vendor's error event whole, for its message and code (an error is rare: only then is an
/// event built into a `Value`).
fn whole(data: &str) -> Value {
    crate::support::lone_surrogates::parse::<Value>(data, "responses stream event").unwrap_or(Value::Null)
}

/// A Responses stream relayed byte for byte.
pub struct PassThrough {
    parser: SseParser,
    held: Vec<u8>,
    emitted: bool,
    done: bool,
    failed: bool,
    usage: Option<Usage>,
    last_sequence: Option<u64>,
}

impl PassThrough {
    pub fn new() -> Self {
        PassThrough {
            parser: SseParser::new(),
            held: Vec::new(),
            emitted: false,
            done: false,
            failed: false,
            usage: None,
            last_sequence: None,
        }
    }

    /// Relays `chunk`; `Some` when the vendor reported an error (relayed too, once the client has
    /// bytes; before then it is held back so the request may fall back).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        if self.failed {
            return None;
        }
        self.parser.feed(chunk);
        self.held.extend_from_slice(chunk);
        let mut failure = None;
        while let Some(ev) = self.parser.next_event() {
            let parsed = crate::support::lone_surrogates::parse::<EventView>(&ev.data, "responses stream event");
            let Ok(data) = parsed else { continue };
            let kind = data.kind.or_else(|| ev.event.as_deref().map(Kind::of)).unwrap_or(Kind::Other);
            if let Some(n) = data.sequence_number {
                self.last_sequence = Some(n);
            }
            match kind {
                Kind::Error => {
                    failure = Some(vendor_error(&whole(&ev.data)));
                    break;
                }
                Kind::Ended => {
                    self.usage = answer::usage_of_counts(data.usage).or(self.usage);
                    self.done = true;
                    self.emitted = true;
                }
                // A terminal failure: relayed if the client has output, reported either way.
                Kind::Failed => {
                    self.usage = answer::usage_of_counts(data.usage).or(self.usage);
                    let data = whole(&ev.data);
                    let error = data.pointer("/response/error").filter(|e| !e.is_null()).unwrap_or(&Value::Null);
                    failure = Some(vendor_error(error));
                    break;
                }
                Kind::Other => self.emitted = true,
                Kind::Preamble => {}
            }
        }
        if let Some(err) = failure {
            self.failed = true;
            if self.emitted {
                out.append(&mut self.held);
            }
            return Some(err);
        }
        if self.emitted {
            out.append(&mut self.held);
        }
        None
    }

    pub fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        if let Some(ev) = self.parser.finish() {
            if let Ok(data) = crate::support::lone_surrogates::parse::<EventView>(&ev.data, "responses stream event") {
                if data.kind == Some(Kind::Ended) {
                    self.usage = answer::usage_of_counts(data.usage).or(self.usage);
                    self.done = true;
                }
            }
        }
        if self.emitted || self.done {
            self.emitted = true;
            out.append(&mut self.held);
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

    pub fn emitted_any(&self) -> bool {
        self.emitted
    }

    /// Whether the vendor's last event (`response.completed` or `response.incomplete`) was relayed.
    pub fn ended(&self) -> bool {
        self.done && !self.failed
    }

    /// The gateway's own error event; none when the vendor's error was already relayed.
    pub fn error_event(&self, err: &ApiError) -> Vec<u8> {
        if self.failed && self.emitted {
            return Vec::new();
        }
        error_event(err, self.last_sequence.map_or(0, |n| n + 1))
    }
}

impl Default for PassThrough {
    fn default() -> Self {
        Self::new()
    }
}

enum Item {
    Message { text: String },
    Call { call_id: String, name: String, arguments: String },
}

/// Chat-completion chunks (from a `StreamTranslator`) rewritten as Responses events.
pub struct FromChat {
    chat: StreamTranslator,
    chunks: SseParser,
    template: Value,
    created: u64,
    suffix: Option<String>,
    model: Option<String>,
    sequence: u64,
    items: Vec<Item>,
    /// Output index of each chat tool-call index.
    calls: Vec<(u64, usize)>,
    open: Option<usize>,
    finish_reason: Option<String>,
    completed: bool,
}

impl FromChat {
    pub fn new(chat: StreamTranslator, template: Value, created: u64) -> Self {
        FromChat {
            chat,
            chunks: SseParser::new(),
            template,
            created,
            suffix: None,
            model: None,
            sequence: 0,
            items: Vec::new(),
            calls: Vec::new(),
            open: None,
            finish_reason: None,
            completed: false,
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        data["type"] = Value::from(kind);
        data["sequence_number"] = Value::from(self.sequence);
        self.sequence += 1;
        out.extend_from_slice(format!("event: {kind}\ndata: {data}\n\n").as_bytes());
    }

    fn suffix(&self) -> &str {
        self.suffix.as_deref().unwrap_or("gateway")
    }

    fn snapshot(&self, status_done: bool) -> Value {
        let output: Vec<Value> = (0..self.items.len()).map(|i| self.item_json(i, true)).collect();
        if !status_done {
            let mut t = self.template.clone();
            t["id"] = Value::from(format!("resp_{}", self.suffix()));
            t["created_at"] = Value::from(self.created);
            return t;
        }
        let usage = self.chat.usage();
        answer::finish(
            self.template.clone(),
            self.suffix(),
            self.created,
            self.finish_reason.as_deref(),
            output,
            usage.as_ref(),
            self.model.as_deref(),
        )
    }

    fn item_json(&self, index: usize, done: bool) -> Value {
        match &self.items[index] {
            Item::Message { text } => message_item(self.suffix(), text, done),
            Item::Call { call_id, name, arguments } => function_call_item(call_id, name, arguments, done),
        }
    }

    fn close_open(&mut self, out: &mut Vec<u8>) {
        let Some(index) = self.open.take() else { return };
        let item = self.item_json(index, true);
        match &self.items[index] {
            Item::Message { text } => {
                let id = item["id"].clone();
                let text = text.clone();
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": output_text(&text)}),
                );
            }
            Item::Call { arguments, .. } => {
                let arguments = arguments.clone();
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": item["id"], "output_index": index, "arguments": arguments}),
                );
            }
        }
        self.emit(out, "response.output_item.done", json!({"output_index": index, "item": item}));
    }

    fn open_item(&mut self, out: &mut Vec<u8>, item: Item) -> usize {
        self.close_open(out);
        let index = self.items.len();
        let is_message = matches!(item, Item::Message { .. });
        self.items.push(item);
        self.open = Some(index);
        let added = self.item_json(index, false);
        self.emit(out, "response.output_item.added", json!({"output_index": index, "item": added}));
        if is_message {
            self.emit(
                out,
                "response.content_part.added",
                json!({"item_id": added["id"], "output_index": index, "content_index": 0, "part": output_text("")}),
            );
        }
        index
    }

    fn on_chunk(&mut self, chunk: &Value, out: &mut Vec<u8>) {
        if self.suffix.is_none() {
            self.suffix = Some(answer::id_suffix(chunk.get("id").and_then(Value::as_str).unwrap_or("")));
            self.model = chunk.get("model").and_then(Value::as_str).map(str::to_string);
            let response = self.snapshot(false);
            self.emit(out, "response.created", json!({"response": response}));
            self.emit(out, "response.in_progress", json!({"response": response}));
        }
        let Some(choice) = chunk.pointer("/choices/0") else { return };
        let delta = &choice["delta"];
        let text =
            delta.get("content").and_then(Value::as_str).or_else(|| delta.get("refusal").and_then(Value::as_str));
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            let index = match self.open.filter(|i| matches!(self.items[*i], Item::Message { .. })) {
                Some(i) => i,
                None => self.open_item(out, Item::Message { text: String::new() }),
            };
            if let Item::Message { text: all } = &mut self.items[index] {
                all.push_str(text);
            }
            let id = format!("msg_{}", self.suffix());
            self.emit(
                out,
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []}),
            );
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let chat_index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            // Some compatible vendors send parallel calls without `index` (or all at 0): a new id is a new call.
            let id = call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
            let same_call = |i: usize| match (&self.items[i], id) {
                (Item::Call { call_id, .. }, Some(id)) => call_id == id,
                _ => true,
            };
            let index = match self.calls.iter().rev().find(|(c, i)| *c == chat_index && same_call(*i)) {
                Some((_, i)) => *i,
                None => {
                    let call_id = call.get("id").and_then(Value::as_str).unwrap_or("").to_string();
                    let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_string();
                    let i = self.open_item(out, Item::Call { call_id, name, arguments: String::new() });
                    self.calls.push((chat_index, i));
                    i
                }
            };
            let fragment = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("");
            if !fragment.is_empty() {
                if let Item::Call { arguments, .. } = &mut self.items[index] {
                    arguments.push_str(fragment);
                }
                let id = self.item_json(index, false)["id"].clone();
                self.emit(
                    out,
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": fragment}),
                );
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
    }

    fn complete(&mut self, out: &mut Vec<u8>) {
        if self.completed || self.suffix.is_none() {
            return;
        }
        self.close_open(out);
        let response = self.snapshot(true);
        let kind = if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.emit(out, kind, json!({"response": response}));
        self.completed = true;
    }

    fn rewrite(&mut self, chat_out: &[u8], out: &mut Vec<u8>) {
        self.chunks.feed(chat_out);
        while let Some(ev) = self.chunks.next_event() {
            if ev.data.trim() == "[DONE]" {
                self.complete(out);
            } else if let Ok(chunk) =
                crate::support::lone_surrogates::parse::<Value>(&ev.data, "responses stream event")
            {
                self.on_chunk(&chunk, out);
            }
        }
    }

    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        let mut chat_out = Vec::new();
        let failure = self.chat.feed(chunk, &mut chat_out);
        self.rewrite(&chat_out, out);
        failure
    }

    pub fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        let mut chat_out = Vec::new();
        let end = self.chat.finish(&mut chat_out);
        self.rewrite(&chat_out, out);
        if end == StreamEnd::Complete {
            self.complete(out);
        }
        end
    }

    pub fn usage(&self) -> Option<Usage> {
        self.chat.usage()
    }

    pub fn usage_estimated(&self) -> bool {
        self.chat.usage_estimated()
    }

    /// The chat stream has content (reasoning, which this door does not show) but no output
    /// item has opened: the model has started.
    pub fn thinking(&self) -> bool {
        !self.emitted_any() && self.chat.emitted_any()
    }

    pub fn emitted_any(&self) -> bool {
        // Held until the first output item: `response.created` alone does not commit the stream.
        !self.items.is_empty() || self.completed
    }

    /// Whether the chat stream's `[DONE]` came and `response.completed` was written.
    pub fn ended(&self) -> bool {
        self.completed && self.chat.ended()
    }

    pub fn error_event(&self, err: &ApiError) -> Vec<u8> {
        error_event(err, self.sequence)
    }
}
