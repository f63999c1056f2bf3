//! The object's side of leases: grant slices from the buckets, take them back, and learn what
//! the isolates did locally.

use super::*;
use crate::leases::{grant_size, lease_ttl, room, LEASE_GRACE_MS, LEASE_MEMORY_MS, LEASE_RETRY_MS, LEASE_TTL_MS};
use crate::limits::Delta;
use crate::protocol::{LeaseRequest, LeaseReturn, ReportAck, Tally};
use crate::reservations::Found;

impl LimiterState {
    /// Applies the tally, then grants a lease if the deployment is healthy and has room.
    pub fn lease(&mut self, req: &LeaseRequest, now_ms: u64) -> LeaseDecision {
        if let Some(limits) = &req.limits {
            self.set_limits(limits, now_ms);
        }
        self.expire(now_ms);
        self.apply_tally(&req.tally, now_ms);
        self.grant_lease(&req.id, req.want, now_ms)
    }

    /// Takes back leases and applies local outcomes; asks for nothing.
    pub fn report(&mut self, tally: &Tally, now_ms: u64) -> ReportAck {
        self.expire(now_ms);
        self.apply_tally(tally, now_ms);
        ReportAck { breaker: self.breaker.state() }
    }

    /// Takes a slice of every bucket for lease `id`: the whole of `want` scaled to fit each
    /// bucket's room, or nothing. Never while paused, open, half-open or ramping (every admission
    /// then goes through the object), nor when in-flight requests are limited (the object alone
    /// counts them).
    pub(super) fn grant_lease(&mut self, id: &str, want: Amounts, now_ms: u64) -> LeaseDecision {
        if let Some(r) = self.leases.get(id) {
            // A retried ask (lost answer): same slice, nothing taken twice.
            let ttl_ms = r.expires_ms.saturating_sub(r.taken_ms + LEASE_GRACE_MS);
            return self.granted(r.taken, ttl_ms, now_ms);
        }
        let health = self.check_pause(now_ms).and_then(|()| self.breaker.lease_gate(&self.limits.breaker, now_ms));
        if let Err(r) = health {
            return LeaseDecision::Refused { code: r.code, retry_after_ms: r.retry_after_ms };
        }
        if self.limits.max_concurrent.is_some() {
            return LeaseDecision::Refused { code: RejectCode::Concurrency, retry_after_ms: LEASE_TTL_MS };
        }
        if self.limits.fair_share.is_some() {
            // Shares are counted per tenant by the object; a slice would let one tenant bypass them.
            return LeaseDecision::Refused { code: RejectCode::FairShare, retry_after_ms: LEASE_TTL_MS };
        }
        let held = self.leased();
        let rooms: Vec<(BucketKind, u64)> = self
            .buckets
            .iter()
            .map(|(&kind, b)| (kind, room(b.capacity(), b.available(now_ms), held.get(kind))))
            .collect();
        let (size, binding) = grant_size(want, &rooms);
        if size.requests == 0 {
            let code = binding.map_or(RejectCode::Rpm, BucketKind::reject_code);
            return LeaseDecision::Refused { code, retry_after_ms: LEASE_RETRY_MS };
        }
        for (&kind, bucket) in self.buckets.iter_mut() {
            bucket.force_take(size.get(kind), now_ms);
        }
        let ttl_ms = lease_ttl(size, self.buckets.iter().map(|(&kind, b)| (kind, b.capacity())));
        let expires_ms = now_ms + ttl_ms + LEASE_GRACE_MS;
        self.leases.insert(
            id,
            Reservation {
                taken: size,
                start_ms: now_ms,
                taken_ms: now_ms,
                forgone: Amounts::default(),
                expires_ms,
                probe: false,
            },
        );
        self.lease_counts.granted += 1;
        self.lease_counts.granted_requests += size.requests;
        self.granted(size, ttl_ms, now_ms)
    }

