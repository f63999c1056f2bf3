//! OpenAI Chat Completions and OpenAI-format errors.

use crate::fault::{Faults, Key};
use crate::http::{Request, Response};
use crate::reply::{self, Finish, Text};
use crate::sse::{Sse, SseEvent};
use crate::tokens;
use crate::vendor::Call;
use serde_json::{json, Value};

pub fn error(status: u16, message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": param, "code": code}});
    Response::json(status, &body)
}

pub fn invalid(message: &str) -> Response {
    error(400, message, "invalid_request_error", None, None)
}

pub fn unparsable_body() -> Response {
    invalid("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)")
}

pub fn not_found(req: &Request) -> Response {
    let message = format!("Invalid URL ({} {})", req.method, req.path);
    error(404, &message, "invalid_request_error", None, None)
}

/// The 401 unless there is `Authorization: Bearer <key>` or Azure-style `api-key: <key>`.
pub fn auth_error(req: &Request) -> Option<Response> {
    let bearer = req
        .header("authorization")
        .and_then(|v| v.get(..7).filter(|p| p.eq_ignore_ascii_case("bearer ")).map(|_| v[7..].trim()))
        .is_some_and(|k| !k.is_empty());
    let api_key = req.header("api-key").is_some_and(|k| !k.trim().is_empty());
    if bearer || api_key {
        return None;
    }
    Some(error(
        401,
        "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.",
        "invalid_request_error",
        None,
        Some("invalid_api_key"),
    ))
}

/// Error faults in precedence order quota, context_length, content_filter, status.
pub fn fault_error(f: &Faults, model: &str) -> Option<Response> {
    let status = f.get(Key::Status).map(|s| s as u16);
    if f.has(Key::Quota) {
        return Some(error(
            status.unwrap_or(429),
            "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
            "insufficient_quota",
            None,
            Some("insufficient_quota"),
        ));
    }
    if f.has(Key::ContextLength) {
        return Some(error(
            status.unwrap_or(400),
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 250000 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            Some("messages"),
            Some("context_length_exceeded"),
        ));
    }
    if f.has(Key::ContentFilter) {
        return Some(error(
            status.unwrap_or(400),
            "Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system.",
            "invalid_request_error",
            None,
            Some("content_policy_violation"),
        ));
    }
    status.map(|s| status_error(s, model))
}

pub fn status_error(status: u16, model: &str) -> Response {
    let (kind, code, message) = match status {
        401 => ("invalid_request_error", Some("invalid_api_key"), "Incorrect API key provided: sk-mock****. You can find your API key at https://platform.openai.com/account/api-keys.".to_string()),
        403 => ("invalid_request_error", Some("permission_denied"), "You are not allowed to sample from this model.".to_string()),
        404 => ("invalid_request_error", Some("model_not_found"), format!("The model `{model}` does not exist or you do not have access to it.")),
        429 => ("requests", Some("rate_limit_exceeded"), format!("Rate limit reached for {model} in organization org-mock on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 1s. Visit https://platform.openai.com/account/rate-limits to learn more.")),
        500 => ("server_error", None, "The server had an error while processing your request. Sorry about that!".to_string()),
        502 => ("server_error", None, "Bad gateway.".to_string()),
        503 => ("server_error", None, "The engine is currently overloaded, please try again later.".to_string()),
        400..=499 => ("invalid_request_error", None, format!("Invalid request (mock-provider fault status={status}).")),
        _ => ("server_error", None, format!("The server had an error processing your request (mock-provider fault status={status}).")),
    };
    error(status, &message, kind, None, code)
}

pub fn stream_error_event() -> SseEvent {
    SseEvent::data(
        &json!({"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": null, "code": null}}),
        false,
    )
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Text(Text),
    Tool { call_id: String, name: String, arguments: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
    pub cached: u64,
    pub reasoning: u64,
}

impl Usage {
    pub fn to_json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
            "prompt_tokens_details": {"cached_tokens": self.cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": self.reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0
            }
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub output: Output,
    pub usage: Option<Usage>,
    /// `reasoning_content` deltas streamed before a text answer (`reasoning_text=N`).
    pub reasoning_text: u64,
}

