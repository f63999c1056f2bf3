//! What the Responses door reads from a client's body, in one pass over its bytes without building
//! it: the members `providers::responses::facts` reads (the model, the flags, the input items'
//! roles, texts and images, the tools) and the few the door itself uses (`stream`,
//! `prompt_cache_key`, `metadata`). perf: a coding agent's body is tens of kB (instructions, tool
//! schemas, the whole history with encrypted reasoning), and building and dropping its `Value` was
//! a quarter of the door's CPU in a profile of Codex-sized requests.
//!
//! Every value is still parsed as a `Value` parse would (strings decoded, numbers read), so what a
//! `Value` refuses is refused here with the same error. Member lookups follow `Value`'s rules (the
//! last of a repeated name counts), except that a repeated member inside a tool's `parameters`
//! counts twice in the estimate's characters, where a `Value` keeps the last.

use crate::providers::responses::facts::{
    Content, Field, History, Input, ItemFields, Output, PartFields, Parts, RequestFields, ToolFields, ToolList, Tools,
};
use crate::providers::splice::{Key, Places, Span};
use crate::support::json_view::{from_members, numbers_are, object_is, seq_is, unit_bool_are, Chars, MemberOf};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;
use std::io;
use std::marker::PhantomData;

/// A Responses body's members (all absent when it is not an object).
#[derive(Debug, Default)]
pub struct ResponsesBody {
    pub fields: RequestFields,
    /// Where the top-level `model` and `max_output_tokens` values lie, for the splice (a nested
    /// value there fails the walk, and the body is read as a `Value`, see `Places::read`).
    pub spans: Option<Vec<Span>>,
}

impl ResponsesBody {
    pub fn parse(body: &[u8]) -> serde_json::Result<ResponsesBody> {
        let walked: Walked = serde_json::from_slice(body)?;
        Ok(ResponsesBody { fields: walked.fields, spans: walked.places.spans(body) })
    }
}

/// The members, and where the top-level `model` and ceiling values lie.
#[derive(Default)]
struct Walked {
    fields: RequestFields,
    places: Places,
}

const MEMBERS: [&str; 17] = [
    "model",
    "stream",
    "previous_response_id",
    "conversation",
    "background",
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
    "prompt_cache_key",
    "metadata",
];

from_members!(Walked, MEMBERS, |w, i, map| match i {
    0 => w.fields.model = w.places.read(map, Key::Model)?,
    1 => w.fields.stream = map.next_value()?,
    2 => w.fields.previous_response_id = map.next_value()?,
    3 => w.fields.conversation = map.next_value()?,
    4 => w.fields.background = map.next_value()?,
    5 => w.fields.instructions = map.next_value()?,
    6 => w.fields.input = map.next_value_seed(InputSeed)?,
    7 => w.fields.tools = map.next_value_seed(ToolsSeed)?,
    8 => w.fields.tool_choice = Some(map.next_value()?),
    9 => w.fields.text = Some(map.next_value()?),
    10 => w.fields.temperature = map.next_value()?,
    11 => w.fields.top_p = map.next_value()?,
    12 => w.fields.max_output_tokens = w.places.read(map, Key::Ceiling)?,
    13 => w.fields.user = map.next_value()?,
    14 => w.fields.safety_identifier = map.next_value()?,
    15 => w.fields.prompt_cache_key = map.next_value()?,
    _ => w.fields.metadata = Some(map.next_value::<Value>()?),
});

/// How a [`Field`] keeps a string: its text, or its characters.
pub trait Keep: Sized {
    fn keep(s: &str) -> Self;
}

impl Keep for String {
    fn keep(s: &str) -> Self {
        s.to_string()
    }
}

impl Keep for usize {
    fn keep(s: &str) -> Self {
        s.chars().count()
    }
}

