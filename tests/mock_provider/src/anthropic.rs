//! Anthropic Messages (JSON and SSE), token counting and Anthropic-format errors.

use crate::fault::{Faults, Key};
use crate::http::Response;
use crate::prompt_cache::{self, CacheUsage};
use crate::reply::{self, Finish, Text};
use crate::sse::{Sse, SseEvent};
use crate::thinking::{self, Thinking};
use crate::tokens;
use crate::vendor::Call;
use serde_json::{json, Value};

pub fn error(status: u16, kind: &str, message: &str, request_id: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id});
    Response::json(status, &body)
}

fn invalid(call: &Call, message: &str) -> Response {
    error(400, "invalid_request_error", message, &call.request_id)
}

/// The rejection for a missing `x-api-key` or `anthropic-version`, if any.
pub fn auth_error(call: &Call) -> Option<Response> {
    if call.req.header("x-api-key").is_none_or(|k| k.trim().is_empty()) {
        let message = "x-api-key header is required";
        return Some(error(401, "authentication_error", message, &call.request_id));
    }
    if call.req.header("anthropic-version").is_none() {
        return Some(invalid(call, "anthropic-version: header is required"));
    }
    None
}

/// Error faults in precedence order quota, context_length, status; content_filter is a refusal instead.
pub fn fault_error(f: &Faults, call: &Call) -> Option<Response> {
    let status = f.get(Key::Status).map(|s| s as u16);
    let rid = &call.request_id;
    if f.has(Key::Quota) {
        let message = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.";
        return Some(error(status.unwrap_or(400), "invalid_request_error", message, rid));
    }
    if f.has(Key::ContextLength) {
        let message = "prompt is too long: 250000 tokens > 200000 maximum";
        return Some(error(status.unwrap_or(400), "invalid_request_error", message, rid));
    }
    status.map(|s| status_error(s, call.base_model(), rid))
}

pub fn status_error(status: u16, model: &str, request_id: &str) -> Response {
    let (kind, message) = match status {
        401 => ("authentication_error", "invalid x-api-key".to_string()),
        403 => ("permission_error", "Your API key does not have permission to use the specified resource.".to_string()),
        404 => ("not_found_error", format!("model: {model}")),
        413 => ("request_too_large", "Request exceeds the maximum allowed number of bytes.".to_string()),
        429 => ("rate_limit_error", "This request would exceed the rate limit for your organization of 50 requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.".to_string()),
        500 => ("api_error", "Internal server error".to_string()),
        529 => ("overloaded_error", "Overloaded".to_string()),
        400..=499 => ("invalid_request_error", format!("Invalid request (mock-provider fault status={status}).")),
        _ => ("api_error", format!("Internal server error (mock-provider fault status={status}).")),
    };
    error(status, kind, &message, request_id)
}

