//! Turns a validated request tree into a [`ChatRequest`] by moving its values, key by key.
//!
//! Written by hand: serde's derive for `flatten` and `untagged` copies every field into a buffer
//! of its own before reading it, and compiled to one of the wasm's largest functions
//! (docs/benchmarks.md). `validate` has named most faults already; what is left here are the
//! shapes it does not look into (a custom tool's `function`, an unknown content part's `text`).

use super::path::Path;
use super::validate::{invalid_type, need};
use super::*;

type Decoded<T> = Result<T, ApiError>;

pub(super) fn request(v: Value) -> Decoded<ChatRequest> {
    let root = Path::Root;
    let mut req = ChatRequest::default();
    let (mut model, mut messages) = (None, None);
    for (key, value) in object(v, &root)? {
        let at = root.key(&key);
        match key.as_str() {
            "model" => model = Some(string(value, &at)?),
            "messages" => messages = Some(list(value, &at, message)?),
            "tools" => req.tools = optional(value, |v| list(v, &at, tool))?,
            "tool_choice" => req.tool_choice = optional(value, |v| Ok(ToolChoice::from(v)))?,
            "parallel_tool_calls" => req.parallel_tool_calls = optional(value, |v| boolean(v, &at))?,
            "response_format" => req.response_format = optional(value, |v| response_format(v, &at))?,
            "temperature" => req.temperature = optional(value, |v| number(v, &at))?,
            "top_p" => req.top_p = optional(value, |v| number(v, &at))?,
            "stop" => req.stop = optional(value, |v| stop(v, &at))?,
            "seed" => req.seed = optional(value, |v| integer(v, &at))?,
            "max_tokens" => req.max_tokens = optional(value, |v| count(v, &at))?,
            "max_completion_tokens" => req.max_completion_tokens = optional(value, |v| count(v, &at))?,
            "stream" => req.stream = optional(value, |v| boolean(v, &at))?,
            "stream_options" => req.stream_options = optional(value, |v| stream_options(v, &at))?,
            "user" => req.user = optional(value, |v| string(v, &at))?,
            "metadata" => req.metadata = optional(value, |v| object(v, &at))?,
            _ => {
                req.extra.insert(key, value);
            }
        }
    }
    req.model = need(model, "model", &root)?;
    req.messages = need(messages, "messages", &root)?;
    Ok(req)
}

fn message(v: Value, at: &Path) -> Decoded<Message> {
    let mut m = Message::default();
    let mut role = None;
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "role" => role = Some(self::role(value, &at)?),
            "content" => m.content = optional(value, |v| content(v, &at))?,
            "name" => m.name = optional(value, |v| string(v, &at))?,
            "tool_calls" => m.tool_calls = optional(value, |v| list(v, &at, tool_call))?,
            "tool_call_id" => m.tool_call_id = optional(value, |v| string(v, &at))?,
            _ => {
                m.extra.insert(key, value);
            }
        }
    }
    m.role = need(role, "role", at)?;
    Ok(m)
}

fn role(v: Value, at: &Path) -> Decoded<Role> {
    v.as_str().and_then(super::facts::role_named).ok_or_else(|| invalid_type(&at.render(), "one of the roles", &v))
}

fn content(v: Value, at: &Path) -> Decoded<Content> {
    match v {
        Value::String(s) => Ok(Content::Text(s)),
        Value::Array(_) => Ok(Content::Parts(list(v, at, content_part)?)),
        other => Err(invalid_type(&at.render(), "one of a string or array of objects", &other)),
    }
}

fn content_part(v: Value, at: &Path) -> Decoded<ContentPart> {
    let mut part = ContentPart::default();
    let mut kind = None;
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "type" => kind = Some(string(value, &at)?),
            "text" => part.text = optional(value, |v| string(v, &at))?,
            "image_url" => part.image_url = optional(value, |v| image_url(v, &at))?,
            _ => {
                part.extra.insert(key, value);
            }
        }
    }
    part.kind = need(kind, "type", at)?;
    Ok(part)
}

