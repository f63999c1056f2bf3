//! The attempt planner: given a chain of deployments, which one to try next, how long to wait
//! first, and when to stop and why. Pure: time comes in as `now_ms`, randomness as a seed, and
//! the per-deployment retry budgets through [`RetryLedger`]; the driver (`pipeline::run`) does
//! the I/O and reports back what happened.
//!
//! The rules (each tested below): a chain is walked in order, in rounds. A candidate the
//! capability gate rejects, one without a credential, or (after the first round) one whose retry
//! budget is spent is skipped. A limiter refusal or a request the deployment cannot be built for
//! moves on to the next candidate. An upstream failure moves on when it may fall back, else it
//! is final. After a round the chain is walked again only if the last failure is retryable, the
//! round made an attempt, the vendor's Retry-After is within the policy's ceiling, attempts
//! remain and the deadline has not passed; each retry waits a jittered backoff with Retry-After
//! as its floor, and is not started when the wait would end past the deadline.

use crate::config::policy::RetryPolicy;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::limits::refusal::{refusal_error, Refusal};
use crate::pipeline::gate::Gate;
use crate::pipeline::retry::{self, RetryBudget};
use crate::providers::{ErrorClass, UpstreamError};
use limiter::protocol::RejectCode;
use std::collections::HashMap;

/// One chain entry as the planner sees it: its id and what was decided about it up front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub gate: Gate,
    pub has_credential: bool,
}

/// The planner's answer to "what now?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Try the chain entry at `index` after waiting `wait_ms` (0 in the first round).
    Try { index: usize, wait_ms: u64 },
    /// The entry at `index` is passed over this time.
    Skip { index: usize, reason: Skip },
    /// No more attempts.
    Stop(Stop),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Declared unsupported: these needs.
    Capability(Vec<&'static str>),
    CredentialMissing,
    RetryBudgetExhausted,
}

impl Skip {
    pub fn as_str(&self) -> &'static str {
        match self {
            Skip::Capability(_) => "capability",
            Skip::CredentialMissing => "credential_missing",
            Skip::RetryBudgetExhausted => "retry_budget_exhausted",
        }
    }
}

/// Why the planner stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A deployment answered.
    Served,
    /// The policy's `max_attempts` were made.
    MaxAttempts,
    /// The deadline passed, or a retry's wait would end past it.
    Deadline,
    /// The last failure may not fall back (bad request, content filter, …): it is the answer.
    FinalError,
    /// The round ended on a failure that is not worth repeating (or on none at all).
    NotRetryable,
    /// The round made no attempt (everything skipped or refused): another would not either.
    NoProgress,
    /// The vendor asked for a pause longer than the policy waits: the client learns at once.
    RetryAfterTooLong,
}

/// The per-deployment retry budgets the planner draws on; the isolate's live ones are
/// [`IsolateRetryBudgets`], tests use a map.
pub trait RetryLedger {
    fn record_request(&mut self, deployment: &str, policy: &RetryPolicy, now_ms: u64);
    fn try_retry(&mut self, deployment: &str, policy: &RetryPolicy, now_ms: u64) -> bool;
}

impl RetryLedger for HashMap<String, RetryBudget> {
    fn record_request(&mut self, deployment: &str, policy: &RetryPolicy, now_ms: u64) {
        self.entry(deployment.to_string()).or_default().record_request(policy, now_ms);
    }

    fn try_retry(&mut self, deployment: &str, policy: &RetryPolicy, now_ms: u64) -> bool {
        self.entry(deployment.to_string()).or_default().try_retry(policy, now_ms)
    }
}

/// The isolate's retry budgets (`retry::retry_budget`).
pub struct IsolateRetryBudgets;

impl RetryLedger for IsolateRetryBudgets {
    fn record_request(&mut self, deployment: &str, policy: &RetryPolicy, now_ms: u64) {
        retry::retry_budget::record_request(deployment, policy, now_ms);
    }

