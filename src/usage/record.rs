//! What happened to one client request and each attempt inside it: the record a usage event is
//! built from after the response (sent by `pipeline::report`). Pure: time is an input.

use crate::auth::context::RequestContext;
use crate::canonical::usage::Usage;
use crate::canonical::ChatFacts;
use crate::config::routes::Deployment;
use crate::http::error::ApiError;
use crate::providers::UpstreamError;
use crate::usage::tags;
use serde::Deserialize;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The public API (door) a request came in through, as usage events name it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingress {
    #[default]
    ChatCompletions,
    Embeddings,
    Messages,
    Responses,
}

pub use crate::usage::estimate::RequestShape;

/// An answer served from the response cache, and what the original request was billed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheHit {
    pub deployment: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub price_key: Option<String>,
    pub avoided: Option<Usage>,
}

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
    /// Part of `usage` is the gateway's estimate (a cut stream whose final count never came).
    pub usage_estimated: bool,
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
            usage_estimated: false,
        }
    }

    pub fn failed(id: &str, d: &Deployment, err: &UpstreamError, started_ms: u64, now_ms: u64) -> Self {
        Attempt {
            deployment: id.to_string(),
            provider: d.provider.as_str(),
            model: d.model.clone(),
            price_key: price_key(d),
            started_ms,
            status: err.status,
            error_class: Some(err.class.as_str()),
            usage: None,
            latency_ms: now_ms.saturating_sub(started_ms),
            ttft_ms: None,
            served: false,
            default_max_tokens: d.default_max_tokens,
            usage_estimated: false,
        }
    }
}

pub fn price_key(d: &Deployment) -> String {
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
    /// The front door (wire format) the request came in by.
    pub ingress: Ingress,
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
            ingress: Ingress::ChatCompletions,
            attempts: Vec::new(),
            error_code: None,
            status: 200,
            tags: rc.tags.as_deref().map(tags::parse_tags_header).unwrap_or_default(),
            end_user: None,
            shape: None,
            finished_ms: None,
            cache_hit: None,
            budget: None,
        }
    }

    /// Records what the usage event needs from a chat request: tags, end user, estimate inputs.
    /// Returns the request's shape, so callers need not walk its text a second time.
    pub fn describe(&mut self, facts: &ChatFacts) -> RequestShape {
        self.describe_as(facts.metadata.as_ref(), facts.user.as_deref(), RequestShape::of_facts(facts))
    }

    /// The request's tags from `metadata`, its end user and its shape, however they were read.
    pub fn describe_as(
        &mut self,
        metadata: Option<&Map<String, Value>>,
        user: Option<&str>,
        shape: RequestShape,
    ) -> RequestShape {
        let metadata = metadata.map(tags::metadata_tags).unwrap_or_default();
        self.tags = tags::merge_tags(std::mem::take(&mut self.tags), metadata);
        self.end_user = user.filter(|u| !u.is_empty()).map(str::to_string);
        self.shape = Some(shape);
        shape
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
}

/// A reservation held for a request, settled when its usage event is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetClaim {
    /// The object's name (`budget:<tenant>:<YYYY-MM>`): settles go where the reservation went.
    pub object: String,
    pub id: String,
    /// The estimate: reserved when `held`, else what the request would have reserved.
    pub reserved_micro_usd: u64,
    /// False when the object could not be reached at the start (admitted without a reservation):
    /// the settle then charges the actual cost all the same.
    pub held: bool,
    pub soft_micro_usd: Option<u64>,
    /// The tenant was past its soft limit when this request was admitted.
    pub soft_exceeded: bool,
}

impl BudgetClaim {
    /// What the usage event says: admitted past the soft limit, or this request's own cost
    /// took the settled spend past it.
    pub fn soft_exceeded_after(&self, spent_micro_usd: Option<u64>) -> bool {
        self.soft_exceeded || self.soft_micro_usd.zip(spent_micro_usd).is_some_and(|(soft, spent)| spent > soft)
    }
}
