//! The isolate's side of limiter leases: slices of a deployment's buckets that this isolate
//! took from the limiter object, admitted against locally with no round trip.
//!
//! Pure: time comes in as an argument and nothing here touches `worker`. `admission` owns the
//! one instance per isolate and does the talking; this decides when to ask, what to admit
//! locally, and what to tell the object (a [`Tally`]) when it next speaks to it.
//!
//! - A request is admitted locally when a live slice covers it (1 request and its token
//!   estimate in every limited bucket); otherwise it goes to the object as before, asking for a
//!   lease in the same round trip.
//! - A new lease is asked for ahead of running dry: when the slices will serve less than the
//!   renew-ahead time (at least [`RENEW_AHEAD_MS`], more for a long round trip) at the current
//!   rate (the last second's, or in a burst the last tenth's), for what a slice's life needs
//!   less what the slices will still serve. One ask in flight at a time, and only for a rate
//!   worth leasing; how much and when are `lease_policy`'s decisions.
//! - A request no slice covers while an ask is in flight waits for that answer instead of
//!   calling the object itself (its own admit would queue behind the ask): a busy isolate that
//!   ran dry, or a cold one, costs the object one call, not one per request.
//! - A refusal for room is repeated locally for a moment, and a failed call backs off (fail
//!   open without calling): both spare an object at its limit or overloaded.
//! - Slices are used oldest first and only until [`EXPIRY_MARGIN_MS`] before their TTL ends;
//!   drained or expired slices are handed back with what they did not use.
//! - Local settles correct the slice's tokens; successes are counted for the breaker. A failure,
//!   a 429, a quota error, Retry-After or vendor headers showing less room than this isolate
//!   holds are urgent: every slice is handed back and the object is told at once.

use std::collections::{HashMap, VecDeque};

use limiter::leases::{lease_ttl, HOT_LEASE_TTL_MS, LEASE_TTL_MS};
use limiter::limits::{Amounts, BucketKind, Delta, Limits};
use limiter::protocol::{
    LateSettle, LeaseAsk, LeaseGrant, LeaseReturn, Outcome, RejectCode, Tally, TokenUsage, UpstreamSignals,
};
use limiter::window::Counter;

use crate::limits::lease_policy::{self as policy, Rates};

/// A slice stops admitting this long before its TTL, so its use ends before the object's clock
/// says so even with the grant's answer in flight.
pub const EXPIRY_MARGIN_MS: u64 = 250;

/// An ask unanswered this long is given up, so another may be sent.
pub const ASK_TIMEOUT_MS: u64 = 5_000;

/// A lease is asked for at least this many requests...
pub const MIN_WANT: u64 = policy::MIN_SLICE;
/// ...and at most this many.
pub const MAX_WANT: u64 = 10_000;

/// A request waits for asks in flight (one, or the next after a grant too small for it) at
/// most this long in all: an admit of its own would queue behind them at the object anyway.
pub const MAX_ASK_WAIT_MS: u64 = ASK_TIMEOUT_MS;
/// A waiting request looks at the ledger after this long, then twice as long each time up to
/// [`ASK_POLL_MAX_MS`] (the worker cannot be woken by the request that gets the answer).
pub const ASK_POLL_FIRST_MS: u64 = 1;
pub const ASK_POLL_MAX_MS: u64 = 16;

/// A successful object admission's settle waits at most this long for a message to ride with.
pub const SETTLE_DELAY_MS: u64 = 1_000;

/// After a health refusal (breaker, pause) no lease is asked for during at most this long.
pub const MAX_QUIET_MS: u64 = 5_000;

/// A lease is asked for when the slices will serve less than this much more time at the
/// current rate (at least; more when the measured round trip is long, see `lease_policy`).
pub const RENEW_AHEAD_MS: u64 = policy::MIN_RENEW_AHEAD_MS;

/// More slices than this are never held (each ask adds at most one).
const MAX_SLICES: usize = 4;

const SECOND_MS: u64 = 1_000;
const TEN_SECONDS_MS: u64 = 10_000;

/// One admission made against a slice; settle gives it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub lease: String,
    /// The request and its estimate in the buckets the deployment limits.
    pub taken: Amounts,
    pub limited: Limited,
}

/// Which token buckets a deployment limits: only those are taken from a slice (requests always).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    tokens: bool,
    input: bool,
    output: bool,
}

impl Limited {
    pub fn of(limits: &Limits) -> Self {
        Limited { tokens: limits.tpm.is_some(), input: limits.input_tpm.is_some(), output: limits.output_tpm.is_some() }
    }

