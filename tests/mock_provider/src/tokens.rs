//! Token counting rule, shared by both vendors so tests can predict usage:
//!
//! * prompt tokens = ceil(C / 4), at least 1, where C is the number of
//!   characters (Unicode scalar values) in every JSON string value found
//!   recursively in the request's `messages`, `system` and `tools` fields
//!   (object keys, numbers and booleans are not counted);
//! * completion tokens = number of words emitted (after `max_tokens`/stop
//!   truncation); a tool call costs ceil(len(arguments JSON) / 4).
//!
//! Fault keys add on top: OpenAI `prompt_tokens` = rule + `cached` (cached is a
//! subset of the prompt there) and `completion_tokens` = words + `reasoning`;
//! Anthropic reports `cached`/`cache_write` beside `input_tokens`, as it does.

use serde_json::Value;

/// Fields whose text counts toward prompt tokens.
pub const PROMPT_FIELDS: &[&str] = &["messages", "system", "tools"];

pub fn text_chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(items) => items.iter().map(text_chars).sum(),
        Value::Object(map) => map.values().map(text_chars).sum(),
        _ => 0,
    }
}

pub fn tokens_for_chars(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

pub fn prompt_tokens(body: &Value) -> u64 {
    let chars = PROMPT_FIELDS.iter().filter_map(|f| body.get(f)).map(text_chars).sum();
    tokens_for_chars(chars)
}

/// Completion cost of a tool call's argument JSON.
pub fn tool_tokens(arguments: &str) -> u64 {
    (arguments.len() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_string_values_only() {
        let v = json!({"role": "user", "content": [{"type": "text", "text": "héllo"}], "n": 12345});
        assert_eq!(text_chars(&v), 4 + 4 + 5);
    }

    #[test]
    fn prompt_rule_is_ceil_chars_over_four_min_one() {
        let body = json!({
            "model": "ignored-because-not-a-prompt-field",
            "messages": [{"role": "user", "content": "abcd"}],
            "system": "x",
            "tools": [{"name": "get_weather"}]
        });
        // user(4) + abcd(4) + x(1) + get_weather(11) = 20 chars.
        assert_eq!(prompt_tokens(&body), 5);
        assert_eq!(prompt_tokens(&json!({})), 1);
        assert_eq!(tokens_for_chars(9), 3);
    }

    #[test]
    fn tool_tokens_round_up() {
        assert_eq!(tool_tokens("{}"), 1);
        assert_eq!(tool_tokens(r#"{"location": "mock"}"#), 5);
    }
}
