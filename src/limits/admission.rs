//! The worker's side of the limiters (a deployment's, a key's, a tenant's): admit locally against a lease this isolate
//! holds, else one round trip to the limiter object (asking for a lease alongside).
//!
//! Leases are renewed and handed back in `ctx.wait_until`, off the request's path; the pure
//! decisions are in [`crate::limits::lease_ledger`]. Settles of local admissions stay local unless they
//! are urgent (failure, 429, quota, vendor pause), which go to the object at once.
//!
//! If the limiter object cannot be reached the request is admitted (fail open) and the problem
//! logged: a broken limiter must not take the whole gateway down.
//!
//! The same machinery (object class, leases, settles) also limits a request's virtual key and
//! its tenant: [`admit_scopes`] admits with the key's limiter, then the tenant's, before any
//! deployment; what the request holds there ([`Scopes`]) is settled with its real usage when it
//! went upstream, or released — everything given back — when it did not (a later layer refused).

use crate::auth::context::{random_u64, RequestContext};
use crate::canonical::usage::Usage;
use crate::config;
use crate::config::keys;
use crate::config::routes::Deployment;
use crate::limits::lease_ledger::{
    Decision, FlushStep, LeaseLedger, LocalAdmit, ObjectSettle, SettleAction, Ticket, ASK_POLL_FIRST_MS,
    ASK_POLL_MAX_MS, MAX_ASK_WAIT_MS, MAX_QUIET_MS,
};
use crate::limits::refusal::{LimitScope, Refusal};
use crate::providers::{ErrorClass, UpstreamError};
use crate::support::clock::now_ms;
use crate::usage::estimate::TokenEstimate;
use futures::future::join_all;
use limiter::breaker::BreakerState;
use limiter::client;
use limiter::limits::{Amounts, Limits};
use limiter::protocol::{
    object_name, scope_object_name, AdmitDecision, AdmitRequest, FaultReason, LeaseAsk, LeaseDecision, LeaseGrant,
    LeaseRequest, Outcome, RejectCode, ReleaseRequest, SettleRequest, Tally, TokenUsage, UpstreamSignals,
};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use worker::{Context, Env, Stub};

pub use limiter::client::{LIMITER_BINDING, RELAY_BINDING};

thread_local! {
    // Leases come from this location's relay where `lease_policy::via_relay` says so.
    static LEASES: RefCell<LeaseLedger> =
        RefCell::new(LeaseLedger::new(&format!("{:016x}", random_u64())).with_relay());
}

/// Waits until `object`'s ask in flight ends or anything else changes what a waiting request may
/// get (see `LeaseLedger::changes`), at most until `until_ms`; says whether it did. It looks on
/// timers of its own: a waker from the request that gets the answer would resume this request
/// in that one's I/O context, which workerd refuses.
async fn wait_for_ask(object: &str, until_ms: u64) -> bool {
    let seen = leases(|c| c.changes(object));
    let mut step_ms = ASK_POLL_FIRST_MS;
    loop {
        let now = now_ms();
        if now >= until_ms {
            return false;
        }
        worker::Delay::from(Duration::from_millis(step_ms.min(until_ms - now))).await;
        if leases(|c| c.changes(object)) != seen {
            return true;
        }
        step_ms = (step_ms * 2).min(ASK_POLL_MAX_MS);
    }
}

/// The ledger's decision for one request (`first`: its first look, else again after an ask),
/// after waiting, until `deadline_ms`, for the asks in flight it points to: their answers will
/// likely cover the request without a call of its own.
async fn decide(object: &str, limits: &Limits, need: Amounts, first: bool, deadline_ms: u64) -> Decision {
    let mut decision = leases(|c| match first {
        true => c.admit(object, limits, need, now_ms()),
        false => c.admit_again(object, limits, need, now_ms(), true),
    });
    let watch_settles = decision.watch_settles;
    while let Some(until_ms) = decision.wait_until_ms {
        let until_ms = until_ms.min(deadline_ms);
        let changed = until_ms > now_ms() && wait_for_ask(object, until_ms).await;
        let now = now_ms();
        decision = leases(|c| c.admit_again(object, limits, need, now, changed && now < deadline_ms));
    }
    Decision { watch_settles, ..decision }
}

