//! The Anthropic Messages door end to end: the official `anthropic` SDK unchanged, bodies at the
//! vendor byte-identical apart from the model (a multi-turn tool conversation with thinking blocks
//! replayed), SSE events relayed as the vendor sent them, Anthropic-format errors, usage events
//! exact to the vendor's usage (cache reads, 5-minute and 1-hour writes), and Claude Code itself.

use e2e::client::Reply;
use e2e::{stack, Stack, KEY, KEY_MESSAGES, KEY_MESSAGES_RPM, MESSAGES_TENANT};
use serde_json::{json, Value};
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The door's model names: aliases in the route table (tests/e2e/fixtures/routes.json).
const SONNET: &str = "claude-sonnet-4-5";
const UPSTREAM: &str = "claude-msg-e2e";

/// POSTs raw bytes to a Messages URL with `x-api-key`, as the anthropic SDKs do.
fn post_raw(path: &str, key: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
    let s = stack();
    let mut req = ureq::post(&s.url(path))
        .timeout(Duration::from_secs(60))
        .set("content-type", "application/json")
        .set("x-api-key", key)
        .set("anthropic-version", "2023-06-01");
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let resp = match req.send_string(body) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {path}: {e}"),
    };
    let status = resp.status();
    let headers =
        resp.headers_names().into_iter().map(|n| (n.clone(), resp.header(&n).unwrap_or("").to_string())).collect();
    let mut body = String::new();
    resp.into_reader().read_to_string(&mut body).expect("read body");
    Reply { status, headers, body }
}

fn anthropic_error(r: &Reply, status: u16, kind: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap_or_else(|_| panic!("not JSON: {}", r.body));
    assert_eq!(v["type"], "error", "{}", r.body);
    assert_eq!(v["error"]["type"], kind, "{}", r.body);
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", r.body);
}

/// Both kinds of deployment: `claude-sonnet-4-5` passes through to an Anthropic deployment,
/// `gpt-as-claude` is translated to and from an OpenAI-format one.
#[test]
fn official_anthropic_python_sdk_works_unchanged() {
    let s = stack();
    let python = s.root.join(".venv/bin/python");
    assert!(python.exists(), "{} missing: scripts/setup creates it", python.display());
    let out = std::process::Command::new(python)
        .arg(s.root.join("tests/e2e/sdk/anthropic_sdk_check.py"))
        .arg(&s.gateway)
        .args([KEY, KEY_MESSAGES_RPM, SONNET, "gpt-as-claude"])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "anthropic SDK check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn errors_are_anthropic_shaped_on_every_path() {
    let hello = r#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
    anthropic_error(&post_raw("/v1/messages", "gk_wrong", hello, &[]), 401, "authentication_error");
    let unknown = hello.replace(SONNET, "claude-unknown-9");
    anthropic_error(&post_raw("/v1/messages?beta=true", KEY, &unknown, &[]), 404, "not_found_error");
    anthropic_error(&post_raw("/v1/messages", KEY, "{not json", &[]), 400, "invalid_request_error");
    let no_max = r#"{"model":"claude-sonnet-4-5","messages":[]}"#;
    anthropic_error(&post_raw("/v1/messages", KEY, no_max, &[]), 400, "invalid_request_error");
    // The key may use only `claude-sonnet`: a policy refusal, in Anthropic's format.
    let r = post_raw("/v1/messages", e2e::KEY_LIMITED_MODELS, hello, &[]);
    anthropic_error(&r, 403, "permission_error");
    assert_eq!(r.header("x-gateway-error-code"), Some("model_not_allowed"));
    // A vendor 400 (max_tokens not above budget_tokens) reaches the client as invalid_request_error.
    let bad_thinking = r#"{"model":"claude-sonnet-4-5","max_tokens":100,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"hi"}]}"#;
    anthropic_error(&post_raw("/v1/messages", KEY, bad_thinking, &[]), 400, "invalid_request_error");
    let big = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "a".repeat(9 << 20)
    );
    anthropic_error(&post_raw("/v1/messages", KEY, &big, &[]), 413, "request_too_large");
    let get = ureq::get(&stack().url("/v1/messages")).call();
    let Err(ureq::Error::Status(405, resp)) = get else { panic!("GET /v1/messages: {get:?}") };
    assert_eq!(serde_json::from_str::<Value>(&resp.into_string().unwrap()).unwrap()["type"], "error");
}

