//! The worker's side of a deployment's limiter: admit locally against a lease this isolate
//! holds, else one round trip to the limiter object (asking for a lease alongside).
//!
//! Leases are renewed and handed back in `ctx.wait_until`, off the request's path; the pure
//! decisions are in [`crate::lease_cache`]. Settles of local admissions stay local unless they
//! are urgent (failure, 429, quota, vendor pause), which go to the object at once.
//!
//! If the limiter object cannot be reached the request is admitted (fail open) and the problem
//! logged: a broken limiter must not take the whole gateway down.

use crate::estimate::TokenEstimate;
use crate::lease_cache::{Decision, LeaseCache, LocalAdmit, SettleAction, Ticket, MAX_QUIET_MS};
use crate::providers::ErrorClass;
use crate::request_context::random_u64;
use crate::routes::Deployment;
use crate::usage::Usage;
use limiter::breaker::BreakerState;
use limiter::client;
use limiter::limits::{Amounts, Limits};
use limiter::protocol::{
    AdmitDecision, AdmitRequest, LeaseAsk, LeaseDecision, LeaseGrant, LeaseRequest, Outcome, RejectCode, SettleRequest,
    TokenUsage, UpstreamSignals,
};
use std::cell::RefCell;
use std::time::Duration;
use worker::{Context, Env, Stub};

pub const LIMITER_BINDING: &str = "LIMITER";

thread_local! {
    static LEASES: RefCell<LeaseCache> = RefCell::new(LeaseCache::new(&format!("{:016x}", random_u64())));
}

fn leases<T>(f: impl FnOnce(&mut LeaseCache) -> T) -> T {
    LEASES.with(|cache| f(&mut cache.borrow_mut()))
}

/// An admission held with a deployment's limiter (or none when the deployment has no limits).
pub struct Admission {
    via: Via,
    pub remaining_requests: Option<u64>,
    pub remaining_tokens: Option<u64>,
}

enum Via {
    Unlimited,
    Object { stub: Stub, deployment: String, id: String },
    Lease { env: Env, deployment: String, id: String, ticket: Ticket },
}

pub enum Admit {
    Admitted(Admission),
    Refused { code: RejectCode, retry_after_ms: u64 },
}

pub async fn admit(
    env: &Env,
    ctx: &Context,
    deployment_id: &str,
    deployment: &Deployment,
    reservation_id: String,
    estimate: TokenEstimate,
    max_wait_ms: u64,
) -> Admit {
    let Some(limits) = &deployment.limits else {
        return Admit::Admitted(unlimited());
    };
    let need = Amounts::request(estimate.input, estimate.output);
    let Decision { local, ask } = leases(|c| c.admit(deployment_id, limits, need, now_ms()));
    if let Some(local) = local {
        if let Some(ask) = ask {
            ctx.wait_until(renew(env.clone(), deployment_id.to_string(), limits.clone(), ask));
        }
        return Admit::Admitted(local_admission(env, deployment_id, reservation_id, local));
    }
    let stub = match env.durable_object(LIMITER_BINDING).and_then(|ns| client::stub(&ns, deployment_id)) {
        Ok(stub) => stub,
        Err(e) => {
            if let Some(ask) = &ask {
                leases(|c| c.ask_lost(deployment_id, &ask.id));
            }
            log_unreachable(deployment_id, &e.to_string());
            return Admit::Admitted(unlimited());
        }
    };
    let tally = leases(|c| c.take_tally(deployment_id, now_ms()));
    let request = AdmitRequest {
        id: reservation_id.clone(),
        limits: Some(limits.clone()),
        estimate: TokenUsage { input: estimate.input, output: estimate.output },
        max_wait_ms,
        lease: ask.clone(),
        tally: tally.clone(),
    };
    match client::admit(&stub, request).await {
        Ok(AdmitDecision::Admitted { start_after_ms, remaining_requests, remaining_tokens, lease, .. }) => {
            if let Some(ask) = ask {
                let answer = match lease {
                    Some(grant) => LeaseDecision::Granted(grant),
                    // Not granted alongside (a probe, a wait, no room): ask again a little later.
                    None => LeaseDecision::Refused { code: RejectCode::Rpm, retry_after_ms: LEASE_RETRY_MS },
                };
                on_lease_answer(ctx, env, deployment_id, limits, &ask.id, answer);
            }
            if start_after_ms > 0 {
                worker::Delay::from(Duration::from_millis(start_after_ms)).await;
            }
            let via = Via::Object { stub, deployment: deployment_id.to_string(), id: reservation_id };
            Admit::Admitted(Admission { via, remaining_requests, remaining_tokens })
        }
        Ok(AdmitDecision::Rejected { code, retry_after_ms, .. }) => {
            if let Some(ask) = &ask {
                let answer = LeaseDecision::Refused { code, retry_after_ms };
                on_lease_answer(ctx, env, deployment_id, limits, &ask.id, answer);
            } else if code.is_health() && leases(|c| c.unhealthy(deployment_id, retry_after_ms, now_ms())) {
                // Open, paused or ramping: slices too small for this request stop too.
                ctx.wait_until(report_now(env.clone(), deployment_id.to_string()));
            }
            if !code.is_health() {
                // A lease granted while this round trip was in flight may cover the request.
                if let Some(local) = leases(|c| c.admit_held(deployment_id, limits, need, now_ms())) {
                    return Admit::Admitted(local_admission(env, deployment_id, reservation_id, local));
                }
            }
            Admit::Refused { code, retry_after_ms }
        }
        Err(e) => {
            leases(|c| {
                c.restore_tally(deployment_id, tally);
                if let Some(ask) = &ask {
                    c.ask_lost(deployment_id, &ask.id);
                }
            });
            log_unreachable(deployment_id, &e.to_string());
            Admit::Admitted(unlimited())
        }
    }
}

