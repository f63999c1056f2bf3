//! Anthropic Message → OpenAI `chat.completion`.

use super::finish_reason;
use crate::canonical::completion::{AssistantMessage, Completion, CompletionChoice, FunctionOut, ToolCallOut};
use crate::canonical::usage::Usage;
use crate::config::routes::ProviderKind;
use crate::providers::{classify, read_json, ChatResult, UpstreamError};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct MessageView {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<Value>,
}

pub(in crate::providers) fn translate_chat_response(body: &[u8], created: u64) -> Result<ChatResult, UpstreamError> {
    let v = read_json::<Value>(body)?;
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(classify(ProviderKind::Anthropic, 200, None, body));
    }
    let msg: MessageView = serde_json::from_value(v)
        .map_err(|e| UpstreamError::malformed(200, format!("the upstream message is malformed: {e}")))?;
    let mut text: Option<String> = None;
    let mut tool_calls = Vec::new();
    for block in &msg.content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.get_or_insert_with(String::new).push_str(block["text"].as_str().unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCallOut {
                id: block["id"].as_str().unwrap_or_default().to_string(),
                kind: "function",
                function: FunctionOut {
                    name: block["name"].as_str().unwrap_or_default().to_string(),
                    arguments: block.get("input").map_or_else(|| "{}".to_string(), Value::to_string),
                },
            }),
            _ => {}
        }
    }
    // OpenAI sends null content only for a pure tool-call turn.
    let content = match text {
        None if !tool_calls.is_empty() => None,
        other => Some(other.unwrap_or_default()),
    };
    let usage = msg.usage.as_ref().and_then(Usage::from_anthropic);
    let completion = Completion {
        id: &msg.id,
        object: "chat.completion",
        created,
        model: &msg.model,
        choices: [CompletionChoice {
            index: 0,
            message: AssistantMessage { role: "assistant", content, tool_calls, refusal: None },
            logprobs: None,
            finish_reason: msg.stop_reason.as_deref().map(finish_reason),
        }],
        usage: usage.map(|u| u.to_openai()),
    };
    let body = serde_json::to_string(&completion)
        .map_err(|e| UpstreamError::malformed(200, format!("could not encode the response: {e}")))?;
    Ok(ChatResult { body: body.into_bytes(), usage })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ErrorClass;

    const CREATED: u64 = 1_700_000_000;

    fn golden(input: &str, expected: &str) -> Option<Usage> {
        let r = translate_chat_response(input.as_bytes(), CREATED).unwrap();
        let body = String::from_utf8(r.body).unwrap();
        assert_eq!(body, expected.trim_end(), "got:\n{body}");
        r.usage
    }

    #[test]
    fn golden_text() {
        let usage = golden(fixture!("anthropic_response_text.json"), fixture!("anthropic_response_text.openai.json"));
        assert_eq!(usage, Some(Usage { input: 2095, output: 503, ..Usage::default() }));
    }

    #[test]
    fn golden_tool_use_with_cache_usage() {
        let usage =
            golden(fixture!("anthropic_response_tool_use.json"), fixture!("anthropic_response_tool_use.openai.json"));
        assert_eq!(
            usage,
            Some(Usage { input: 30, output: 89, cached_read: 1800, cache_write: 248, reasoning: 0, cache_write_1h: 0 })
        );
    }

    #[test]
    fn golden_max_tokens() {
        golden(fixture!("anthropic_response_max_tokens.json"), fixture!("anthropic_response_max_tokens.openai.json"));
    }

    #[test]
    fn golden_refusal() {
        golden(fixture!("anthropic_response_refusal.json"), fixture!("anthropic_response_refusal.openai.json"));
    }

    #[test]
    fn finish_reasons() {
        for (stop, want) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
            ("pause_turn", "stop"),
            ("model_context_window_exceeded", "length"),
        ] {
            assert_eq!(finish_reason(stop), want);
        }
    }

    #[test]
    fn error_body_and_missing_content() {
        let e = translate_chat_response(
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            0,
        )
        .unwrap_err();
        assert_eq!(e.class, ErrorClass::Overloaded);
        let e = translate_chat_response(br#"{"id":"msg_1","type":"message"}"#, 0).unwrap_err();
        assert_eq!(e.class, ErrorClass::ServerError);
    }
}
