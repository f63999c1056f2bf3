//! One deployment's limiter: buckets, breaker, pause, reservations and leases, changed only in
//! whole steps (the Durable Object runs one step at a time, which is what makes admit atomic).
//!
//! Leases (see [`crate::leases`] and `deployment/leasing.rs`) are slices taken from the buckets
//! at grant time and kept in a ledger of their own; the breaker learns local outcomes in batch
//! from each message's [`crate::protocol::Tally`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::breaker::{Breaker, BreakerPass, BreakerState};
use crate::bucket::{Bucket, Refill};
use crate::fair_share::TenantShares;
use crate::leases::{Calls, LeaseCounts, LeaseStatus};
use crate::limits::{Amounts, BucketKind, Limits};
pub use crate::protocol::StatusReport;
use crate::protocol::{
    AdmitDecision, AdmitRequest, LeaseDecision, LeaseGrant, LimiterRequest, LimiterResponse, Outcome, RejectCode,
    ReleaseReport, ReleaseRequest, Scope, SettleMatch, SettleReport, SettleRequest, TokenUsage, UpstreamSignals,
};
use crate::reservations::{Found, Ledger, Reservation};
use crate::types::Rejection;
pub use crate::types::{BucketStatus, Pause, PauseReason};

/// A 429 without Retry-After or remaining-headers still slows the deployment down this long.
pub const RATE_LIMITED_PAUSE_MS: u64 = 1_000;

/// Concurrency slots free on settle, which cannot be predicted; ask again after this.
pub const CONCURRENCY_RETRY_MS: u64 = 1_000;

const SNAPSHOT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimiterState {
    #[serde(rename = "v")]
    version: u32,
    limits: Limits,
    buckets: BTreeMap<BucketKind, Bucket>,
    breaker: Breaker,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pause: Option<Pause>,
    #[serde(default)]
    ledger: Ledger,
    #[serde(default)]
    leases: Ledger,
    #[serde(default)]
    lease_counts: LeaseCounts,
    #[serde(default)]
    calls: Calls,
    #[serde(default)]
    shares: TenantShares,
}

impl Default for LimiterState {
    fn default() -> Self {
        LimiterState::new(Limits::default(), 0)
    }
}