/// After a refusal for want of room the isolate asks again no sooner than this.
const LEASE_RETRY_MS: u64 = limiter::leases::LEASE_RETRY_MS;

fn unlimited() -> Admission {
    Admission { via: Via::Unlimited, remaining_requests: None, remaining_tokens: None }
}

fn local_admission(env: &Env, deployment: &str, id: String, local: LocalAdmit) -> Admission {
    Admission {
        via: Via::Lease { env: env.clone(), deployment: deployment.to_string(), id, ticket: local.ticket },
        remaining_requests: local.remaining_requests,
        remaining_tokens: local.remaining_tokens,
    }
}

/// Installs a grant (and starts the watcher that hands it back on expiry), or takes a refusal.
fn on_lease_answer(ctx: &Context, env: &Env, deployment: &str, limits: &Limits, id: &str, answer: LeaseDecision) {
    match answer {
        LeaseDecision::Granted(grant) => {
            if let Some(expires_ms) = install(deployment, limits, id, &grant) {
                ctx.wait_until(hand_back_at(env.clone(), deployment.to_string(), expires_ms));
            }
        }
        LeaseDecision::Refused { code, retry_after_ms } => {
            if leases(|c| c.refused(deployment, id, code, retry_after_ms, now_ms())) {
                ctx.wait_until(report_now(env.clone(), deployment.to_string()));
            }
        }
    }
}

fn install(deployment: &str, limits: &Limits, id: &str, grant: &LeaseGrant) -> Option<u64> {
    leases(|c| c.granted(deployment, id, limits, grant, now_ms()))
}

/// A renewal in the background: ask, install, then hand the slice back when it expires.
async fn renew(env: Env, deployment: String, limits: Limits, ask: LeaseAsk) {
    let Some(stub) = stub_for(&env, &deployment) else {
        leases(|c| c.ask_lost(&deployment, &ask.id));
        return;
    };
    let tally = leases(|c| c.take_tally(&deployment, now_ms()));
    let request =
        LeaseRequest { id: ask.id.clone(), want: ask.want, limits: Some(limits.clone()), tally: tally.clone() };
    match client::lease(&stub, request).await {
        Ok(LeaseDecision::Granted(grant)) => {
            if let Some(expires_ms) = install(&deployment, &limits, &ask.id, &grant) {
                hand_back_at(env, deployment, expires_ms).await;
            }
        }
        Ok(LeaseDecision::Refused { code, retry_after_ms }) => {
            if leases(|c| c.refused(&deployment, &ask.id, code, retry_after_ms, now_ms())) {
                report(&stub, &deployment).await;
            }
        }
        Err(e) => {
            leases(|c| {
                c.restore_tally(&deployment, tally);
                c.ask_lost(&deployment, &ask.id);
            });
            log_failed("limiter_lease_failed", &deployment, &e.to_string());
        }
    }
}

