//! OpenAI chat request → Anthropic Messages request.
//!
//! Fields with no Anthropic equivalent (seed, penalties, logprobs, logit_bias, OpenAI `metadata`,
//! reasoning_effort, …) are dropped; `n > 1` and content Anthropic cannot take are refused with a 400.
//! `response_format` has no native equivalent: it becomes an instruction appended to `system`.

use super::DEFAULT_VERSION;
use crate::canonical::{ChatRequest, Content, ContentPart, ImageUrl, Message, Role, Tool, ToolChoice};
use crate::config::routes::Deployment;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::providers::{endpoint, headers, UpstreamCall};
use serde_json::{json, Map, Value};

const DEFAULT_MAX_TOKENS: u64 = 4096;
/// Anthropic's temperature range is 0..=1 where OpenAI's is 0..=2; clamping keeps fallback working.
const MAX_TEMPERATURE: f64 = 1.0;
const JSON_OBJECT_INSTRUCTION: &str =
    "Respond with a single valid JSON object and nothing else: no prose before or after it, no code fences.";
const JSON_SCHEMA_INSTRUCTION: &str = "Respond with a single valid JSON object that conforms to the following JSON Schema, and nothing else: no prose before or after it, no code fences.";
/// Extra request fields that mean the same thing to Anthropic and are passed on.
const PASSTHROUGH: [&str; 1] = ["top_k"];

pub(in crate::providers) fn build_chat(
    dep: &Deployment,
    req: &ChatRequest,
    credential: &str,
) -> Result<UpstreamCall, ApiError> {
    let body = translate_request(dep, req)?;
    let version = dep.quirks.anthropic_version.as_deref().unwrap_or(DEFAULT_VERSION);
    Ok(UpstreamCall {
        url: endpoint(&dep.base_url, "/messages"),
        headers: headers(dep, credential, &[("anthropic-version", version)]),
        body: body.to_string().into_bytes(),
    })
}

pub(super) fn translate_request(dep: &Deployment, req: &ChatRequest) -> Result<Value, ApiError> {
    if req.extra.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Err(unsupported(
            "n",
            "This model's provider (Anthropic) returns one choice per request; 'n' must be 1.",
        ));
    }
    let (mut system, turns) = split_turns(req)?;
    if let Some(instruction) = json_instruction(req) {
        system.push(json!({"type": "text", "text": instruction}));
    }

    let mut body = Map::new();
    body.insert("model".into(), Value::from(dep.model.as_str()));
    let asked = req.max_output_tokens().or(dep.default_max_tokens.map(u64::from)).unwrap_or(DEFAULT_MAX_TOKENS);
    let max_tokens = dep.within_max_output(asked);
    body.insert("max_tokens".into(), Value::from(max_tokens));
    if !system.is_empty() {
        body.insert("system".into(), collapse_system(system));
    }
    let messages = turns.into_iter().map(|(role, blocks)| json!({"role": role, "content": collapse(blocks)})).collect();
    body.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = req.tools.as_ref().filter(|t| !t.is_empty()) {
        body.insert("tools".into(), Value::Array(translate_tools(tools)?));
        if let Some(choice) = tool_choice(req)? {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(stop) = &req.stop {
        body.insert("stop_sequences".into(), Value::from(stop.to_vec()));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), Value::from(t.clamp(0.0, MAX_TEMPERATURE)));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".into(), Value::from(p));
    }
    if let Some(user) = &req.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    if req.is_stream() {
        body.insert("stream".into(), Value::Bool(true));
    }
    for key in PASSTHROUGH {
        if let Some(v) = req.extra.get(key).filter(|v| !v.is_null()) {
            body.insert(key.into(), v.clone());
        }
    }
    Ok(Value::Object(body))
}

/// The system blocks, and the conversation as alternating user/assistant turns.
#[allow(clippy::type_complexity)]
fn split_turns(req: &ChatRequest) -> Result<(Vec<Value>, Vec<(&'static str, Vec<Value>)>), ApiError> {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        let path = format!("messages[{i}]");
        match m.role {
            Role::System | Role::Developer => system.extend(content_blocks(m.content.as_ref(), &path)?),
            Role::User => push_turn(&mut turns, "user", content_blocks(m.content.as_ref(), &path)?),
            Role::Assistant => {
                let mut blocks = content_blocks(m.content.as_ref(), &path)?;
                blocks.extend(tool_use_blocks(m, &path)?);
                push_turn(&mut turns, "assistant", blocks);
            }
            Role::Tool => push_turn(&mut turns, "user", vec![tool_result(m, &path)?]),
            Role::Function => {
                return Err(unsupported(
                    &format!("{path}.role"),
                    "The deprecated 'function' role is not supported by this model's provider (Anthropic); use 'tool'.",
                ))
            }
        }
    }
    Ok((system, turns))
}