fn image_url(v: Value, at: &Path) -> Decoded<ImageUrl> {
    let mut image = ImageUrl::default();
    let mut url = None;
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "url" => url = Some(string(value, &at)?),
            "detail" => image.detail = optional(value, |v| string(v, &at))?,
            _ => {
                image.extra.insert(key, value);
            }
        }
    }
    image.url = need(url, "url", at)?;
    Ok(image)
}

fn tool(v: Value, at: &Path) -> Decoded<Tool> {
    let mut tool = Tool::default();
    let mut kind = None;
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "type" => kind = Some(string(value, &at)?),
            "function" => tool.function = optional(value, |v| function_def(v, &at))?,
            _ => {
                tool.extra.insert(key, value);
            }
        }
    }
    tool.kind = need(kind, "type", at)?;
    Ok(tool)
}

fn function_def(v: Value, at: &Path) -> Decoded<FunctionDef> {
    let mut f = FunctionDef::default();
    let mut name = None;
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "name" => name = Some(string(value, &at)?),
            "description" => f.description = optional(value, |v| string(v, &at))?,
            "parameters" => f.parameters = optional(value, Ok)?,
            _ => {
                f.extra.insert(key, value);
            }
        }
    }
    f.name = need(name, "name", at)?;
    Ok(f)
}

fn tool_call(v: Value, at: &Path) -> Decoded<ToolCall> {
    let mut call = ToolCall::default();
    let (mut id, mut kind) = (None, None);
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "id" => id = Some(string(value, &at)?),
            "type" => kind = Some(string(value, &at)?),
            "function" => call.function = optional(value, |v| function_call(v, &at))?,
            _ => {
                call.extra.insert(key, value);
            }
        }
    }
    call.id = need(id, "id", at)?;
    call.kind = need(kind, "type", at)?;
    Ok(call)
}

fn function_call(v: Value, at: &Path) -> Decoded<FunctionCall> {
    let mut f = FunctionCall::default();
    let (mut name, mut arguments) = (None, None);
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "name" => name = Some(string(value, &at)?),
            "arguments" => arguments = Some(string(value, &at)?),
            _ => {
                f.extra.insert(key, value);
            }
        }
    }
    f.name = need(name, "name", at)?;
    f.arguments = need(arguments, "arguments", at)?;
    Ok(f)
}

fn response_format(v: Value, at: &Path) -> Decoded<ResponseFormat> {
    let mut format = ResponseFormat::default();
    let mut kind = None;
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "type" => kind = Some(string(value, &at)?),
            "json_schema" => format.json_schema = optional(value, |v| json_schema(v, &at))?,
            _ => {
                format.extra.insert(key, value);
            }
        }
    }
    format.kind = need(kind, "type", at)?;
    Ok(format)
}

fn json_schema(v: Value, at: &Path) -> Decoded<JsonSchemaFormat> {
    let mut js = JsonSchemaFormat::default();
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "name" => js.name = optional(value, |v| string(v, &at))?,
            "description" => js.description = optional(value, |v| string(v, &at))?,
            "schema" => js.schema = optional(value, Ok)?,
            "strict" => js.strict = optional(value, |v| boolean(v, &at))?,
            _ => {
                js.extra.insert(key, value);
            }
        }
    }
    Ok(js)
}

fn stop(v: Value, at: &Path) -> Decoded<Stop> {
    match v {
        Value::String(s) => Ok(Stop::One(s)),
        Value::Array(_) => Ok(Stop::Many(list(v, at, string)?)),
        other => Err(invalid_type(&at.render(), "one of a string or array of strings", &other)),
    }
}

fn stream_options(v: Value, at: &Path) -> Decoded<StreamOptions> {
    let mut opts = StreamOptions::default();
    for (key, value) in object(v, at)? {
        let at = at.key(&key);
        match key.as_str() {
            "include_usage" => opts.include_usage = optional(value, |v| boolean(v, &at))?,
            _ => {
                opts.extra.insert(key, value);
            }
        }
    }
    Ok(opts)
}

