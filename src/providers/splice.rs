//! The model name spliced into a JSON body without re-encoding anything else: how every door
//! that speaks its deployment's own format (chat completions to OpenAI, Messages to Anthropic,
//! Responses to OpenAI) forwards the client's bytes, so key order, unknown fields, thinking
//! signatures and `cache_control` reach the vendor exactly as the client wrote them. An output
//! cap above the deployment's declared `max_output` is spliced down the same way.

use crate::config::routes::Deployment;
use crate::http::codes;
use crate::http::error::ApiError;
use serde::de::{self, MapAccess};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// A top-level integer field held to a ceiling: a larger value is replaced by `most`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceiling<'a> {
    pub field: &'a str,
    pub most: u64,
}

impl<'a> Ceiling<'a> {
    /// `field` held to the deployment's declared `max_output`, when it declares one.
    pub fn max_output(dep: &Deployment, field: &'a str) -> Option<Ceiling<'a>> {
        dep.capabilities.max_output.map(|most| Ceiling { field, most: u64::from(most) })
    }
}

/// The splice at the places the door's read found, or found by scanning the body when it has none.
pub fn splice_at(
    body: &[u8],
    spans: Option<&[Span]>,
    model: &str,
    ceiling: Option<Ceiling>,
) -> Result<Vec<u8>, ApiError> {
    match spans {
        Some(spans) => splice_spans(body, spans, model, ceiling),
        None => splice_model_within(body, model, ceiling),
    }
}

/// Replaces the value of every top-level `"model"` key with `model`, leaving every other byte as
/// it was. The body must be a JSON object whose `model` is a string.
pub fn splice_model(body: &[u8], model: &str) -> Result<Vec<u8>, ApiError> {
    splice_model_within(body, model, None)
}

/// As [`splice_model`], and every top-level `ceiling.field` that is an integer above
/// `ceiling.most` becomes `ceiling.most` (any other value travels as sent, for the vendor to judge).
pub fn splice_model_within(body: &[u8], model: &str, ceiling: Option<Ceiling>) -> Result<Vec<u8>, ApiError> {
    let spans = top_level_spans(body, ceiling.map(|c| c.field), false).ok_or_else(|| {
        ApiError::invalid_request(codes::INVALID_JSON, "The request body is not a valid JSON object.")
    })?;
    splice_spans(body, &spans, model, ceiling)
}

/// As [`splice_model_within`], with the spans already found by a parse of the body (in order;
/// ceiling spans of another field than `ceiling`'s are left as they are).
pub fn splice_spans(body: &[u8], spans: &[Span], model: &str, ceiling: Option<Ceiling>) -> Result<Vec<u8>, ApiError> {
    if !spans.iter().any(|s| s.key == Key::Model) {
        return Err(
            ApiError::invalid_request(codes::MISSING_REQUIRED_PARAMETER, "model: Field required").with_param("model")
        );
    }
    let replacement = Value::from(model).to_string();
    let lowered = ceiling.map(|c| c.most.to_string()).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + replacement.len());
    let mut from = 0;
    for &Span { key, start, end } in spans {
        let value = &body[start..end];
        let with = match key {
            Key::Model if value.first() != Some(&b'"') => {
                return Err(ApiError::invalid_request(codes::INVALID_TYPE, "model: Input should be a valid string")
                    .with_param("model"));
            }
            Key::Model => &replacement,
            Key::Ceiling => match (std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok()), ceiling) {
                (Some(sent), Some(c)) if sent > c.most => &lowered,
                _ => continue,
            },
        };
        out.extend_from_slice(&body[from..start]);
        out.extend_from_slice(with.as_bytes());
        from = end;
    }
    out.extend_from_slice(&body[from..]);
    Ok(out)
}

/// Where a door's parse found the values a splice replaces, each read as a borrowed raw value.
/// perf: the splice's own scan of an agent's body was 5.5–7.5 % of the door's CPU.
#[derive(Debug, Default)]
pub struct Places(Vec<(Key, usize, usize)>);