impl Plan {
    fn finish_reason(&self) -> &'static str {
        match &self.output {
            Output::Tool { .. } => "tool_calls",
            Output::Text(t) if t.finish == Finish::MaxTokens => "length",
            Output::Text(_) => "stop",
        }
    }
}

pub fn chat(call: &Call, f: &Faults) -> Response {
    if call.model.is_empty() {
        return invalid("you must provide a model parameter");
    }
    if !call.body.get("messages").is_some_and(Value::is_array) {
        return error(
            400,
            "Missing required parameter: 'messages'.",
            "invalid_request_error",
            Some("messages"),
            Some("missing_required_parameter"),
        );
    }
    if f.has(Key::StringsOnly) {
        let messages = call.body["messages"].as_array().into_iter().flatten();
        if let Some(i) = messages.into_iter().position(|m| m["content"].is_array()) {
            // DeepSeek's own words (serde's, in its Rust server), without the line and column.
            return error(
                400,
                &format!("Failed to deserialize the JSON body into the target type: messages[{i}]: invalid type: sequence, expected a string"),
                "invalid_request_error",
                None,
                Some("invalid_request_error"),
            );
        }
    }
    let plan = plan(call, f);
    if call.bool_field("stream") {
        let include_usage =
            call.body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
        return Response::sse(Sse {
            events: chunks(&plan, include_usage),
            error_event: stream_error_event(),
            ping_event: SseEvent::raw(": ping\n\n"),
        });
    }
    Response::json(200, &completion(&plan))
}

pub fn plan(call: &Call, f: &Faults) -> Plan {
    let body = &call.body;
    let output = match chosen_tool(body) {
        Some((name, schema)) => {
            Output::Tool { call_id: reply::id("call_"), name, arguments: reply::tool_arguments(schema) }
        }
        None => {
            let count = f.get(Key::Words).map_or(reply::DEFAULT_WORDS, |w| w as usize);
            let max = ["max_completion_tokens", "max_tokens"].iter().find_map(|k| body.get(k).and_then(Value::as_u64));
            let words = reply::words(call.base_model(), call.number, count);
            Output::Text(reply::compose(words, max, &reply::stop_list(body.get("stop"))))
        }
    };
    let emitted = match &output {
        Output::Text(t) => t.tokens(),
        Output::Tool { arguments, .. } => tokens::tool_tokens(arguments),
    };
    let cached = f.get(Key::Cached).unwrap_or(0);
    let reasoning = f.get(Key::Reasoning).unwrap_or(0);
    let usage = (!f.has(Key::NoUsage)).then(|| Usage {
        prompt: tokens::prompt_tokens(body) + cached,
        completion: emitted + reasoning,
        cached,
        reasoning,
    });
    let reasoning_text = f.get(Key::ReasoningText).unwrap_or(0);
    Plan {
        id: reply::id("chatcmpl-"),
        created: reply::unix_ms() / 1000,
        model: call.model.clone(),
        output,
        usage,
        reasoning_text,
    }
}

/// The named tool from `tool_choice`, else the first tool; none for `"none"`, and none once an
/// assistant message in the history holds `tool_calls` (one call per conversation, so an agent's
/// loop ends, as with the Anthropic mock).
fn chosen_tool(body: &Value) -> Option<(String, Option<&Value>)> {
    let tools = body.get("tools")?.as_array().filter(|t| !t.is_empty())?;
    let called = body.get("messages").and_then(Value::as_array).is_some_and(|m| {
        m.iter().any(|m| m["role"] == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()))
    });
    if called {
        return None;
    }
    let choice = body.get("tool_choice");
    if choice.and_then(Value::as_str) == Some("none") {
        return None;
    }
    let messages = body.get("messages").and_then(Value::as_array).into_iter().flatten();
    if messages.clone().any(|m| m.get("role").and_then(Value::as_str) == Some("tool")) {
        return None;
    }
    let function = |t: &'_ Value| t.get("function").cloned().unwrap_or(Value::Null);
    let name_of = |t: &Value| function(t).get("name").and_then(Value::as_str).map(str::to_string);
    let wanted = choice.and_then(|c| c.pointer("/function/name")).and_then(Value::as_str);
    let tool = match wanted {
        Some(name) => match tools.iter().find(|t| name_of(t).as_deref() == Some(name)) {
            Some(t) => t,
            None => return Some((name.to_string(), None)),
        },
        None => &tools[0],
    };
    let name = name_of(tool).unwrap_or_else(|| "tool".to_string());
    Some((name, tool.pointer("/function/parameters")))
}

