//! The OpenAI chat-completions request: the canonical form every provider adapter translates from.
//!
//! Every struct keeps the fields it does not model in a flattened `extra` map, so OpenAI-compatible
//! vendors receive what newer SDKs send, untouched. `null` is read as "absent".

// ApiError is the client-facing error, built at most once per request; boxing it buys nothing here.

use crate::http::codes;
use crate::http::error::ApiError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use facts::ChatFacts;

pub mod completion;
mod decode;
pub mod facts;
mod path;
pub mod usage;
pub mod usage_counts;
mod validate;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    #[default]
    User,
    Assistant,
    Tool,
    /// Deprecated by OpenAI; passed to OpenAI-compatible vendors as is.
    Function,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct Message {
    pub role: Role,
    /// Serialized as `null` when absent: an assistant turn that only calls tools.
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// Whether this is an array of text parts only, which [`Content::joined_text`] can say as one string.
    pub fn is_text_parts(&self) -> bool {
        matches!(self, Content::Parts(parts) if parts.iter().all(|p| p.kind == "text" && p.text.is_some()))
    }

    /// The texts of an array of text parts joined by blank lines; `None` for anything else.
    pub fn joined_text(&self) -> Option<String> {
        match self {
            Content::Parts(parts) if self.is_text_parts() => {
                Some(parts.iter().filter_map(|p| p.text.as_deref()).collect::<Vec<_>>().join("\n\n"))
            }
            _ => None,
        }
    }
}

/// One part of a multi-part content array; `kind` is `text`, `image_url`, or a type this gateway passes on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<ImageUrl>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDef>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Also read from a cached completion's message (`cache::policy`), hence `Deserialize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCall>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text, as the model produced it.
    pub arguments: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
#[serde(from = "Value", into = "Value")]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Function(String),
    /// A shape this gateway does not model (e.g. `allowed_tools`), kept verbatim.
    Other(Value),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct ResponseFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<JsonSchemaFormat>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct JsonSchemaFormat {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl From<Value> for ToolChoice {
    fn from(v: Value) -> Self {
        match v.as_str() {
            Some("none") => return ToolChoice::None,
            Some("auto") => return ToolChoice::Auto,
            Some("required") => return ToolChoice::Required,
            _ => {}
        }
        let named = v.as_object().filter(|o| o.len() == 2 && o.get("type").and_then(Value::as_str) == Some("function"));
        let function = named.and_then(|o| o.get("function")).and_then(Value::as_object).filter(|f| f.len() == 1);
        match function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(name) => ToolChoice::Function(name.to_string()),
            None => ToolChoice::Other(v),
        }
    }
}

impl From<ToolChoice> for Value {
    fn from(c: ToolChoice) -> Self {
        match c {
            ToolChoice::None => Value::from("none"),
            ToolChoice::Auto => Value::from("auto"),
            ToolChoice::Required => Value::from("required"),
            ToolChoice::Function(name) => serde_json::json!({"type": "function", "function": {"name": name}}),
            ToolChoice::Other(v) => v,
        }
    }
}

impl Stop {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
    }
}

impl Content {
    /// The text of a string or of the text parts, joined with nothing between them.
    pub fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Parts(parts) => parts.iter().filter_map(|p| p.text.as_deref()).collect(),
        }
    }
}