/// What an object admit carries, given back if the request is dropped before the answer (a
/// client gone): the ask is given up, so requests waiting for it ask for themselves, and the
/// tally (returns, settles of other requests) goes with the next message.
struct InFlight<'a> {
    object: &'a str,
    ask: Option<String>,
    tally: Option<Tally>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.ask.take() {
            leases(|c| c.ask_lost(self.object, &id));
        }
        if let Some(tally) = self.tally.take() {
            leases(|c| c.restore_tally(self.object, tally));
        }
    }
}

fn leases<T>(f: impl FnOnce(&mut LeaseLedger) -> T) -> T {
    LEASES.with(|cache| f(&mut cache.borrow_mut()))
}

/// An admission held with a limiter (or none when there are no limits). Limiter objects are
/// named by [`object_name`] (deployments) or [`scope_object_name`] (keys, tenants); this
/// isolate's leases and tallies are kept by that name.
pub struct Admission {
    via: Via,
    pub remaining_requests: Option<u64>,
    pub remaining_tokens: Option<u64>,
}

enum Via {
    Unlimited,
    Object { stub: Stub, env: Env, object: String, id: String, deferrable: bool },
    Lease { env: Env, object: String, id: String, ticket: Ticket },
}

pub enum Admit {
    Admitted(Admission),
    Refused { code: RejectCode, retry_after_ms: u64 },
}

/// Admits one attempt of `tenant`'s with a deployment's limiter; a deployment without limits
/// admits at once.
#[allow(clippy::too_many_arguments)]
pub async fn admit(
    env: &Env,
    ctx: &Context,
    deployment_id: &str,
    deployment: &Deployment,
    tenant: &str,
    reservation_id: String,
    estimate: TokenEstimate,
    max_wait_ms: u64,
) -> Admit {
    let Some(limits) = deployment.enforced_limits() else {
        return Admit::Admitted(unlimited());
    };
    // Only a deployment sharing its capacity fairly needs to know who asks.
    let tenant = limits.fair_share.as_ref().map(|_| tenant);
    admit_to(env, ctx, &object_name(deployment_id), limits, tenant, reservation_id, estimate, max_wait_ms).await
}

/// Admits with the limiter object `object` under `limits`: locally against a lease when one
/// covers the request, else one round trip (asking for a lease alongside).
#[allow(clippy::too_many_arguments)]
async fn admit_to(
    env: &Env,
    ctx: &Context,
    object: &str,
    limits: &Limits,
    tenant: Option<&str>,
    reservation_id: String,
    estimate: TokenEstimate,
    max_wait_ms: u64,
) -> Admit {
    let need = Amounts::request(estimate.input, estimate.output);
    let deadline_ms = now_ms() + MAX_ASK_WAIT_MS;
    let mut decision = decide(object, limits, need, true, deadline_ms).await;
    if decision.watch_settles {
        ctx.wait_until(watch_settles(env.clone(), object.to_string()));
    }
    if decision.via_relay {
        decision = relay_first(env, ctx, object, limits, need, decision, deadline_ms).await;
    }
    let Decision { local, ask, .. } = decision;
    if let Some(local) = local {
        if let Some(ask) = ask {
            ctx.wait_until(renew(env.clone(), object.to_string(), limits.clone(), ask, false));
        }
        return Admit::Admitted(local_admission(env, object, reservation_id, local));
    }
    if let Some(answer) = spare_the_object(env, ctx, object, limits, max_wait_ms, &ask) {
        return answer;
    }
    let Some(stub) = object_stub(env, object, &ask) else {
        return Admit::Admitted(unlimited());
    };
    let tally = leases(|c| c.take_tally(object, now_ms()));
    let request = AdmitRequest {
        id: reservation_id.clone(),
        limits: Some(limits.clone()),
        estimate: TokenUsage { input: estimate.input, output: estimate.output },
        max_wait_ms,
        lease: ask.clone(),
        tally: tally.clone(),
        tenant: tenant.map(str::to_string),
    };
    // Until the answer, the ask and the tally are given back if the request goes (or the call fails).
    let mut carried = InFlight { object, ask: ask.as_ref().map(|a| a.id.clone()), tally: Some(tally) };
    let answer = client::admit(&stub, request).await;
    if answer.is_ok() {
        (carried.ask, carried.tally) = (None, None);
    }
    match answer {
        Ok(AdmitDecision::Admitted { start_after_ms, remaining_requests, remaining_tokens, lease, probe }) => {
            if let Some(ask) = ask {
                on_lease_answer(ctx, env, object, limits, &ask.id, granted_alongside(lease));
            }
            if start_after_ms > 0 {
                worker::Delay::from(Duration::from_millis(start_after_ms)).await;
            }
            // A plain success may ride in a later tally, unless the object waits for it: the
            // half-open probe, or an in-flight slot.
            let deferrable = !probe && limits.max_concurrent.is_none();
            let via =
                Via::Object { stub, env: env.clone(), object: object.to_string(), id: reservation_id, deferrable };
            Admit::Admitted(Admission { via, remaining_requests, remaining_tokens })
        }
        Ok(AdmitDecision::Rejected { code, retry_after_ms, .. }) => {
            let refusal = Refused { code, retry_after_ms, need, max_wait_ms, reservation_id };
            refused(ctx, env, object, limits, ask.as_ref(), refusal)
        }
        Err(e) => {
            drop(carried);
            leases(|c| c.unreachable(object, now_ms()));
            log_unreachable(object, &e.to_string());
            Admit::Admitted(unlimited())
        }
    }
}