    pub fn apply(self, a: Amounts) -> Amounts {
        let keep = |on: bool, n: u64| if on { n } else { 0 };
        Amounts {
            requests: a.requests,
            tokens: keep(self.tokens, a.tokens),
            input: keep(self.input, a.input),
            output: keep(self.output, a.output),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAdmit {
    pub ticket: Ticket,
    pub remaining_requests: Option<u64>,
    pub remaining_tokens: Option<u64>,
}

/// What to do for one request: admit it locally, and/or ask for a lease (alongside the object
/// admit when not local, in the background when local).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    pub local: Option<LocalAdmit>,
    pub ask: Option<LeaseAsk>,
    /// `ask` goes to the location's relay (as a lease message, not alongside an object admit);
    /// a request no slice covers then calls [`LeaseLedger::admit_again`] to wait for its answer.
    pub via_relay: bool,
    /// Neither: an ask is in flight (given up then); wait for its answer, at most
    /// [`MAX_ASK_WAIT_MS`] from the request's arrival, and call [`LeaseLedger::admit_again`].
    pub wait_until_ms: Option<u64>,
    /// Settles put back after a lost message wait with no watcher: start one (see
    /// [`LeaseLedger::flush_step`]).
    pub watch_settles: bool,
}

/// An object admission's settle: send it now with this tally, or later in a tally (with a
/// watcher to start at `due_ms` when this settle began a batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectSettle {
    Now(Tally),
    Later { due_ms: Option<u64> },
}

/// What the settle watcher does next (see [`LeaseLedger::flush_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushStep {
    Done,
    WaitUntil(u64),
    Send,
}

/// After a local settle: nothing to send, or a tally to send to the object now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleAction {
    Done,
    Now(Box<Tally>),
}

#[derive(Debug, Clone)]
struct Slice {
    id: String,
    left: Delta,
    /// The limits it was granted under: a changed route table retires it.
    limits: Limits,
    expires_ms: u64,
    remaining: (Option<u64>, Option<u64>),
}

impl Slice {
    fn covers(&self, need: Amounts, limits: &Limits) -> bool {
        self.left.requests >= 1
            && BucketKind::ALL
                .iter()
                .filter(|k| k.capacity(limits).is_some())
                .all(|&k| self.left.get(k) >= signed(need.get(k)))
    }

    fn hand_back(self) -> LeaseReturn {
        LeaseReturn { id: self.id, unused: self.left }
    }
}

/// Requests per second and the average request, from what this isolate saw.
#[derive(Debug, Clone, Default)]
struct Demand {
    second: Counter,
    /// A tenth of a second, so a burst is seen before a whole second has passed.
    tenth: Counter,
    /// Ten seconds, for the sustained rate.
    ten: Counter,
    average: Option<Amounts>,
    /// This isolate's first request to the deployment, or its first after ten quiet seconds (a
    /// fallback deployment that suddenly takes a failed one's traffic starts like a new isolate).
    since_ms: Option<u64>,
}

impl Demand {
    fn record(&mut self, need: Amounts, now_ms: u64) {
        if self.since_ms.is_none() || self.ten.over_last(TEN_SECONDS_MS, now_ms) == 0 {
            self.since_ms = Some(now_ms);
        }
        self.second.record(SECOND_MS, now_ms);
        self.tenth.record(SECOND_MS / 10, now_ms);
        self.ten.record(TEN_SECONDS_MS, now_ms);
        // Rounded up, so slices sized from it carry the typical request.
        let blend = |avg: u64, new: u64| (avg.saturating_mul(7).saturating_add(new)).div_ceil(8);
        self.average = Some(match self.average {
            None => need,
            Some(a) => Amounts {
                requests: 1,
                tokens: blend(a.tokens, need.tokens),
                input: blend(a.input, need.input),
                output: blend(a.output, need.output),
            },
        });
    }

    fn rates(&self, now_ms: u64) -> Rates {
        Rates {
            tenth: self.tenth.over_last(SECOND_MS / 10, now_ms),
            second: self.second.over_last(SECOND_MS, now_ms),
            ten_seconds: self.ten.over_last(TEN_SECONDS_MS, now_ms),
        }
    }

    /// The rates to size slices by: under a very large limit a second's count is scaled to the
    /// rate it implies while this isolate has seen the deployment for less than a second (a new
    /// isolate of a busy deployment otherwise asks for a fraction of what it needs, and asks
    /// again and again while it warms up).
    fn sizing_rates(&self, max_slice: Option<u64>, now_ms: u64) -> Rates {
        let rates = self.rates(now_ms);
        if !policy::scale_young(max_slice) {
            return rates;
        }
        let age = now_ms.saturating_sub(self.since_ms.unwrap_or(now_ms));
        Rates { second: policy::young_rate(rates.second, age), ..rates }
    }

    /// Leasing pays once a lease serves more than the requests that brought it (see `lease_policy`).
    fn worth_leasing(&self, limits: &Limits, now_ms: u64) -> bool {
        policy::worth_leasing(self.rates(now_ms), policy::max_slice(limits))
    }

