//! A location's relay: one per limiter object and location. It holds leases (*parents*) from
//! the limiter object and grants the isolates of its location slices of them (*subs*), so a
//! deployment served from hundreds of locations costs its object one call per location, not
//! one per isolate (the edge simulation's cold start of 1,200 isolates needed 1,242 calls in
//! one second without it).
//!
//! Exactness is the object's: a parent is taken from the buckets when granted, a sub is carved
//! out of a parent, so whatever the isolates hold was already counted. A sub lives no longer
//! than its parent. Handed-back subs go back into their parent while it lives; after that their
//! unused requests and tokens go to the object as `released` (never twice: finished subs are
//! remembered). Everything else an isolate's tally carries (successes, token corrections,
//! late settles) is forwarded with the relay's next message to the object, within
//! [`FORWARD_WITHIN_MS`] for settles, successes and vendor signals and [`REFUND_WITHIN_MS`] for
//! refunds and charges.
//!
//! Pure: time comes in as an argument; the `LocationRelay` Durable Object ([`shell`]) runs it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::leases::{grant_size, LEASE_RETRY_MS};
use crate::limits::{Amounts, BucketKind, Delta, Limits};
use crate::protocol::{LeaseDecision, LeaseGrant, LeaseRequest, LeaseReturn, RejectCode, Tally};
use crate::window::Counter;

/// A parent grants subs only while it has this long left: a sub shorter than that is hardly
/// worth an isolate's ask.
pub const MIN_SUB_MS: u64 = 1_000;

/// The relay asks the object for a new parent this long before its parents stop granting,
/// and hands those back with that ask.
pub const RENEW_AHEAD_MS: u64 = 1_000;

/// A parent is sized for twice the isolates' recent asks, and for at least this many asks like
/// the one that needs it: after a deploy every isolate of the location asks within a moment,
/// and each ask to the object then would cost a round trip of its own.
pub const PARENT_HEADROOM: u64 = 2;
pub const PARENT_MIN_ASKS: u64 = 8;

/// A parent stops being used this long before the object's TTL ends (the grant's answer was in
/// flight for part of it).
pub const PARENT_MARGIN_MS: u64 = 250;

/// The most one ask to the object wants, in requests (the object grants at most a tenth of a
/// bucket anyway).
pub const MAX_PARENT_WANT: u64 = 200_000;

/// Late settles, local successes and vendor signals wait at most this long in the relay before
/// they go to the object (a success held longer could leave failures from elsewhere counted as
/// consecutive and open the breaker).
pub const FORWARD_WITHIN_MS: u64 = 1_000;

/// Refunds and charges wait at most this long, for an ask to carry them: relays serve only very
/// large limits or none, where a few seconds' refund is nothing.
pub const REFUND_WITHIN_MS: u64 = 5_000;

/// An ask to the object unanswered this long is given up.
pub const UPSTREAM_TIMEOUT_MS: u64 = 5_000;

/// After a failed call to the object, isolates' asks are refused (they then admit with the
/// object themselves) for this long.
pub const UPSTREAM_BACKOFF_MS: u64 = 1_000;

/// How long isolates are refused after the object says the deployment is unhealthy (as an
/// isolate stays quiet then: `MAX_QUIET_MS` in the lease ledger).
pub const UNHEALTHY_QUIET_MS: u64 = 5_000;

/// Finished sub ids are remembered this long (a second return of one is ignored).
pub const FINISHED_MEMORY_MS: u64 = 60_000;
const FINISHED_MAX: usize = 8_192;