/// A decision whose ask goes to the location's relay: in the background when the request is
/// admitted already, else in the request's path, then decided again (the relay's slice, close
/// by, likely covers it), until `deadline_ms`. A request no slice covers then goes to the object
/// as before, asking nothing: a relay's ask never goes to the object.
async fn relay_first(
    env: &Env,
    ctx: &Context,
    object: &str,
    limits: &Limits,
    need: Amounts,
    mut decision: Decision,
    deadline_ms: u64,
) -> Decision {
    while let Some(ask) = decision.ask.take() {
        if decision.local.is_some() {
            ctx.wait_until(renew(env.clone(), object.to_string(), limits.clone(), ask, true));
            break;
        }
        let wait = deadline_ms.saturating_sub(now_ms());
        if wait == 0 {
            leases(|c| c.ask_lost(object, &ask.id));
            break;
        }
        let asked = client::within(wait, async { Ok(ask_lease(env, object, limits, ask, true).await) });
        if let Ok(Some(expires_ms)) = asked.await {
            ctx.wait_until(hand_back_at(env.clone(), object.to_string(), expires_ms));
        }
        decision = Decision { watch_settles: false, ..decide(object, limits, need, false, deadline_ms).await };
        if !decision.via_relay {
            // The relay failed meanwhile: an ask for the object rides along with the admit.
            break;
        }
    }
    decision
}

/// Asks the relay (`via_relay`) or the object for a lease and installs the answer; returns when
/// the slice expires, if one was granted. A failed call backs off: from the relay for a while
/// (asks go to the object), from the object as any failed call does.
async fn ask_lease(env: &Env, object: &str, limits: &Limits, ask: LeaseAsk, via_relay: bool) -> Option<u64> {
    let who = if via_relay { "relay" } else { "limiter" };
    let stub = match if via_relay { relay_stub(env, object) } else { limiter_stub(env, object) } {
        Ok(stub) => stub,
        Err(e) => {
            leases(|c| c.ask_lost(object, &ask.id));
            if via_relay {
                leases(|c| c.relay_failed(object, now_ms()));
            }
            log_failed(&format!("{who}_unreachable"), object, &e.to_string());
            return None;
        }
    };
    let tally =
        leases(|c| if via_relay { c.take_relay_tally(object, now_ms()) } else { c.take_tally(object, now_ms()) });
    let request =
        LeaseRequest { id: ask.id.clone(), want: ask.want, limits: Some(limits.clone()), tally: tally.clone() };
    // Until the answer, the ask and the tally are given back if the request goes.
    let mut carried = InFlight { object, ask: Some(ask.id.clone()), tally: Some(tally) };
    let answer = client::lease(&stub, via_relay.then_some(object), request).await;
    if answer.is_ok() {
        (carried.ask, carried.tally) = (None, None);
    }
    match answer {
        Ok(LeaseDecision::Granted(grant)) => install(object, limits, &ask.id, &grant),
        Ok(LeaseDecision::Refused { code, retry_after_ms }) => {
            if leases(|c| c.refused(object, &ask.id, code, retry_after_ms, now_ms())) {
                report_now(env.clone(), object.to_string()).await;
            }
            None
        }
        Err(e) => {
            drop(carried);
            leases(|c| if via_relay { c.relay_failed(object, now_ms()) } else { c.unreachable(object, now_ms()) });
            log_failed(&format!("{who}_lease_failed"), object, &e.to_string());
            None
        }
    }
}

