//! A request's tags for the usage event: from the `x-gateway-tags` header and the request's
//! `metadata`, bounded in number and size.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

const MAX_TAGS: usize = 32;
const MAX_TAG_KEY_CHARS: usize = 64;
const MAX_TAG_VALUE_CHARS: usize = 256;
/// Free text copied from a request into an event (the end user's id): enough for any real id,
/// and small enough that an event always fits a queue message.
pub const MAX_COPIED_CHARS: usize = 256;

/// `text` cut to [`MAX_COPIED_CHARS`], with `…` marking a cut.
pub fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_COPIED_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// `x-gateway-tags: feature=search,team=growth`: malformed pairs are skipped, sizes are bounded.
pub fn parse_tags_header(header: &str) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::new();
    for pair in header.split(',') {
        if let Some((k, v)) = pair.split_once('=') {
            insert_tag(&mut tags, k.trim(), v.trim());
        }
    }
    tags
}

/// The request's `metadata` object as tags: strings, numbers and booleans; nested values are skipped.
pub fn metadata_tags(metadata: &Map<String, Value>) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::new();
    for (k, v) in metadata {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => continue,
        };
        insert_tag(&mut tags, k.trim(), text.trim());
    }
    tags
}

fn insert_tag(tags: &mut BTreeMap<String, String>, key: &str, value: &str) {
    let key_ok = !key.is_empty()
        && key.chars().count() <= MAX_TAG_KEY_CHARS
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if key_ok && !value.is_empty() && (tags.len() < MAX_TAGS || tags.contains_key(key)) {
        tags.insert(key.to_string(), value.chars().take(MAX_TAG_VALUE_CHARS).collect());
    }
}

/// Header tags win over metadata tags of the same name.
pub fn merge_tags(header: BTreeMap<String, String>, metadata: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut tags = header;
    for (k, v) in metadata {
        if !tags.contains_key(&k) && tags.len() < MAX_TAGS {
            tags.insert(k, v);
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copied_text_is_bounded_with_a_marker() {
        assert_eq!(bounded("u-42"), "u-42");
        let exact = "é".repeat(MAX_COPIED_CHARS);
        assert_eq!(bounded(&exact), exact, "at the bound nothing is cut");
        let cut = bounded(&"P".repeat(200_000));
        assert_eq!(cut.chars().count(), MAX_COPIED_CHARS + 1);
        assert!(cut.ends_with("P…"));
    }

    #[test]
    fn tags_are_bounded() {
        let many: String = (0..40).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        assert_eq!(parse_tags_header(&many).len(), MAX_TAGS);
        let long = format!("k={}", "x".repeat(1000));
        assert_eq!(parse_tags_header(&long)["k"].len(), MAX_TAG_VALUE_CHARS);
        assert!(parse_tags_header(&format!("{}=v", "k".repeat(65))).is_empty());
        assert!(parse_tags_header("a b=v,ü=v,a/b=v").is_empty());
        assert_eq!(parse_tags_header("team.sub:x-y_z=v").len(), 1);
    }
}
