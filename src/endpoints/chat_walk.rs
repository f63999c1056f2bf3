//! The chat door's walk over a body's bytes, for a request it may pass through: the facts the
//! pipeline reads, and where `model` lies, without a `Value` of the messages or a `ChatRequest`.
//! perf: the door's read of an agent's 33 kB body fell from 117 to 36 µs, natively.
//!
//! The walk answers only for a body it is sure [`ChatRequest::parse`] accepts, with the facts
//! that request gives ([`ChatFacts::of`]). For anything else (a fault, a checked member named
//! twice, serde_json's raw-value key) it answers `None`, and the door parses the body: that
//! parse's request or error is the door's, as before. Members it does not count are read as a
//! `Value` (the top level's small ones, an image) or skipped as one is read.

use crate::canonical::facts::role_named;
use crate::canonical::{written_chars, ChatFacts, ChatRequest, Role};
use crate::providers::splice::{Key, Places, Span};
use crate::support::json_view::{scalars_are, NameIn};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::fmt;
use std::marker::PhantomData;

/// The key serde_json's `Value` reads as a raw value when it comes first; left to the plain read.
pub(crate) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// The facts of a body that `ChatRequest::parse` accepts, and its `model`'s places; `None` when
/// the walk is not sure.
pub fn walk(body: &[u8]) -> Option<(ChatFacts, Vec<Span>)> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = Top::deserialize(&mut de).ok()?;
    de.end().ok()?;
    let spans = top.places.spans(body)?;
    Some((top.facts()?, spans))
}

fn unsure<E: de::Error>() -> E {
    E::custom("the door parses this body")
}

/// The visitor boilerplate every walked value shares.
macro_rules! expecting {
    () => {
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a plain chat request's value")
        }
    };
}

/// `Deserialize` through `$visitor`, with `$how` (`deserialize_any`, `deserialize_map`, ...).
macro_rules! through {
    ($ty:ty, $how:ident, $visitor:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.$how($visitor)
            }
        }
    };
}

/// A body's top level: `model` (with its places), the messages' and tools' sums, the rest as read.
#[derive(Default)]
struct Top {
    places: Places,
    model: Option<Value>,
    messages: Option<Messages>,
    tools: Option<Option<Tools>>,
    /// Every other member, as the typed request's decode reads it.
    rest: Map<String, Value>,
}

impl Top {
    fn facts(self) -> Option<ChatFacts> {
        let Some(Value::String(model)) = self.model else { return None };
        let messages = self.messages.filter(|m| m.count > 0 && !model.is_empty())?;
        let tools = self.tools.flatten().unwrap_or_default();
        // The small members are checked and decoded as they always were, beside a minimal request.
        let mut rest = self.rest;
        rest.insert("model".into(), Value::from("m"));
        rest.insert("messages".into(), json!([{"role": "user", "content": ""}]));
        let rest = ChatRequest::from_json(Value::Object(rest)).ok()?;
        Some(ChatFacts {
            model,
            stream: rest.is_stream(),
            stream_options: rest.stream_options.is_some(),
            wants_usage: rest.wants_usage(),
            max_tokens: rest.max_tokens,
            max_completion_tokens: rest.max_completion_tokens,
            text_parts: messages.text_parts,
            // The minimal request's text is empty: what it counts is the response format's schema.
            text_chars: messages.chars + tools.chars + rest.text_chars(),
            messages: messages.count,
            choices: rest.choices(),
            tools: tools.count > 0 || messages.tool_use,
            json_mode: rest.needs_json(),
            vision: messages.vision,
            user: rest.user,
            metadata: rest.metadata,
        })
    }
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top;
    expecting!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut top = Top::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                RAW_VALUE_TOKEN => return Err(unsure()),
                "model" if top.model.is_none() => top.model = Some(top.places.read(&mut map, Key::Model)?),
                "messages" if top.messages.is_none() => top.messages = Some(map.next_value()?),
                "tools" if top.tools.is_none() => top.tools = Some(map.next_value()?),
                "model" | "messages" | "tools" => return Err(unsure()),
                _ => {
                    let value = map.next_value()?;
                    top.rest.insert(key, value);
                }
            }
        }
        Ok(top)
    }
}