/// A parent's life is the window its demand is measured over.
const DEMAND_WINDOW_MS: u64 = 6_000;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Parent {
    id: String,
    /// The limits it was asked under: it serves asks under the same ones only (isolates may
    /// read two versions of the route table for a few seconds).
    limits: Option<Limits>,
    left: Delta,
    expires_ms: u64,
    remaining: (Option<u64>, Option<u64>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Sub {
    parent: String,
    taken: Amounts,
    expires_ms: u64,
}

/// The relay's ask in flight to the object.
#[derive(Debug, Clone)]
struct Asking {
    id: String,
    since_ms: u64,
    requests: u64,
    limits: Option<Limits>,
}

/// What the relay did, for its status and the simulation's table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayCounts {
    pub asks: u64,
    pub granted: u64,
    pub granted_requests: u64,
    pub refused: u64,
    pub upstream_asks: u64,
    pub upstream_reports: u64,
    pub returned_late: u64,
}

/// What the relay reports on `GET`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayStatus {
    pub parents: u64,
    pub held: Delta,
    pub subs: u64,
    #[serde(flatten)]
    pub counts: RelayCounts,
}

/// The answer to an isolate's ask: now, or after the ask to the object in flight is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubAnswer {
    Now(LeaseDecision),
    /// Call [`Relay::ask_again`] once [`Relay::changes`] moves, or when the wait is up.
    Wait,
}

#[derive(Debug, Clone, Default)]
pub struct Relay {
    prefix: String,
    next_id: u64,
    parents: VecDeque<Parent>,
    subs: BTreeMap<String, Sub>,
    /// Finished sub ids and when they finished, oldest first.
    finished: VecDeque<(String, u64)>,
    up: Tally,
    up_due_ms: Option<u64>,
    asking: Option<Asking>,
    wanted: Counter,
    /// A health refusal from the object: isolates are refused with it until then.
    quiet: Option<(RejectCode, u64)>,
    /// The object was short of room or unreachable: no ask to it before then.
    hold_until_ms: u64,
    hold_code: Option<RejectCode>,
    changes: u64,
    counts: RelayCounts,
}

impl Relay {
    /// `prefix` makes this relay's lease ids unique at the object (a random draw per instance).
    pub fn new(prefix: &str) -> Self {
        Relay { prefix: prefix.to_string(), ..Relay::default() }
    }

    /// An isolate's ask: its tally is taken in, then a sub is carved if a parent has room. The
    /// second value, if any, is an ask for the object to send now (a parent running low or
    /// none covering this ask); [`SubAnswer::Wait`] means this ask waits for its answer.
    pub fn ask(&mut self, req: &LeaseRequest, now_ms: u64) -> (SubAnswer, Option<LeaseRequest>) {
        self.counts.asks += 1;
        self.absorb(&req.tally, now_ms);
        if let Some(grant) = self.carved_before(req, now_ms) {
            return (SubAnswer::Now(grant), None);
        }
        self.wanted.record_n(req.want.requests, DEMAND_WINDOW_MS, now_ms);
        self.serve(req, now_ms)
    }

    /// The same ask after waiting (once [`Relay::changes`] moved): as [`Relay::ask`], without
    /// taking in its tally or counting its demand again.
    pub fn ask_again(&mut self, req: &LeaseRequest, now_ms: u64) -> (SubAnswer, Option<LeaseRequest>) {
        if let Some(grant) = self.carved_before(req, now_ms) {
            return (SubAnswer::Now(grant), None);
        }
        self.serve(req, now_ms)
    }

    /// The last word on an ask whose wait is over: whatever part of it a parent has, or a
    /// refusal (the isolate then admits with the object itself).
    pub fn give_up(&mut self, req: &LeaseRequest, now_ms: u64) -> LeaseDecision {
        if let Some(grant) = self.carved_before(req, now_ms) {
            return grant;
        }
        self.retire_expired(now_ms);
        if let Some(refusal) = self.quiet_refusal(now_ms) {
            return refusal;
        }
        self.carve(req, false, now_ms).unwrap_or_else(|| self.refusal(now_ms))
    }

    /// The sub already carved for this ask (a retried ask after a lost answer, or one that
    /// waited), granted again with the time it has left.
    fn carved_before(&self, req: &LeaseRequest, now_ms: u64) -> Option<LeaseDecision> {
        let sub = self.subs.get(&req.id)?;
        Some(self.grant(sub.taken, sub.expires_ms, now_ms))
    }

