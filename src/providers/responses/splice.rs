//! The model name spliced into a JSON body without re-encoding anything else, so a pass-through
//! body reaches the vendor byte for byte as the client wrote it apart from that one value.

/// `body` with the string value of its top-level `"model"` key replaced by `model`; `None` if the
/// body is not a JSON object whose `model` is a string.
pub fn splice_model(body: &str, model: &str) -> Option<String> {
    serde_json::from_str::<serde::de::IgnoredAny>(body).ok()?;
    let (start, end) = model_value_span(body.as_bytes())?;
    let encoded = serde_json::to_string(model).ok()?;
    let mut out = String::with_capacity(body.len() + encoded.len());
    out.push_str(&body[..start]);
    out.push_str(&encoded);
    out.push_str(&body[end..]);
    Some(out)
}

/// The byte span of the top-level `model` string value (quotes included). The body is known to
/// be valid JSON, so the scan only tracks strings and nesting.
fn model_value_span(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut found = None;
    loop {
        i = skip_ws(b, i);
        match b.get(i)? {
            b'}' => return found,
            b',' => i = skip_ws(b, i + 1),
            _ => {}
        }
        let key_end = string_end(b, i)?;
        let key: String = serde_json::from_slice(&b[i..key_end]).ok()?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let value_end = value_end(b, i)?;
        // A duplicate key: serde (and the vendor) keep the last one, so the last one is spliced.
        if key == "model" {
            found = (b.get(i) == Some(&b'"')).then_some((i, value_end));
        }
        i = value_end;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The index just past the string starting at `i`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The index just past the value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while b.get(j).is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
                j += 1;
            }
            Some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_top_level_model_changes() {
        let body = "{ \"input\": [{\"model\": \"x\", \"t\": \"a\\\"}b\"}],\n  \"model\" : \"gpt-5\", \"n\": -1.5e3, \"z\": null}";
        let out = splice_model(body, "real/\"m\"").unwrap();
        assert_eq!(out, body.replace("\"gpt-5\"", "\"real/\\\"m\\\"\""));
        assert_eq!(splice_model("{\"model\":\"a\"}", "é"), Some("{\"model\":\"é\"}".to_string()));
    }

    #[test]
    fn refuses_what_it_cannot_splice() {
        assert_eq!(splice_model("{\"input\": \"x\"}", "m"), None);
        assert_eq!(splice_model("{\"model\": 5}", "m"), None);
        assert_eq!(splice_model("[\"model\"]", "m"), None);
        assert_eq!(splice_model("{\"model\": \"a\"", "m"), None);
        assert_eq!(splice_model("", "m"), None);
    }

    #[test]
    fn last_duplicate_wins_like_serde() {
        assert_eq!(
            splice_model("{\"model\":\"a\",\"model\":\"b\"}", "m").unwrap(),
            "{\"model\":\"a\",\"model\":\"m\"}"
        );
    }
}
