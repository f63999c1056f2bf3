//! The per-model policies an admin sets in the route table: how to retry, what to cache.
//! Here, with the route table, so the layers that apply them (pipeline, cache) import downward.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Upstream attempts per client request, fallbacks included.
    pub max_attempts: u32,
    pub base_backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// Retries may not exceed this share (percent) of requests per deployment in a window.
    pub budget_pct: u32,
    pub budget_window_ms: u64,
    /// A Retry-After longer than this is not waited for: the request fails over or fails.
    pub max_retry_after_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            base_backoff_ms: 100,
            max_backoff_ms: 2_000,
            budget_pct: 20,
            budget_window_ms: 10_000,
            max_retry_after_ms: 5_000,
        }
    }
}

pub const DEFAULT_TTL_S: u32 = 3_600;
pub const DEFAULT_MAX_TTL_S: u32 = 86_400;

/// Cloudflare KV refuses an expiration TTL under 60 s; shorter lifetimes are enforced on read.
pub const KV_MIN_TTL_S: u32 = 60;

/// The answer to these depends on when or for whom it is asked; a route clears them with `[]`.
pub const DEFAULT_SKIP_PATTERNS: &[&str] = &[
    "today",
    "tonight",
    "tomorrow",
    "yesterday",
    "right now",
    "current time",
    "this week",
    "latest news",
    "my account",
    "my order",
    "my balance",
];

/// A route's cache policy (`"cache"` in the route table). Off unless the route turns it on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CachePolicy {
    pub enabled: bool,
    pub ttl_s: u32,
    /// The most `x-gateway-cache-ttl` may ask for.
    pub max_ttl_s: u32,
    /// Sampling at temperature > 0 gives a different answer each time; caching pins one of them.
    pub cache_nonzero_temperature: bool,
    /// Case-insensitive substrings of the prompt text; `*` stands for any run of characters.
    pub skip_patterns: Vec<String>,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            enabled: false,
            ttl_s: DEFAULT_TTL_S,
            max_ttl_s: DEFAULT_MAX_TTL_S,
            cache_nonzero_temperature: false,
            skip_patterns: DEFAULT_SKIP_PATTERNS.iter().map(|p| p.to_string()).collect(),
        }
    }
}

impl CachePolicy {
    /// What the route validator reports; `decide` copes with invalid values anyway.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_ttl_s == 0 {
            return Err("cache.max_ttl_s must be at least 1".into());
        }
        if self.ttl_s == 0 || self.ttl_s > self.max_ttl_s {
            return Err(format!("cache.ttl_s must be between 1 and max_ttl_s ({})", self.max_ttl_s));
        }
        for (i, p) in self.skip_patterns.iter().enumerate() {
            if p.split('*').all(|s| s.trim().is_empty()) {
                return Err(format!("cache.skip_patterns[{i}] would match every prompt: {p:?}"));
            }
        }
        Ok(())
    }
}
