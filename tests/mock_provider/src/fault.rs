//! Fault specs: `key` / `key=value` items from the model suffix, the
//! `x-mock-fault` header and the admin script, merged with later sources winning.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Status,
    EchoCredential,
    RetryAfter,
    RemainingRequests,
    RemainingTokens,
    ResetMs,
    LimitRequests,
    LimitTokens,
    Quota,
    ContextLength,
    ContentFilter,
    DelayFirstMs,
    DelayMs,
    CutAfter,
    StallAfter,
    ErrorAfter,
    PingMs,
    LingerMs,
    NoUsage,
    Malformed,
    LoneSurrogate,
    PadBytes,
    Chunked,
    Empty,
    Words,
    Cached,
    CacheWrite,
    Reasoning,
    Gzip,
    StringsOnly,
    ReasoningText,
}

enum Kind {
    Flag,
    Number { min: u64, max: u64 },
}

const ANY: Kind = Kind::Number { min: 0, max: u64::MAX / 2 };

const KEYS: &[(&str, Key, Kind)] = &[
    ("status", Key::Status, Kind::Number { min: 400, max: 599 }),
    // A 400 whose message repeats the credential as presented, as some vendors' errors do.
    ("echo_key", Key::EchoCredential, Kind::Flag),
    ("retry_after", Key::RetryAfter, ANY),
    ("remaining_requests", Key::RemainingRequests, ANY),
    ("remaining_tokens", Key::RemainingTokens, ANY),
    ("reset_ms", Key::ResetMs, ANY),
    ("limit_requests", Key::LimitRequests, ANY),
    ("limit_tokens", Key::LimitTokens, ANY),
    ("quota", Key::Quota, Kind::Flag),
    ("context_length", Key::ContextLength, Kind::Flag),
    ("content_filter", Key::ContentFilter, Kind::Flag),
    ("delay_first_ms", Key::DelayFirstMs, ANY),
    ("delay_ms", Key::DelayMs, ANY),
    ("cut_after", Key::CutAfter, ANY),
    ("stall_after", Key::StallAfter, ANY),
    ("error_after", Key::ErrorAfter, ANY),
    ("ping_ms", Key::PingMs, Kind::Number { min: 1, max: 60_000 }),
    ("linger_ms", Key::LingerMs, Kind::Number { min: 0, max: 120_000 }),
    ("no_usage", Key::NoUsage, Kind::Flag),
    ("malformed", Key::Malformed, Kind::Flag),
    // Legal JSON a Rust string cannot hold: `\ud800` after the reply's first word.
    ("lone_surrogate", Key::LoneSurrogate, Kind::Flag),
    // A heavy answer: this many filler bytes in a JSON body, or in SSE comments after the first content event.
    ("pad_bytes", Key::PadBytes, Kind::Number { min: 0, max: 512 * 1024 * 1024 }),
    // A JSON body without Content-Length, as vendors that compress or stream their bodies send it.
    ("chunked", Key::Chunked, Kind::Flag),
    ("empty", Key::Empty, Kind::Flag),
    // Capped so a typo cannot make the server allocate gigabytes of text.
    ("words", Key::Words, Kind::Number { min: 0, max: 100_000 }),
    ("cached", Key::Cached, ANY),
    ("cache_write", Key::CacheWrite, ANY),
    ("reasoning", Key::Reasoning, ANY),
    // Answers gzip-encoded when the request's Accept-Encoding allows it, as real vendors do.
    ("gzip", Key::Gzip, Kind::Flag),
    // DeepSeek's chat API: a message whose `content` is an array is refused with a 400.
    ("strings_only", Key::StringsOnly, Kind::Flag),
    // DeepSeek's reasoner: this many `reasoning_content` deltas stream before the answer's text.
    ("reasoning_text", Key::ReasoningText, Kind::Number { min: 0, max: 10_000 }),
];

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults(BTreeMap<Key, u64>);