    fn per_second(&self, now_ms: u64) -> u64 {
        let burst = self.tenth.over_last(SECOND_MS / 10, now_ms) * 10;
        self.second.over_last(SECOND_MS, now_ms).max(burst)
    }

    /// How many requests `ms` brings at the current rate (at least one).
    fn requests_over(&self, ms: u64, now_ms: u64) -> u64 {
        (self.per_second(now_ms) * ms).div_ceil(SECOND_MS).max(1)
    }

    /// `requests` average requests, with a quarter spare in tokens for larger ones.
    fn times(&self, requests: u64) -> Amounts {
        let each = self.average.unwrap_or_default();
        let tokens = |per: u64| per.saturating_mul(requests).saturating_mul(5) / 4;
        Amounts { requests, tokens: tokens(each.tokens), input: tokens(each.input), output: tokens(each.output) }
    }
}

#[derive(Debug, Default)]
struct Local {
    slices: VecDeque<Slice>,
    tally: Tally,
    /// When `tally.signals` arrived (their reset times are relative to then).
    signals_ms: u64,
    asking: Option<(String, u64)>,
    /// An ask sent before the deployment turned unhealthy: its grant goes straight back.
    void: Option<String>,
    quiet_until_ms: u64,
    demand: Demand,
    /// This isolate's asks' round trip, blended over the last few.
    round_trip_ms: Option<u64>,
    /// The object refused for want of room: like requests are refused here until then.
    hold: Option<Hold>,
    /// A call to the object failed: requests fail open without calling it until then.
    unreachable_until_ms: u64,
    /// Requests the ask in flight wants.
    asked_requests: u64,
    /// The last grant was cut short for want of room: no waiting for asks until then.
    short_until_ms: u64,
    /// Counts changes a waiting request may be admitted after (answers, slices back, refunds).
    changes: u64,
    /// When the oldest settle in `tally.settles` joined it, or the watcher last sent them.
    settles_since_ms: u64,
    /// A settle watcher is running for this deployment.
    flush_armed: bool,
    /// Slices the relay granted, handed back: they go to the relay only.
    relay_returns: Vec<LeaseReturn>,
    /// A call to the relay failed: asks ride with object admits until then.
    relay_down_until_ms: u64,
    /// The object said the deployment is unhealthy: the relay is to hear it with the next report.
    tell_relay: bool,
    /// This isolate has asked the relay for a slice of this deployment.
    uses_relay: bool,
}

/// A refusal for want of room, repeated locally for a short while.
#[derive(Debug, Clone, Copy)]
struct Hold {
    code: RejectCode,
    /// What the refused request could wait: one that can wait longer still asks the object.
    max_wait_ms: u64,
    until_ms: u64,
    retry_at_ms: u64,
}

impl Local {
    fn retire(&mut self, keep: impl Fn(&Slice) -> bool) -> bool {
        if self.slices.iter().all(&keep) {
            return false;
        }
        let before = self.slices.len();
        let (kept, gone): (VecDeque<Slice>, VecDeque<Slice>) = self.slices.drain(..).partition(|s| keep(s));
        self.slices = kept;
        for slice in gone {
            self.hand_back(slice.hand_back());
        }
        self.slices.len() != before
    }

    /// A slice's return goes where the slice came from: the relay's to the relay, the object's
    /// with the next message to the object.
    fn hand_back(&mut self, ret: LeaseReturn) {
        if from_relay(&ret.id) {
            self.relay_returns.push(ret);
        } else {
            self.tally.returns.push(ret);
        }
    }

    /// Arms a settle watcher if settles wait with none; says whether one must start.
    fn arm_flush(&mut self) -> bool {
        let needed = !self.tally.settles.is_empty() && !self.flush_armed;
        self.flush_armed |= needed;
        needed
    }

    /// Stops every local admission: slices go back, and so will the grant of an ask in flight.
    fn retire_all(&mut self) -> bool {
        self.changes += 1;
        if let Some((id, _)) = self.asking.take() {
            self.void = Some(id);
        }
        self.retire(|_| false)
    }

    /// How many more typical requests the slices will admit before they expire at the current
    /// rate: each slice its requests or, if they run out first, its tokens, and no more than
    /// the rate uses in the time it has left (the rest goes back unused).
    fn supply(&self, now_ms: u64) -> u64 {
        let per_second = self.demand.per_second(now_ms);
        let each = self.demand.average.unwrap_or_default();
        self.slices
            .iter()
            .map(|s| {
                let limited = Limited::of(&s.limits).apply(each);
                let token_kinds = [BucketKind::Tpm, BucketKind::InputTpm, BucketKind::OutputTpm];
                let admits = token_kinds
                    .iter()
                    .filter(|&&k| limited.get(k) > 0)
                    .map(|&k| s.left.get(k).max(0) as u64 / limited.get(k))
                    .fold(s.left.requests.max(0) as u64, u64::min);
                let in_time = per_second.saturating_mul(s.expires_ms.saturating_sub(now_ms)) / SECOND_MS;
                admits.min(in_time)
            })
            .sum()
    }

