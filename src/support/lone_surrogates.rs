//! Vendor JSON that is legal but that a Rust string cannot hold: a lone UTF-16 surrogate escape
//! (`"\ud800"`, which models do emit when they split an emoji). serde_json refuses it, which used to
//! drop a stream's delta silently or turn a whole answer into a 502. The text is parsed as is
//! first; only when that fails are lone surrogates replaced by U+FFFD (`\ufffd`, the same six bytes)
//! and the parse retried, so well-formed answers cost nothing extra. Each repair is logged.

use serde::de::DeserializeOwned;

/// Parses vendor JSON; `what` names it in the log line written when a repair was needed.
pub fn parse<T: DeserializeOwned>(text: &str, what: &str) -> serde_json::Result<T> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) => match replace(text) {
            Some((fixed, count)) => {
                let parsed = serde_json::from_str(&fixed)?;
                crate::support::log::info(serde_json::json!({
                    "event": "lone_surrogate_replaced", "in": what, "count": count,
                }));
                Ok(parsed)
            }
            None => Err(e),
        },
    }
}

/// [`parse`] for bytes. `Ok` only for bytes that are UTF-8, so a caller may pass them on as text
/// unchecked; serde_json's error says where they go wrong.
pub fn parse_slice<T: DeserializeOwned>(bytes: &[u8], what: &str) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text, what),
        Err(_) => Err(serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .err()
            .unwrap_or_else(|| serde::de::Error::custom("the text is not UTF-8"))),
    }
}

/// The text with every `\uD800`–`\uDFFF` escape that is not half of a valid pair replaced by
/// `\ufffd`, and how many were; `None` when there is none. Escaped backslashes are respected.
pub fn replace(text: &str) -> Option<(String, usize)> {
    let bytes = text.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut count = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = escape_at(bytes, i) else {
            i += 2; // any other escape, `\\` included, is two bytes
            continue;
        };
        let high = (0xD800..0xDC00).contains(&unit);
        let paired = high && escape_at(bytes, i + 6).is_some_and(|low| (0xDC00..0xE000).contains(&low));
        if paired {
            i += 12;
        } else if (0xD800..0xE000).contains(&unit) {
            out.get_or_insert_with(|| bytes.to_vec())[i..i + 6].copy_from_slice(b"\\ufffd");
            count += 1;
            i += 6;
        } else {
            i += 6;
        }
    }
    // Only ASCII bytes were swapped for ASCII bytes, so the text is still UTF-8.
    out.and_then(|b| String::from_utf8(b).ok()).map(|s| (s, count))
}

/// The code unit of a `\uXXXX` escape starting at `at`, if there is one.
fn escape_at(bytes: &[u8], at: usize) -> Option<u32> {
    let hex = bytes.get(at..at + 6)?;
    if hex[0] != b'\\' || hex[1] != b'u' {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn lone_halves_are_replaced_and_pairs_kept() {
        let (fixed, n) = replace(r#"{"t":"a\ud800b \uDC00 \ud83d\ude00 \ud83d"}"#).unwrap();
        assert_eq!(fixed, r#"{"t":"a\ufffdb \ufffd \ud83d\ude00 \ufffd"}"#);
        assert_eq!(n, 3);
        let v: Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(v["t"], "a\u{fffd}b \u{fffd} 😀 \u{fffd}");
    }

    #[test]
    fn nothing_to_do_is_none() {
        for text in [r#"{"t":"plain é 😀 \u00e9 \ud83d\ude00"}"#, r#"{"t":"\\ud800 is text"}"#, r#""\"#, r#""\u12"#, ""]
        {
            assert_eq!(replace(text), None, "{text}");
        }
    }

    #[test]
    fn an_escaped_backslash_is_not_an_escape() {
        let (fixed, n) = replace(r#"["\\\ud800", "\\ud800"]"#).unwrap();
        assert_eq!((fixed.as_str(), n), (r#"["\\\ufffd", "\\ud800"]"#, 1));
    }

    #[test]
    fn parse_repairs_only_what_serde_refuses() {
        let v: Value = parse(r#"{"delta":{"text":"Hi\ud800!"}}"#, "test").unwrap();
        assert_eq!(v["delta"]["text"], "Hi\u{fffd}!");
        let v: Value = parse_slice(br#"{"t":"\ud83d\ude00"}"#, "test").unwrap();
        assert_eq!(v["t"], "😀");
        assert!(parse::<Value>(r#"{"t":"cut"#, "test").is_err(), "other errors stay errors");
        assert!(parse_slice::<Value>(b"{\"t\":\"\xff\"}", "test").is_err());
        // Even where nothing is read, bytes that are not UTF-8 are refused: callers pass them on as text.
        for bad in [&b"{\"t\":\"\xff\",\"u\":1}"[..], b"{\"t\":1}\xff", b"{\"\xc3\":1}", b"[\"\xed\xa0\x80\"]"] {
            let err = parse_slice::<serde::de::IgnoredAny>(bad, "test").unwrap_err();
            assert!(!err.to_string().is_empty());
        }
    }
}
