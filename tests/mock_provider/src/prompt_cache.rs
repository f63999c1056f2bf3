//! Prompt caching, deterministic: which prefix of a request is read from the cache, and how
//! many tokens each `cache_control` breakpoint writes, by TTL.
//!
//! The prompt is the sequence tools → system blocks → message content blocks (a message's role
//! counts with its first block; a string `system` or `content` is one block). A breakpoint is a
//! block carrying `cache_control`; its prefix is every block up to and including it, and its
//! tokens are the token rule applied to that prefix's characters. The longest breakpoint prefix
//! already cached for the same base model is read (and its TTL refreshed); every later breakpoint
//! writes the tokens between the previous boundary and itself, under its own `ttl` ("5m"
//! default, or "1h"). `input_tokens` is what remains, so the three add up to the token rule.
//! Unlike Anthropic there is no minimum cacheable length, so tests stay small.

use crate::tokens::{text_chars, tokens_for_chars};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

const FIVE_MINUTES_MS: u64 = 5 * 60 * 1000;
const ONE_HOUR_MS: u64 = 60 * 60 * 1000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    pub read: u64,
    pub write_5m: u64,
    pub write_1h: u64,
}

impl CacheUsage {
    pub fn write(&self) -> u64 {
        self.write_5m + self.write_1h
    }
}

/// Cached prefixes by (base model, prefix hash), with their expiry in unix ms.
#[derive(Default)]
pub struct PromptCache {
    entries: Mutex<HashMap<(String, u64), u64>>,
}

impl PromptCache {
    pub fn clear(&self) {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

struct Breakpoint {
    chars: usize,
    hash: u64,
    ttl_ms: u64,
}

/// Reads and writes `cache` (when given) for this request at `now_ms`.
pub fn account(body: &Value, model: &str, cache: Option<&PromptCache>, now_ms: u64) -> CacheUsage {
    let points = breakpoints(body);
    if points.is_empty() {
        return CacheUsage::default();
    }
    let tokens = |chars: usize| if chars == 0 { 0 } else { tokens_for_chars(chars) };
    let mut entries = cache.map(|c| c.entries.lock().unwrap_or_else(|e| e.into_inner()));
    let hit = entries.as_mut().and_then(|e| {
        let i = points.iter().rposition(|p| e.get(&(model.to_string(), p.hash)).is_some_and(|&exp| exp > now_ms))?;
        let p = &points[i];
        e.insert((model.to_string(), p.hash), now_ms + p.ttl_ms);
        Some(i)
    });
    let mut usage = CacheUsage { read: hit.map_or(0, |i| tokens(points[i].chars)), ..CacheUsage::default() };
    let mut boundary = usage.read;
    for p in &points[hit.map_or(0, |i| i + 1)..] {
        let t = tokens(p.chars);
        if p.ttl_ms == ONE_HOUR_MS {
            usage.write_1h += t - boundary;
        } else {
            usage.write_5m += t - boundary;
        }
        boundary = t;
        if let Some(e) = entries.as_mut() {
            e.insert((model.to_string(), p.hash), now_ms + p.ttl_ms);
        }
    }
    usage
}

/// Blocks in prompt order with their character counts, each with its `cache_control` if any.
fn blocks(body: &Value) -> Vec<(usize, String, Option<&Value>)> {
    let mut out = Vec::new();
    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        out.push((text_chars(tool), format!("tool:{}", without_cache_control(tool)), tool.get("cache_control")));
    }
    match body.get("system") {
        Some(Value::Array(items)) => {
            for b in items {
                out.push((text_chars(b), format!("system:{}", without_cache_control(b)), b.get("cache_control")));
            }
        }
        Some(s) => out.push((text_chars(s), format!("system:{s}"), None)),
        None => {}
    }
    for m in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        match m.get("content") {
            Some(Value::Array(items)) if !items.is_empty() => {
                let rest = text_chars(m) - items.iter().map(text_chars).sum::<usize>();
                for (i, b) in items.iter().enumerate() {
                    let chars = text_chars(b) + if i == 0 { rest } else { 0 };
                    out.push((chars, format!("{role}:{}", without_cache_control(b)), b.get("cache_control")));
                }
            }
            _ => out.push((text_chars(m), format!("{role}:{}", without_cache_control(m)), m.get("cache_control"))),
        }
    }
    out
}