    fn held(&self) -> Delta {
        self.slices.iter().fold(Delta::default(), |sum, s| sum.plus(s.left))
    }

    fn take(&mut self, limits: &Limits, need: Amounts) -> Option<LocalAdmit> {
        let limited = Limited::of(limits);
        let need = limited.apply(need);
        let i = self.slices.iter().position(|s| s.covers(need, limits))?;
        let slice = &mut self.slices[i];
        slice.left = slice.left.plus(Delta::between(Amounts::default(), need));
        let (id, remaining) = (slice.id.clone(), slice.remaining);
        if slice.left.requests <= 0 {
            let drained = self.slices.remove(i).expect("index was just found");
            self.hand_back(drained.hand_back());
        }
        let held = self.held();
        let plus = |base: Option<u64>, extra: i64| base.map(|b| b.saturating_add(extra.max(0) as u64));
        Some(LocalAdmit {
            ticket: Ticket { lease: id, taken: need, limited },
            remaining_requests: plus(remaining.0, held.requests),
            remaining_tokens: plus(remaining.1, held.tokens),
        })
    }

    /// Whether to ask now. A deployment without buckets (`free`: the lease only says the breaker
    /// is closed) holds nothing back from anyone, so it is worth asking from the first request.
    fn wants_more(&self, limits: &Limits, now_ms: u64) -> bool {
        let asking = self.asking.as_ref().is_some_and(|(_, since)| now_ms < since.saturating_add(ASK_TIMEOUT_MS));
        if asking || now_ms < self.quiet_until_ms || self.slices.len() >= MAX_SLICES {
            return false;
        }
        let free = !limits.has_buckets();
        // A hold does not stop asks: at a saturated limit, slices carry what the refill brings.
        if !free && !self.demand.worth_leasing(limits, now_ms) {
            return false;
        }
        let ahead = policy::renew_ahead_ms(self.round_trip_ms);
        self.supply(now_ms) <= self.demand.requests_over(ahead, now_ms)
    }

    /// What to ask for: what a slice's usable life needs at the isolate's rate (see
    /// `lease_policy::sizing_rate`) less what the slices will still admit, in typical requests
    /// with their tokens (so every slice can admit on its own), never a fragment of a small limit.
    /// Without buckets, as much as one lease may carry: it takes nothing.
    fn want(&self, limits: &Limits, now_ms: u64) -> Amounts {
        if !limits.has_buckets() {
            return Amounts { requests: MAX_WANT, ..Amounts::default() };
        }
        let max_slice = policy::max_slice(limits);
        let rate = policy::sizing_rate(self.demand.sizing_rates(max_slice, now_ms));
        let most = max_slice.unwrap_or(MIN_WANT).min(MAX_WANT);
        let over =
            |ttl_ms: u64| (rate * (ttl_ms - EXPIRY_MARGIN_MS)).div_ceil(SECOND_MS).clamp(MIN_WANT, MAX_WANT).min(most);
        // A slice small against every bucket lives longer at the object: then ask for that life.
        let capacities = BucketKind::ALL.into_iter().filter_map(|k| k.capacity(limits).map(|c| (k, c)));
        let long = over(HOT_LEASE_TTL_MS);
        let need =
            if lease_ttl(self.demand.times(long), capacities) == HOT_LEASE_TTL_MS { long } else { over(LEASE_TTL_MS) };
        self.demand.times(need.saturating_sub(self.supply(now_ms)).max(1))
    }

    /// When the ask in flight will be given up, if one is.
    fn ask_expected_by(&self, now_ms: u64) -> Option<u64> {
        let (id, since) = self.asking.as_ref()?;
        // Unhealthy, unreachable or short of room: no grant will cover the waiters, so requests
        // take their usual path (an admit may wait in line for the refill, a hold refuses).
        let held = self.hold.is_some_and(|h| now_ms < h.until_ms);
        let hopeless = held || now_ms < self.quiet_until_ms.max(self.unreachable_until_ms).max(self.short_until_ms);
        if hopeless || self.void.as_deref() == Some(id.as_str()) {
            return None;
        }
        Some(since + ASK_TIMEOUT_MS).filter(|&by| by > now_ms)
    }

    /// An answer to the ask in flight: its round trip is a sample.
    fn answered(&mut self, id: &str, now_ms: u64) {
        self.changes += 1;
        if let Some((_, since)) = self.asking.take_if(|(asked, _)| asked == id) {
            self.round_trip_ms = Some(policy::blend_round_trip(self.round_trip_ms, now_ms.saturating_sub(since)));
        }
    }