impl ChatRequest {
    /// Parses and validates a client body; errors name the offending parameter the way OpenAI does.
    pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::invalid_request(
                codes::INVALID_JSON,
                format!("We could not parse the JSON body of your request ({e}). The API expects a JSON object."),
            )
        })?;
        Self::from_json(value)
    }

    /// Validates and decodes a body already read as JSON (a translated door's request).
    pub fn from_json(value: Value) -> Result<ChatRequest, ApiError> {
        validate::request(&value)?;
        decode::request(value)
    }

    pub fn is_stream(&self) -> bool {
        self.stream == Some(true)
    }

    pub fn wants_usage(&self) -> bool {
        self.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true)
    }

    /// Tool definitions, or a history with tool calls/results: both need a tool-capable deployment.
    pub fn needs_tools(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| !t.is_empty())
            || self
                .messages
                .iter()
                .any(|m| m.role == Role::Tool || m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()))
    }

    pub fn needs_json(&self) -> bool {
        self.response_format.as_ref().is_some_and(|f| f.kind == "json_object" || f.kind == "json_schema")
    }

    pub fn needs_vision(&self) -> bool {
        self.messages.iter().any(|m| match &m.content {
            Some(Content::Parts(parts)) => parts.iter().any(|p| p.kind == "image_url"),
            _ => false,
        })
    }

    /// How many answers the client asked for (`n`, validated as a positive integer; 1 by default).
    pub fn choices(&self) -> u64 {
        self.extra.get("n").and_then(Value::as_u64).unwrap_or(1).max(1)
    }

    pub fn max_output_tokens(&self) -> Option<u64> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// Characters of all text the model reads: messages, tool calls, tool definitions, schemas.
    pub fn text_chars(&self) -> usize {
        let chars = |s: &str| s.chars().count();
        let json_chars = |v: &Value| if v.is_null() { 0 } else { written_chars(v) };
        let mut n = 0;
        for m in &self.messages {
            n += match &m.content {
                Some(Content::Text(s)) => chars(s),
                Some(Content::Parts(parts)) => parts.iter().filter_map(|p| p.text.as_deref()).map(chars).sum(),
                None => 0,
            };
            n += m.name.as_deref().map_or(0, chars);
            for call in m.tool_calls.iter().flatten() {
                if let Some(f) = &call.function {
                    n += chars(&f.name) + chars(&f.arguments);
                }
            }
        }
        for tool in self.tools.iter().flatten() {
            if let Some(f) = &tool.function {
                n += chars(&f.name);
                n += f.description.as_deref().map_or(0, chars);
                n += f.parameters.as_ref().map_or(0, json_chars);
            }
        }
        if let Some(schema) = self.response_format.as_ref().and_then(|f| f.json_schema.as_ref()) {
            n += schema.schema.as_ref().map_or(0, json_chars);
        }
        n
    }
}