    fn try_retry(&mut self, deployment: &str, policy: &RetryPolicy, now_ms: u64) -> bool {
        retry::retry_budget::try_retry(deployment, policy, now_ms)
    }
}

/// The state of one request's walk through its chain.
#[derive(Debug, Clone)]
pub struct Planner {
    chain: Vec<Candidate>,
    policy: RetryPolicy,
    deadline_ms: u64,
    random: u64,
    /// The next chain position to consider.
    next: usize,
    round: u32,
    attempts: u32,
    attempts_before_round: u32,
    last_error: Option<UpstreamError>,
    refusal: Option<Refusal>,
    /// The first request a deployment could not be built for (stands in when nothing was tried).
    unbuildable: Option<ApiError>,
    capability_gap: Vec<&'static str>,
    /// Anything other than a capability skip happened (an attempt, refusal, other skip).
    beyond_gate: bool,
    stopped: Option<Stop>,
}

impl Planner {
    pub fn new(chain: Vec<Candidate>, policy: RetryPolicy, deadline_ms: u64, random: u64) -> Self {
        Planner {
            chain,
            policy,
            deadline_ms,
            random,
            next: 0,
            round: 0,
            attempts: 0,
            attempts_before_round: 0,
            last_error: None,
            refusal: None,
            unbuildable: None,
            capability_gap: Vec::new(),
            beyond_gate: false,
            stopped: None,
        }
    }

    /// Decides the next step at `now_ms`. After a `Try`, report what happened with one of
    /// [`refused`](Self::refused), [`unbuildable`](Self::unbuildable),
    /// [`begin_attempt`](Self::begin_attempt) then [`failed`](Self::failed) or [`served`](Self::served).
    pub fn next(&mut self, now_ms: u64, budgets: &mut dyn RetryLedger) -> Step {
        loop {
            if let Some(stop) = self.stopped {
                return Step::Stop(stop);
            }
            if self.next >= self.chain.len() {
                if let Some(stop) = self.end_round(now_ms) {
                    self.stopped = Some(stop);
                    continue;
                }
            }
            let index = self.next;
            self.next += 1;
            if self.attempts >= self.policy.max_attempts.max(1) {
                self.stopped = Some(Stop::MaxAttempts);
                continue;
            }
            return self.consider(index, now_ms, budgets);
        }
    }

    fn consider(&mut self, index: usize, now_ms: u64, budgets: &mut dyn RetryLedger) -> Step {
        let candidate = &self.chain[index];
        if let Gate::Skip(missing) = &candidate.gate {
            self.capability_gap.extend_from_slice(missing);
            return Step::Skip { index, reason: Skip::Capability(missing.clone()) };
        }
        self.beyond_gate = true;
        if !candidate.has_credential {
            return Step::Skip { index, reason: Skip::CredentialMissing };
        }
        if self.round == 0 {
            budgets.record_request(&candidate.id, &self.policy, now_ms);
            return Step::Try { index, wait_ms: 0 };
        }
        if !budgets.try_retry(&candidate.id, &self.policy, now_ms) {
            return Step::Skip { index, reason: Skip::RetryBudgetExhausted };
        }
        let retry_after = self.last_error.as_ref().and_then(|e| e.retry_after_ms);
        let wait_ms = retry::backoff_ms(&self.policy, self.round - 1, retry_after, self.random.rotate_left(self.round));
        if now_ms + wait_ms >= self.deadline_ms {
            self.stopped = Some(Stop::Deadline);
            return Step::Stop(Stop::Deadline);
        }
        Step::Try { index, wait_ms }
    }

