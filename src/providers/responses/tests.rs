//! The Responses translations checked against OpenAI's documented formats.

use super::answer::{self, usage_of};
use super::request::to_chat;
use super::stream::{FromChat, PassThrough};
use super::*;
use crate::canonical::ChatRequest;
use crate::providers::testing::deployment;
use crate::providers::{ErrorClass, StreamEnd, StreamTranslator};
use serde_json::{json, Map, Value};

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn events(sse: &[u8]) -> Vec<Value> {
    String::from_utf8(sse.to_vec())
        .unwrap()
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (event, data) = e.split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(event.strip_prefix("event: ").unwrap(), data["type"], "event name matches type");
            data
        })
        .collect()
}

#[test]
fn codex_request_translates_to_chat() {
    let req = obj(serde_json::from_str(fixture!("responses_request_codex.json")).unwrap());
    let plan = to_chat(&req).unwrap();
    let chat = &plan.chat;
    assert_eq!(
        chat["messages"],
        json!([
            {"role": "system", "content": "You are Codex."},
            {"role": "user", "content": [{"type": "text", "text": "<environment_context/>"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "say hello"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_A", "type": "function", "function": {"name": "exec_command", "arguments": "{\"cmd\":\"mock\"}"}},
                {"id": "call_B", "type": "function", "function": {"name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_A", "content": "command not found"},
            {"role": "tool", "tool_call_id": "call_B", "content": "README.md"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "thanks"}
        ])
    );
    assert_eq!(
        chat["tools"],
        json!([{"type": "function", "function": {"name": "exec_command", "description": "Runs a command", "strict": false,
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}])
    );
    assert_eq!((chat["tool_choice"].clone(), chat["parallel_tool_calls"].clone()), (json!("auto"), json!(true)));
    assert_eq!(chat["stream_options"], json!({"include_usage": true}));
    for absent in ["store", "include", "prompt_cache_key", "client_metadata", "reasoning", "instructions"] {
        assert!(chat.get(absent).is_none(), "{absent}");
    }
    assert_eq!(plan.dropped_tools, vec!["namespace:multi_agent_v1".to_string(), "web_search".to_string()]);
    assert_eq!(plan.dropped_items, 1);
    let warning = plan.warning().unwrap();
    assert!(warning.contains("namespace:multi_agent_v1, web_search") && warning.contains("1 input item"), "{warning}");
    let parsed = ChatRequest::parse(chat.to_string().as_bytes()).unwrap();
    assert!(parsed.needs_tools() && parsed.needs_vision() && parsed.is_stream() && parsed.wants_usage());
}

#[test]
fn simple_fields_map_to_chat() {
    let req = obj(json!({"model": "m", "instructions": "Be terse.", "input": "hi", "max_output_tokens": 50,
        "temperature": 0.2, "user": "u1", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}}}));
    let chat = to_chat(&req).unwrap().chat;
    assert_eq!(
        chat,
        json!({"model": "m", "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
            "max_tokens": 50, "temperature": 0.2, "user": "u1",
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": true}}})
    );
    assert!(to_chat(&req).unwrap().warning().is_none());
}

#[test]
fn tool_choice_needing_a_dropped_tool_is_a_400() {
    let tools = json!([{"type": "function", "name": "f", "parameters": {}}, {"type": "web_search"}, {"type": "custom", "name": "apply_patch"}]);
    for choice in [
        json!({"type": "web_search"}),
        json!({"type": "function", "name": "apply_patch"}),
        json!({"type": "allowed_tools", "mode": "auto", "tools": []}),
    ] {
        let req = obj(json!({"model": "m", "input": "x", "tools": tools, "tool_choice": choice}));
        let err = to_chat(&req).unwrap_err();
        assert_eq!(
            (err.status, err.code.as_str(), err.param.as_deref()),
            (400, "unsupported_parameter", Some("tool_choice"))
        );
    }
    let req = obj(json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": "required"}));
    assert_eq!(to_chat(&req).unwrap_err().param.as_deref(), Some("tool_choice"));
    let req =
        obj(json!({"model": "m", "input": "x", "tools": tools, "tool_choice": {"type": "function", "name": "f"}}));
    assert_eq!(to_chat(&req).unwrap().chat["tool_choice"], json!({"type": "function", "function": {"name": "f"}}));
    // Only hosted tools: no tools and no tool_choice reach the chat deployment.
    let req = obj(json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": "auto"}));
    let chat = to_chat(&req).unwrap().chat;
    assert!(chat.get("tools").is_none() && chat.get("tool_choice").is_none());
}

#[test]
fn stored_state_and_bad_items_are_clear_400s() {
    for (body, param) in [
        (json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}), "previous_response_id"),
        (json!({"model": "m", "input": "x", "conversation": "conv_1"}), "conversation"),
        (json!({"model": "m", "input": "x", "background": true}), "background"),
        (json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}), "item_reference"),
        (json!({"model": "m", "input": [{"type": "message", "role": "robot", "content": "x"}]}), "input[0].role"),
        (json!({"model": "m", "input": [{"type": "function_call", "name": "f"}]}), "input[0].call_id"),
        (json!({"model": "m", "input": [{"type": "teleport"}]}), "input[0].type"),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0]",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}),
            "input[0].content[0]",
        ),
        (json!({"model": "m", "input": 5}), "input"),
        (json!({"model": "m"}), "input"),
        (json!({"model": "m", "input": "x", "tools": [{"type": "function"}]}), "tools[0].name"),
    ] {
        let err = to_chat(&obj(body.clone())).unwrap_err();
        assert_eq!((err.status, err.param.as_deref()), (400, Some(param)), "{body}");
    }
}