impl Places {
    /// Reads a member's value as `T` and notes where it lies. A nested value is refused: serde_json
    /// skips a raw value without counting its depth and `T` is read again from a fresh depth, so
    /// the caller must read such a body the plain way, which refuses it where it always did.
    pub fn read<'de, A: MapAccess<'de>, T: Deserialize<'de>>(&mut self, map: &mut A, key: Key) -> Result<T, A::Error> {
        let raw: &'de RawValue = map.next_value()?;
        if raw.get().starts_with(['[', '{']) {
            return Err(de::Error::custom("a nested value is read the plain way"));
        }
        self.0.push((key, raw.get().as_ptr() as usize, raw.get().len()));
        serde_json::from_str(raw.get()).map_err(de::Error::custom)
    }

    /// The spans in `body`, which the values were borrowed from (their addresses give their
    /// offsets); `None` if one is not within it.
    pub fn spans(&self, body: &[u8]) -> Option<Vec<Span>> {
        let base = body.as_ptr() as usize;
        self.0
            .iter()
            .map(|&(key, at, len)| {
                let start = at.checked_sub(base).filter(|start| start + len <= body.len())?;
                Some(Span { key, start, end: start + len })
            })
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Model,
    /// The ceiling's field.
    Ceiling,
}

/// Where one top-level value of interest lies in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub key: Key,
    pub start: usize,
    pub end: usize,
}

/// The first top-level `model`, when it is a string: read no further than its member, so it is a
/// hint (a later `model`, or a broken body after it, is for the door's own read to find).
pub fn leading_model(body: &[u8]) -> Option<String> {
    let spans = top_level_spans(body, None, true)?;
    let span = spans.last()?;
    serde_json::from_slice(&body[span.start..span.end]).ok()
}

/// The byte spans of the values of the top-level `model` keys (and `field` keys), in order;
/// `None` if the body is not one well-formed JSON object. With `first_model`, the spans up to the
/// first `model`, the rest of the body unread.
fn top_level_spans(body: &[u8], field: Option<&str>, first_model: bool) -> Option<Vec<Span>> {
    let mut scan = Scanner { bytes: body, pos: 0 };
    let mut spans = Vec::new();
    scan.ws();
    scan.expect(OBJECT_OPEN)?;
    scan.ws();
    if scan.peek() == Some(OBJECT_CLOSE) {
        scan.pos += 1;
    } else {
        loop {
            scan.ws();
            let key_start = scan.pos;
            scan.string()?;
            let key = key_named(&body[key_start..scan.pos], field)?;
            scan.ws();
            scan.expect(b':')?;
            scan.ws();
            let start = scan.pos;
            scan.value(0)?;
            if let Some(key) = key {
                spans.push(Span { key, start, end: scan.pos });
                if first_model && key == Key::Model {
                    return Some(spans);
                }
            }
            scan.ws();
            match scan.next()? {
                b',' => continue,
                OBJECT_CLOSE => break,
                _ => return None,
            }
        }
    }
    scan.ws();
    (scan.pos == body.len()).then_some(spans)
}

/// Which key of interest a quoted key is, if any; `None` if it does not decode. A plain ASCII
/// key without escapes is compared as it stands, without decoding it into a new string.
fn key_named(quoted: &[u8], field: Option<&str>) -> Option<Option<Key>> {
    let inner = &quoted[1..quoted.len() - 1];
    let decoded;
    let name: &[u8] = if inner.is_ascii() && !inner.contains(&b'\\') {
        inner
    } else {
        decoded = serde_json::from_slice::<String>(quoted).ok()?;
        decoded.as_bytes()
    };
    Some(if name == b"model" {
        Some(Key::Model)
    } else if field.is_some_and(|f| f.as_bytes() == name) {
        Some(Key::Ceiling)
    } else {
        None
    })
}

/// Just enough of a JSON reader to find where values end; strings are checked for their quotes
/// and escapes only (serde has validated nothing here, so nothing is trusted).
struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
}

