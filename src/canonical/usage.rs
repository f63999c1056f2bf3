//! Token usage as vendors report it, normalized to one shape for billing and reconciliation.
//!
//! `input` counts prompt tokens billed at the full input price, that is *excluding* cache reads and
//! cache writes (Anthropic's `input_tokens`; OpenAI's `prompt_tokens - cached_tokens`).
//! `cached_read` and `cache_write` are the other two parts of the prompt; `cache_write_1h` is the
//! part of `cache_write` written with Anthropic's 1-hour TTL (priced higher than 5-minute writes).
//! `output` counts every generated token, and `reasoning` is the part of `output` the model spent
//! thinking (already in `output`, reported for information).

use crate::canonical::usage_counts::{AnthropicCounts, OpenaiCounts};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cached_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
    #[serde(default)]
    pub cache_write_1h: u64,
}

/// OpenAI's `usage` object, in OpenAI's field order, for responses the gateway writes itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenaiUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub prompt_tokens_details: PromptTokensDetails,
    pub completion_tokens_details: CompletionTokensDetails,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompletionTokensDetails {
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Every prompt token, cached or not: what OpenAI calls `prompt_tokens`.
    pub fn prompt_tokens(&self) -> u64 {
        self.input.saturating_add(self.cached_read).saturating_add(self.cache_write)
    }

    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens().saturating_add(self.output)
    }

    /// Reads an OpenAI-style `usage` object (OpenAI, DeepSeek, Qwen, GLM, vLLM); `None` if it is not one.
    pub fn from_openai(usage: &Value) -> Option<Usage> {
        OpenaiCounts::deserialize(usage).ok().and_then(Usage::from_openai_counts)
    }

    /// The usage an OpenAI-style `usage` object's counts make; `None` without prompt or completion counts.
    pub fn from_openai_counts(counts: OpenaiCounts) -> Option<Usage> {
        let (prompt, completion) = (counts.prompt_tokens(), counts.completion_tokens());
        if prompt.is_none() && completion.is_none() {
            return None;
        }
        let prompt = prompt.unwrap_or(0);
        // DeepSeek reports its context-cache hits under its own name.
        let cached = counts.cached_tokens().or(counts.prompt_cache_hit_tokens()).unwrap_or(0).min(prompt);
        Some(Usage {
            input: prompt - cached,
            output: completion.unwrap_or(0),
            cached_read: cached,
            cache_write: 0,
            reasoning: counts.reasoning_tokens().unwrap_or(0),
            cache_write_1h: 0,
        })
    }

    /// Reads an Anthropic `usage` object; `None` if it carries no token counts.
    pub fn from_anthropic(usage: &Value) -> Option<Usage> {
        AnthropicCounts::deserialize(usage).ok().and_then(Usage::from_anthropic_counts)
    }

    /// The usage an Anthropic `usage` object's counts make; `None` if it carries none.
    pub fn from_anthropic_counts(counts: AnthropicCounts) -> Option<Usage> {
        let mut u = Usage::default();
        u.merge_anthropic_counts(counts).then_some(u)
    }

    /// Overwrites the fields an Anthropic `usage` object carries (stream counts are cumulative);
    /// returns whether it carried any.
    pub fn merge_anthropic(&mut self, usage: &Value) -> bool {
        AnthropicCounts::deserialize(usage).is_ok_and(|counts| self.merge_anthropic_counts(counts))
    }

    /// [`merge_anthropic`](Self::merge_anthropic) of the counts already read.
    pub fn merge_anthropic_counts(&mut self, counts: AnthropicCounts) -> bool {
        if !counts.is_object() {
            return false;
        }
        let mut any = false;
        let mut take = |count: Option<u64>, slot: &mut u64| {
            if let Some(n) = count {
                *slot = n;
                any = true;
            }
        };
        take(counts.input_tokens(), &mut self.input);
        take(counts.output_tokens(), &mut self.output);
        take(counts.cache_read_input_tokens(), &mut self.cached_read);
        take(counts.cache_creation_input_tokens(), &mut self.cache_write);
        if let Some(n) = counts.ephemeral_1h_input_tokens() {
            self.cache_write_1h = n;
        }
        // Thinking is part of `output_tokens`; the thinking-token-count beta reports how much.
        if let Some(n) = counts.thinking_tokens() {
            self.reasoning = n;
        }
        self.cache_write_1h = self.cache_write_1h.min(self.cache_write);
        any
    }

    pub fn to_openai(&self) -> OpenaiUsage {
        OpenaiUsage {
            prompt_tokens: self.prompt_tokens(),
            completion_tokens: self.output,
            total_tokens: self.total_tokens(),
            prompt_tokens_details: PromptTokensDetails { cached_tokens: self.cached_read },
            completion_tokens_details: CompletionTokensDetails { reasoning_tokens: self.reasoning },
        }
    }
}

/// An Anthropic stream's usage as it arrives, and the output it delivered. `message_start`
/// carries a placeholder `output_tokens` (1) that only `message_delta` replaces, so a stream cut
/// before that would bill one output token whatever it sent: then the output is estimated from
/// what was delivered (the estimate's 4 characters a token) and flagged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnthropicStreamUsage {
    reported: Option<Usage>,
    output_final: bool,
    delivered_chars: u64,
}

/// Characters per token for delivered output, as the reservation's estimate counts them.
const CHARS_PER_TOKEN: u64 = 4;