/// The characters of `v` written as compact JSON, counted as they are written.
/// perf: an agent's tool schemas are kilobytes each; no string is made for them.
pub(crate) fn written_chars(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // Every byte but a UTF-8 continuation byte starts a character.
            self.0 += bytes.iter().filter(|&&b| (b as i8) >= -0x40).count();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, v).map_or(0, |()| count.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn written_chars_count_what_to_string_writes() {
        for v in [json!({"a": "é\u{1F600}\n\"x", "b": [1, 2.5, null, true], "c": {"ü": "\u{7f}\u{80}"}}), json!("")] {
            assert_eq!(written_chars(&v), v.to_string().chars().count(), "{v}");
        }
    }

    fn parse(v: Value) -> Result<ChatRequest, ApiError> {
        ChatRequest::parse(v.to_string().as_bytes())
    }

    fn err(v: Value) -> (String, Option<String>, String) {
        let e = parse(v).unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.kind, "invalid_request_error");
        (e.code, e.param, e.message)
    }

    #[test]
    fn round_trips_unknown_fields_at_every_level() {
        let body = json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [
                    {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                    {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}
                ]},
                {"role": "assistant", "content": null, "refusal": null,
                 "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}],
            "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
            "reasoning_effort": "low",
            "temperature": 0.7,
            "n": 1,
            "stream": true,
            "stream_options": {"include_usage": true, "include_obfuscation": false}
        });
        let req = parse(body.clone()).unwrap();
        assert_eq!(req.extra["reasoning_effort"], "low");
        assert!(matches!(req.tool_choice, Some(ToolChoice::Other(_))));
        assert_eq!(serde_json::to_value(&req).unwrap(), body);
        assert!(req.wants_usage() && req.needs_tools() && req.needs_vision() && !req.needs_json());
    }

    #[test]
    fn tool_choice_shapes() {
        for (v, want) in [
            (json!("none"), ToolChoice::None),
            (json!("auto"), ToolChoice::Auto),
            (json!("required"), ToolChoice::Required),
            (json!({"type": "function", "function": {"name": "get"}}), ToolChoice::Function("get".into())),
        ] {
            assert_eq!(ToolChoice::from(v.clone()), want);
            assert_eq!(Value::from(want), v);
        }
    }

    #[test]
    fn capability_helpers() {
        let req = parse(json!({
            "model": "m", "max_tokens": 50, "max_completion_tokens": 70,
            "messages": [{"role": "user", "content": "héllo"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
        }))
        .unwrap();
        assert!(req.needs_json() && !req.needs_tools() && !req.needs_vision() && !req.wants_usage());
        assert_eq!(req.max_output_tokens(), Some(70));
        assert_eq!(req.text_chars(), 5 + r#"{"type":"object"}"#.len());
    }

    #[test]
    fn n_is_the_number_of_choices() {
        let with_n = |n: Value| parse(json!({"model": "m", "n": n, "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(with_n(json!(1000)).unwrap().choices(), 1000);
        assert_eq!(with_n(Value::Null).unwrap().choices(), 1);
        assert_eq!(with_n(json!(0)).unwrap_err().param.as_deref(), Some("n"));
        assert_eq!(with_n(json!("3")).unwrap_err().code, codes::INVALID_TYPE);
    }

    #[test]
    fn text_chars_counts_tools_and_calls() {
        let req = parse(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "你好"},
                {"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {"url": "data:x"}}]},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "fn", "arguments": "{}"}}]}
            ],
            "tools": [{"type": "function", "function": {"name": "fn", "description": "d", "parameters": {}}}]
        }))
        .unwrap();
        assert_eq!(req.text_chars(), 2 + 2 + (2 + 2) + (2 + 1 + 2));
    }

    #[test]
    fn nulls_are_absent() {
        let req =
            parse(json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": null, "tools": null}))
                .unwrap();
        assert_eq!((req.stop, req.tools), (None, None));
    }

    #[test]
    fn precise_errors() {
        let cases: Vec<(Value, &str, Option<&str>, &str)> = vec![
            (json!([1]), "invalid_type", None, "must be a JSON object"),
            (json!({"messages": []}), "missing_required_parameter", Some("model"), "'model'"),
            (
                json!({"model": 3, "messages": []}),
                "invalid_type",
                Some("model"),
                "expected a string, but got an integer",
            ),
            (json!({"model": "m"}), "missing_required_parameter", Some("messages"), "'messages'"),
            (json!({"model": "m", "messages": {}}), "invalid_type", Some("messages"), "expected an array"),
            (json!({"model": "m", "messages": []}), "empty_array", Some("messages"), "empty array"),
            (json!({"model": "m", "messages": ["hi"]}), "invalid_type", Some("messages[0]"), "expected an object"),
            (
                json!({"model": "m", "messages": [{"content": "x"}]}),
                "missing_required_parameter",
                Some("messages[0].role"),
                "role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "bot", "content": "x"}]}),
                "invalid_value",
                Some("messages[0].role"),
                "'bot'",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}]}),
                "missing_required_parameter",
                Some("messages[0].content"),
                "content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
                "invalid_type",
                Some("messages[0].content"),
                "string or array",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}]}),
                "invalid_type",
                Some("messages[0].content[0].image_url"),
                "expected an object",
            ),
            (
                json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
                "missing_required_parameter",
                Some("messages[0].tool_call_id"),
                "",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f"}}]}]}),
                "missing_required_parameter",
                Some("messages[0].tool_calls[0].function.arguments"),
                "",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
                "invalid_type",
                Some("temperature"),
                "number",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
                "integer_below_min_value",
                Some("max_tokens"),
                ">= 1",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}),
                "invalid_type",
                Some("max_tokens"),
                "decimal",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [1]}),
                "invalid_type",
                Some("stop[0]"),
                "string",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "any"}),
                "invalid_value",
                Some("tool_choice"),
                "'any'",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}),
                "missing_required_parameter",
                Some("tools[0].function"),
                "",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}),
                "invalid_value",
                Some("response_format.type"),
                "'yaml'",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": "yes"}}),
                "invalid_type",
                Some("stream_options.include_usage"),
                "boolean",
            ),
        ];
        for (body, code, param, needle) in cases {
            let (c, p, m) = err(body.clone());
            assert_eq!((c.as_str(), p.as_deref()), (code, param), "{body} → {m}");
            assert!(m.contains(needle), "{body}: {m}");
        }
    }

    #[test]
    fn malformed_json() {
        let e = ChatRequest::parse(b"{\"model\": ").unwrap_err();
        assert_eq!((e.status, e.code.as_str()), (400, "invalid_json"));
        assert!(e.message.contains("line 1"), "{}", e.message);
    }
}
