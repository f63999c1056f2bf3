//! The chat door's read of a body: walked for its facts when it may pass through
//! ([`chat_walk`]), else parsed into the same `Value` and checks as [`ChatRequest::parse`], with
//! where the top-level `model` lies, so an OpenAI pass-through splices it there instead of
//! scanning the body again (perf: 22 µs of an agent's 33 kB, natively).

use crate::canonical::{ChatFacts, ChatRequest};
use crate::endpoints::chat_walk::{self, RAW_VALUE_TOKEN};
use crate::http::error::ApiError;
use crate::providers::splice::{Key, Places, Span};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::cell::OnceCell;
use std::fmt;

/// A chat request as the door read it: its facts, where its `model` lies, and the typed request,
/// built from the body the first time a step asks for it (a translation or the cache).
pub struct ChatRead<'a> {
    pub facts: ChatFacts,
    /// `None` when the body was read the plain way.
    pub spans: Option<Vec<Span>>,
    body: &'a [u8],
    chat: OnceCell<ChatRequest>,
}

impl<'a> ChatRead<'a> {
    /// Walked first when `walk`; otherwise, or when the walk is not sure, parsed, and the parse's
    /// error is the door's.
    pub fn new(body: &'a [u8], walk: bool) -> Result<Self, ApiError> {
        if let Some((facts, spans)) = walk.then(|| chat_walk::walk(body)).flatten() {
            return Ok(ChatRead { facts, spans: Some(spans), body, chat: OnceCell::new() });
        }
        let (chat, spans) = read(body)?;
        Ok(ChatRead { facts: ChatFacts::of(&chat), spans, body, chat: OnceCell::from(chat) })
    }

    /// The typed request. A walked body parses: the walk answers only for those.
    pub fn chat(&self) -> &ChatRequest {
        self.chat.get_or_init(|| {
            ChatRequest::parse(self.body).unwrap_or_else(|e| {
                log_gap(&e);
                ChatRequest::default()
            })
        })
    }
}

/// The walk answered for a body the parse refuses: a gap in the walk, logged so it is found.
fn log_gap(error: &ApiError) {
    #[cfg(target_arch = "wasm32")]
    worker::console_error!("{}", serde_json::json!({"event": "chat_walk_gap", "error": error.message}));
    #[cfg(not(target_arch = "wasm32"))]
    let _ = error;
}

/// The request and, when the placed read took the body, where its `model` values lie.
pub fn read(body: &[u8]) -> Result<(ChatRequest, Option<Vec<Span>>), ApiError> {
    if let Ok(top) = serde_json::from_slice::<Top>(body) {
        if let Some(spans) = top.places.spans(body) {
            return Ok((ChatRequest::from_json(Value::Object(top.map))?, Some(spans)));
        }
    }
    // Anything the placed read refuses (not an object, bad JSON, a nested `model`) is read the
    // plain way, whose errors are the door's.
    Ok((ChatRequest::parse(body)?, None))
}

/// A top-level object as the `Value` serde_json makes of it, each `model` read through [`Places`].
struct Top {
    map: Map<String, Value>,
    places: Places,
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = Top;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Top, A::Error> {
                let mut top = Top { map: Map::new(), places: Places::default() };
                while let Some(key) = access.next_key::<String>()? {
                    if key == RAW_VALUE_TOKEN {
                        return Err(de::Error::custom("read the plain way"));
                    }
                    let value =
                        if key == "model" { top.places.read(&mut access, Key::Model)? } else { access.next_value()? };
                    // As `Value` does: a later duplicate replaces the value and keeps the first place.
                    top.map.insert(key, value);
                }
                Ok(top)
            }
        }
        d.deserialize_map(TopVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::odd_json::odd_values;
    use crate::providers::splice::{splice_model, splice_spans};
    use serde_json::json;

    fn rich() -> Value {
        json!({
            "model": "gpt-4o", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}}}],
            "tool_choice": "auto", "max_tokens": 64, "stream": false, "stream_options": null, "user": "u", "n": 1,
            "metadata": {"k": "v"}, "vendor_thing": [1, {"x": 2}]
        })
    }

    /// The same request or the same error as the plain parse, and the same splice as the scan's.
    fn agree(body: &[u8]) {
        let plain = ChatRequest::parse(body);
        let placed = read(body);
        match (&plain, &placed) {
            (Ok(p), Ok((r, spans))) => {
                assert_eq!(p, r, "{}", String::from_utf8_lossy(body));
                if let Some(spans) = spans {
                    let by_scan = splice_model(body, "m\u{e9}\"x");
                    let by_spans = splice_spans(body, spans, "m\u{e9}\"x", None);
                    assert_eq!(by_scan.ok(), by_spans.ok(), "{}", String::from_utf8_lossy(body));
                }
            }
            (Err(p), Err(r)) => assert_eq!(p, r, "{}", String::from_utf8_lossy(body)),
            _ => panic!("{plain:?} against {:?} for {}", placed.map(|p| p.0), String::from_utf8_lossy(body)),
        }
    }

    #[test]
    fn the_placed_read_agrees_with_the_plain_parse_for_every_odd_top_level_member() {
        let base = rich();
        let text = base.to_string();
        agree(text.as_bytes());
        let keys: Vec<String> = base.as_object().unwrap().keys().cloned().collect();
        let mut checked = 0;
        for key in keys.iter().chain([&"model".to_string(), &"new".to_string()]) {
            for odd in odd_values() {
                // The member replaced in place, and the member sent a second time at the end.
                let mut map = base.as_object().unwrap().clone();
                map.insert(key.clone(), Value::Null);
                let replaced =
                    Value::Object(map).to_string().replacen(&format!("\"{key}\":null"), &format!("\"{key}\":{odd}"), 1);
                let twice = format!("{},\"{key}\":{odd}}}", &text[..text.len() - 1]);
                for body in [replaced, twice] {
                    agree(body.as_bytes());
                    checked += 1;
                }
            }
        }
        assert!(checked > 300, "{checked}");
    }

    #[test]
    fn bodies_that_are_not_plain_objects_get_the_plain_errors() {
        let bodies: [&[u8]; 12] = [
            b"", b"[]", b"\"x\"", b"{", b"{\"model\":\"a\"} x", b"{\"model\":\"a\",}", b"\xff",
            b"{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
            b" {\"model\" : \"a\" , \"messages\" : [ {\"role\":\"user\",\"content\":\"hi\"} ] } ",
            b"{\"$serde_json::private::RawValue\":\"{}\"}",
            // `Value` reads a first member of this name as the JSON text in its string: a whole request.
            br#"{"$serde_json::private::RawValue":"{\"model\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"}"#,
            br#"{"model":"a","messages":[{"role":"user","content":"hi"}],"$serde_json::private::RawValue":{"a":1}}"#,
        ];
        for body in bodies {
            agree(body);
        }
    }

    #[test]
    fn a_plain_body_is_placed_and_spliced_where_its_model_lies() {
        let body = br#"{ "model" : "gpt-4o", "messages":[{"role":"user","content":"hi"}], "model":"b"}"#;
        let (req, spans) = read(body).unwrap();
        assert_eq!(req.model, "b");
        let spans = spans.expect("placed");
        assert_eq!(spans.len(), 2);
        assert_eq!(
            splice_spans(body, &spans, "x", None).unwrap(),
            br#"{ "model" : "x", "messages":[{"role":"user","content":"hi"}], "model":"x"}"#
        );
    }
}
