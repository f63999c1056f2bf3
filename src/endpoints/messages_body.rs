//! What the Messages door reads from a client's body, in one pass over its bytes without building
//! it: the model, `max_tokens`, `stream`, the messages' count and whether any holds an image,
//! whether tools are offered, `metadata.user_id`, and the characters the estimate counts.
//! perf: an agent's body is tens of kB (system prompt, tool schemas, the whole history), and a
//! `Value` of it was a map per object and a string per key and value, built on every request.
//!
//! Every value is still parsed as a `Value` parse would (strings decoded, numbers read), so what
//! a `Value` refuses is refused here with the same error. Member lookups follow `Value`'s rules
//! (the last of a repeated name counts), except that a repeated member inside the messages,
//! system or tools counts twice in the characters, where a `Value` keeps the last.

use crate::providers::splice::{Key, Places, Span};
use crate::support::json_view::{
    members, not_an_object, numbers_are, unit_bool_are, Count, Flag, MemberOf, NameIn, Skip, Text,
};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A Messages body's facts; `None` where the body has no such member (or not of its type).
#[derive(Debug, Default, PartialEq)]
pub struct MessagesBody {
    /// Whether the body is a JSON object at all.
    pub object: bool,
    /// `model`, when it is a string.
    pub model: Option<String>,
    /// `messages`, when it is an array.
    pub messages: Option<Walked>,
    /// `max_tokens`: `Some(None)` when present but not a count.
    pub max_tokens: Option<Option<u64>>,
    pub stream: Option<bool>,
    /// `system`'s and `tools`' walks.
    pub system: Option<Walked>,
    pub tools: Option<Walked>,
    /// `metadata.user_id`, when it is a string.
    pub user_id: Option<String>,
    /// Where the top-level `model` and `max_tokens` values lie, for the splice.
    pub spans: Option<Vec<Span>>,
}

impl MessagesBody {
    pub fn parse(body: &[u8]) -> serde_json::Result<MessagesBody> {
        // First with the places of `model` and `max_tokens`; a body that fails so (a nested value
        // there, or any error) is read the plain way, whose errors are the door's.
        if let Ok((mut walked, places)) = Self::read(body, true) {
            walked.spans = places.spans(body).filter(|_| walked.object);
            return Ok(walked);
        }
        Self::read(body, false).map(|(walked, _)| walked)
    }

    /// `serde_json::from_slice`, with `place` telling whether the spliced values are placed.
    fn read(body: &[u8], place: bool) -> serde_json::Result<(MessagesBody, Places)> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let read = Body { place }.deserialize(&mut de)?;
        de.end()?;
        Ok(read)
    }

    /// Characters of every string in `system`, `messages` and `tools` (but under a `data` member:
    /// image bytes are not text), what the token estimate counts.
    pub fn text_chars(&self) -> usize {
        [&self.system, &self.messages, &self.tools].iter().filter_map(|w| w.as_ref()).map(|w| w.chars).sum()
    }

    /// Whether any message's content holds an image block (or a tool result holding one).
    pub fn has_image(&self) -> bool {
        self.messages.as_ref().is_some_and(|m| m.image)
    }

    /// Whether `tools` is a non-empty array.
    pub fn has_tools(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| t.len.is_some_and(|n| n > 0))
    }
}

const MEMBERS: [&str; 7] = ["model", "messages", "max_tokens", "stream", "system", "tools", "metadata"];

/// The body's walk; `place`: whether `model` and `max_tokens` are read raw, for their places.
struct Body {
    place: bool,
}

impl<'de> DeserializeSeed<'de> for Body {
    type Value = (MessagesBody, Places);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Body {
    type Value = (MessagesBody, Places);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut body = MessagesBody { object: true, ..MessagesBody::default() };
        let mut places = Places::default();
        // Other members are read as a `Value` parse reads them, so what it refuses is refused here.
        members(&mut map, &MEMBERS, |i, map| {
            match i {
                0 if self.place => body.model = places.read::<_, Text>(map, Key::Model)?.0,
                0 => body.model = map.next_value::<Text>()?.0,
                2 if self.place => body.max_tokens = Some(places.read::<_, Count>(map, Key::Ceiling)?.0),
                1 => body.messages = Some(map.next_value_seed(Walk(Role::Messages))?).filter(|w| w.len.is_some()),
                2 => body.max_tokens = Some(map.next_value::<Count>()?.0),
                3 => body.stream = map.next_value::<Flag>()?.0,
                4 => body.system = Some(map.next_value_seed(Walk(Role::Plain))?),
                5 => body.tools = Some(map.next_value_seed(Walk(Role::Plain))?),
                _ => body.user_id = map.next_value_seed(MemberOf::<Text>::new(&["user_id"]))?.0,
            }
            Ok(())
        })?;
        Ok((body, places))
    }
    not_an_object!((MessagesBody::default(), Places::default()));
}

