//! When the exact cache may answer or store a request, what a cache entry holds, and how a
//! cached JSON answer is replayed to a streaming client.

use crate::canonical::completion::{Chunk, ChunkChoice, Delta, ToolDelta, ToolFunction, CHUNK_OBJECT};
use crate::canonical::usage::Usage;
use crate::canonical::{ChatRequest, ToolCall};
pub use crate::config::policy::{CachePolicy, DEFAULT_MAX_TTL_S, DEFAULT_SKIP_PATTERNS, DEFAULT_TTL_S, KV_MIN_TTL_S};
use crate::http::sse::write_data;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What `decide` needs to know about one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts<'a> {
    /// `None` is the vendor default, 1.
    pub temperature: Option<f64>,
    /// The prompt text the skip patterns are matched against (see [`prompt_text`]).
    pub text: &'a str,
    pub cache_control: Option<&'a str>,
    /// The `x-gateway-cache-ttl` header, seconds (checked by `auth::headers`).
    pub ttl_s: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheDecision {
    /// Look the request up; on a miss, store the answer for `ttl_s`.
    Lookup { ttl_s: u32 },
    /// `Cache-Control: no-cache`: ask upstream, then store the fresh answer for `ttl_s`.
    Refresh { ttl_s: u32 },
    /// Neither read nor write the cache.
    Skip { reason: &'static str },
}

impl CacheDecision {
    pub fn reads(&self) -> bool {
        matches!(self, CacheDecision::Lookup { .. })
    }

    /// How long to keep the answer, if it may be stored.
    pub fn store_ttl_s(&self) -> Option<u32> {
        match *self {
            CacheDecision::Lookup { ttl_s } | CacheDecision::Refresh { ttl_s } => Some(ttl_s),
            CacheDecision::Skip { .. } => None,
        }
    }
}

pub fn decide(policy: &CachePolicy, facts: &RequestFacts) -> CacheDecision {
    if !policy.enabled {
        return CacheDecision::Skip { reason: "disabled" };
    }
    let directives = CacheControl::parse(facts.cache_control.unwrap_or(""));
    if directives.no_store {
        return CacheDecision::Skip { reason: "no_store" };
    }
    if !policy.cache_nonzero_temperature && facts.temperature.unwrap_or(1.0) != 0.0 {
        return CacheDecision::Skip { reason: "temperature" };
    }
    if !policy.skip_patterns.is_empty() {
        let text = facts.text.to_lowercase();
        if policy.skip_patterns.iter().any(|p| glob_contains(&text, &p.to_lowercase())) {
            return CacheDecision::Skip { reason: "skip_pattern" };
        }
    }
    let max = policy.max_ttl_s.max(1);
    let ttl_s = facts.ttl_s.map_or(policy.ttl_s, |s| s.min(u32::MAX as u64) as u32).clamp(1, max);
    if directives.no_cache {
        CacheDecision::Refresh { ttl_s }
    } else {
        CacheDecision::Lookup { ttl_s }
    }
}

/// Every message's text, one message per line: what skip patterns are matched against.
pub fn prompt_text(req: &ChatRequest) -> String {
    let mut text = String::new();
    for content in req.messages.iter().filter_map(|m| m.content.as_ref()) {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&content.text());
    }
    text
}

#[derive(Debug, Default, PartialEq, Eq)]
struct CacheControl {
    no_store: bool,
    no_cache: bool,
}

impl CacheControl {
    fn parse(header: &str) -> CacheControl {
        let mut cc = CacheControl::default();
        for directive in header.split(',') {
            let (name, value) = directive.split_once('=').unwrap_or((directive, ""));
            let name = name.trim();
            if name.eq_ignore_ascii_case("no-store") {
                cc.no_store = true;
            } else if name.eq_ignore_ascii_case("no-cache") {
                cc.no_cache = true;
            } else if name.eq_ignore_ascii_case("max-age") && value.trim().trim_matches('"') == "0" {
                // What browsers send on reload: nothing stored is fresh enough.
                cc.no_cache = true;
            }
        }
        cc
    }
}