/// OpenAI function tools as Anthropic tools; any other tool type is refused.
fn translate_tools(tools: &[Tool]) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let Some(f) = tool.function.as_ref().filter(|_| tool.kind == "function") else {
            return Err(unsupported(
                &format!("tools[{i}].type"),
                &format!("Tool type '{}' is not supported by this model's provider (Anthropic).", tool.kind),
            ));
        };
        let schema = f.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        let mut t = json!({"name": f.name, "input_schema": schema});
        if let Some(d) = &f.description {
            t["description"] = Value::from(d.as_str());
        }
        copy_cache_control(&tool.extra, &mut t);
        out.push(t);
    }
    Ok(out)
}

/// Appends a turn, merging it into the previous one of the same role (Anthropic needs alternation);
/// in a user turn, tool results must come before any other content.
fn push_turn(turns: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some((last, existing)) if *last == role => existing.extend(blocks),
        _ => turns.push((role, blocks)),
    }
    if role == "user" {
        if let Some((_, blocks)) = turns.last_mut() {
            blocks.sort_by_key(|b| b["type"] != "tool_result");
        }
    }
}

fn content_blocks(content: Option<&Content>, path: &str) -> Result<Vec<Value>, ApiError> {
    match content {
        None => Ok(Vec::new()),
        Some(Content::Text(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Content::Text(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(Content::Parts(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                if let Some(block) = part_block(part, &format!("{path}.content[{j}]"))? {
                    out.push(block);
                }
            }
            Ok(out)
        }
    }
}

fn part_block(part: &ContentPart, path: &str) -> Result<Option<Value>, ApiError> {
    let mut block = match part.kind.as_str() {
        "text" => match part.text.as_deref() {
            Some(t) if !t.is_empty() => json!({"type": "text", "text": t}),
            _ => return Ok(None),
        },
        // An assistant turn replayed from an earlier structured-output refusal.
        "refusal" => match part.extra.get("refusal").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => json!({"type": "text", "text": t}),
            _ => return Ok(None),
        },
        "image_url" => match &part.image_url {
            Some(image) => image_block(image, &format!("{path}.image_url.url"))?,
            None => return Ok(None),
        },
        other => {
            return Err(unsupported(
                &format!("{path}.type"),
                &format!("Content of type '{other}' is not supported by this model's provider (Anthropic)."),
            ))
        }
    };
    copy_cache_control(&part.extra, &mut block);
    Ok(Some(block))
}

/// `data:` URLs become base64 sources, http(s) URLs url sources.
fn image_block(image: &ImageUrl, path: &str) -> Result<Value, ApiError> {
    let url = image.url.as_str();
    if let Some(rest) = url.strip_prefix("data:") {
        let parsed = rest.split_once(',').and_then(|(meta, data)| {
            let media_type = meta.strip_suffix(";base64")?;
            let media_type = media_type.split(';').next().filter(|m| !m.is_empty())?;
            Some((media_type, data))
        });
        let Some((media_type, data)) = parsed else {
            return Err(unsupported(path, "Image data URLs must be base64 encoded: data:<media type>;base64,<data>."));
        };
        return Ok(json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    Err(unsupported(path, "Image URLs must be http(s) URLs or base64 data URLs."))
}

fn tool_use_blocks(m: &Message, path: &str) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    for (j, call) in m.tool_calls.iter().flatten().enumerate() {
        let call_path = format!("{path}.tool_calls[{j}]");
        let Some(f) = call.function.as_ref().filter(|_| call.kind == "function") else {
            return Err(unsupported(
                &format!("{call_path}.type"),
                &format!("Tool calls of type '{}' are not supported by this model's provider (Anthropic).", call.kind),
            ));
        };
        let input = if f.arguments.trim().is_empty() {
            json!({})
        } else {
            match serde_json::from_str::<Value>(&f.arguments) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err(ApiError::invalid_request(
                        codes::INVALID_VALUE,
                        format!("'{call_path}.function.arguments' must be a JSON object encoded as a string."),
                    )
                    .with_param(&format!("{call_path}.function.arguments")))
                }
            }
        };
        out.push(json!({"type": "tool_use", "id": call.id, "name": f.name, "input": input}));
    }
    Ok(out)
}

fn tool_result(m: &Message, path: &str) -> Result<Value, ApiError> {
    let mut block = json!({"type": "tool_result", "tool_use_id": m.tool_call_id.clone().unwrap_or_default()});
    match &m.content {
        Some(Content::Text(s)) if !s.is_empty() => block["content"] = Value::from(s.as_str()),
        Some(Content::Parts(_)) => {
            let blocks = content_blocks(m.content.as_ref(), path)?;
            if !blocks.is_empty() {
                block["content"] = Value::Array(blocks);
            }
        }
        _ => {}
    }
    Ok(block)
}

fn tool_choice(req: &ChatRequest) -> Result<Option<Value>, ApiError> {
    let serial = req.parallel_tool_calls == Some(false);
    let mut choice = match &req.tool_choice {
        None if serial => json!({"type": "auto"}),
        None => return Ok(None),
        Some(ToolChoice::None) => return Ok(Some(json!({"type": "none"}))),
        Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Function(name)) => json!({"type": "tool", "name": name}),
        Some(ToolChoice::Other(_)) => {
            return Err(unsupported(
                "tool_choice",
                "This form of 'tool_choice' is not supported by this model's provider (Anthropic).",
            ))
        }
    };
    if serial {
        choice["disable_parallel_tool_use"] = Value::Bool(true);
    }
    Ok(Some(choice))
}

