//! The exact-response cache in KV (`CACHE`): tenant-scoped keys, per-route policy, SSE replay.

use crate::auth::context::RequestContext;
use crate::cache;
use crate::cache::key::cache_key;
use crate::cache::policy::{CacheDecision, CachePolicy, CachedAnswer, RequestFacts};
use crate::canonical::ChatRequest;
use serde_json::Value;
use worker::Env;

pub const CACHE_BINDING: &str = "CACHE";

/// What the cache decided for one request, and the key it uses.
pub struct CacheUse {
    pub decision: CacheDecision,
    pub key: Option<String>,
}

impl CacheUse {
    /// `route` is [`cache::key::route_scope`] of what the request resolved to.
    pub fn decide(policy: &CachePolicy, chat: &ChatRequest, rc: &RequestContext, route: &str, body: &[u8]) -> CacheUse {
        if !policy.enabled {
            return CacheUse { decision: CacheDecision::Skip { reason: "disabled" }, key: None };
        }
        let text = cache::policy::prompt_text(chat);
        let facts = RequestFacts {
            temperature: chat.temperature,
            text: &text,
            cache_control: rc.cache_control.as_deref(),
            ttl_s: rc.cache_ttl_s,
        };
        let decision = cache::policy::decide(policy, &facts);
        let key = match decision {
            CacheDecision::Skip { .. } => None,
            _ => serde_json::from_slice::<Value>(body).ok().map(|v| cache_key(&rc.key.tenant, route, &v)),
        };
        CacheUse { decision, key }
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
