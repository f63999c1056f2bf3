//! The Responses door (`POST /v1/responses`) end to end: pass-through to a Responses deployment
//! (bytes at the mock identical apart from the model, events relayed, usage with reasoning and
//! cached tokens), translation to a chat-only deployment and to Anthropic, fallback before the
//! first byte, errors, the official openai SDK and Codex itself.

use e2e::client::{post, post_with, request, stream};
use e2e::{stack, Stack, KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn events(r: &e2e::client::StreamReply) -> Vec<Value> {
    r.events.iter().map(|(_, d)| serde_json::from_str(d).unwrap_or_else(|e| panic!("event JSON ({e}): {d}"))).collect()
}

fn kinds(evs: &[Value]) -> Vec<String> {
    evs.iter().map(|e| e["type"].as_str().unwrap_or("").to_string()).collect()
}

fn output_text(response: &Value) -> String {
    let items = response["output"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect()
}

/// A Codex-shaped second turn: developer message, reasoning item with encrypted content, a
/// function call and its output, a namespace and a web_search tool, client_metadata.
fn codex_body(model: &str, stream: bool) -> String {
    format!(
        r#"{{"model":"{model}","input":[{{"type":"message","role":"developer","content":[{{"type":"input_text","text":"You are Codex."}}]}},
 {{"type":"message","role":"user","content":[{{"type":"input_text","text":"say hello"}}]}},
 {{"type":"reasoning","id":"rs_1","summary":[],"content":null,"encrypted_content":"gAAAAABor0A0x3Vv1w=="}},
 {{"type":"function_call","id":"fc_1","name":"exec_command","arguments":"{{\"cmd\":\"mock\"}}","call_id":"call_A"}},
 {{"type":"function_call_output","call_id":"call_A","output":"command not found"}}],
 "tools":[{{"type":"function","name":"exec_command","description":"Runs","strict":false,"parameters":{{"type":"object","properties":{{"cmd":{{"type":"string"}}}},"required":["cmd"]}}}},
   {{"type":"namespace","name":"multi_agent_v1","tools":[]}},{{"type":"web_search","external_web_access":false}}],
 "tool_choice":"auto","parallel_tool_calls":true,"reasoning":{{"summary":"auto"}},"store":false,"stream":{stream},
 "include":["reasoning.encrypted_content"],"prompt_cache_key":"sess-1","client_metadata":{{"x-codex-turn":"2"}},"x_unknown_field":[1,2]}}"#
    )
}

fn post_raw(s: &Stack, body: &str, headers: &[(&str, &str)]) -> e2e::client::Reply {
    let v: Value = serde_json::from_str(body).unwrap();
    assert!(v.is_object());
    let mut req = ureq::post(&s.url("/v1/responses"))
        .set("content-type", "application/json")
        .set("authorization", &format!("Bearer {KEY}"));
    for (k, val) in headers {
        req = req.set(k, val);
    }
    match req.send_string(body) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => e2e::client::collect(r),
        Err(e) => panic!("POST /v1/responses: {e}"),
    }
}