    /// A sub of the whole want if a parent has it; else an ask to the object and a wait for
    /// it; only when the object cannot be asked, what a parent has (a short grant) or a refusal.
    fn serve(&mut self, req: &LeaseRequest, now_ms: u64) -> (SubAnswer, Option<LeaseRequest>) {
        self.retire_expired(now_ms);
        if let Some(refusal) = self.quiet_refusal(now_ms) {
            return (SubAnswer::Now(refusal), None);
        }
        if let Some(decision) = self.carve(req, true, now_ms) {
            return (SubAnswer::Now(decision), self.upstream_ask(req, false, now_ms));
        }
        let upstream = self.upstream_ask(req, true, now_ms);
        if self.asking.is_some() {
            return (SubAnswer::Wait, upstream);
        }
        let decision = self.carve(req, false, now_ms).unwrap_or_else(|| self.refusal(now_ms));
        (SubAnswer::Now(decision), upstream)
    }

    /// The object's health refusal, repeated while it lasts.
    fn quiet_refusal(&mut self, now_ms: u64) -> Option<LeaseDecision> {
        let (code, until_ms) = self.quiet.filter(|&(_, until)| now_ms < until)?;
        self.counts.refused += 1;
        Some(LeaseDecision::Refused { code, retry_after_ms: until_ms - now_ms })
    }

    /// An isolate's report: its tally is taken in, nothing is asked.
    pub fn report(&mut self, tally: &Tally, now_ms: u64) {
        self.absorb(tally, now_ms);
        self.retire_expired(now_ms);
    }

    /// The object granted the relay's ask.
    pub fn upstream_granted(&mut self, id: &str, grant: &LeaseGrant, now_ms: u64) {
        let Some(asked) = self.answered(id) else {
            // The answer to an ask given up: nothing waits for it, so it goes straight back.
            let unused = Delta::between(grant.grant, Amounts::default());
            self.up.returns.push(LeaseReturn { id: id.to_string(), unused });
            self.due_within(REFUND_WITHIN_MS, now_ms);
            return;
        };
        if grant.grant.requests < asked.requests {
            // Cut short for want of room: no ask again for a moment (isolates get what is left).
            self.hold(RejectCode::Rpm, LEASE_RETRY_MS, now_ms);
        }
        if grant.grant.requests == 0 {
            return;
        }
        self.parents.push_back(Parent {
            id: id.to_string(),
            limits: asked.limits,
            left: Delta::between(grant.grant, Amounts::default()),
            expires_ms: now_ms + grant.ttl_ms.saturating_sub(PARENT_MARGIN_MS),
            remaining: (grant.remaining_requests, grant.remaining_tokens),
        });
    }

    /// The object refused: for want of room, isolates are refused until its retry time (they
    /// admit with the object meanwhile); for health, every parent goes back at once.
    pub fn upstream_refused(&mut self, id: &str, code: RejectCode, retry_after_ms: u64, now_ms: u64) {
        self.answered(id);
        if code.is_health() {
            self.unhealthy(code, retry_after_ms, now_ms);
        } else {
            self.hold(code, retry_after_ms, now_ms);
        }
    }

    /// The object says the deployment is unhealthy (a refusal, or a report's answer).
    pub fn unhealthy(&mut self, code: RejectCode, retry_after_ms: u64, now_ms: u64) {
        // A quiet time already running is never shortened.
        let until_ms = now_ms + retry_after_ms.clamp(1, UPSTREAM_TIMEOUT_MS);
        let running = self.quiet.filter(|&(_, until)| now_ms < until);
        self.quiet = Some(running.map_or((code, until_ms), |(c, until)| (c, until.max(until_ms))));
        self.retire_all(now_ms);
        // What the parents held is of use to nobody else now: back at once.
        self.due_within(0, now_ms);
    }