/// The stub of this location's relay for `object`.
pub fn relay_stub(env: &Env, object: &str) -> worker::Result<Stub> {
    let name = limiter::protocol::relay_name(object, &crate::limits::location::here());
    env.durable_object(RELAY_BINDING)?.id_from_name(&name)?.get_stub()
}

/// The limiter object's stub; `None` (the ask given up, the problem logged) when it has none.
fn object_stub(env: &Env, object: &str, ask: &Option<LeaseAsk>) -> Option<Stub> {
    match limiter_stub(env, object) {
        Ok(stub) => Some(stub),
        Err(e) => {
            if let Some(ask) = ask {
                leases(|c| c.ask_lost(object, &ask.id));
            }
            log_unreachable(object, &e.to_string());
            None
        }
    }
}

/// Answers a request no slice covers without a round trip when the object was just heard
/// from: it refused one for room moments ago (refused here too), or a call to it failed (fail
/// open without adding to an overloaded object's queue; an ask, if any, goes in the background
/// and finds out when it is back). `None`: ask the object.
fn spare_the_object(
    env: &Env,
    ctx: &Context,
    object: &str,
    limits: &Limits,
    max_wait_ms: u64,
    ask: &Option<LeaseAsk>,
) -> Option<Admit> {
    if let Some((code, retry_after_ms)) = leases(|c| c.held_off(object, max_wait_ms, now_ms())) {
        if let Some(ask) = ask {
            leases(|c| c.ask_lost(object, &ask.id));
        }
        return Some(Admit::Refused { code, retry_after_ms });
    }
    if !leases(|c| c.backing_off(object, now_ms())) {
        return None;
    }
    if let Some(ask) = ask {
        ctx.wait_until(renew(env.clone(), object.to_string(), limits.clone(), ask.clone(), false));
    }
    Some(Admit::Admitted(unlimited()))
}

/// A refusal from the limiter object, with what the request needed.
struct Refused {
    code: RejectCode,
    retry_after_ms: u64,
    need: Amounts,
    max_wait_ms: u64,
    reservation_id: String,
}

/// A pending lease ask learns of the refusal; a health refusal stops local admits too; a lease
/// granted while the round trip was in flight may still cover the request.
fn refused(ctx: &Context, env: &Env, object: &str, limits: &Limits, ask: Option<&LeaseAsk>, r: Refused) -> Admit {
    let Refused { code, retry_after_ms, need, max_wait_ms, reservation_id } = r;
    if let Some(ask) = ask {
        let answer = LeaseDecision::Refused { code, retry_after_ms };
        on_lease_answer(ctx, env, object, limits, &ask.id, answer);
    } else if code.is_health() {
        let returned = leases(|c| c.unhealthy(object, retry_after_ms, now_ms()));
        // Open, paused or ramping: slices too small for this request stop too; the relay hears of it.
        if returned || leases(|c| c.relay_pending(object)) {
            ctx.wait_until(report_now(env.clone(), object.to_string()));
        }
    }
    if !code.is_health() {
        if let Some(local) = leases(|c| c.admit_held(object, limits, need, now_ms())) {
            return Admit::Admitted(local_admission(env, object, reservation_id, local));
        }
        leases(|c| c.room_refused(object, code, retry_after_ms, max_wait_ms, now_ms()));
    }
    Admit::Refused { code, retry_after_ms }
}

/// The answer to an ask an admission carried.
fn granted_alongside(lease: Option<LeaseGrant>) -> LeaseDecision {
    match lease {
        Some(grant) => LeaseDecision::Granted(grant),
        // Not granted alongside (a probe, a wait, no room): ask again a little later.
        None => LeaseDecision::Refused { code: RejectCode::Rpm, retry_after_ms: LEASE_RETRY_MS },
    }
}

/// After a refusal for want of room the isolate asks again no sooner than this.
const LEASE_RETRY_MS: u64 = limiter::leases::LEASE_RETRY_MS;

fn unlimited() -> Admission {
    Admission { via: Via::Unlimited, remaining_requests: None, remaining_tokens: None }
}

fn local_admission(env: &Env, object: &str, id: String, local: LocalAdmit) -> Admission {
    Admission {
        via: Via::Lease { env: env.clone(), object: object.to_string(), id, ticket: local.ticket },
        remaining_requests: local.remaining_requests,
        remaining_tokens: local.remaining_tokens,
    }
}

