//! A Responses API request translated to a chat-completions request, for deployments that do not
//! speak the Responses API (chat-only OpenAI-compatible vendors, and Anthropic behind the chat
//! translation).
//!
//! The rules (docs/responses.md): `instructions` and `system`/`developer` messages become system
//! messages; `function_call` items join the assistant message before them as `tool_calls`,
//! `function_call_output` items become `tool` messages; `reasoning` items are dropped (another
//! vendor cannot read them); `function` tools are translated, other tool types (`web_search`,
//! `namespace`, `file_search`, `mcp`, custom tools, …) are dropped and named in a warning, unless
//! `tool_choice` requires one, which is a 400. State the gateway does not keep
//! (`previous_response_id`, `conversation`, `item_reference`, `background`) is a 400.

use crate::http::codes;
use crate::http::error::ApiError;
use serde_json::{json, Map, Value};

/// The chat request and what was left out of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatPlan {
    pub chat: Value,
    /// Tool names (or types, for unnamed hosted tools) that chat completions cannot express.
    pub dropped_tools: Vec<String>,
    /// Input items left out (reasoning, hosted tool calls).
    pub dropped_items: usize,
}

impl ChatPlan {
    /// The `x-gateway-warning` value, if anything was left out.
    pub fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.dropped_tools.is_empty() {
            parts.push(format!(
                "tools not supported by this deployment were dropped: {}",
                self.dropped_tools.join(", ")
            ));
        }
        if self.dropped_items > 0 {
            parts.push(format!("{} input item(s) (reasoning, hosted tool calls) were dropped", self.dropped_items));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

fn invalid(code: &str, param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_request(code, message).with_param(param)
}

/// The refusal for state the gateway does not keep.
pub fn stateless_only(param: &str) -> ApiError {
    invalid(
        codes::UNSUPPORTED_PARAMETER,
        param,
        format!(
            "'{param}' is not supported by this gateway: it does not store responses. Send the whole \
             conversation in 'input' on every request (with \"store\": false), as Codex does."
        ),
    )
}

/// Translates a Responses request body (already parsed) to a chat-completions request.
pub fn to_chat(req: &Map<String, Value>) -> Result<ChatPlan, ApiError> {
    for param in ["previous_response_id", "conversation"] {
        if req.get(param).is_some_and(|v| !v.is_null()) {
            return Err(stateless_only(param));
        }
    }
    if req.get("background") == Some(&Value::Bool(true)) {
        return Err(stateless_only("background"));
    }
    let mut plan = ChatPlan { chat: Value::Null, dropped_tools: Vec::new(), dropped_items: 0 };
    let mut messages: Vec<Value> = Vec::new();
    match req.get("instructions") {
        Some(Value::String(s)) if !s.is_empty() => messages.push(json!({"role": "system", "content": s})),
        Some(Value::String(_)) | Some(Value::Null) | None => {}
        Some(_) => return Err(invalid(codes::INVALID_TYPE, "instructions", "'instructions' must be a string.")),
    }
    match req.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                add_item(&mut messages, item, i, &mut plan.dropped_items)?;
            }
        }
        Some(_) => {
            return Err(invalid(codes::INVALID_TYPE, "input", "'input' must be a string or an array of input items."))
        }
        None => {
            return Err(invalid(codes::MISSING_REQUIRED_PARAMETER, "input", "Missing required parameter: 'input'."))
        }
    }
    let mut chat = Map::new();
    chat.insert("model".into(), req.get("model").cloned().unwrap_or(Value::Null));
    chat.insert("messages".into(), Value::Array(messages));
    let tools = tools(req.get("tools"), &mut plan.dropped_tools)?;
    let has_tools = !tools.is_empty();
    if has_tools {
        chat.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = req.get("tool_choice").filter(|v| !v.is_null()) {
        if let Some(choice) = tool_choice(choice, &plan.dropped_tools, has_tools)? {
            chat.insert("tool_choice".into(), choice);
        }
    }
    if has_tools {
        if let Some(p) = req.get("parallel_tool_calls").filter(|v| v.is_boolean()) {
            chat.insert("parallel_tool_calls".into(), p.clone());
        }
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "top_p"), ("max_output_tokens", "max_tokens")] {
        if let Some(v) = req.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    let user = req.get("user").or_else(|| req.get("safety_identifier"));
    if let Some(user) = user.filter(|v| v.is_string()) {
        chat.insert("user".into(), user.clone());
    }
    if let Some(format) = req.get("text").and_then(|t| t.get("format")).and_then(response_format) {
        chat.insert("response_format".into(), format);
    }
    if req.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream".into(), Value::Bool(true));
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    plan.chat = Value::Object(chat);
    Ok(plan)
}

