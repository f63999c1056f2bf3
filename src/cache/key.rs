//! Exact-cache keys: a SHA-256 of the canonical request, scoped by tenant and format version.
//!
//! The canonical form is JSON with object keys sorted by their UTF-8 bytes, no whitespace, numbers
//! in one spelling (`1`, `1.0` and `1e0` are the same number) and strings escaped minimally (like
//! RFC 8785, without its UTF-16 key order). Top-level fields that cannot change the answer are left
//! out, so a streamed and a non-streamed request share a key (a hit is replayed as SSE).

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// Bump when the canonical form or the excluded fields change: old entries then never match.
pub const CACHE_KEY_VERSION: &str = "v1";

/// Every cache key starts with this (the KV key name), followed by 64 hex digits.
pub const CACHE_KEY_PREFIX: &str = "cache:v1:";

/// Top-level request fields that change delivery, attribution or logging, never the answer.
pub const IGNORED_FIELDS: &[&str] =
    &["stream", "stream_options", "user", "metadata", "store", "safety_identifier", "prompt_cache_key"];

/// What selected the answer besides the body: the logical model the request resolved to (the
/// body's `model` or an `x-gateway-task` header) and the deployments its route may use, in any order.
pub fn route_scope(logical_model: &str, deployments: &[&str]) -> String {
    let mut ids: Vec<&str> = deployments.to_vec();
    ids.sort_unstable();
    ids.dedup();
    format!("{}\0{}", logical_model, ids.join("\0"))
}

/// The KV key for `body` as `tenant` sent it down `route` ([`route_scope`]): different tenants, and
/// requests routed differently, never share a key.
pub fn cache_key(tenant: &str, route: &str, body: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(CACHE_KEY_VERSION.as_bytes());
    hasher.update([0]);
    // Length-prefixed so no (tenant, route, body) triple can spell another's bytes.
    for part in [tenant, route] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    match body {
        Value::Object(map) => {
            let kept = map.iter().filter(|(k, v)| !v.is_null() && !is_ignored(k));
            write_object(kept, &mut hasher);
        }
        other => write_value(other, &mut hasher),
    }
    let mut key = String::with_capacity(CACHE_KEY_PREFIX.len() + 64);
    key.push_str(CACHE_KEY_PREFIX);
    for byte in hasher.finalize() {
        key.push(char::from_digit((byte >> 4) as u32, 16).unwrap_or('0'));
        key.push(char::from_digit((byte & 0xf) as u32, 16).unwrap_or('0'));
    }
    key
}

/// The canonical JSON text of `value`, every field kept.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_value(value, &mut out);
    String::from_utf8(out).expect("canonical JSON is built from UTF-8 pieces")
}

fn is_ignored(field: &str) -> bool {
    let hint = field.len() > 2
        && field.as_bytes()[0].eq_ignore_ascii_case(&b'x')
        && matches!(field.as_bytes()[1], b'-' | b'_');
    hint || IGNORED_FIELDS.contains(&field)
}

/// Where canonical bytes go: a buffer, or straight into the hash without building the text.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

fn write_value(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_value(item, out);
            }
            out.put(b"]");
        }
        Value::Object(map) => write_object(map.iter(), out),
    }
}

fn write_object<'a>(entries: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut impl Sink) {
    let mut entries: Vec<_> = entries.collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.put(b"{");
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.put(b",");
        }
        write_string(key, out);
        out.put(b":");
        write_value(value, out);
    }
    out.put(b"}");
}

/// Integers as integers; other numbers in Rust's shortest round-trip form, which prints integral
/// floats without a fraction, so `1.0` and `1` agree.
fn write_number(n: &Number, out: &mut impl Sink) {
    if let Some(u) = n.as_u64() {
        out.put(u.to_string().as_bytes());
    } else if let Some(i) = n.as_i64() {
        out.put(i.to_string().as_bytes());
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        let f = if f == 0.0 { 0.0 } else { f };
        out.put(f.to_string().as_bytes());
    }
}

