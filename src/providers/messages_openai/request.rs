//! Anthropic Messages request → OpenAI chat-completions request (then the OpenAI adapter's own
//! quirks: max-tokens field, stream usage, extra headers).

use crate::canonical::ChatRequest;
use crate::config::routes::Deployment;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::providers::{build_chat, UpstreamCall};
use serde_json::{json, Map, Value};

/// The vendor request for an OpenAI-format deployment; a 400 for what cannot be translated.
pub fn build(dep: &Deployment, messages: &Value, credential: &str) -> Result<UpstreamCall, ApiError> {
    let body = translate(dep, messages)?;
    let chat = ChatRequest::from_json(body)?;
    // Streamed usage is asked for whenever the vendor allows it: the Messages stream reports it.
    build_chat(dep, &chat, credential, dep.quirks.stream_options)
}

fn unsupported(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_request(codes::CAPABILITY_NOT_SUPPORTED, message).with_param(param)
}

pub(super) fn translate(dep: &Deployment, req: &Value) -> Result<Value, ApiError> {
    let mut out = Map::new();
    out.insert("model".into(), Value::from(dep.model.as_str()));
    let mut messages = Vec::new();
    if let Some(system) = req.get("system").map(text_of).filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for (i, m) in req.get("messages").and_then(Value::as_array).into_iter().flatten().enumerate() {
        match m.get("role").and_then(Value::as_str) {
            Some("assistant") => messages.push(assistant(m.get("content").unwrap_or(&Value::Null))),
            Some("user") => user(m.get("content").unwrap_or(&Value::Null), i, &mut messages)?,
            other => {
                return Err(ApiError::invalid_request(
                    codes::INVALID_VALUE,
                    format!("messages.{i}.role: expected 'user' or 'assistant', got {other:?}"),
                ))
            }
        }
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(max) = req.get("max_tokens") {
        out.insert("max_tokens".into(), max.clone());
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "top_p"), ("stop_sequences", "stop")] {
        if let Some(v) = req.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    let tools: Vec<Value> = req.get("tools").and_then(Value::as_array).into_iter().flatten().filter_map(tool).collect();
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = req.get("tool_choice") {
            if let Some(c) = tool_choice(choice) {
                out.insert("tool_choice".into(), c);
            }
            if choice.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
                out.insert("parallel_tool_calls".into(), Value::Bool(false));
            }
        }
    }
    if req.get("stream").and_then(Value::as_bool) == Some(true) {
        out.insert("stream".into(), Value::Bool(true));
    }
    Ok(Value::Object(out))
}

/// The text of a string or of an array of blocks (text blocks only), joined by blank lines.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

fn blocks(content: &Value) -> Vec<Value> {
    match content {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        _ => Vec::new(),
    }
}

/// A user turn: its tool results become `tool` messages (first, answering the previous
/// assistant's calls), the rest one user message.
fn user(content: &Value, i: usize, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let mut parts = Vec::new();
    for (j, block) in blocks(content).iter().enumerate() {
        match block["type"].as_str() {
            Some("text") => parts.push(json!({"type": "text", "text": block["text"]})),
            Some("image") => parts.push(image(&block["source"], &format!("messages.{i}.content.{j}"))?),
            Some("tool_result") => {
                let mut text = match &block["content"] {
                    Value::Array(inner) if inner.iter().any(|b| b["type"] == "image") => {
                        format!(
                            "{}\n[image omitted: this model's provider takes text tool results only]",
                            text_of(&block["content"])
                        )
                    }
                    other => text_of(other),
                };
                if block["is_error"] == true {
                    text = format!("[tool error] {text}");
                }
                out.push(json!({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}));
            }
            Some("document") => parts.push(document(&block["source"], &format!("messages.{i}.content.{j}"))?),
            // Thinking from an earlier Anthropic turn, and blocks with no chat equivalent.
            _ => {}
        }
    }
    if !parts.is_empty() {
        let content = match parts.as_slice() {
            [only] if only["type"] == "text" => only["text"].clone(),
            _ => Value::Array(parts),
        };
        out.push(json!({"role": "user", "content": content}));
    }
    Ok(())
}

