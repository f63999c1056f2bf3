//! The worker's side of a deployment's limiter: one round trip to admit, one to settle.
//!
//! If the limiter object cannot be reached the request is admitted (fail open) and the problem
//! logged: a broken limiter must not take the whole gateway down.

use crate::estimate::TokenEstimate;
use crate::providers::ErrorClass;
use crate::routes::Deployment;
use crate::usage::Usage;
use limiter::client;
use limiter::protocol::{AdmitDecision, AdmitRequest, Outcome, RejectCode, SettleRequest, TokenUsage, UpstreamSignals};
use std::time::Duration;
use worker::{Env, Stub};

pub const LIMITER_BINDING: &str = "LIMITER";

/// A reservation held with a deployment's limiter (or none when the deployment has no limits).
pub struct Admission {
    stub: Option<Stub>,
    id: String,
    pub remaining_requests: Option<u64>,
    pub remaining_tokens: Option<u64>,
}

pub enum Admit {
    Admitted(Admission),
    Refused { code: RejectCode, retry_after_ms: u64 },
}

pub async fn admit(
    env: &Env,
    deployment_id: &str,
    deployment: &Deployment,
    reservation_id: String,
    estimate: TokenEstimate,
    max_wait_ms: u64,
) -> Admit {
    let unlimited =
        |id: String| Admit::Admitted(Admission { stub: None, id, remaining_requests: None, remaining_tokens: None });
    let Some(limits) = &deployment.limits else {
        return unlimited(reservation_id);
    };
    let stub = match env.durable_object(LIMITER_BINDING).and_then(|ns| client::stub(&ns, deployment_id)) {
        Ok(stub) => stub,
        Err(e) => {
            log_unreachable(deployment_id, &e.to_string());
            return unlimited(reservation_id);
        }
    };
    let request = AdmitRequest {
        id: reservation_id.clone(),
        limits: Some(limits.clone()),
        estimate: TokenUsage { input: estimate.input, output: estimate.output },
        max_wait_ms,
    };
    match client::admit(&stub, request).await {
        Ok(AdmitDecision::Admitted { start_after_ms, remaining_requests, remaining_tokens, .. }) => {
            if start_after_ms > 0 {
                worker::Delay::from(Duration::from_millis(start_after_ms)).await;
            }
            Admit::Admitted(Admission { stub: Some(stub), id: reservation_id, remaining_requests, remaining_tokens })
        }
        Ok(AdmitDecision::Rejected { code, retry_after_ms, .. }) => Admit::Refused { code, retry_after_ms },
        Err(e) => {
            log_unreachable(deployment_id, &e.to_string());
            unlimited(reservation_id)
        }
    }
}

fn log_unreachable(deployment_id: &str, error: &str) {
    worker::console_error!(
        "{}",
        serde_json::json!({"event": "limiter_unreachable", "deployment": deployment_id, "error": error, "admitted": true})
    );
}

/// What the breaker should learn from an attempt's end.
pub fn outcome_for(class: Option<ErrorClass>, retry_after_ms: Option<u64>) -> Outcome {
    match class {
        None => Outcome::Success,
        Some(ErrorClass::RateLimited) => Outcome::RateLimited { retry_after_ms },
        Some(ErrorClass::QuotaExhausted) => Outcome::QuotaExhausted,
        Some(c) if c.counts_for_breaker() => Outcome::Failure,
        Some(_) => Outcome::Neutral,
    }
}

pub fn token_usage(usage: &Usage) -> TokenUsage {
    TokenUsage { input: usage.prompt_tokens(), output: usage.output }
}

impl Admission {
    pub fn is_limited(&self) -> bool {
        self.stub.is_some()
    }

    /// Settles the reservation; `usage: None` keeps the estimate charged.
    pub async fn settle(self, outcome: Outcome, usage: Option<TokenUsage>, signals: UpstreamSignals) {
        let Some(stub) = self.stub else { return };
        let request = SettleRequest { id: self.id, outcome, usage, signals };
        if let Err(e) = client::settle(&stub, request).await {
            worker::console_error!("{}", serde_json::json!({"event": "limiter_settle_failed", "error": e.to_string()}));
        }
    }
}