impl LimiterState {
    pub fn new(limits: Limits, now_ms: u64) -> Self {
        let mut state = LimiterState {
            version: SNAPSHOT_VERSION,
            limits: Limits::default(),
            buckets: BTreeMap::new(),
            breaker: Breaker::default(),
            pause: None,
            ledger: Ledger::default(),
            leases: Ledger::default(),
            lease_counts: LeaseCounts::default(),
            calls: Calls::default(),
            shares: TenantShares::default(),
        };
        state.apply_limits(&limits, now_ms);
        state
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn in_flight(&self) -> usize {
        self.ledger.in_flight()
    }

    pub fn reservations(&self) -> &Ledger {
        &self.ledger
    }

    pub fn leases(&self) -> &Ledger {
        &self.leases
    }

    /// Runs one request; the Durable Object calls this with the clock and a random draw.
    pub fn handle(&mut self, req: &LimiterRequest, now_ms: u64, rand: u64) -> LimiterResponse {
        match req {
            LimiterRequest::Admit(a) => {
                self.calls.admit += 1;
                LimiterResponse::Admit(self.admit(a, now_ms, rand))
            }
            LimiterRequest::Settle(s) => {
                self.calls.settle += 1;
                LimiterResponse::Settle(self.settle(s, now_ms))
            }
            LimiterRequest::Lease(l) => {
                self.calls.lease += 1;
                LimiterResponse::Lease(self.lease(l, now_ms))
            }
            LimiterRequest::Report(t) => {
                self.calls.report += 1;
                LimiterResponse::Report(self.report(t, now_ms))
            }
            LimiterRequest::Release(r) => {
                self.calls.release += 1;
                LimiterResponse::Release(self.release(r, now_ms))
            }
            LimiterRequest::Status => {
                self.calls.status += 1;
                LimiterResponse::Status(Box::new(self.status(now_ms)))
            }
        }
    }

    /// Applies new limits at once; bucket levels carry over (clamped to new capacities).
    pub fn set_limits(&mut self, limits: &Limits, now_ms: u64) {
        if *limits != self.limits {
            self.apply_limits(limits, now_ms);
        }
    }

    fn apply_limits(&mut self, limits: &Limits, now_ms: u64) {
        for kind in BucketKind::ALL {
            match (kind.capacity(limits), self.buckets.get_mut(&kind)) {
                (Some(cap), Some(bucket)) => bucket.set_limit(cap, now_ms),
                (Some(cap), None) => {
                    self.buckets.insert(kind, Bucket::new(cap, kind.period_ms(), kind.refill(), now_ms));
                }
                (None, _) => {
                    self.buckets.remove(&kind);
                }
            }
        }
        self.limits = limits.clone();
    }

    /// Pause, breaker, ramp, then every bucket and a concurrency slot: all taken, or none.
    pub fn admit(&mut self, req: &AdmitRequest, now_ms: u64, rand: u64) -> AdmitDecision {
        if let Some(limits) = &req.limits {
            self.set_limits(limits, now_ms);
        }
        self.expire(now_ms);
        if let Some(r) = self.ledger.get(&req.id) {
            // A retried admit (lost answer): same answer, nothing taken twice.
            let (wait, probe) = (r.start_ms.saturating_sub(now_ms), r.probe);
            return self.admitted(wait, probe, None, now_ms);
        }
        self.apply_tally(&req.tally, now_ms);
        let wanted = Amounts::request(req.estimate.input, req.estimate.output);
        let outcome = self
            .check_pause(now_ms)
            .and_then(|()| self.breaker.check(&self.limits.breaker, now_ms, rand))
            .and_then(|gate| self.check_fair_share(req.tenant.as_deref(), now_ms).map(|()| gate))
            .and_then(|gate| self.reserve(&req.id, wanted, req.max_wait_ms, gate, now_ms).map(|w| (w, gate)));
        if let (Ok(_), Some(tenant), Some(cfg)) = (&outcome, req.tenant.as_deref(), self.limits.fair_share.as_ref()) {
            self.shares.record(cfg, tenant, now_ms);
        }
        match outcome {
            Ok((wait, gate)) => {
                // A lease rides along only when this admission needed no place in line.
                let lease = match &req.lease {
                    Some(ask) if gate == BreakerPass::Pass && wait == 0 => {
                        match self.grant_lease(&ask.id, ask.want, now_ms) {
                            LeaseDecision::Granted(grant) => Some(grant),
                            LeaseDecision::Refused { .. } => None,
                        }
                    }
                    _ => None,
                };
                self.admitted(wait, gate == BreakerPass::Probe, lease, now_ms)
            }
            Err(r) => {
                AdmitDecision::Rejected { code: r.code, retry_after_ms: r.retry_after_ms, scope: Scope::Deployment }
            }
        }
    }

    /// Holds a tenant to its weighted share while other tenants use the deployment too.
    fn check_fair_share(&mut self, tenant: Option<&str>, now_ms: u64) -> Result<(), Rejection> {
        let (Some(cfg), Some(tenant), Some(rpm)) = (self.limits.fair_share.as_ref(), tenant, self.limits.rpm) else {
            return Ok(());
        };
        self.shares.prune(cfg, now_ms);
        self.shares
            .check(cfg, tenant, rpm, now_ms)
            .map_err(|retry_after_ms| Rejection { code: RejectCode::FairShare, retry_after_ms })
    }

    /// Takes `wanted` from every bucket plus a concurrency slot, or nothing; returns how long
    /// the holder must wait before using it (at most `max_wait_ms`).
    pub fn reserve(
        &mut self,
        id: &str,
        wanted: Amounts,
        max_wait_ms: u64,
        gate: BreakerPass,
        now_ms: u64,
    ) -> Result<u64, Rejection> {
        let mut wait = 0;
        let mut binding = None;
        for (&kind, bucket) in &self.buckets {
            match bucket.time_until(wanted.get(kind), now_ms) {
                Ok(w) if w > wait => (wait, binding) = (w, Some(kind)),
                Ok(_) => {}
                // A zero-capacity bucket never has room: ask again in a period, never queue.
                Err(_) => return Err(Rejection { code: kind.reject_code(), retry_after_ms: kind.period_ms() }),
            }
        }
        if let (true, Some(kind)) = (wait > max_wait_ms, binding) {
            return Err(Rejection { code: kind.reject_code(), retry_after_ms: wait });
        }
        if self.limits.max_concurrent.is_some_and(|max| self.ledger.in_flight() >= max as usize) {
            return Err(Rejection { code: RejectCode::Concurrency, retry_after_ms: CONCURRENCY_RETRY_MS });
        }
        let start_ms = now_ms + wait;
        let mut taken = wanted;
        let mut forgone = Amounts::default();
        for (&kind, bucket) in self.buckets.iter_mut() {
            let (took, lowered) = bucket.take_queued(wanted.get(kind), now_ms, start_ms);
            taken.set(kind, took);
            if lowered > 0 {
                // Only continuous buckets are lowered, and RPM is the only one counting requests.
                forgone.set(kind, lowered);
            }
        }
        let expires_ms = now_ms.saturating_add(self.limits.reservation_ttl_ms);
        let probe = gate == BreakerPass::Probe;
        if probe {
            self.breaker.begin_probe(id, expires_ms);
        }
        self.ledger.insert(id, Reservation { taken, start_ms, taken_ms: now_ms, forgone, expires_ms, probe });
        Ok(wait)
    }

    /// Reconciles usage, releases the slot, feeds the breaker and applies the vendor's signals.
    pub fn settle(&mut self, req: &SettleRequest, now_ms: u64) -> SettleReport {
        self.expire(now_ms);
        self.apply_tally(&req.tally, now_ms);
        let Some(matched) = self.finish_reservation(&req.id, req.usage, now_ms) else {
            return SettleReport { reservation: SettleMatch::Duplicate, breaker: self.breaker.state() };
        };
        self.breaker.record(&self.limits.breaker, &req.id, &req.outcome, now_ms);
        self.apply_signals(&req.outcome, &req.signals, now_ms);
        SettleReport { reservation: matched, breaker: self.breaker.state() }
    }

    /// A success settled in a tally (`LateSettle`): as a settle with that outcome and no signals.
    pub(crate) fn settle_success(&mut self, id: &str, usage: Option<TokenUsage>, now_ms: u64) {
        if self.finish_reservation(id, usage, now_ms).is_some() {
            self.breaker.record(&self.limits.breaker, id, &Outcome::Success, now_ms);
        }
    }

    /// Ends reservation `id` with its real usage; `None` if it was already settled.
    fn finish_reservation(&mut self, id: &str, usage: Option<TokenUsage>, now_ms: u64) -> Option<SettleMatch> {
        match self.ledger.finish(id, now_ms) {
            Found::Settled => None,
            Found::Live(r) => {
                self.reconcile(&r.taken, usage, now_ms);
                Some(SettleMatch::Settled)
            }
            Found::Expired(taken) => {
                self.reconcile(&taken, usage, now_ms);
                Some(SettleMatch::Late)
            }
            Found::Unknown => Some(SettleMatch::Unknown),
        }
    }

    /// Undoes an admission whose request went no further (a later layer refused it): every bucket
    /// gets back what it took, the request included, and the concurrency slot and (if it held
    /// it) the half-open probe slot are freed. The breaker records no outcome, so its state, its
    /// failure counts and its error-rate window are as if the request had never come. A queued
    /// reservation also gives back the refill its place in line made the buckets forgo.
    ///
    /// Requests per day go back only within the day they were taken in (afterwards the window
    /// has already reset). An expired reservation gives back its tokens and requests per minute
    /// (its slot went at expiry); a repeated release, or one after a settle, does nothing.
    pub fn release(&mut self, req: &ReleaseRequest, now_ms: u64) -> ReleaseReport {
        self.expire(now_ms);
        self.apply_tally(&req.tally, now_ms);
        let reservation = match self.ledger.finish(&req.id, now_ms) {
            Found::Live(r) => {
                if r.probe {
                    self.breaker.release_probe(&req.id);
                }
                self.refund_taken(&r.taken, Some(r.taken_ms), now_ms);
                self.refund_taken(&r.forgone, None, now_ms);
                SettleMatch::Settled
            }
            Found::Expired(taken) => {
                self.refund_taken(&taken, None, now_ms);
                SettleMatch::Late
            }
            Found::Settled => SettleMatch::Duplicate,
            Found::Unknown => SettleMatch::Unknown,
        };
        ReleaseReport { reservation }
    }

    /// Gives `taken` back to every bucket; a window bucket (RPD) only if `taken_ms` is in the
    /// current window.
    fn refund_taken(&mut self, taken: &Amounts, taken_ms: Option<u64>, now_ms: u64) {
        for (&kind, bucket) in self.buckets.iter_mut() {
            let same_window = taken_ms.is_some_and(|t| t / bucket.period_ms() == now_ms / bucket.period_ms());
            if bucket.refill() == Refill::Window && !same_window {
                continue;
            }
            bucket.refund(taken.get(kind), now_ms);
        }
    }

    /// Actual usage replaces the estimate in each token bucket; requests stay counted.
    pub fn reconcile(&mut self, taken: &Amounts, usage: Option<TokenUsage>, now_ms: u64) {
        let Some(used) = usage else { return };
        let actual = Amounts { requests: taken.requests, ..Amounts::request(used.input, used.output) };
        for (&kind, bucket) in self.buckets.iter_mut() {
            let (had, used) = (taken.get(kind), actual.get(kind));
            if used > had {
                bucket.charge(used - had, now_ms);
            } else {
                bucket.refund(had - used, now_ms);
            }
        }
    }

    /// Releases reservations past their expiry (slots and probe; estimates stay charged).
    pub fn expire(&mut self, now_ms: u64) {
        self.breaker.advance(&self.limits.breaker, now_ms);
        for (id, r) in self.ledger.expire(now_ms) {
            if r.probe {
                self.breaker.release_probe(&id);
            }
        }
        self.ledger.prune(now_ms, self.limits.reservation_ttl_ms);
        self.expire_leases(now_ms);
        if self.pause.is_some_and(|p| p.until_ms <= now_ms) {
            self.pause = None;
        }
    }

    pub fn status(&mut self, now_ms: u64) -> StatusReport {
        self.expire(now_ms);
        StatusReport {
            now_ms,
            breaker: self.breaker.status(&self.limits.breaker, now_ms),
            buckets: self
                .buckets
                .iter()
                .map(|(&kind, b)| {
                    (
                        kind,
                        BucketStatus {
                            capacity: b.capacity(),
                            available: b.available(now_ms),
                            period_ms: b.period_ms(),
                        },
                    )
                })
                .collect(),
            pause: self.pause,
            in_flight: self.ledger.in_flight() as u64,
            limits: self.limits.clone(),
            leases: LeaseStatus {
                live: self.leases.in_flight() as u64,
                held: self.leased(),
                counts: self.lease_counts,
            },
            calls: self.calls,
        }
    }

    /// Changes here are rare and costly to lose (breaker phase and probe, pauses): the shell
    /// persists them at once.
    pub fn critical_key(&self) -> ((BreakerState, u64, bool), Option<Pause>) {
        (self.breaker.phase_key(), self.pause)
    }

    /// When a reservation or lease next needs expiring, if any is outstanding.
    pub fn next_expiry(&self) -> Option<u64> {
        [self.ledger.earliest_expiry(), self.leases.earliest_expiry()].into_iter().flatten().min()
    }

    pub fn to_snapshot(&self) -> String {
        serde_json::to_string(self).expect("limiter state always serializes")
    }

    /// The snapshot without reservations and leases, for when the full one is too large to store.
    pub fn to_snapshot_without_reservations(&self) -> String {
        let slim = LimiterState { ledger: Ledger::default(), leases: Ledger::default(), ..self.clone() };
        slim.to_snapshot()
    }

    pub fn from_snapshot(text: &str) -> Result<Self, String> {
        let state: LimiterState = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if state.version != SNAPSHOT_VERSION {
            return Err(format!("snapshot version {} is not {SNAPSHOT_VERSION}", state.version));
        }
        Ok(state)
    }

    fn check_pause(&self, now_ms: u64) -> Result<(), Rejection> {
        match self.pause {
            Some(p) if p.until_ms > now_ms => {
                Err(Rejection { code: p.reason.code(), retry_after_ms: p.until_ms - now_ms })
            }
            _ => Ok(()),
        }
    }

    fn apply_signals(&mut self, outcome: &Outcome, signals: &UpstreamSignals, now_ms: u64) {
        let told = match outcome {
            Outcome::RateLimited { retry_after_ms } => (*retry_after_ms).max(signals.retry_after_ms),
            _ => signals.retry_after_ms,
        };
        let remaining_known = signals.remaining_requests.is_some() || signals.remaining_tokens.is_some();
        match (told, outcome) {
            (Some(ms), _) => self.pause_until(now_ms.saturating_add(ms), PauseReason::RetryAfter),
            (None, Outcome::RateLimited { .. }) if !remaining_known => {
                self.pause_until(now_ms + RATE_LIMITED_PAUSE_MS, PauseReason::RetryAfter)
            }
            _ => {}
        }
        if *outcome == Outcome::QuotaExhausted {
            self.pause_until(now_ms.saturating_add(self.limits.quota_pause_ms), PauseReason::Quota);
        }
        if let (Some(left), Some(b)) = (signals.remaining_requests, self.buckets.get_mut(&BucketKind::Rpm)) {
            b.clamp_to(left, signals.reset_requests_ms, now_ms);
        }
        if let (Some(left), Some(b)) = (signals.remaining_tokens, self.buckets.get_mut(&BucketKind::Tpm)) {
            b.clamp_to(left, signals.reset_tokens_ms, now_ms);
        }
    }

    /// Pauses only ever extend.
    fn pause_until(&mut self, until_ms: u64, reason: PauseReason) {
        if self.pause.is_none_or(|p| until_ms > p.until_ms) {
            self.pause = Some(Pause { until_ms, reason });
        }
    }

    fn admitted(&self, start_after_ms: u64, probe: bool, lease: Option<LeaseGrant>, now_ms: u64) -> AdmitDecision {
        let (remaining_requests, remaining_tokens) = self.remaining(now_ms);
        AdmitDecision::Admitted { start_after_ms, remaining_requests, remaining_tokens, probe, lease }
    }

    /// What the client may still send now: requests (RPM, RPD) and tokens (TPM).
    fn remaining(&self, now_ms: u64) -> (Option<u64>, Option<u64>) {
        let left = |kinds: &[BucketKind]| {
            kinds.iter().filter_map(|k| self.buckets.get(k)).map(|b| b.available(now_ms).max(0) as u64).min()
        };
        (left(&[BucketKind::Rpm, BucketKind::Rpd]), left(&[BucketKind::Tpm]))
    }
}

mod leasing;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod invariants;