    /// A message to the object failed: what it carried goes with the next one.
    pub fn upstream_lost(&mut self, ask: Option<&str>, tally: Tally, now_ms: u64) {
        if let Some(id) = ask {
            self.answered(id);
        }
        merge(&mut self.up, tally);
        self.up_due_ms = Some(now_ms + UPSTREAM_BACKOFF_MS);
        self.hold(RejectCode::Rpm, UPSTREAM_BACKOFF_MS, now_ms);
    }

    /// What to tell the object now, if anything is due (the alarm's step).
    pub fn due_report(&mut self, now_ms: u64) -> Option<Tally> {
        self.retire_expired(now_ms);
        let due = self.up_due_ms.is_some_and(|due| due <= now_ms);
        if !due || self.up.is_empty() {
            return None;
        }
        self.counts.upstream_reports += 1;
        Some(self.take_up())
    }

    /// When the relay next has something to do: a parent's end, or outcomes due at the object.
    pub fn next_due_ms(&self) -> Option<u64> {
        let parent = self.parents.iter().map(|p| p.expires_ms).min();
        let up = self.up_due_ms.filter(|_| !self.up.is_empty());
        [parent, up].into_iter().flatten().min()
    }

    /// Whether the object said the deployment is unhealthy lately (isolates are refused).
    pub fn is_quiet(&self, now_ms: u64) -> bool {
        self.quiet.is_some_and(|(_, until)| now_ms < until)
    }

