//! OpenAI Responses API (`POST /v1/responses`): a response object as JSON, or its typed SSE
//! events. The reply is the shared deterministic text, or one `function_call` per conversation.

use crate::fault::{Faults, Key};
use crate::http::Response;
use crate::openai;
use crate::reply::{self, Finish, Text};
use crate::sse::{Sse, SseEvent};
use crate::tokens;
use crate::vendor::Call;
use serde_json::{json, Value};

/// Request fields whose text counts toward input tokens here.
const PROMPT_FIELDS: &[&str] = &["input", "instructions", "tools"];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Message { id: String, text: Text },
    FunctionCall { id: String, call_id: String, name: String, arguments: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
    pub reasoning: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    pub item: Item,
    pub usage: Option<Usage>,
    /// Request parameters the response object echoes.
    pub echo: Value,
}

impl Plan {
    fn incomplete(&self) -> bool {
        matches!(&self.item, Item::Message { text, .. } if text.finish == Finish::MaxTokens)
    }
}

pub fn create(call: &Call, f: &Faults) -> Response {
    if call.model.is_empty() {
        return missing("model");
    }
    if !call.body.get("input").is_some_and(|i| i.is_string() || i.is_array()) {
        return missing("input");
    }
    let plan = plan(call, f);
    if call.bool_field("stream") {
        return Response::sse(Sse {
            events: events(&plan),
            error_event: stream_error_event(),
            ping_event: SseEvent::raw(": ping\n\n"),
        });
    }
    Response::json(200, &response(&plan, if plan.incomplete() { "incomplete" } else { "completed" }, true))
}

/// `POST /v1/responses/input_tokens`: the `input_tokens` the same body would report at
/// `/v1/responses` without the `cached` fault.
pub fn input_tokens(call: &Call, _: &Faults) -> Response {
    if call.model.is_empty() {
        return missing("model");
    }
    if !call.body.get("input").is_some_and(|i| i.is_string() || i.is_array()) {
        return missing("input");
    }
    let chars = PROMPT_FIELDS.iter().filter_map(|k| call.body.get(k)).map(tokens::text_chars).sum();
    Response::json(200, &json!({"object": "response.input_tokens", "input_tokens": tokens::tokens_for_chars(chars)}))
}

fn missing(param: &str) -> Response {
    let message = format!("Missing required parameter: '{param}'.");
    openai::error(400, &message, "invalid_request_error", Some(param), Some("missing_required_parameter"))
}

pub fn stream_error_event() -> SseEvent {
    let v = json!({"type": "error", "code": "server_error", "message": "The server had an error while processing your request. Sorry about that!", "param": null});
    SseEvent::named("error", &v, false)
}

pub fn plan(call: &Call, f: &Faults) -> Plan {
    let body = &call.body;
    let item = match chosen_tool(body).filter(|_| !called_a_function(body)) {
        Some((name, schema)) => Item::FunctionCall {
            id: reply::id("fc_"),
            call_id: reply::id("call_"),
            name,
            arguments: reply::tool_arguments(schema),
        },
        None => {
            let count = f.get(Key::Words).map_or(reply::DEFAULT_WORDS, |w| w as usize);
            let words = reply::words(call.base_model(), call.number, count);
            let max = body.get("max_output_tokens").and_then(Value::as_u64);
            Item::Message { id: reply::id("msg_"), text: reply::compose(words, max, &[]) }
        }
    };
    let emitted = match &item {
        Item::Message { text, .. } => text.tokens(),
        Item::FunctionCall { arguments, .. } => tokens::tool_tokens(arguments),
    };
    let cached = f.get(Key::Cached).unwrap_or(0);
    let reasoning = f.get(Key::Reasoning).unwrap_or(0);
    let prompt_chars = PROMPT_FIELDS.iter().filter_map(|k| body.get(k)).map(tokens::text_chars).sum();
    let usage = (!f.has(Key::NoUsage)).then(|| Usage {
        input: tokens::tokens_for_chars(prompt_chars) + cached,
        cached,
        output: emitted + reasoning,
        reasoning,
    });
    Plan {
        id: reply::id("resp_"),
        created_at: reply::unix_ms() / 1000,
        model: call.model.clone(),
        item,
        usage,
        echo: echo(body),
    }
}

