//! Checks the raw JSON before typed decoding so that errors carry a precise message and `param`.

use super::path::Path;
use crate::http::codes;
use crate::http::error::ApiError;
use serde_json::{Map, Value};

/// The request's keys that are checked, in the order [`request`] destructures them.
const REQUEST_KEYS: [&str; 17] = [
    "model",
    "messages",
    "tools",
    "tool_choice",
    "response_format",
    "temperature",
    "top_p",
    "seed",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stop",
    "stream",
    "parallel_tool_calls",
    "stream_options",
    "user",
    "metadata",
];

const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];

pub(super) fn request(v: &Value) -> Result<(), ApiError> {
    let Some(obj) = v.as_object() else {
        return Err(ApiError::invalid_request(
            codes::INVALID_TYPE,
            format!("The request body must be a JSON object, but got {} instead.", kind(v)),
        ));
    };
    let root = Path::Root;
    let [model, messages, tools, choice, format, rest @ ..] = pick(obj, REQUEST_KEYS);
    let [temperature, top_p, seed, max_tokens, max_completion, n, stops, stream, parallel, options, user, metadata] =
        rest;
    let model = need(model, "model", &root)?;
    if string(model, &root.key("model"))?.is_empty() {
        return Err(invalid_value("model", "'model' must not be empty."));
    }
    let messages_at = root.key("messages");
    let messages = array(need(messages, "messages", &root)?, &messages_at)?;
    if messages.is_empty() {
        return Err(ApiError::invalid_request(
            codes::EMPTY_ARRAY,
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        )
        .with_param("messages"));
    }
    for (i, m) in messages.iter().enumerate() {
        message(m, &messages_at.index(i))?;
    }
    if let Some(tools) = tools {
        let at = root.key("tools");
        for (i, t) in array(tools, &at)?.iter().enumerate() {
            tool(t, &at.index(i))?;
        }
    }
    if let Some(choice) = choice {
        tool_choice(choice)?;
    }
    if let Some(format) = format {
        response_format(format)?;
    }
    for (key, x) in [("temperature", temperature), ("top_p", top_p)] {
        if let Some(x) = x.filter(|x| !x.is_number()) {
            return Err(invalid_type(key, "a number", x));
        }
    }
    if let Some(x) = seed.filter(|x| x.as_i64().is_none()) {
        return Err(invalid_type("seed", "an integer", x));
    }
    for (key, x) in [("max_tokens", max_tokens), ("max_completion_tokens", max_completion), ("n", n)] {
        if let Some(x) = x {
            positive_integer(x, &root.key(key))?;
        }
    }
    if let Some(x) = stops {
        stop(x)?;
    }
    for (key, x) in [("stream", stream), ("parallel_tool_calls", parallel)] {
        if let Some(x) = x {
            boolean(x, &root.key(key))?;
        }
    }
    if let Some(x) = options {
        let at = root.key("stream_options");
        let opts = object(x, &at)?;
        if let Some(inc) = optional(opts, "include_usage") {
            boolean(inc, &at.key("include_usage"))?;
        }
    }
    if let Some(x) = user {
        string(x, &root.key("user"))?;
    }
    if let Some(x) = metadata {
        object(x, &root.key("metadata"))?;
    }
    Ok(())
}

fn message(v: &Value, at: &Path) -> Result<(), ApiError> {
    let obj = object(v, at)?;
    let [role, content_, name, tool_call_id, tool_calls] =
        pick(obj, ["role", "content", "name", "tool_call_id", "tool_calls"]);
    let role_at = at.key("role");
    let role = string(need(role, "role", at)?, &role_at)?;
    if !ROLES.contains(&role) {
        return Err(invalid_value(
            &role_at.render(),
            &format!(
                "Invalid value: '{role}'. Supported values are: 'system', 'developer', 'user', 'assistant', 'tool', and 'function'."
            ),
        ));
    }
    match content_ {
        Some(c) => content(c, &at.key("content"))?,
        None if role != "assistant" => return Err(missing(&at.key("content").render())),
        None => {}
    }
    if let Some(name) = name {
        string(name, &at.key("name"))?;
    }
    if role == "tool" {
        string(need(tool_call_id, "tool_call_id", at)?, &at.key("tool_call_id"))?;
    }
    if let Some(calls) = tool_calls {
        let calls_at = at.key("tool_calls");
        for (i, call) in array(calls, &calls_at)?.iter().enumerate() {
            tool_call(call, &calls_at.index(i))?;
        }
    }
    Ok(())
}

