//! What a Responses request's chat form would tell the pipeline (the estimate's shape, the
//! capabilities it needs, its end user), counted from the request without building the form.
//! perf: a deployment that speaks the Responses API never reads the chat form, and for a coding
//! agent's 50 kB body building and checking it cost 190 µs natively on every request.
//!
//! [`facts`] follows [`super::request::to_chat`]'s rules item by item. It answers `None` wherever
//! the form or its checks could refuse the request or a part is not plainly valid; the caller then
//! builds the form, whose checks answer exactly as they always did.

use super::request::{item_type, response_format};
use serde_json::{Map, Value};
use std::io;

/// The facts of a request whose chat form builds and passes the chat checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatFacts {
    /// Characters the estimate counts (`ChatRequest::text_chars` of the form).
    pub text_chars: usize,
    /// The form's messages (a call joins the assistant message before it).
    pub messages: usize,
    /// `max_output_tokens`, the form's `max_tokens`.
    pub max_output: Option<u64>,
    /// Tools offered, or tool calls or results in the history.
    pub tools: bool,
    /// `text.format` asks for JSON.
    pub json_mode: bool,
    /// A user message holds an image.
    pub vision: bool,
    /// `user`, else `safety_identifier`, when a string.
    pub user: Option<String>,
}

/// The form's facts, or `None` where only building it can tell (see the module's doc).
pub fn facts(req: &Map<String, Value>) -> Option<ChatFacts> {
    let set = |key: &str| req.get(key).filter(|v| !v.is_null());
    req.get("model").and_then(Value::as_str).filter(|m| !m.is_empty())?;
    if set("previous_response_id").is_some() || set("conversation").is_some() {
        return None;
    }
    if req.get("background") == Some(&Value::Bool(true)) {
        return None;
    }
    let mut f = ChatFacts::default();
    let mut history = History::default();
    match req.get("instructions") {
        Some(Value::String(s)) if !s.is_empty() => history.message(&mut f, "system", chars(s)),
        Some(Value::String(_)) | Some(Value::Null) | None => {}
        Some(_) => return None,
    }
    match req.get("input") {
        Some(Value::String(s)) => history.message(&mut f, "user", chars(s)),
        Some(Value::Array(items)) => {
            for item in items {
                history.item(&mut f, item.as_object()?)?;
            }
        }
        _ => return None,
    }
    if f.messages == 0 {
        return None;
    }
    let tools = Tools::count(set("tools"))?;
    f.text_chars += tools.chars;
    f.tools |= tools.functions > 0;
    if set("tool_choice").is_some_and(|choice| !tools.plain_choice(choice)) {
        return None;
    }
    for key in ["temperature", "top_p"] {
        if set(key).is_some_and(|v| !v.is_number()) {
            return None;
        }
    }
    if let Some(max) = set("max_output_tokens") {
        f.max_output = Some(max.as_u64().filter(|n| *n >= 1)?);
    }
    let user = req.get("user").or_else(|| req.get("safety_identifier"));
    f.user = user.and_then(Value::as_str).map(str::to_string);
    if let Some(format) = req.get("text").and_then(|t| t.get("format")).and_then(response_format) {
        // A schema's checks and characters are the form's to tell.
        if format["type"] != "json_object" {
            return None;
        }
        f.json_mode = true;
    }
    Some(f)
}

/// The request's tools as the form translates them: function tools kept, the others dropped.
#[derive(Default)]
struct Tools {
    functions: usize,
    /// Characters of the function tools' names, descriptions and parameter schemas.
    chars: usize,
    /// `kind:name` (or `kind`) of each dropped tool, as `request::tools` names them.
    dropped: Vec<String>,
}