/// Input items left out of the chat form: reasoning (encrypted for its own vendor) and the calls of
/// hosted tools cannot be replayed to a chat deployment.
pub(super) const LEFT_OUT: [&str; 17] = [
    "reasoning",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "custom_tool_call",
    "custom_tool_call_output",
    "shell_call",
    "shell_call_output",
];

fn item_type(item: &Map<String, Value>) -> &str {
    match item.get("type").and_then(Value::as_str) {
        Some(t) => t,
        // An "easy" input message carries a role and no type.
        None if item.contains_key("role") => "message",
        None => "",
    }
}

fn add_item(messages: &mut Vec<Value>, item: &Value, i: usize, dropped: &mut usize) -> Result<(), ApiError> {
    let param = format!("input[{i}]");
    let Some(obj) = item.as_object() else {
        return Err(invalid(codes::INVALID_TYPE, &param, format!("'{param}' must be an input item object.")));
    };
    match item_type(obj) {
        "message" => {
            let role = match obj.get("role").and_then(Value::as_str) {
                Some("user") => "user",
                Some("assistant") => "assistant",
                Some("system" | "developer") => "system",
                _ => {
                    return Err(invalid(
                        codes::INVALID_VALUE,
                        &format!("{param}.role"),
                        format!("'{param}.role' must be one of user, assistant, system, developer."),
                    ))
                }
            };
            let content = content(obj.get("content"), role, &param)?;
            messages.push(json!({"role": role, "content": content}));
        }
        "function_call" => {
            let call_id = str_field(obj, "call_id", &param)?;
            let name = str_field(obj, "name", &param)?;
            let arguments = obj.get("arguments").and_then(Value::as_str).unwrap_or("{}");
            add_call(
                messages,
                json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}),
            );
        }
        "function_call_output" => {
            let call_id = str_field(obj, "call_id", &param)?;
            let output = match obj.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()
                }
                _ => {
                    return Err(invalid(codes::INVALID_TYPE, &format!("{param}.output"), "'output' must be a string."))
                }
            };
            messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        "item_reference" => return Err(stateless_only("item_reference")),
        kind if LEFT_OUT.contains(&kind) => *dropped += 1,
        other => {
            return Err(invalid(
                codes::INVALID_VALUE,
                &format!("{param}.type"),
                format!("Input items of type '{other}' cannot be sent to this model's deployment."),
            ))
        }
    }
    Ok(())
}

/// Calls made in one turn (parallel calls) share one assistant message.
fn add_call(messages: &mut Vec<Value>, call: Value) {
    let open = messages.last_mut().filter(|m| m["role"] == "assistant").and_then(Value::as_object_mut);
    match open {
        Some(m) => match m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            Some(calls) => calls.push(call),
            None => {
                m.insert("tool_calls".into(), json!([call]));
            }
        },
        None => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
    }
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str, param: &str) -> Result<&'a str, ApiError> {
    obj.get(key).and_then(Value::as_str).ok_or_else(|| {
        invalid(codes::MISSING_REQUIRED_PARAMETER, &format!("{param}.{key}"), format!("Missing '{param}.{key}'."))
    })
}

/// A message's content: a string, or parts. Assistant content is joined into one string (chat
/// vendors do not all accept parts there).
fn content(content: Option<&Value>, role: &str, param: &str) -> Result<Value, ApiError> {
    let parts = match content {
        Some(Value::String(s)) => return Ok(Value::from(s.clone())),
        Some(Value::Array(parts)) => parts,
        _ => {
            return Err(invalid(
                codes::INVALID_TYPE,
                &format!("{param}.content"),
                "Message content must be a string or an array of content parts.",
            ))
        }
    };
    let mut out = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        let text = part.get("text").or_else(|| part.get("refusal")).and_then(Value::as_str);
        match (kind, text) {
            ("input_text" | "output_text" | "text" | "refusal", Some(text)) => {
                out.push(json!({"type": "text", "text": text}))
            }
            ("input_image", _) => {
                let Some(url) = part.get("image_url").and_then(Value::as_str) else {
                    return Err(invalid(
                        codes::UNSUPPORTED_PARAMETER,
                        &format!("{param}.content[{j}]"),
                        "Images must be given by 'image_url' (a URL or data URL) for this model's deployment; file ids need stored files.",
                    ));
                };
                let mut image = json!({"url": url});
                if let Some(detail) = part.get("detail").and_then(Value::as_str) {
                    image["detail"] = Value::from(detail);
                }
                out.push(json!({"type": "image_url", "image_url": image}));
            }
            _ => {
                return Err(invalid(
                    codes::UNSUPPORTED_PARAMETER,
                    &format!("{param}.content[{j}]"),
                    format!("Content parts of type '{kind}' cannot be sent to this model's deployment."),
                ))
            }
        }
    }
    if role == "assistant" || role == "system" {
        let text: String = out.iter().filter_map(|p| p["text"].as_str()).collect();
        return Ok(Value::from(text));
    }
    Ok(Value::Array(out))
}