/// What a walk over one value found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Walked {
    /// Characters of its strings, but under `data` members.
    pub chars: usize,
    /// An image, by the walk's role (see [`Role`]).
    pub image: bool,
    /// Its length, when it is an array.
    pub len: Option<usize>,
}

/// Where in a Messages body a value sits, for what makes an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Anything: only its characters count.
    Plain,
    /// `messages`: an image when any message holds one.
    Messages,
    /// A message: an image when its `content` holds one.
    Message,
    /// A message's `content`: an image when any block is one.
    Content,
    /// A content block: an image when its `type` is `"image"` or its `content` holds an image item.
    Block,
    /// A block's `content` (a tool result's): an image when any item is one.
    BlockContent,
    /// An item of a tool result's content: an image when its `type` is `"image"`.
    Item,
}

impl Role {
    /// The role of an array's elements.
    fn element(self) -> Role {
        match self {
            Role::Messages => Role::Message,
            Role::Content => Role::Block,
            Role::BlockContent => Role::Item,
            _ => Role::Plain,
        }
    }
}

/// The member names the walk acts on: `data` (not text), `content`, `type`.
const KEYS: [&str; 3] = ["data", "content", "type"];
const DATA: Option<usize> = Some(0);
const CONTENT: Option<usize> = Some(1);
const TYPE: Option<usize> = Some(2);