    /// A count that moves whenever a waiting ask may fare differently.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    pub fn status(&self) -> RelayStatus {
        RelayStatus {
            parents: self.parents.len() as u64,
            held: self.parents.iter().fold(Delta::default(), |sum, p| sum.plus(p.left)),
            subs: self.subs.len() as u64,
            counts: self.counts,
        }
    }

    /// What the relay's parents still hold (tests and the simulation's accounting).
    pub fn held(&self) -> Delta {
        self.status().held
    }

    /// Carves the ask's want out of the oldest parent under its limits with room for it
    /// (`whole`) or, scaled to fit and keeping its mix, for at least one request; and with
    /// [`MIN_SUB_MS`] to live.
    fn carve(&mut self, req: &LeaseRequest, whole: bool, now_ms: u64) -> Option<LeaseDecision> {
        let (id, want) = (&req.id, req.want);
        let limited = |k: &BucketKind| req.limits.as_ref().is_some_and(|l| k.capacity(l).is_some());
        let kinds: Vec<BucketKind> = BucketKind::ALL.into_iter().filter(limited).collect();
        let usable = |p: &Parent| p.limits == req.limits && p.expires_ms >= now_ms + MIN_SUB_MS && p.left.requests >= 1;
        let (i, size) = self.parents.iter().enumerate().filter(|(_, p)| usable(p)).find_map(|(i, p)| {
            let mut rooms = vec![(BucketKind::Rpm, p.left.requests.max(0) as u64)];
            rooms.extend(kinds.iter().map(|&k| (k, p.left.get(k).max(0) as u64)));
            let want = Amounts { requests: want.requests.max(1), ..want };
            let (size, binding) = grant_size(want, &rooms);
            (size.requests >= 1 && (binding.is_none() || !whole)).then_some((i, size))
        })?;
        let parent = &mut self.parents[i];
        parent.left = parent.left.plus(Delta::between(Amounts::default(), size));
        let (parent, expires_ms) = (parent.id.clone(), parent.expires_ms);
        self.subs.insert(id.to_string(), Sub { parent, taken: size, expires_ms });
        self.counts.granted += 1;
        self.counts.granted_requests += size.requests;
        Some(self.grant(size, expires_ms, now_ms))
    }

    fn grant(&self, size: Amounts, expires_ms: u64, now_ms: u64) -> LeaseDecision {
        let remaining = self.parents.back().map(|p| p.remaining).unwrap_or_default();
        LeaseDecision::Granted(LeaseGrant {
            grant: size,
            ttl_ms: expires_ms.saturating_sub(now_ms),
            remaining_requests: remaining.0,
            remaining_tokens: remaining.1,
        })
    }

    fn refusal(&mut self, now_ms: u64) -> LeaseDecision {
        self.counts.refused += 1;
        let retry_after_ms = self.hold_until_ms.saturating_sub(now_ms).max(LEASE_RETRY_MS);
        let held = self.hold_code.filter(|_| now_ms < self.hold_until_ms);
        LeaseDecision::Refused { code: held.unwrap_or(RejectCode::Rpm), retry_after_ms }
    }

    /// An ask for the object when none is in flight and the parents run low: they would serve
    /// less than the last [`DEMAND_WINDOW_MS`]' asks, or could not serve this one.
    fn upstream_ask(&mut self, req: &LeaseRequest, short: bool, now_ms: u64) -> Option<LeaseRequest> {
        let asking = self.asking.as_ref().is_some_and(|a| now_ms < a.since_ms + UPSTREAM_TIMEOUT_MS);
        if asking || now_ms < self.hold_until_ms {
            return None;
        }
        let want = req.want;
        let recent = self.wanted.over_last(DEMAND_WINDOW_MS, now_ms);
        let lasting = now_ms + MIN_SUB_MS + RENEW_AHEAD_MS;
        let supply: i64 = self
            .parents
            .iter()
            .filter(|p| p.limits == req.limits && p.expires_ms >= lasting)
            .map(|p| p.left.requests)
            .sum();
        if !short && supply >= i64::try_from(recent / 2).unwrap_or(i64::MAX) {
            return None;
        }
        // Parents about to stop granting go back with this ask rather than in a call of their own.
        self.retire(|p| p.expires_ms < lasting, now_ms);
        // Headroom over the recent asks, with this ask's mix.
        let requests = recent
            .saturating_mul(PARENT_HEADROOM)
            .max(want.requests.saturating_mul(PARENT_MIN_ASKS))
            .clamp(1, MAX_PARENT_WANT);
        let per = want.requests.max(1);
        let scale = |n: u64| u64::try_from(u128::from(n) * u128::from(requests) / u128::from(per)).unwrap_or(u64::MAX);
        let want =
            Amounts { requests, tokens: scale(want.tokens), input: scale(want.input), output: scale(want.output) };
        let id = format!("{}.{}", self.prefix, self.next_id);
        self.next_id += 1;
        let limits = req.limits.clone();
        self.asking = Some(Asking { id: id.clone(), since_ms: now_ms, requests, limits: limits.clone() });
        self.counts.upstream_asks += 1;
        Some(LeaseRequest { id, want, limits, tally: self.take_up() })
    }

    fn take_up(&mut self) -> Tally {
        self.up_due_ms = None;
        std::mem::take(&mut self.up)
    }

    /// The ask in flight, if `id` is it (an answer to an ask given up is of no use).
    fn answered(&mut self, id: &str) -> Option<Asking> {
        self.changes += 1;
        self.asking.take_if(|a| a.id == id)
    }

    fn hold(&mut self, code: RejectCode, retry_after_ms: u64, now_ms: u64) {
        self.hold_until_ms = now_ms + retry_after_ms.clamp(1, UPSTREAM_TIMEOUT_MS);
        self.hold_code = Some(code);
    }

    /// Takes in an isolate's tally: returned subs go back into their parents (or to the object);
    /// the rest joins what goes to the object next.
    fn absorb(&mut self, tally: &Tally, now_ms: u64) {
        let Tally { successes, adjust, signals, returns, released, settles, unhealthy } = tally;
        for ret in returns {
            self.take_back(ret, now_ms);
        }
        if *unhealthy {
            self.unhealthy(RejectCode::BreakerOpen, UNHEALTHY_QUIET_MS, now_ms);
        }
        let rest = Tally {
            successes: *successes,
            adjust: *adjust,
            signals: *signals,
            released: *released,
            settles: settles.clone(),
            returns: Vec::new(),
            unhealthy: false,
        };
        if !rest.is_empty() {
            let urgent = !rest.settles.is_empty() || !rest.signals.is_empty() || rest.successes > 0;
            merge(&mut self.up, rest);
            self.due_within(if urgent { FORWARD_WITHIN_MS } else { REFUND_WITHIN_MS }, now_ms);
        }
    }

    fn take_back(&mut self, ret: &LeaseReturn, now_ms: u64) {
        let Some(sub) = self.subs.remove(&ret.id) else {
            // Finished already (a resent return), or unknown (the relay restarted): what was used
            // beyond the sub is charged, nothing is refunded.
            if !self.finished.iter().any(|(id, _)| *id == ret.id) {
                self.up.adjust = self.up.adjust.plus(negative(ret.unused));
                self.due_within(REFUND_WITHIN_MS, now_ms);
            }
            return;
        };
        self.finished.push_back((ret.id.clone(), now_ms));
        self.prune_finished(now_ms);
        self.changes += 1;
        let unused = capped(ret.unused, sub.taken);
        match self.parents.iter_mut().find(|p| p.id == sub.parent) {
            Some(parent) => parent.left = parent.left.plus(unused),
            None => {
                self.counts.returned_late += 1;
                self.up.released = self.up.released.plus(positive(unused));
                self.up.adjust = self.up.adjust.plus(negative(unused));
                self.due_within(REFUND_WITHIN_MS, now_ms);
            }
        }
    }

    fn prune_finished(&mut self, now_ms: u64) {
        while self.finished.front().is_some_and(|(_, at)| at + FINISHED_MEMORY_MS <= now_ms)
            || self.finished.len() > FINISHED_MAX
        {
            self.finished.pop_front();
        }
        self.subs.retain(|_, s| s.expires_ms + FINISHED_MEMORY_MS > now_ms);
    }

    /// Parents at their end go back to the object with what they still hold.
    fn retire_expired(&mut self, now_ms: u64) {
        self.retire(|p| p.expires_ms <= now_ms, now_ms);
    }

    fn retire_all(&mut self, now_ms: u64) {
        self.retire(|_| true, now_ms);
    }

    fn retire(&mut self, done: impl Fn(&Parent) -> bool, now_ms: u64) {
        let before = self.parents.len();
        let (gone, kept): (VecDeque<Parent>, VecDeque<Parent>) = self.parents.drain(..).partition(|p| done(p));
        self.parents = kept;
        if self.parents.len() == before {
            return;
        }
        self.changes += 1;
        self.up.returns.extend(gone.into_iter().map(|p| LeaseReturn { id: p.id, unused: p.left }));
        self.due_within(REFUND_WITHIN_MS, now_ms);
    }

    fn due_within(&mut self, ms: u64, now_ms: u64) {
        let due = now_ms + ms;
        self.up_due_ms = Some(self.up_due_ms.map_or(due, |d| d.min(due)));
    }
}

