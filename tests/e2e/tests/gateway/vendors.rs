//! The same OpenAI request routed to an OpenAI-format and an Anthropic-format deployment.

use e2e::client::{post, stream};
use e2e::{stack, KEY};
use serde_json::{json, Value};

fn tools_request(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    })
}

/// Rebuilds (name, arguments) of the first tool call from stream deltas.
fn streamed_tool_call(chunks: &[Value]) -> (String, String, Option<String>) {
    let (mut name, mut args, mut finish) = (String::new(), String::new(), None);
    for c in chunks {
        if let Some(calls) = c["choices"][0]["delta"]["tool_calls"].as_array() {
            for call in calls {
                assert_eq!(call["index"], 0);
                name.push_str(call["function"]["name"].as_str().unwrap_or(""));
                args.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    (name, args, finish)
}

#[test]
fn tool_calls_are_equivalent_across_vendors_json_and_stream() {
    let s = stack();
    let mut answers = Vec::new();
    for model in ["gpt-4o-mini", "claude-sonnet"] {
        let r = post(&s.url("/v1/chat/completions"), KEY, &tools_request(model));
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        let v = r.json();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{model}: {v}");
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()));
        let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(args["city"].is_string(), "{model}: {args}");

        let mut streamed = tools_request(model);
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let st = stream(&s.url("/v1/chat/completions"), KEY, &streamed);
        assert!(st.done());
        let chunks = st.chunks();
        let (name, sargs, finish) = streamed_tool_call(&chunks);
        assert_eq!(name, "get_weather", "{model}");
        assert_eq!(serde_json::from_str::<Value>(&sargs).unwrap(), args, "{model}: streamed arguments");
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        let usage = &chunks.last().unwrap()["usage"];
        assert_eq!(usage["completion_tokens"], v["usage"]["completion_tokens"], "{model}: stream usage = JSON usage");
        assert_eq!(usage["prompt_tokens"], v["usage"]["prompt_tokens"], "{model}");
        answers.push(args);
    }
    assert_eq!(answers[0], answers[1], "both vendors produce the same call");
}

#[test]
fn anthropic_request_is_translated_as_the_api_requires() {
    let s = stack();
    let r = post(&s.url("/v1/chat/completions"), KEY, &tools_request("claude-sonnet"));
    assert_eq!(r.status, 200);
    let sent = s.upstream_last(&r);
    assert_eq!(sent["path"], "/v1/messages");
    assert_eq!(sent["body"]["system"], "Be brief.");
    assert_eq!(sent["body"]["messages"][0]["role"], "user");
    assert_eq!(sent["body"]["tools"][0]["name"], "get_weather");
    assert!(sent["body"]["tools"][0]["input_schema"].is_object());
    assert!(sent["headers"]["anthropic-version"].is_string());
}

#[test]
fn usage_matches_what_the_vendor_reported() {
    let s = stack();
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x".repeat(400)}]});
    let v = post(&s.url("/v1/chat/completions"), KEY, &body).json();
    // The mock reports ceil(chars of every string in messages / 4): "user" + 400 x's.
    assert_eq!(v["usage"]["prompt_tokens"], 101);
    assert_eq!(v["usage"]["completion_tokens"], 8);
}

#[test]
fn embeddings_through_the_same_path() {
    let s = stack();
    let r = post(&s.url("/v1/embeddings"), KEY, &json!({"model": "gpt-4o-mini", "input": ["a", "b"]}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(s.upstream_last(&r)["path"], "/v1/embeddings");
    let r = post(&s.url("/v1/embeddings"), KEY, &json!({"model": "claude-sonnet", "input": "a"}));
    assert_eq!(r.error(400)["code"], "unsupported_endpoint");
    let r = post(&s.url("/v1/embeddings"), KEY, &json!({"model": "gpt-4o-mini"}));
    assert_eq!(r.error(400)["param"], "input");
}

#[test]
fn official_openai_python_sdk_works_unchanged() {
    let s = stack();
    let python = s.root.join(".venv/bin/python");
    assert!(python.exists(), "{} missing: scripts/setup creates it", python.display());
    let out = std::process::Command::new(python)
        .arg(s.root.join("tests/e2e/sdk/openai_sdk_check.py"))
        .arg(s.url("/v1"))
        .arg(KEY)
        .args(["gpt-4o-mini", "claude-sonnet"])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "openai SDK check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