pub fn completion(plan: &Plan) -> Value {
    let message = match &plan.output {
        Output::Text(t) => json!({"role": "assistant", "content": t.joined(), "refusal": null}),
        Output::Tool { call_id, name, arguments } => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
            "refusal": null
        }),
    };
    let mut v = json!({
        "id": plan.id,
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": plan.finish_reason()}],
        "system_fingerprint": "fp_mock"
    });
    if let Some(u) = &plan.usage {
        v["usage"] = u.to_json();
    }
    v
}

pub fn chunks(plan: &Plan, include_usage: bool) -> Vec<SseEvent> {
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut v = json!({
            "id": plan.id,
            "object": "chat.completion.chunk",
            "created": plan.created,
            "model": plan.model,
            "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        });
        if include_usage {
            v["usage"] = Value::Null;
        }
        v
    };
    let mut events = Vec::new();
    match &plan.output {
        Output::Text(t) => {
            let first = json!({"role": "assistant", "content": "", "refusal": null});
            events.push(SseEvent::data(&chunk(first, None), false));
            for _ in 0..plan.reasoning_text {
                events.push(SseEvent::data(&chunk(json!({"reasoning_content": "Thinking. "}), None), true));
            }
            for piece in &t.pieces {
                events.push(SseEvent::data(&chunk(json!({"content": piece}), None), true));
            }
        }
        Output::Tool { call_id, name, arguments } => {
            let first = json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}],
                "refusal": null
            });
            events.push(SseEvent::data(&chunk(first, None), false));
            for piece in reply::fragments(arguments) {
                let delta = json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]});
                events.push(SseEvent::data(&chunk(delta, None), true));
            }
        }
    }
    events.push(SseEvent::data(&chunk(json!({}), Some(plan.finish_reason())), false));
    if let (true, Some(u)) = (include_usage, &plan.usage) {
        let last = json!({
            "id": plan.id,
            "object": "chat.completion.chunk",
            "created": plan.created,
            "model": plan.model,
            "system_fingerprint": "fp_mock",
            "choices": [],
            "usage": u.to_json()
        });
        events.push(SseEvent::data(&last, false));
    }
    events.push(SseEvent::raw("data: [DONE]\n\n"));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vendor::{respond, Api};

    fn request() -> Request {
        Request {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            headers: vec![("authorization".into(), "Bearer sk".into())],
            ..Request::default()
        }
    }

    #[test]
    fn strings_only_refuses_array_content_as_deepseek_does() {
        let req = request();
        let answer = |content: Value| {
            let call = Call::new(
                &req,
                json!({"model": "m+strings_only", "messages": [
                {"role": "system", "content": "s"}, {"role": "user", "content": content}]}),
                7,
                None,
            );
            let faults = crate::fault::collect(&call.model, None, None).unwrap();
            chat(&call, &faults)
        };
        let refused = answer(json!([{"type": "text", "text": "hi"}]));
        assert_eq!(refused.status, 400);
        let crate::http::Body::Full { bytes, .. } = &refused.body else { panic!("a JSON error") };
        let v: Value = serde_json::from_slice(bytes).unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("messages[1]: invalid type: sequence"), "{v}");
        assert_eq!(answer(json!("hi")).status, 200);
    }

    fn plan_for(body: Value) -> Plan {
        let req = request();
        let call = Call::new(&req, body, 7, None);
        let faults = crate::fault::collect(&call.model, None, None).unwrap();
        plan(&call, &faults)
    }

    fn data(e: &SseEvent) -> Value {
        serde_json::from_str(e.text.strip_prefix("data: ").unwrap().trim_end()).unwrap()
    }

    const WEATHER: &str = r#"[{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location", "unit"]}}},
        {"type": "function", "function": {"name": "other", "parameters": {}}}]"#;

    #[test]
    fn completion_shape() {
        let p = plan_for(
            json!({"model": "gpt-4o-mini+cached=3+reasoning=2", "messages": [{"role": "user", "content": "hi there"}]}),
        );
        let v = completion(&p);
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "gpt-4o-mini+cached=3+reasoning=2");
        assert_eq!(v["system_fingerprint"], "fp_mock");
        assert_eq!(
            v["choices"],
            json!([{"index": 0, "message": {"role": "assistant", "content": "Hello from gpt-4o-mini: this is reply number 7.", "refusal": null}, "logprobs": null, "finish_reason": "stop"}])
        );
        // "user" + "hi there" = 12 chars = 3 tokens, plus 3 cached.
        assert_eq!(
            v["usage"],
            json!({
                "prompt_tokens": 6, "completion_tokens": 10, "total_tokens": 16,
                "prompt_tokens_details": {"cached_tokens": 3, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 2, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
            })
        );
        assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    }

    #[test]
    fn max_tokens_truncates_with_length() {
        let p = plan_for(json!({"model": "m", "messages": [], "max_completion_tokens": 3, "max_tokens": 5}));
        let v = completion(&p);
        assert_eq!(v["choices"][0]["message"]["content"], "Hello from m:");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], 3);
    }

    #[test]
    fn no_usage_omits_usage() {
        let p = plan_for(json!({"model": "m+no_usage", "messages": []}));
        assert!(completion(&p).get("usage").is_none());
        assert!(chunks(&p, true).iter().all(|e| !e.text.contains("prompt_tokens")));
    }

    #[test]
    fn stream_with_usage_order() {
        let p = plan_for(json!({"model": "m+words=3", "messages": []}));
        let ev = chunks(&p, true);
        assert_eq!(ev.len(), 1 + 3 + 1 + 1 + 1);
        let first = data(&ev[0]);
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(first["choices"][0]["delta"], json!({"role": "assistant", "content": "", "refusal": null}));
        assert_eq!(first["usage"], Value::Null);
        assert!(first.as_object().unwrap().contains_key("usage"));
        let words: String =
            ev[1..4].iter().map(|e| data(e)["choices"][0]["delta"]["content"].as_str().unwrap().to_string()).collect();
        assert_eq!(words, "Hello from m:");
        assert!(ev[1..4].iter().all(|e| e.content));
        let fin = data(&ev[4]);
        assert_eq!(fin["choices"][0]["delta"], json!({}));
        assert_eq!(fin["choices"][0]["finish_reason"], "stop");
        let usage = data(&ev[5]);
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 3);
        assert_eq!(ev[6].text, "data: [DONE]\n\n");
        let ids: Vec<Value> = ev[..6].iter().map(|e| data(e)["id"].clone()).collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1]));
    }

    #[test]
    fn stream_without_include_usage_has_no_usage_field() {
        let ev = chunks(&plan_for(json!({"model": "m", "messages": []})), false);
        assert!(ev[..ev.len() - 1].iter().all(|e| data(e).get("usage").is_none()));
        assert_eq!(ev.len(), 1 + 8 + 1 + 1);
    }

    #[test]
    fn tool_call_json_and_stream() {
        let tools: Value = serde_json::from_str(WEATHER).unwrap();
        let p = plan_for(json!({"model": "m", "messages": [], "tools": tools}));
        let v = completion(&p);
        let msg = &v["choices"][0]["message"];
        assert_eq!(msg["content"], Value::Null);
        let call = &msg["tool_calls"][0];
        assert!(call["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        let args = call["function"]["arguments"].as_str().unwrap();
        assert_eq!(args, r#"{"location": "mock", "unit": "celsius"}"#);
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(v["usage"]["completion_tokens"], tokens::tool_tokens(args));

        let ev = chunks(&p, false);
        let first = data(&ev[0])["choices"][0]["delta"]["tool_calls"][0].clone();
        assert_eq!(first["index"], 0);
        assert_eq!(first["id"], call["id"]);
        assert_eq!(first["function"], json!({"name": "get_weather", "arguments": ""}));
        let frags: Vec<String> = ev[1..ev.len() - 2]
            .iter()
            .map(|e| {
                data(e)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().to_string()
            })
            .collect();
        assert!(frags.len() >= 3);
        assert_eq!(frags.concat(), args);
        assert_eq!(data(&ev[ev.len() - 2])["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn one_tool_call_per_conversation() {
        let tools: Value = serde_json::from_str(WEATHER).unwrap();
        let history = json!([{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]);
        let p = plan_for(json!({"model": "m", "messages": history, "tools": tools}));
        assert!(matches!(p.output, Output::Text(_)));
    }

    #[test]
    fn tool_choice_names_and_none() {
        let tools: Value = serde_json::from_str(WEATHER).unwrap();
        let named = json!({"type": "function", "function": {"name": "other"}});
        let p = plan_for(json!({"model": "m", "messages": [], "tools": tools, "tool_choice": named}));
        assert!(matches!(&p.output, Output::Tool { name, arguments, .. } if name == "other" && arguments == "{}"));
        let p = plan_for(json!({"model": "m", "messages": [], "tools": tools, "tool_choice": "none"}));
        assert!(matches!(p.output, Output::Text(_)));
    }

    #[test]
    fn error_shapes() {
        let v = fault_error(&Faults::parse("quota", ',').unwrap(), "m").unwrap();
        assert_eq!(v.status, 429);
        let body = v.body_json().unwrap();
        assert_eq!(body["error"]["type"], "insufficient_quota");
        assert_eq!(body["error"]["code"], "insufficient_quota");
        assert_eq!(body["error"]["param"], Value::Null);
        let v = fault_error(&Faults::parse("context_length", ',').unwrap(), "m").unwrap();
        assert_eq!(
            (v.status, v.body_json().unwrap()["error"]["code"].clone()),
            (400, json!("context_length_exceeded"))
        );
        let v = fault_error(&Faults::parse("content_filter", ',').unwrap(), "m").unwrap();
        assert_eq!(v.body_json().unwrap()["error"]["code"], "content_policy_violation");
        let v = status_error(429, "m").body_json().unwrap();
        assert_eq!(
            (v["error"]["type"].clone(), v["error"]["code"].clone()),
            (json!("requests"), json!("rate_limit_exceeded"))
        );
        assert_eq!(status_error(404, "m").body_json().unwrap()["error"]["code"], "model_not_found");
        assert_eq!(status_error(500, "m").body_json().unwrap()["error"]["type"], "server_error");
        assert_eq!(status_error(418, "m").body_json().unwrap()["error"]["type"], "invalid_request_error");
        assert!(fault_error(&Faults::default(), "m").is_none());
    }

    #[test]
    fn auth_accepts_bearer_or_api_key() {
        let mut req = request();
        assert!(auth_error(&req).is_none());
        req.headers = vec![("authorization".into(), "Bearer ".into())];
        let err = auth_error(&req).unwrap();
        assert_eq!(err.status, 401);
        assert_eq!(err.body_json().unwrap()["error"]["code"], "invalid_api_key");
        req.headers = vec![("api-key".into(), "azure".into())];
        assert!(auth_error(&req).is_none());
    }

    #[test]
    fn validation_errors() {
        let req = request();
        let call = Call::new(&req, json!({"model": "m"}), 1, None);
        let resp = respond(Api::OpenAi, &call, chat);
        assert_eq!(resp.body_json().unwrap()["error"]["param"], "messages");
        let call = Call::new(&req, json!({"messages": []}), 1, None);
        assert_eq!(respond(Api::OpenAi, &call, chat).status, 400);
    }
}
