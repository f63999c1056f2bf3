//! What the stream relay reads of an OpenAI chat chunk, and nothing more: whether it carries an
//! error, its usage, whether any choice finished, and whether every choice is only a preamble
//! (role, empty content). The rest of the chunk is skipped, though still checked as JSON, instead
//! of built into a `Value` tree. perf: building and dropping the tree (a map per object, a string
//! per value) was about a third of the wasm samples per streamed chunk.

use crate::canonical::usage_counts::OpenaiCounts;
use crate::support::json_view::scalars_are;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// A chunk as the relay sees it; only a JSON object is one.
#[derive(Debug, Default, PartialEq)]
pub struct ChunkView {
    /// `choices` when it is an array (anything else counts as no `choices`).
    pub choices: Option<Vec<ChoiceView>>,
    /// An `error` member that is not null.
    pub error: bool,
    /// A `usage` member that is not null, read for its counts.
    pub usage: Option<OpenaiCounts>,
}

/// One choice: whether it finished, and whether it is only a preamble (role or empty fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChoiceView {
    pub finished: bool,
    pub preamble: bool,
}

impl<'de> Deserialize<'de> for ChunkView {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ChunkVisitor)
    }
}

struct ChunkVisitor;

impl<'de> Visitor<'de> for ChunkVisitor {
    type Value = ChunkView;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a chat completion chunk object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChunkView, A::Error> {
        let mut view = ChunkView::default();
        // A repeated member: the last one counts, as in a `Value`.
        while let Some(key) = map.next_key::<Name>()? {
            match key {
                Name::Choices => view.choices = map.next_value::<Choices>()?.0,
                Name::Error => view.error = map.next_value::<NonNull>()?.0,
                Name::Usage => view.usage = map.next_value::<Option<OpenaiCounts>>()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(view)
    }
}

/// A member name the view looks for (at any level), or another.
enum Name {
    Choices,
    Error,
    Usage,
    FinishReason,
    Delta,
    Role,
    Other,
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Name, E> {
                Ok(match s {
                    "choices" => Name::Choices,
                    "error" => Name::Error,
                    "usage" => Name::Usage,
                    "finish_reason" => Name::FinishReason,
                    "delta" => Name::Delta,
                    "role" => Name::Role,
                    _ => Name::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// Any value; true unless it is null.
struct NonNull(bool);

impl<'de> Deserialize<'de> for NonNull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value: Option<IgnoredAny> = Deserialize::deserialize(d)?;
        Ok(NonNull(value.is_some()))
    }
}

/// `choices`: the array's choices, or `None` for any other value.
struct Choices(Option<Vec<ChoiceView>>);

impl<'de> Deserialize<'de> for Choices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Choices;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Choices, A::Error> {
                let mut out = Vec::new();
                while let Some(choice) = seq.next_element::<ChoiceView>()? {
                    out.push(choice);
                }
                Ok(Choices(Some(out)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Choices, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Choices(None))
            }
            scalars_are!(Choices(None));
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for ChoiceView {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChoiceView;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChoiceView, A::Error> {
                let (mut finish, mut delta_empty) = (false, true);
                while let Some(key) = map.next_key::<Name>()? {
                    match key {
                        Name::FinishReason => finish = map.next_value::<NonNull>()?.0,
                        Name::Delta => delta_empty = map.next_value::<Delta>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(ChoiceView { finished: finish, preamble: !finish && delta_empty })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ChoiceView, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| NOT_AN_OBJECT)
            }
            scalars_are!(NOT_AN_OBJECT);
        }
        d.deserialize_any(V)
    }
}

/// A choice that is not an object: nothing finished, nothing shown.
const NOT_AN_OBJECT: ChoiceView = ChoiceView { finished: false, preamble: true };

/// `delta`: true when it shows nothing (every member is `role`, null, `""` or `[]`), or when it
/// is not an object at all. (A member named twice counts twice, where a `Value` keeps the last.)
struct Delta(bool);

impl<'de> Deserialize<'de> for Delta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Delta;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Delta, A::Error> {
                let mut empty = true;
                while let Some(key) = map.next_key::<Name>()? {
                    let blank = map.next_value::<Blank>()?.0;
                    empty &= matches!(key, Name::Role) || blank;
                }
                Ok(Delta(empty))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Delta, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| Delta(true))
            }
            scalars_are!(Delta(true));
        }
        d.deserialize_any(V)
    }
}

/// Whether a value shows nothing: null, `""` or `[]`.
struct Blank(bool);

impl<'de> Deserialize<'de> for Blank {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Blank;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Blank, E> {
                Ok(Blank(true))
            }
            fn visit_none<E: de::Error>(self) -> Result<Blank, E> {
                Ok(Blank(true))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Blank, E> {
                Ok(Blank(s.is_empty()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Blank, A::Error> {
                let mut empty = true;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    empty = false;
                }
                Ok(Blank(empty))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Blank, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Blank(false))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Blank, E> {
                Ok(Blank(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Blank, E> {
                Ok(Blank(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Blank, E> {
                Ok(Blank(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Blank, E> {
                Ok(Blank(false))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
