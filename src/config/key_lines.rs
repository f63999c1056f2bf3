//! Where each key of a JSON document sits: the line of every object key, by its path, so a
//! validator points at the field it refuses rather than at the first place a name appears.

use std::collections::HashMap;

/// The line (1-based) of every object key in a document, by path (`["deployments", "oa", "timeouts"]`;
/// array elements are numbered `"0"`, `"1"`, …).
#[derive(Debug, Default)]
pub struct KeyLines {
    lines: HashMap<Vec<String>, usize>,
}

enum Frame {
    /// The key being read, once known.
    Object(Option<String>),
    /// The element being read.
    Array(usize),
}

impl KeyLines {
    /// Scans `text`, which must already have parsed as JSON (a broken document yields fewer keys).
    pub fn of(text: &str) -> KeyLines {
        let bytes = text.as_bytes();
        let mut out = KeyLines::default();
        let mut stack: Vec<Frame> = Vec::new();
        let (mut line, mut expect_key, mut i) = (1, false, 0);
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => line += 1,
                b'"' => {
                    let start = i;
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                    let Some(literal) = text.get(start..=i.min(bytes.len() - 1)) else { break };
                    if expect_key {
                        expect_key = false;
                        let key = serde_json::from_str::<String>(literal).unwrap_or_default();
                        if let Some(Frame::Object(current)) = stack.last_mut() {
                            *current = Some(key);
                        }
                        out.lines.entry(path(&stack)).or_insert(line);
                    }
                }
                b'{' => {
                    stack.push(Frame::Object(None));
                    expect_key = true;
                }
                b'[' => {
                    stack.push(Frame::Array(0));
                    expect_key = false;
                }
                b'}' | b']' => {
                    stack.pop();
                    expect_key = false;
                }
                b',' => match stack.last_mut() {
                    Some(Frame::Object(_)) => expect_key = true,
                    Some(Frame::Array(n)) => *n += 1,
                    None => {}
                },
                _ => {}
            }
            i += 1;
        }
        out
    }

    /// The line of `path`, else of its nearest ancestor that is written out (a defaulted field
    /// is reported on its object's line).
    pub fn line(&self, path: &[&str]) -> Option<usize> {
        (1..=path.len()).rev().find_map(|n| {
            let key: Vec<String> = path[..n].iter().map(|s| s.to_string()).collect();
            self.lines.get(&key).copied()
        })
    }
}

fn path(stack: &[Frame]) -> Vec<String> {
    stack
        .iter()
        .map(|f| match f {
            Frame::Object(key) => key.clone().unwrap_or_default(),
            Frame::Array(n) => n.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{
  "models": {"chat": {"chain": ["oa"]}},
  "deployments": {
    "oa": {"model": "x",
           "timeouts": {"connect_ms": 0}},
    "esc\"aped\n": {"list": [{"a": 1}, {"b": "}{,["}], "after": 2}
  }
}"#;

    #[test]
    fn every_key_has_its_own_line() {
        let k = KeyLines::of(DOC);
        assert_eq!(k.line(&["models"]), Some(2));
        assert_eq!(k.line(&["models", "chat", "chain"]), Some(2));
        assert_eq!(k.line(&["deployments", "oa"]), Some(4), "not line 2, where \"oa\" first appears");
        assert_eq!(k.line(&["deployments", "oa", "timeouts", "connect_ms"]), Some(5));
        assert_eq!(k.line(&["deployments", "esc\"aped\n", "list", "1", "b"]), Some(6));
        assert_eq!(k.line(&["deployments", "esc\"aped\n", "after"]), Some(6), "strings holding brackets are skipped");
    }

    #[test]
    fn absent_fields_fall_back_to_their_object() {
        let k = KeyLines::of(DOC);
        assert_eq!(k.line(&["deployments", "oa", "timeouts", "idle_ms"]), Some(5));
        assert_eq!(k.line(&["deployments", "oa", "limits", "rpm"]), Some(4));
        assert_eq!(k.line(&["nowhere"]), None);
        assert_eq!(KeyLines::of("{\"a\": \"unterminated").line(&["a"]), Some(1));
    }
}