fn content(v: &Value, at: &Path) -> Result<(), ApiError> {
    let parts = match v {
        Value::String(_) => return Ok(()),
        Value::Array(parts) => parts,
        other => return Err(invalid_type(&at.render(), "one of a string or array of objects", other)),
    };
    for (i, part) in parts.iter().enumerate() {
        let p = at.index(i);
        let obj = object(part, &p)?;
        match string(required(obj, "type", &p)?, &p.key("type"))? {
            "text" => {
                string(required(obj, "text", &p)?, &p.key("text"))?;
            }
            "image_url" => {
                let ip = p.key("image_url");
                let image = object(required(obj, "image_url", &p)?, &ip)?;
                string(required(image, "url", &ip)?, &ip.key("url"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn tool_call(v: &Value, at: &Path) -> Result<(), ApiError> {
    let obj = object(v, at)?;
    for key in ["id", "type"] {
        string(required(obj, key, at)?, &at.key(key))?;
    }
    if obj.get("type").and_then(Value::as_str) == Some("function") {
        let fp = at.key("function");
        let f = object(required(obj, "function", at)?, &fp)?;
        for key in ["name", "arguments"] {
            string(required(f, key, &fp)?, &fp.key(key))?;
        }
    }
    Ok(())
}

fn tool(v: &Value, at: &Path) -> Result<(), ApiError> {
    let obj = object(v, at)?;
    if string(required(obj, "type", at)?, &at.key("type"))? != "function" {
        return Ok(());
    }
    let fp = at.key("function");
    let f = object(required(obj, "function", at)?, &fp)?;
    if string(required(f, "name", &fp)?, &fp.key("name"))?.is_empty() {
        return Err(invalid_value(&fp.key("name").render(), "Function names must not be empty."));
    }
    if let Some(d) = optional(f, "description") {
        string(d, &fp.key("description"))?;
    }
    if let Some(p) = optional(f, "parameters") {
        object(p, &fp.key("parameters"))?;
    }
    Ok(())
}

fn tool_choice(v: &Value) -> Result<(), ApiError> {
    match v {
        Value::String(s) if ["none", "auto", "required"].contains(&s.as_str()) => Ok(()),
        Value::String(s) => Err(invalid_value(
            "tool_choice",
            &format!("Invalid value: '{s}'. Supported values are: 'none', 'auto', and 'required'."),
        )),
        Value::Object(obj) => {
            let root = Path::Root;
            let at = root.key("tool_choice");
            let type_ = string(required(obj, "type", &at)?, &at.key("type"))?;
            if type_ == "function" {
                let fp = at.key("function");
                let f = object(required(obj, "function", &at)?, &fp)?;
                string(required(f, "name", &fp)?, &fp.key("name"))?;
            }
            Ok(())
        }
        other => Err(invalid_type("tool_choice", "one of a string or object", other)),
    }
}

fn response_format(v: &Value) -> Result<(), ApiError> {
    let root = Path::Root;
    let at = root.key("response_format");
    let obj = object(v, &at)?;
    let kind = string(required(obj, "type", &at)?, &at.key("type"))?;
    match kind {
        "text" | "json_object" => Ok(()),
        "json_schema" => {
            let jp = at.key("json_schema");
            let js = object(required(obj, "json_schema", &at)?, &jp)?;
            if let Some(schema) = optional(js, "schema") {
                object(schema, &jp.key("schema"))?;
            }
            Ok(())
        }
        other => Err(invalid_value(
            "response_format.type",
            &format!("Invalid value: '{other}'. Supported values are: 'text', 'json_object', and 'json_schema'."),
        )),
    }
}

fn stop(v: &Value) -> Result<(), ApiError> {
    match v {
        Value::String(_) => Ok(()),
        Value::Array(items) => {
            let root = Path::Root;
            let at = root.key("stop");
            for (i, s) in items.iter().enumerate() {
                string(s, &at.index(i))?;
            }
            Ok(())
        }
        other => Err(invalid_type("stop", "one of a string or array of strings", other)),
    }
}

/// The values of `names` in `obj`, `None` where absent or `null`, found in one pass over the object
/// (a lookup per name would hash each one).
fn pick<'a, const N: usize>(obj: &'a Map<String, Value>, names: [&str; N]) -> [Option<&'a Value>; N] {
    let mut found = [None; N];
    for (key, value) in obj.iter().filter(|(_, v)| !v.is_null()) {
        if let Some(i) = names.iter().position(|name| name == key) {
            found[i] = Some(value);
        }
    }
    found
}

/// A value that must be there (picked here, or decoded in `decode`): `key` of the object at `parent`.
pub(super) fn need<T>(value: Option<T>, key: &str, parent: &Path) -> Result<T, ApiError> {
    value.ok_or_else(|| missing(&parent.key(key).render()))
}

fn optional<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// `key` of the object at `parent`, missing when absent or `null`.
fn required<'a>(obj: &'a Map<String, Value>, key: &str, parent: &Path) -> Result<&'a Value, ApiError> {
    optional(obj, key).ok_or_else(|| missing(&parent.key(key).render()))
}

fn string<'a>(v: &'a Value, at: &Path) -> Result<&'a str, ApiError> {
    v.as_str().ok_or_else(|| invalid_type(&at.render(), "a string", v))
}

fn array<'a>(v: &'a Value, at: &Path) -> Result<&'a Vec<Value>, ApiError> {
    v.as_array().ok_or_else(|| invalid_type(&at.render(), "an array", v))
}

fn object<'a>(v: &'a Value, at: &Path) -> Result<&'a Map<String, Value>, ApiError> {
    v.as_object().ok_or_else(|| invalid_type(&at.render(), "an object", v))
}

fn boolean(v: &Value, at: &Path) -> Result<bool, ApiError> {
    v.as_bool().ok_or_else(|| invalid_type(&at.render(), "a boolean", v))
}

fn positive_integer(v: &Value, at: &Path) -> Result<u64, ApiError> {
    if let Some(n) = v.as_u64().filter(|n| *n >= 1) {
        return Ok(n);
    }
    let path = &at.render();
    if v.as_i64().is_some() {
        return Err(ApiError::invalid_request(
            codes::INTEGER_BELOW_MIN_VALUE,
            format!("Invalid '{path}': integer below minimum value. Expected a value >= 1, but got {v} instead."),
        )
        .with_param(path));
    }
    Err(invalid_type(path, "an integer", v))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a decimal",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn missing(path: &str) -> ApiError {
    ApiError::invalid_request(codes::MISSING_REQUIRED_PARAMETER, format!("Missing required parameter: '{path}'."))
        .with_param(path)
}

pub(super) fn invalid_type(path: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::invalid_request(
        codes::INVALID_TYPE,
        format!("Invalid type for '{path}': expected {expected}, but got {} instead.", kind(got)),
    )
    .with_param(path)
}

fn invalid_value(path: &str, message: &str) -> ApiError {
    ApiError::invalid_request(codes::INVALID_VALUE, message).with_param(path)
}