#[test]
fn pass_through_body_is_byte_identical_apart_from_the_model() {
    let s = stack();
    let body = codex_body("resp-native", false);
    let r = post_raw(s, &body, &[("x-client-request-id", "codex-session-1")]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-gateway-deployment"), Some("oa-resp"));
    assert_eq!(r.header("x-gateway-warning"), None, "nothing is dropped on pass-through");
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert!(output_text(&v).starts_with("Hello from e2e-resp"), "{v}");
    // Found by the gateway's own request id: Codex's x-client-request-id was replaced, not doubled.
    let calls = s.upstream_calls(&r);
    assert_eq!(calls.len(), 1);
    let up = &calls[0];
    assert_eq!(up["path"], "/v1/responses");
    assert_eq!(up["headers"]["x-client-request-id"], r.header("x-request-id").unwrap());
    let expected = body.replacen("\"model\":\"resp-native\"", "\"model\":\"e2e-resp\"", 1);
    assert_eq!(up["body_raw"].as_str(), Some(expected.as_str()));
}

/// An output cap above the deployment's declared `max_output` (4,096) is the one other byte changed.
#[test]
fn pass_through_output_cap_is_held_to_the_deployments_max_output() {
    let s = stack();
    let body = r#"{"model":"resp-capped","input":"Say hello once","max_output_tokens":128000,"store":false}"#;
    let r = post_raw(s, body, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let up = s.upstream_last(&r);
    let expected = body.replacen("resp-capped", "e2e-resp-capped", 1).replacen("128000", "4096", 1);
    assert_eq!(up["body_raw"].as_str(), Some(expected.as_str()));
}

#[test]
fn pass_through_stream_relays_events_and_usage_with_reasoning() {
    let s = stack();
    let body = json!({"model": "resp-usage-native", "input": "Say hello", "stream": true, "store": false});
    let r = stream(&s.url("/v1/responses"), KEY, &body);
    assert_eq!(r.status, 200);
    let evs = events(&r);
    let k = kinds(&evs);
    assert_eq!(k.first().map(String::as_str), Some("response.created"), "{k:?}");
    assert_eq!(k.last().map(String::as_str), Some("response.completed"), "{k:?}");
    let seq: Vec<u64> = evs.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(seq, (0..seq.len() as u64).collect::<Vec<_>>(), "the vendor's numbering, unchanged");
    let usage = &evs.last().unwrap()["response"]["usage"];
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 7);
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 5);
    let id = r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-request-id")).unwrap().1.clone();
    let e = usage_event(s, &id);
    assert_eq!(e["ingress"], "responses");
    assert_eq!(e["reasoning_tokens"], 7);
    assert_eq!(e["cached_read_tokens"], 5);
    assert_eq!(e["input_tokens"].as_u64().unwrap() + 5, usage["input_tokens"].as_u64().unwrap());
    assert_eq!(e["output_tokens"], usage["output_tokens"]);
    assert_eq!(e["estimated"], false);
}

#[test]
fn usage_events_match_the_vendor_for_json_pass_through_and_translation() {
    let s = stack();
    // resp-usage-native: the mock reports reasoning=7, cached=5; resp-usage-chat: reasoning=3, cached=2.
    for (model, reasoning, cached) in [("resp-usage-native", 7, 5), ("resp-usage-chat", 3, 2)] {
        let r = post(
            &s.url("/v1/responses"),
            KEY,
            &json!({"model": model, "input": "Say hello", "metadata": {"feature": "resp-e2e"}}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let usage = r.json()["usage"].clone();
        assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], reasoning, "{model}: {usage}");
        assert_eq!(usage["input_tokens_details"]["cached_tokens"], cached, "{model}: {usage}");
        let e = usage_event(s, r.header("x-request-id").unwrap());
        assert_eq!((e["ingress"].as_str(), e["feature"].as_str()), (Some("responses"), Some("resp-e2e")), "{model}");
        assert_eq!(
            (e["reasoning_tokens"].clone(), e["cached_read_tokens"].clone()),
            (json!(reasoning), json!(cached)),
            "{model}"
        );
        assert_eq!(e["input_tokens"].as_u64().unwrap() + cached, usage["input_tokens"].as_u64().unwrap(), "{model}");
        assert_eq!(e["output_tokens"], usage["output_tokens"], "{model}");
        assert_eq!(e["estimated"], false, "{model}");
    }
}

#[test]
fn idempotency_key_replays_a_responses_answer() {
    let s = stack();
    let body = json!({"model": "resp-native", "input": "Say hello once"});
    let headers = [("idempotency-key", "resp-e2e-idem-1")];
    let first = post_with(&s.url("/v1/responses"), KEY, &body, &headers);
    assert_eq!(first.status, 200, "{}", first.body);
    let again = post_with(&s.url("/v1/responses"), KEY, &body, &headers);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["id"], first.json()["id"], "the stored answer, not a new call");
    assert!(s.upstream_calls(&again).is_empty());
}