    fn granted(&self, grant: Amounts, ttl_ms: u64, now_ms: u64) -> LeaseDecision {
        let (remaining_requests, remaining_tokens) = self.remaining(now_ms);
        LeaseDecision::Granted(LeaseGrant { grant, ttl_ms, remaining_requests, remaining_tokens })
    }

    /// Local successes first, then returned leases and token corrections, then the vendor's headers.
    pub(super) fn apply_tally(&mut self, tally: &Tally, now_ms: u64) {
        if tally.successes > 0 {
            self.breaker.record_successes(&self.limits.breaker, tally.successes, now_ms);
            self.lease_counts.local_successes += tally.successes;
        }
        for ret in &tally.returns {
            self.take_back(ret, now_ms);
        }
        // Corrections are of tokens only: a request once admitted stays counted.
        let tokens_only = Amounts { requests: 0, tokens: u64::MAX, input: u64::MAX, output: u64::MAX };
        self.give_back(tally.adjust, tokens_only, None, now_ms);
        // Released local admissions went no further: their requests come back too (not per day).
        let everything = Amounts { requests: u64::MAX, tokens: u64::MAX, input: u64::MAX, output: u64::MAX };
        self.give_back(tally.released, everything, None, now_ms);
        if !tally.signals.is_empty() {
            self.apply_signals(&Outcome::Success, &tally.signals, now_ms);
        }
        for late in &tally.settles {
            self.settle_success(&late.id, late.usage, now_ms);
        }
    }

    /// Ends lease `ret.id`, refunding what it did not use (never more than it took) and charging
    /// what was used beyond it.
    pub fn take_back(&mut self, ret: &LeaseReturn, now_ms: u64) -> SettleMatch {
        match self.leases.finish(&ret.id, now_ms) {
            Found::Live(r) => {
                self.give_back(ret.unused, r.taken, Some(r.start_ms), now_ms);
                SettleMatch::Settled
            }
            Found::Expired(taken) => {
                self.give_back(ret.unused, taken, None, now_ms);
                SettleMatch::Late
            }
            Found::Settled => SettleMatch::Duplicate,
            // Forgotten (or lost in a restart, when the buckets already look fuller): charges only.
            Found::Unknown => {
                self.give_back(ret.unused, Amounts::default(), None, now_ms);
                SettleMatch::Unknown
            }
        }
    }

    /// Refunds the positive part of `delta` (at most `cap`) and charges the negative part. A
    /// window bucket (RPD) is refunded only within the window it was taken in (`taken_ms`): a
    /// refund into the next window would hand out the previous window's capacity again.
    fn give_back(&mut self, delta: Delta, cap: Amounts, taken_ms: Option<u64>, now_ms: u64) {
        for (&kind, bucket) in self.buckets.iter_mut() {
            let d = delta.get(kind);
            if d < 0 {
                bucket.charge(d.unsigned_abs(), now_ms);
                continue;
            }
            let same_window = taken_ms.is_some_and(|t| t / bucket.period_ms() == now_ms / bucket.period_ms());
            if bucket.refill() == Refill::Window && !same_window {
                continue;
            }
            bucket.refund((d as u64).min(cap.get(kind)), now_ms);
        }
        let refunded = u64::try_from(delta.requests).unwrap_or(0).min(cap.requests);
        self.lease_counts.returned_requests += refunded;
    }

    /// What the live leases hold.
    pub(super) fn leased(&self) -> Amounts {
        self.leases.live().fold(Amounts::default(), |sum, (_, r)| Amounts {
            requests: sum.requests.saturating_add(r.taken.requests),
            tokens: sum.tokens.saturating_add(r.taken.tokens),
            input: sum.input.saturating_add(r.taken.input),
            output: sum.output.saturating_add(r.taken.output),
        })
    }

    /// A lease not handed back by its expiry stays charged as if used: an isolate that dies
    /// costs the capacity it held, never more.
    pub(super) fn expire_leases(&mut self, now_ms: u64) {
        self.leases.expire(now_ms);
        self.leases.prune(now_ms, LEASE_MEMORY_MS);
    }
}

#[cfg(test)]
mod tests;