/// Function tools translated; every other tool type dropped and named in `dropped`.
fn tools(tools: Option<&Value>, dropped: &mut Vec<String>) -> Result<Vec<Value>, ApiError> {
    let Some(tools) = tools.filter(|v| !v.is_null()) else { return Ok(Vec::new()) };
    let Some(tools) = tools.as_array() else {
        return Err(invalid(codes::INVALID_TYPE, "tools", "'tools' must be an array."));
    };
    let mut out = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        let name = tool.get("name").and_then(Value::as_str);
        match (kind, name) {
            ("function", Some(name)) => {
                let mut function = Map::new();
                function.insert("name".into(), Value::from(name));
                for key in ["description", "parameters", "strict"] {
                    if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                        function.insert(key.into(), v.clone());
                    }
                }
                out.push(json!({"type": "function", "function": function}));
            }
            ("function", None) => {
                return Err(invalid(
                    codes::MISSING_REQUIRED_PARAMETER,
                    &format!("tools[{i}].name"),
                    "Missing tool name.",
                ))
            }
            (kind, Some(name)) => dropped.push(format!("{kind}:{name}")),
            (kind, None) => dropped.push(kind.to_string()),
        }
    }
    Ok(out)
}

/// `tool_choice` in chat's shape; a choice that needs a dropped tool is a 400.
fn tool_choice(choice: &Value, dropped: &[String], has_tools: bool) -> Result<Option<Value>, ApiError> {
    let refuse = |what: &str| {
        invalid(
            codes::UNSUPPORTED_PARAMETER,
            "tool_choice",
            format!(
                "'tool_choice' requires {what}, which this model's deployment (chat completions) cannot run; \
                 only function tools are translated."
            ),
        )
    };
    match choice {
        Value::String(s) if s == "none" || s == "auto" => Ok(has_tools.then(|| choice.clone())),
        Value::String(s) if s == "required" && has_tools => Ok(Some(choice.clone())),
        Value::String(s) if s == "required" => Err(refuse("a tool call, but no function tool was given")),
        Value::Object(o) => match (o.get("type").and_then(Value::as_str), o.get("name").and_then(Value::as_str)) {
            (Some("function"), Some(name)) if !dropped.iter().any(|d| d.ends_with(&format!(":{name}"))) => {
                Ok(Some(json!({"type": "function", "function": {"name": name}})))
            }
            (Some("function"), Some(name)) => Err(refuse(&format!("the tool '{name}'"))),
            (Some("allowed_tools"), _) => Err(refuse("a set of allowed tools")),
            (Some(kind), _) => Err(refuse(&format!("the '{kind}' tool"))),
            (None, _) => Err(invalid(codes::INVALID_VALUE, "tool_choice", "'tool_choice' has no type.")),
        },
        _ => Err(invalid(
            codes::INVALID_VALUE,
            "tool_choice",
            "'tool_choice' must be none, auto, required or an object.",
        )),
    }
}

/// `text.format` as chat's `response_format`; plain text needs none.
pub(super) fn response_format(format: &Value) -> Option<Value> {
    match format.get("type").and_then(Value::as_str)? {
        "json_object" => Some(json!({"type": "json_object"})),
        "json_schema" => {
            let mut schema = Map::new();
            for key in ["name", "description", "schema", "strict"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    schema.insert(key.into(), v.clone());
                }
            }
            Some(json!({"type": "json_schema", "json_schema": schema}))
        }
        _ => None,
    }
}
