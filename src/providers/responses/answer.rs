//! A chat-completions answer written back as a Responses API response object: the message text
//! as a `message` output item with one `output_text` part, each tool call as a `function_call`
//! item, `finish_reason: "length"` as `status: "incomplete"`, and usage in the Responses shape.

use crate::canonical::usage::Usage;
use crate::canonical::usage_counts::ResponsesCounts;
use crate::providers::UpstreamError;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The request fields a response object echoes, with OpenAI's defaults when absent.
pub fn template(req: &Map<String, Value>) -> Value {
    let get = |key: &str, default: Value| req.get(key).filter(|v| !v.is_null()).cloned().unwrap_or(default);
    json!({
        "id": "",
        "object": "response",
        "created_at": 0,
        "status": "in_progress",
        "error": null,
        "incomplete_details": null,
        "instructions": get("instructions", Value::Null),
        "max_output_tokens": get("max_output_tokens", Value::Null),
        "model": get("model", Value::Null),
        "output": [],
        "parallel_tool_calls": get("parallel_tool_calls", Value::Bool(true)),
        "previous_response_id": null,
        "reasoning": get("reasoning", json!({"effort": null, "summary": null})),
        "store": get("store", Value::Bool(true)),
        "temperature": get("temperature", json!(1.0)),
        "text": get("text", json!({"format": {"type": "text"}})),
        "tool_choice": get("tool_choice", Value::from("auto")),
        "tools": get("tools", json!([])),
        "top_p": get("top_p", json!(1.0)),
        "truncation": get("truncation", Value::from("disabled")),
        "usage": null,
        "user": get("user", Value::Null),
        "metadata": get("metadata", json!({})),
    })
}

/// Usage in the Responses shape: cached tokens inside `input_tokens`, reasoning inside `output_tokens`.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens(),
        "input_tokens_details": {"cached_tokens": u.cached_read},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.total_tokens(),
    })
}

/// Reads a Responses `usage` object; `None` if it carries no token counts.
pub fn usage_of(usage: &Value) -> Option<Usage> {
    ResponsesCounts::deserialize(usage).ok().and_then(usage_of_counts)
}

/// The usage a Responses `usage` object's counts make; `None` without input or output counts.
pub fn usage_of_counts(counts: ResponsesCounts) -> Option<Usage> {
    let (input, output) = (counts.input_tokens(), counts.output_tokens());
    if input.is_none() && output.is_none() {
        return None;
    }
    let input = input.unwrap_or(0);
    let cached = counts.cached_tokens().unwrap_or(0).min(input);
    Some(Usage {
        input: input - cached,
        output: output.unwrap_or(0),
        cached_read: cached,
        cache_write: 0,
        reasoning: counts.reasoning_tokens().unwrap_or(0),
        cache_write_1h: 0,
    })
}

/// The id suffix shared by the response and its items, from the vendor's completion id.
pub fn id_suffix(completion_id: &str) -> String {
    let bare = completion_id.strip_prefix("chatcmpl-").or_else(|| completion_id.strip_prefix("msg_"));
    let suffix: String = bare.unwrap_or(completion_id).chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    if suffix.is_empty() {
        "gateway".to_string()
    } else {
        suffix
    }
}

pub fn message_item(suffix: &str, text: &str, done: bool) -> Value {
    let content = if done { json!([output_text(text)]) } else { json!([]) };
    json!({
        "id": format!("msg_{suffix}"),
        "type": "message",
        "status": if done { "completed" } else { "in_progress" },
        "role": "assistant",
        "content": content,
    })
}

pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub fn function_call_item(call_id: &str, name: &str, arguments: &str, done: bool) -> Value {
    let id: String = call_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
    json!({
        "id": format!("fc_{}", id.trim_start_matches("call_")),
        "type": "function_call",
        "status": if done { "completed" } else { "in_progress" },
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    })
}

/// `status` and `incomplete_details` for a chat `finish_reason`.
pub fn status_of(finish_reason: Option<&str>) -> (&'static str, Value) {
    match finish_reason {
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some("content_filter") => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// Fills the template: id, time, status, output items, usage, the vendor's model name.
pub fn finish(
    mut template: Value,
    suffix: &str,
    created: u64,
    finish_reason: Option<&str>,
    output: Vec<Value>,
    usage: Option<&Usage>,
    model: Option<&str>,
) -> Value {
    let (status, details) = status_of(finish_reason);
    template["id"] = Value::from(format!("resp_{suffix}"));
    template["created_at"] = Value::from(created);
    template["status"] = Value::from(status);
    template["incomplete_details"] = details;
    template["output"] = Value::Array(output);
    template["usage"] = usage.map_or(Value::Null, usage_json);
    if let Some(model) = model {
        template["model"] = Value::from(model);
    }
    template
}

/// A `chat.completion` body (OpenAI's own, or the gateway's translation of an Anthropic answer)
/// as a Responses response object.
pub fn from_chat(
    template: &Value,
    completion: &[u8],
    usage: Option<&Usage>,
    now_s: u64,
) -> Result<String, UpstreamError> {
    let completion: Value = crate::support::lone_surrogates::parse_slice(completion, "chat answer")
        .map_err(|e| UpstreamError::malformed(200, format!("the upstream returned a malformed body: {e}")))?;
    let suffix = id_suffix(completion.get("id").and_then(Value::as_str).unwrap_or(""));
    let choice = completion.pointer("/choices/0").cloned().unwrap_or(Value::Null);
    let message = &choice["message"];
    let mut output = Vec::new();
    let text =
        message.get("content").and_then(Value::as_str).or_else(|| message.get("refusal").and_then(Value::as_str));
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        output.push(message_item(&suffix, text, true));
    }
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let call_id = call.get("id").and_then(Value::as_str).unwrap_or("");
        let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
        let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("");
        output.push(function_call_item(call_id, name, arguments, true));
    }
    let created = completion.get("created").and_then(Value::as_u64).unwrap_or(now_s);
    let model = completion.get("model").and_then(Value::as_str);
    let finish_reason = choice.get("finish_reason").and_then(Value::as_str);
    Ok(finish(template.clone(), &suffix, created, finish_reason, output, usage, model).to_string())
}
