//! A vendor's `usage` object read straight into the counts billing needs, by the rules a
//! `serde_json::Value` lookup follows: a count is a non-negative integer (anything else is absent),
//! a member named twice counts by its last value, and a member that is not an object has no counts.
//! perf: building the `Value` tree of a chat answer's usage (two nested maps, nine keys) was about
//! 40 % of reading the answer in the bench profile.

use crate::support::json_view::{members, not_an_object, Count, MemberOf};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// Where a count is read from: a member of the usage object, or a member of one of its objects.
type Path = (&'static str, Option<&'static [&'static str; 1]>);

/// Counts a schema reads, at most this many.
const MAX_COUNTS: usize = 6;

/// A schema's member names, in its order (what [`members`] looks names up in).
const fn names<const N: usize>(paths: &[Path; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = paths[i].0;
        i += 1;
    }
    out
}

/// The counts a `usage` object carries, in its schema's order; `None` where it has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    values: [Option<u64>; MAX_COUNTS],
    /// Whether the usage was an object at all.
    object: bool,
}

/// OpenAI's (and the compatible vendors') counts.
const OPENAI: [Path; 5] = [
    ("prompt_tokens", None),
    ("completion_tokens", None),
    ("prompt_tokens_details", Some(&["cached_tokens"])),
    // DeepSeek's name for its context-cache hits.
    ("prompt_cache_hit_tokens", None),
    ("completion_tokens_details", Some(&["reasoning_tokens"])),
];

const OPENAI_NAMES: [&str; 5] = names(&OPENAI);

/// The counts an OpenAI-style `usage` object carries; `None` where it has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenaiCounts(Counts);

impl OpenaiCounts {
    pub fn prompt_tokens(&self) -> Option<u64> {
        self.0.values[0]
    }
    pub fn completion_tokens(&self) -> Option<u64> {
        self.0.values[1]
    }
    /// `prompt_tokens_details.cached_tokens`.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.0.values[2]
    }
    pub fn prompt_cache_hit_tokens(&self) -> Option<u64> {
        self.0.values[3]
    }
    /// `completion_tokens_details.reasoning_tokens`.
    pub fn reasoning_tokens(&self) -> Option<u64> {
        self.0.values[4]
    }
}

impl<'de> Deserialize<'de> for OpenaiCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CountsVisitor(&OPENAI, &OPENAI_NAMES)).map(OpenaiCounts)
    }
}

/// Anthropic's counts.
const ANTHROPIC: [Path; 6] = [
    ("input_tokens", None),
    ("output_tokens", None),
    ("cache_read_input_tokens", None),
    ("cache_creation_input_tokens", None),
    ("cache_creation", Some(&["ephemeral_1h_input_tokens"])),
    ("output_tokens_details", Some(&["thinking_tokens"])),
];

const ANTHROPIC_NAMES: [&str; 6] = names(&ANTHROPIC);

/// The counts an Anthropic `usage` object carries; `None` where it has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnthropicCounts(Counts);

impl AnthropicCounts {
    /// Whether the usage was an object (anything else carries nothing, and changes nothing).
    pub fn is_object(&self) -> bool {
        self.0.object
    }
    pub fn input_tokens(&self) -> Option<u64> {
        self.0.values[0]
    }
    pub fn output_tokens(&self) -> Option<u64> {
        self.0.values[1]
    }
    pub fn cache_read_input_tokens(&self) -> Option<u64> {
        self.0.values[2]
    }
    pub fn cache_creation_input_tokens(&self) -> Option<u64> {
        self.0.values[3]
    }
    /// `cache_creation.ephemeral_1h_input_tokens`.
    pub fn ephemeral_1h_input_tokens(&self) -> Option<u64> {
        self.0.values[4]
    }
    /// `output_tokens_details.thinking_tokens`.
    pub fn thinking_tokens(&self) -> Option<u64> {
        self.0.values[5]
    }
}

impl AnthropicCounts {
    /// The counts of a `usage` already parsed into a `Value`.
    pub fn of(usage: &serde_json::Value) -> AnthropicCounts {
        AnthropicCounts::deserialize(usage).unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for AnthropicCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CountsVisitor(&ANTHROPIC, &ANTHROPIC_NAMES)).map(AnthropicCounts)
    }
}

/// The Responses API's counts.
const RESPONSES: [Path; 4] = [
    ("input_tokens", None),
    ("output_tokens", None),
    ("input_tokens_details", Some(&["cached_tokens"])),
    ("output_tokens_details", Some(&["reasoning_tokens"])),
];

const RESPONSES_NAMES: [&str; 4] = names(&RESPONSES);

/// The counts a Responses `usage` object carries; `None` where it has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponsesCounts(Counts);