through!(Top, deserialize_map, TopVisitor);

/// The messages' sums.
#[derive(Default)]
struct Messages {
    count: usize,
    chars: usize,
    tool_use: bool,
    vision: bool,
    text_parts: bool,
}

struct MessagesVisitor;

impl<'de> Visitor<'de> for MessagesVisitor {
    type Value = Messages;
    expecting!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
        let mut all = Messages::default();
        while let Some(m) = seq.next_element::<Message>()? {
            all.count += 1;
            all.chars += m.chars;
            all.tool_use |= m.tool_use;
            all.vision |= m.vision;
            all.text_parts |= m.text_parts;
        }
        Ok(all)
    }
}

through!(Messages, deserialize_seq, MessagesVisitor);

/// One message's facts.
#[derive(Default)]
struct Message {
    chars: usize,
    tool_use: bool,
    vision: bool,
    text_parts: bool,
}

const MESSAGE: &[&str] = &["role", "content", "name", "tool_call_id", "tool_calls"];

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;
    expecting!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut out = Message::default();
        let (mut role, mut content, mut call_id) = (None, None, false);
        members(&mut map, MESSAGE, |i, map| {
            match i {
                0 => role = Some(map.next_value::<RoleOf>()?.0),
                1 => content = map.next_value::<Option<Content>>()?,
                2 => out.chars += map.next_value::<Option<Chars>>()?.map_or(0, |c| c.0),
                3 => call_id = map.next_value::<Option<Chars>>()?.is_some(),
                _ => {
                    let calls = map.next_value::<Option<Calls>>()?.unwrap_or_default();
                    out.chars += calls.chars;
                    out.tool_use |= calls.count > 0;
                }
            }
            Ok(())
        })?;
        let role = role.ok_or_else(unsure)?;
        match content {
            Some(Content::Text(chars)) => out.chars += chars,
            Some(Content::Parts { chars, vision, text_only }) => {
                out.chars += chars;
                out.vision = vision;
                out.text_parts = text_only;
            }
            None if role != Role::Assistant => return Err(unsure()),
            None => {}
        }
        if role == Role::Tool {
            if !call_id {
                return Err(unsure());
            }
            out.tool_use = true;
        }
        Ok(out)
    }
}

through!(Message, deserialize_map, MessageVisitor);

/// A role's name.
struct RoleOf(Role);

struct RoleVisitor;

impl Visitor<'_> for RoleVisitor {
    type Value = RoleOf;
    expecting!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<RoleOf, E> {
        role_named(s).map(RoleOf).ok_or_else(unsure)
    }
}

through!(RoleOf, deserialize_str, RoleVisitor);

enum Content {
    Text(usize),
    Parts { chars: usize, vision: bool, text_only: bool },
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Content;
    expecting!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
        Ok(Content::Text(s.chars().count()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
        let (mut chars, mut vision, mut text_only) = (0, false, true);
        while let Some(part) = seq.next_element::<Part>()? {
            chars += part.text.unwrap_or(0);
            vision |= part.kind == Kind::Image;
            text_only &= part.kind == Kind::Text && part.text.is_some();
        }
        Ok(Content::Parts { chars, vision, text_only })
    }
}

through!(Content, deserialize_any, ContentVisitor);

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Text,
    Image,
    Other,
}

struct KindVisitor;

impl Visitor<'_> for KindVisitor {
    type Value = Kind;
    expecting!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Kind, E> {
        Ok(match s {
            "text" => Kind::Text,
            "image_url" => Kind::Image,
            _ => Kind::Other,
        })
    }
}

through!(Kind, deserialize_str, KindVisitor);

/// A content part: its kind and its text's characters.
struct Part {
    kind: Kind,
    text: Option<usize>,
}

const PART: &[&str] = &["type", "text", "image_url"];

struct PartVisitor;

