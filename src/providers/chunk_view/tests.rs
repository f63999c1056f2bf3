use super::*;
use serde_json::json;
use serde_json::Value;

/// What the relay read before, from a whole `Value`: the reference the view must agree with.
fn reference(text: &str) -> Option<ChunkView> {
    let Ok(Value::Object(chunk)) = serde_json::from_str::<Value>(text) else { return None };
    let choices = chunk.get("choices").and_then(Value::as_array).map(|choices| {
        choices
            .iter()
            .map(|c| {
                let finished = c.get("finish_reason").is_some_and(|f| !f.is_null());
                let delta_empty = c.get("delta").and_then(Value::as_object).is_none_or(|d| {
                    d.iter().all(|(k, v)| {
                        k == "role" || v.is_null() || v.as_str() == Some("") || v.as_array().is_some_and(Vec::is_empty)
                    })
                });
                ChoiceView { finished, preamble: !finished && delta_empty }
            })
            .collect()
    });
    Some(ChunkView {
        choices,
        error: chunk.get("error").is_some_and(|e| !e.is_null()),
        usage: chunk.get("usage").filter(|u| !u.is_null()).map(|u| OpenaiCounts::deserialize(u).unwrap()),
    })
}

fn view(text: &str) -> Option<ChunkView> {
    serde_json::from_str::<ChunkView>(text).ok()
}

#[test]
fn real_chunks_read_as_before() {
    let chunks = [
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#,
        r#"{"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0}}}"#,
        r#"{"choices":[],"prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[]},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":null,"role":"assistant"},"finish_reason":null}],"usage":null}"#,
        r#"{"error":{"message":"overloaded","type":"server_error","code":null}}"#,
        r#"{"error":null,"choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"error":{"message":"m"},"choices":[]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"a","role":"assistant"},"finish_reason":"length"},{"index":1,"delta":{"role":"assistant"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"audio":{"id":"a","data":"AAAA"}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\ud83d\ude00 and \"quotes\" \\ back"}}]}"#,
    ];
    for text in chunks {
        assert_eq!(view(text), reference(text), "{text}");
        assert!(view(text).is_some(), "{text}");
    }
}

#[test]
fn odd_shapes_read_as_before() {
    let odd = [
        "[]",
        "[1,2]",
        "null",
        "\"text\"",
        "12",
        "{}",
        "{",
        r#"{"choices":null}"#,
        r#"{"choices":{"0":{}}}"#,
        r#"{"choices":"many"}"#,
        r#"{"choices":[1,"x",null,[],{}]}"#,
        r#"{"choices":[{"delta":[]}]}"#,
        r#"{"choices":[{"delta":"text"}]}"#,
        r#"{"choices":[{"delta":null}]}"#,
        r#"{"choices":[{"delta":{"content":0}}]}"#,
        r#"{"choices":[{"delta":{"content":false}}]}"#,
        r#"{"choices":[{"delta":{"content":1.5}}]}"#,
        r#"{"choices":[{"delta":{"content":-3}}]}"#,
        r#"{"choices":[{"delta":{"content":{}}}]}"#,
        r#"{"choices":[{"delta":{"content":[null]}}]}"#,
        r#"{"choices":[{"delta":{"role":"anything at all"}}]}"#,
        r#"{"choices":[{"finish_reason":0}]}"#,
        r#"{"choices":[{"finish_reason":""}]}"#,
        r#"{"choices":[{"finish_reason":null,"delta":{"content":""}}]}"#,
        r#"{"choices":[],"choices":[{"delta":{"content":"last wins"}}]}"#,
        r#"{"usage":{"prompt_tokens":1},"usage":null}"#,
        r#"{"usage":5}"#,
        r#"{"error":false}"#,
        r#"{"error":[]}"#,
        r#"{"choices":[{"delta":{"content":"x"}}] trailing"#,
        r#"{"a":{"b":{"c":[1,2,{"d":null}]}},"choices":[{"delta":{"content":"deep"}}]}"#,
    ];
    for text in odd {
        assert_eq!(view(text), reference(text), "{text}");
    }
}

/// Every combination of a few members and values, built as JSON text, agrees with the reference.
#[test]
fn combinations_read_as_before() {
    let values =
        [json!(null), json!(""), json!("x"), json!([]), json!([1]), json!({}), json!({"k": 1}), json!(0), json!(true)];
    let mut checked = 0;
    for finish in &values {
        for content in &values {
            for role in &values {
                for extra in &values {
                    let choice =
                        json!({"finish_reason": finish, "delta": {"role": role, "content": content, "x": extra}});
                    for chunk in [
                        json!({"choices": [choice.clone()]}),
                        json!({"choices": [choice.clone(), {"delta": {"role": "assistant"}}], "usage": extra}),
                        json!({"error": extra, "choices": extra}),
                    ] {
                        let text = chunk.to_string();
                        assert_eq!(view(&text), reference(&text), "{text}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 9 * 9 * 9 * 9 * 3);
}

#[test]
fn what_the_view_does_not_read_is_only_scanned_as_before() {
    // A choice or delta that is not an object is skipped unread: a number out of range or nesting
    // past the parser's limit inside one does not cost the chunk.
    let deep = format!("{{\"choices\":[{}{}]}}", "[".repeat(200), "]".repeat(200));
    for text in [r#"{"choices":[[1e400]]}"#, r#"{"choices":[{"delta":[1e400],"finish_reason":"stop"}]}"#, &deep] {
        assert!(view(text).is_some(), "{text}");
    }
    assert!(view(r#"{"choices":[{"delta":[1e400],"finish_reason":"stop"}]}"#).unwrap().choices.unwrap()[0].finished);
}
