use e2e::client::{post, request};
use e2e::{stack, KEY};
use serde_json::json;

fn hello(model: &str) -> serde_json::Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Say hello"}]})
}

#[test]
fn openai_deployment_answers_in_openai_format() {
    let s = stack();
    let r = post(&s.url("/v1/chat/completions"), KEY, &hello("gpt-4o-mini"));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(!v["choices"][0]["message"]["content"].as_str().unwrap().is_empty());
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(r.header("x-gateway-deployment"), Some("oa"));
    assert_eq!(r.header("x-gateway-provider"), Some("openai"));
    assert!(r.header("x-request-id").is_some_and(|id| id.starts_with("req_")));
    let calls = s.upstream_calls(&r);
    assert_eq!(calls.len(), 1, "one upstream call");
    let sent = &calls[0];
    assert_eq!(sent["headers"]["authorization"], "Bearer sk-mock-openai-local");
    assert_eq!(sent["body"]["messages"][0]["content"], "Say hello");
}

#[test]
fn anthropic_deployment_answers_in_openai_format() {
    let s = stack();
    let r = post(&s.url("/v1/chat/completions"), KEY, &hello("claude-sonnet"));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let sent = s.upstream_last(&r);
    assert_eq!(sent["headers"]["x-api-key"], "sk-ant-mock-local");
    assert_eq!(sent["body"]["max_tokens"], 512, "deployment default max_tokens");
}

#[test]
fn models_lists_logical_models() {
    let s = stack();
    let r = request("GET", &s.url("/v1/models"), Some(KEY), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"gpt-4o-mini") && ids.contains(&"claude-sonnet"), "{ids:?}");
}