pub fn stream_error_event() -> SseEvent {
    let v = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    SseEvent::named("error", &v, false)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolUse {
    pub id: String,
    pub name: String,
    pub input_json: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache: CacheUsage,
}

impl Usage {
    /// `output` is 1 in `message_start`, as Anthropic sends it, and the total elsewhere.
    fn to_json(&self, output: u64) -> Value {
        json!({
            "input_tokens": self.input,
            "cache_creation_input_tokens": self.cache.write(),
            "cache_read_input_tokens": self.cache.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache.write_5m,
                "ephemeral_1h_input_tokens": self.cache.write_1h
            },
            "output_tokens": output,
            "service_tier": "standard"
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub id: String,
    pub model: String,
    pub thinking: Option<Thinking>,
    pub text: Text,
    pub tool: Option<ToolUse>,
    pub stop_reason: &'static str,
    pub stop_sequence: Option<String>,
    pub usage: Option<Usage>,
}

pub fn messages(call: &Call, f: &Faults) -> Response {
    if let Some(resp) = validate(call) {
        return resp;
    }
    let plan = plan(call, f);
    if call.bool_field("stream") {
        return Response::sse(Sse {
            events: events(&plan),
            error_event: stream_error_event(),
            ping_event: SseEvent::named("ping", &json!({"type": "ping"}), false),
        });
    }
    Response::json(200, &message(&plan))
}

/// The same rule as a message's usage: `input_tokens` + cache reads + cache writes there.
pub fn count_tokens(call: &Call, _: &Faults) -> Response {
    if call.model.is_empty() {
        return invalid(call, "model: Field required");
    }
    if !call.body.get("messages").is_some_and(Value::is_array) {
        return invalid(call, "messages: Field required");
    }
    Response::json(200, &json!({"input_tokens": tokens::prompt_tokens(&call.body)}))
}

fn validate(call: &Call) -> Option<Response> {
    if call.model.is_empty() {
        return Some(invalid(call, "model: Field required"));
    }
    if !call.body.get("messages").is_some_and(Value::is_array) {
        return Some(invalid(call, "messages: Field required"));
    }
    if !call.body.get("max_tokens").is_some_and(Value::is_u64) {
        return Some(invalid(call, "max_tokens: Field required"));
    }
    if let Some(message) = thinking::request_error(&call.body)
        .or_else(|| thinking::replay_error(&call.body))
        .or_else(|| thinking::missing_block_error(&call.body))
    {
        return Some(invalid(call, &message));
    }
    None
}

pub fn plan(call: &Call, f: &Faults) -> Plan {
    let body = &call.body;
    let count = f.get(Key::Words).map_or(reply::DEFAULT_WORDS, |w| w as usize);
    let words = reply::words(call.base_model(), call.number, count);
    let thinking = thinking::requested(body).map(|d| thinking::compose(call.base_model(), call.number, d));
    let thinking_tokens = thinking.as_ref().map_or(0, |t| t.tokens);
    let max = body.get("max_tokens").and_then(Value::as_u64).map(|m| m.saturating_sub(thinking_tokens));
    let text = reply::compose(words, max, &reply::stop_list(body.get("stop_sequences")));
    let refusal = f.has(Key::ContentFilter);
    let tool = match (&text.finish, refusal || called_a_tool(body)) {
        (Finish::Complete, false) => chosen_tool(body).map(|(name, schema)| ToolUse {
            id: reply::id("toolu_"),
            name,
            input_json: reply::tool_arguments(schema),
        }),
        _ => None,
    };
    let (stop_reason, stop_sequence) = match (&text.finish, refusal) {
        (_, true) => ("refusal", None),
        (Finish::MaxTokens, _) => ("max_tokens", None),
        (Finish::Stop(s), _) => ("stop_sequence", Some(s.clone())),
        (Finish::Complete, _) if tool.is_some() => ("tool_use", None),
        (Finish::Complete, _) => ("end_turn", None),
    };
    let output = thinking_tokens + text.tokens() + tool.as_ref().map_or(0, |t| tokens::tool_tokens(&t.input_json));
    let usage = (!f.has(Key::NoUsage)).then(|| {
        let prompt = tokens::prompt_tokens(body);
        if f.has(Key::Cached) || f.has(Key::CacheWrite) {
            let cache = CacheUsage {
                read: f.get(Key::Cached).unwrap_or(0),
                write_5m: f.get(Key::CacheWrite).unwrap_or(0),
                write_1h: 0,
            };
            return Usage { input: prompt, output, cache };
        }
        let cache = prompt_cache::account(body, call.base_model(), call.prompt_cache, reply::unix_ms());
        Usage { input: prompt.saturating_sub(cache.read + cache.write()), output, cache }
    });
    Plan { id: reply::id("msg_"), model: call.model.clone(), thinking, text, tool, stop_reason, stop_sequence, usage }
}

/// One tool call per conversation: once the history holds a `tool_use`, the model answers in
/// text, so an agent's loop (tool results, subagent reports, reminders) ends.
fn called_a_tool(body: &Value) -> bool {
    let messages = body.get("messages").and_then(Value::as_array).into_iter().flatten();
    messages.filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant")).any(|m| {
        let blocks = m.get("content").and_then(Value::as_array).into_iter().flatten();
        blocks.into_iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
    })
}

/// `{"type":"tool","name":…}` picks a tool, `{"type":"none"}` disables them, else the first.
fn chosen_tool(body: &Value) -> Option<(String, Option<&Value>)> {
    let tools = body.get("tools")?.as_array().filter(|t| !t.is_empty())?;
    let choice = body.get("tool_choice");
    let kind = choice.and_then(|c| c.get("type")).and_then(Value::as_str);
    if kind == Some("none") {
        return None;
    }
    let name_of = |t: &Value| t.get("name").and_then(Value::as_str).map(str::to_string);
    let wanted = choice.filter(|_| kind == Some("tool")).and_then(|c| c.get("name")).and_then(Value::as_str);
    let tool = match wanted {
        Some(name) => match tools.iter().find(|t| name_of(t).as_deref() == Some(name)) {
            Some(t) => t,
            None => return Some((name.to_string(), None)),
        },
        None => &tools[0],
    };
    let name = name_of(tool).unwrap_or_else(|| "tool".to_string());
    Some((name, tool.get("input_schema")))
}

fn has_text_block(plan: &Plan) -> bool {
    !plan.text.pieces.is_empty() || plan.tool.is_none()
}

fn tool_block(t: &ToolUse, input: Value) -> Value {
    json!({"type": "tool_use", "id": t.id, "name": t.name, "input": input})
}

pub fn message(plan: &Plan) -> Value {
    let mut content = Vec::new();
    if let Some(t) = &plan.thinking {
        content.push(json!({"type": "thinking", "thinking": t.shown(), "signature": t.signature}));
    }
    if has_text_block(plan) {
        content.push(json!({"type": "text", "text": plan.text.joined()}));
    }
    if let Some(t) = &plan.tool {
        let input = serde_json::from_str(&t.input_json).unwrap_or_else(|_| json!({}));
        content.push(tool_block(t, input));
    }
    let mut v = json!({
        "id": plan.id,
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": content,
        "stop_reason": plan.stop_reason,
        "stop_sequence": plan.stop_sequence
    });
    if let Some(u) = &plan.usage {
        v["usage"] = u.to_json(u.output);
    }
    v
}

pub fn events(plan: &Plan) -> Vec<SseEvent> {
    let mut start = json!({
        "id": plan.id,
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null
    });
    if let Some(u) = &plan.usage {
        start["usage"] = u.to_json(1);
    }
    let mut ev = vec![SseEvent::named("message_start", &json!({"type": "message_start", "message": start}), false)];
    let delta = |index: usize, delta: Value| {
        let v = json!({"type": "content_block_delta", "index": index, "delta": delta});
        SseEvent::named("content_block_delta", &v, true)
    };
    let block_start = |index: usize, block: Value| {
        let v = json!({"type": "content_block_start", "index": index, "content_block": block});
        SseEvent::named("content_block_start", &v, false)
    };
    let block_stop = |index: usize| {
        let v = json!({"type": "content_block_stop", "index": index});
        SseEvent::named("content_block_stop", &v, false)
    };
    let ping = SseEvent::named("ping", &json!({"type": "ping"}), false);
    let mut index = 0;
    if let Some(t) = &plan.thinking {
        ev.push(block_start(index, json!({"type": "thinking", "thinking": ""})));
        ev.push(ping.clone());
        for piece in &t.pieces {
            ev.push(delta(index, json!({"type": "thinking_delta", "thinking": piece})));
        }
        ev.push(delta(index, json!({"type": "signature_delta", "signature": t.signature})));
        ev.push(block_stop(index));
        index += 1;
    }
    if has_text_block(plan) {
        ev.push(block_start(index, json!({"type": "text", "text": ""})));
        if index == 0 {
            ev.push(ping.clone());
        }
        for piece in &plan.text.pieces {
            ev.push(delta(index, json!({"type": "text_delta", "text": piece})));
        }
        ev.push(block_stop(index));
        index += 1;
    }
    if let Some(t) = &plan.tool {
        ev.push(block_start(index, tool_block(t, json!({}))));
        if index == 0 {
            ev.push(ping);
        }
        let fragments = std::iter::once(String::new()).chain(reply::fragments(&t.input_json));
        for piece in fragments {
            ev.push(delta(index, json!({"type": "input_json_delta", "partial_json": piece})));
        }
        ev.push(block_stop(index));
    }
    let mut message_delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": plan.stop_reason, "stop_sequence": plan.stop_sequence}
    });
    if let Some(u) = &plan.usage {
        message_delta["usage"] = json!({"output_tokens": u.output});
    }
    ev.push(SseEvent::named("message_delta", &message_delta, false));
    ev.push(SseEvent::named("message_stop", &json!({"type": "message_stop"}), false));
    ev
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Request;
    use crate::vendor::{respond, Api};

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/v1/messages".into(),
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            ..Request::default()
        }
    }

    const AUTH: &[(&str, &str)] = &[("x-api-key", "k"), ("anthropic-version", "2023-06-01")];

    fn plan_for(body: Value) -> Plan {
        let req = request(AUTH);
        let call = Call::new(&req, body, 2, None);
        let faults = crate::fault::collect(&call.model, None, None).unwrap();
        plan(&call, &faults)
    }

    fn parse(e: &SseEvent) -> (String, Value) {
        let (head, data) = e.text.trim_end().split_once("\ndata: ").unwrap();
        (head.strip_prefix("event: ").unwrap().to_string(), serde_json::from_str(data).unwrap())
    }

    fn tools() -> Value {
        json!([
            {"name": "get_weather", "description": "d", "input_schema": {"type": "object",
              "properties": {"location": {"type": "string"}}, "required": ["location"]}},
            {"name": "other", "input_schema": {"type": "object", "properties": {}}}
        ])
    }

    #[test]
    fn message_shape() {
        let p = plan_for(json!({"model": "claude-x+cached=5+cache_write=7", "max_tokens": 100, "system": "be brief",
            "messages": [{"role": "user", "content": "hello"}]}));
        let v = message(&p);
        assert!(v["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(v["model"], "claude-x+cached=5+cache_write=7");
        let expected = json!({
            "id": v["id"], "type": "message", "role": "assistant", "model": "claude-x+cached=5+cache_write=7",
            "content": [{"type": "text", "text": "Hello from claude-x: this is reply number 2."}],
            "stop_reason": "end_turn", "stop_sequence": null,
            // "be brief" + "user" + "hello" = 17 chars = 5 tokens.
            "usage": {"input_tokens": 5, "output_tokens": 8, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 5,
                "cache_creation": {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 0}, "service_tier": "standard"}
        });
        assert_eq!(v, expected);
    }

    #[test]
    fn max_tokens_and_stop_sequences() {
        let v = message(&plan_for(json!({"model": "c", "max_tokens": 2, "messages": []})));
        assert_eq!((v["stop_reason"].clone(), v["usage"]["output_tokens"].clone()), (json!("max_tokens"), json!(2)));
        let v =
            message(&plan_for(json!({"model": "c", "max_tokens": 50, "messages": [], "stop_sequences": ["reply"]})));
        assert_eq!(v["stop_reason"], "stop_sequence");
        assert_eq!(v["stop_sequence"], "reply");
        assert_eq!(v["content"][0]["text"], "Hello from c: this is ");
    }

    #[test]
    fn refusal_and_no_usage() {
        let v = message(&plan_for(
            json!({"model": "c+content_filter+no_usage", "max_tokens": 50, "messages": [], "tools": tools()}),
        ));
        assert_eq!(v["stop_reason"], "refusal");
        assert_eq!(v["content"].as_array().unwrap().len(), 1);
        assert!(v.get("usage").is_none());
        let p = plan_for(json!({"model": "c+no_usage", "max_tokens": 50, "messages": []}));
        let ev = events(&p);
        assert!(parse(&ev[0]).1["message"].get("usage").is_none());
        assert!(parse(&ev[ev.len() - 2]).1.get("usage").is_none());
    }

    #[test]
    fn tool_use_json() {
        let v = message(&plan_for(json!({"model": "c+words=3", "max_tokens": 50, "messages": [], "tools": tools()})));
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(v["content"][0], json!({"type": "text", "text": "Hello from c:"}));
        let tool = &v["content"][1];
        assert!(tool["id"].as_str().unwrap().starts_with("toolu_"));
        assert_eq!((tool["type"].clone(), tool["name"].clone()), (json!("tool_use"), json!("get_weather")));
        assert_eq!(tool["input"], json!({"location": "mock"}));
        assert_eq!(v["usage"]["output_tokens"], 3 + tokens::tool_tokens(r#"{"location": "mock"}"#));
        let named = json!({"type": "tool", "name": "other"});
        let v = message(&plan_for(
            json!({"model": "c+words=0", "max_tokens": 50, "messages": [], "tools": tools(), "tool_choice": named}),
        ));
        assert_eq!(v["content"].as_array().unwrap().len(), 1);
        assert_eq!(v["content"][0]["name"], "other");
        let v = message(&plan_for(
            json!({"model": "c", "max_tokens": 50, "messages": [], "tools": tools(), "tool_choice": {"type": "none"}}),
        ));
        assert_eq!(v["stop_reason"], "end_turn");
    }

    #[test]
    fn stream_event_order_with_tool() {
        let p = plan_for(json!({"model": "c+words=2", "max_tokens": 50, "messages": [], "tools": tools()}));
        let ev: Vec<(String, Value)> = events(&p).iter().map(parse).collect();
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        let n_json = 1 + reply::fragments(r#"{"location": "mock"}"#).len();
        let mut expected = vec![
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
        ];
        expected.extend(std::iter::repeat_n("content_block_delta", n_json));
        expected.extend(["content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(names, expected);
        for (name, v) in &ev {
            assert_eq!(v["type"], name.as_str());
        }
        let start = &ev[0].1["message"];
        assert_eq!(start["content"], json!([]));
        assert_eq!(start["stop_reason"], Value::Null);
        assert_eq!(start["usage"]["output_tokens"], 1);
        assert_eq!(start["usage"]["cache_read_input_tokens"], 0);
        assert_eq!(
            ev[1].1,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        );
        assert_eq!(ev[3].1["delta"], json!({"type": "text_delta", "text": "Hello"}));
        assert_eq!(ev[4].1["delta"], json!({"type": "text_delta", "text": " from"}));
        let tool_start = &ev[6].1;
        assert_eq!(tool_start["index"], 1);
        assert_eq!(tool_start["content_block"]["input"], json!({}));
        let json_text: String = ev[7..7 + n_json]
            .iter()
            .map(|(_, v)| {
                assert_eq!(v["delta"]["type"], "input_json_delta");
                v["delta"]["partial_json"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(json_text, r#"{"location": "mock"}"#);
        let md = &ev[ev.len() - 2].1;
        assert_eq!(md["delta"], json!({"stop_reason": "tool_use", "stop_sequence": null}));
        assert_eq!(md["usage"], json!({"output_tokens": 2 + 5}));
    }

    #[test]
    fn auth_and_validation() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Value, u16, &'a str);
        let cases: &[Case] = &[
            (&[("anthropic-version", "v")], json!({}), 401, "authentication_error"),
            (&[("x-api-key", "k")], json!({}), 400, "invalid_request_error"),
            (AUTH, json!({"model": "c", "messages": []}), 400, "invalid_request_error"),
        ];
        for (headers, body, status, kind) in cases {
            let req = request(headers);
            let call = Call::new(&req, body.clone(), 1, None);
            let resp = respond(Api::Anthropic, &call, messages);
            assert_eq!(resp.status, *status);
            let v = resp.body_json().unwrap();
            assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some(*kind)));
            assert_eq!(v["request_id"], call.request_id.as_str());
        }
        let req = request(&[("anthropic-version", "v")]);
        let call = Call::new(&req, json!({}), 1, None);
        let resp = respond(Api::Anthropic, &call, messages).body_json().unwrap();
        assert_eq!(resp["error"]["message"], "x-api-key header is required");
        let req = request(AUTH);
        let call = Call::new(&req, json!({"model": "c", "messages": []}), 1, None);
        let resp = respond(Api::Anthropic, &call, messages).body_json().unwrap();
        assert_eq!(resp["error"]["message"], "max_tokens: Field required");
    }

    #[test]
    fn error_faults() {
        let req = request(AUTH);
        let call = Call::new(&req, json!({"model": "c"}), 1, None);
        let body = |spec: &str| {
            let r = fault_error(&Faults::parse(spec, ',').unwrap(), &call).unwrap();
            (r.status, r.body_json().unwrap()["error"].clone())
        };
        let (s, e) = body("quota");
        assert_eq!((s, e["type"].as_str()), (400, Some("invalid_request_error")));
        assert!(e["message"].as_str().unwrap().starts_with("Your credit balance is too low"));
        assert_eq!(body("context_length").1["message"], "prompt is too long: 250000 tokens > 200000 maximum");
        for (code, kind) in [
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (529, "overloaded_error"),
            (503, "api_error"),
        ] {
            let (s, e) = body(&format!("status={code}"));
            assert_eq!((s, e["type"].as_str()), (code, Some(kind)));
        }
        assert!(fault_error(&Faults::parse("content_filter", ',').unwrap(), &call).is_none());
    }

    fn thinking_body(display: Option<&str>, stream: bool) -> Value {
        let mut thinking = json!({"type": "enabled", "budget_tokens": 31999});
        if let Some(d) = display {
            thinking["display"] = json!(d);
        }
        json!({"model": "claude-t", "max_tokens": 32000, "stream": stream, "thinking": thinking,
            "messages": [{"role": "user", "content": "hi"}]})
    }

    fn send(body: &Value, cache: Option<&crate::prompt_cache::PromptCache>) -> Response {
        let req = request(AUTH);
        let mut call = Call::new(&req, body.clone(), 1, None);
        call.prompt_cache = cache;
        respond(Api::Anthropic, &call, messages)
    }

    #[test]
    fn thinking_block_comes_first_with_a_signature() {
        let v = send(&thinking_body(None, false), None).body_json().unwrap();
        let block = &v["content"][0];
        let text = "Reasoning about reply number 1 for claude-t before answering.";
        assert_eq!((block["type"].as_str(), block["thinking"].as_str()), (Some("thinking"), Some(text)));
        assert!(thinking::verify(block["signature"].as_str().unwrap(), text));
        assert_eq!(v["content"][1]["type"], "text");
        assert_eq!(v["usage"]["output_tokens"], 9 + 8, "thinking tokens are billed as output");
        let omitted = send(&thinking_body(Some("omitted"), false), None).body_json().unwrap();
        assert_eq!(omitted["content"][0]["thinking"], "");
        assert!(thinking::verify(omitted["content"][0]["signature"].as_str().unwrap(), ""));
        assert_eq!(omitted["usage"]["output_tokens"], 9 + 8, "omitted thinking is billed in full");
    }

    #[test]
    fn thinking_stream_events() {
        for display in [None, Some("omitted")] {
            let p = plan_for(thinking_body(display, true));
            let ev: Vec<(String, Value)> = events(&p).iter().map(parse).collect();
            assert_eq!(
                ev[1].1,
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})
            );
            assert_eq!(ev[2].0, "ping");
            let stop = ev.iter().position(|(n, v)| n == "content_block_stop" && v["index"] == 0).unwrap();
            let deltas: Vec<&Value> = ev[3..stop].iter().map(|(_, v)| &v["delta"]).collect();
            let (signature, thoughts) = deltas.split_last().unwrap();
            assert_eq!(signature["type"], "signature_delta");
            let shown: String = thoughts
                .iter()
                .map(|d| {
                    assert_eq!(d["type"], "thinking_delta");
                    d["thinking"].as_str().unwrap()
                })
                .collect();
            assert_eq!(shown.is_empty(), display.is_some());
            assert!(thinking::verify(signature["signature"].as_str().unwrap(), &shown));
            assert_eq!(ev[stop + 1].1["content_block"], json!({"type": "text", "text": ""}));
            assert_eq!(ev[stop + 1].1["index"], 1);
        }
    }

    #[test]
    fn replayed_thinking_is_verified() {
        let first = send(&thinking_body(Some("omitted"), false), None).body_json().unwrap();
        let tool_turn = |assistant: Value| {
            let mut b = thinking_body(Some("omitted"), false);
            b["messages"] = json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": assistant},
                {"role": "user", "content": "more"}
            ]);
            send(&b, None)
        };
        assert_eq!(tool_turn(first["content"].clone()).status, 200);
        let mut forged = first["content"].clone();
        forged[0]["signature"] = json!(thinking::sign("something else", "something else"));
        let resp = tool_turn(forged);
        assert_eq!(resp.status, 400);
        let e = resp.body_json().unwrap()["error"].clone();
        assert_eq!(e["type"], "invalid_request_error");
        assert_eq!(e["message"], "messages.1.content.0: Invalid `signature` in `thinking` block");
        let mut b = thinking_body(None, false);
        b["max_tokens"] = json!(1000);
        assert_eq!(send(&b, None).status, 400, "budget_tokens must be below max_tokens");
    }

    #[test]
    fn tool_result_gets_a_text_answer() {
        let body = json!({"model": "c", "max_tokens": 50, "tools": tools(), "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}
        ]});
        let v = message(&plan_for(body.clone()));
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(v["content"].as_array().unwrap().len(), 1);
        // An agent's later turns (a subagent's report, a reminder) get text too: one tool call per conversation.
        let mut later = body;
        later["messages"].as_array_mut().unwrap().push(json!({"role": "user", "content": "report: done"}));
        assert_eq!(message(&plan_for(later))["stop_reason"], "end_turn");
    }

    #[test]
    fn cache_control_usage_and_count_tokens_agree() {
        let cache = crate::prompt_cache::PromptCache::default();
        let body = json!({"model": "claude-c", "max_tokens": 50, "metadata": {"user_id": "u"},
            "context_management": {"edits": []}, "unknown_field": true,
            "system": [{"type": "text", "text": "x".repeat(400), "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "y".repeat(200), "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "question"}]}]});
        // System prefix: text(4) + 400 + ephemeral(9) + 1h(2) = 415 chars = 104 tokens; the message
        // adds user(4) + text(4) + 200 + ephemeral(9) = 217 → 632 chars = 158; then text(4) + question(8).
        let total = tokens::prompt_tokens(&body);
        assert_eq!(total, 161);
        let usage = |v: &Value| {
            let u = &v["usage"];
            let n = |k: &str| u[k].as_u64().unwrap();
            let c = |k: &str| u["cache_creation"][k].as_u64().unwrap();
            (
                n("input_tokens"),
                n("cache_read_input_tokens"),
                n("cache_creation_input_tokens"),
                c("ephemeral_5m_input_tokens"),
                c("ephemeral_1h_input_tokens"),
            )
        };
        let first = send(&body, Some(&cache)).body_json().unwrap();
        assert_eq!(usage(&first), (3, 0, 158, 54, 104));
        let second = send(&body, Some(&cache)).body_json().unwrap();
        assert_eq!(usage(&second), (3, 158, 0, 0, 0));
        let req = request(AUTH);
        let call = Call::new(&req, body, 1, None);
        let counted = respond(Api::Anthropic, &call, count_tokens).body_json().unwrap();
        assert_eq!(counted, json!({"input_tokens": total}), "count_tokens = input + cache read + cache write");
    }
}