impl ResponsesCounts {
    pub fn input_tokens(&self) -> Option<u64> {
        self.0.values[0]
    }
    pub fn output_tokens(&self) -> Option<u64> {
        self.0.values[1]
    }
    /// `input_tokens_details.cached_tokens`.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.0.values[2]
    }
    /// `output_tokens_details.reasoning_tokens`.
    pub fn reasoning_tokens(&self) -> Option<u64> {
        self.0.values[3]
    }
}

impl<'de> Deserialize<'de> for ResponsesCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CountsVisitor(&RESPONSES, &RESPONSES_NAMES)).map(ResponsesCounts)
    }
}

/// An answer's (or event's) `usage` member read as `T`, the rest skipped; `T::default()` when
/// there is none or the value is not an object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageOf<T>(pub T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for UsageOf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MemberOf::<T>::new(&["usage"])).map(UsageOf)
    }
}

/// A `usage` value read by its schema.
struct CountsVisitor(&'static [Path], &'static [&'static str]);

impl<'de> Visitor<'de> for CountsVisitor {
    type Value = Counts;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counts, A::Error> {
        let mut out = Counts { object: true, ..Counts::default() };
        let schema = self.0;
        // A member named again replaces what it gave before, as in a `Value`.
        members(&mut map, self.1, |i, map| {
            out.values[i] = match schema[i].1 {
                None => map.next_value::<Count>()?.0,
                Some(inner) => map.next_value_seed(MemberOf::<Count>::new(inner))?.0,
            };
            Ok(())
        })?;
        Ok(out)
    }

    not_an_object!(Counts::default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::usage::Usage;
    use serde_json::Value;

    /// What `Usage::from_openai` read from a whole `Value` before: the reference the counts must agree with.
    fn reference(usage: &Value) -> Option<Usage> {
        let obj = usage.as_object()?;
        let prompt = obj.get("prompt_tokens").and_then(Value::as_u64);
        let completion = obj.get("completion_tokens").and_then(Value::as_u64);
        if prompt.is_none() && completion.is_none() {
            return None;
        }
        let prompt = prompt.unwrap_or(0);
        let cached = usage
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .or_else(|| obj.get("prompt_cache_hit_tokens").and_then(Value::as_u64))
            .unwrap_or(0)
            .min(prompt);
        let reasoning =
            usage.pointer("/completion_tokens_details/reasoning_tokens").and_then(Value::as_u64).unwrap_or(0);
        Some(Usage {
            input: prompt - cached,
            output: completion.unwrap_or(0),
            cached_read: cached,
            cache_write: 0,
            reasoning,
            cache_write_1h: 0,
        })
    }

    /// The counts read from text, as a chat answer's are.
    fn from_text(text: &str) -> Option<Usage> {
        serde_json::from_str::<OpenaiCounts>(text).ok().and_then(Usage::from_openai_counts)
    }

    /// Every value a count may be sent as, valid or not (`None`: the member is left out).
    const SCALARS: [Option<&str>; 14] = [
        None,
        Some("0"),
        Some("7"),
        Some("123456"),
        Some("-3"),
        Some("2.5"),
        Some("4.0"),
        Some("1e3"),
        Some("18446744073709551615"),
        Some("18446744073709551616"),
        Some("\"9\""),
        Some("null"),
        Some("true"),
        Some("[1]"),
    ];

    /// A nested details object in each shape: its member in every scalar form, named twice, beside
    /// others, or the whole member not an object.
    fn details(member: &str) -> Vec<Option<String>> {
        let mut out: Vec<Option<String>> = [None, Some("null"), Some("5"), Some("[]"), Some("{}"), Some("\"x\"")]
            .iter()
            .map(|s| s.map(str::to_string))
            .collect();
        for v in SCALARS.iter().flatten() {
            out.push(Some(format!("{{\"{member}\":{v}}}")));
            out.push(Some(format!("{{\"audio_tokens\":{{\"{member}\":1}},\"{member}\":{v},\"other\":[{{}}]}}")));
        }
        out.push(Some(format!("{{\"{member}\":3,\"{member}\":\"x\"}}")));
        out.push(Some(format!("{{\"{member}\":\"x\",\"{member}\":4}}")));
        out
    }

    fn object(members: &[(&str, Option<&str>)]) -> String {
        let parts: Vec<String> = members.iter().filter_map(|(k, v)| v.map(|v| format!("\"{k}\":{v}"))).collect();
        format!("{{{}}}", parts.join(","))
    }

    fn agree(text: &str) {
        let value: Value = serde_json::from_str(text).unwrap();
        let want = reference(&value);
        assert_eq!(from_text(text), want, "from text: {text}");
        assert_eq!(Usage::from_openai(&value), want, "from a Value: {text}");
    }

    #[test]
    fn every_combination_of_top_level_counts_reads_as_a_value_does() {
        for p in SCALARS {
            for c in SCALARS {
                for hit in SCALARS {
                    agree(&object(&[
                        ("prompt_tokens", p),
                        ("total_tokens", Some("99")),
                        ("completion_tokens", c),
                        ("prompt_cache_hit_tokens", hit),
                    ]));
                }
            }
        }
    }

    #[test]
    fn every_shape_of_the_details_reads_as_a_value_does() {
        let prompt_details = details("cached_tokens");
        let completion_details = details("reasoning_tokens");
        for p in [None, Some("10"), Some("x")] {
            let p = p.map(|p| if p == "x" { "\"x\"" } else { p });
            for hit in [None, Some("4"), Some("-1")] {
                for pd in &prompt_details {
                    for cd in &completion_details {
                        agree(&object(&[
                            ("prompt_tokens", p),
                            ("completion_tokens", Some("8")),
                            ("prompt_tokens_details", pd.as_deref()),
                            ("completion_tokens_details", cd.as_deref()),
                            ("prompt_cache_hit_tokens", hit),
                        ]));
                    }
                }
            }
        }
    }

    #[test]
    fn a_member_named_twice_counts_by_its_last_value() {
        for text in [
            r#"{"prompt_tokens":5,"prompt_tokens":"x"}"#,
            r#"{"prompt_tokens":"x","prompt_tokens":6,"completion_tokens":1}"#,
            r#"{"completion_tokens":2,"completion_tokens":3}"#,
            r#"{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4},"prompt_tokens_details":null}"#,
            r#"{"prompt_tokens":9,"prompt_tokens_details":{},"prompt_tokens_details":{"cached_tokens":4}}"#,
            r#"{"prompt_tokens":9,"prompt_cache_hit_tokens":2,"prompt_cache_hit_tokens":-2}"#,
            r#"{"prompt_\u0074okens":9,"completion_tokens":1}"#,
        ] {
            agree(text);
        }
    }

    #[test]
    fn a_usage_that_is_not_an_object_has_no_counts() {
        for text in ["null", "5", "-5", "2.5", "\"usage\"", "true", "[]", "[{\"prompt_tokens\":1}]", "{}"] {
            agree(text);
            assert_eq!(from_text(text), None, "{text}");
        }
    }

    #[test]
    fn real_usage_objects_read_as_before() {
        for text in [
            r#"{"prompt_tokens":2,"completion_tokens":8,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}"#,
            r#"{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920},"completion_tokens_details":{"reasoning_tokens":192}}"#,
            r#"{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_cache_hit_tokens":8,"prompt_cache_miss_tokens":4}"#,
            r#"{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":null,"completion_tokens_details":null}"#,
        ] {
            agree(text);
            assert!(from_text(text).is_some(), "{text}");
        }
    }

    #[test]
    fn a_cut_or_garbled_usage_is_an_error_from_text() {
        for text in [r#"{"prompt_tokens":1"#, r#"{"prompt_tokens":}"#, "", "{\"prompt_tokens\":1,}"] {
            assert!(serde_json::from_str::<OpenaiCounts>(text).is_err(), "{text}");
        }
    }

    /// What `Usage::merge_anthropic` did with a whole `Value` before.
    fn anthropic_reference(into: &mut Usage, usage: &Value) -> bool {
        let Some(obj) = usage.as_object() else { return false };
        let mut any = false;
        let mut take = |key: &str, slot: &mut u64| {
            if let Some(n) = obj.get(key).and_then(Value::as_u64) {
                *slot = n;
                any = true;
            }
        };
        take("input_tokens", &mut into.input);
        take("output_tokens", &mut into.output);
        take("cache_read_input_tokens", &mut into.cached_read);
        take("cache_creation_input_tokens", &mut into.cache_write);
        if let Some(n) = usage.pointer("/cache_creation/ephemeral_1h_input_tokens").and_then(Value::as_u64) {
            into.cache_write_1h = n;
        }
        if let Some(n) = usage.pointer("/output_tokens_details/thinking_tokens").and_then(Value::as_u64) {
            into.reasoning = n;
        }
        into.cache_write_1h = into.cache_write_1h.min(into.cache_write);
        any
    }

    /// What `answer::usage_of` read from a whole `Value` before.
    fn responses_reference(usage: &Value) -> Option<Usage> {
        let input = usage.get("input_tokens").and_then(Value::as_u64);
        let output = usage.get("output_tokens").and_then(Value::as_u64);
        if input.is_none() && output.is_none() {
            return None;
        }
        let input = input.unwrap_or(0);
        let cached =
            usage.pointer("/input_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0).min(input);
        Some(Usage {
            input: input - cached,
            output: output.unwrap_or(0),
            cached_read: cached,
            cache_write: 0,
            reasoning: usage.pointer("/output_tokens_details/reasoning_tokens").and_then(Value::as_u64).unwrap_or(0),
            cache_write_1h: 0,
        })
    }

    /// A usage merged into one that already holds counts, both ways.
    fn anthropic_agree(text: &str) {
        let value: Value = serde_json::from_str(text).unwrap();
        let before = Usage { input: 1, output: 2, cached_read: 3, cache_write: 40, reasoning: 5, cache_write_1h: 6 };
        let (mut want, mut got, mut got_value) = (before, before, before);
        let want_any = anthropic_reference(&mut want, &value);
        let counts = serde_json::from_str::<AnthropicCounts>(text).unwrap();
        assert_eq!((got.merge_anthropic_counts(counts), got), (want_any, want), "from text: {text}");
        assert_eq!((got_value.merge_anthropic(&value), got_value), (want_any, want), "from a Value: {text}");
        let mut fresh = Usage::default();
        let fresh_any = anthropic_reference(&mut fresh, &value);
        assert_eq!(Usage::from_anthropic(&value), fresh_any.then_some(fresh), "{text}");
    }

    #[test]
    fn every_anthropic_usage_merges_as_a_value_did() {
        let creation = details("ephemeral_1h_input_tokens");
        let thinking = details("thinking_tokens");
        for input in SCALARS {
            for output in [None, Some("15"), Some("-1"), Some("null")] {
                for cache_write in [None, Some("4"), Some("\"4\"")] {
                    for c in &creation {
                        agree_anthropic(input, output, cache_write, c.as_deref(), Some("{\"thinking_tokens\":3}"));
                    }
                    for t in &thinking {
                        agree_anthropic(
                            input,
                            output,
                            cache_write,
                            Some("{\"ephemeral_1h_input_tokens\":2}"),
                            t.as_deref(),
                        );
                    }
                }
            }
        }
        for text in ["null", "5", "[]", "\"x\"", "{}", r#"{"input_tokens":1,"input_tokens":null}"#] {
            anthropic_agree(text);
        }
    }

    fn agree_anthropic(
        input: Option<&str>,
        output: Option<&str>,
        write: Option<&str>,
        creation: Option<&str>,
        thinking: Option<&str>,
    ) {
        anthropic_agree(&object(&[
            ("input_tokens", input),
            ("cache_read_input_tokens", Some("9")),
            ("cache_creation_input_tokens", write),
            ("cache_creation", creation),
            ("output_tokens", output),
            ("output_tokens_details", thinking),
        ]));
    }

    #[test]
    fn every_responses_usage_reads_as_a_value_did() {
        let cached = details("cached_tokens");
        let reasoning = details("reasoning_tokens");
        for input in SCALARS {
            for output in [None, Some("15"), Some("-1"), Some("[]")] {
                for c in &cached {
                    for r in [None, Some("{\"reasoning_tokens\":3}"), Some("[]")] {
                        responses_agree(input, output, c.as_deref(), r);
                    }
                }
                for r in &reasoning {
                    responses_agree(input, output, Some("{\"cached_tokens\":2}"), r.as_deref());
                }
            }
        }
    }

    fn responses_agree(input: Option<&str>, output: Option<&str>, cached: Option<&str>, reasoning: Option<&str>) {
        let text = object(&[
            ("input_tokens", input),
            ("input_tokens_details", cached),
            ("output_tokens", output),
            ("output_tokens_details", reasoning),
            ("total_tokens", Some("1")),
        ]);
        let value: Value = serde_json::from_str(&text).unwrap();
        let counts = serde_json::from_str::<ResponsesCounts>(&text).unwrap();
        assert_eq!(crate::providers::responses::answer::usage_of_counts(counts), responses_reference(&value), "{text}");
    }

    #[test]
    fn a_usage_member_is_read_from_its_object_by_the_last_name() {
        let read =
            |text: &str| serde_json::from_str::<UsageOf<OpenaiCounts>>(text).map(|u| Usage::from_openai_counts(u.0));
        let want = |text: &str| Usage::from_openai(&serde_json::from_str::<Value>(text).unwrap()["usage"]);
        for text in [
            r#"{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4},"choices":[{"usage":1}]}"#,
            r#"{"usage":{"prompt_tokens":3},"usage":null}"#,
            r#"{"usage":null,"usage":{"completion_tokens":2}}"#,
            r#"{"choices":[]}"#,
            "[]",
            "7",
        ] {
            assert_eq!(read(text).unwrap(), want(text), "{text}");
        }
        assert!(read(r#"{"usage":{"prompt_tokens":3}"#).is_err());
    }
}