impl Tools {
    fn count(tools: Option<&Value>) -> Option<Tools> {
        let mut out = Tools::default();
        for tool in tools.map_or(Some(&[][..]), |t| t.as_array().map(Vec::as_slice))? {
            let name = tool.get("name").and_then(Value::as_str);
            match tool.get("type").and_then(Value::as_str).unwrap_or("") {
                "function" => {}
                kind => {
                    out.dropped.push(name.map_or_else(|| kind.to_string(), |name| format!("{kind}:{name}")));
                    continue;
                }
            }
            out.chars += chars(name.filter(|n| !n.is_empty())?);
            match tool.get("description") {
                Some(Value::String(d)) => out.chars += chars(d),
                Some(Value::Null) | None => {}
                Some(_) => return None,
            }
            match tool.get("parameters") {
                Some(p @ Value::Object(_)) => out.chars += json_chars(p),
                Some(Value::Null) | None => {}
                Some(_) => return None,
            }
            out.functions += 1;
        }
        Some(out)
    }

    /// Whether `tool_choice` translates without a refusal (`request::tool_choice`'s rules).
    fn plain_choice(&self, choice: &Value) -> bool {
        match choice {
            Value::String(s) => s == "none" || s == "auto" || (s == "required" && self.functions > 0),
            Value::Object(o) => {
                o.get("type").and_then(Value::as_str) == Some("function")
                    && o.get("name").and_then(Value::as_str).is_some_and(|name| {
                        let named = format!(":{name}");
                        !self.dropped.iter().any(|d| d.ends_with(&named))
                    })
            }
            _ => false,
        }
    }
}

/// Whether the form's last message is an assistant's, which a function call joins.
#[derive(Default)]
struct History {
    assistant_last: bool,
}

impl History {
    fn message(&mut self, f: &mut ChatFacts, role: &str, text_chars: usize) {
        f.messages += 1;
        f.text_chars += text_chars;
        self.assistant_last = role == "assistant";
    }

    /// One input item, as `request::add_item` translates it.
    fn item(&mut self, f: &mut ChatFacts, obj: &Map<String, Value>) -> Option<()> {
        match item_type(obj) {
            "message" => {
                let role = match obj.get("role").and_then(Value::as_str)? {
                    "user" => "user",
                    "assistant" => "assistant",
                    "system" | "developer" => "system",
                    _ => return None,
                };
                let text_chars = match obj.get("content")? {
                    Value::String(s) => chars(s),
                    Value::Array(parts) => content_chars(parts, role == "user", &mut f.vision)?,
                    _ => return None,
                };
                self.message(f, role, text_chars);
            }
            "function_call" => {
                obj.get("call_id").and_then(Value::as_str)?;
                let name = obj.get("name").and_then(Value::as_str)?;
                let arguments = obj.get("arguments").and_then(Value::as_str).unwrap_or("{}");
                f.text_chars += chars(name) + chars(arguments);
                f.tools = true;
                if !self.assistant_last {
                    self.message(f, "assistant", 0);
                }
            }
            "function_call_output" => {
                obj.get("call_id").and_then(Value::as_str)?;
                let output = match obj.get("output")? {
                    Value::String(s) => chars(s),
                    Value::Array(parts) => {
                        parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(chars).sum()
                    }
                    _ => return None,
                };
                f.tools = true;
                self.message(f, "tool", output);
            }
            // Left out of the form (`request::add_item`'s list); anything else refuses it.
            "reasoning"
            | "web_search_call"
            | "file_search_call"
            | "computer_call"
            | "computer_call_output"
            | "image_generation_call"
            | "code_interpreter_call"
            | "local_shell_call"
            | "local_shell_call_output"
            | "mcp_list_tools"
            | "mcp_call"
            | "mcp_approval_request"
            | "mcp_approval_response"
            | "custom_tool_call"
            | "custom_tool_call_output"
            | "shell_call"
            | "shell_call_output" => {}
            _ => return None,
        }
        Some(())
    }
}