#[test]
fn errors_behind_an_idempotency_key_and_unserved_paths_are_in_anthropic_format() {
    let key = [("idempotency-key", "messages-e2e-idem-404")];
    let body = r#"{"model":"no-such-model","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    let first = post_raw("/v1/messages", KEY, body, &key);
    anthropic_error(&first, 404, "not_found_error");
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    assert_eq!(first.header("x-gateway-error-code"), Some("model_not_found"));
    // The stored answer is replayed in the format it was given in.
    let again = post_raw("/v1/messages", KEY, body, &key);
    anthropic_error(&again, 404, "not_found_error");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    anthropic_error(&post_raw("/v1/messages/batches", KEY, body, &[]), 404, "not_found_error");
}

#[test]
fn a_stream_cut_after_its_first_byte_ends_with_an_error_event() {
    let s = stack();
    let body = json!({"model": "claude-cut-test", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "cut me"}]});
    // The deployment's mock model cuts every stream after three content events.
    let r = post_raw("/v1/messages", KEY, &body.to_string(), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("event: content_block_delta"), "{}", r.body);
    assert!(!r.body.contains("event: message_stop"), "{}", r.body);
    let last = r.body.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"), "{last}");
    assert_eq!(s.upstream_calls(&r).len(), 1, "a started stream is never retried");
}

/// The vendor's bytes for one conversation turn: the mock's record of the upstream request.
fn upstream_raw(s: &Stack, r: &Reply) -> String {
    let last = s.upstream_last(r);
    last["body_raw"].as_str().unwrap_or_else(|| panic!("no body_raw: {last}")).to_string()
}