fn json_instruction(req: &ChatRequest) -> Option<String> {
    let format = req.response_format.as_ref()?;
    match format.kind.as_str() {
        "json_object" => Some(JSON_OBJECT_INSTRUCTION.to_string()),
        "json_schema" => match format.json_schema.as_ref().and_then(|s| s.schema.as_ref()) {
            Some(schema) => Some(format!("{JSON_SCHEMA_INSTRUCTION}\n{schema}")),
            None => Some(JSON_OBJECT_INSTRUCTION.to_string()),
        },
        _ => None,
    }
}

fn is_plain_text(block: &Value) -> bool {
    block.as_object().is_some_and(|o| o.len() == 2 && o["type"] == "text" && o.contains_key("text"))
}

/// A lone plain text block is sent as a string, the form Anthropic's own examples use.
fn collapse(blocks: Vec<Value>) -> Value {
    match blocks.as_slice() {
        [only] if is_plain_text(only) => only["text"].clone(),
        _ => Value::Array(blocks),
    }
}

/// System text joins into one string unless a block carries `cache_control`.
fn collapse_system(blocks: Vec<Value>) -> Value {
    if !blocks.iter().all(is_plain_text) {
        return Value::Array(blocks);
    }
    let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    Value::from(texts.join("\n\n"))
}

fn copy_cache_control(extra: &Map<String, Value>, block: &mut Value) {
    if let Some(cc) = extra.get("cache_control").filter(|v| !v.is_null()) {
        block["cache_control"] = cc.clone();
    }
}

