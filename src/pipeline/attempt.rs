//! Small steps of one attempt the driver shares: credentials, vendor rate signals, settling a
//! failure, the route headers on an answer, and the estimate held at the key and tenant.

use crate::config::routes::Deployment;
use crate::http::header_map::HeaderText;
use crate::limits::admission::{self, Admission};
use crate::pipeline::upstream::{self, UpstreamResponse};
use crate::providers::rate_headers;
use crate::providers::UpstreamError;
use crate::support::clock::now_ms;
use crate::usage::estimate::{RequestShape, TokenEstimate};
use limiter::protocol::{TokenUsage, UpstreamSignals};
use std::cell::RefCell;
use std::collections::HashMap;
use worker::Env;

/// The token estimate a request reserves with its key and tenant, before a deployment is
/// chosen: the largest of its chain's (whose output defaults may differ).
pub fn scope_estimate(shape: &RequestShape, chain: &[(&str, &Deployment)]) -> TokenEstimate {
    let each = |default: Option<u32>| shape.estimate(default);
    chain.iter().map(|(_, d)| each(d.default_max_tokens)).max_by_key(|e| e.output).unwrap_or_else(|| each(None))
}

thread_local! {
    /// Secrets are fixed for an isolate's life (a new secret means a new deployment, new isolates):
    /// each is looked up in `env` once, not per attempt (two JS calls and a type check each).
    static CREDENTIALS: RefCell<HashMap<String, Option<String>>> = RefCell::new(HashMap::new());
}

pub fn credential(env: &Env, name: &str) -> Option<String> {
    if let Some(known) = CREDENTIALS.with(|c| c.borrow().get(name).cloned()) {
        return known;
    }
    let value = env
        .secret(name)
        .ok()
        .map(|s| s.to_string())
        .or_else(|| env.var(name).ok().map(|v| v.to_string()))
        .filter(|s| !s.is_empty());
    // Whatever a vendor echoes back, this value never reaches a client or a log.
    if let Some(secret) = &value {
        crate::support::redact::remember_secret(secret);
    }
    CREDENTIALS.with(|c| c.borrow_mut().insert(name.to_string(), value.clone()));
    value
}

pub fn signals_of(up: &UpstreamResponse, retry_after_ms: Option<u64>) -> UpstreamSignals {
    let mut signals = rate_headers::signals(|name| upstream::header(up, name), now_ms());
    signals.retry_after_ms = retry_after_ms;
    signals
}

pub async fn settle_failure(
    admission: Admission,
    err: &UpstreamError,
    usage: Option<TokenUsage>,
    signals: UpstreamSignals,
) {
    admission.settle(admission::outcome_for(Some(err.class), err.retry_after_ms), usage, signals).await;
}

/// The headers every served answer carries: which deployment answered, after how many attempts,
/// and the key's remaining requests and tokens when its limits say. (`x-request-id` is set on every
/// response by the door that answers it.)
pub fn route_headers(
    text: &mut HeaderText,
    deployment_id: &str,
    deployment: &Deployment,
    attempts: usize,
    remaining: (Option<u64>, Option<u64>),
) {
    let _ = text.add("x-gateway-deployment", deployment_id);
    let _ = text.add("x-gateway-provider", deployment.provider.as_str());
    let _ = text.add("x-gateway-attempts", &attempts.to_string());
    if let Some(r) = remaining.0 {
        let _ = text.add("x-ratelimit-remaining-requests", &r.to_string());
    }
    if let Some(t) = remaining.1 {
        let _ = text.add("x-ratelimit-remaining-tokens", &t.to_string());
    }
}