    fn take_tally(&mut self, now_ms: u64) -> Tally {
        let mut tally = std::mem::take(&mut self.tally);
        let aged = now_ms.saturating_sub(self.signals_ms);
        for reset in [&mut tally.signals.reset_requests_ms, &mut tally.signals.reset_tokens_ms] {
            *reset = reset.map(|ms| ms.saturating_sub(aged));
        }
        tally
    }
}

/// Every deployment's leases in this isolate.
#[derive(Debug)]
pub struct LeaseLedger {
    prefix: String,
    next_id: u64,
    /// Asks go to the location's relay (see `limiter::relay`) rather than the object.
    relay: bool,
    deployments: HashMap<String, Local>,
}

/// Whether a deployment's limits allow leases at all: in-flight limits and tenant fair shares are
/// counted by the object alone, so those deployments admit every request there.
pub fn leasable(limits: &Limits) -> bool {
    limits.max_concurrent.is_none() && limits.fair_share.is_none()
}

impl LeaseLedger {
    /// `prefix` makes this isolate's lease ids unique (a random draw per isolate).
    pub fn new(prefix: &str) -> Self {
        LeaseLedger { prefix: prefix.to_string(), next_id: 0, relay: false, deployments: HashMap::new() }
    }

    /// The same ledger asking the location's relay for its leases.
    pub fn with_relay(self) -> Self {
        LeaseLedger { relay: true, ..self }
    }

    fn local(&mut self, deployment: &str) -> &mut Local {
        local_in(&mut self.deployments, deployment)
    }

    /// Admits locally if a slice covers `need`, and says whether to ask for a lease now.
    pub fn admit(&mut self, deployment: &str, limits: &Limits, need: Amounts, now_ms: u64) -> Decision {
        let local = local_in(&mut self.deployments, deployment);
        local.demand.record(need, now_ms);
        let watch_settles = local.arm_flush();
        Decision { watch_settles, ..self.decide(deployment, limits, need, now_ms, true) }
    }

    /// The same request again after waiting for an ask (not counted twice in the rate);
    /// `may_wait` is false once it waited [`MAX_ASK_WAIT_MS`].
    pub fn admit_again(
        &mut self,
        deployment: &str,
        limits: &Limits,
        need: Amounts,
        now_ms: u64,
        may_wait: bool,
    ) -> Decision {
        self.decide(deployment, limits, need, now_ms, may_wait)
    }

    fn decide(&mut self, deployment: &str, limits: &Limits, need: Amounts, now_ms: u64, may_wait: bool) -> Decision {
        let local = local_in(&mut self.deployments, deployment);
        local.retire(|s| s.expires_ms > now_ms && s.limits == *limits);
        if !leasable(limits) {
            return Decision::default();
        }
        let admitted = local.take(limits, need);
        let via_relay = self.relay && policy::via_relay(limits) && now_ms >= local.relay_down_until_ms;
        let ask = local.wants_more(limits, now_ms).then(|| {
            let id = if via_relay {
                format!("{}.{RELAY_MARK}{}", self.prefix, self.next_id)
            } else {
                format!("{}.{}", self.prefix, self.next_id)
            };
            self.next_id += 1;
            local.asking = Some((id.clone(), now_ms));
            local.uses_relay |= via_relay;
            let want = local.want(limits, now_ms);
            local.asked_requests = want.requests;
            LeaseAsk { id, want }
        });
        let waits = admitted.is_none() && ask.is_none() && may_wait;
        let wait_until_ms = if waits { local.ask_expected_by(now_ms) } else { None };
        let via_relay = via_relay && ask.is_some();
        Decision { local: admitted, ask, via_relay, wait_until_ms, watch_settles: false }
    }

    /// Admits locally only, asking nothing (after the object refused: a lease granted meanwhile
    /// may cover the request after all).
    pub fn admit_held(&mut self, deployment: &str, limits: &Limits, need: Amounts, now_ms: u64) -> Option<LocalAdmit> {
        let local = self.local(deployment);
        local.retire(|s| s.expires_ms > now_ms && s.limits == *limits);
        local.take(limits, need)
    }

    /// Installs a grant; returns when the watcher should hand back what is due: at the new
    /// slice's expiry, or at once for the grant of an ask made void meanwhile.
    pub fn granted(
        &mut self,
        deployment: &str,
        id: &str,
        limits: &Limits,
        grant: &LeaseGrant,
        now_ms: u64,
    ) -> Option<u64> {
        let local = self.local(deployment);
        if local.asking.as_ref().is_some_and(|(asked, _)| asked == id) && grant.grant.requests < local.asked_requests {
            local.short_until_ms = now_ms + limiter::leases::LEASE_RETRY_MS;
        }
        local.answered(id, now_ms);
        if grant.grant.requests == 0 {
            return None;
        }
        if local.void.as_deref() == Some(id) {
            local.void = None;
            let unused = Delta::between(grant.grant, Amounts::default());
            local.hand_back(LeaseReturn { id: id.to_string(), unused });
            return Some(now_ms);
        }
        let expires_ms = now_ms + grant.ttl_ms.saturating_sub(EXPIRY_MARGIN_MS);
        local.slices.push_back(Slice {
            id: id.to_string(),
            left: Delta::between(grant.grant, Amounts::default()),
            limits: limits.clone(),
            expires_ms,
            remaining: (grant.remaining_requests, grant.remaining_tokens),
        });
        Some(expires_ms)
    }

