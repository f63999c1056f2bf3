//! The deterministic mock reply: words, truncation, tool arguments and ids.

use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub const DEFAULT_WORDS: usize = 8;

const FILLER: &[&str] = &["and", "it", "keeps", "going", "with", "more", "deterministic", "mock", "words."];

/// "Hello from <model>: this is reply number N." (8 words) then filler, `count` words.
pub fn words(model: &str, number: u64, count: usize) -> Vec<String> {
    let head = [
        "Hello".to_string(),
        "from".to_string(),
        format!("{model}:"),
        "this".to_string(),
        "is".to_string(),
        "reply".to_string(),
        "number".to_string(),
        format!("{number}."),
    ];
    head.into_iter().chain(FILLER.iter().cycle().map(|w| w.to_string())).take(count).collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    Complete,
    MaxTokens,
    Stop(String),
}

/// Stream pieces (a leading space on all but the first) and why they ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Text {
    pub pieces: Vec<String>,
    pub finish: Finish,
}

impl Text {
    pub fn joined(&self) -> String {
        self.pieces.concat()
    }

    pub fn tokens(&self) -> u64 {
        self.pieces.len() as u64
    }
}

/// Applies `max_tokens` (one word = one token) and stop sequences, stop winning.
pub fn compose(words: Vec<String>, max_tokens: Option<u64>, stops: &[String]) -> Text {
    let limit = max_tokens.map_or(usize::MAX, |m| m.min(usize::MAX as u64) as usize);
    let truncated = words.len() > limit;
    let pieces: Vec<String> =
        words.into_iter().take(limit).enumerate().map(|(i, w)| if i == 0 { w } else { format!(" {w}") }).collect();
    let text = pieces.concat();
    let hit = stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
        .min_by_key(|(at, _)| *at);
    if let Some((at, stop)) = hit {
        let mut kept = Vec::new();
        let mut offset = 0;
        for piece in pieces {
            if offset + piece.len() <= at {
                offset += piece.len();
                kept.push(piece);
            } else {
                if at > offset {
                    kept.push(piece[..at - offset].to_string());
                }
                break;
            }
        }
        return Text { pieces: kept, finish: Finish::Stop(stop.clone()) };
    }
    Text { pieces, finish: if truncated { Finish::MaxTokens } else { Finish::Complete } }
}

/// Reads `stop`/`stop_sequences` given as a string or an array of strings.
pub fn stop_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items.iter().filter_map(|i| i.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    }
}

/// Deterministic arguments for a JSON schema: each required property (or every
/// property when none is required) gets its enum's first value or a typed dummy.
pub fn tool_arguments(schema: Option<&Value>) -> String {
    let props = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
    let Some(props) = props else {
        return "{}".to_string();
    };
    let required: Vec<&str> = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let names: Vec<&str> = if required.is_empty() { props.keys().map(String::as_str).collect() } else { required };
    let fields: Vec<String> = names
        .iter()
        .map(|name| {
            let value = props.get(*name).map_or(Value::from("mock"), dummy_value);
            format!("{}: {}", Value::from(*name), value)
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}

fn dummy_value(prop: &Value) -> Value {
    if let Some(first) = prop.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    let ty = match prop.get("type") {
        Some(Value::Array(types)) => types.first().and_then(Value::as_str),
        Some(t) => t.as_str(),
        None => None,
    };
    match ty {
        Some("integer") | Some("number") => Value::from(1),
        Some("boolean") => Value::Bool(true),
        Some("array") => Value::Array(Vec::new()),
        Some("object") => Value::Object(Default::default()),
        Some("null") => Value::Null,
        _ => Value::from("mock"),
    }
}

/// Splits a string into at least three pieces (when it has 3+ chars), at most 8 chars each.
pub fn fragments(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(3).clamp(1, 8);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Process-unique id such as `chatcmpl-…`, `msg_…`, `toolu_…`, `call_…`.
pub fn id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}mock{:08x}{n:012x}", start_secs() as u32)
}

fn start_secs() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| unix_ms() / 1000)
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_sentence_and_filler() {
        let w = words("gpt-4o", 3, DEFAULT_WORDS);
        assert_eq!(w.join(" "), "Hello from gpt-4o: this is reply number 3.");
        assert_eq!(words("m", 1, 10)[8..], ["and", "it"]);
        assert_eq!(words("m", 1, 8).len(), 8);
    }

    #[test]
    fn compose_complete_and_length() {
        let t = compose(words("m", 1, 4), None, &[]);
        assert_eq!(t.pieces, ["Hello", " from", " m:", " this"]);
        assert_eq!(t.finish, Finish::Complete);
        let t = compose(words("m", 1, 8), Some(3), &[]);
        assert_eq!(t.joined(), "Hello from m:");
        assert_eq!((t.tokens(), t.finish), (3, Finish::MaxTokens));
        let t = compose(words("m", 1, 3), Some(3), &[]);
        assert_eq!(t.finish, Finish::Complete);
    }

    #[test]
    fn compose_stop_cuts_inside_a_word() {
        let t = compose(words("m", 1, 8), None, &["number".into(), "is r".into()]);
        assert_eq!(t.joined(), "Hello from m: this ");
        assert_eq!(t.finish, Finish::Stop("is r".into()));
        assert_eq!(t.tokens(), 5);
        let t = compose(words("m", 1, 8), Some(2), &["reply".into()]);
        assert_eq!(t.finish, Finish::MaxTokens);
    }

    #[test]
    fn stop_list_accepts_string_or_array() {
        assert_eq!(stop_list(Some(&json!("x"))), ["x"]);
        assert_eq!(stop_list(Some(&json!(["a", 1, "b"]))), ["a", "b"]);
        assert!(stop_list(None).is_empty());
    }

    #[test]
    fn tool_arguments_follow_required_schema_order() {
        let schema = json!({
            "type": "object",
            "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "location": {"type": "string"},
                "days": {"type": "integer"},
                "extra": {"type": "boolean"}
            },
            "required": ["location", "unit", "days"]
        });
        let args = tool_arguments(Some(&schema));
        assert_eq!(args, r#"{"location": "mock", "unit": "celsius", "days": 1}"#);
        let parsed: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(parsed["unit"], "celsius");
        assert_eq!(tool_arguments(None), "{}");
        let all = tool_arguments(Some(&json!({"properties": {"b": {"type": "boolean"}, "a": {}}})));
        assert_eq!(all, r#"{"b": true, "a": "mock"}"#, "the schema's own order, as a vendor follows it");
    }

    #[test]
    fn fragments_reassemble_in_three_or_more_pieces() {
        let s = r#"{"location": "mock", "unit": "celsius"}"#;
        let f = fragments(s);
        assert!(f.len() >= 3, "{f:?}");
        assert_eq!(f.concat(), s);
        assert_eq!(fragments("{}"), ["{", "}"]);
        assert_eq!(fragments("abc").len(), 3);
    }

    #[test]
    fn ids_are_unique_and_prefixed() {
        let (a, b) = (id("msg_"), id("msg_"));
        assert!(a.starts_with("msg_mock"));
        assert_ne!(a, b);
    }
}
