//! Reading a few members of a JSON value without building it, by the rules a `serde_json::Value`
//! lookup follows: a member named twice counts by its last value, a lookup into anything but an
//! object finds nothing, a count is a non-negative integer. The rest is skipped, though read as a
//! `Value` parse reads it (strings decoded, numbers parsed), so what a `Value` parse refuses is
//! refused. perf: a `Value` tree is a map per object and a string per key and value, built and dropped.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::marker::PhantomData;

/// The visits of a visitor for which null and booleans are `$out`.
macro_rules! unit_bool_are {
    ($out:expr) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
}
pub(crate) use unit_bool_are;

/// The array visit of a visitor for which every array is `$out` (read as a `Value` parse reads it).
macro_rules! seq_is {
    ($out:expr) => {
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            serde::de::Visitor::visit_seq($crate::support::json_view::Skip, seq).map(|_| $out)
        }
    };
}
pub(crate) use seq_is;

/// The number visits of a visitor for which every number is `$out`.
macro_rules! numbers_are {
    ($out:expr) => {
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
}
pub(crate) use numbers_are;

/// The string visit of a visitor for which every string is `$out`.
macro_rules! text_is {
    ($out:expr) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
}
pub(crate) use text_is;

/// The object visit of a visitor for which every object is `$out`.
macro_rules! object_is {
    ($out:expr) => {
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            serde::de::Visitor::visit_map($crate::support::json_view::Skip, map).map(|_| $out)
        }
    };
}
pub(crate) use object_is;

/// The visits of a visitor for which every scalar (null, booleans, numbers, strings) is `$out`.
macro_rules! scalars_are {
    ($out:expr) => {
        $crate::support::json_view::numbers_are!($out);
        $crate::support::json_view::text_is!($out);
        $crate::support::json_view::unit_bool_are!($out);
    };
}
pub(crate) use scalars_are;

/// The visits of a visitor for which every value but an object is `$out`.
macro_rules! not_an_object {
    ($out:expr) => {
        $crate::support::json_view::scalars_are!($out);
        $crate::support::json_view::seq_is!($out);
    };
}
pub(crate) use not_an_object;

/// `Deserialize` for `$ty` (a `Default` struct) from an object's members named in `$names`:
/// `$fill` is given the struct, a member's index in `$names` and the map to read its value from
/// (see [`members`]); any other value is `$ty::default()`.
macro_rules! from_members {
    ($ty:ty, $names:expr, |$out:ident, $i:ident, $map:ident| $fill:expr) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("any value")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$ty, A::Error> {
                        let mut $out = <$ty>::default();
                        $crate::support::json_view::members(&mut map, &$names, |$i, $map| {
                            $fill;
                            Ok(())
                        })?;
                        Ok($out)
                    }
                    $crate::support::json_view::not_an_object!(<$ty>::default());
                }
                d.deserialize_any(V)
            }
        }
    };
}
pub(crate) use from_members;

/// Any value, read as a `Value` parse reads it and dropped. (`IgnoredAny` only scans: it lets
/// through what a `Value` parse refuses, such as invalid UTF-8 or a number out of range.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }

    scalars_are!(Skip);
}

/// Reads an object's members: `found` is called with the index in `names` of each member named
/// there (and reads its value from `map`); every other member's value is skipped.
pub fn members<'de, A, F>(map: &mut A, names: &'static [&'static str], mut found: F) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    F: FnMut(usize, &mut A) -> Result<(), A::Error>,
{
    while let Some(member) = map.next_key_seed(NameIn(names))? {
        match member {
            Some(i) => found(i, map)?,
            None => {
                map.next_value::<Skip>()?;
            }
        }
    }
    Ok(())
}

/// A member's name looked up in a list without being copied: its index, or `None`.
pub struct NameIn(pub &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for NameIn {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for NameIn {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|name| *name == s))
    }
}

/// A count: `Some` only for a non-negative integer, as `Value::as_u64` reads one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count(pub Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Count, E> {
                Ok(Count(Some(n)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(n).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Count, E> {
                Ok(Count(None))
            }
            text_is!(Count(None));
            unit_bool_are!(Count(None));
            seq_is!(Count(None));
            object_is!(Count(None));
        }
        d.deserialize_any(V)
    }
}

/// A string's characters counted, or `None` for any other value (`Value::as_str`'s rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Chars(pub Option<u64>);

impl<'de> Deserialize<'de> for Chars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextAs(|s: &str| s.chars().count() as u64)).map(Chars)
    }
}

/// A string mapped through `F` without being copied; `None` for any other value.
pub struct TextAs<T, F: FnOnce(&str) -> T>(pub F);

impl<'de, T, F: FnOnce(&str) -> T> DeserializeSeed<'de> for TextAs<T, F> {
    type Value = Option<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T, F: FnOnce(&str) -> T> Visitor<'de> for TextAs<T, F> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Option<T>, E> {
        Ok(Some((self.0)(s)))
    }

    numbers_are!(None);
    unit_bool_are!(None);
    seq_is!(None);
    object_is!(None);
}

/// One member of an object, read as `T` (`Value`'s `v[name]`): `T::default()` when the value is
/// not an object or has no such member.
pub struct MemberOf<T>(&'static [&'static str], PhantomData<T>);

impl<T> MemberOf<T> {
    /// `name` is a one-name list (`&["usage"]`), as [`members`] takes.
    pub fn new(name: &'static [&'static str; 1]) -> Self {
        MemberOf(name, PhantomData)
    }
}

impl<'de, T: Deserialize<'de> + Default> DeserializeSeed<'de> for MemberOf<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for MemberOf<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut out = T::default();
        members(&mut map, self.0, |_, map| {
            out = map.next_value::<T>()?;
            Ok(())
        })?;
        Ok(out)
    }

    not_an_object!(T::default());
}

/// A boolean, or `None` for any other value (`Value::as_bool`'s rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flag(pub Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Flag, E> {
                Ok(Flag(Some(b)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            seq_is!(Flag(None));
            numbers_are!(Flag(None));
            text_is!(Flag(None));
            object_is!(Flag(None));
        }
        d.deserialize_any(V)
    }
}

/// A string, copied, or `None` for any other value (`Value::as_str`'s rule).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text(pub Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextAs(str::to_string)).map(Text)
    }
}