/// One value walked in its role.
struct Walk(Role);

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = Walked;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Walked, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = Walked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Walked, A::Error> {
        let role = self.0;
        let (mut chars, mut type_image, mut content_image) = (0, false, false);
        while let Some(key) = map.next_key_seed(NameIn(&KEYS))? {
            match (key, role) {
                (DATA, _) => {
                    map.next_value::<Skip>()?;
                }
                (CONTENT, Role::Message | Role::Block) => {
                    let inner = if role == Role::Message { Role::Content } else { Role::BlockContent };
                    let walked = map.next_value_seed(Walk(inner))?;
                    chars += walked.chars;
                    content_image = walked.image;
                }
                (TYPE, Role::Block | Role::Item) => {
                    let (n, image) = map.next_value_seed(TypeName)?;
                    chars += n;
                    type_image = image;
                }
                _ => chars += map.next_value_seed(Walk(Role::Plain))?.chars,
            }
        }
        let image = match role {
            Role::Message => content_image,
            Role::Block => type_image || content_image,
            Role::Item => type_image,
            _ => false,
        };
        Ok(Walked { chars, image, len: None })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Walked, A::Error> {
        let element = self.0.element();
        let mut out = Walked { len: Some(0), ..Walked::default() };
        while let Some(walked) = seq.next_element_seed(Walk(element))? {
            out.chars += walked.chars;
            out.image |= walked.image && element != Role::Plain;
            out.len = out.len.map(|n| n + 1);
        }
        Ok(out)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Walked, E> {
        Ok(Walked { chars: s.chars().count(), ..Walked::default() })
    }

    numbers_are!(Walked::default());
    unit_bool_are!(Walked::default());
}

/// A block's `type`: its characters, and whether it is `"image"` (any other value is walked plainly).
struct TypeName;

impl<'de> DeserializeSeed<'de> for TypeName {
    type Value = (usize, bool);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(usize, bool), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TypeName {
    type Value = (usize, bool);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(usize, bool), E> {
        Ok((s.chars().count(), s == "image"))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(usize, bool), A::Error> {
        Walk(Role::Plain).visit_map(map).map(|w| (w.chars, false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(usize, bool), A::Error> {
        Walk(Role::Plain).visit_seq(seq).map(|w| (w.chars, false))
    }

    numbers_are!((0, false));
    unit_bool_are!((0, false));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::passthrough::CEILING_FIELD;
    use crate::providers::splice::{splice_model_within, splice_spans, Ceiling};
    use serde_json::{json, Value};

    /// What the door read from a whole `Value` before: the reference the walk must agree with.
    fn reference(body: &[u8]) -> Result<MessagesBody, String> {
        fn text_chars(v: &Value) -> usize {
            match v {
                Value::String(s) => s.chars().count(),
                Value::Array(items) => items.iter().map(text_chars).sum(),
                Value::Object(map) => map.iter().map(|(k, v)| if k == "data" { 0 } else { text_chars(v) }).sum(),
                _ => 0,
            }
        }
        fn has_image(message: &Value) -> bool {
            message["content"].as_array().is_some_and(|blocks| {
                blocks.iter().any(|b| {
                    b["type"] == "image"
                        || b["content"].as_array().is_some_and(|c| c.iter().any(|i| i["type"] == "image"))
                })
            })
        }
        let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let Some(obj) = value.as_object() else { return Ok(MessagesBody::default()) };
        let walked = |k: &str| {
            obj.get(k).map(|v| Walked { chars: text_chars(v), image: false, len: v.as_array().map(Vec::len) })
        };
        Ok(MessagesBody {
            object: true,
            model: obj.get("model").and_then(Value::as_str).map(str::to_string),
            messages: obj.get("messages").and_then(Value::as_array).map(|m| Walked {
                chars: m.iter().map(text_chars).sum(),
                image: m.iter().any(has_image),
                len: Some(m.len()),
            }),
            max_tokens: obj.get("max_tokens").map(Value::as_u64),
            stream: obj.get("stream").and_then(Value::as_bool),
            system: walked("system"),
            tools: walked("tools"),
            user_id: obj.get("metadata").and_then(|m| m.get("user_id")).and_then(Value::as_str).map(str::to_string),
            spans: None,
        })
    }

    fn agree(body: &[u8]) {
        agree_as(body, true)
    }

    /// `chars`: whether the characters must agree too (not where a member inside is named twice).
    fn agree_as(body: &[u8], chars: bool) {
        let got = MessagesBody::parse(body).map_err(|e| e.to_string());
        let want = reference(body);
        let text = String::from_utf8_lossy(body);
        match (&got, &want) {
            (Ok(got), Ok(want)) => {
                assert_eq!(got.object, want.object, "{text}");
                assert_eq!(got.model, want.model, "{text}");
                assert_eq!(got.max_tokens, want.max_tokens, "{text}");
                assert_eq!(got.stream, want.stream, "{text}");
                assert_eq!(got.user_id, want.user_id, "{text}");
                if chars {
                    assert_eq!(got.text_chars(), want.text_chars(), "{text}");
                }
                assert_eq!(got.has_image(), want.has_image(), "{text}");
                assert_eq!(got.has_tools(), want.has_tools(), "{text}");
                assert_eq!(got.messages.map(|m| m.len), want.messages.map(|m| m.len), "{text}");
                spliced_as_scanned(body, got);
            }
            (Err(got), Err(want)) => assert_eq!(got, want, "the same error: {text}"),
            _ => panic!("{text}: {got:?} against {want:?}"),
        }
    }

    /// Where the walk placed the values, they splice the body as the splice's own scan does.
    fn spliced_as_scanned(body: &[u8], walked: &MessagesBody) {
        let Some(spans) = walked.spans.as_deref() else {
            // Only a nested value there, or a body that is not an object, is read without places.
            return;
        };
        for most in [None, Some(1), Some(40000)] {
            let ceiling = most.map(|most| Ceiling { field: CEILING_FIELD, most });
            let by_walk = splice_spans(body, spans, "real/\"m\"", ceiling).map_err(|e| e.message);
            let by_scan = splice_model_within(body, "real/\"m\"", ceiling).map_err(|e| e.message);
            assert_eq!(by_walk, by_scan, "{}", String::from_utf8_lossy(body));
        }
    }

    /// A Claude Code request in shape: system blocks with cache control, tools with schemas, a
    /// history with thinking, tool use, tool results (one holding an image) and an image block.
    fn agent_body() -> Value {
        json!({
            "model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": true,
            "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": "Use the tools available to you. Ünïcödé 😀 text."}],
            "tools": [{"name": "Bash", "description": "Runs a command", "input_schema": {"type": "object", "properties": {"command": {"type": "string", "description": "The command"}}, "required": ["command"]}},
                      {"name": "Read", "description": "Reads a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}],
            "messages": [
                {"role": "user", "content": "Fix the failing test."},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCgIYAhIM"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cargo test"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "1 failed"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
                    {"type": "text", "text": "see above", "cache_control": {"type": "ephemeral"}}]},
                {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}],
            "metadata": {"user_id": "{\"device_id\":\"d\",\"session_id\":\"5f1c\"}"},
            "thinking": {"type": "enabled", "budget_tokens": 1024}, "temperature": 1
        })
    }

    #[test]
    fn an_agent_request_reads_as_a_value_did() {
        let body = agent_body();
        agree(body.to_string().as_bytes());
        let facts = MessagesBody::parse(body.to_string().as_bytes()).unwrap();
        assert!(facts.has_image() && facts.has_tools());
        assert_eq!(
            (facts.messages.unwrap().len, facts.max_tokens, facts.stream),
            (Some(4), Some(Some(32000)), Some(true))
        );
        assert_eq!(facts.user_id.as_deref(), Some("{\"device_id\":\"d\",\"session_id\":\"5f1c\"}"));
    }

    #[test]
    fn every_part_of_an_agent_request_changed_reads_as_a_value_did() {
        let odd = [
            json!(null),
            json!(5),
            json!(-1),
            json!(2.5),
            json!(""),
            json!("image"),
            json!(true),
            json!([]),
            json!({}),
            json!([1, "a"]),
            json!({"type": "image"}),
            json!([{"type": "image"}]),
            json!([{"content": [{"type": "image"}]}]),
            json!({"data": "xyz"}),
            json!([{"type": "tool_result", "content": "image"}]),
        ];
        let base = agent_body();
        let mut paths: Vec<Vec<Value>> = Vec::new();
        // Every member, at every depth, replaced by each odd value in turn.
        fn collect(v: &Value, at: Vec<Value>, out: &mut Vec<Vec<Value>>) {
            match v {
                Value::Object(m) => m.iter().for_each(|(k, c)| {
                    let mut p = at.clone();
                    p.push(json!(k));
                    out.push(p.clone());
                    collect(c, p, out);
                }),
                Value::Array(a) => a.iter().enumerate().for_each(|(i, c)| {
                    let mut p = at.clone();
                    p.push(json!(i));
                    out.push(p.clone());
                    collect(c, p, out);
                }),
                _ => {}
            }
        }
        collect(&base, Vec::new(), &mut paths);
        assert!(paths.len() > 60, "{}", paths.len());
        for path in &paths {
            for value in &odd {
                let mut body = base.clone();
                let mut at = &mut body;
                for step in path {
                    at = match step {
                        Value::String(k) => &mut at[k.as_str()],
                        _ => &mut at[step.as_u64().unwrap() as usize],
                    };
                }
                *at = value.clone();
                agree(body.to_string().as_bytes());
            }
        }
    }

    #[test]
    fn odd_bodies_read_as_a_value_did() {
        for body in [
            "",
            "{",
            "[]",
            "5",
            "null",
            "\"x\"",
            "{}",
            "{\"model\":\"m\",}",
            "{\"model\":\"m\"} x",
            " {\"model\":\"m\"} \n",
            r#"{"model":"a","model":"b","max_tokens":1,"max_tokens":"2","stream":true,"stream":1}"#,
            r#"{"messages":[],"messages":{"content":[]}}"#,
            r#"{"messages":{"0":{"content":[{"type":"image"}]}}}"#,
            r#"{"tools":[],"tools":[1]}"#,
            r#"{"metadata":{"user_id":"u","user_id":7}}"#,
            r#"{"metadata":[{"user_id":"u"}]}"#,
            r#"{"messages":[{"content":[{"content":{"type":"image"}}]}]}"#,
            r#"{"messages":[{"content":[[{"type":"image"}]]}]}"#,
            r#"{"system":"caf\u00e9 \ud83d\ude00","messages":[{"content":"x","data":"skipped"}]}"#,
            r#"{"system":"\ud800"}"#,
            r#"{"temperature":1e400}"#,
            r#"{"metadata":{"other":1e400,"user_id":"u"}}"#,
            r#"{"model":{"x":"\ud800"}}"#,
            "{\"model\":\"a\u{1}\"}",
        ] {
            agree(body.as_bytes());
        }
        // A member named twice inside: the last counts for what it is, both for the characters.
        for body in [
            r#"{"messages":[{"content":[{"type":"image","type":"text"}]}]}"#,
            r#"{"messages":[{"content":[{"type":"text","type":"image"}]}]}"#,
            r#"{"messages":[{"content":[{"type":"image"}],"content":"text"}]}"#,
            r#"{"messages":[{"content":[{"content":[{"type":"image"}],"content":[]}]}]}"#,
        ] {
            agree_as(body.as_bytes(), false);
        }
        let twice = MessagesBody::parse(br#"{"system":[{"text":"ab","text":"cde"}]}"#).unwrap();
        assert_eq!(twice.text_chars(), 5);
        agree(b"{\"system\":\"\xff\"}");
        agree(b"{\"other\":\"\xc3\x28\"}");
    }

    #[test]
    fn nesting_past_the_parsers_limit_fails_as_a_value_did() {
        let deep = format!("{{\"messages\":{}{}}}", "[".repeat(200), "]".repeat(200));
        agree(deep.as_bytes());
        assert!(MessagesBody::parse(deep.as_bytes()).is_err());
    }
}