impl AnthropicStreamUsage {
    /// `message_start`'s `usage` (input tokens, cache, the output placeholder).
    pub fn start(&mut self, usage: AnthropicCounts) {
        self.merge(usage);
    }

    /// `message_delta`'s `usage`: its `output_tokens` is the real count.
    pub fn delta(&mut self, usage: AnthropicCounts) {
        self.output_final |= usage.output_tokens().is_some();
        self.merge(usage);
    }

    /// Generated content that went out: text, thinking, tool-argument JSON.
    pub fn delivered(&mut self, text: &str) {
        self.delivered_chars(text.chars().count() as u64);
    }

    /// [`delivered`](Self::delivered) of output already counted, in characters.
    pub fn delivered_chars(&mut self, chars: u64) {
        self.delivered_chars = self.delivered_chars.saturating_add(chars);
    }

    fn merge(&mut self, usage: AnthropicCounts) {
        let mut u = self.reported.unwrap_or_default();
        if u.merge_anthropic_counts(usage) {
            self.reported = Some(u);
        }
    }

    /// What to bill: the vendor's usage, with the output estimated from what was delivered
    /// when its final count never came (never below the vendor's placeholder).
    pub fn usage(&self) -> Option<Usage> {
        let mut usage = self.reported?;
        if !self.output_final {
            usage.output = usage.output.max(self.delivered_chars.div_ceil(CHARS_PER_TOKEN));
        }
        Some(usage)
    }

    /// Whether [`usage`](Self::usage)'s output is an estimate.
    pub fn estimated(&self) -> bool {
        self.reported.is_some() && !self.output_final
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cut_anthropic_stream_bills_what_it_delivered_and_says_so() {
        let mut s = AnthropicStreamUsage::default();
        assert_eq!((s.usage(), s.estimated()), (None, false));
        s.start(AnthropicCounts::of(&json!({"input_tokens": 25, "cache_read_input_tokens": 7, "output_tokens": 1})));
        s.delivered("Hello from the vendor, ");
        s.delivered("{\"city\": \"Paris\"}");
        let cut = s.usage().unwrap();
        assert_eq!((cut.input, cut.cached_read, cut.output), (25, 7, 10), "40 characters → 10 tokens, not 1");
        assert!(s.estimated());
        s.delta(AnthropicCounts::of(&json!({"output_tokens": 9})));
        assert_eq!((s.usage().unwrap().output, s.estimated()), (9, false), "the vendor's final count wins");
        let mut quiet = AnthropicStreamUsage::default();
        quiet.start(AnthropicCounts::of(&json!({"input_tokens": 3, "output_tokens": 1})));
        assert_eq!((quiet.usage().unwrap().output, quiet.estimated()), (1, true), "nothing delivered");
    }

    #[test]
    fn openai_cached_and_reasoning_split_out() {
        let u = Usage::from_openai(&json!({
            "prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 192, "audio_tokens": 0}
        }))
        .unwrap();
        assert_eq!(
            u,
            Usage { input: 86, output: 300, cached_read: 1920, cache_write: 0, reasoning: 192, cache_write_1h: 0 }
        );
        assert_eq!(u.prompt_tokens(), 2006);
        assert_eq!(u.total_tokens(), 2306);
    }

    #[test]
    fn deepseek_cache_hit_tokens() {
        let u = Usage::from_openai(&json!({
            "prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
            "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36
        }))
        .unwrap();
        assert_eq!((u.input, u.cached_read), (36, 64));
    }

    #[test]
    fn openai_null_or_garbage_is_none() {
        assert_eq!(Usage::from_openai(&Value::Null), None);
        assert_eq!(Usage::from_openai(&json!({"foo": 1})), None);
        let cached_exceeds =
            Usage::from_openai(&json!({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}));
        assert_eq!(cached_exceeds.unwrap().input, 0);
    }

    #[test]
    fn anthropic_cache_ttl_split_and_thinking() {
        let u = Usage::from_anthropic(&json!({
            "input_tokens": 5, "output_tokens": 40, "cache_read_input_tokens": 11,
            "cache_creation_input_tokens": 7,
            "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 4},
            "output_tokens_details": {"thinking_tokens": 9}
        }))
        .unwrap();
        assert_eq!(u, Usage { input: 5, output: 40, cached_read: 11, cache_write: 7, reasoning: 9, cache_write_1h: 4 });
        // A split larger than the total is not believed past the total.
        let odd = Usage::from_anthropic(&json!({"cache_creation_input_tokens": 2,
            "cache_creation": {"ephemeral_1h_input_tokens": 5}}));
        assert_eq!(odd.unwrap().cache_write_1h, 2);
    }

    #[test]
    fn anthropic_merge_is_cumulative_overwrite() {
        let mut u = Usage::from_anthropic(&json!({
            "input_tokens": 25, "output_tokens": 1,
            "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000
        }))
        .unwrap();
        assert!(u.merge_anthropic(&json!({"output_tokens": 15})));
        assert_eq!(
            u,
            Usage { input: 25, output: 15, cached_read: 2000, cache_write: 100, reasoning: 0, cache_write_1h: 0 }
        );
        assert!(!u.merge_anthropic(&json!({"server_tool_use": {}})));
        let o = serde_json::to_value(u.to_openai()).unwrap();
        assert_eq!(
            o,
            json!({"prompt_tokens": 2125, "completion_tokens": 15, "total_tokens": 2140,
                   "prompt_tokens_details": {"cached_tokens": 2000}, "completion_tokens_details": {"reasoning_tokens": 0}})
        );
    }
}