    /// The object granted nothing. A health refusal hands every slice back at once (the
    /// deployment must stop admitting locally); returns whether any was.
    pub fn refused(&mut self, deployment: &str, id: &str, code: RejectCode, retry_after_ms: u64, now_ms: u64) -> bool {
        let local = self.local(deployment);
        local.answered(id, now_ms);
        local.quiet_until_ms = now_ms + retry_after_ms.min(MAX_QUIET_MS);
        code.is_health() && local.retire_all()
    }

    /// The ask got no answer (the object was unreachable).
    pub fn ask_lost(&mut self, deployment: &str, id: &str) {
        let local = self.local(deployment);
        if local.asking.as_ref().is_some_and(|(asked, _)| asked == id) {
            local.asking = None;
            local.changes += 1;
        }
    }

    /// Settles a local admission: usage corrects the slice (or, once it is handed back, the
    /// object's buckets through the tally); urgent outcomes hand every slice back and return
    /// the tally to send now.
    pub fn settle_local(
        &mut self,
        deployment: &str,
        ticket: &Ticket,
        outcome: &Outcome,
        usage: Option<TokenUsage>,
        signals: &UpstreamSignals,
        now_ms: u64,
    ) -> SettleAction {
        let local = self.local(deployment);
        if let Some(used) = usage {
            let actual = Amounts {
                requests: ticket.taken.requests,
                ..ticket.limited.apply(Amounts::request(used.input, used.output))
            };
            let refund = Delta::between(ticket.taken, actual);
            match local.slices.iter_mut().find(|s| s.id == ticket.lease) {
                Some(slice) => {
                    slice.left = slice.left.plus(refund);
                    local.changes += 1;
                }
                None => local.tally.adjust = local.tally.adjust.plus(refund),
            }
        }
        if *outcome == Outcome::Success {
            local.tally.successes += 1;
        }
        if urgent(outcome, signals, local.held()) {
            local.retire_all();
            local.quiet_until_ms = now_ms + signals.retry_after_ms.unwrap_or(0).min(MAX_QUIET_MS);
            return SettleAction::Now(Box::new(local.take_tally(now_ms)));
        }
        if !signals.is_empty() {
            local.tally.signals = *signals;
            local.signals_ms = now_ms;
        }
        SettleAction::Done
    }

    /// Undoes a local admission whose request went no further (a later layer refused it): the
    /// request and its tokens go back into its slice, to be admitted against again. If the slice
    /// was already handed back they go with its return (if that is still to be sent) or as
    /// `released` in the tally, and the tally is to be sent now so the object has them back at once.
    pub fn release_local(&mut self, deployment: &str, ticket: &Ticket, now_ms: u64) -> SettleAction {
        let local = self.local(deployment);
        let back = Delta::between(ticket.taken, Amounts::default());
        if let Some(slice) = local.slices.iter_mut().find(|s| s.id == ticket.lease) {
            slice.left = slice.left.plus(back);
            local.changes += 1;
            return SettleAction::Done;
        }
        let pending = local.tally.returns.iter_mut().chain(local.relay_returns.iter_mut());
        match pending.into_iter().find(|r| r.id == ticket.lease) {
            Some(ret) => {
                ret.unused = ret.unused.plus(back);
                if from_relay(&ticket.lease) {
                    // Goes with the relay's next report (the watcher sends it).
                    return SettleAction::Done;
                }
            }
            None => local.tally.released = local.tally.released.plus(back),
        }
        SettleAction::Now(Box::new(local.take_tally(now_ms)))
    }

