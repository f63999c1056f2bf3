//! The exact-response cache in KV (`CACHE`): tenant-scoped keys, per-route policy, SSE replay.

use crate::auth::context::RequestContext;
use crate::cache;
use crate::cache::key::cache_key;
use crate::cache::policy::{CacheDecision, CachePolicy, CachedAnswer, RequestFacts};
use crate::cache::AnswerFormat;
use crate::canonical::usage::Usage;
use crate::canonical::ChatRequest;
use serde_json::Value;
use worker::Env;

pub const CACHE_BINDING: &str = "CACHE";

/// Where a fresh upstream answer goes, if the cache may keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSlot {
    pub key: String,
    pub ttl_s: u32,
    pub format: AnswerFormat,
}

impl CacheSlot {
    /// The entry for `body`, when it is a complete answer the cache may keep.
    pub fn entry(&self, body: &[u8], usage: Option<Usage>, deployment: &str, now_ms: u64) -> Option<CachedAnswer> {
        let text = std::str::from_utf8(body).ok()?;
        let value = serde_json::from_str::<Value>(text).ok()?;
        self.format
            .storable(&value)
            .then(|| CachedAnswer::new(text.to_string(), usage, deployment.to_string(), now_ms, self.ttl_s))
    }
}

/// What the cache decided for one request, and the key it uses.
pub struct CacheUse {
    pub decision: CacheDecision,
    pub key: Option<String>,
}

impl CacheUse {
    /// `route` is [`cache::key::route_scope`] of what the request resolved to.
    pub fn decide(policy: &CachePolicy, chat: &ChatRequest, rc: &RequestContext, route: &str, body: &[u8]) -> CacheUse {
        if !policy.enabled {
            return CacheUse::disabled();
        }
        let text = cache::policy::prompt_text(chat);
        let facts = RequestFacts {
            temperature: chat.temperature,
            text: &text,
            cache_control: rc.cache_control.as_deref(),
            ttl_s: rc.cache_ttl_s,
        };
        Self::keyed(policy, &facts, || {
            serde_json::from_slice::<Value>(body).ok().map(|v| cache_key(&rc.key.tenant, route, &v))
        })
    }

    /// An Anthropic Messages request (`body` already parsed); `route` also names the door and the
    /// `anthropic-beta` / `anthropic-version` sent, which can change the answer.
    pub fn decide_message(policy: &CachePolicy, body: &Value, rc: &RequestContext, route: &str) -> CacheUse {
        if !policy.enabled {
            return CacheUse::disabled();
        }
        let text = cache::message::prompt_text(body);
        let facts = RequestFacts {
            temperature: body.get("temperature").and_then(Value::as_f64),
            text: &text,
            cache_control: rc.cache_control.as_deref(),
            ttl_s: rc.cache_ttl_s,
        };
        Self::keyed(policy, &facts, || Some(cache_key(&rc.key.tenant, route, body)))
    }

    /// The route does not cache: nothing is read, stored or keyed.
    pub fn disabled() -> CacheUse {
        CacheUse { decision: CacheDecision::Skip { reason: "disabled" }, key: None }
    }

    fn keyed(policy: &CachePolicy, facts: &RequestFacts, key: impl FnOnce() -> Option<String>) -> CacheUse {
        let decision = cache::policy::decide(policy, facts);
        let key = match decision {
            CacheDecision::Skip { .. } => None,
            _ => key(),
        };
        CacheUse { decision, key }
    }

    /// Where this request's fresh answer is stored, if it may be.
    pub fn slot(&self, format: AnswerFormat) -> Option<CacheSlot> {
        let (key, ttl_s) = self.key.clone().zip(self.decision.store_ttl_s())?;
        Some(CacheSlot { key, ttl_s, format })
    }

    /// The `x-gateway-cache` header value for a response that did not come from the cache.
    pub fn miss_label(&self) -> String {
        match self.decision {
            CacheDecision::Lookup { .. } => "miss".to_string(),
            CacheDecision::Refresh { .. } => "refresh".to_string(),
            CacheDecision::Skip { reason } => format!("skip; reason={reason}"),
        }
    }

    pub async fn lookup(&self, env: &Env, now_ms: u64) -> Option<CachedAnswer> {
        if !self.decision.reads() {
            return None;
        }
        let key = self.key.as_ref()?;
        let text = env.kv(CACHE_BINDING).ok()?.get(key).text().await.ok()??;
        let answer: CachedAnswer = serde_json::from_str(&text).ok()?;
        answer.is_fresh(now_ms).then_some(answer)
    }

    /// Stores a fresh upstream answer (called in `ctx.wait_until`).
    pub async fn store(key: String, answer: CachedAnswer, env: Env) {
        let Ok(kv) = env.kv(CACHE_BINDING) else { return };
        let Ok(value) = serde_json::to_string(&answer) else { return };
        let put = kv.put(&key, value).map(|p| p.expiration_ttl(answer.kv_ttl_s()));
        if let Err(e) = match put {
            Ok(p) => p.execute().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        } {
            crate::support::log::error(serde_json::json!({"event": "cache_store_failed", "error": e}));
        }
    }
}