impl<'de> Visitor<'de> for PartVisitor {
    type Value = Part;
    expecting!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Part, A::Error> {
        let (mut kind, mut text, mut image) = (None, None, false);
        members(&mut map, PART, |i, map| {
            match i {
                0 => kind = Some(map.next_value::<Kind>()?),
                1 => text = map.next_value::<Option<Chars>>()?.map(|c| c.0),
                _ => match map.next_value::<Option<Value>>()? {
                    Some(v) if image_url(&v) => image = true,
                    Some(_) => return Err(unsure()),
                    None => {}
                },
            }
            Ok(())
        })?;
        let kind = kind.ok_or_else(unsure)?;
        let complete = match kind {
            Kind::Text => text.is_some(),
            Kind::Image => image,
            Kind::Other => true,
        };
        complete.then_some(Part { kind, text }).ok_or_else(unsure)
    }
}

through!(Part, deserialize_map, PartVisitor);

/// An `image_url` as the decode takes it: an object with a string `url`, a `detail` string if any.
fn image_url(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        o.get("url").is_some_and(Value::is_string) && o.get("detail").is_none_or(|d| d.is_null() || d.is_string())
    })
}

/// A list's length and its elements' characters summed: a message's tool calls, the tools offered.
struct Counted<T> {
    count: usize,
    chars: usize,
    of: PhantomData<T>,
}

impl<T> Default for Counted<T> {
    fn default() -> Self {
        Counted { count: 0, chars: 0, of: PhantomData }
    }
}

/// An element a [`Counted`] sums: its characters.
trait Measured {
    fn chars(&self) -> usize;
}

struct CountedVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + Measured> Visitor<'de> for CountedVisitor<T> {
    type Value = Counted<T>;
    expecting!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Counted<T>, A::Error> {
        let mut all = Counted::default();
        while let Some(item) = seq.next_element::<T>()? {
            all.count += 1;
            all.chars += item.chars();
        }
        Ok(all)
    }
}

impl<'de, T: Deserialize<'de> + Measured> Deserialize<'de> for Counted<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(CountedVisitor(PhantomData))
    }
}

/// A message's tool calls: how many, and the characters of their names and arguments.
type Calls = Counted<Call>;

/// A tool call's characters (its function's name and arguments).
struct Call(usize);

impl Measured for Call {
    fn chars(&self) -> usize {
        self.0
    }
}

const CALL: &[&str] = &["id", "type", "function"];

struct CallVisitor;

impl<'de> Visitor<'de> for CallVisitor {
    type Value = Call;
    expecting!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Call, A::Error> {
        let (mut id, mut function_type, mut function) = (false, None, None);
        members(&mut map, CALL, |i, map| {
            match i {
                0 => id = map.next_value::<Option<Chars>>()?.is_some(),
                1 => function_type = map.next_value::<Option<IsFunction>>()?.map(|f| f.0),
                _ => function = map.next_value::<Option<CallFunction>>()?.map(|f| f.0),
            }
            Ok(())
        })?;
        match (id, function_type, function) {
            (true, Some(true), Some(chars)) => Ok(Call(chars)),
            (true, Some(false), chars) => Ok(Call(chars.unwrap_or(0))),
            _ => Err(unsure()),
        }
    }
}

through!(Call, deserialize_map, CallVisitor);

/// A tool call's `function`: the characters of its name and arguments, both required strings.
struct CallFunction(usize);

const CALL_FUNCTION: &[&str] = &["name", "arguments"];

struct CallFunctionVisitor;

impl<'de> Visitor<'de> for CallFunctionVisitor {
    type Value = CallFunction;
    expecting!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CallFunction, A::Error> {
        let mut found = [None; 2];
        members(&mut map, CALL_FUNCTION, |i, map| {
            found[i] = Some(map.next_value::<Chars>()?.0);
            Ok(())
        })?;
        match found {
            [Some(name), Some(arguments)] => Ok(CallFunction(name + arguments)),
            _ => Err(unsure()),
        }
    }
}

through!(CallFunction, deserialize_map, CallFunctionVisitor);

/// A `type` that must be a string: whether it is `function`.
struct IsFunction(bool);

struct IsFunctionVisitor;

impl Visitor<'_> for IsFunctionVisitor {
    type Value = IsFunction;
    expecting!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<IsFunction, E> {
        Ok(IsFunction(s == "function"))
    }
}