    /// Settles an object-admitted request. A plain success (`deferrable`: not the half-open probe,
    /// no in-flight limit) joins the tally, to ride with the next message within
    /// [`SETTLE_DELAY_MS`] ([`ObjectSettle::Later`] says when the first one of a batch is due, for a
    /// watcher to send it then if no message has); anything else goes now, with the tally, and an
    /// urgent outcome hands every slice back first.
    #[allow(clippy::too_many_arguments)]
    pub fn settle_object(
        &mut self,
        deployment: &str,
        id: &str,
        outcome: &Outcome,
        usage: Option<TokenUsage>,
        signals: &UpstreamSignals,
        deferrable: bool,
        now_ms: u64,
    ) -> ObjectSettle {
        let local = self.local(deployment);
        if urgent(outcome, signals, local.held()) {
            local.retire_all();
        } else if deferrable && *outcome == Outcome::Success {
            if local.tally.settles.is_empty() {
                local.settles_since_ms = now_ms;
            }
            local.tally.settles.push(LateSettle { id: id.to_string(), usage });
            if !signals.is_empty() {
                local.tally.signals = *signals;
                local.signals_ms = now_ms;
            }
            let watch = !std::mem::replace(&mut local.flush_armed, true);
            return ObjectSettle::Later { due_ms: watch.then_some(local.settles_since_ms + SETTLE_DELAY_MS) };
        }
        ObjectSettle::Now(local.take_tally(now_ms))
    }

    /// The settle watcher's next step: done (nothing waits; it disarms), wait until then, or send
    /// a report now (what it sends, if lost, comes back and is due [`SETTLE_DELAY_MS`] later).
    pub fn flush_step(&mut self, deployment: &str, now_ms: u64) -> FlushStep {
        let local = self.local(deployment);
        if local.tally.settles.is_empty() {
            local.flush_armed = false;
            return FlushStep::Done;
        }
        let due_ms = local.settles_since_ms.saturating_add(SETTLE_DELAY_MS);
        if now_ms < due_ms {
            return FlushStep::WaitUntil(due_ms);
        }
        local.settles_since_ms = now_ms;
        FlushStep::Send
    }

    /// Arms a settle watcher if settles wait with none (put back after a lost message); says
    /// whether the caller should start one.
    pub fn arm_flush(&mut self, deployment: &str) -> bool {
        self.local(deployment).arm_flush()
    }

    /// The object says the deployment is no longer healthy: stop admitting locally, and ask
    /// for no lease for `quiet_ms` (at most [`MAX_QUIET_MS`]). Returns whether a slice went back.
    pub fn unhealthy(&mut self, deployment: &str, quiet_ms: u64, now_ms: u64) -> bool {
        let local = self.local(deployment);
        local.tell_relay |= local.uses_relay;
        self.relay_unhealthy(deployment, quiet_ms, now_ms)
    }

    /// The relay says the deployment is unhealthy: as [`LeaseLedger::unhealthy`], without telling
    /// the relay back (an echo would restart its quiet time).
    pub fn relay_unhealthy(&mut self, deployment: &str, quiet_ms: u64, now_ms: u64) -> bool {
        let local = self.local(deployment);
        local.quiet_until_ms = now_ms + quiet_ms.min(MAX_QUIET_MS);
        local.retire_all()
    }

    /// Whether this isolate should tell the object of a fault it found on its own (a missing
    /// credential): not while it already knows the deployment is unhealthy. Saying yes starts
    /// that quiet time, so each isolate reports at most once per [`MAX_QUIET_MS`].
    pub fn report_fault(&mut self, deployment: &str, now_ms: u64) -> bool {
        if now_ms < self.local(deployment).quiet_until_ms {
            return false;
        }
        self.unhealthy(deployment, MAX_QUIET_MS, now_ms);
        true
    }

    /// Everything to tell the object, to ride along with the next message.
    pub fn take_tally(&mut self, deployment: &str, now_ms: u64) -> Tally {
        self.local(deployment).take_tally(now_ms)
    }

    /// Everything to tell the relay: the returns of the relay's slices and the rest of the tally
    /// (the relay forwards it to the object), but not the returns of the object's own slices
    /// (they wait for a message to the object: the relay would not know their ids).
    pub fn take_relay_tally(&mut self, deployment: &str, now_ms: u64) -> Tally {
        let local = self.local(deployment);
        let mut tally = local.take_tally(now_ms);
        local.tally.returns = std::mem::replace(&mut tally.returns, std::mem::take(&mut local.relay_returns));
        tally.unhealthy = std::mem::take(&mut local.tell_relay);
        tally
    }

    /// Whether returns of the object's own slices wait for a message to it.
    pub fn object_returns_pending(&self, deployment: &str) -> bool {
        self.deployments.get(deployment).is_some_and(|l| !l.tally.returns.is_empty())
    }

    /// Whether returns (or word of an unhealthy deployment) wait for the relay.
    pub fn relay_pending(&self, deployment: &str) -> bool {
        self.deployments.get(deployment).is_some_and(|l| !l.relay_returns.is_empty() || l.tell_relay)
    }

    /// A call to the relay failed: asks ride with object admits for [`RELAY_BACKOFF_MS`].
    pub fn relay_failed(&mut self, deployment: &str, now_ms: u64) {
        self.local(deployment).relay_down_until_ms = now_ms + RELAY_BACKOFF_MS;
    }