fn breakpoints(body: &Value) -> Vec<Breakpoint> {
    let mut chars = 0;
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut out = Vec::new();
    for (n, key, cc) in blocks(body) {
        chars += n;
        for b in (key.len() as u64).to_le_bytes().iter().chain(key.as_bytes()) {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        if let Some(cc) = cc {
            let ttl_ms = match cc.get("ttl").and_then(Value::as_str) {
                Some("1h") => ONE_HOUR_MS,
                _ => FIVE_MINUTES_MS,
            };
            out.push(Breakpoint { chars, hash, ttl_ms });
        }
    }
    out
}

fn without_cache_control(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("cache_control");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::prompt_tokens;
    use serde_json::json;

    const EPH: &str = "ephemeral";

    fn body(question: &str) -> Value {
        json!({
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": {"type": EPH, "ttl": "1h"}}],
            "system": [{"type": "text", "text": "You are a careful assistant.", "cache_control": {"type": EPH}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Long shared document text.", "cache_control": {"type": EPH}},
                {"type": "text", "text": question}
            ]}]
        })
    }

    #[test]
    fn first_call_writes_by_ttl_and_repeat_reads() {
        let cache = PromptCache::default();
        let b = body("What is it?");
        // Prefix chars: tool = get_weather(11) object(6) ephemeral(9) 1h(2) = 28 -> 7 tokens;
        // + system text(4) + 28 + ephemeral(9) = 69 -> 18; + user(4) text(4) + 26 + 9 = 112 -> 28.
        let first = account(&b, "claude-x", Some(&cache), 0);
        assert_eq!(first, CacheUsage { read: 0, write_1h: 7, write_5m: 28 - 7 });
        let again = account(&body("Another question?"), "claude-x", Some(&cache), 1000);
        assert_eq!(again, CacheUsage { read: 28, write_1h: 0, write_5m: 0 });
        assert!(again.read + again.write() <= prompt_tokens(&b));
        let other_model = account(&b, "claude-y", Some(&cache), 1000);
        assert_eq!(other_model.read, 0, "caches are per model");
    }

    #[test]
    fn longest_cached_prefix_wins_and_entries_expire() {
        let cache = PromptCache::default();
        let b = body("q");
        account(&b, "m", Some(&cache), 0);
        let mut changed = b.clone();
        changed["messages"][0]["content"][0]["text"] = json!("A different document.");
        // The tools and system prefix (18 tokens) still hit; the document is written anew.
        let u = account(&changed, "m", Some(&cache), 60_000);
        assert_eq!((u.read, u.write_1h), (18, 0));
        assert!(u.write_5m > 0);
        // After 5 minutes without use only the 1-hour tool prefix is left.
        let later = account(&b, "m", Some(&cache), 60_000 + FIVE_MINUTES_MS + 1);
        assert_eq!(later, CacheUsage { read: 7, write_1h: 0, write_5m: 28 - 7 });
    }

    #[test]
    fn no_breakpoints_or_no_cache_state() {
        let plain = json!({"messages": [{"role": "user", "content": "hi"}], "system": "s"});
        assert_eq!(account(&plain, "m", None, 0), CacheUsage::default());
        let b = body("q");
        assert_eq!(account(&b, "m", None, 0), account(&b, "m", None, 0), "without state every call writes");
        let string_content =
            json!({"messages": [{"role": "user", "content": "hello", "cache_control": {"type": EPH}}]});
        assert_eq!(account(&string_content, "m", None, 0).write_5m, prompt_tokens(&string_content));
    }
}