/// Installs a grant (and starts the watcher that hands it back on expiry), or takes a refusal.
fn on_lease_answer(ctx: &Context, env: &Env, object: &str, limits: &Limits, id: &str, answer: LeaseDecision) {
    match answer {
        LeaseDecision::Granted(grant) => {
            if let Some(expires_ms) = install(object, limits, id, &grant) {
                ctx.wait_until(hand_back_at(env.clone(), object.to_string(), expires_ms));
            }
        }
        LeaseDecision::Refused { code, retry_after_ms } => {
            if leases(|c| c.refused(object, id, code, retry_after_ms, now_ms())) {
                ctx.wait_until(report_now(env.clone(), object.to_string()));
            }
        }
    }
}

fn install(object: &str, limits: &Limits, id: &str, grant: &LeaseGrant) -> Option<u64> {
    leases(|c| c.granted(object, id, limits, grant, now_ms()))
}

/// A renewal in the background (from the relay or the object): ask, install, then hand the
/// slice back when it expires.
async fn renew(env: Env, object: String, limits: Limits, ask: LeaseAsk, via_relay: bool) {
    if let Some(expires_ms) = ask_lease(&env, &object, &limits, ask, via_relay).await {
        hand_back_at(env, object, expires_ms).await;
    }
}

/// Sleeps until a slice expires, then hands back whatever is due (so an isolate that went quiet
/// strands no capacity).
async fn hand_back_at(env: Env, object: String, expires_ms: u64) {
    let wait = expires_ms.saturating_sub(now_ms());
    worker::Delay::from(Duration::from_millis(wait)).await;
    if leases(|c| c.expire(&object, now_ms())) {
        report_now(env, object).await;
    }
}

/// Sends what is due: to the relay when its slices wait to go back (it forwards the rest to
/// the object), else to the object.
async fn report_now(env: Env, object: String) {
    let relay = leases(|c| c.relay_pending(&object));
    if relay {
        report_to_relay(&env, &object).await;
    }
    // The object's own slices (asked while the relay was down) go back to the object.
    if !relay || leases(|c| c.object_returns_pending(&object)) {
        if let Some(stub) = stub_for(&env, &object) {
            report(&env, &stub, &object).await;
        }
    }
}

/// Tells the relay what waits for it (word of an unhealthy deployment, slices handed back).
async fn tell_relay(env: &Env, object: &str) {
    if leases(|c| c.relay_pending(object)) {
        report_to_relay(env, object).await;
    }
}

async fn report_to_relay(env: &Env, object: &str) {
    let tally = leases(|c| c.take_relay_tally(object, now_ms()));
    let answer = match relay_stub(env, object) {
        Ok(stub) => client::report(&stub, Some(object), tally.clone()).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(ack) if ack.breaker != BreakerState::Closed => {
            leases(|c| c.relay_unhealthy(object, MAX_QUIET_MS, now_ms()));
        }
        Ok(_) => {}
        Err(e) => {
            leases(|c| {
                c.restore_tally(object, tally);
                c.relay_failed(object, now_ms());
            });
            log_failed("relay_report_failed", object, &e.to_string());
        }
    }
}

/// Sends the pending tally (returns, successes, corrections); an unhealthy answer stops local admission.
async fn report(env: &Env, stub: &Stub, object: &str) {
    let tally = leases(|c| c.take_tally(object, now_ms()));
    if tally.is_empty() {
        return;
    }
    match client::report(stub, None, tally.clone()).await {
        Ok(ack) if ack.breaker != BreakerState::Closed => {
            leases(|c| c.unhealthy(object, MAX_QUIET_MS, now_ms()));
            tell_relay(env, object).await;
        }
        Ok(_) => {}
        Err(e) => {
            leases(|c| c.restore_tally(object, tally));
            log_failed("limiter_report_failed", object, &e.to_string());
        }
    }
}

fn limiter_stub(env: &Env, object: &str) -> worker::Result<Stub> {
    env.durable_object(LIMITER_BINDING).and_then(|ns| client::stub_named(&ns, object))
}

fn stub_for(env: &Env, object: &str) -> Option<Stub> {
    match limiter_stub(env, object) {
        Ok(stub) => Some(stub),
        Err(e) => {
            log_failed("limiter_unreachable", object, &e.to_string());
            None
        }
    }
}

fn log_unreachable(object: &str, error: &str) {
    worker::console_error!(
        "{}",
        serde_json::json!({"event": "limiter_unreachable", "limiter": object, "error": error, "admitted": true})
    );
}

fn log_failed(event: &str, object: &str, error: &str) {
    worker::console_error!("{}", serde_json::json!({"event": event, "limiter": object, "error": error}));
}

