//! A request's or response's headers read in one call into the runtime: every `Headers.get`
//! from wasm is a crossing into JS (two with worker's `req.headers()`), and a request reads a dozen.

use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::web_sys;

// Headers are read by name: in workerd every step of iterating a `Headers` is a call into the
// runtime, so reading all of them costs per header the client sent (an SDK sends 15–20).
#[wasm_bindgen(inline_js = "
let namesText = '', names = [];
export function headers_named(h, text) {
  if (text !== namesText) { namesText = text; names = text.split('\\n'); }
  let s = '';
  for (const k of names) { const v = h.get(k); if (v !== null) s += k + '\\n' + v + '\\n'; }
  return s;
}
")]
extern "C" {
    /// The headers named in `names` (`\n`-separated, lower-case) that are present, as
    /// `name\nvalue\n` pairs; the names' text is split once per isolate while it stays the same.
    fn headers_named(headers: &web_sys::Headers, names: &worker::wasm_bindgen::JsValue) -> String;
}

/// Headers to send, collected in wasm and handed to the runtime in one call.
#[derive(Debug, Default)]
pub struct HeaderText(String);

impl HeaderText {
    /// Adds one header, its name lower-cased (ASCII, so a later one of the same name wins
    /// whatever its case); what the runtime would refuse in a value (a line break, NUL, a
    /// character beyond Latin-1) is refused here, with the header's name.
    pub fn add(&mut self, name: &str, value: &str) -> Result<(), String> {
        if name.contains('\n') || value.contains(['\n', '\r', '\0']) {
            return Err(format!("invalid header {name}: line break or NUL"));
        }
        if !value.is_ascii() && value.chars().any(|c| c as u32 > 0xFF) {
            return Err(format!("invalid header {name}: a character beyond Latin-1"));
        }
        self.0.extend(name.chars().map(|c| c.to_ascii_lowercase()));
        self.0.push('\n');
        self.0.push_str(value);
        self.0.push('\n');
        Ok(())
    }

    /// The collected `name\nvalue\n` pairs.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Appends every pair of `other`, in order.
    pub fn extend(&mut self, other: &HeaderText) {
        self.0.push_str(&other.0);
    }

    /// The collected pairs in order, a repeated name as often as it was added.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut parts = self.0.split('\n');
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }
}

/// Header names and values, looked up without calling back into JS: the runtime's text kept
/// whole, with each pair's place in it (two allocations per map, not two per header).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderMap {
    text: String,
    /// Byte ranges of each name and value in `text`.
    pairs: Vec<(usize, usize, usize, usize)>,
}

impl HeaderMap {
    /// The headers named in `names` (a JS string of `\n`-separated lower-case names, made once).
    pub fn of_named(headers: &web_sys::Headers, names: &worker::wasm_bindgen::JsValue) -> HeaderMap {
        HeaderMap::parse(headers_named(headers, names))
    }

    /// Parses `name\nvalue\n` pairs; header values never contain a newline (the runtime rejects them).
    pub fn parse(text: impl Into<String>) -> HeaderMap {
        let mut text: String = text.into();
        // Sized once: grown push by push, it was most of the parse's time in the bench profile.
        let mut pairs = Vec::with_capacity(text.bytes().filter(|&b| b == b'\n').count() / 2);
        let mut at = 0;
        while let Some(name_len) = text[at..].find('\n') {
            let value_at = at + name_len + 1;
            let Some(value_len) = text[value_at..].find('\n') else { break };
            pairs.push((at, at + name_len, value_at, value_at + value_len));
            at = value_at + value_len + 1;
        }
        // The runtime hands names lower-case already; anything else is made so in place.
        for &(a, b, _, _) in &pairs {
            if let Some(name) = text.get_mut(a..b) {
                name.make_ascii_lowercase();
            }
        }
        HeaderMap { text, pairs }
    }

    /// The value of `name` (lower-case), as `Headers.get` would return it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs.iter().find(|&&(a, b, _, _)| &self.text[a..b] == name).map(|&(_, _, c, d)| &self.text[c..d])
    }

    pub fn get_owned(&self, name: &str) -> Option<String> {
        self.get(name).map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_looks_up_by_lower_case_name() {
        let map = HeaderMap::parse("authorization\nBearer k\ncontent-type\napplication/json\nx-empty\n\n");
        assert_eq!(map.get("authorization"), Some("Bearer k"));
        assert_eq!(map.get("content-type"), Some("application/json"));
        assert_eq!(map.get("x-empty"), Some(""));
        assert_eq!(map.get("missing"), None);
        assert_eq!(HeaderMap::parse("X-Mixed\nv\n").get("x-mixed"), Some("v"));
        assert_eq!(HeaderMap::parse(""), HeaderMap::default());
        // A trailing name without a value (cannot come from the runtime) is ignored.
        assert_eq!(HeaderMap::parse("a\n1\nb").get("a"), Some("1"));
        assert_eq!(HeaderMap::parse("a\n1\nb").get("b"), None);
        // Non-ASCII values stay as they are; only names are lower-cased.
        let map = HeaderMap::parse("X-Name\nVälue Ünchanged\ncontent-length\n12\n");
        assert_eq!(map.get("x-name"), Some("Välue Ünchanged"));
        assert_eq!(map.get("content-length"), Some("12"));
        // Duplicates: the first wins, as the runtime joins repeats into one value anyway.
        assert_eq!(HeaderMap::parse("a\n1\na\n2\n").get("a"), Some("1"));
    }

    #[test]
    fn header_text_lower_cases_names_and_refuses_what_the_runtime_would() {
        let mut text = HeaderText::default();
        text.add("Authorization", "Bearer k").unwrap();
        text.add("x-ÄÖ", "Välue").unwrap();
        assert_eq!(text.as_str(), "authorization\nBearer k\nx-ÄÖ\nVälue\n", "ASCII only; Latin-1 values pass");
        for bad in ["a\nb", "a\rb", "a\0b", "caf\u{20ac}"] {
            assert!(text.add("x-bad", bad).unwrap_err().starts_with("invalid header x-bad"), "{bad:?}");
        }
        assert!(text.add("x\nbad", "v").is_err());
        assert_eq!(text.as_str(), "authorization\nBearer k\nx-ÄÖ\nVälue\n", "nothing of a refused header");
    }
}