fn image(source: &Value, at: &str) -> Result<Value, ApiError> {
    let url = match source["type"].as_str() {
        Some("base64") => format!(
            "data:{};base64,{}",
            source["media_type"].as_str().unwrap_or("image/png"),
            source["data"].as_str().unwrap_or_default()
        ),
        Some("url") => source["url"].as_str().unwrap_or_default().to_string(),
        other => {
            return Err(unsupported(
                at,
                format!("{at}: image source {other:?} cannot be sent to this model's provider"),
            ))
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn document(source: &Value, at: &str) -> Result<Value, ApiError> {
    match source["type"].as_str() {
        Some("text") => Ok(json!({"type": "text", "text": source["data"]})),
        _ => Err(unsupported(
            at,
            format!("{at}: documents (PDF) are not supported by this model's provider; send their text instead"),
        )),
    }
}

fn assistant(content: &Value) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks(content) {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => calls.push(json!({
                "id": block["id"],
                "type": "function",
                "function": {"name": block["name"], "arguments": block.get("input").unwrap_or(&json!({})).to_string()},
            })),
            _ => {}
        }
    }
    let mut m = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::from(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    m
}

/// A custom tool as an OpenAI function; server tools (typed, run by Anthropic) are dropped.
fn tool(t: &Value) -> Option<Value> {
    if t.get("type").and_then(Value::as_str).is_some_and(|k| k != "custom") {
        return None;
    }
    let mut function = json!({"name": t.get("name")?, "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"}))});
    if let Some(d) = t.get("description").and_then(Value::as_str) {
        function["description"] = Value::from(d);
    }
    Some(json!({"type": "function", "function": function}))
}

fn tool_choice(choice: &Value) -> Option<Value> {
    match choice["type"].as_str()? {
        "auto" => Some(json!("auto")),
        "any" => Some(json!("required")),
        "none" => Some(json!("none")),
        "tool" => Some(json!({"type": "function", "function": {"name": choice["name"]}})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing::deployment;

    #[test]
    fn conversation_with_tools_thinking_and_images() {
        let req = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": true, "temperature": 0.2, "top_k": 5,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc"}, {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}],
            "thinking": {"type": "enabled", "budget_tokens": 31999}, "context_management": {"edits": []},
            "tools": [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}, "defer_loading": true},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": "c2ln"}, {"type": "text", "text": "Reading."},
                                                  {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.rs"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "fn main() {}"}], "cache_control": {"type": "ephemeral"}},
                                             {"type": "text", "text": "and?"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": "no such file"}]}
            ]
        });
        let got = translate(&deployment("openai"), &req).unwrap();
        assert_eq!(
            got,
            json!({
                "model": "gpt-4o-mini", "max_tokens": 32000, "temperature": 0.2, "stop": ["END"], "stream": true,
                "parallel_tool_calls": false, "tool_choice": "auto",
                "tools": [{"type": "function", "function": {"name": "Read", "description": "Read a file",
                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
                "messages": [
                    {"role": "system", "content": "x-anthropic-billing-header: cc\n\nBe terse."},
                    {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}}]},
                    {"role": "assistant", "content": "Reading.", "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"a.rs\"}"}}]},
                    {"role": "tool", "tool_call_id": "toolu_1", "content": "fn main() {}"},
                    {"role": "user", "content": "and?"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_2", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "toolu_2", "content": "[tool error] no such file"}
                ]
            })
        );
    }

    #[test]
    fn tool_choice_mapping() {
        assert_eq!(tool_choice(&json!({"type": "any"})), Some(json!("required")));
        assert_eq!(tool_choice(&json!({"type": "none"})), Some(json!("none")));
        assert_eq!(
            tool_choice(&json!({"type": "tool", "name": "Read"})),
            Some(json!({"type": "function", "function": {"name": "Read"}}))
        );
        assert_eq!(tool_choice(&json!("auto")), None);
    }

    #[test]
    fn untranslatable_content_is_a_clear_400() {
        let pdf = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}]}]});
        let err = translate(&deployment("openai"), &pdf).unwrap_err();
        assert_eq!((err.status, err.code.as_str()), (400, codes::CAPABILITY_NOT_SUPPORTED));
        assert!(err.message.contains("PDF"), "{}", err.message);
        let text_doc = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}}]}]});
        assert_eq!(translate(&deployment("openai"), &text_doc).unwrap()["messages"][0]["content"], "notes");
        let bad_role = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]});
        assert_eq!(translate(&deployment("openai"), &bad_role).unwrap_err().status, 400);
    }

    #[test]
    fn build_goes_through_the_openai_adapter() {
        let req =
            json!({"model": "m", "max_tokens": 7, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        let call = build(&deployment("openai"), &req, "sk").unwrap();
        assert_eq!(call.url, "https://api.openai.com/v1/chat/completions");
        let sent: Value = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(sent["stream_options"], json!({"include_usage": true}));
        assert_eq!(sent["messages"], json!([{"role": "user", "content": "hi"}]));
    }
}