    /// At the end of a round: another one, or why not.
    fn end_round(&mut self, now_ms: u64) -> Option<Stop> {
        self.round += 1;
        let last = self.last_error.as_ref();
        let progressed = self.attempts > self.attempts_before_round;
        let too_long = last.and_then(|e| e.retry_after_ms).is_some_and(|ms| ms > self.policy.max_retry_after_ms);
        let stop = if !last.is_some_and(|e| e.class.retryable()) {
            Some(Stop::NotRetryable)
        } else if !progressed {
            Some(Stop::NoProgress)
        } else if too_long {
            Some(Stop::RetryAfterTooLong)
        } else if self.attempts >= self.policy.max_attempts {
            Some(Stop::MaxAttempts)
        } else if now_ms >= self.deadline_ms {
            Some(Stop::Deadline)
        } else {
            None
        };
        self.next = 0;
        self.attempts_before_round = self.attempts;
        stop
    }

    /// The deployment's limiter refused: remember the refusal that clears soonest, move on.
    pub fn refused(&mut self, index: usize, code: RejectCode, retry_after_ms: u64) {
        Refusal::keep_soonest(&mut self.refusal, &self.chain[index].id, code, retry_after_ms);
    }

    /// The request cannot be expressed for this deployment (a feature its vendor lacks): move on.
    pub fn unbuildable(&mut self, error: ApiError) {
        self.unbuildable.get_or_insert(error);
    }

    /// Admitted at `now_ms`: counts the attempt, unless the deadline already passed (then the
    /// planner stops and the driver releases the admission as a timeout).
    pub fn begin_attempt(&mut self, now_ms: u64) -> bool {
        if now_ms >= self.deadline_ms {
            self.last_error = Some(deadline_error());
            self.stopped = Some(Stop::Deadline);
            return false;
        }
        self.attempts += 1;
        true
    }

    /// The attempt failed upstream.
    pub fn failed(&mut self, err: UpstreamError) {
        if !err.class.may_fall_back() {
            self.stopped = Some(Stop::FinalError);
        }
        self.last_error = Some(err);
    }

    pub fn served(&mut self) {
        self.stopped = Some(Stop::Served);
    }

    /// Attempts made so far (the `x-gateway-attempts` header).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    pub fn last_error(&self) -> Option<&UpstreamError> {
        self.last_error.as_ref()
    }

    pub fn candidate(&self, index: usize) -> &Candidate {
        &self.chain[index]
    }

    /// Capabilities that made every candidate ineligible, when nothing else happened.
    pub fn capability_gap(&self) -> Option<Vec<&'static str>> {
        if self.beyond_gate || self.capability_gap.is_empty() {
            return None;
        }
        let mut gap = self.capability_gap.clone();
        gap.sort_unstable();
        gap.dedup();
        Some(gap)
    }

    /// The client's error when nothing served: a final upstream error wins, then the limiter
    /// refusal that clears soonest, then the last upstream error; with nothing tried, the reason
    /// nothing could be (a request no deployment can be built for, a capability gap, or `none`).
    pub fn final_error(&self, logical_model: &str, none: ApiError) -> ApiError {
        let nothing_tried = match (&self.unbuildable, self.capability_gap()) {
            (Some(e), _) => e.clone(),
            (None, Some(gap)) => ApiError::invalid_request(
                codes::CAPABILITY_NOT_SUPPORTED,
                format!(
                    "No deployment of model '{logical_model}' supports what this request needs: {}.",
                    gap.join(", ")
                ),
            ),
            (None, None) => none,
        };
        match (self.last_error.as_ref(), self.refusal.as_ref()) {
            (Some(err), _) if !err.class.may_fall_back() => err.to_api_error(),
            (_, Some(r)) => refusal_error(r),
            (Some(err), None) => err.to_api_error(),
            (None, None) => nothing_tried,
        }
    }
}

/// The error recorded when the deadline passes between admission and sending.
pub fn deadline_error() -> UpstreamError {
    UpstreamError {
        class: ErrorClass::DeadlineExceeded,
        status: 0,
        message: "the request's deadline passed before a deployment answered".into(),
        retry_after_ms: None,
        vendor_code: Some("deadline_exceeded".into()),
    }
}

#[cfg(test)]
mod tests;