fn unsupported(param: &str, message: &str) -> ApiError {
    ApiError::invalid_request(codes::UNSUPPORTED_PARAMETER, message).with_param(param)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing::deployment;

    fn translate(dep: &Deployment, v: &Value) -> Result<Value, ApiError> {
        translate_request(dep, &ChatRequest::parse(v.to_string().as_bytes()).unwrap())
    }

    fn golden(input: &str, expected: &str) {
        let dep = deployment("anthropic");
        let req = ChatRequest::parse(input.as_bytes()).unwrap();
        let got = translate_request(&dep, &req).unwrap();
        let want: Value = serde_json::from_str(expected).unwrap();
        assert_eq!(got, want, "got:\n{}", serde_json::to_string_pretty(&got).unwrap());
    }

    #[test]
    fn golden_simple_request() {
        golden(fixture!("anthropic_request_simple.json"), fixture!("anthropic_request_simple.upstream.json"));
    }

    #[test]
    fn golden_full_conversation() {
        golden(
            fixture!("anthropic_request_conversation.json"),
            fixture!("anthropic_request_conversation.upstream.json"),
        );
    }

    #[test]
    fn golden_json_schema_and_cache_control() {
        golden(fixture!("anthropic_request_json_schema.json"), fixture!("anthropic_request_json_schema.upstream.json"));
    }

    #[test]
    fn call_has_url_headers_and_version() {
        let mut dep = deployment("anthropic");
        let req = ChatRequest::parse(fixture!("anthropic_request_simple.json").as_bytes()).unwrap();
        let call = build_chat(&dep, &req, "sk-ant-key").unwrap();
        assert_eq!(call.url, "https://api.anthropic.com/v1/messages");
        assert!(call.headers.contains(&("x-api-key".into(), "sk-ant-key".into())));
        assert!(call.headers.contains(&("anthropic-version".into(), "2023-06-01".into())));
        dep.quirks.anthropic_version = Some("2024-10-22".into());
        let call = build_chat(&dep, &req, "k").unwrap();
        assert!(call.headers.contains(&("anthropic-version".into(), "2024-10-22".into())));
    }

    #[test]
    fn max_tokens_precedence() {
        let mut dep = deployment("anthropic");
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let with = |extra: Value| {
            let mut v = json!({"model": "m", "messages": msgs});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            v
        };
        let max = |dep: &Deployment, extra: Value| translate(dep, &with(extra)).unwrap()["max_tokens"].clone();
        assert_eq!(max(&dep, json!({})), 4096);
        dep.default_max_tokens = Some(1000);
        assert_eq!(max(&dep, json!({})), 1000);
        assert_eq!(max(&dep, json!({"max_tokens": 7})), 7);
        assert_eq!(max(&dep, json!({"max_tokens": 7, "max_completion_tokens": 9})), 9);
        dep.capabilities.max_output = Some(8);
        assert_eq!(max(&dep, json!({"max_tokens": 32000})), 8, "never above the declared max_output");
        assert_eq!(max(&dep, json!({"max_tokens": 7})), 7);
        assert_eq!(max(&dep, json!({})), 8);
    }

    #[test]
    fn tool_choice_mapping() {
        let dep = deployment("anthropic");
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                          "tools": [{"type": "function", "function": {"name": "f"}}]});
        let choice = |tc: Option<Value>, parallel: Option<bool>| {
            let mut v = base.clone();
            if let Some(tc) = tc {
                v["tool_choice"] = tc;
            }
            if let Some(p) = parallel {
                v["parallel_tool_calls"] = Value::Bool(p);
            }
            translate(&dep, &v).unwrap().get("tool_choice").cloned()
        };
        assert_eq!(choice(None, None), None);
        assert_eq!(choice(None, Some(true)), None);
        assert_eq!(choice(None, Some(false)), Some(json!({"type": "auto", "disable_parallel_tool_use": true})));
        assert_eq!(choice(Some(json!("none")), Some(false)), Some(json!({"type": "none"})));
        assert_eq!(choice(Some(json!("auto")), None), Some(json!({"type": "auto"})));
        assert_eq!(choice(Some(json!("required")), None), Some(json!({"type": "any"})));
        assert_eq!(
            choice(Some(json!({"type": "function", "function": {"name": "f"}})), Some(false)),
            Some(json!({"type": "tool", "name": "f", "disable_parallel_tool_use": true}))
        );
        let tools = translate(&dep, &base).unwrap()["tools"].clone();
        assert_eq!(tools, json!([{"name": "f", "input_schema": {"type": "object", "properties": {}}}]));
    }

    #[test]
    fn refusals_with_precise_params() {
        let dep = deployment("anthropic");
        let cases = [
            (json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "x"}]}), "n"),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}]}),
                "messages[0].content[0].image_url.url",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/svg+xml,<svg/>"}}]}]}),
                "messages[0].content[0].image_url.url",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"},
                    {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}),
                "messages[1].tool_calls[0].function.arguments",
            ),
            (
                json!({"model": "m", "messages": [{"role": "function", "name": "f", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "custom", "custom": {"name": "g"}}]}),
                "tools[0].type",
            ),
        ];
        for (body, param) in cases {
            let e = translate(&dep, &body).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{body}: {}", e.message);
        }
    }

    #[test]
    fn tool_results_lead_a_merged_user_turn() {
        let v = translate(
            &deployment("anthropic"),
            &json!({"model": "m", "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "user", "content": "and hurry"},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "thanks"}
            ]}),
        )
        .unwrap();
        let want = json!([
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "sunny"},
                {"type": "text", "text": "and hurry"},
                {"type": "text", "text": "thanks"}
            ]}
        ]);
        assert_eq!(v["messages"], want);
    }

    #[test]
    fn temperature_clamped_and_empty_arguments_become_empty_input() {
        let dep = deployment("anthropic");
        let v = translate(
            &dep,
            &json!({"model": "m", "temperature": 1.6, "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]}
            ]}),
        )
        .unwrap();
        assert_eq!(v["temperature"], 1.0);
        assert_eq!(v["messages"][1]["content"], json!([{"type": "tool_use", "id": "c", "name": "f", "input": {}}]));
    }
}