#[test]
fn chat_only_deployment_gets_a_translation() {
    let s = stack();
    let r = post(
        &s.url("/v1/responses"),
        KEY,
        &json!({"model": "resp-chat", "instructions": "Be brief.", "input": "Say hello"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!((v["object"].as_str(), v["status"].as_str()), (Some("response"), Some("completed")));
    assert!(output_text(&v).starts_with("Hello from e2e-resp-chat"), "{v}");
    let up = s.upstream_last(&r);
    assert_eq!(up["path"], "/v1/chat/completions");
    assert_eq!(up["body"]["messages"][0], json!({"role": "system", "content": "Be brief."}));
    // The Codex turn: reasoning dropped, hosted tools dropped with a warning, the call pair kept.
    let r = post_raw(s, &codex_body("resp-chat", false), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let warning = r.header("x-gateway-warning").expect("warning header");
    assert!(warning.contains("namespace:multi_agent_v1") && warning.contains("web_search"), "{warning}");
    let up = s.upstream_last(&r);
    let roles: Vec<&str> =
        up["body"]["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(up["body"]["tools"].as_array().unwrap().len(), 1);
    assert!(output_text(&r.json()).starts_with("Hello from"), "a tool result gets a text answer");
    // A tool_choice that needs a dropped tool: a clear 400, nothing sent.
    let r = post(
        &s.url("/v1/responses"),
        KEY,
        &json!({"model": "resp-chat", "input": "x",
        "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}),
    );
    assert_eq!(r.error(400)["param"], "tool_choice");
    assert!(s.upstream_calls(&r).is_empty());
}

/// What a pass-through request needs is read from the Responses request itself (its chat form is
/// never built): an image or a function tool skips a deployment that declares it cannot serve them.
#[test]
fn pass_through_requests_are_gated_by_what_they_need() {
    let s = stack();
    let served = |body: Value| {
        let r = post(&s.url("/v1/responses"), KEY, &body);
        assert_eq!(r.status, 200, "{}", r.body);
        r.header("x-gateway-deployment").unwrap().to_string()
    };
    assert_eq!(served(json!({"model": "resp-gate", "input": "Say hello"})), "oa-resp-text-only");
    let image = json!({"model": "resp-gate", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]});
    assert_eq!(served(image), "oa-resp");
    let codex: Value = serde_json::from_str(&codex_body("resp-gate", false)).unwrap();
    assert_eq!(served(codex), "oa-resp", "a function tool and a call in the history need tools");
    // A hosted tool is not a function tool: chat completions could not carry it either.
    let hosted = json!({"model": "resp-gate", "input": "x", "tools": [{"type": "web_search"}]});
    assert_eq!(served(hosted), "oa-resp-text-only");
}

#[test]
fn translated_streams_for_chat_and_anthropic() {
    let s = stack();
    let tool = json!({"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}});
    for model in ["resp-chat", "resp-anthropic"] {
        let r = stream(&s.url("/v1/responses"), KEY, &json!({"model": model, "input": "Say hello", "stream": true}));
        assert_eq!(r.status, 200);
        let evs = events(&r);
        let k = kinds(&evs);
        assert_eq!(
            k[..4],
            ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"],
            "{model}"
        );
        assert_eq!(k.last().map(String::as_str), Some("response.completed"), "{model}");
        let deltas: String = evs
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        let done = &evs.last().unwrap()["response"];
        assert_eq!(output_text(done), deltas, "{model}");
        assert!(deltas.starts_with("Hello from"), "{model}: {deltas}");
        assert!(
            done["usage"]["input_tokens"].as_u64().unwrap() > 0 && done["usage"]["output_tokens"].as_u64().unwrap() > 0
        );

        let r = stream(
            &s.url("/v1/responses"),
            KEY,
            &json!({"model": model, "input": "Weather?", "tools": [tool], "stream": true}),
        );
        let evs = events(&r);
        let done = &evs.last().unwrap()["response"];
        let call = done["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call")
            .cloned()
            .unwrap_or_else(|| panic!("{model}: {done}"));
        assert_eq!(call["name"], "get_weather");
        let args: String = evs
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(call["arguments"].as_str(), Some(args.as_str()));
        assert_eq!(serde_json::from_str::<Value>(&args).unwrap()["city"], "mock");
    }
    let r = post(&s.url("/v1/responses"), KEY, &json!({"model": "resp-anthropic", "input": "Say hello"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.upstream_last(&r)["path"], "/v1/messages");
    assert!(output_text(&r.json()).starts_with("Hello from e2e-resp-an"));
}

#[test]
fn falls_back_before_the_first_byte_and_reports_a_cut_in_stream() {
    let s = stack();
    let r = post(&s.url("/v1/responses"), KEY, &json!({"model": "resp-fallback", "input": "Say hello"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (r.header("x-gateway-fallback"), r.header("x-gateway-deployment")),
        (Some("true"), Some("oa-resp-chat"))
    );
    let paths: Vec<String> = s.upstream_calls(&r).iter().map(|c| c["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(paths, ["/v1/responses", "/v1/chat/completions"]);
    // A vendor error event before any output: the stream is not committed, so it falls back.
    let r = stream(&s.url("/v1/responses"), KEY, &json!({"model": "resp-err0", "input": "Say hello", "stream": true}));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers.iter().find(|(k, _)| k == "x-gateway-deployment").map(|(_, v)| v.as_str()),
        Some("oa-resp-chat")
    );
    assert_eq!(kinds(&events(&r)).last().map(String::as_str), Some("response.completed"));
    // After output: the vendor's error event reaches the client, and the stream is not switched.
    let r = stream(&s.url("/v1/responses"), KEY, &json!({"model": "resp-cut", "input": "Say hello", "stream": true}));
    let evs = events(&r);
    let k = kinds(&evs);
    assert_eq!(k.last().map(String::as_str), Some("error"), "{k:?}");
    assert_eq!(k.iter().filter(|t| *t == "response.output_text.delta").count(), 2);
    assert!(!k.contains(&"response.completed".to_string()));
}

#[test]
fn prompt_cache_key_keeps_a_session_on_one_deployment() {
    let s = stack();
    let served = |key: &str| {
        let r = post(
            &s.url("/v1/responses"),
            KEY,
            &json!({"model": "resp-affinity", "input": "hi", "prompt_cache_key": key}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.header("x-gateway-deployment").unwrap().to_string()
    };
    for session in ["sess-a", "sess-b", "sess-c"] {
        let first = served(session);
        for _ in 0..4 {
            assert_eq!(served(session), first, "{session} moved");
        }
    }
    // Different sessions spread over the tier's deployments.
    let seen: std::collections::BTreeSet<String> = (0..20).map(|i| served(&format!("spread-{i}"))).collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[test]
fn input_tokens_are_counted_by_a_responses_deployment() {
    let s = stack();
    let body = json!({"model": "resp-native", "instructions": "Be brief.", "input": "Count me, please."});
    let counted = post(&s.url("/v1/responses/input_tokens"), KEY, &body);
    assert_eq!(counted.status, 200, "{}", counted.body);
    assert_eq!(counted.json()["object"], "response.input_tokens");
    assert_eq!(s.upstream_last(&counted)["path"], "/v1/responses/input_tokens");
    let created = post(&s.url("/v1/responses"), KEY, &body);
    assert_eq!(counted.json()["input_tokens"], created.json()["usage"]["input_tokens"]);
    let e = usage_event(s, counted.header("x-request-id").unwrap());
    assert_eq!(
        (e["input_tokens"].clone(), e["output_tokens"].clone(), e["estimated"].clone()),
        (json!(0), json!(0), json!(false)),
        "counting is not billed"
    );
    let r = post(&s.url("/v1/responses/input_tokens"), KEY, &json!({"model": "resp-chat", "input": "x"}));
    assert_eq!(r.error(400)["code"], "unsupported_endpoint");
    assert!(s.upstream_calls(&r).is_empty());
}

#[test]
fn errors_are_openai_format() {
    let s = stack();
    let r = post(
        &s.url("/v1/responses"),
        KEY,
        &json!({"model": "resp-native", "input": "x", "previous_response_id": "resp_1"}),
    );
    let e = r.error(400);
    assert_eq!(e["param"], "previous_response_id");
    assert!(e["message"].as_str().unwrap().contains("\"store\": false"), "{e}");
    assert_eq!(
        request("GET", &s.url("/v1/responses/resp_1"), Some(KEY), None).error(400)["code"],
        "unsupported_endpoint"
    );
    assert_eq!(post(&s.url("/v1/responses"), KEY, &json!({"input": "x"})).error(400)["param"], "model");
    assert_eq!(post(&s.url("/v1/responses"), KEY, &json!({"model": "resp-native"})).error(400)["param"], "input");
    assert_eq!(
        post(&s.url("/v1/responses"), KEY, &json!({"model": "nope", "input": "x"})).error(404)["code"],
        "model_not_found"
    );
    assert_eq!(post(&s.url("/v1/responses"), "gk_wrong", &json!({"model": "resp-native", "input": "x"})).status, 401);
    assert_eq!(request("PUT", &s.url("/v1/responses"), Some(KEY), None).status, 405);
    let r = post_with(
        &s.url("/v1/responses"),
        KEY,
        &json!({"model": "resp-native", "input": "x"}),
        &[("x-mock-fault", "x")],
    );
    assert_eq!(r.status, 200, "client headers are not forwarded upstream: {}", r.body);
}

#[test]
fn official_openai_sdk_responses_api_works_unchanged() {
    let s = stack();
    let python = s.root.join(".venv/bin/python");
    assert!(python.exists(), "{} missing: scripts/setup creates it", python.display());
    let out = std::process::Command::new(python)
        .arg(s.root.join("tests/e2e/sdk/openai_responses_check.py"))
        .arg(s.url("/v1"))
        .arg(KEY)
        .args(["resp-native", "resp-chat", "resp-anthropic"])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "openai SDK responses check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn codex_completes_a_prompt_through_the_gateway() {
    let s = stack();
    for (model, vendor_model, path) in [
        ("codex-pass", "e2e-codex-pass", "/v1/responses"),
        ("codex-chat", "e2e-codex-chat", "/v1/chat/completions"),
        ("codex-anthropic", "e2e-codex-an", "/v1/messages"),
    ] {
        let out = std::process::Command::new(s.root.join("tests/e2e/agents/codex.sh"))
            .args(["--base-url", &s.url("/v1"), "--key", KEY, "--model", model, "--timeout", "120", "say hello"])
            .output()
            .expect("run codex.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "codex via {model} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(&format!("Hello from {vendor_model}")), "{model}: {stdout}");
        // A tool turn and the answer: at least two vendor calls, on the path this deployment speaks.
        assert!(s.mock_calls(vendor_model) >= 2, "{model}");
        assert_eq!(s.mock_last(vendor_model)["path"], path, "{model}");
    }
}

/// The usage event for one request id, from the R2 export (the local queue delivers in batches).
fn usage_event(s: &Stack, id: &str) -> Value {
    let out = s.state.parent().unwrap().join(format!("usage-export-responses-{id}"));
    let started = Instant::now();
    loop {
        let files = s.exported_usage(&out);
        let (_, events) = e2e::usage_events_of("tenant-a", &files);
        if let Some(e) = events.get(id) {
            return e.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(90), "no usage event for {id}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The same reasoner on the Responses door, translated from chat chunks: its held-back reasoning
/// meets the first-token bound (1.5 s) though the text comes after 4 s.
#[test]
fn held_back_reasoning_is_not_a_first_token_timeout() {
    let s = stack();
    let body = json!({"model": "reasoner-e2e", "input": "think hard", "stream": true, "store": false});
    let r = stream(&s.url("/v1/responses"), KEY, &body);
    assert_eq!(r.status, 200);
    let k = kinds(&events(&r));
    assert_eq!(k.last().map(String::as_str), Some("response.completed"), "{k:?}");
    assert_eq!(s.upstream_calls_for(r.header("x-request-id").unwrap()).len(), 1, "one attempt, no timeout and retry");
}