through!(IsFunction, deserialize_str, IsFunctionVisitor);

/// The tools offered: how many, and the characters of their functions' names, descriptions and
/// parameters (as compact JSON).
type Tools = Counted<Tool>;

/// One tool's characters.
struct Tool(usize);

impl Measured for Tool {
    fn chars(&self) -> usize {
        self.0
    }
}

const TOOL: &[&str] = &["type", "function"];

struct ToolVisitor;

impl<'de> Visitor<'de> for ToolVisitor {
    type Value = Tool;
    expecting!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tool, A::Error> {
        let (mut function_type, mut function) = (None, None);
        members(&mut map, TOOL, |i, map| {
            match i {
                0 => function_type = map.next_value::<Option<IsFunction>>()?.map(|f| f.0),
                _ => function = map.next_value::<Option<FunctionDef>>()?,
            }
            Ok(())
        })?;
        let function_type = function_type.ok_or_else(unsure)?;
        match function {
            // As the check takes a function tool's: a name, and parameters that are an object if any.
            Some(f) if function_type && (f.name == 0 || f.parameters.is_some_and(|(object, _)| !object)) => {
                Err(unsure())
            }
            Some(f) => Ok(Tool(f.name + f.description + f.parameters.map_or(0, |(_, chars)| chars))),
            None if function_type => Err(unsure()),
            None => Ok(Tool(0)),
        }
    }
}

through!(Tool, deserialize_map, ToolVisitor);

/// A tool's `function` as the decode takes it (a string `name`, a `description` string if any,
/// any `parameters`): its characters, and whether the parameters are an object.
struct FunctionDef {
    name: usize,
    description: usize,
    parameters: Option<(bool, usize)>,
}

const FUNCTION_DEF: &[&str] = &["name", "description", "parameters"];

struct FunctionDefVisitor;

impl<'de> Visitor<'de> for FunctionDefVisitor {
    type Value = FunctionDef;
    expecting!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FunctionDef, A::Error> {
        let (mut name, mut description, mut parameters) = (None, 0, None);
        let mut keys = Vec::new();
        members(&mut map, FUNCTION_DEF, |i, map| {
            match i {
                0 => name = Some(map.next_value::<Chars>()?.0),
                1 => description = map.next_value::<Option<Chars>>()?.map_or(0, |c| c.0),
                _ => parameters = map.next_value_seed(Written { keys: &mut keys })?,
            }
            Ok(())
        })?;
        let name = name.ok_or_else(unsure)?;
        Ok(FunctionDef { name, description, parameters })
    }
}

through!(FunctionDef, deserialize_map, FunctionDefVisitor);

/// A value's characters as compact JSON, as [`written_chars`] counts the `Value` a parse makes of
/// it, and whether it is an object; `None` for null. `keys` holds the hashes of the names of the
/// objects being read (nested ones above their parent's): a name twice in one object (or two names
/// of one hash) makes the walk unsure, since a `Value` keeps one.
struct Written<'k> {
    keys: &'k mut Vec<u64>,
}

impl<'de> DeserializeSeed<'de> for Written<'_> {
    type Value = Option<(bool, usize)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Written<'_> {
    type Value = Option<(bool, usize)>;
    expecting!();

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Some((false, if b { 4 } else { 5 })))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Some((false, digits(n))))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Some((false, digits(n.unsigned_abs()) + usize::from(n < 0))))
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Self::Value, E> {
        // serde_json's own float writer, as the `Value` is written.
        Ok(Some((false, written_chars(&Value::from(x)))))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Some((false, quoted_chars(s))))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut chars = 1;
        while let Some(item) = seq.next_element_seed(Written { keys: &mut *self.keys })? {
            chars += item.map_or(4, |(_, n)| n) + 1;
        }
        Ok(Some((false, chars.max(2))))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let start = self.keys.len();
        let mut chars = 1;
        while let Some((hash, name)) = map.next_key_seed(KeyChars)? {
            self.keys.push(hash);
            let value = map.next_value_seed(Written { keys: &mut *self.keys })?;
            chars += name + 1 + value.map_or(4, |(_, n)| n) + 1;
        }
        // Sorted once at the end, not searched per name: a hostile object of many names stays linear-log.
        let names = &mut self.keys[start..];
        names.sort_unstable();
        if names.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(unsure());
        }
        self.keys.truncate(start);
        Ok(Some((true, chars.max(2))))
    }
}

