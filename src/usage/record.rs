//! What happened to one client request and each attempt inside it, reported after the response
//! as one usage event on the usage queue.

use crate::auth::context::RequestContext;
use crate::canonical::usage::Usage;
use crate::canonical::ChatRequest;
use crate::config;
use crate::config::routes::Deployment;
use crate::http::error::ApiError;
use crate::limits::budget::{self, BudgetClaim};
use crate::providers::UpstreamError;
use crate::usage;
use crate::usage::event::{CacheHit, RequestShape, UsageEvent};
use serde::Serialize;
use std::collections::BTreeMap;
use worker::{Context, Env};

#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub deployment: String,
    pub provider: &'static str,
    pub model: String,
    /// Key into the price table: the deployment's `price`, else its real model name.
    pub price_key: String,
    pub started_ms: u64,
    pub status: u16,
    pub error_class: Option<&'static str>,
    pub usage: Option<Usage>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    /// The vendor answered (a body, or a stream's first bytes): the vendor bills this attempt.
    pub served: bool,
    /// The deployment's default max tokens, which the limiter's estimate used.
    pub default_max_tokens: Option<u32>,
}

impl Attempt {
    pub fn succeeded(
        id: &str,
        d: &Deployment,
        usage: Option<Usage>,
        started_ms: u64,
        now_ms: u64,
        first_byte_ms: Option<u64>,
    ) -> Self {
        Attempt {
            deployment: id.to_string(),
            provider: d.provider.as_str(),
            model: d.model.clone(),
            price_key: price_key(d),
            started_ms,
            status: 200,
            error_class: None,
            usage,
            latency_ms: now_ms.saturating_sub(started_ms),
            ttft_ms: first_byte_ms.map(|t| t.saturating_sub(started_ms)),
            served: true,
            default_max_tokens: d.default_max_tokens,
        }
    }

    pub fn failed(id: &str, d: &Deployment, err: &UpstreamError, started_ms: u64) -> Self {
        Attempt {
            deployment: id.to_string(),
            provider: d.provider.as_str(),
            model: d.model.clone(),
            price_key: price_key(d),
            started_ms,
            status: err.status,
            error_class: Some(err.class.as_str()),
            usage: None,
            latency_ms: worker::Date::now().as_millis().saturating_sub(started_ms),
            ttft_ms: None,
            served: false,
            default_max_tokens: d.default_max_tokens,
        }
    }
}

fn price_key(d: &Deployment) -> String {
    d.price.clone().unwrap_or_else(|| d.model.clone())
}

#[derive(Debug, Clone, Serialize)]
pub struct RequestOutcome {
    pub request_id: String,
    pub started_ms: u64,
    pub tenant: String,
    pub app: String,
    pub env: String,
    pub logical_model: String,
    pub stream: bool,
    pub attempts: Vec<Attempt>,
    pub error_code: Option<String>,
    pub status: u16,
    /// From `x-gateway-tags`, then the request's `metadata` (the header wins on a clash).
    pub tags: BTreeMap<String, String>,
    /// The request's `user` (OpenAI's end-user id).
    pub end_user: Option<String>,
    /// What the limiter's estimate is computed from; billed when the vendor reports no usage.
    pub shape: Option<RequestShape>,
    pub finished_ms: Option<u64>,
    pub cache_hit: Option<CacheHit>,
    /// The tenant budget's reservation for this request, settled with the actual cost at the end.
    pub budget: Option<BudgetClaim>,
}

impl RequestOutcome {
    pub fn new(rc: &RequestContext, logical_model: &str, stream: bool) -> Self {
        RequestOutcome {
            request_id: rc.request_id.clone(),
            started_ms: rc.started_ms,
            tenant: rc.key.tenant.clone(),
            app: rc.key.app.clone(),
            env: rc.key.env.clone(),
            logical_model: logical_model.to_string(),
            stream,
            attempts: Vec::new(),
            error_code: None,
            status: 200,
            tags: rc.tags.as_deref().map(usage::event::parse_tags_header).unwrap_or_default(),
            end_user: None,
            shape: None,
            finished_ms: None,
            cache_hit: None,
            budget: None,
        }
    }

    /// Records what the usage event needs from a chat request: tags, end user, estimate inputs.
    pub fn describe(&mut self, chat: &ChatRequest) {
        let metadata = chat.metadata.as_ref().map(usage::event::metadata_tags).unwrap_or_default();
        self.tags = usage::event::merge_tags(std::mem::take(&mut self.tags), metadata);
        self.end_user = chat.user.clone().filter(|u| !u.is_empty());
        self.shape = Some(RequestShape {
            text_chars: chat.text_chars(),
            messages: chat.messages.len(),
            max_output: chat.max_output_tokens(),
        });
    }

    /// Served from the response cache: no upstream attempt; `usage` is what the original request
    /// was billed, recorded as what this hit avoided.
    pub fn record_cache_hit(&mut self, deployment: &str, usage: Option<Usage>, now_ms: u64) {
        self.cache_hit = Some(CacheHit {
            deployment: deployment.to_string(),
            provider: None,
            model: None,
            price_key: None,
            avoided: usage,
        });
        self.finished_ms = Some(now_ms);
    }

    pub fn clone_meta(&self) -> Self {
        self.clone()
    }

    pub fn fail(&mut self, err: &ApiError) {
        self.status = err.status;
        self.error_code = Some(err.code.clone());
    }

    /// Reports after the response is sent; never delays the client.
    pub fn finish(mut self, ctx: &Context, env: &Env) {
        self.finished_ms = Some(worker::Date::now().as_millis());
        let env = env.clone();
        ctx.wait_until(async move { self.finish_detached(&env).await });
    }

    /// Prices the request and sends its usage event; call inside `wait_until`.
    pub async fn finish_detached(mut self, env: &Env) {
        let now = worker::Date::now().as_millis();
        if let Some(hit) = self.cache_hit.as_mut() {
            // The cache keeps only the deployment id; the route table names its vendor and price.
            if let Some(d) = config::store::route_table(env, now)
                .await
                .ok()
                .and_then(|t| t.deployments.get(&hit.deployment).cloned())
            {
                hit.provider = Some(d.provider.as_str().to_string());
                hit.price_key = Some(price_key(&d));
                hit.model = Some(d.model);
            }
        }
        let prices = usage::queue::price_table(env, now).await;
        let mut event = UsageEvent::build(&self, prices.as_deref(), self.finished_ms.unwrap_or(now));
        if let Some(claim) = &self.budget {
            // An unknown cost (no price) keeps the reservation charged rather than nothing.
            let spent = budget::settle(env, claim, event.cost_micro_usd.unwrap_or(claim.reserved_micro_usd)).await;
            event.budget_soft_exceeded = claim.soft_exceeded_after(spent);
        }
        usage::queue::send(env, &event).await;
    }
}
