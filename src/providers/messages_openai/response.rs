//! OpenAI chat completion → Anthropic Messages `message`.

use super::{stop_reason, usage_json};
use crate::canonical::usage::Usage;
use crate::config::routes::ProviderKind;
use crate::providers::{classify, read_json, UpstreamError};
use serde_json::{json, Value};

/// A complete chat answer as a Messages body, with its usage. `model` names the model in the body.
pub fn translate_response(body: &[u8], model: &str) -> Result<(String, Option<Usage>), UpstreamError> {
    let v = read_json::<Value>(body)?;
    if v.get("error").is_some_and(|e| !e.is_null()) && v.get("choices").is_none() {
        return Err(classify(ProviderKind::Openai, 200, None, body));
    }
    let Some(choice) = v.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
        return Err(UpstreamError::empty_response(200, "the upstream returned no choices"));
    };
    let message = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    let calls = message["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default();
    for call in calls {
        content.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": tool_input(call["function"]["arguments"].as_str().unwrap_or_default()),
        }));
    }
    let usage = v.get("usage").and_then(Usage::from_openai);
    let id = v["id"].as_str().unwrap_or("translated");
    let answer = json!({
        "id": format!("msg_{id}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(choice["finish_reason"].as_str(), !calls.is_empty()),
        "stop_sequence": null,
        "usage": usage_json(&usage.unwrap_or_default()),
    });
    Ok((answer.to_string(), usage))
}

/// A tool call's arguments as the `input` object; arguments that are not a JSON object are kept
/// under `_arguments` so nothing is lost silently.
pub(super) fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({"_arguments": arguments}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ErrorClass;

    #[test]
    fn text_tools_stop_reasons_and_usage() {
        let body = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"a\"}"}}]},
            "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120, "prompt_tokens_details": {"cached_tokens": 64}}});
        let (text, usage) = translate_response(body.to_string().as_bytes(), "gpt-4o-mini").unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"id": "msg_chatcmpl-1", "type": "message", "role": "assistant", "model": "gpt-4o-mini",
                "content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"path": "a"}}],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 36, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 64, "output_tokens": 20}})
        );
        assert_eq!(usage.map(|u| (u.input, u.cached_read, u.output)), Some((36, 64, 20)));
        for (finish, want) in [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")] {
            let body = json!({"choices": [{"message": {"content": "x"}, "finish_reason": finish}]});
            let (text, _) = translate_response(body.to_string().as_bytes(), "m").unwrap();
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["stop_reason"], want);
        }
    }

    #[test]
    fn bad_bodies_are_upstream_failures() {
        assert_eq!(translate_response(b"", "m").unwrap_err().class, ErrorClass::EmptyResponse);
        assert_eq!(translate_response(br#"{"choices":[]}"#, "m").unwrap_err().class, ErrorClass::EmptyResponse);
        let err = translate_response(br#"{"error":{"message":"overloaded","type":"server_error"}}"#, "m").unwrap_err();
        assert!(err.class.retryable(), "{err:?}");
    }

    #[test]
    fn tool_input_keeps_odd_arguments() {
        assert_eq!(tool_input(""), json!({}));
        assert_eq!(tool_input("{\"a\":1}"), json!({"a": 1}));
        assert_eq!(tool_input("[1]"), json!({"_arguments": "[1]"}));
        assert_eq!(tool_input("{oops"), json!({"_arguments": "{oops"}));
    }
}