/// An object's member name: its hash and its characters written; the raw-value key makes the walk unsure.
struct KeyChars;

impl<'de> DeserializeSeed<'de> for KeyChars {
    type Value = (u64, usize);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyChars {
    type Value = (u64, usize);
    expecting!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        if s == RAW_VALUE_TOKEN {
            return Err(unsure());
        }
        // FNV-1a: a collision only sends the body to the parse.
        let hash = s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        Ok((hash, quoted_chars(s)))
    }
}

/// The decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// A string's characters as serde_json writes it: quoted, with `"`, `\` and control characters escaped.
fn quoted_chars(s: &str) -> usize {
    let escaped = |c: char| match c {
        '"' | '\\' | '\u{8}' | '\t' | '\n' | '\u{c}' | '\r' => 2,
        c if c < ' ' => 6,
        _ => 1,
    };
    2 + s.chars().map(escaped).sum::<usize>()
}

/// A string's characters.
struct Chars(usize);

struct CharsVisitor;

impl Visitor<'_> for CharsVisitor {
    type Value = Chars;
    expecting!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Chars, E> {
        Ok(Chars(s.chars().count()))
    }
}

through!(Chars, deserialize_str, CharsVisitor);

/// Reads an object whose members in `names` the walk checks: `found` reads the value of each; a
/// member named twice (a `Value` keeps the last, in the first's place) makes the walk unsure.
fn members<'de, A, F>(map: &mut A, names: &'static [&'static str], mut found: F) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    F: FnMut(usize, &mut A) -> Result<(), A::Error>,
{
    let mut seen = 0u32;
    while let Some(member) = map.next_key_seed(Name(names))? {
        match member {
            Some(i) if seen & (1 << i) != 0 => return Err(unsure()),
            Some(i) => {
                seen |= 1 << i;
                found(i, map)?;
            }
            None => {
                map.next_value::<Plain>()?;
            }
        }
    }
    Ok(())
}

/// A member's name: its index in the list, or `None`; the raw-value key makes the walk unsure.
struct Name(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Name {
    type Value = Option<usize>;
    expecting!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Option<usize>, E> {
        if s == RAW_VALUE_TOKEN {
            return Err(unsure());
        }
        NameIn(self.0).visit_str(s)
    }
}

/// Any value, read as a `Value` parse reads it and dropped; an object holding the raw-value key
/// (which a `Value` reads in its own way) makes the walk unsure, which `json_view::Skip` lets by.
struct Plain;

impl<'de> Visitor<'de> for Plain {
    type Value = Plain;
    expecting!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Plain, A::Error> {
        while seq.next_element::<Plain>()?.is_some() {}
        Ok(Plain)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Plain, A::Error> {
        while map.next_key_seed(Name(&[]))?.is_some() {
            map.next_value::<Plain>()?;
        }
        Ok(Plain)
    }

    scalars_are!(Plain);
}

through!(Plain, deserialize_any, Plain);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::chat_body;
    use crate::endpoints::odd_json::odd_values;
    use serde_json::json;

    /// A request using every member the walk looks into, in each of its shapes.
    fn rich() -> Value {
        json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "be brief", "name": "sys"},
                {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "hi é"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                    {"type": "input_audio", "input_audio": {"data": "AAAA"}, "text": "said"}]},
                {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                    {"id": "c2", "type": "custom", "custom": {"input": "x"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "function", "name": "f", "content": "legacy"},
                {"role": "assistant", "content": "done", "tool_calls": []}
            ],
            "tools": [
                {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"b": {"minimum": 1.5e3}, "a": {"enum": ["x\n", 1, null, true]}}}}},
                {"type": "function", "function": {"name": "g", "strict": true}},
                {"type": "custom", "custom": {"name": "c"}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": true}},
            "max_tokens": 64, "max_completion_tokens": 32, "n": 2, "stop": ["\n"], "seed": 7, "temperature": 0.5,
            "top_p": 1, "stream": true, "stream_options": {"include_usage": true}, "parallel_tool_calls": false,
            "user": "u", "metadata": {"k": "v"}, "vendor_thing": [1, {"x": 2}]
        })
    }

    /// The walk's answer is `None`, or the facts and places of the request the parse reads.
    fn agree(body: &str) -> bool {
        let Some((facts, spans)) = walk(body.as_bytes()) else { return false };
        let (chat, placed) =
            chat_body::read(body.as_bytes()).unwrap_or_else(|e| panic!("walked, refused {e:?}: {body}"));
        assert_eq!(facts, ChatFacts::of(&chat), "{body}");
        assert_eq!(Some(spans), placed, "{body}");
        true
    }

    /// Every object in `v` with its path (keys and indexes from the root).
    fn objects(v: &Value, at: Vec<Value>, out: &mut Vec<Vec<Value>>) {
        match v {
            Value::Object(map) => {
                out.push(at.clone());
                for (k, x) in map {
                    let mut next = at.clone();
                    next.push(Value::from(k.as_str()));
                    objects(x, next, out);
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    let mut next = at.clone();
                    next.push(Value::from(i));
                    objects(x, next, out);
                }
            }
            _ => {}
        }
    }

    fn object_at<'a>(v: &'a mut Value, at: &[Value]) -> &'a mut Map<String, Value> {
        let mut here = v;
        for step in at {
            here = match step {
                Value::String(k) => &mut here[k.as_str()],
                _ => &mut here[step.as_u64().unwrap() as usize],
            };
        }
        here.as_object_mut().unwrap()
    }

    #[test]
    fn the_walk_agrees_with_the_parse_wherever_a_member_is_odd_missing_or_named_twice() {
        let base = rich();
        assert!(agree(&base.to_string()), "the rich request is walked");
        let mut places = Vec::new();
        objects(&base, Vec::new(), &mut places);
        let (mut bodies, mut walked) = (0, 0);
        for at in &places {
            let keys: Vec<String> = object_at(&mut base.clone(), at).keys().cloned().collect();
            for key in keys.iter().map(String::as_str).chain(["new", "$serde_json::private::RawValue"]) {
                let mut removed = base.clone();
                object_at(&mut removed, at).shift_remove(key);
                let mut texts = vec![removed.to_string()];
                for odd in odd_values() {
                    // The member replaced in place (or added), and the member sent a second time.
                    let mut replaced = base.clone();
                    object_at(&mut replaced, at).insert(key.to_string(), Value::from("\u{1}odd"));
                    texts.push(replaced.to_string().replacen("\"\\u0001odd\"", &odd, 1));
                    let member = format!("{}:{odd}", Value::from(key));
                    let mut twice = base.clone();
                    object_at(&mut twice, at).insert("\u{1}twice".to_string(), Value::Null);
                    texts.push(twice.to_string().replacen("\"\\u0001twice\":null", &member, 1));
                    // Sent a second time before the first, so a raw-value key comes first too.
                    let mut first = base.clone();
                    let object = object_at(&mut first, at);
                    let rest = std::mem::take(object);
                    object.insert("\u{1}twice".to_string(), Value::Null);
                    object.extend(rest);
                    texts.push(first.to_string().replacen("\"\\u0001twice\":null", &member, 1));
                }
                for text in texts {
                    bodies += 1;
                    walked += usize::from(agree(&text));
                }
            }
        }
        assert!(bodies > 15_000 && walked > 5_000, "{walked} of {bodies} walked");
    }

    #[test]
    fn a_message_element_or_the_whole_list_replaced_agrees() {
        let base = rich();
        let n = base["messages"].as_array().unwrap().len();
        let mut walked = 0;
        for odd in odd_values() {
            for i in 0..n {
                let mut v = base.clone();
                v["messages"][i] = Value::from("\u{1}odd");
                walked += usize::from(agree(&v.to_string().replacen("\"\\u0001odd\"", &odd, 1)));
            }
            for list in ["messages", "tools"] {
                let mut v = base.clone();
                v[list] = Value::from("\u{1}odd");
                agree(&v.to_string().replacen("\"\\u0001odd\"", &odd, 1));
            }
        }
        assert!(walked > 0);
    }

    #[test]
    fn a_schema_counts_as_its_value_is_written() {
        let texts = [
            "null",
            "true",
            "false",
            "0",
            "7",
            "10",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "-9223372036854775808",
            "-9223372036854775809",
            "-0",
            "0.0",
            "-0.0",
            "1.5e3",
            "1E2",
            "0.1",
            "1e-7",
            "123456789.123456789",
            "2.5e300",
            r#""""#,
            r#""a\"b\\c""#,
            r#""\b\f\n\r\t\u0001\u001f\u007f""#,
            r#""é日本\ud83d\ude00""#,
            "[]",
            "[[]]",
            "[1,[2,{}],null]",
            "{}",
            r#"{"a":{}}"#,
            r#"{"type":"object","properties":{"b":{"minimum":1.5e3},"a\n":{"enum":["x\n",1,null,true]}},"required":[]}"#,
        ];
        for text in texts {
            let value: Value = serde_json::from_str(text).unwrap();
            let mut keys = Vec::new();
            let counted = Written { keys: &mut keys }.deserialize(&mut serde_json::Deserializer::from_str(text));
            let written = (!value.is_null()).then(|| (value.is_object(), written_chars(&value)));
            assert_eq!(counted.unwrap(), written, "{text}");
            assert!(keys.is_empty());
        }
        for twice in [r#"{"a":1,"a":1}"#, r#"{"x":{"a":1,"b":2,"a":3}}"#] {
            let counted = Written { keys: &mut Vec::new() }.deserialize(&mut serde_json::Deserializer::from_str(twice));
            assert!(counted.is_err(), "{twice}");
        }
    }

    #[test]
    fn layout_escaped_names_depth_and_wide_schemas_agree() {
        assert!(agree(&serde_json::to_string_pretty(&rich()).unwrap()), "a pretty-printed request is walked");
        // A checked name written with an escape is the same name: named twice.
        let escaped = r#"{"model":"m","messages":[{"role":"user","r\u006fle":"user","content":"hi"}]}"#;
        assert!(!agree(escaped));
        // serde_json's depth limit, reached inside a message and inside a tool's parameters.
        for n in 118..=130 {
            let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
            let mut v = rich();
            v["messages"][0]["x"] = Value::from("\u{1}odd");
            v["tools"][0]["function"]["parameters"]["properties"]["a"] = Value::from("\u{1}odd");
            let text = v.to_string();
            agree(&text.replacen("\"\\u0001odd\"", &deep, 1));
            agree(&text.replacen("\"\\u0001odd\"", "1", 1).replacen("\"\\u0001odd\"", &deep, 1));
        }
        // A schema of many names is walked (the check for a name twice is not a search per name).
        let mut v = rich();
        let wide: Map<String, Value> = (0..20_000).map(|i| (format!("k{i}"), Value::from(i))).collect();
        v["tools"][0]["function"]["parameters"]["properties"] = Value::Object(wide);
        let text = v.to_string();
        assert!(agree(&text));
        assert!(!agree(&text.replacen("\"k19999\":19999", "\"k19999\":19999,\"k7\":1", 1)));
    }

    #[test]
    fn bodies_that_are_not_plain_are_left_to_the_parse() {
        let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        assert!(agree(plain));
        for body in [
            "",
            "[]",
            "{",
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]} x"#,
            r#"{"model":"m","model":"n","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"hi","role":"user"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"\ud800"}]}"#,
            r#"{"$serde_json::private::RawValue":"{}","model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"hi","x":{"$serde_json::private::RawValue":"["}}]}"#,
            r#"{"model":"m","messages":[]}"#,
            r#"{"model":"","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":{"a":1},"messages":[{"role":"user","content":"hi"}]}"#,
        ] {
            assert!(!agree(body), "{body}");
        }
        // Not UTF-8, where the walk only skips.
        let mut bytes = br#"{"model":"m","messages":[{"role":"user","content":"hi","x":"#.to_vec();
        bytes.extend(b"\"\xff\"}]}");
        assert!(walk(&bytes).is_none());
    }
}
