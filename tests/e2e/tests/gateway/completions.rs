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

/// An agent's request: odd spacing and key order, escapes, unknown fields, tools, a tool call and its
/// result, an image.
fn agent_body(model: &str) -> String {
    format!(
        r#"{{ "messages" : [
  {{"role":"system","content":"You are terse.\n\u263a","x_hint":{{"a":[1.50,true,null]}}}},
  {{"role":"user","content":[{{"type":"text","text":"What is in this? Zürich"}},{{"type":"image_url","image_url":{{"url":"data:image/png;base64,AAAA","detail":"low"}}}}]}},
  {{"role":"assistant","content":null,"tool_calls":[{{"id":"call_1","type":"function","function":{{"name":"look","arguments":"{{\"q\":\"x\"}}"}}}}]}},
  {{"role":"tool","tool_call_id":"call_1","content":"a cat"}}],
 "model" : "{model}", "tools":[{{"type":"function","function":{{"name":"look","description":"Looks.","parameters":{{"type":"object","properties":{{"q":{{"type":"string"}}}},"required":["q"]}},"strict":true}}}}],
 "tool_choice":"auto","parallel_tool_calls":false,"max_tokens":64,"zz_future":{{"k":"v"}},"metadata":{{"team":"a"}} }}"#
    )
}

#[test]
fn an_agents_request_reaches_an_openai_vendor_byte_for_byte_but_for_the_model() {
    let s = stack();
    let body = agent_body("chat-bytes");
    let r = request("POST", &s.url("/v1/chat/completions"), Some(KEY), Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["object"], "chat.completion");
    let sent = s.upstream_last(&r);
    assert_eq!(sent["body_raw"], body.replacen("\"chat-bytes\"", "\"e2e-chat-bytes\"", 1), "{sent}");
}

#[test]
fn an_agents_request_falls_back_to_an_anthropic_deployment_translated() {
    let s = stack();
    let r = request("POST", &s.url("/v1/chat/completions"), Some(KEY), Some(&agent_body("chat-bytes-then-anthropic")));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-gateway-deployment"), Some("an"));
    assert_eq!(r.json()["object"], "chat.completion");
    let calls = s.upstream_calls(&r);
    assert_eq!(calls.len(), 2, "the OpenAI deployment's 500, then Anthropic: {calls:?}");
    assert!(calls[0]["body_raw"].as_str().unwrap().contains("\"model\" : \"e2e-500+status=500\""), "{}", calls[0]);
    let sent = &calls[1]["body"];
    assert_eq!(sent["system"], "You are terse.\n\u{263a}", "{sent}");
    assert_eq!(sent["tools"][0]["name"], "look", "{sent}");
    assert_eq!(sent["tools"][0]["input_schema"]["required"][0], "q", "{sent}");
    assert_eq!(sent["messages"][1]["content"][0]["type"], "tool_use", "{sent}");
    assert_eq!(sent["messages"][2]["content"][0]["type"], "tool_result", "{sent}");
    assert_eq!(sent["max_tokens"], 64, "{sent}");
}