/// `null` reads as absent, as serde's `Option` does.
fn optional<T>(v: Value, decode: impl FnOnce(Value) -> Decoded<T>) -> Decoded<Option<T>> {
    if v.is_null() {
        Ok(None)
    } else {
        decode(v).map(Some)
    }
}

fn list<T>(v: Value, at: &Path, item: fn(Value, &Path) -> Decoded<T>) -> Decoded<Vec<T>> {
    match v {
        Value::Array(items) => items.into_iter().enumerate().map(|(i, x)| item(x, &at.index(i))).collect(),
        other => Err(invalid_type(&at.render(), "an array", &other)),
    }
}

fn object(v: Value, at: &Path) -> Decoded<Map<String, Value>> {
    match v {
        Value::Object(map) => Ok(map),
        other => Err(invalid_type(&at.render(), "an object", &other)),
    }
}

fn string(v: Value, at: &Path) -> Decoded<String> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(invalid_type(&at.render(), "a string", &other)),
    }
}

fn boolean(v: Value, at: &Path) -> Decoded<bool> {
    v.as_bool().ok_or_else(|| invalid_type(&at.render(), "a boolean", &v))
}

fn number(v: Value, at: &Path) -> Decoded<f64> {
    v.as_f64().ok_or_else(|| invalid_type(&at.render(), "a number", &v))
}

fn integer(v: Value, at: &Path) -> Decoded<i64> {
    v.as_i64().ok_or_else(|| invalid_type(&at.render(), "an integer", &v))
}