impl<'de, S: Keep> Deserialize<'de> for Field<S> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<S>(PhantomData<S>);
        impl<'de, S: Keep> Visitor<'de> for V<S> {
            type Value = Field<S>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Field<S>, E> {
                Ok(Field::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Field<S>, E> {
                Ok(Field::Null)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Field<S>, E> {
                Ok(Field::Bool(b))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Field<S>, E> {
                Ok(Field::Number(Some(n)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Field<S>, E> {
                Ok(Field::Number(u64::try_from(n).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Field<S>, E> {
                Ok(Field::Number(None))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Field<S>, E> {
                Ok(Field::Str(S::keep(s)))
            }
            seq_is!(Field::Array);
            object_is!(Field::Object);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `input`: a string's characters, or the items folded into a history as they are read.
struct InputSeed;

impl<'de> DeserializeSeed<'de> for InputSeed {
    type Value = Input;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Input, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for InputSeed {
    type Value = Input;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Input, E> {
        Ok(Input::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Input, E> {
        Ok(Input::Null)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Input, E> {
        Ok(Input::Other)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Input, E> {
        Ok(Input::Text(s.chars().count()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Input, A::Error> {
        let mut history = History::default();
        while let Some(item) = seq.next_element::<ItemFields>()? {
            history.add(&item);
        }
        Ok(Input::Items(history))
    }
    numbers_are!(Input::Other);
    object_is!(Input::Other);
}

const ITEM: [&str; 7] = ["type", "role", "content", "call_id", "name", "arguments", "output"];

from_members!(ItemFields, ITEM, |item, i, map| match i {
    0 => item.kind = map.next_value()?,
    1 => item.role = map.next_value()?,
    2 => item.content = map.next_value()?,
    3 => item.call_id = map.next_value()?,
    4 => item.name = map.next_value()?,
    5 => item.arguments = map.next_value()?,
    _ => item.output = map.next_value()?,
});

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
                Ok(Content::Text(s.chars().count()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Parts::default();
                while let Some(part) = seq.next_element::<PartFields>()? {
                    parts.add(&part);
                }
                Ok(Content::Parts(parts))
            }
            numbers_are!(Content::Other);
            unit_bool_are!(Content::Other);
            object_is!(Content::Other);
        }
        d.deserialize_any(V)
    }
}

const PART: [&str; 4] = ["type", "text", "refusal", "image_url"];

from_members!(PartFields, PART, |part, i, map| match i {
    0 => part.kind = map.next_value()?,
    1 => part.text = map.next_value()?,
    2 => part.refusal = map.next_value()?,
    _ => part.image_url = map.next_value()?,
});

impl<'de> Deserialize<'de> for Output {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Output;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Output, E> {
                Ok(Output::Text(s.chars().count()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Output, A::Error> {
                // The parts' texts are joined; a part without one adds nothing.
                let mut chars = 0;
                while let Some(text) = seq.next_element_seed(MemberOf::<Chars>::new(&["text"]))? {
                    chars += text.0.unwrap_or(0) as usize;
                }
                Ok(Output::Parts(chars))
            }
            numbers_are!(Output::Other);
            unit_bool_are!(Output::Other);
            object_is!(Output::Other);
        }
        d.deserialize_any(V)
    }
}

/// `tools`: each tool folded in as it is read.
struct ToolsSeed;

impl<'de> DeserializeSeed<'de> for ToolsSeed {
    type Value = ToolList;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ToolList, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ToolsSeed {
    type Value = ToolList;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<ToolList, E> {
        Ok(ToolList::default())
    }
    fn visit_none<E: de::Error>(self) -> Result<ToolList, E> {
        Ok(ToolList::default())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<ToolList, E> {
        Ok(ToolList::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolList, A::Error> {
        let mut tools = Tools::default();
        while let Some(tool) = seq.next_element::<ToolFields>()? {
            tools.add(&tool);
        }
        Ok(ToolList::Tools(tools))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<ToolList, E> {
        Ok(ToolList::Other)
    }
    numbers_are!(ToolList::Other);
    object_is!(ToolList::Other);
}

const TOOL: [&str; 4] = ["type", "name", "description", "parameters"];

from_members!(ToolFields, TOOL, |tool, i, map| match i {
    0 => tool.kind = map.next_value()?,
    1 => tool.name = map.next_value()?,
    2 => tool.description = map.next_value()?,
    _ => (tool.parameters, tool.parameters_chars) = map.next_value_seed(JsonText)?,
});

/// A value's kind and the characters of its compact JSON text (what `Value::to_string` writes),
/// counted as it is read. A member named twice in an object counts twice.
struct JsonText;

impl<'de> DeserializeSeed<'de> for JsonText {
    type Value = (Field<usize>, usize);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// Characters of `v` as serde_json writes it: the same escapes and number formats as `Value`'s.
fn written<T: serde::Serialize + ?Sized>(v: &T) -> usize {
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

impl<'de> Visitor<'de> for JsonText {
    type Value = (Field<usize>, usize);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((Field::Null, 4))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((Field::Null, 4))
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
        Ok((Field::Bool(b), if b { 4 } else { 5 }))
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok((Field::Number(Some(n)), written(&n)))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Ok((Field::Number(u64::try_from(n).ok()), written(&n)))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        Ok((Field::Number(None), written(&n)))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok((Field::Str(s.chars().count()), written(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // "[" and "]", and a "," between elements.
        let (mut chars, mut n) = (2, 0);
        while let Some((_, c)) = seq.next_element_seed(JsonText)? {
            chars += c;
            n += 1;
        }
        Ok((Field::Array, chars + n.max(1) - 1))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // "{" and "}", a ":" in each member and a "," between members.
        let (mut chars, mut n) = (2, 0);
        while let Some((_, key)) = map.next_key_seed(JsonText)? {
            chars += key + 1 + map.next_value_seed(JsonText)?.1;
            n += 1;
        }
        Ok((Field::Object, chars + n.max(1) - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::ChatRequest;
    use crate::endpoints::responses::parse;
    use crate::providers::responses::facts::ChatFacts;
    use crate::providers::responses::request::to_chat;
    use crate::providers::responses::CEILING_FIELD;
    use crate::providers::splice::{splice_model_within, splice_spans, Ceiling};
    use serde_json::{json, Map};

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

    /// Where the walk's facts answer, `parse` accepts the body, the facts are the built form's, and
    /// the members the door reads are the `Value`'s; returns whether they answered.
    fn agree(body: &Value) -> bool {
        let bytes = body.to_string();
        // A body the walk refuses goes the old way; one it counts must be one `parse` accepts.
        let Ok(walked) = ResponsesBody::parse(bytes.as_bytes()) else { return false };
        let Some(facts) = walked.fields.facts() else { return false };
        let req = parse(bytes.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e:?}"));
        assert_eq!(Some(facts), by_the_form(&req), "{body}");
        let f = &walked.fields;
        assert_eq!(f.model.as_str().map(String::as_str), req.get("model").and_then(Value::as_str));
        assert_eq!(f.stream == Field::Bool(true), req.get("stream") == Some(&Value::Bool(true)));
        assert_eq!(
            f.prompt_cache_key.as_str().map(String::as_str),
            req.get("prompt_cache_key").and_then(Value::as_str)
        );
        let metadata = f.metadata.as_ref().and_then(Value::as_object);
        assert_eq!(metadata, req.get("metadata").and_then(Value::as_object), "{body}");
        spliced_as_scanned(bytes.as_bytes(), &walked);
        true
    }

    /// The walk's spans splice the body as the splice's own scan does, output caps included.
    fn spliced_as_scanned(bytes: &[u8], walked: &ResponsesBody) {
        let spans = walked.spans.as_deref().expect("spans");
        for most in [None, Some(1), Some(100)] {
            let ceiling = most.map(|most| Ceiling { field: CEILING_FIELD, most });
            let by_walk = splice_spans(bytes, spans, "real/\"m\"", ceiling).map_err(|e| e.message);
            let by_scan = splice_model_within(bytes, "real/\"m\"", ceiling).map_err(|e| e.message);
            assert_eq!(by_walk, by_scan, "{}", String::from_utf8_lossy(bytes));
        }
    }

    fn facts_of(body: &Value) -> Option<ChatFacts> {
        ResponsesBody::parse(body.to_string().as_bytes()).unwrap().fields.facts()
    }

    fn codex() -> Value {
        serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/providers/responses_request_codex.json"
        )))
        .unwrap()
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
            "prompt_cache_key": "session-1",
            "metadata": {"k": "v"}
        })
    }

    #[test]
    fn plain_requests_are_counted_as_their_chat_form_is() {
        for body in [codex(), other(), json!({"model": "m", "input": "hi"})] {
            assert!(agree(&body), "{body}");
        }
        assert_eq!(MEMBERS[12], CEILING_FIELD);
        // Whitespace, repeated members and escaped names, as clients may send them.
        for text in [
            serde_json::to_string_pretty(&other()).unwrap(),
            r#" { "model" : "a" , "input" : "x" , "max_output_tokens" : 300 , "mod\u0065l" : "b" } "#.to_string(),
            r#"{"model":"a","max_output_tokens":2.0,"input":"x","max_output_tokens":7}"#.to_string(),
        ] {
            let walked = ResponsesBody::parse(text.as_bytes()).unwrap();
            assert!(walked.fields.facts().is_some(), "{text}");
            spliced_as_scanned(text.as_bytes(), &walked);
        }
        let f = facts_of(&other()).unwrap();
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
            "stream",
            "prompt_cache_key",
            "metadata",
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
    fn a_schema_is_counted_in_the_characters_of_its_json_text() {
        let schema = json!({"a": "é\"\n\u{1}/", "b": [1, -2, 2.5, 1e300, null, true, false, [], {}], "ü": {"x": [[]]}});
        for text in
            [schema.to_string(), serde_json::to_string_pretty(&schema).unwrap(), "{ \"n\" : 1.50 , \"m\":1E2}".into()]
        {
            let (kind, chars) = JsonText.deserialize(&mut serde_json::Deserializer::from_str(&text)).unwrap();
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!((kind, chars), (Field::Object, value.to_string().chars().count()), "{text}");
        }
    }

    /// The one difference from a `Value`, documented in the module: a repeated member in a schema counts twice.
    #[test]
    fn a_repeated_member_in_a_schema_counts_twice() {
        let body = r#"{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{"a":1,"a":2}}]}"#;
        let walked = ResponsesBody::parse(body.as_bytes()).unwrap().fields.facts().unwrap();
        let req: Map<String, Value> = serde_json::from_str(body).unwrap();
        let formed = by_the_form(&req).unwrap();
        assert_eq!(walked.text_chars, formed.text_chars + r#","a":1"#.len());
    }

    #[test]
    fn what_a_value_parse_refuses_the_walk_refuses() {
        for body in [&b"{"[..], b"[1,", b"{\"model\":\"m\",\"input\":\"\\ud800\"}", b"{\"model\":1e400}", b"\xff"] {
            assert!(ResponsesBody::parse(body).is_err() && parse(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
        let deep = format!("{{\"model\":\"m\",\"input\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(ResponsesBody::parse(deep.as_bytes()).is_err() && parse(deep.as_bytes()).is_err());
        // Nested exactly past the parser's limit in a member read raw, then repeated with a plain value.
        let nested = format!("{}{}", "[".repeat(127), "]".repeat(127));
        for body in [
            format!(r#"{{"model":"m","input":"hi","max_output_tokens":{nested},"max_output_tokens":5}}"#),
            format!(r#"{{"model":{nested},"model":"m","input":"hi"}}"#),
        ] {
            assert!(parse(body.as_bytes()).is_err());
            assert!(ResponsesBody::parse(body.as_bytes()).is_err(), "{body}");
        }
        // Nested but within the limit: the walk leaves it to the Value parse, which reads it as before.
        let shallow = r#"{"model":"m","input":"hi","max_output_tokens":[1],"max_output_tokens":5}"#;
        assert!(ResponsesBody::parse(shallow.as_bytes()).is_err() && parse(shallow.as_bytes()).is_ok());
    }
}
