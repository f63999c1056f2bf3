//! Helpers shared by every endpoint that tries a chain of deployments (chat, embeddings).

use crate::admission::{self, Admission};
use crate::api_error::ApiError;
use crate::providers::UpstreamError;
use crate::rate_headers;
use crate::request_context::RequestContext;
use crate::routes::Deployment;
use crate::upstream::{self, UpstreamResponse};
use limiter::protocol::{RejectCode, TokenUsage, UpstreamSignals};
use worker::{Env, Response};

/// The limiter refusal a client sees when no deployment would take the request.
pub struct Refusal {
    pub deployment: String,
    pub code: RejectCode,
    pub retry_after_ms: u64,
}

pub fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}

pub fn credential(env: &Env, name: &str) -> Option<String> {
    env.secret(name)
        .ok()
        .map(|s| s.to_string())
        .or_else(|| env.var(name).ok().map(|v| v.to_string()))
        .filter(|s| !s.is_empty())
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

pub fn refusal_error(r: &Refusal) -> ApiError {
    let what = match r.code {
        RejectCode::Rpm => "its requests-per-minute limit",
        RejectCode::Tpm | RejectCode::InputTpm | RejectCode::OutputTpm => "its tokens-per-minute limit",
        RejectCode::Rpd => "its requests-per-day limit",
        RejectCode::Concurrency => "its concurrent-request limit",
        RejectCode::BreakerOpen | RejectCode::HalfOpenProbeInFlight | RejectCode::Ramping => "an open circuit breaker",
        RejectCode::Paused => "a pause the vendor asked for",
        RejectCode::QuotaExhausted => "an exhausted vendor quota",
    };
    ApiError::new(
        429,
        "rate_limit_error",
        format!("deployment_{}", r.code.as_str()),
        format!(
            "No deployment can take this request now: '{}' is held by {what} (limit '{}', scope deployment); retry after {} ms.",
            r.deployment,
            r.code.as_str(),
            r.retry_after_ms
        ),
    )
    .with_retry_after_ms(r.retry_after_ms)
    .with_header("x-gateway-limit", r.code.as_str())
    .with_header("x-gateway-limit-scope", "deployment")
    .with_header("x-gateway-limit-reset-ms", r.retry_after_ms.to_string())
}

pub fn with_route_headers(
    mut response: Response,
    rc: &RequestContext,
    deployment_id: &str,
    deployment: &Deployment,
    attempts: usize,
) -> Response {
    let headers = response.headers_mut();
    let _ = headers.set("x-request-id", &rc.request_id);
    let _ = headers.set("x-gateway-deployment", deployment_id);
    let _ = headers.set("x-gateway-provider", deployment.provider.as_str());
    let _ = headers.set("x-gateway-attempts", &attempts.to_string());
    response
}

pub fn set_remaining(response: &mut Response, remaining: (Option<u64>, Option<u64>)) {
    let headers = response.headers_mut();
    if let Some(r) = remaining.0 {
        let _ = headers.set("x-ratelimit-remaining-requests", &r.to_string());
    }
    if let Some(t) = remaining.1 {
        let _ = headers.set("x-ratelimit-remaining-tokens", &t.to_string());
    }
}

impl Refusal {
    /// Keeps the refusal that clears soonest.
    pub fn keep_soonest(slot: &mut Option<Refusal>, deployment: &str, code: RejectCode, retry_after_ms: u64) {
        if slot.as_ref().is_none_or(|r| retry_after_ms < r.retry_after_ms) {
            *slot = Some(Refusal { deployment: deployment.to_string(), code, retry_after_ms });
        }
    }
}

/// The error a client gets when no deployment served: a final upstream error wins, then the
/// limiter refusal that clears soonest, then the last upstream error, then `nothing_tried`.
pub fn final_error(last_error: Option<&UpstreamError>, refusal: Option<Refusal>, nothing_tried: ApiError) -> ApiError {
    match (last_error, refusal) {
        (Some(err), _) if !err.class.may_fall_back() => err.to_api_error(),
        (_, Some(r)) => refusal_error(&r),
        (Some(err), None) => err.to_api_error(),
        (None, None) => nothing_tried,
    }
}