/// One function call per conversation: once `input` holds a `function_call`, answer in text.
fn called_a_function(body: &Value) -> bool {
    let items = body.get("input").and_then(Value::as_array).into_iter().flatten();
    items.into_iter().any(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
}

/// `{"type":"function","name":…}` picks a function tool, `"none"` disables them, else the first
/// `function` tool (built-in tools such as `web_search` are never called).
fn chosen_tool(body: &Value) -> Option<(String, Option<&Value>)> {
    let tools = body.get("tools")?.as_array()?;
    let choice = body.get("tool_choice");
    if choice.and_then(Value::as_str) == Some("none") {
        return None;
    }
    let functions = || tools.iter().filter(|t| t.get("type").and_then(Value::as_str) == Some("function"));
    let name_of = |t: &Value| t.get("name").and_then(Value::as_str).map(str::to_string);
    let wanted = choice.filter(|c| c.get("type").and_then(Value::as_str) == Some("function"));
    let tool = match wanted.and_then(|c| c.get("name")).and_then(Value::as_str) {
        Some(name) => match functions().find(|t| name_of(t).as_deref() == Some(name)) {
            Some(t) => t,
            None => return Some((name.to_string(), None)),
        },
        None => functions().next()?,
    };
    Some((name_of(tool).unwrap_or_else(|| "tool".to_string()), tool.get("parameters")))
}

fn echo(body: &Value) -> Value {
    let field = |k: &str, default: Value| body.get(k).cloned().unwrap_or(default);
    json!({
        "instructions": field("instructions", Value::Null),
        "max_output_tokens": field("max_output_tokens", Value::Null),
        "metadata": field("metadata", json!({})),
        "parallel_tool_calls": field("parallel_tool_calls", json!(true)),
        "previous_response_id": field("previous_response_id", Value::Null),
        "reasoning": field("reasoning", json!({"effort": null, "summary": null})),
        "store": field("store", json!(true)),
        "temperature": field("temperature", json!(1.0)),
        "text": field("text", json!({"format": {"type": "text"}})),
        "tool_choice": field("tool_choice", json!("auto")),
        "tools": field("tools", json!([])),
        "top_p": field("top_p", json!(1.0)),
        "truncation": field("truncation", json!("disabled")),
        "user": field("user", Value::Null)
    })
}

fn item_json(item: &Item, done: bool) -> Value {
    let status = if done { "completed" } else { "in_progress" };
    match item {
        Item::Message { id, text } => {
            let content = if done { vec![text_part(&text.joined())] } else { Vec::new() };
            json!({"id": id, "type": "message", "status": status, "content": content, "role": "assistant"})
        }
        Item::FunctionCall { id, call_id, name, arguments } => {
            let arguments = if done { arguments.as_str() } else { "" };
            json!({"id": id, "type": "function_call", "status": status, "arguments": arguments, "call_id": call_id, "name": name})
        }
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

/// The response object in `status`; `finished` adds the output and usage.
pub fn response(plan: &Plan, status: &str, finished: bool) -> Value {
    let mut v = json!({
        "id": plan.id,
        "object": "response",
        "created_at": plan.created_at,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "model": plan.model,
        "output": [],
        "usage": null
    });
    if let (Some(map), Some(echo)) = (v.as_object_mut(), plan.echo.as_object()) {
        map.extend(echo.clone());
    }
    if finished {
        v["output"] = json!([item_json(&plan.item, true)]);
        if plan.incomplete() {
            v["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if let Some(u) = &plan.usage {
            v["usage"] = json!({
                "input_tokens": u.input,
                "input_tokens_details": {"cached_tokens": u.cached},
                "output_tokens": u.output,
                "output_tokens_details": {"reasoning_tokens": u.reasoning},
                "total_tokens": u.input + u.output
            });
        }
    }
    v
}

pub fn events(plan: &Plan) -> Vec<SseEvent> {
    let mut out: Vec<SseEvent> = Vec::new();
    let mut push = |mut v: Value, content: bool| {
        v["sequence_number"] = json!(out.len());
        let name = v["type"].as_str().unwrap_or("").to_string();
        out.push(SseEvent::named(&name, &v, content));
    };
    push(json!({"type": "response.created", "response": response(plan, "in_progress", false)}), false);
    push(json!({"type": "response.in_progress", "response": response(plan, "in_progress", false)}), false);
    push(json!({"type": "response.output_item.added", "output_index": 0, "item": item_json(&plan.item, false)}), false);
    match &plan.item {
        Item::Message { id, text } => {
            let at = json!({"item_id": id, "output_index": 0, "content_index": 0});
            let with = |mut v: Value, extra: Value| {
                if let (Some(a), Some(b)) = (v.as_object_mut(), extra.as_object()) {
                    a.extend(b.clone());
                }
                v
            };
            push(with(json!({"type": "response.content_part.added", "part": text_part("")}), at.clone()), false);
            for piece in &text.pieces {
                let delta = json!({"type": "response.output_text.delta", "delta": piece, "logprobs": []});
                push(with(delta, at.clone()), true);
            }
            let joined = text.joined();
            let done = json!({"type": "response.output_text.done", "text": joined, "logprobs": []});
            push(with(done, at.clone()), false);
            push(with(json!({"type": "response.content_part.done", "part": text_part(&joined)}), at), false);
        }
        Item::FunctionCall { id, name, arguments, .. } => {
            for piece in reply::fragments(arguments) {
                let delta = json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": 0, "delta": piece});
                push(delta, true);
            }
            let done = json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": 0, "name": name, "arguments": arguments});
            push(done, false);
        }
    }
    push(json!({"type": "response.output_item.done", "output_index": 0, "item": item_json(&plan.item, true)}), false);
    let (kind, status) =
        if plan.incomplete() { ("response.incomplete", "incomplete") } else { ("response.completed", "completed") };
    push(json!({"type": kind, "response": response(plan, status, true)}), false);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Request;
    use crate::vendor::{respond, Api};

    fn run(body: Value) -> Response {
        let req = Request {
            method: "POST".into(),
            path: "/v1/responses".into(),
            headers: vec![("authorization".into(), "Bearer k".into())],
            ..Request::default()
        };
        let call = Call::new(&req, body, 1, None);
        respond(Api::OpenAi, &call, create)
    }

    fn parse(e: &SseEvent) -> (String, Value) {
        let (head, data) = e.text.trim_end().split_once("\ndata: ").unwrap();
        (head.strip_prefix("event: ").unwrap().to_string(), serde_json::from_str(data).unwrap())
    }

    fn tools() -> Value {
        json!([
            {"type": "web_search"},
            {"type": "function", "name": "exec_command", "description": "d", "strict": false,
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
        ])
    }

    #[test]
    fn json_text_response() {
        let v = run(json!({"model": "gpt-x+cached=2", "input": "hello", "instructions": "be brief", "store": false}))
            .body_json()
            .unwrap();
        assert!(v["id"].as_str().unwrap().starts_with("resp_"));
        assert_eq!((v["object"].as_str(), v["status"].as_str()), (Some("response"), Some("completed")));
        let item = &v["output"][0];
        assert_eq!((item["type"].as_str(), item["role"].as_str()), (Some("message"), Some("assistant")));
        assert_eq!(item["content"][0]["type"], "output_text");
        assert_eq!(item["content"][0]["text"], "Hello from gpt-x: this is reply number 1.");
        assert_eq!(v["store"], false, "request parameters are echoed");
        assert_eq!(v["instructions"], "be brief");
        // "hello" + "be brief" = 13 chars = 4 tokens, plus 2 cached.
        assert_eq!(
            v["usage"],
            json!({"input_tokens": 6, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 8,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 14})
        );
        let cut = run(json!({"model": "m", "input": "x", "max_output_tokens": 3})).body_json().unwrap();
        assert_eq!(cut["status"], "incomplete");
        assert_eq!(cut["incomplete_details"], json!({"reason": "max_output_tokens"}));
        assert_eq!(run(json!({"model": "m"})).status, 400);
        assert_eq!(run(json!({"input": "x"})).body_json().unwrap()["error"]["param"], "model");
    }

    #[test]
    fn input_tokens_match_the_response_usage() {
        let body = json!({"model": "gpt-x", "input": "hello", "instructions": "be brief", "tools": tools()});
        let req = Request {
            method: "POST".into(),
            path: "/v1/responses/input_tokens".into(),
            headers: vec![("authorization".into(), "Bearer k".into())],
            ..Request::default()
        };
        let counted = respond(Api::OpenAi, &Call::new(&req, body.clone(), 1, None), input_tokens).body_json().unwrap();
        let created = run(body).body_json().unwrap();
        assert_eq!(counted["object"], "response.input_tokens");
        assert_eq!(counted["input_tokens"], created["usage"]["input_tokens"]);
        let missing = respond(Api::OpenAi, &Call::new(&req, json!({"model": "m"}), 1, None), input_tokens);
        assert_eq!(missing.status, 400);
    }

    #[test]
    fn one_function_call_per_conversation() {
        let v = run(json!({"model": "m", "input": "run it", "tools": tools()})).body_json().unwrap();
        let call = &v["output"][0];
        assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("function_call"), Some("exec_command")));
        assert_eq!(call["arguments"], r#"{"cmd": "mock"}"#);
        assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
        let input = json!([
            {"role": "user", "content": [{"type": "input_text", "text": "run it"}]},
            {"type": "function_call", "call_id": call["call_id"], "name": "exec_command", "arguments": call["arguments"]},
            {"type": "function_call_output", "call_id": call["call_id"], "output": "not found"}
        ]);
        let v = run(json!({"model": "m", "input": input, "tools": tools()})).body_json().unwrap();
        assert_eq!(v["output"][0]["type"], "message");
        let v = run(json!({"model": "m", "input": "x", "tools": tools(), "tool_choice": "none"})).body_json().unwrap();
        assert_eq!(v["output"][0]["type"], "message");
        let only_builtin = json!([{"type": "web_search"}]);
        let v = run(json!({"model": "m", "input": "x", "tools": only_builtin})).body_json().unwrap();
        assert_eq!(v["output"][0]["type"], "message");
    }

    #[test]
    fn stream_events_in_order() {
        let req = Request { method: "POST".into(), path: "/v1/responses".into(), ..Request::default() };
        let call = Call::new(&req, json!({"model": "m+words=2", "input": "x", "stream": true}), 1, None);
        let faults = crate::fault::collect(&call.model, None, None).unwrap();
        let ev: Vec<(String, Value)> = events(&plan(&call, &faults)).iter().map(parse).collect();
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        for (i, (name, v)) in ev.iter().enumerate() {
            assert_eq!((v["type"].as_str(), v["sequence_number"].as_u64()), (Some(name.as_str()), Some(i as u64)));
        }
        assert_eq!(ev[0].1["response"]["status"], "in_progress");
        assert_eq!(ev[0].1["response"]["usage"], Value::Null);
        let item_id = ev[2].1["item"]["id"].clone();
        assert_eq!((ev[4].1["item_id"].clone(), ev[4].1["delta"].clone()), (item_id, json!("Hello")));
        assert_eq!(ev[5].1["delta"], " from");
        assert_eq!(ev[6].1["text"], "Hello from");
        let done = &ev[9].1["response"];
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello from");
        assert_eq!(done["usage"]["output_tokens"], 2);
    }

    #[test]
    fn function_call_stream() {
        let req = Request { method: "POST".into(), path: "/v1/responses".into(), ..Request::default() };
        let call = Call::new(&req, json!({"model": "m", "input": "x", "stream": true, "tools": tools()}), 1, None);
        let ev: Vec<(String, Value)> = events(&plan(&call, &Faults::default())).iter().map(parse).collect();
        assert_eq!(ev[2].1["item"]["type"], "function_call");
        assert_eq!(ev[2].1["item"]["arguments"], "");
        let args: String = ev
            .iter()
            .filter(|(n, _)| n == "response.function_call_arguments.delta")
            .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(args, r#"{"cmd": "mock"}"#);
        let done = ev.iter().find(|(n, _)| n == "response.function_call_arguments.done").unwrap();
        assert_eq!(done.1["arguments"], args.as_str());
        assert_eq!(ev.last().unwrap().1["response"]["output"][0]["status"], "completed");
    }
}