impl Faults {
    /// Parses items separated by `sep`; blank items are skipped.
    pub fn parse(spec: &str, sep: char) -> Result<Faults, String> {
        let mut faults = Faults::default();
        for item in spec.split(sep).map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (item, None),
            };
            let Some((_, key, kind)) = KEYS.iter().find(|(n, _, _)| *n == name) else {
                return Err(format!("unknown fault key `{name}` in `{spec}` (known keys: {})", known_keys()));
            };
            let number = match (kind, value) {
                (Kind::Flag, None) => 1,
                (Kind::Flag, Some(_)) => return Err(format!("fault key `{name}` takes no value (in `{spec}`)")),
                (Kind::Number { .. }, None) => {
                    return Err(format!("fault key `{name}` needs a value like `{name}=N` (in `{spec}`)"))
                }
                (Kind::Number { min, max }, Some(v)) => match v.parse::<u64>() {
                    Ok(n) if (*min..=*max).contains(&n) => n,
                    _ => {
                        return Err(format!(
                            "fault key `{name}` needs a whole number in {min}..={max}, got `{v}` (in `{spec}`)"
                        ))
                    }
                },
            };
            faults.0.insert(*key, number);
        }
        Ok(faults)
    }

    /// Overlays `later` on top of `self`, key by key.
    pub fn merge(&mut self, later: &Faults) {
        self.0.extend(later.0.iter().map(|(k, v)| (*k, *v)));
    }

    pub fn get(&self, key: Key) -> Option<u64> {
        self.0.get(&key).copied()
    }

    pub fn has(&self, key: Key) -> bool {
        self.0.contains_key(&key)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Any key that asks for rate-limit headers on every response.
    pub fn wants_rate_limit_headers(&self) -> bool {
        [Key::RemainingRequests, Key::RemainingTokens, Key::ResetMs, Key::LimitRequests, Key::LimitTokens]
            .iter()
            .any(|k| self.has(*k))
    }
}

fn known_keys() -> String {
    KEYS.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Splits `gpt-4o+status=500` into the base model and its fault suffix.
pub fn split_model(model: &str) -> (&str, Option<&str>) {
    match model.split_once('+') {
        Some((base, spec)) => (base, Some(spec)),
        None => (model, None),
    }
}

/// Merges model suffix, then header, then scripted faults.
pub fn collect(model: &str, header: Option<&str>, scripted: Option<&Faults>) -> Result<Faults, String> {
    let mut faults = Faults::default();
    if let (_, Some(spec)) = split_model(model) {
        faults.merge(&Faults::parse(spec, '+').map_err(|e| format!("model name: {e}"))?);
    }
    if let Some(spec) = header {
        faults.merge(&Faults::parse(spec, ',').map_err(|e| format!("x-mock-fault header: {e}"))?);
    }
    if let Some(s) = scripted {
        faults.merge(s);
    }
    Ok(faults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags_and_numbers() {
        let f = Faults::parse("status=429, retry_after=2,no_usage", ',').unwrap();
        assert_eq!(f.get(Key::Status), Some(429));
        assert_eq!(f.get(Key::RetryAfter), Some(2));
        assert!(f.has(Key::NoUsage));
        assert!(!f.has(Key::Quota));
    }

    #[test]
    fn empty_items_are_ignored() {
        assert!(Faults::parse("", ',').unwrap().is_empty());
        assert!(Faults::parse(",,", ',').unwrap().is_empty());
    }

    #[test]
    fn rejects_typos_loudly() {
        let e = Faults::parse("statu=500", ',').unwrap_err();
        assert!(e.contains("unknown fault key `statu`"), "{e}");
        assert!(e.contains("status"), "{e}");
        assert!(Faults::parse("status=abc", ',').unwrap_err().contains("whole number"));
        assert!(Faults::parse("status=200", ',').is_err());
        assert!(Faults::parse("status", ',').is_err());
        assert!(Faults::parse("quota=1", ',').unwrap_err().contains("takes no value"));
        assert!(Faults::parse("words=-1", ',').is_err());
        assert!(Faults::parse("words=100001", ',').is_err());
    }

    #[test]
    fn splits_model_suffix() {
        assert_eq!(split_model("gpt-4o"), ("gpt-4o", None));
        assert_eq!(split_model("claude-x+delay_ms=50+cut_after=3"), ("claude-x", Some("delay_ms=50+cut_after=3")));
    }

    #[test]
    fn later_sources_win() {
        let scripted = Faults::parse("status=503", ',').unwrap();
        let f = collect("gpt+status=500+words=3", Some("status=429,retry_after=7"), Some(&scripted)).unwrap();
        assert_eq!(f.get(Key::Status), Some(503));
        assert_eq!(f.get(Key::RetryAfter), Some(7));
        assert_eq!(f.get(Key::Words), Some(3));
        let f = collect("gpt+status=500", Some("status=429"), None).unwrap();
        assert_eq!(f.get(Key::Status), Some(429));
    }

    #[test]
    fn collect_names_the_bad_source() {
        assert!(collect("gpt+bogus", None, None).unwrap_err().starts_with("model name:"));
        assert!(collect("gpt", Some("bogus"), None).unwrap_err().starts_with("x-mock-fault header:"));
    }

    #[test]
    fn rate_limit_overrides_are_detected() {
        assert!(!Faults::parse("status=500", ',').unwrap().wants_rate_limit_headers());
        assert!(Faults::parse("remaining_tokens=5", ',').unwrap().wants_rate_limit_headers());
    }
}