/// Sleeps until a slice expires, then hands back whatever is due (so an isolate that went quiet
/// strands no capacity).
async fn hand_back_at(env: Env, deployment: String, expires_ms: u64) {
    let wait = expires_ms.saturating_sub(now_ms());
    worker::Delay::from(Duration::from_millis(wait)).await;
    if leases(|c| c.expire(&deployment, now_ms())) {
        report_now(env, deployment).await;
    }
}

async fn report_now(env: Env, deployment: String) {
    if let Some(stub) = stub_for(&env, &deployment) {
        report(&stub, &deployment).await;
    }
}

/// Sends the pending tally (returns, successes, corrections); an unhealthy answer stops local admission.
async fn report(stub: &Stub, deployment: &str) {
    let tally = leases(|c| c.take_tally(deployment, now_ms()));
    if tally.is_empty() {
        return;
    }
    match client::report(stub, tally.clone()).await {
        Ok(ack) if ack.breaker != BreakerState::Closed => {
            leases(|c| c.unhealthy(deployment, MAX_QUIET_MS, now_ms()));
        }
        Ok(_) => {}
        Err(e) => {
            leases(|c| c.restore_tally(deployment, tally));
            log_failed("limiter_report_failed", deployment, &e.to_string());
        }
    }
}

fn stub_for(env: &Env, deployment: &str) -> Option<Stub> {
    match env.durable_object(LIMITER_BINDING).and_then(|ns| client::stub(&ns, deployment)) {
        Ok(stub) => Some(stub),
        Err(e) => {
            log_failed("limiter_unreachable", deployment, &e.to_string());
            None
        }
    }
}

fn log_unreachable(deployment_id: &str, error: &str) {
    worker::console_error!(
        "{}",
        serde_json::json!({"event": "limiter_unreachable", "deployment": deployment_id, "error": error, "admitted": true})
    );
}

fn log_failed(event: &str, deployment: &str, error: &str) {
    worker::console_error!("{}", serde_json::json!({"event": event, "deployment": deployment, "error": error}));
}

fn now_ms() -> u64 {
    worker::Date::now().as_millis()
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
        !matches!(self.via, Via::Unlimited)
    }

    /// Settles the admission; `usage: None` keeps the estimate charged. A local admission stays
    /// local unless its outcome is urgent; an object admission carries the pending tally.
    pub async fn settle(self, outcome: Outcome, usage: Option<TokenUsage>, signals: UpstreamSignals) {
        let (stub, deployment, request) = match self.via {
            Via::Unlimited => return,
            Via::Object { stub, deployment, id } => {
                let tally = leases(|c| c.settle_remote(&deployment, &outcome, &signals, now_ms()));
                (stub, deployment, SettleRequest { id, outcome, usage, signals, tally })
            }
            Via::Lease { env, deployment, id, ticket } => {
                let action = leases(|c| c.settle_local(&deployment, &ticket, &outcome, usage, &signals, now_ms()));
                let SettleAction::Now(tally) = action else { return };
                let Some(stub) = stub_for(&env, &deployment) else {
                    leases(|c| c.restore_tally(&deployment, tally));
                    return;
                };
                // Usage was reconciled against the lease; the object learns the outcome.
                (stub, deployment, SettleRequest { id, outcome, usage: None, signals, tally })
            }
        };
        let tally = request.tally.clone();
        match client::settle(&stub, request).await {
            Ok(report) if report.breaker != BreakerState::Closed => {
                leases(|c| c.unhealthy(&deployment, MAX_QUIET_MS, now_ms()));
            }
            Ok(_) => {}
            Err(e) => {
                leases(|c| c.restore_tally(&deployment, tally));
                worker::console_error!(
                    "{}",
                    serde_json::json!({"event": "limiter_settle_failed", "error": e.to_string()})
                );
            }
        }
    }
}
