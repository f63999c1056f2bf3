//! Checks the raw JSON before typed decoding so that errors carry a precise message and `param`.

use crate::http::codes;
use crate::http::error::ApiError;
use serde_json::{Map, Value};

const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];

pub(super) fn request(v: &Value) -> Result<(), ApiError> {
    let Some(obj) = v.as_object() else {
        return Err(ApiError::invalid_request(
            codes::INVALID_TYPE,
            format!("The request body must be a JSON object, but got {} instead.", kind(v)),
        ));
    };
    let model = required(obj, "model", "model")?;
    if string(model, "model")?.is_empty() {
        return Err(invalid_value("model", "'model' must not be empty."));
    }
    let messages = array(required(obj, "messages", "messages")?, "messages")?;
    if messages.is_empty() {
        return Err(ApiError::invalid_request(
            codes::EMPTY_ARRAY,
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        )
        .with_param("messages"));
    }
    for (i, m) in messages.iter().enumerate() {
        message(m, &format!("messages[{i}]"))?;
    }
    if let Some(tools) = optional(obj, "tools") {
        for (i, t) in array(tools, "tools")?.iter().enumerate() {
            tool(t, &format!("tools[{i}]"))?;
        }
    }
    if let Some(choice) = optional(obj, "tool_choice") {
        tool_choice(choice)?;
    }
    if let Some(format) = optional(obj, "response_format") {
        response_format(format)?;
    }
    for key in ["temperature", "top_p"] {
        if let Some(x) = optional(obj, key) {
            if !x.is_number() {
                return Err(invalid_type(key, "a number", x));
            }
        }
    }
    if let Some(x) = optional(obj, "seed") {
        if x.as_i64().is_none() {
            return Err(invalid_type("seed", "an integer", x));
        }
    }
    for key in ["max_tokens", "max_completion_tokens", "n"] {
        if let Some(x) = optional(obj, key) {
            positive_integer(x, key)?;
        }
    }
    if let Some(x) = optional(obj, "stop") {
        stop(x)?;
    }
    for key in ["stream", "parallel_tool_calls"] {
        if let Some(x) = optional(obj, key) {
            boolean(x, key)?;
        }
    }
    if let Some(x) = optional(obj, "stream_options") {
        let opts = object(x, "stream_options")?;
        if let Some(inc) = optional(opts, "include_usage") {
            boolean(inc, "stream_options.include_usage")?;
        }
    }
    if let Some(x) = optional(obj, "user") {
        string(x, "user")?;
    }
    if let Some(x) = optional(obj, "metadata") {
        object(x, "metadata")?;
    }
    Ok(())
}

fn message(v: &Value, path: &str) -> Result<(), ApiError> {
    let obj = object(v, path)?;
    let role_path = format!("{path}.role");
    let role = string(required(obj, "role", &role_path)?, &role_path)?;
    if !ROLES.contains(&role) {
        return Err(invalid_value(
            &role_path,
            &format!(
                "Invalid value: '{role}'. Supported values are: 'system', 'developer', 'user', 'assistant', 'tool', and 'function'."
            ),
        ));
    }
    let content_path = format!("{path}.content");
    match optional(obj, "content") {
        Some(c) => content(c, &content_path)?,
        None if role != "assistant" => return Err(missing(&content_path)),
        None => {}
    }
    if let Some(name) = optional(obj, "name") {
        string(name, &format!("{path}.name"))?;
    }
    if role == "tool" {
        let p = format!("{path}.tool_call_id");
        string(required(obj, "tool_call_id", &p)?, &p)?;
    }
    if let Some(calls) = optional(obj, "tool_calls") {
        let calls_path = format!("{path}.tool_calls");
        for (i, call) in array(calls, &calls_path)?.iter().enumerate() {
            tool_call(call, &format!("{calls_path}[{i}]"))?;
        }
    }
    Ok(())
}