fn write_string(s: &str, out: &mut impl Sink) {
    out.put(b"\"");
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.put(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.put(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.put(&bytes[start..i]);
        out.put(escape);
        start = i + 1;
    }
    out.put(&bytes[start..]);
    out.put(b"\"");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is the capital of France?"}
            ],
            "temperature": 0,
            "max_tokens": 64
        })
    }

    fn key(body: &Value) -> String {
        cache_key("tenant-a", &route_scope("chat", &["oa", "an"]), body)
    }

    fn with(field: &str, value: Value) -> Value {
        let mut body = base();
        body[field] = value;
        body
    }

    #[test]
    fn key_shape_is_prefix_and_sha256_hex() {
        let k = key(&base());
        assert!(k.starts_with("cache:v1:"), "{k}");
        assert_eq!(k.len(), CACHE_KEY_PREFIX.len() + 64);
        assert!(k[CACHE_KEY_PREFIX.len()..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(k, key(&base()));
    }

    #[test]
    fn field_order_and_whitespace_do_not_matter() {
        let a = r#"{"model":"gpt-4o-mini","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the capital of France?"}],"temperature":0,"max_tokens":64}"#;
        let b = r#"
            {
              "max_tokens" : 64,
              "messages" : [
                { "content" : "Be brief.", "role" : "system" },
                { "content" : "What is the capital of France?", "role" : "user" }
              ],
              "temperature" : 0.0,
              "model" : "gpt-4o-mini"
            }"#;
        let a: Value = serde_json::from_str(a).unwrap();
        let b: Value = serde_json::from_str(b).unwrap();
        assert_eq!(key(&a), key(&b));
        assert_eq!(key(&a), key(&base()));
    }

    #[test]
    fn nested_objects_are_sorted_too() {
        let a = json!({"model": "m", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"b": 1, "a": 2}}}});
        let b = json!({"response_format": {"json_schema": {"schema": {"a": 2, "b": 1}, "name": "x"}, "type": "json_schema"}, "model": "m"});
        assert_eq!(key(&a), key(&b));
    }

    #[test]
    fn numbers_have_one_spelling() {
        for (x, y) in [("1", "1.0"), ("1", "1e0"), ("0.7", "0.70"), ("0", "-0.0"), ("100", "1E2"), ("-3", "-3.0")] {
            let a: Value = serde_json::from_str(&format!(r#"{{"model":"m","temperature":{x}}}"#)).unwrap();
            let b: Value = serde_json::from_str(&format!(r#"{{"model":"m","temperature":{y}}}"#)).unwrap();
            assert_eq!(key(&a), key(&b), "{x} vs {y}");
        }
        assert_ne!(key(&with("temperature", json!(0.7))), key(&with("temperature", json!(0.71))));
        assert_eq!(
            canonical_json(&json!([1.5, -2, 1e21, 0.1, u64::MAX])),
            "[1.5,-2,1000000000000000000000,0.1,18446744073709551615]"
        );
    }

    #[test]
    fn every_answer_changing_parameter_changes_the_key() {
        let variants = [
            with("model", json!("gpt-4o")),
            with("messages", json!([{"role": "user", "content": "What is the capital of Spain?"}])),
            with(
                "tools",
                json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]),
            ),
            with("tool_choice", json!("required")),
            with("temperature", json!(0.2)),
            with("top_p", json!(0.9)),
            with("seed", json!(7)),
            with("max_tokens", json!(65)),
            with("max_completion_tokens", json!(64)),
            with("response_format", json!({"type": "json_object"})),
            with("stop", json!(["\n"])),
            with("n", json!(2)),
            with("logprobs", json!(true)),
            with("reasoning_effort", json!("high")),
        ];
        let mut keys: Vec<String> = variants.iter().map(key).collect();
        keys.push(key(&base()));
        let count = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), count, "two different requests share a key");
    }

    #[test]
    fn message_order_and_roles_matter() {
        let swapped = with(
            "messages",
            json!([
                {"role": "user", "content": "What is the capital of France?"},
                {"role": "system", "content": "Be brief."}
            ]),
        );
        assert_ne!(key(&swapped), key(&base()));
        let role = with(
            "messages",
            json!([
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "What is the capital of France?"}
            ]),
        );
        assert_ne!(key(&role), key(&base()));
    }

    #[test]
    fn tenants_never_share_a_key() {
        assert_ne!(cache_key("tenant-a", "r", &base()), cache_key("tenant-b", "r", &base()));
        assert_ne!(cache_key("", "r", &base()), cache_key("tenant-a", "r", &base()));
        // Tenant and route are length-prefixed, so moving bytes between the parts cannot collide.
        assert_ne!(cache_key("a", "r", &json!("b")), cache_key("ab", "r", &json!("")));
        assert_ne!(cache_key("a", "rb", &json!("")), cache_key("a", "r", &json!("b")));
        assert_ne!(cache_key("ar", "", &json!("")), cache_key("a", "r", &json!("")));
    }

    #[test]
    fn requests_routed_differently_never_share_a_key() {
        // The same body under every (logical model, deployment set) pair: all keys distinct.
        let models = ["chat", "summary", "code", ""];
        let sets: [&[&str]; 5] = [&["oa"], &["an"], &["oa", "an"], &["oa", "an", "x"], &[]];
        let mut seen = std::collections::BTreeMap::new();
        for model in models {
            for set in sets {
                let k = cache_key("tenant-a", &route_scope(model, set), &base());
                assert!(seen.insert(k, (model, set)).is_none(), "{model} {set:?} shares a key");
            }
        }
        // Order and repeats within a chain (weights, affinity) do not split the cache.
        assert_eq!(route_scope("chat", &["oa", "an"]), route_scope("chat", &["an", "oa", "an"]));
    }

    #[test]
    fn delivery_and_attribution_fields_are_ignored() {
        let plain = key(&base());
        for (field, value) in [
            ("stream", json!(true)),
            ("stream", json!(false)),
            ("stream_options", json!({"include_usage": true})),
            ("user", json!("u-123")),
            ("metadata", json!({"feature": "search"})),
            ("store", json!(true)),
            ("safety_identifier", json!("hash")),
            ("prompt_cache_key", json!("k")),
            ("x-gateway-route", json!("fast")),
            ("x_trace", json!("abc")),
            ("X-Debug", json!(1)),
            ("stop", Value::Null),
        ] {
            assert_eq!(key(&with(field, value.clone())), plain, "{field}: {value}");
        }
        // Only at the top level: inside messages every field is content.
        let mut nested = base();
        nested["messages"][1]["user"] = json!("u-123");
        assert_ne!(key(&nested), plain);
    }

    #[test]
    fn streamed_and_plain_requests_share_a_key() {
        let mut streamed = base();
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        assert_eq!(key(&streamed), key(&base()));
    }

    #[test]
    fn unicode_is_hashed_as_utf8() {
        let raw: Value =
            serde_json::from_str(r#"{"model":"m","messages":[{"role":"user","content":"你好，世界 👋"}]}"#).unwrap();
        let escaped: Value = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"\u4f60\u597d\uff0c\u4e16\u754c \ud83d\udc4b"}]}"#,
        )
        .unwrap();
        assert_eq!(key(&raw), key(&escaped));
        assert!(canonical_json(&raw).contains("你好，世界 👋"));
        // No Unicode normalization: precomposed and combining forms are different prompts.
        let composed = json!({"model": "m", "messages": [{"role": "user", "content": "caf\u{e9}"}]});
        let combining = json!({"model": "m", "messages": [{"role": "user", "content": "cafe\u{301}"}]});
        assert_ne!(key(&composed), key(&combining));
    }

    #[test]
    fn canonical_text_is_sorted_compact_and_minimally_escaped() {
        let v = json!({"b": [1, 2.5, {"d": null, "c": "x\ny\t\"q\"\\ \u{1} é"}], "a": true, "é": false, "Z": 0});
        assert_eq!(
            canonical_json(&v),
            r#"{"Z":0,"a":true,"b":[1,2.5,{"c":"x\ny\t\"q\"\\ \u0001 é","d":null}],"é":false}"#
        );
        let round: Value = serde_json::from_str(&canonical_json(&v)).unwrap();
        assert_eq!(round, v);
    }

    #[test]
    fn non_object_bodies_still_hash() {
        assert_ne!(key(&json!([1])), key(&json!([2])));
        assert_eq!(key(&json!(null)), key(&json!(null)));
    }
}