/// Tells a deployment's breaker of a fault found without calling the vendor (a credential not
/// bound), in the background: it opens with that reason. An isolate reports it at most once per
/// quiet time; a deployment without a breaker learns nothing.
pub fn report_fault(env: &Env, ctx: &Context, deployment_id: &str, deployment: &Deployment, reason: FaultReason) {
    if deployment.enforced_limits().is_none_or(|l| !l.breaker.enabled) {
        return;
    }
    let object = object_name(deployment_id);
    if leases(|c| c.report_fault(&object, now_ms())) {
        ctx.wait_until(send_fault(env.clone(), object, reason));
    }
}

async fn send_fault(env: Env, object: String, reason: FaultReason) {
    let Some(stub) = stub_for(&env, &object) else { return };
    let tally = leases(|c| c.take_tally(&object, now_ms()));
    // An id the object never admitted: it applies the outcome, with nothing to reconcile.
    let id = format!("fault:{:016x}", random_u64());
    let outcome = Outcome::Fault { reason };
    let request = SettleRequest { id, outcome, usage: None, signals: UpstreamSignals::default(), tally };
    RemoteSettle { env, stub, object, request }.send().await;
}

/// A settlement the limiter object must receive.
struct RemoteSettle {
    env: Env,
    stub: Stub,
    object: String,
    request: SettleRequest,
}

/// Sends the settles waiting in `object`'s tally once they have waited
/// [`crate::limits::lease_ledger::SETTLE_DELAY_MS`] and no
/// other message took them, until none waits (a lost report puts them back for the next round).
async fn watch_settles(env: Env, object: String) {
    loop {
        match leases(|c| c.flush_step(&object, now_ms())) {
            FlushStep::Done => return,
            FlushStep::WaitUntil(due_ms) => {
                worker::Delay::from(Duration::from_millis(due_ms.saturating_sub(now_ms()))).await;
            }
            FlushStep::Send => report_now(env.clone(), object.clone()).await,
        }
    }
}

/// What a settle leaves for the limiter object: a message now, or a watcher for the settles
/// waiting in the tally.
enum ObjectPart {
    Send(Box<RemoteSettle>),
    Watch { env: Env, object: String },
}

impl ObjectPart {
    async fn run(self) {
        match self {
            ObjectPart::Send(remote) => remote.send().await,
            ObjectPart::Watch { env, object } => watch_settles(env, object).await,
        }
    }
}

impl RemoteSettle {
    async fn send(self) {
        let RemoteSettle { env, stub, object, request } = self;
        let tally = request.tally.clone();
        match client::settle(&stub, request).await {
            Ok(report) if report.breaker != BreakerState::Closed => {
                leases(|c| c.unhealthy(&object, MAX_QUIET_MS, now_ms()));
            }
            Ok(_) => {}
            Err(e) => {
                leases(|c| c.restore_tally(&object, tally));
                log_failed("limiter_settle_failed", &object, &e.to_string());
            }
        }
        // An urgent settle handed the relay's slices back (and may have heard of a trip).
        tell_relay(&env, &object).await;
    }
}