/// Whether `text` contains `pattern`, where each `*` in the pattern matches any run of characters.
/// Greedy leftmost matching is exact for `*`-only globs and stays linear in the text.
fn glob_contains(text: &str, pattern: &str) -> bool {
    let mut segments = pattern.split('*').filter(|s| !s.is_empty()).peekable();
    if segments.peek().is_none() {
        return false;
    }
    let mut rest = text;
    for segment in segments {
        match rest.find(segment) {
            Some(at) => rest = &rest[at + segment.len()..],
            None => return false,
        }
    }
    true
}

/// One KV cache entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedAnswer {
    /// The `chat.completion` JSON exactly as the first client received it.
    pub body: String,
    pub created_at_ms: u64,
    /// KV keeps entries at least [`KV_MIN_TTL_S`]; this is when the entry stops being served.
    pub expires_at_ms: u64,
    /// What the first request was billed; a hit records it as the cost avoided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub deployment: String,
}

impl CachedAnswer {
    pub fn new(body: String, usage: Option<Usage>, deployment: String, now_ms: u64, ttl_s: u32) -> Self {
        CachedAnswer {
            body,
            created_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(ttl_s as u64 * 1000),
            usage,
            deployment,
        }
    }

    pub fn is_fresh(&self, now_ms: u64) -> bool {
        now_ms < self.expires_at_ms
    }

    /// Whole seconds since the entry was stored: the `Age` header.
    pub fn age_s(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.created_at_ms) / 1000
    }

    /// The KV `expiration_ttl` to write the entry with.
    pub fn kv_ttl_s(&self) -> u64 {
        let ttl_ms = self.expires_at_ms.saturating_sub(self.created_at_ms);
        ttl_ms.div_ceil(1000).max(KV_MIN_TTL_S as u64)
    }
}

/// Whether an upstream answer may be cached: a complete `chat.completion`, not a filtered one.
pub fn storable(body: &Value) -> bool {
    let Some(choices) = body.get("choices").and_then(Value::as_array) else { return false };
    body.get("object").and_then(Value::as_str) == Some("chat.completion")
        && !choices.is_empty()
        && choices.iter().all(|c| match c.get("finish_reason").and_then(Value::as_str) {
            Some(reason) => reason != "content_filter",
            None => false,
        })
}