const MAX_DEPTH: usize = 512;
// Named, so brace-counting tools (and readers) are not thrown by bracket literals.
const OBJECT_OPEN: u8 = 0x7b;
const OBJECT_CLOSE: u8 = 0x7d;
const ARRAY_OPEN: u8 = 0x5b;
const ARRAY_CLOSE: u8 = 0x5d;

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn string(&mut self) -> Option<()> {
        self.expect(b'"')?;
        loop {
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => {
                    self.next()?;
                }
                c if c < 0x20 => return None,
                _ => {}
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string(),
            open @ (OBJECT_OPEN | ARRAY_OPEN) => {
                let close = if open == OBJECT_OPEN { OBJECT_CLOSE } else { ARRAY_CLOSE };
                self.pos += 1;
                self.ws();
                if self.peek() == Some(close) {
                    self.pos += 1;
                    return Some(());
                }
                loop {
                    self.ws();
                    if open == OBJECT_OPEN {
                        self.string()?;
                        self.ws();
                        self.expect(b':')?;
                        self.ws();
                    }
                    self.value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => continue,
                        c if c == close => return Some(()),
                        _ => return None,
                    }
                }
            }
            _ => {
                let start = self.pos;
                while matches!(self.peek(), Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'E')) {
                    self.pos += 1;
                }
                (self.pos > start).then_some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_changes_only_the_model_value() {
        let body = br#"{ "model" : "claude-sonnet-4-5",
  "messages":[{"role":"user","content":[{"type":"text","text":"model \"x\"","cache_control":{"type":"ephemeral","ttl":"1h"}}]}],
  "metadata":{"model":"keep"},"zzz_unknown":[1,2.5e3,true,null,{"model":"nested"}],"max_tokens":32000}"#;
        let out = splice_model(body, "claude-sonnet-4-5-20250929").unwrap();
        let expected = String::from_utf8(body.to_vec()).unwrap().replacen(
            "\"claude-sonnet-4-5\"",
            "\"claude-sonnet-4-5-20250929\"",
            1,
        );
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn splice_escapes_and_handles_unicode() {
        let body = "{\"messages\":[],\"model\":\"m\",\"system\":\"héllo ☃ \\u00e9\"}".as_bytes();
        let out = splice_model(body, "a\"b").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"messages\":[],\"model\":\"a\\\"b\",\"system\":\"héllo ☃ \\u00e9\"}"
        );
        // An escaped key is still the key `model`.
        let out = splice_model(br#"{"mod\u0065l":"x"}"#, "y").unwrap();
        assert_eq!(out, br#"{"mod\u0065l":"y"}"#);
    }

    #[test]
    fn splice_refuses_bad_bodies_without_panicking() {
        for bad in
            [&b""[..], b"[]", b"{", b"{\"model\":", b"{\"model\":\"x\"", b"{\"model\":\"x\"} extra", b"{\"a\":[1,}"]
        {
            assert_eq!(
                splice_model(bad, "m").unwrap_err().code,
                codes::INVALID_JSON,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(splice_model(br#"{"messages":[]}"#, "m").unwrap_err().param.as_deref(), Some("model"));
        assert_eq!(splice_model(br#"{"model":5}"#, "m").unwrap_err().code, codes::INVALID_TYPE);
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(2000), "]".repeat(2000));
        assert!(splice_model(deep.as_bytes(), "m").is_err());
    }

    #[test]
    fn only_the_top_level_model_changes() {
        let body = "{ \"input\": [{\"model\": \"x\", \"t\": \"a\\\"}b\"}],\n  \"model\" : \"gpt-5\", \"n\": -1.5e3, \"z\": null}";
        let out = splice_model(body.as_bytes(), "real/\"m\"").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), body.replace("\"gpt-5\"", "\"real/\\\"m\\\"\""));
        assert_eq!(splice_model(b"{\"model\":\"a\"}", "\u{e9}").unwrap(), "{\"model\":\"\u{e9}\"}".as_bytes());
    }

    #[test]
    fn every_duplicate_is_replaced_so_whichever_the_vendor_keeps_is_ours() {
        assert_eq!(
            splice_model(b"{\"model\":\"a\",\"model\":\"b\"}", "m").unwrap(),
            b"{\"model\":\"m\",\"model\":\"m\"}"
        );
    }

    #[test]
    fn an_output_cap_above_the_ceiling_is_spliced_down_and_nothing_else_moves() {
        let cap = Some(Ceiling { field: "max_tokens", most: 16384 });
        let body = br#"{"model":"a", "max_tokens" : 32000,"metadata":{"max_tokens":99999},"stream":true}"#;
        let out = splice_model_within(body, "m", cap).unwrap();
        assert_eq!(out, br#"{"model":"m", "max_tokens" : 16384,"metadata":{"max_tokens":99999},"stream":true}"#);
        // At or below the ceiling, absent, not an integer, or no ceiling: only the model changes.
        for kept in [
            &br#"{"max_tokens":16384,"model":"a"}"#[..],
            br#"{"max_tokens":1,"model":"a"}"#,
            br#"{"model":"a"}"#,
            br#"{"max_tokens":3.2e4,"model":"a"}"#,
            br#"{"max_tokens":-1,"model":"a"}"#,
            br#"{"max_tokens":"32000","model":"a"}"#,
            br#"{"max_tokens":null,"model":"a"}"#,
            br#"{"max_tokens":99999999999999999999999,"model":"a"}"#,
        ] {
            let expected = String::from_utf8_lossy(kept).replace("\"a\"", "\"m\"");
            assert_eq!(String::from_utf8(splice_model_within(kept, "m", cap).unwrap()).unwrap(), expected);
        }
        let big = br#"{"max_tokens":32000,"model":"a"}"#;
        assert_eq!(splice_model_within(big, "m", None).unwrap(), br#"{"max_tokens":32000,"model":"m"}"#);
        // An escaped key and a duplicate are held too; the Responses field by its own name.
        let escaped = br#"{"max\u005ftokens":20000,"model":"a","max_tokens":17000}"#;
        assert_eq!(
            splice_model_within(escaped, "m", cap).unwrap(),
            br#"{"max\u005ftokens":16384,"model":"m","max_tokens":16384}"#
        );
        let responses = Some(Ceiling { field: "max_output_tokens", most: 100 });
        assert_eq!(
            splice_model_within(br#"{"model":"a","max_output_tokens":128000,"max_tokens":5000}"#, "m", responses)
                .unwrap(),
            br#"{"model":"m","max_output_tokens":100,"max_tokens":5000}"#
        );
        // The model is still required, and a bad body is still refused.
        assert_eq!(splice_model_within(br#"{"max_tokens":5}"#, "m", cap).unwrap_err().param.as_deref(), Some("model"));
        assert_eq!(splice_model_within(b"{\"max_tokens\":5", "m", cap).unwrap_err().code, codes::INVALID_JSON);
    }

    #[test]
    fn keys_that_are_not_plain_ascii_are_decoded_before_they_are_compared() {
        assert_eq!(
            splice_model("{\"mod\u{e9}l\":1,\"model\":\"a\"}".as_bytes(), "m").unwrap(),
            "{\"mod\u{e9}l\":1,\"model\":\"m\"}".as_bytes()
        );
        // A key that is not UTF-8 is not a JSON body.
        assert_eq!(splice_model(b"{\"mo\xffdel\":1,\"model\":\"a\"}", "m").unwrap_err().code, codes::INVALID_JSON);
    }

    #[test]
    fn the_leading_model_is_read_no_further_than_its_member() {
        let read = |body: &str| leading_model(body.as_bytes());
        assert_eq!(read(r#" {"model":"gpt-5","input":"hi"}"#).as_deref(), Some("gpt-5"));
        assert_eq!(read(r#"{"input":[{"a":"}"}],"mod\u0065l":"m\u00e9"}"#).as_deref(), Some("m\u{e9}"));
        // What follows the first model is left unread: a later one, or a broken tail.
        assert_eq!(read(r#"{"model":"a","model":"b"}"#).as_deref(), Some("a"));
        assert_eq!(read(r#"{"model":"a","input":[}"#).as_deref(), Some("a"));
        for body in [r#"{"model":1}"#, r#"{"input":"hi"}"#, r#"{"input":[}"#, r#"["model"]"#, "", r#"{"model":"a"#] {
            assert_eq!(read(body), None, "{body}");
        }
    }
}