/// What the breaker should learn from an attempt's end.
pub fn outcome_for(class: Option<ErrorClass>, retry_after_ms: Option<u64>) -> Outcome {
    match class {
        None => Outcome::Success,
        Some(ErrorClass::RateLimited) => Outcome::RateLimited { retry_after_ms },
        Some(ErrorClass::QuotaExhausted) => Outcome::QuotaExhausted,
        Some(ErrorClass::Auth) => Outcome::Fault { reason: FaultReason::VendorAuth },
        Some(ErrorClass::NotFound) => Outcome::Fault { reason: FaultReason::ModelNotFound },
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
        if let Some(remote) = self.settle_locally(outcome, usage, signals) {
            remote.run().await;
        }
    }

    /// [`Admission::settle`] from a request's path: what stays in the isolate is done at once, and
    /// only a message the limiter object must get goes to the background (usually none, on a lease).
    pub fn settle_in(self, ctx: &Context, outcome: Outcome, usage: Option<TokenUsage>, signals: UpstreamSignals) {
        if let Some(remote) = self.settle_locally(outcome, usage, signals) {
            ctx.wait_until(remote.run());
        }
    }

    /// The isolate's part of settling; the object's part, if it has one, for the caller to send.
    fn settle_locally(
        self,
        outcome: Outcome,
        usage: Option<TokenUsage>,
        signals: UpstreamSignals,
    ) -> Option<ObjectPart> {
        match self.via {
            Via::Unlimited => None,
            Via::Object { stub, env, object, id, deferrable } => {
                let now = now_ms();
                match leases(|c| c.settle_object(&object, &id, &outcome, usage, &signals, deferrable, now)) {
                    ObjectSettle::Later { due_ms: None } => None,
                    ObjectSettle::Later { due_ms: Some(_) } => Some(ObjectPart::Watch { env, object }),
                    ObjectSettle::Now(tally) => {
                        let request = SettleRequest { id, outcome, usage, signals, tally };
                        Some(ObjectPart::Send(Box::new(RemoteSettle { env, stub, object, request })))
                    }
                }
            }
            Via::Lease { env, object, id, ticket } => {
                let action = leases(|c| c.settle_local(&object, &ticket, &outcome, usage, &signals, now_ms()));
                let SettleAction::Now(tally) = action else { return None };
                let tally = *tally;
                let Some(stub) = stub_for(&env, &object) else {
                    leases(|c| c.restore_tally(&object, tally));
                    return None;
                };
                // Usage was reconciled against the lease; the object learns the outcome.
                let request = SettleRequest { id, outcome, usage: None, signals, tally };
                Some(ObjectPart::Send(Box::new(RemoteSettle { env, stub, object, request })))
            }
        }
    }

    /// Undoes the admission: its request went no further (a later layer refused it), so
    /// everything it took goes back — the request, its tokens, its slot — and no outcome is
    /// recorded. A local admission goes back into its slice (or, if that was handed back, to
    /// the object at once).
    pub async fn release(self) {
        match self.via {
            Via::Unlimited => {}
            Via::Object { stub, object, id, .. } => {
                let tally = leases(|c| c.take_tally(&object, now_ms()));
                let request = ReleaseRequest { id, tally: tally.clone() };
                if let Err(e) = client::release(&stub, request).await {
                    leases(|c| c.restore_tally(&object, tally));
                    log_failed("limiter_release_failed", &object, &e.to_string());
                }
            }
            Via::Lease { env, object, ticket, .. } => {
                if let SettleAction::Now(tally) = leases(|c| c.release_local(&object, &ticket, now_ms())) {
                    leases(|c| c.restore_tally(&object, *tally));
                    report_now(env, object).await;
                }
            }
        }
    }
}

/// What one request holds with its key's and its tenant's limiters (empty when neither has
/// limits). Cheap to clone: clones share the holdings, and whichever settles or releases first
/// does it, once.
#[derive(Clone, Default)]
pub struct Scopes {
    held: Rc<RefCell<Vec<Admission>>>,
}

impl Scopes {
    fn take(&self) -> Vec<Admission> {
        std::mem::take(&mut *self.held.borrow_mut())
    }

    pub fn is_empty(&self) -> bool {
        self.held.borrow().is_empty()
    }

    /// The request went no further: everything goes back, before the client hears of it (so
    /// a retry at once finds the room).
    pub async fn release(&self) {
        join_all(self.take().into_iter().map(Admission::release)).await;
    }

    /// The request went upstream: its real usage replaces the estimate (`None` keeps it), in
    /// the background. Scopes have no breaker: the outcome is always neutral, vendor headers
    /// concern the deployment only.
    pub fn settle(&self, ctx: &Context, usage: Option<TokenUsage>) {
        for admission in self.take() {
            admission.settle_in(ctx, Outcome::Neutral, usage, UpstreamSignals::default());
        }
    }

    /// [`Scopes::settle`] for code already running in `ctx.wait_until` (a stream's end).
    pub async fn settle_now(&self, usage: Option<TokenUsage>) {
        let settles = self.take().into_iter().map(|a| a.settle(Outcome::Neutral, usage, UpstreamSignals::default()));
        join_all(settles).await;
    }

    /// Ends a request that served nothing: released if no attempt reached upstream (every
    /// deployment refused, none qualified), else settled with what the last attempt used.
    pub async fn finish_failed(&self, ctx: &Context, attempted: bool, last_error: Option<&UpstreamError>) {
        if attempted {
            self.settle(ctx, failed_usage(last_error));
        } else {
            self.release().await;
        }
    }
}

/// What a failed request used, for its key and tenant: nothing when the vendor answered with an
/// error status (vendors bill no tokens for those); unknown otherwise (the estimate stays).
pub fn failed_usage(last_error: Option<&UpstreamError>) -> Option<TokenUsage> {
    last_error.filter(|e| e.status >= 400).map(|_| TokenUsage::default())
}