/// Adds a tally to another (what the relay owes the object).
fn merge(into: &mut Tally, more: Tally) {
    into.successes += more.successes;
    into.adjust = into.adjust.plus(more.adjust);
    into.released = into.released.plus(more.released);
    into.returns.extend(more.returns);
    into.settles.extend(more.settles);
    if !more.signals.is_empty() {
        into.signals = more.signals;
    }
}

/// `unused` with each refund no larger than what the sub took.
fn capped(unused: Delta, taken: Amounts) -> Delta {
    let cap = |d: i64, t: u64| d.min(i64::try_from(t).unwrap_or(i64::MAX));
    Delta {
        requests: cap(unused.requests, taken.requests),
        tokens: cap(unused.tokens, taken.tokens),
        input: cap(unused.input, taken.input),
        output: cap(unused.output, taken.output),
    }
}

fn positive(d: Delta) -> Delta {
    Delta { requests: d.requests.max(0), tokens: d.tokens.max(0), input: d.input.max(0), output: d.output.max(0) }
}

/// The charges in `d` (tokens only: a request once admitted stays counted).
fn negative(d: Delta) -> Delta {
    Delta { requests: 0, tokens: d.tokens.min(0), input: d.input.min(0), output: d.output.min(0) }
}

pub mod shell;

#[cfg(test)]
mod tests;