/// What replay reads of a stored `chat.completion` (lenient: absent fields default).
#[derive(Deserialize)]
struct CompletionView {
    id: String,
    #[serde(default)]
    created: u64,
    model: String,
    #[serde(default)]
    system_fingerprint: Option<String>,
    choices: Vec<ChoiceView>,
    #[serde(default)]
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct ChoiceView {
    #[serde(default)]
    index: u32,
    message: MessageView,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct MessageView {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    /// DeepSeek-style reasoning text, streamed before the content.
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

fn only(index: u32, delta: Delta<'_>) -> Vec<ChunkChoice<'_>> {
    vec![ChunkChoice::delta(index, delta)]
}

/// A cached `chat.completion` as the OpenAI stream a live request would have produced: per choice
/// a role chunk, reasoning, content, refusal and tool-call chunks, a finish chunk; then the usage
/// chunk if the client asked for it (`stream_options.include_usage`) and `data: [DONE]`.
/// `None` when `body` is not a chat completion (treat the entry as a miss).
pub fn replay_as_sse(body: &str, include_usage: bool) -> Option<Vec<u8>> {
    let completion: CompletionView = serde_json::from_str(body).ok()?;
    let mut out = Vec::with_capacity(body.len() + 512);
    let chunk = |choices: Vec<ChunkChoice>, usage: Option<&Value>, out: &mut Vec<u8>| {
        let chunk = Chunk {
            id: &completion.id,
            object: CHUNK_OBJECT,
            created: completion.created,
            model: &completion.model,
            system_fingerprint: completion.system_fingerprint.as_deref(),
            choices,
            usage,
        };
        write_data(out, &serde_json::to_string(&chunk).expect("chunks always serialize"));
    };
    for choice in &completion.choices {
        let (index, message) = (choice.index, &choice.message);
        chunk(only(index, Delta { role: Some("assistant"), content: Some(""), ..Delta::default() }), None, &mut out);
        if let Some(text) = message.reasoning_content.as_deref().filter(|s| !s.is_empty()) {
            chunk(only(index, Delta { reasoning_content: Some(text), ..Delta::default() }), None, &mut out);
        }
        if let Some(text) = message.content.as_deref().filter(|s| !s.is_empty()) {
            chunk(only(index, Delta { content: Some(text), ..Delta::default() }), None, &mut out);
        }
        if let Some(text) = message.refusal.as_deref().filter(|s| !s.is_empty()) {
            chunk(only(index, Delta { refusal: Some(text), ..Delta::default() }), None, &mut out);
        }
        for (i, call) in message.tool_calls.iter().flatten().enumerate() {
            let function = call.function.as_ref().map(ToolFunction::Whole);
            let tool = ToolDelta { index: i, id: Some(&call.id), kind: Some(&call.kind), function };
            chunk(only(index, Delta { tool_calls: Some([tool]), ..Delta::default() }), None, &mut out);
        }
        let finish = choice.finish_reason.as_deref().unwrap_or("stop");
        let done = ChunkChoice { index, delta: Delta::default(), logprobs: None, finish_reason: Some(finish) };
        chunk(vec![done], None, &mut out);
    }
    if let Some(usage) = completion.usage.as_ref().filter(|_| include_usage) {
        chunk(Vec::new(), Some(usage), &mut out);
    }
    write_data(&mut out, "[DONE]");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::sse::SseParser;
    use serde_json::json;

    fn on() -> CachePolicy {
        CachePolicy { enabled: true, ttl_s: 600, max_ttl_s: 3_600, ..CachePolicy::default() }
    }

    fn facts(text: &str) -> RequestFacts<'_> {
        RequestFacts { temperature: Some(0.0), text, cache_control: None, ttl_s: None }
    }

    fn skip(reason: &'static str) -> CacheDecision {
        CacheDecision::Skip { reason }
    }

    #[test]
    fn default_policy_is_off_with_builtin_skip_patterns() {
        let p = CachePolicy::default();
        assert!(!p.enabled && !p.cache_nonzero_temperature);
        assert_eq!((p.ttl_s, p.max_ttl_s), (DEFAULT_TTL_S, DEFAULT_MAX_TTL_S));
        assert_eq!(p.skip_patterns.len(), DEFAULT_SKIP_PATTERNS.len());
        assert_eq!(decide(&p, &facts("hello")), skip("disabled"));
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn policy_json_shape() {
        let p: CachePolicy = serde_json::from_value(json!({
            "enabled": true, "ttl_s": 60, "max_ttl_s": 600,
            "cache_nonzero_temperature": true, "skip_patterns": ["weather*now"]
        }))
        .unwrap();
        assert_eq!(p.skip_patterns, vec!["weather*now"]);
        let partial: CachePolicy = serde_json::from_value(json!({"enabled": true})).unwrap();
        assert_eq!(partial, CachePolicy { enabled: true, ..CachePolicy::default() });
        let cleared: CachePolicy = serde_json::from_value(json!({"enabled": true, "skip_patterns": []})).unwrap();
        assert!(cleared.skip_patterns.is_empty());
        assert!(serde_json::from_value::<CachePolicy>(json!({"enabled": true, "ttl": 5})).is_err());
        assert_eq!(serde_json::to_value(&p).unwrap()["ttl_s"], 60);
    }

    #[test]
    fn validation() {
        assert!(CachePolicy { ttl_s: 0, ..on() }.validate().unwrap_err().contains("ttl_s"));
        assert!(CachePolicy { ttl_s: 7_200, ..on() }.validate().unwrap_err().contains("3600"));
        assert!(CachePolicy { max_ttl_s: 0, ..on() }.validate().is_err());
        let star = CachePolicy { skip_patterns: vec!["today".into(), " * ".into()], ..on() };
        assert!(star.validate().unwrap_err().contains("skip_patterns[1]"));
    }

    #[test]
    fn enabled_policy_looks_up_with_route_ttl() {
        assert_eq!(decide(&on(), &facts("What is 2+2?")), CacheDecision::Lookup { ttl_s: 600 });
        let d = decide(&on(), &facts("What is 2+2?"));
        assert!(d.reads() && d.store_ttl_s() == Some(600));
    }

    #[test]
    fn no_store_neither_reads_nor_writes() {
        for header in ["no-store", "No-Store", "private, no-store", "no-cache, no-store", "max-age=0,no-store"] {
            let d = decide(&on(), &RequestFacts { cache_control: Some(header), ..facts("hi") });
            assert_eq!(d, skip("no_store"), "{header}");
            assert_eq!(d.store_ttl_s(), None);
        }
    }

    #[test]
    fn no_cache_skips_lookup_but_stores() {
        for header in ["no-cache", " NO-CACHE ", "max-age=0", "private, no-cache"] {
            let d = decide(&on(), &RequestFacts { cache_control: Some(header), ..facts("hi") });
            assert_eq!(d, CacheDecision::Refresh { ttl_s: 600 }, "{header}");
            assert!(!d.reads());
        }
        for header in ["", "max-age=60", "no-transform", "public"] {
            let d = decide(&on(), &RequestFacts { cache_control: Some(header), ..facts("hi") });
            assert_eq!(d, CacheDecision::Lookup { ttl_s: 600 }, "{header}");
        }
    }

    #[test]
    fn ttl_header_is_clamped_to_route_bounds() {
        let with_ttl = |s: u64| decide(&on(), &RequestFacts { ttl_s: Some(s), ..facts("hi") });
        assert_eq!(with_ttl(120), CacheDecision::Lookup { ttl_s: 120 });
        assert_eq!(with_ttl(0), CacheDecision::Lookup { ttl_s: 1 });
        assert_eq!(with_ttl(999_999), CacheDecision::Lookup { ttl_s: 3_600 });
        assert_eq!(with_ttl(u64::MAX), CacheDecision::Lookup { ttl_s: 3_600 });
        let refresh = RequestFacts { ttl_s: Some(30), cache_control: Some("no-cache"), ..facts("hi") };
        assert_eq!(decide(&on(), &refresh), CacheDecision::Refresh { ttl_s: 30 });
        let misconfigured = CachePolicy { ttl_s: 10_000, max_ttl_s: 0, ..on() };
        assert_eq!(decide(&misconfigured, &facts("hi")), CacheDecision::Lookup { ttl_s: 1 });
    }

    #[test]
    fn nonzero_temperature_skips_unless_allowed() {
        for t in [Some(0.7), Some(1.0), Some(2.0), None] {
            assert_eq!(decide(&on(), &RequestFacts { temperature: t, ..facts("hi") }), skip("temperature"), "{t:?}");
        }
        let allowed = CachePolicy { cache_nonzero_temperature: true, ..on() };
        for t in [Some(0.7), None, Some(0.0)] {
            assert!(decide(&allowed, &RequestFacts { temperature: t, ..facts("hi") }).reads());
        }
        assert!(decide(&on(), &RequestFacts { temperature: Some(-0.0), ..facts("hi") }).reads());
    }

    #[test]
    fn builtin_skip_patterns_catch_time_and_personal_questions() {
        for text in
            ["What's the weather TODAY?", "check my Account balance", "What happened yesterday", "现在 right now"]
        {
            assert_eq!(decide(&on(), &facts(text)), skip("skip_pattern"), "{text}");
        }
        for text in ["Translate 'good morning' to French", "Summarize the account of the battle"] {
            assert!(decide(&on(), &facts(text)).reads(), "{text}");
        }
        let none = CachePolicy { skip_patterns: Vec::new(), ..on() };
        assert!(decide(&none, &facts("What's on today?")).reads());
    }

    #[test]
    fn glob_patterns() {
        let p = CachePolicy { skip_patterns: vec!["order *#*status".into(), "今天".into(), "ÉTAT".into()], ..on() };
        assert_eq!(decide(&p, &facts("what is the ORDER 42 #A7 status?")), skip("skip_pattern"));
        assert_eq!(decide(&p, &facts("order status #1")), CacheDecision::Lookup { ttl_s: 600 });
        assert_eq!(decide(&p, &facts("今天天气怎么样")), skip("skip_pattern"));
        assert_eq!(decide(&p, &facts("quel est l'état du système")), skip("skip_pattern"));
        assert!(glob_contains("abc", "a*c") && glob_contains("abc", "b") && glob_contains("aXbXc", "a*b*c"));
        assert!(!glob_contains("acb", "a*b*c") && !glob_contains("abc", "*") && !glob_contains("abc", ""));
        assert!(glob_contains("xxaxxbxx", "*a*b*"));
    }

    #[test]
    fn rules_apply_in_order() {
        let all = RequestFacts { temperature: Some(1.0), text: "today", cache_control: Some("no-store"), ttl_s: None };
        assert_eq!(decide(&CachePolicy::default(), &all), skip("disabled"));
        assert_eq!(decide(&on(), &all), skip("no_store"));
        assert_eq!(decide(&on(), &RequestFacts { cache_control: None, ..all }), skip("temperature"));
        let warm = RequestFacts { cache_control: None, temperature: Some(0.0), ..all };
        assert_eq!(decide(&on(), &warm), skip("skip_pattern"));
    }

    #[test]
    fn prompt_text_joins_message_texts() {
        let req = ChatRequest::parse(
            json!({"model": "m", "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
            ]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(prompt_text(&req), "sys\nab");
    }

    #[test]
    fn cached_answer_freshness_and_kv_ttl() {
        let a = CachedAnswer::new("{}".into(), None, "d1".into(), 10_000, 30);
        assert_eq!(a.expires_at_ms, 40_000);
        assert!(a.is_fresh(39_999) && !a.is_fresh(40_000));
        assert_eq!((a.age_s(10_000), a.age_s(12_999), a.age_s(13_000), a.age_s(5)), (0, 2, 3, 0));
        assert_eq!(a.kv_ttl_s(), 60);
        assert_eq!(CachedAnswer::new("{}".into(), None, "d".into(), 0, 3_600).kv_ttl_s(), 3_600);
        let usage = Usage { input: 10, output: 5, ..Usage::default() };
        let stored = CachedAnswer::new("{\"a\":1}".into(), Some(usage), "d".into(), 1, 1);
        let text = serde_json::to_string(&stored).unwrap();
        assert_eq!(serde_json::from_str::<CachedAnswer>(&text).unwrap(), stored);
        let bare: CachedAnswer =
            serde_json::from_str(r#"{"body":"{}","created_at_ms":1,"expires_at_ms":2,"deployment":"d"}"#).unwrap();
        assert_eq!(bare.usage, None);
    }

    #[test]
    fn only_complete_unfiltered_completions_are_storable() {
        let ok =
            json!({"object": "chat.completion", "choices": [{"finish_reason": "stop"}, {"finish_reason": "length"}]});
        assert!(storable(&ok));
        assert!(storable(&json!({"object": "chat.completion", "choices": [{"finish_reason": "tool_calls"}]})));
        for bad in [
            json!({"object": "chat.completion", "choices": [{"finish_reason": "content_filter"}]}),
            json!({"object": "chat.completion", "choices": [{"finish_reason": null}]}),
            json!({"object": "chat.completion", "choices": []}),
            json!({"object": "chat.completion.chunk", "choices": [{"finish_reason": "stop"}]}),
            json!({"error": {"message": "x"}}),
        ] {
            assert!(!storable(&bad), "{bad}");
        }
    }

    fn events(bytes: &[u8]) -> Vec<String> {
        let text = std::str::from_utf8(bytes).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(text.split("\n\n").all(|e| e.is_empty() || e.starts_with("data: ")), "{text}");
        let mut parser = SseParser::new();
        parser.feed(bytes);
        std::iter::from_fn(|| parser.next_event()).map(|e| e.data).collect()
    }

    fn completion() -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-4o-mini",
            "system_fingerprint": "fp_1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris.\nIt is \"lovely\" 🇫🇷", "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        })
    }

    #[test]
    fn replay_text_answer() {
        let sse = replay_as_sse(&completion().to_string(), false).unwrap();
        let events = events(&sse);
        assert_eq!(events.len(), 4);
        let chunks: Vec<Value> = events[..3].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!((c["id"].as_str(), c["model"].as_str()), (Some("chatcmpl-1"), Some("gpt-4o-mini")));
            assert_eq!((c["created"].as_u64(), c["system_fingerprint"].as_str()), (Some(1_700_000_000), Some("fp_1")));
            assert!(c.get("usage").is_none());
        }
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        assert_eq!(chunks[0]["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(chunks[1]["choices"][0]["delta"], json!({"content": "Paris.\nIt is \"lovely\" 🇫🇷"}));
        assert_eq!(
            chunks[2]["choices"][0],
            json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"})
        );
        assert_eq!(events[3], "[DONE]");
    }

    #[test]
    fn replay_usage_only_when_asked() {
        let body = completion().to_string();
        let events = events(&replay_as_sse(&body, true).unwrap());
        assert_eq!(events.len(), 5);
        let usage: Value = serde_json::from_str(&events[3]).unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 15);
        let mut no_usage = completion();
        no_usage.as_object_mut().unwrap().remove("usage");
        assert_eq!(self::events(&replay_as_sse(&no_usage.to_string(), true).unwrap()).len(), 4);
    }

    #[test]
    fn replay_tool_calls() {
        let body = json!({
            "id": "c2", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "time", "arguments": "{}"}}
            ]}}]
        });
        let events = events(&replay_as_sse(&body.to_string(), false).unwrap());
        assert_eq!(events.len(), 5);
        let calls: Vec<Value> = events[1..3]
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap()["choices"][0]["delta"].clone())
            .collect();
        assert_eq!(
            calls[0],
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]})
        );
        assert_eq!(calls[1]["tool_calls"][0]["index"], 1);
        assert_eq!(calls[1]["tool_calls"][0]["id"], "call_b");
        let finish: Value = serde_json::from_str(&events[3]).unwrap();
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn replay_reasoning_refusal_and_several_choices() {
        let body = json!({
            "id": "c3", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "reasoning_content": "think", "content": "A"}},
                {"index": 1, "finish_reason": "stop", "message": {"role": "assistant", "content": null, "refusal": "no"}}
            ]
        });
        let events = events(&replay_as_sse(&body.to_string(), true).unwrap());
        let deltas: Vec<(u64, Value)> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .map(|c| (c["choices"][0]["index"].as_u64().unwrap(), c["choices"][0]["delta"].clone()))
            .collect();
        assert_eq!(
            deltas,
            vec![
                (0, json!({"role": "assistant", "content": ""})),
                (0, json!({"reasoning_content": "think"})),
                (0, json!({"content": "A"})),
                (0, json!({})),
                (1, json!({"role": "assistant", "content": ""})),
                (1, json!({"refusal": "no"})),
                (1, json!({})),
            ]
        );
    }

    #[test]
    fn replay_rejects_what_is_not_a_completion() {
        assert_eq!(replay_as_sse("not json", false), None);
        assert_eq!(replay_as_sse(r#"{"error":{"message":"x"}}"#, false), None);
        let empty = json!({"id": "c", "object": "chat.completion", "model": "m", "choices": []});
        assert_eq!(events(&replay_as_sse(&empty.to_string(), false).unwrap()), vec!["[DONE]"]);
    }
}