fn content(v: &Value, path: &str) -> Result<(), ApiError> {
    let parts = match v {
        Value::String(_) => return Ok(()),
        Value::Array(parts) => parts,
        other => return Err(invalid_type(path, "one of a string or array of objects", other)),
    };
    for (i, part) in parts.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let obj = object(part, &p)?;
        let type_path = format!("{p}.type");
        match string(required(obj, "type", &type_path)?, &type_path)? {
            "text" => {
                let tp = format!("{p}.text");
                string(required(obj, "text", &tp)?, &tp)?;
            }
            "image_url" => {
                let ip = format!("{p}.image_url");
                let image = object(required(obj, "image_url", &ip)?, &ip)?;
                let up = format!("{ip}.url");
                string(required(image, "url", &up)?, &up)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn tool_call(v: &Value, path: &str) -> Result<(), ApiError> {
    let obj = object(v, path)?;
    for key in ["id", "type"] {
        let p = format!("{path}.{key}");
        string(required(obj, key, &p)?, &p)?;
    }
    if obj.get("type").and_then(Value::as_str) == Some("function") {
        let fp = format!("{path}.function");
        let f = object(required(obj, "function", &fp)?, &fp)?;
        for key in ["name", "arguments"] {
            let p = format!("{fp}.{key}");
            string(required(f, key, &p)?, &p)?;
        }
    }
    Ok(())
}

fn tool(v: &Value, path: &str) -> Result<(), ApiError> {
    let obj = object(v, path)?;
    let tp = format!("{path}.type");
    if string(required(obj, "type", &tp)?, &tp)? != "function" {
        return Ok(());
    }
    let fp = format!("{path}.function");
    let f = object(required(obj, "function", &fp)?, &fp)?;
    let np = format!("{fp}.name");
    if string(required(f, "name", &np)?, &np)?.is_empty() {
        return Err(invalid_value(&np, "Function names must not be empty."));
    }
    if let Some(d) = optional(f, "description") {
        string(d, &format!("{fp}.description"))?;
    }
    if let Some(p) = optional(f, "parameters") {
        object(p, &format!("{fp}.parameters"))?;
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
            let type_ = string(required(obj, "type", "tool_choice.type")?, "tool_choice.type")?;
            if type_ == "function" {
                let f = object(required(obj, "function", "tool_choice.function")?, "tool_choice.function")?;
                string(required(f, "name", "tool_choice.function.name")?, "tool_choice.function.name")?;
            }
            Ok(())
        }
        other => Err(invalid_type("tool_choice", "one of a string or object", other)),
    }
}

fn response_format(v: &Value) -> Result<(), ApiError> {
    let obj = object(v, "response_format")?;
    let kind = string(required(obj, "type", "response_format.type")?, "response_format.type")?;
    match kind {
        "text" | "json_object" => Ok(()),
        "json_schema" => {
            let js =
                object(required(obj, "json_schema", "response_format.json_schema")?, "response_format.json_schema")?;
            if let Some(schema) = optional(js, "schema") {
                object(schema, "response_format.json_schema.schema")?;
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
            for (i, s) in items.iter().enumerate() {
                string(s, &format!("stop[{i}]"))?;
            }
            Ok(())
        }
        other => Err(invalid_type("stop", "one of a string or array of strings", other)),
    }
}

fn optional<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn required<'a>(obj: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a Value, ApiError> {
    optional(obj, key).ok_or_else(|| missing(path))
}

fn string<'a>(v: &'a Value, path: &str) -> Result<&'a str, ApiError> {
    v.as_str().ok_or_else(|| invalid_type(path, "a string", v))
}

fn array<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>, ApiError> {
    v.as_array().ok_or_else(|| invalid_type(path, "an array", v))
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ApiError> {
    v.as_object().ok_or_else(|| invalid_type(path, "an object", v))
}

fn boolean(v: &Value, path: &str) -> Result<bool, ApiError> {
    v.as_bool().ok_or_else(|| invalid_type(path, "a boolean", v))
}

fn positive_integer(v: &Value, path: &str) -> Result<u64, ApiError> {
    if let Some(n) = v.as_u64().filter(|n| *n >= 1) {
        return Ok(n);
    }
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

fn missing(path: &str) -> ApiError {
    ApiError::invalid_request(codes::MISSING_REQUIRED_PARAMETER, format!("Missing required parameter: '{path}'."))
        .with_param(path)
}

fn invalid_type(path: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::invalid_request(
        codes::INVALID_TYPE,
        format!("Invalid type for '{path}': expected {expected}, but got {} instead.", kind(got)),
    )
    .with_param(path)
}

fn invalid_value(path: &str, message: &str) -> ApiError {
    ApiError::invalid_request(codes::INVALID_VALUE, message).with_param(path)
}