/// Characters of a message's text parts; an image in a user message is a need for vision.
fn content_chars(parts: &[Value], user: bool, vision: &mut bool) -> Option<usize> {
    let mut n = 0;
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        let text = part.get("text").or_else(|| part.get("refusal")).and_then(Value::as_str);
        match (kind, text) {
            ("input_text" | "output_text" | "text" | "refusal", Some(text)) => n += chars(text),
            ("input_image", _) => {
                part.get("image_url").and_then(Value::as_str)?;
                *vision |= user;
            }
            _ => return None,
        }
    }
    Some(n)
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Characters of a value's compact JSON text, counted as it is written, not kept.
fn json_chars(v: &Value) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            // A UTF-8 character starts at every byte that is not a continuation byte.
            self.0 += buf.iter().filter(|b| (**b & 0xC0) != 0x80).count();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, v).map_or(0, |()| count.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::ChatRequest;
    use crate::providers::responses::request::to_chat;
    use serde_json::json;

    /// The facts as the request path read them before: from the built and checked chat form.
    fn by_the_form(req: &Map<String, Value>) -> Option<ChatFacts> {
        let chat = ChatRequest::from_json(to_chat(req).ok()?.chat).ok()?;
        Some(ChatFacts {
            text_chars: chat.text_chars(),
            messages: chat.messages.len(),
            max_output: chat.max_output_tokens(),
            tools: chat.needs_tools(),
            json_mode: chat.needs_json(),
            vision: chat.needs_vision(),
            user: chat.user.clone(),
        })
    }

    /// Where the facts answer, they are the form's; returns whether they answered.
    fn agree(body: &Value) -> bool {
        let Some(req) = body.as_object() else { return false };
        let facts = facts(req);
        if facts.is_some() {
            assert_eq!(facts, by_the_form(req), "{body}");
        }
        facts.is_some()
    }

    fn codex() -> Value {
        serde_json::from_str(fixture!("responses_request_codex.json")).unwrap()
    }

    /// A request that uses what the fixture does not: instructions, a JSON format, caps, a user.
    fn other() -> Value {
        json!({
            "model": "m",
            "instructions": "Be brief. ✓",
            "input": [
                {"role": "developer", "content": "rules"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":\"é\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}, {"text": "!"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
                {"type": "function_call", "call_id": "c2", "name": "f"},
                {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}]}
            ],
            "tools": [
                {"type": "function", "name": "f", "description": "does f ✓", "parameters": {"type": "object", "properties": {"a": {"type": "string", "description": "ü \" \\ \n"}}}},
                {"type": "function", "name": "g", "parameters": null, "description": null},
                {"type": "mcp", "server_label": "s"}
            ],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_object"}},
            "temperature": 0.2,
            "top_p": 1,
            "max_output_tokens": 300,
            "user": "u-1",
            "safety_identifier": "s-1",
            "stream": true,
            "metadata": {"k": "v"}
        })
    }

    #[test]
    fn plain_requests_are_counted_as_their_chat_form_is() {
        for body in [codex(), other(), json!({"model": "m", "input": "hi"})] {
            assert!(agree(&body), "{body}");
        }
        let f = facts(other().as_object().unwrap()).unwrap();
        assert_eq!((f.messages, f.tools, f.json_mode, f.vision), (6, true, true, true));
        assert_eq!((f.max_output, f.user.as_deref()), (Some(300), Some("u-1")));
    }

    fn odd_values() -> Vec<Value> {
        vec![
            json!(null),
            json!(5),
            json!(0),
            json!(-1),
            json!(2.5),
            json!(""),
            json!("é"),
            json!(true),
            json!([]),
            json!({}),
            json!([1, "a"]),
            json!("function"),
            json!("message"),
            json!("user"),
            json!("assistant"),
            json!("developer"),
            json!("system"),
            json!("tool"),
            json!("input_text"),
            json!("input_image"),
            json!("reasoning"),
            json!("function_call"),
            json!("function_call_output"),
            json!("item_reference"),
            json!("none"),
            json!("auto"),
            json!("required"),
            json!({"type": "function", "name": "exec_command"}),
            json!({"type": "function", "name": "f"}),
            json!({"type": "function", "name": ""}),
            json!({"type": "function"}),
            json!({"type": "web_search", "name": "f"}),
            json!({"type": "json_object"}),
            json!({"type": "json_schema", "name": "s", "schema": {"type": "object"}}),
            json!({"type": "text"}),
            json!({"type": "input_text", "text": "ü"}),
            json!({"type": "input_image", "image_url": "data:x"}),
            json!({"type": "input_image", "file_id": "f"}),
            json!([{"type": "input_image", "image_url": "x"}]),
            json!([{"type": "output_text", "text": "x"}, {"type": "input_image", "image_url": "x"}]),
            json!({"type": "message", "role": "assistant", "content": "x"}),
            json!({"role": "user", "content": "x"}),
            json!({"type": "function_call", "call_id": "c", "name": "n"}),
            json!({"type": "function_call_output", "call_id": "c", "output": "o"}),
            json!({"type": "reasoning", "encrypted_content": "e"}),
            json!({"format": {"type": "json_object"}}),
            json!({"format": {"type": "json_schema", "schema": {}}}),
        ]
    }

    /// Every member, at every depth, replaced by each odd value; each of the request's parameters
    /// set to each odd value too.
    #[test]
    fn every_part_changed_is_counted_as_the_chat_form_is() {
        fn paths(v: &Value, at: Vec<Value>, out: &mut Vec<Vec<Value>>) {
            let children: Vec<(Value, &Value)> = match v {
                Value::Object(m) => m.iter().map(|(k, c)| (json!(k), c)).collect(),
                Value::Array(a) => a.iter().enumerate().map(|(i, c)| (json!(i), c)).collect(),
                _ => Vec::new(),
            };
            for (step, child) in children {
                let mut p = at.clone();
                p.push(step);
                out.push(p.clone());
                paths(child, p, out);
            }
        }
        let params = [
            "instructions",
            "input",
            "tools",
            "tool_choice",
            "text",
            "temperature",
            "top_p",
            "max_output_tokens",
            "user",
            "safety_identifier",
            "background",
            "previous_response_id",
            "conversation",
            "parallel_tool_calls",
            "model",
        ];
        let (mut answered, mut total) = (0, 0);
        for base in [codex(), other()] {
            let mut all = Vec::new();
            paths(&base, Vec::new(), &mut all);
            all.extend(params.iter().map(|p| vec![json!(p)]));
            for path in &all {
                for value in odd_values() {
                    let mut body = base.clone();
                    let mut at = &mut body;
                    for step in path {
                        at = match step {
                            Value::String(k) => &mut at[k.as_str()],
                            _ => &mut at[step.as_u64().unwrap() as usize],
                        };
                    }
                    *at = value;
                    total += 1;
                    answered += usize::from(agree(&body));
                }
                let mut body = base.clone();
                if let (Some((last, parent)), Some(_)) = (path.split_last(), path.first()) {
                    let mut at = &mut body;
                    for step in parent {
                        at = match step {
                            Value::String(k) => &mut at[k.as_str()],
                            _ => &mut at[step.as_u64().unwrap() as usize],
                        };
                    }
                    match (at, last) {
                        (Value::Object(m), Value::String(k)) => drop(m.remove(k)),
                        (Value::Array(a), Value::Number(i)) => drop(a.remove(i.as_u64().unwrap() as usize)),
                        _ => {}
                    }
                    total += 1;
                    answered += usize::from(agree(&body));
                }
            }
        }
        // Most changes leave a request the facts can count; the rest are the form's to tell.
        eprintln!("{answered} of {total}");
        assert!(total > 8_000 && answered * 2 > total, "{answered} of {total}");
    }

    #[test]
    fn json_text_is_counted_in_characters() {
        let v = json!({"a": "é\"\n", "b": [1, 2.5, null], "ü": {}});
        assert_eq!(json_chars(&v), v.to_string().chars().count());
    }
}