#[test]
fn chat_answer_becomes_response_object() {
    let template = answer::template(&obj(json!({"model": "logical", "input": "x", "store": false})));
    let completion = fixture!("openai_response_reasoning_cached.json");
    let usage =
        crate::canonical::usage::Usage::from_openai(&serde_json::from_str::<Value>(completion).unwrap()["usage"]);
    let body = answer::from_chat(&template, completion.as_bytes(), usage.as_ref(), 1).unwrap();
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["object"].clone(), v["id"].clone(), v["status"].clone()),
        (json!("response"), json!("resp_AQ2x"), json!("completed"))
    );
    assert_eq!(
        (v["model"].clone(), v["created_at"].clone(), v["store"].clone()),
        (json!("o3-mini-2025-01-31"), json!(1730000000), json!(false))
    );
    assert_eq!(
        v["output"],
        json!([{"id": "msg_AQ2x", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "The answer is 42.", "annotations": [], "logprobs": []}]}])
    );
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 2406, "input_tokens_details": {"cached_tokens": 1152}, "output_tokens": 1320,
            "output_tokens_details": {"reasoning_tokens": 1024}, "total_tokens": 3726})
    );
    assert_eq!(usage_of(&v["usage"]), usage);
}

#[test]
fn chat_tool_call_and_length_map_to_items_and_status() {
    let template = answer::template(&obj(json!({"model": "m", "input": "x"})));
    let completion = json!({"id": "chatcmpl-1", "created": 5, "model": "gpt", "choices": [{"index": 0, "finish_reason": "length",
        "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]});
    let v: Value =
        serde_json::from_str(&answer::from_chat(&template, completion.to_string().as_bytes(), None, 1).unwrap())
            .unwrap();
    assert_eq!(
        v["output"],
        json!([{"id": "fc_9", "type": "function_call", "status": "completed", "call_id": "call_9", "name": "f", "arguments": "{}"}])
    );
    assert_eq!(
        (v["status"].clone(), v["incomplete_details"].clone()),
        (json!("incomplete"), json!({"reason": "max_output_tokens"}))
    );
    assert_eq!(v["usage"], Value::Null);
    assert!(answer::from_chat(&template, b"<html>", None, 1).is_err());
}

fn run_from_chat(provider: &str, sse: &str, split: usize) -> (Vec<Value>, StreamEnd, FromChat) {
    let dep = deployment(provider);
    let template = answer::template(&obj(json!({"model": "logical", "input": "x", "stream": true})));
    let mut t = FromChat::new(StreamTranslator::new(&dep, true, 7), template, 7);
    let mut out = Vec::new();
    for chunk in sse.as_bytes().chunks(split) {
        assert!(t.feed(chunk, &mut out).is_none());
    }
    let end = t.finish(&mut out);
    (events(&out), end, t)
}

#[test]
fn chat_stream_becomes_response_events_at_any_split() {
    let (reference, end, t) = run_from_chat("openai", fixture!("openai_stream_tools_usage.sse"), usize::MAX);
    assert_eq!(end, StreamEnd::Complete);
    for split in [1, 7, 64] {
        assert_eq!(run_from_chat("openai", fixture!("openai_stream_tools_usage.sse"), split).0, reference);
    }
    let kinds: Vec<&str> = reference.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..3], ["response.created", "response.in_progress", "response.output_item.added"]);
    assert!(kinds.contains(&"response.function_call_arguments.delta"));
    assert_eq!(
        kinds[kinds.len() - 3..],
        ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    );
    let seq: Vec<u64> = reference.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(seq, (0..seq.len() as u64).collect::<Vec<_>>());
    let completed = &reference.last().unwrap()["response"];
    assert_eq!(completed["output"][0]["type"], "function_call");
    assert_eq!(completed["output"][0]["call_id"], "call_DdmO9pD3xa9XTPNJ32zg2hcA");
    let args: String = reference
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(completed["output"][0]["arguments"], Value::from(args.clone()));
    assert!(serde_json::from_str::<Value>(&args).is_ok(), "{args}");
    assert_eq!(usage_of(&completed["usage"]), t.usage());
    assert!(t.usage().is_some());
}

#[test]
fn anthropic_stream_becomes_response_events() {
    let (evs, end, t) = run_from_chat("anthropic", fixture!("anthropic_stream_tool_use.sse"), 5);
    assert_eq!(end, StreamEnd::Complete);
    let completed = &evs.last().unwrap()["response"];
    assert_eq!(evs.last().unwrap()["type"], "response.completed");
    let types: Vec<&str> =
        completed["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["message", "function_call", "function_call"]);
    assert_eq!(completed["output"][2]["arguments"], "{\"timezone\": \"America/Los_Angeles\"}");
    let text: String = evs
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(completed["output"][0]["content"][0]["text"], Value::from(text));
    // Message item closed before the function call item opens.
    let pos = |k: &str| evs.iter().position(|e| e["type"] == k).unwrap();
    assert!(pos("response.output_text.done") < pos("response.function_call_arguments.delta"));
    let usage = t.usage().unwrap();
    assert_eq!((usage.input, usage.cached_read), (472, 1024));
    assert_eq!(completed["usage"]["input_tokens"], 472 + 1024);
}

#[test]
fn chat_stream_cut_is_truncated_and_holds_back_a_bare_preamble() {
    let (_, end, t) = run_from_chat("openai", fixture!("openai_stream_truncated.sse"), 3);
    assert_eq!(end, StreamEnd::Truncated);
    assert!(t.emitted_any());
    let err = t.error_event(&crate::http::error::ApiError::bad_gateway("cut"));
    let ev = &events(&err)[0];
    assert_eq!((ev["type"].clone(), ev["message"].clone()), (json!("error"), json!("cut")));
    let dep = deployment("openai");
    let mut t = FromChat::new(StreamTranslator::new(&dep, true, 7), json!({}), 7);
    let mut out = Vec::new();
    let role = r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
    t.feed(format!("{role}\n\n").as_bytes(), &mut out);
    assert!(!t.emitted_any(), "response.created alone does not commit the stream");
    assert!(!t.thinking());
    let reasoning = role.replace(r#""role":"assistant","content":"""#, r#""reasoning_content":"Hmm.""#);
    t.feed(format!("{reasoning}\n\n").as_bytes(), &mut out);
    assert!(!t.emitted_any(), "reasoning is not shown on this door");
    assert!(t.thinking(), "but the model has started");
    let text = role.replace(r#""role":"assistant","content":"""#, r#""content":"Hi""#);
    t.feed(format!("{text}\n\n").as_bytes(), &mut out);
    assert!(t.emitted_any() && !t.thinking());
}

#[test]
fn passthrough_stream_relays_bytes_and_reads_usage() {
    let sse = fixture!("responses_stream_text.sse");
    for split in [1, 13, usize::MAX] {
        let mut t = PassThrough::new();
        let mut out = Vec::new();
        for chunk in sse.as_bytes()[..sse.len() - 1].chunks(split) {
            assert!(t.feed(chunk, &mut out).is_none());
        }
        // After `response.completed` the client's stream may close, not before its blank line.
        assert!(!t.ended(), "split {split}");
        assert!(t.feed(b"\n", &mut out).is_none());
        assert!(t.ended(), "split {split}");
        assert_eq!(t.finish(&mut out), StreamEnd::Complete);
        assert_eq!(out, sse.as_bytes());
        let u = t.usage().unwrap();
        assert_eq!((u.input, u.cached_read, u.output, u.reasoning), (2406 - 1152, 1152, 1320, 1024));
    }
}

#[test]
fn streams_end_with_their_last_event_and_not_after_a_failure() {
    let mut failed = PassThrough::new();
    let fail = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}}}\n\n";
    failed.feed(fail.as_bytes(), &mut Vec::new());
    assert!(!failed.ended());
    // Written from chat chunks: once `[DONE]` came and `response.completed` was written.
    let chat = fixture!("openai_stream_tools_usage.sse");
    let done = chat.find("data: [DONE]").unwrap();
    let dep = deployment("openai");
    let mut t = FromChat::new(StreamTranslator::new(&dep, true, 7), json!({}), 7);
    let mut out = Vec::new();
    t.feed(&chat.as_bytes()[..done + 12], &mut out);
    assert!(!t.ended(), "[DONE] without its blank line");
    t.feed(&chat.as_bytes()[done + 12..], &mut out);
    assert!(t.ended());
    assert_eq!(events(&out).last().unwrap()["type"], "response.completed");
    let before = out.len();
    assert_eq!(t.finish(&mut out), StreamEnd::Complete);
    assert_eq!(out.len(), before, "nothing after response.completed");
}

#[test]
fn passthrough_stream_errors_before_content_may_fall_back() {
    let created =
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{}}\n\n";
    let error =
        "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\",\"param\":null}\n\n";
    let mut t = PassThrough::new();
    let mut out = Vec::new();
    assert!(t.feed(created.as_bytes(), &mut out).is_none());
    assert!(out.is_empty() && !t.emitted_any());
    let sse = fixture!("responses_stream_text.sse");
    let first_delta = sse.find("event: response.output_text.delta").unwrap();
    let message_added = sse.rfind("event: response.output_item.added").unwrap();
    let structure = &sse[message_added..first_delta];
    assert!(t.feed(structure.as_bytes(), &mut out).is_none());
    assert!(out.is_empty() && !t.emitted_any(), "items without output do not commit the stream");
    let err = t.feed(error.as_bytes(), &mut out).unwrap();
    assert_eq!((err.class, err.message.as_str()), (ErrorClass::ServerError, "boom"));
    assert!(out.is_empty() && !t.emitted_any());
    // After content the vendor's error is relayed as is, and the gateway adds none of its own.
    let upto = sse.find("event: response.output_text.done").unwrap();
    let mut t = PassThrough::new();
    let mut out = Vec::new();
    assert!(t.feed(&sse.as_bytes()[..upto], &mut out).is_none());
    assert!(t.feed(error.as_bytes(), &mut out).is_some());
    assert_eq!(out, format!("{}{error}", &sse[..upto]).into_bytes());
    assert!(t.error_event(&crate::http::error::ApiError::bad_gateway("x")).is_empty());
    // Cut without a terminal event: truncated, and the gateway's error event continues the numbering.
    let mut t = PassThrough::new();
    let mut out = Vec::new();
    t.feed(&sse.as_bytes()[..upto], &mut out);
    assert_eq!(t.finish(&mut out), StreamEnd::Truncated);
    let ev = &events(&t.error_event(&crate::http::error::ApiError::bad_gateway("x")))[0];
    assert_eq!(ev["sequence_number"], 8);
}

#[test]
fn passthrough_response_failed_is_a_failure_with_its_usage() {
    let sse = fixture!("responses_stream_text.sse");
    let upto = sse.find("event: response.output_text.done").unwrap();
    let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":8,\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The model failed.\"},\"usage\":{\"input_tokens\":10,\"output_tokens\":3}}}\n\n";
    let mut t = PassThrough::new();
    let mut out = Vec::new();
    assert!(t.feed(&sse.as_bytes()[..upto], &mut out).is_none());
    let err = t.feed(failed.as_bytes(), &mut out).unwrap();
    assert_eq!((err.class, err.message.as_str()), (ErrorClass::ServerError, "The model failed."));
    assert!(out.ends_with(failed.as_bytes()), "relayed as the vendor sent it");
    assert!(t.error_event(&crate::http::error::ApiError::bad_gateway("x")).is_empty());
    assert_eq!(t.usage().map(|u| (u.input, u.output)), Some((10, 3)));
    // Before any output it is held back: the request may still fall back.
    let mut t = PassThrough::new();
    let mut out = Vec::new();
    assert!(t.feed(failed.as_bytes(), &mut out).is_some());
    assert!(out.is_empty() && !t.emitted_any());
}

#[test]
fn passthrough_json_keeps_body_and_reads_usage() {
    let body = fixture!("responses_response_reasoning.json");
    let (text, usage) = translate_passthrough(body.into()).unwrap();
    assert_eq!(text, body.as_bytes());
    let u = usage.unwrap();
    assert_eq!((u.input, u.cached_read, u.output, u.reasoning), (1254, 1152, 1320, 1024));
    assert_eq!(translate_passthrough(Vec::new()).unwrap_err().class, ErrorClass::EmptyResponse);
    assert!(translate_passthrough(br#"{"object":"chat.completion"}"#.to_vec()).is_err());
    // A body that is not UTF-8 is a malformed answer, as it was when the answer became a `String`.
    let broken = body.replacen("answer is", "answer\u{0}is", 1).into_bytes();
    let broken: Vec<u8> = broken.into_iter().map(|b| if b == 0 { 0xff } else { b }).collect();
    assert_eq!(translate_passthrough(broken).unwrap_err().class, ErrorClass::ServerError);
}

#[test]
fn passthrough_request_splices_only_the_model() {
    let body = fixture!("responses_request_codex.json");
    let mut dep = deployment("openai");
    dep.model = "gpt-5.1-codex".into();
    let call = build_passthrough(&dep, body.as_bytes(), None, "k").unwrap();
    assert_eq!(call.url, "https://api.openai.com/v1/responses");
    assert_eq!(String::from_utf8_lossy(&call.body), body.replacen("\"gpt-5-codex\"", "\"gpt-5.1-codex\"", 1));
    assert!(call.headers.iter().all(|(k, _)| !k.eq_ignore_ascii_case("x-client-request-id")));
    assert!(build_passthrough(&dep, b"{\"model\": 1}", None, "k").is_err());
    assert!(build_passthrough(&dep, &[0xff, 0xfe], None, "k").is_err());
}

#[test]
fn input_tokens_go_to_their_own_path_and_come_back_unchanged() {
    let dep = deployment("openai");
    let call = build_input_tokens(&dep, br#"{"model":"m","input":"hi"}"#, "k").unwrap();
    assert_eq!(call.url, "https://api.openai.com/v1/responses/input_tokens");
    assert_eq!(String::from_utf8_lossy(&call.body), r#"{"model":"gpt-4o-mini","input":"hi"}"#);
    let body = r#"{"object": "response.input_tokens", "input_tokens": 11}"#;
    assert_eq!(translate_input_tokens(body.into()).unwrap(), body.as_bytes());
    assert!(translate_input_tokens(br#"{"object": "response"}"#.to_vec()).is_err());
}

#[test]
fn usage_reader_tolerates_partial_objects() {
    assert_eq!(usage_of(&json!(null)), None);
    assert_eq!(usage_of(&json!({})), None);
    let u = usage_of(&json!({"input_tokens": 3, "input_tokens_details": {"cached_tokens": 9}, "output_tokens": 2}))
        .unwrap();
    assert_eq!((u.input, u.cached_read, u.output, u.reasoning), (0, 3, 2, 0));
}

/// Parallel calls that a compatible vendor streams without `index` stay two calls, each with its
/// own arguments.
#[test]
fn parallel_calls_without_an_index_are_told_apart_by_id() {
    let chunk = |delta: &str| {
        format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n")
    };
    let sse = [
        chunk(r#"{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}"#),
        chunk(r#"{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"g","arguments":"{\"b\":2}"}}]}"#),
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n".to_string(),
    ]
    .concat();
    let (evs, end, _) = run_from_chat("openai", &sse, usize::MAX);
    assert_eq!(end, StreamEnd::Complete);
    let output = &evs.last().unwrap()["response"]["output"];
    let calls: Vec<(Value, Value, Value)> = output
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["call_id"].clone(), o["name"].clone(), o["arguments"].clone()))
        .collect();
    assert_eq!(
        calls,
        [(json!("call_a"), json!("f"), json!("{\"a\":1}")), (json!("call_b"), json!("g"), json!("{\"b\":2}"))],
        "{output}"
    );
}