#[test]
fn pass_through_bodies_are_byte_identical_but_for_the_model_over_a_thinking_tool_conversation() {
    let s = stack();
    let tools = r#"[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"cache_control":{"type":"ephemeral","ttl":"1h"}}]"#;
    let system = r#"[ {"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.abc;"},
        {"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}} ]"#;
    let thinking = r#"{"type":"enabled","budget_tokens":1024,"display":"omitted"}"#;
    let beta = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27";
    // Odd spacing, key order, unknown fields and unicode: all must reach the vendor unchanged.
    let first = format!(
        "{{\"max_tokens\": 4096,\n  \"model\" : \"{SONNET}\", \"tools\":{tools},\"system\":{system},\"thinking\":{thinking},\
         \"context_management\":{{\"edits\":[{{\"type\":\"clear_thinking_20251015\",\"keep\":\"all\"}}]}},\
         \"metadata\":{{\"user_id\":\"{{\\\"session_id\\\":\\\"sess-bytes\\\"}}\"}},\"zz_future_field\":[1.50,true,null],\
         \"messages\":[{{\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"Weather in Zürich? \\u263a\",\"cache_control\":{{\"type\":\"ephemeral\"}}}}]}}]}}"
    );
    let r1 = post_raw("/v1/messages?beta=true", KEY, &first, &[("anthropic-beta", beta)]);
    assert_eq!(r1.status, 200, "{}", r1.body);
    let sent = upstream_raw(s, &r1);
    assert_eq!(sent, first.replacen(&format!("\"{SONNET}\""), &format!("\"{UPSTREAM}\""), 1));
    let call = s.upstream_last(&r1);
    assert_eq!(call["headers"]["anthropic-beta"], beta, "{call}");
    assert_eq!(call["headers"]["anthropic-version"], "2023-06-01", "{call}");
    assert_eq!(call["path"], "/v1/messages");

    // Turn 2 replays the assistant's content verbatim (thinking signature included) with the tool result.
    let answer: Value = serde_json::from_str(&r1.body).unwrap();
    assert_eq!(answer["model"], UPSTREAM, "the vendor's body comes back as sent");
    assert_eq!(answer["stop_reason"], "tool_use", "{answer}");
    assert_eq!(answer["content"][0]["type"], "thinking", "{answer}");
    let tool_id = answer["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").unwrap()["id"].clone();
    let content = answer["content"].to_string();
    let history = format!(
        "{{\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"Weather in Zürich? \\u263a\"}}]}},\
         {{\"role\":\"assistant\",\"content\":{content}}},\
         {{\"role\":\"user\",\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":{tool_id},\"content\":\"18°C\",\"cache_control\":{{\"type\":\"ephemeral\"}}}}]}}"
    );
    let second = format!(
        "{{\"model\":\"{SONNET}\",\"max_tokens\":4096,\"stream\":true,\"tools\":{tools},\"system\":{system},\"thinking\":{thinking},\"messages\":[{history}]}}"
    );
    let r2 = post_raw("/v1/messages?beta=true", KEY, &second, &[("anthropic-beta", beta)]);
    assert_eq!(r2.status, 200, "{}", r2.body);
    assert!(r2.body.contains("event: message_stop"), "the mock accepted the replayed signature: {}", r2.body);
    assert_eq!(upstream_raw(s, &r2), second.replacen(&format!("\"{SONNET}\""), &format!("\"{UPSTREAM}\""), 1));

    // A changed signature gets the vendor's 400, passed on as invalid_request_error.
    let sig = answer["content"][0]["signature"].as_str().unwrap();
    let tampered = second.replace(sig, &format!("{}AAAA", &sig[..sig.len() - 4]));
    anthropic_error(
        &post_raw("/v1/messages", KEY, &tampered, &[("anthropic-beta", beta)]),
        400,
        "invalid_request_error",
    );
}

/// A text that varies between calls, and the characters it is made of.
type Varying = (&'static str, fn(char) -> bool);

/// Replaces what differs between two calls of the mock: message and tool ids, reply numbers.
fn normalize(sse: &str) -> String {
    let mut out = String::with_capacity(sse.len());
    let mut rest = sse;
    let varying: [Varying; 4] = [
        ("msg_", |c| c.is_ascii_alphanumeric()),
        ("toolu_", |c| c.is_ascii_alphanumeric()),
        ("number ", |c| c.is_ascii_digit()),
        ("\"text\":\" ", |c| c.is_ascii_digit()),
    ];
    while !rest.is_empty() {
        let next = varying.iter().filter_map(|(p, f)| rest.find(p).map(|i| (i, *p, *f))).min_by_key(|(i, _, _)| *i);
        let Some((at, prefix, varies)) = next else {
            out.push_str(rest);
            break;
        };
        out.push_str(&rest[..at + prefix.len()]);
        out.push('*');
        rest = rest[at + prefix.len()..].trim_start_matches(varies);
    }
    out
}

#[test]
fn sse_events_are_relayed_as_the_vendor_sent_them() {
    let s = stack();
    let body = json!({"model": "claude-sse-test", "max_tokens": 64, "stream": true,
        "tools": [{"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}],
        "messages": [{"role": "user", "content": "stream please"}]});
    let through = post_raw("/v1/messages", KEY, &body.to_string(), &[]);
    assert_eq!(through.status, 200, "{}", through.body);
    assert!(through.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    // The same request straight to the vendor, with the deployment's model name.
    let mut direct_body = body.clone();
    direct_body["model"] = json!("claude-msg-sse");
    let direct = ureq::post(&format!("{}/v1/messages", s.mock))
        .set("x-api-key", "sk-ant-mock-local")
        .set("anthropic-version", "2023-06-01")
        .send_string(&direct_body.to_string())
        .expect("mock direct");
    let mut direct_text = String::new();
    direct.into_reader().read_to_string(&mut direct_text).unwrap();
    assert!(through.body.contains("event: ping"), "{}", through.body);
    assert!(through.body.contains("input_json_delta"), "{}", through.body);
    assert_eq!(normalize(&through.body), normalize(&direct_text));
}

#[test]
fn count_tokens_is_forwarded_to_the_anthropic_deployment() {
    let s = stack();
    let body =
        r#"{"model":"claude-sonnet-4-5","system":"You are terse.","messages":[{"role":"user","content":"count me"}]}"#;
    let r = post_raw("/v1/messages/count_tokens?beta=true", KEY, body, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let n = r.json()["input_tokens"].as_u64().expect("input_tokens");
    assert!(n > 0);
    let call = s.upstream_last(&r);
    assert_eq!(call["path"], "/v1/messages/count_tokens");
    assert_eq!(call["body_raw"], body.replace(SONNET, UPSTREAM));
}

fn exported_events(s: &Stack, ids: &[String]) -> Vec<Value> {
    let out = PathBuf::from(&s.root).join(format!("target/e2e/{}/messages-usage", std::process::id()));
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut found: Vec<Value> = Vec::new();
        for text in s.exported_usage(&out).values() {
            for line in text.lines() {
                let Ok(e) = serde_json::from_str::<Value>(line) else { continue };
                if e["tenant"] == MESSAGES_TENANT
                    && ids.iter().any(|id| e["event_id"] == id.as_str())
                    && !found.iter().any(|f| f["event_id"] == e["event_id"])
                {
                    found.push(e);
                }
            }
        }
        if found.len() == ids.len() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The vendor's usage as the client saw it (JSON body, or `message_start` + `message_delta`).
fn vendor_usage(r: &Reply) -> Value {
    if !r.body.starts_with("event:") {
        return r.json()["usage"].clone();
    }
    let mut usage = json!({});
    for data in r.body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let v: Value = serde_json::from_str(data).unwrap();
        let part = match v["type"].as_str() {
            Some("message_start") => &v["message"]["usage"],
            Some("message_delta") => &v["usage"],
            _ => continue,
        };
        for (k, val) in part.as_object().unwrap() {
            usage[k] = val.clone();
        }
    }
    usage
}

#[test]
fn usage_events_match_the_vendor_usage_exactly_with_cache_tokens() {
    let s = stack();
    let system = json!([{"type": "text", "text": "Usage test: you are terse and exact.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                        {"type": "text", "text": "Second block, cached for five minutes.", "cache_control": {"type": "ephemeral"}}]);
    let body = |stream: bool, text: &str| {
        json!({"model": "claude-haiku-4-5-20251001", "max_tokens": 2048, "stream": stream, "system": system,
               "thinking": {"type": "enabled", "budget_tokens": 1024},
               "messages": [{"role": "user", "content": text}]})
        .to_string()
    };
    let replies = [
        post_raw("/v1/messages", KEY_MESSAGES, &body(false, "first: writes the cache"), &[]),
        post_raw("/v1/messages", KEY_MESSAGES, &body(false, "second: reads it"), &[]),
        post_raw("/v1/messages?beta=true", KEY_MESSAGES, &body(true, "third: streamed read"), &[]),
    ];
    // A stream the vendor cuts mid-answer: billed for what it reported, flagged like the chat path.
    let cut = json!({"model": "claude-cut-test", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "cut"}]});
    let cut = post_raw("/v1/messages", KEY_MESSAGES, &cut.to_string(), &[]);
    assert_eq!(cut.status, 200, "{}", cut.body);
    let cut_id = cut.header("x-request-id").expect("x-request-id").to_string();
    let mut ids: Vec<String> = replies
        .iter()
        .map(|r| {
            assert_eq!(r.status, 200, "{}", r.body);
            r.header("x-request-id").expect("x-request-id").to_string()
        })
        .collect();
    let first = vendor_usage(&replies[0]);
    assert!(first["cache_creation"]["ephemeral_1h_input_tokens"].as_u64().unwrap() > 0, "{first}");
    assert!(first["cache_creation"]["ephemeral_5m_input_tokens"].as_u64().unwrap() > 0, "{first}");
    assert!(vendor_usage(&replies[1])["cache_read_input_tokens"].as_u64().unwrap() > 0);
    ids.push(cut_id.clone());
    let events = exported_events(s, &ids);
    assert_eq!(events.len(), ids.len(), "events found: {events:?}");
    let cut_event = events.iter().find(|e| e["event_id"] == cut_id.as_str()).unwrap();
    assert_eq!(cut_event["status"], 502, "{cut_event}");
    assert_eq!(cut_event["error_code"], "upstream_stream_interrupted", "{cut_event}");
    assert_eq!(cut_event["input_tokens"], vendor_usage(&cut)["input_tokens"], "{cut_event}");
    // Cut before message_delta: the output is estimated from the text that reached the client,
    // never message_start's placeholder of 1, and the event says it is an estimate.
    let delivered: usize = cut
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v["type"] == "content_block_delta")
        .map(|v| {
            ["text", "partial_json", "thinking"]
                .iter()
                .find_map(|k| v["delta"][*k].as_str())
                .unwrap_or("")
                .chars()
                .count()
        })
        .sum();
    assert!(delivered > 4, "the mock cut after three words: {}", cut.body);
    assert_eq!(cut_event["output_tokens"].as_u64(), Some(delivered.div_ceil(4) as u64), "{cut_event}");
    assert_eq!(cut_event["estimated"], true, "{cut_event}");
    assert_eq!(cut_event["ingress"], "messages", "{cut_event}");
    ids.pop();
    for (reply, id) in replies.iter().zip(&ids) {
        let u = vendor_usage(reply);
        let e = events.iter().find(|e| e["event_id"] == id.as_str()).unwrap();
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"));
        assert_eq!(e["ingress"], "messages", "{e}");
        assert_eq!(e["logical_model"], "msg-claude", "{e}");
        assert_eq!(e["estimated"], false, "{e}");
        assert_eq!(n(e, "input_tokens"), n(&u, "input_tokens"), "{e}");
        assert_eq!(n(e, "output_tokens"), n(&u, "output_tokens"), "{e}");
        assert_eq!(n(e, "cached_read_tokens"), n(&u, "cache_read_input_tokens"), "{e}");
        assert_eq!(n(e, "cache_write_tokens"), n(&u, "cache_creation_input_tokens"), "{e}");
        assert_eq!(n(e, "cache_write_1h_tokens"), n(&u["cache_creation"], "ephemeral_1h_input_tokens"), "{e}");
        // claude-sonnet-4-5 prices (µ$/Mtok): input 3, output 15, read 0.3, 5m write 3.75, 1h write 6.
        let w1h = n(&u["cache_creation"], "ephemeral_1h_input_tokens");
        let w5m = n(&u, "cache_creation_input_tokens") - w1h;
        let micro = n(&u, "input_tokens") * 3_000_000
            + n(&u, "output_tokens") * 15_000_000
            + n(&u, "cache_read_input_tokens") * 300_000
            + w5m * 3_750_000
            + w1h * 6_000_000;
        assert_eq!(n(e, "cost_micro_usd"), (micro + 500_000) / 1_000_000, "{e}");
        let reads = n(&u, "cache_read_input_tokens");
        let full = micro + reads * (3_000_000 - 300_000);
        assert_eq!(
            n(e, "cache_savings_micro_usd"),
            (full + 500_000) / 1_000_000 - (micro + 500_000) / 1_000_000,
            "{e}"
        );
        assert_eq!(e["price_version"], "claude-sonnet-4-5@2025-09-29T00:00:00Z", "{e}");
    }
}

/// Claude Code's own run against the gateway: `claude -p` through tests/e2e/agents/claude_code.sh.
/// Claude Code picks its model by name (and enables thinking only for names it knows), so the test
/// keeps `claude-sonnet-4-5` and chooses the logical model with the gateway's task header.
fn claude_code(task: &str, auth: &str) -> std::process::Output {
    let s = stack();
    std::process::Command::new(s.root.join("tests/e2e/agents/claude_code.sh"))
        .args(["--base-url", &s.gateway, "--key", KEY, "--auth", auth, "--model", SONNET, "--tools", "Read"])
        .args(["--timeout", "90", "--header", &format!("x-gateway-task: {task}"), "say hello"])
        .output()
        .expect("run claude_code.sh")
}

#[test]
fn claude_code_completes_a_prompt_through_the_gateway_to_an_anthropic_deployment() {
    let s = stack();
    let before = s.mock_calls("claude-msg-cc");
    let out = claude_code("msg-claude-code", "bearer");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "claude_code.sh failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Hello from claude-msg-cc"), "{stdout}");
    // One tool turn with Read: the tool call, then the answer after the tool result.
    assert!(s.mock_calls("claude-msg-cc") >= before + 2);
    let last = s.mock_last("claude-msg-cc");
    assert_eq!(last["query"], "beta=true", "{}", last["query"]);
    assert!(last["headers"]["anthropic-beta"].as_str().is_some_and(|b| b.contains("claude-code-20250219")));
    let body: Value = serde_json::from_str(last["body_raw"].as_str().unwrap()).unwrap();
    assert_eq!(body["model"], "claude-msg-cc");
    assert!(body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "assistant"
        && m["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "thinking"))));
}

#[test]
fn claude_code_completes_a_prompt_through_the_gateway_to_an_openai_format_deployment() {
    let s = stack();
    let before = s.mock_calls("gpt-msg-e2e");
    let out = claude_code("msg-gpt", "api-key");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "claude_code.sh failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Hello from gpt-msg-e2e"), "{stdout}");
    assert!(s.mock_calls("gpt-msg-e2e") >= before + 2, "the tool turn and the answer");
    let last = s.mock_last("gpt-msg-e2e");
    assert_eq!(last["path"], "/v1/chat/completions");
    let body = &last["body"];
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(messages.iter().any(|m| m["role"] == "tool"), "the tool result went back as a tool message");
    assert!(body.get("thinking").is_none() && body.get("context_management").is_none(), "{body}");
}

/// Claude Code asks 32,000 output tokens of every model; a deployment that declares
/// `max_output` gets its own cap, and each streamed turn keeps its own message id.
#[test]
fn an_agents_output_cap_is_held_to_the_deployments_max_output() {
    let body = json!({"model": "gpt-as-claude", "max_tokens": 32000, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let first = post_raw("/v1/messages", KEY, &body.to_string(), &[]);
    assert_eq!(first.status, 200, "{}", first.body);
    let sent = stack().upstream_last(&first);
    let cap = sent["body"].get("max_tokens").or(sent["body"].get("max_completion_tokens")).cloned();
    assert_eq!(cap, Some(json!(16384)), "{}", sent["body"]);
    let id = |r: &Reply| -> String {
        let start = r.body.lines().find(|l| l.starts_with("data: {\"type\":\"message_start\"")).expect("message_start");
        serde_json::from_str::<Value>(&start["data: ".len()..]).unwrap()["message"]["id"].as_str().unwrap().to_string()
    };
    let second = post_raw("/v1/messages", KEY, &body.to_string(), &[]);
    assert_eq!(second.status, 200, "{}", second.body);
    assert!(id(&first).starts_with("msg_"), "{}", first.body);
    assert_ne!(id(&first), id(&second), "two turns, two message ids");
}

/// Passed through to an Anthropic deployment, the body keeps every byte but the model and a
/// `max_tokens` above the deployment's declared `max_output` (8,192 here).
#[test]
fn a_passed_through_output_cap_is_held_to_the_deployments_max_output() {
    let body = r#"{"max_tokens":32000,"model":"msg-claude-capped","messages":[{"role":"user","content":"hi"}],"x_unknown":{"max_tokens":32000}}"#;
    let r = post_raw("/v1/messages", KEY, body, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = stack().upstream_last(&r);
    let expected = body.replacen("32000", "8192", 1).replacen("msg-claude-capped", "claude-msg-capped", 1);
    assert_eq!(sent["body_raw"].as_str(), Some(expected.as_str()));
}

/// Claude Code's turns carry several text blocks; DeepSeek takes `content` only as a string.
#[test]
fn a_string_content_deployment_gets_text_blocks_as_one_string() {
    let body = json!({"model": "deepseek-as-claude", "max_tokens": 64,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "fix the bug"}]}]});
    let r = post_raw("/v1/messages", KEY, &body.to_string(), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = stack().upstream_last(&r);
    let messages = sent["body"]["messages"].as_array().unwrap();
    assert!(messages.iter().all(|m| m["content"].is_string()), "{}", sent["body"]);
    assert_eq!(messages.last().unwrap()["content"], "<system-reminder>ctx</system-reminder>\n\nfix the bug");
}

#[test]
fn translated_stream_to_an_openai_format_deployment_is_a_well_formed_messages_stream() {
    let body = json!({"model": "gpt-as-claude", "max_tokens": 64, "stream": true,
        "tools": [{"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "find it"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]});
    let r = post_raw("/v1/messages", KEY, &body.to_string(), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<&str> = r.body.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{}", r.body);
    assert_eq!(names.last(), Some(&"message_stop"), "{}", r.body);
    assert!(r.body.contains("\"stop_reason\":\"tool_use\""), "{}", r.body);
    assert!(r.body.contains("\"partial_json\""), "{}", r.body);
    let sent = stack().upstream_last(&r);
    let user = &sent["body"]["messages"][0]["content"];
    assert_eq!(user[1]["image_url"]["url"], "data:image/png;base64,iVBORw0KGgo=", "{user}");
    // A PDF cannot go to this deployment: a 400 naming it, before any upstream call.
    let pdf = json!({"model": "gpt-as-claude", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}]});
    let refused = post_raw("/v1/messages", KEY, &pdf.to_string(), &[]);
    anthropic_error(&refused, 400, "invalid_request_error");
    assert!(refused.body.contains("PDF"), "{}", refused.body);
}

#[test]
fn agent_max_tokens_does_not_exhaust_a_small_tpm_bucket() {
    // TPM 10,000: reserving max_tokens (32,000, capped at the bucket's capacity) would admit one
    // call at a time; the learned estimate (what the deployment returned lately) admits them all.
    let body =
        json!({"model": "claude-tpm-test", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]});
    let no_wait = [("x-gateway-max-wait-ms", "0")];
    let first = post_raw("/v1/messages", KEY, &body.to_string(), &no_wait);
    assert_eq!(first.status, 200, "{}", first.body);
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let body = body.to_string();
            std::thread::spawn(move || post_raw("/v1/messages", KEY, &body, &no_wait))
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let r = call.join().unwrap();
        assert_eq!(r.status, 200, "concurrent call {i}: {}", r.body);
    }
}

#[test]
fn one_agent_session_keeps_its_deployment_for_prompt_cache_hits() {
    let deployment_of = |headers: &[(&str, &str)], user_id: Option<&str>, nonce: usize| {
        let mut body = json!({"model": "claude-affinity-test", "max_tokens": 16,
            "system": [{"type": "text", "text": format!("x-anthropic-billing-header: cc_version=2.1.332.{nonce:03x};")}],
            "messages": [{"role": "user", "content": "hi"}]});
        if let Some(id) = user_id {
            body["metadata"] = json!({"user_id": id});
        }
        let r = post_raw("/v1/messages", KEY, &body.to_string(), headers);
        assert_eq!(r.status, 200, "{}", r.body);
        r.header("x-gateway-deployment").expect("x-gateway-deployment").to_string()
    };
    // The billing line in the system prompt changes every run; the session alone decides.
    for session in ["sess-a", "sess-b", "sess-c"] {
        let seen: std::collections::BTreeSet<String> =
            (0..6).map(|i| deployment_of(&[("x-claude-code-session-id", session)], None, i)).collect();
        assert_eq!(seen.len(), 1, "session {session} moved between deployments: {seen:?}");
        let user_id = format!("{{\"device_id\":\"d\",\"session_id\":\"{session}\"}}");
        let seen: std::collections::BTreeSet<String> = (0..6).map(|i| deployment_of(&[], Some(&user_id), i)).collect();
        assert_eq!(seen.len(), 1, "metadata session {session} moved between deployments: {seen:?}");
    }
    // Without a session, traffic splits by weight.
    let spread: std::collections::BTreeSet<String> = (0..24).map(|i| deployment_of(&[], None, i)).collect();
    assert_eq!(spread.len(), 2, "{spread:?}");
}

/// POSTs with Claude Code's `Accept-Encoding` and returns the status, the content-encoding and the
/// body decoded as a client that asked for gzip would decode it.
fn post_accepting_gzip(path: &str, auth: (&str, &str), body: &str) -> (u16, Option<String>, String, String) {
    let s = stack();
    let resp = match ureq::post(&s.url(path))
        .timeout(Duration::from_secs(60))
        .set("content-type", "application/json")
        .set(auth.0, auth.1)
        .set("anthropic-version", "2023-06-01")
        .set("accept-encoding", "gzip, deflate, br, zstd")
        .send_string(body)
    {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {path}: {e}"),
    };
    let status = resp.status();
    let encoding = resp.header("content-encoding").map(str::to_string);
    let request_id = resp.header("x-request-id").unwrap_or("").to_string();
    let mut raw = Vec::new();
    resp.into_reader().read_to_end(&mut raw).expect("read body");
    let text = match encoding.as_deref() {
        None | Some("identity") => String::from_utf8(raw).expect("utf-8 body"),
        Some("gzip") => {
            let mut out = String::new();
            flate2::read::GzDecoder::new(&raw[..]).read_to_string(&mut out).expect("client decodes the gzip body");
            out
        }
        Some(other) => panic!("content-encoding {other}: not what this client can decode here"),
    };
    (status, encoding, text, request_id)
}

/// A vendor that gzips its answers (as real ones do): the client still gets a body it can decode,
/// whatever it accepts, and the gateway still reads the usage (JSON and SSE, both doors).
#[test]
fn a_compressing_vendor_answers_decodably_and_its_usage_is_still_read() {
    let s = stack();
    let messages = |stream: bool| {
        json!({"model": "claude-gzip-test", "max_tokens": 64, "stream": stream,
               "metadata": {"user_id": "user-gzip-e2e"},
               "messages": [{"role": "user", "content": format!("compressed, stream={stream}")}]})
        .to_string()
    };
    let chat = |stream: bool| {
        json!({"model": "gzip-chat", "stream": stream, "stream_options": {"include_usage": stream},
               "messages": [{"role": "user", "content": "compressed chat"}]})
        .to_string()
    };
    let bearer = format!("Bearer {KEY}");
    let cases = [
        ("/v1/messages", ("x-api-key", KEY_MESSAGES), messages(false)),
        ("/v1/messages?beta=true", ("x-api-key", KEY_MESSAGES), messages(true)),
        ("/v1/chat/completions", ("authorization", bearer.as_str()), chat(false)),
        ("/v1/chat/completions", ("authorization", bearer.as_str()), chat(true)),
    ];
    let mut message_ids = Vec::new();
    for (path, auth, body) in &cases {
        let (status, encoding, text, id) = post_accepting_gzip(path, *auth, body);
        assert_eq!(status, 200, "{path}: {text}");
        let reply = Reply { status, headers: vec![("x-request-id".into(), id.clone())], body: text.clone() };
        // The vendor did compress: the gateway's fetch offered gzip and the mock answered with it.
        let upstream = s.upstream_last(&reply);
        let offered = upstream["headers"]["accept-encoding"].as_str().unwrap_or("");
        assert!(
            offered.contains("gzip"),
            "{path}: upstream accept-encoding {offered:?} (encoding to client {encoding:?})"
        );
        assert!(text.contains("Hello"), "{path}: {text}");
        if path.starts_with("/v1/messages") {
            let usage = vendor_usage(&reply);
            assert_eq!(usage["output_tokens"], 8, "{path}: {text}");
            message_ids.push((id, usage));
        } else if body.contains("\"stream\":true") {
            assert!(text.contains("\"completion_tokens\":8"), "{path}: {text}");
        } else {
            assert_eq!(reply.json()["usage"]["completion_tokens"], 8, "{path}: {text}");
        }
    }
    let ids: Vec<String> = message_ids.iter().map(|(id, _)| id.clone()).collect();
    let events = exported_events(s, &ids);
    assert_eq!(events.len(), ids.len(), "events found: {events:?}");
    for (id, usage) in &message_ids {
        let e = events.iter().find(|e| e["event_id"] == id.as_str()).unwrap();
        assert_eq!(e["output_tokens"], usage["output_tokens"], "{e}");
        assert_eq!(e["input_tokens"], usage["input_tokens"], "{e}");
        assert_eq!(e["estimated"], false, "{e}");
        assert_eq!(e["end_user"], "user-gzip-e2e", "metadata.user_id is the end user: {e}");
    }
}

/// The text of a Messages answer, JSON or SSE (every `text_delta` joined).
fn answer_text(r: &Reply) -> String {
    if !r.body.starts_with("event:") {
        return r.json()["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    }
    let mut text = String::new();
    for data in r.body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let v: Value = serde_json::from_str(data).unwrap();
        if v["delta"]["type"] == "text_delta" {
            text.push_str(v["delta"]["text"].as_str().unwrap());
        }
    }
    text
}

/// The exact cache at the Messages door, to both kinds of deployment: a repeat is served without
/// an upstream call, as JSON or replayed as Anthropic's event sequence; a streamed answer is kept
/// too; a different `anthropic-beta` is a different entry.
#[test]
fn the_exact_cache_serves_messages_repeats_as_json_and_as_streams() {
    let s = stack();
    let unique = format!("{}-{:?}", std::process::id(), Instant::now());
    for (model, door) in [("claude-cached-test", "anthropic"), ("gpt-cached-test", "openai-format")] {
        let body = |stream: bool, q: &str| {
            json!({"model": model, "max_tokens": 64, "temperature": 0, "stream": stream,
                   "metadata": {"user_id": "ignored-by-the-key"},
                   "messages": [{"role": "user", "content": format!("{q} {unique}")}]})
            .to_string()
        };
        let first = post_raw("/v1/messages", KEY, &body(false, "cache me"), &[]);
        assert_eq!(first.status, 200, "{door}: {}", first.body);
        assert_eq!(first.header("x-gateway-cache"), Some("miss"), "{door}");
        std::thread::sleep(Duration::from_millis(300));
        let hit = post_raw("/v1/messages", KEY, &body(false, "cache me"), &[]);
        assert_eq!(hit.header("x-gateway-cache"), Some("hit"), "{door}: {}", hit.body);
        assert_eq!(hit.body, first.body, "{door}");
        assert!(s.upstream_calls(&hit).is_empty(), "{door}: a hit makes no upstream call");
        let replay = post_raw("/v1/messages?beta=true", KEY, &body(true, "cache me"), &[]);
        assert_eq!(replay.header("x-gateway-cache"), Some("hit"), "{door}: {}", replay.body);
        assert!(replay.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
        let names: Vec<&str> = replay.body.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
        assert_eq!(names.first(), Some(&"message_start"), "{door}: {}", replay.body);
        assert_eq!(names.last(), Some(&"message_stop"), "{door}: {}", replay.body);
        assert_eq!(answer_text(&replay), answer_text(&first), "{door}");
        assert_eq!(vendor_usage(&replay)["output_tokens"], first.json()["usage"]["output_tokens"], "{door}");
        // A streamed answer is kept and serves a later JSON request.
        let streamed = post_raw("/v1/messages", KEY, &body(true, "stream then cache"), &[]);
        assert_eq!(streamed.header("x-gateway-cache"), Some("miss"), "{door}: {}", streamed.body);
        std::thread::sleep(Duration::from_millis(300));
        let later = post_raw("/v1/messages", KEY, &body(false, "stream then cache"), &[]);
        assert_eq!(later.header("x-gateway-cache"), Some("hit"), "{door}: {}", later.body);
        assert_eq!(later.json()["type"], "message");
        assert_eq!(answer_text(&later), answer_text(&streamed), "{door}");
        // Betas can change the answer: another `anthropic-beta` is another entry.
        let beta =
            post_raw("/v1/messages", KEY, &body(false, "cache me"), &[("anthropic-beta", "context-1m-2025-08-07")]);
        assert_eq!(beta.header("x-gateway-cache"), Some("miss"), "{door}: {}", beta.body);
        assert_eq!(s.upstream_calls(&beta).len(), 1, "{door}");
    }
}

/// A reasoner thinks longer than `first_token_ms` (1.5 s) before its text (4 s: 40 reasoning
/// chunks 100 ms apart). The Messages door does not show the reasoning, but it is the model at
/// work: the first-token bound is met by it, not timed out.
#[test]
fn held_back_reasoning_is_not_a_first_token_timeout() {
    let body = json!({"model": "reasoner-e2e", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "think hard"}]});
    let r = post_raw("/v1/messages", KEY, &body.to_string(), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("event: message_stop"), "{}", r.body);
    assert!(!r.body.contains("Thinking."), "reasoning is not shown on this door: {}", r.body);
    assert_eq!(stack().upstream_calls(&r).len(), 1, "one attempt, no timeout and retry");
}