/// The request's layers above the deployments, in order: its key's limits, then its tenant's.
/// A layer without enforced limits is left out (no limiter call).
pub fn scope_layers<'a>(
    key: &'a keys::KeyRecord,
    tenant: Option<&'a keys::TenantRecord>,
) -> Vec<(LimitScope, String, &'a Limits)> {
    let key_layer = keys::enforced(key.limits.as_ref())
        .filter(|_| !key.id.is_empty())
        .map(|l| (LimitScope::Key, scope_object_name("key", &key.id), l));
    let tenant_layer = tenant
        .and_then(|t| keys::enforced(t.limits.as_ref()))
        .map(|l| (LimitScope::Tenant, scope_object_name("tenant", &key.tenant), l));
    key_layer.into_iter().chain(tenant_layer).collect()
}

/// Admits the request with its key's limiter, then its tenant's, before any deployment: all or
/// nothing — when the tenant refuses, what the key took is released before the refusal is
/// returned. The wait for a place in line is shared: the tenant may wait what the key left.
pub async fn admit_scopes(
    env: &Env,
    ctx: &Context,
    rc: &RequestContext,
    estimate: TokenEstimate,
) -> Result<Scopes, Refusal> {
    let scopes = Scopes::default();
    let tenant = config::store::tenant_record(env, &rc.key.tenant, now_ms()).await;
    let layers = scope_layers(&rc.key, tenant.as_deref());
    if layers.is_empty() {
        return Ok(scopes);
    }
    let started = now_ms();
    for (scope, object, limits) in layers {
        let max_wait_ms = rc.max_wait_ms.saturating_sub(now_ms().saturating_sub(started));
        let id = format!("{}:{}", rc.request_id, scope.as_str());
        match admit_to(env, ctx, &object, limits, None, id, estimate, max_wait_ms).await {
            Admit::Admitted(a) => scopes.held.borrow_mut().push(a),
            Admit::Refused { code, retry_after_ms } => {
                scopes.release().await;
                let name = if scope == LimitScope::Tenant { rc.key.tenant.clone() } else { String::new() };
                return Err(Refusal { scope, name, code, retry_after_ms });
            }
        }
    }
    Ok(scopes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::{KeyRecord, TenantRecord};

    fn key(limits: Option<Limits>) -> KeyRecord {
        let mut k: KeyRecord = serde_json::from_str(r#"{"tenant":"acme","app":"a"}"#).unwrap();
        k.limits = limits;
        k.id = "0123456789abcdef".into();
        k
    }

    fn rpm(n: u64) -> Option<Limits> {
        Some(Limits { rpm: Some(n), ..Limits::default() })
    }

    #[test]
    fn layers_run_key_then_tenant_and_skip_the_unlimited() {
        let tenant = TenantRecord { limits: rpm(6) };
        let both = key(rpm(3));
        let layers = scope_layers(&both, Some(&tenant));
        let named: Vec<(LimitScope, &str, Option<u64>)> =
            layers.iter().map(|(s, o, l)| (*s, o.as_str(), l.rpm)).collect();
        assert_eq!(
            named,
            vec![
                (LimitScope::Key, "scope:key:0123456789abcdef", Some(3)),
                (LimitScope::Tenant, "scope:tenant:acme", Some(6)),
            ]
        );
        assert!(scope_layers(&key(None), None).is_empty(), "no limits: no limiter call");
        assert!(scope_layers(&key(Some(Limits::default())), Some(&TenantRecord::default())).is_empty());
        assert_eq!(scope_layers(&key(None), Some(&tenant)).len(), 1);
        let mut anonymous = key(rpm(3));
        anonymous.id.clear();
        assert!(scope_layers(&anonymous, None).is_empty(), "never one shared object for unnamed keys");
    }

    #[test]
    fn a_failed_request_settles_its_scopes_with_what_the_vendor_billed() {
        let answered = UpstreamError {
            class: ErrorClass::ServerError,
            status: 503,
            message: String::new(),
            retry_after_ms: None,
            vendor_code: None,
        };
        assert_eq!(failed_usage(Some(&answered)), Some(TokenUsage::default()));
        let unanswered = UpstreamError { class: ErrorClass::Connection, status: 0, ..answered };
        assert_eq!(failed_usage(Some(&unanswered)), None, "unknown: the estimate stays charged");
        assert_eq!(failed_usage(None), None);
    }
}