fn count(v: Value, at: &Path) -> Decoded<u64> {
    v.as_u64().ok_or_else(|| invalid_type(&at.render(), "an integer", &v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A request with every modelled field at every level, and unknown fields beside them.
    fn rich() -> Value {
        json!({
            "model": "gpt-4o",
            "x_first": 1,
            "messages": [
                {"role": "developer", "content": "be brief", "x": [1]},
                {"role": "user", "name": "ann", "content": [
                    {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low", "x": 2}},
                    {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}
                ]},
                {"role": "assistant", "content": null, "refusal": null,
                 "tool_calls": [{"id": "call_1", "type": "function", "x": 3,
                                 "function": {"name": "f", "arguments": "{}", "x": 4}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}
            ],
            "tools": [{"type": "function", "x": 5,
                       "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "parallel_tool_calls": false,
            "response_format": {"type": "json_schema", "x": 6,
                                "json_schema": {"name": "n", "description": "d", "schema": {"type": "object"}, "strict": true, "x": 7}},
            "temperature": 0.5, "top_p": 1, "stop": ["a", "b"], "seed": -3,
            "max_tokens": 10, "max_completion_tokens": 20, "stream": true,
            "stream_options": {"include_usage": true, "x": 8},
            "user": "u", "metadata": {"k": "v"},
            "x_last": null
        })
    }

    /// Every path in `v` to a value, as keys and indexes from the root.
    fn paths(v: &Value, at: Vec<Value>, out: &mut Vec<Vec<Value>>) {
        match v {
            Value::Object(map) => map.iter().for_each(|(k, x)| {
                let mut p = at.clone();
                p.push(Value::from(k.as_str()));
                out.push(p.clone());
                paths(x, p, out);
            }),
            Value::Array(items) => items.iter().enumerate().for_each(|(i, x)| {
                let mut p = at.clone();
                p.push(Value::from(i));
                out.push(p.clone());
                paths(x, p, out);
            }),
            _ => {}
        }
    }

    /// `v` with the value at `path` replaced, or removed when `with` is `None`.
    fn replaced(v: &Value, path: &[Value], with: Option<&Value>) -> Value {
        let mut out = v.clone();
        let (last, parents) = path.split_last().unwrap();
        let mut node = &mut out;
        for step in parents {
            node = match step {
                Value::String(k) => &mut node[k.as_str()],
                _ => &mut node[step.as_u64().unwrap() as usize],
            };
        }
        match (last, with) {
            (Value::String(k), Some(x)) => node[k.as_str()] = x.clone(),
            (Value::String(k), None) => {
                node.as_object_mut().unwrap().shift_remove(k.as_str());
            }
            (i, Some(x)) => node[i.as_u64().unwrap() as usize] = x.clone(),
            (i, None) => {
                node.as_array_mut().unwrap().remove(i.as_u64().unwrap() as usize);
            }
        }
        out
    }

    /// The same request where validation looks inside nothing it need not: a custom tool, and
    /// content parts of a type it does not know, so the decoder meets their shapes alone.
    fn unchecked() -> Value {
        let mut v = rich();
        v["tools"][0]["type"] = json!("custom");
        v["messages"][1]["content"][0]["type"] = json!("input_x");
        v["messages"][1]["content"][1]["type"] = json!("input_y");
        v["tool_choice"] = json!("auto");
        v
    }

    #[derive(Default)]
    struct Agreed {
        decoded: usize,
        refused: usize,
    }

    /// What serde's derive made of a body that passed validation: the decoder must agree.
    fn agree(body: &Value, seen: &mut Agreed) {
        if validate::request(body).is_err() {
            return;
        }
        let derived = serde_json::from_value::<ChatRequest>(body.clone());
        let decoded = request(body.clone());
        match (&derived, &decoded) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "{body}");
                assert_eq!(serde_json::to_string(a).unwrap(), serde_json::to_string(b).unwrap(), "key order: {body}");
                seen.decoded += 1;
            }
            (Err(_), Err(e)) => {
                assert!([codes::INVALID_TYPE, codes::MISSING_REQUIRED_PARAMETER].contains(&e.code.as_str()), "{body}");
                assert!(e.param.is_some(), "{body}: {}", e.message);
                seen.refused += 1;
            }
            _ => panic!("derive {:?} against decoder {:?} for {body}", derived.err(), decoded.err()),
        }
    }

    #[test]
    fn decodes_as_the_derive_did_for_every_value_at_every_place() {
        let mut seen = Agreed::default();
        for base in [rich(), unchecked()] {
            agree(&base, &mut seen);
            let mut all = Vec::new();
            paths(&base, Vec::new(), &mut all);
            let values = [
                json!(null),
                json!(true),
                json!(7),
                json!(-7),
                json!(1.5),
                json!("s"),
                json!("function"),
                json!([]),
                json!(["s"]),
                json!({}),
                json!({"name": "n", "arguments": "{}", "url": "u", "type": "text", "text": "t"}),
            ];
            for path in &all {
                agree(&replaced(&base, path, None), &mut seen);
                for x in &values {
                    agree(&replaced(&base, path, Some(x)), &mut seen);
                }
            }
        }
        // Most variants fail validation; enough of both outcomes must reach the decoder to mean something.
        assert!(seen.decoded > 300 && seen.refused > 30, "{} decoded, {} refused", seen.decoded, seen.refused);
    }

    #[test]
    fn a_shape_validation_leaves_to_the_decoder_is_named_by_its_path() {
        let mut body = rich();
        body["tools"][0] = json!({"type": "custom", "function": {"description": "no name"}});
        let e = request(body.clone()).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.param.as_deref()),
            (codes::MISSING_REQUIRED_PARAMETER, Some("tools[0].function.name"))
        );
        body["tools"][0] = json!({"type": "custom", "function": 5});
        let e = request(body.clone()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].function"));
        assert!(e.message.contains("expected an object, but got an integer"), "{}", e.message);
        body["tools"] = json!([]);
        body["messages"][1]["content"][2]["text"] = json!(false);
        let e = request(body).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[1].content[2].text"));
    }

    #[test]
    fn unknown_keys_keep_their_order_and_nulls() {
        let req = request(rich()).unwrap();
        let keys: Vec<&str> = req.extra.keys().map(String::as_str).collect();
        assert_eq!(keys, ["x_first", "x_last"]);
        assert_eq!(req.extra["x_last"], Value::Null);
    }
}