    /// Puts back a tally whose message was lost, to go with the next one.
    pub fn restore_tally(&mut self, deployment: &str, lost: Tally) {
        let local = self.local(deployment);
        for ret in lost.returns {
            local.hand_back(ret);
        }
        local.tell_relay |= lost.unhealthy;
        let pending = &mut local.tally;
        pending.successes += lost.successes;
        pending.adjust = pending.adjust.plus(lost.adjust);
        pending.released = pending.released.plus(lost.released);
        pending.settles.extend(lost.settles);
        if pending.signals.is_empty() {
            pending.signals = lost.signals;
        }
    }

    /// Retires slices whose time is up; says whether a lease waits to be handed back that no
    /// ask will carry soon (then the watcher sends the tally: the isolate went quiet).
    pub fn expire(&mut self, deployment: &str, now_ms: u64) -> bool {
        let local = self.local(deployment);
        local.retire(|s| s.expires_ms > now_ms);
        let leasing = local.slices.front().is_some_and(|s| local.demand.worth_leasing(&s.limits, now_ms));
        let asks_soon = leasing && now_ms >= local.quiet_until_ms;
        let returns = !local.tally.returns.is_empty() || !local.relay_returns.is_empty();
        returns && policy::report_at_expiry(local.slices.len(), asks_soon)
    }

    /// The object refused a request no slice covered for want of room in a bucket: requests
    /// that can wait no longer are refused here for a short while (the bucket is in line-debt,
    /// so a smaller one would wait about as long).
    pub fn room_refused(
        &mut self,
        deployment: &str,
        code: RejectCode,
        retry_after_ms: u64,
        max_wait_ms: u64,
        now_ms: u64,
    ) {
        if !BucketKind::ALL.iter().any(|k| k.reject_code() == code) {
            return;
        }
        let until_ms = now_ms + policy::hold_ms(retry_after_ms);
        let retry_at_ms = now_ms + retry_after_ms;
        self.local(deployment).hold = Some(Hold { code, max_wait_ms, until_ms, retry_at_ms });
    }

    /// Whether a request no slice covers is refused here, without a round trip: the object
    /// refused one moments ago. Returns the code and when to retry.
    pub fn held_off(&self, deployment: &str, max_wait_ms: u64, now_ms: u64) -> Option<(RejectCode, u64)> {
        let hold = self.deployments.get(deployment)?.hold?;
        let held = now_ms < hold.until_ms && max_wait_ms <= hold.max_wait_ms;
        held.then(|| (hold.code, hold.retry_at_ms.saturating_sub(now_ms).max(1)))
    }

    /// A call to the object failed (unreachable or overloaded): back off for a while.
    pub fn unreachable(&mut self, deployment: &str, now_ms: u64) {
        self.local(deployment).unreachable_until_ms = now_ms + policy::UNREACHABLE_BACKOFF_MS;
    }

    /// Whether a request no slice covers should fail open without calling the object.
    pub fn backing_off(&self, deployment: &str, now_ms: u64) -> bool {
        self.deployments.get(deployment).is_some_and(|l| now_ms < l.unreachable_until_ms)
    }

    /// A count that moves whenever a request waiting for an ask may fare differently: an ask
    /// answered or given up, slices handed back, room put back into a slice.
    pub fn changes(&self, deployment: &str) -> u64 {
        self.deployments.get(deployment).map_or(0, |l| l.changes)
    }

    /// What this isolate holds for `deployment` (tests and diagnostics).
    pub fn held(&self, deployment: &str) -> Delta {
        self.deployments.get(deployment).map(Local::held).unwrap_or_default()
    }
}

/// Marks the ids of asks sent to the relay (`<prefix>.r<n>`): their slices go back to it.
const RELAY_MARK: char = 'r';

/// After a failed call to the relay, asks go to the object for this long.
pub const RELAY_BACKOFF_MS: u64 = 10_000;

/// Whether a lease id is one this isolate asked the relay for.
pub fn from_relay(id: &str) -> bool {
    id.rsplit('.').next().is_some_and(|last| last.starts_with(RELAY_MARK))
}

fn local_in<'a>(deployments: &'a mut HashMap<String, Local>, deployment: &str) -> &'a mut Local {
    if !deployments.contains_key(deployment) {
        deployments.insert(deployment.to_string(), Local::default());
    }
    deployments.get_mut(deployment).expect("inserted above")
}

/// Whether the object must hear of this settle now rather than with the next message.
fn urgent(outcome: &Outcome, signals: &UpstreamSignals, held: Delta) -> bool {
    let below = |told: Option<u64>, held: i64| told.is_some_and(|n| signed(n) < held);
    matches!(outcome, Outcome::Failure | Outcome::Fault { .. } | Outcome::RateLimited { .. } | Outcome::QuotaExhausted)
        || signals.retry_after_ms.is_some()
        || below(signals.remaining_requests, held.requests)
        || below(signals.remaining_tokens, held.tokens)
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod simulation;
