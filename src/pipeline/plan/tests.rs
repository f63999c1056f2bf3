//! The planner against scripted outcomes: every rule of the attempt loop, deterministic.

use super::*;
use crate::providers::ErrorClass::{self, *};

const T0: u64 = 1_000_000;
const DEADLINE: u64 = T0 + 60_000;

/// What happens to one `Try`, as the driver would report it.
#[derive(Clone)]
enum Then {
    Serve,
    Fail(ErrorClass, Option<u64>),
    Refuse(RejectCode, u64),
    Unbuildable(&'static str),
    /// Admitted only once the deadline has passed.
    Late,
}

fn candidate(id: &str) -> Candidate {
    Candidate { id: id.to_string(), gate: Gate::Pass, has_credential: true }
}

fn planner(ids: &[&str], policy: RetryPolicy) -> Planner {
    Planner::new(ids.iter().map(|id| candidate(id)).collect(), policy, DEADLINE, 42)
}

fn failure(class: ErrorClass, retry_after_ms: Option<u64>) -> UpstreamError {
    let err = UpstreamError::new(class, 500, "x");
    match retry_after_ms {
        Some(ms) => err.with_retry_after_ms(ms),
        None => err,
    }
}

/// Runs the planner against a script of outcomes (one per `Try`, in order) with the clock
/// advancing by each wait plus 10 ms per attempt. Returns the steps and the planner.
fn run(mut p: Planner, script: &[Then]) -> (Vec<Step>, Planner) {
    let mut budgets: HashMap<String, RetryBudget> = HashMap::new();
    let steps = run_with(&mut p, script, &mut budgets, T0);
    (steps, p)
}

fn run_with(p: &mut Planner, script: &[Then], budgets: &mut dyn RetryLedger, start: u64) -> Vec<Step> {
    let mut trace = Vec::new();
    let mut now = start;
    let mut script = script.iter();
    loop {
        let step = p.next(now, budgets);
        trace.push(step.clone());
        let Step::Try { index, wait_ms } = step else {
            if matches!(step, Step::Stop(_)) {
                return trace;
            }
            continue;
        };
        now += wait_ms;
        match script.next().expect("script ran out").clone() {
            Then::Serve => {
                assert!(p.begin_attempt(now));
                p.served();
            }
            Then::Fail(class, retry_after) => {
                assert!(p.begin_attempt(now));
                p.failed(failure(class, retry_after));
            }
            Then::Refuse(code, ms) => p.refused(index, code, ms),
            Then::Unbuildable(code) => p.unbuildable(ApiError::invalid_request(code, "cannot be built")),
            Then::Late => {
                now = DEADLINE;
                assert!(!p.begin_attempt(now));
            }
        }
        now += 10;
    }
}

fn tries(steps: &[Step]) -> Vec<(usize, u64)> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Try { index, wait_ms } => Some((*index, *wait_ms)),
            _ => None,
        })
        .collect()
}

fn stop(steps: &[Step]) -> Stop {
    match steps.last() {
        Some(Step::Stop(s)) => *s,
        other => panic!("no stop: {other:?}"),
    }
}

fn none() -> ApiError {
    ApiError::unavailable("no_deployment_available", "none")
}

#[test]
fn the_first_candidate_that_answers_serves() {
    let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &[Then::Serve]);
    assert_eq!(tries(&steps), vec![(0, 0)]);
    assert_eq!((stop(&steps), p.attempts()), (Stop::Served, 1));
}

#[test]
fn every_failure_that_may_fall_back_moves_to_the_next_deployment_at_once() {
    for class in [RateLimited, QuotaExhausted, Overloaded, ServerError, Timeout, Connection, EmptyResponse, NotFound] {
        let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &[Then::Fail(class, None), Then::Serve]);
        assert_eq!(tries(&steps), vec![(0, 0), (1, 0)], "{class:?}: same round, no wait");
        assert_eq!((stop(&steps), p.attempts()), (Stop::Served, 2), "{class:?}");
    }
}

#[test]
fn a_client_side_failure_is_final_and_never_falls_back() {
    for class in [BadRequest, ContextLengthExceeded, ContentFilter] {
        let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &[Then::Fail(class, None)]);
        assert_eq!(tries(&steps), vec![(0, 0)], "{class:?}");
        assert_eq!(stop(&steps), Stop::FinalError, "{class:?}");
        assert_eq!(p.final_error("m", none()).code, failure(class, None).to_api_error().code);
    }
}

#[test]
fn a_vendor_refusing_the_deployments_key_falls_back_but_is_never_retried_there() {
    for class in [Auth, NotFound] {
        let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &[Then::Fail(class, None), Then::Serve]);
        assert_eq!(tries(&steps), vec![(0, 0), (1, 0)], "{class:?}: next deployment at once");
        assert_eq!(stop(&steps), Stop::Served, "{class:?}");
        let (steps, p2) =
            run(planner(&["a", "b"], RetryPolicy::default()), &[Then::Fail(class, None), Then::Fail(class, None)]);
        assert_eq!(tries(&steps).len(), 2, "{class:?}: no second round on a credential fault");
        assert_eq!(p2.final_error("m", none()).code, failure(class, None).to_api_error().code);
        assert_eq!(p.attempts(), 2);
    }
}

#[test]
fn retryable_failures_walk_the_chain_again_in_rounds_until_max_attempts() {
    let script = [Then::Fail(ServerError, None), Then::Fail(Overloaded, None), Then::Fail(Timeout, None)];
    let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &script);
    let t = tries(&steps);
    assert_eq!(t.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 1, 0], "round 2 starts at the top");
    assert!(t[2].1 <= 100, "first retry waits at most base_backoff_ms: {t:?}");
    assert_eq!((stop(&steps), p.attempts()), (Stop::MaxAttempts, 3));
    assert_eq!(p.final_error("m", none()).code, "upstream_timeout", "the last failure is the answer");
}

#[test]
fn later_rounds_back_off_longer_within_the_ceiling() {
    let policy = RetryPolicy { max_attempts: 6, ..RetryPolicy::default() };
    let mut budgets: HashMap<String, RetryBudget> = HashMap::new();
    for _ in 0..100 {
        budgets.record_request("a", &policy, T0);
    }
    let script = vec![Then::Fail(ServerError, None); 6];
    let steps = run_with(&mut planner(&["a"], policy), &script, &mut budgets, T0);
    let waits: Vec<u64> = tries(&steps).iter().map(|(_, w)| *w).collect();
    assert_eq!(waits.len(), 6);
    for (round, wait) in waits.iter().enumerate().skip(1) {
        let ceiling = (100u64 << (round - 1)).min(2_000);
        assert!(*wait <= ceiling, "round {round}: {wait} > {ceiling}");
    }
}

#[test]
fn only_one_attempt_is_made_when_max_attempts_is_zero_or_one() {
    for max_attempts in [0, 1] {
        let policy = RetryPolicy { max_attempts, ..RetryPolicy::default() };
        let (steps, p) = run(planner(&["a", "b"], policy), &[Then::Fail(ServerError, None)]);
        assert_eq!((tries(&steps).len(), stop(&steps), p.attempts()), (1, Stop::MaxAttempts, 1));
    }
}

#[test]
fn max_attempts_counts_fallbacks_too() {
    let policy = RetryPolicy { max_attempts: 2, ..RetryPolicy::default() };
    let script = [Then::Fail(ServerError, None), Then::Fail(ServerError, None)];
    let (steps, p) = run(planner(&["a", "b", "c"], policy), &script);
    assert_eq!(tries(&steps), vec![(0, 0), (1, 0)]);
    assert_eq!((stop(&steps), p.attempts()), (Stop::MaxAttempts, 2));
}

#[test]
fn retry_after_is_a_floor_on_the_wait() {
    let script = [Then::Fail(RateLimited, Some(1_500)), Then::Serve];
    let (steps, _) = run(planner(&["a"], RetryPolicy::default()), &script);
    assert_eq!(tries(&steps)[1], (0, tries(&steps)[1].1));
    assert!(tries(&steps)[1].1 >= 1_500, "{steps:?}");
}

#[test]
fn a_retry_after_above_the_ceiling_is_not_waited_for() {
    let script = [Then::Fail(RateLimited, Some(5_001))];
    let (steps, p) = run(planner(&["a"], RetryPolicy::default()), &script);
    assert_eq!(stop(&steps), Stop::RetryAfterTooLong);
    assert_eq!(p.final_error("m", none()).code, "upstream_rate_limited");
    let at_ceiling = [Then::Fail(RateLimited, Some(5_000)), Then::Serve];
    let (steps, _) = run(planner(&["a"], RetryPolicy::default()), &at_ceiling);
    assert_eq!((stop(&steps), tries(&steps)[1].1), (Stop::Served, 5_000));
}

#[test]
fn a_failure_that_may_fall_back_but_not_retry_ends_with_the_round() {
    for class in [QuotaExhausted, NotFound] {
        let (steps, p) = run(planner(&["a"], RetryPolicy::default()), &[Then::Fail(class, None)]);
        assert_eq!((stop(&steps), p.attempts()), (Stop::NotRetryable, 1), "{class:?}");
    }
}

#[test]
fn retries_draw_on_the_deployments_retry_budget() {
    let policy = RetryPolicy::default();
    let mut budgets: HashMap<String, RetryBudget> = HashMap::new();
    // The floor of one retry per window is spent already on "a"; "b" still has it.
    assert!(budgets.try_retry("a", &policy, T0));
    let mut p = planner(&["a", "b"], policy);
    let script = [Then::Fail(ServerError, None), Then::Fail(ServerError, None), Then::Serve];
    let steps = run_with(&mut p, &script, &mut budgets, T0);
    assert!(steps.contains(&Step::Skip { index: 0, reason: Skip::RetryBudgetExhausted }), "{steps:?}");
    assert_eq!(tries(&steps).iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 1, 1]);
    assert_eq!(stop(&steps), Stop::Served);
    // First-round requests are recorded, which is what a budget share is taken of.
    let mut fresh: HashMap<String, RetryBudget> = HashMap::new();
    for _ in 0..10 {
        fresh.record_request("a", &policy, T0);
    }
    assert!(fresh.try_retry("a", &policy, T0) && fresh.try_retry("a", &policy, T0));
    assert!(!fresh.try_retry("a", &policy, T0), "20% of 10 requests is 2 retries");
}

#[test]
fn a_round_with_every_retry_refused_by_the_budget_stops_for_lack_of_progress() {
    let policy = RetryPolicy::default();
    let mut budgets: HashMap<String, RetryBudget> = HashMap::new();
    assert!(budgets.try_retry("a", &policy, T0));
    let mut p = planner(&["a"], policy);
    let steps = run_with(&mut p, &[Then::Fail(ServerError, None)], &mut budgets, T0);
    assert_eq!(stop(&steps), Stop::NoProgress);
    assert_eq!(p.final_error("m", none()).code, "upstream_error");
}

#[test]
fn no_retry_starts_when_its_wait_would_end_past_the_deadline() {
    let mut p = Planner::new(vec![candidate("a")], RetryPolicy::default(), T0 + 1_000, 7);
    let mut budgets: HashMap<String, RetryBudget> = HashMap::new();
    assert_eq!(p.next(T0, &mut budgets), Step::Try { index: 0, wait_ms: 0 });
    assert!(p.begin_attempt(T0));
    p.failed(failure(RateLimited, Some(1_500)));
    assert_eq!(p.next(T0 + 10, &mut budgets), Step::Stop(Stop::Deadline));
    assert_eq!(p.next(T0 + 10, &mut budgets), Step::Stop(Stop::Deadline), "stopping is final");
}

#[test]
fn no_round_starts_once_the_deadline_passed() {
    let mut p = Planner::new(vec![candidate("a")], RetryPolicy::default(), T0 + 1_000, 7);
    let mut budgets: HashMap<String, RetryBudget> = HashMap::new();
    assert!(matches!(p.next(T0, &mut budgets), Step::Try { .. }));
    assert!(p.begin_attempt(T0));
    p.failed(failure(ServerError, None));
    assert_eq!(p.next(T0 + 1_000, &mut budgets), Step::Stop(Stop::Deadline));
}

#[test]
fn an_admission_after_the_deadline_is_not_sent_and_answers_as_a_timeout() {
    let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &[Then::Late]);
    assert_eq!((stop(&steps), p.attempts()), (Stop::Deadline, 0));
    let e = p.final_error("m", none());
    assert_eq!((e.status, e.code.as_str()), (504, "upstream_timeout"));
    assert_eq!(p.last_error().and_then(|e| e.vendor_code.as_deref()), Some("deadline_exceeded"));
}

#[test]
fn the_capability_gate_skips_declared_unsupported_and_passes_unknown() {
    let chain = vec![
        Candidate { gate: Gate::Skip(vec!["tools"]), ..candidate("a") },
        Candidate { gate: Gate::PassUnknown(vec!["vision"]), ..candidate("b") },
    ];
    let (steps, p) = run(Planner::new(chain, RetryPolicy::default(), DEADLINE, 1), &[Then::Serve]);
    assert_eq!(steps[0], Step::Skip { index: 0, reason: Skip::Capability(vec!["tools"]) });
    assert_eq!(tries(&steps), vec![(1, 0)]);
    assert_eq!(p.capability_gap(), None, "something else was tried");
}

#[test]
fn when_every_deployment_lacks_a_capability_the_client_is_told_which() {
    let chain = vec![
        Candidate { gate: Gate::Skip(vec!["vision", "tools"]), ..candidate("a") },
        Candidate { gate: Gate::Skip(vec!["tools"]), ..candidate("b") },
    ];
    let (steps, p) = run(Planner::new(chain, RetryPolicy::default(), DEADLINE, 1), &[]);
    assert_eq!((tries(&steps).len(), stop(&steps)), (0, Stop::NotRetryable));
    assert_eq!(p.capability_gap(), Some(vec!["tools", "vision"]));
    let e = p.final_error("m", none());
    assert_eq!((e.status, e.code.as_str()), (400, "capability_not_supported"));
    assert!(e.message.contains("model 'm'") && e.message.contains("tools, vision"), "{}", e.message);
}

#[test]
fn a_deployment_without_its_credential_is_skipped() {
    let chain = vec![Candidate { has_credential: false, ..candidate("a") }, candidate("b")];
    let (steps, _) = run(Planner::new(chain.clone(), RetryPolicy::default(), DEADLINE, 1), &[Then::Serve]);
    assert_eq!(steps[0], Step::Skip { index: 0, reason: Skip::CredentialMissing });
    let none_usable = vec![chain[0].clone()];
    let (_, p) = run(Planner::new(none_usable, RetryPolicy::default(), DEADLINE, 1), &[]);
    assert_eq!(p.final_error("m", none()).code, "no_deployment_available");
    assert_eq!(p.capability_gap(), None);
}

#[test]
fn refusals_merge_into_the_one_that_clears_soonest() {
    let script =
        [Then::Refuse(RejectCode::Rpm, 900), Then::Refuse(RejectCode::Tpm, 300), Then::Refuse(RejectCode::Rpm, 600)];
    let (steps, p) = run(planner(&["a", "b", "c"], RetryPolicy::default()), &script);
    assert_eq!((stop(&steps), p.attempts()), (Stop::NotRetryable, 0), "refusals are not attempts");
    let e = p.final_error("m", none());
    assert_eq!((e.status, e.code.as_str(), e.retry_after_s), (429, "deployment_tpm", Some(1)));
    assert!(e.message.contains("'b'"), "{}", e.message);
}

#[test]
fn a_refusal_outranks_a_retryable_failure_but_not_a_final_one() {
    let script = [
        Then::Fail(ServerError, None),
        Then::Refuse(RejectCode::BreakerOpen, 2_000),
        Then::Refuse(RejectCode::Rpm, 3_000),
        Then::Refuse(RejectCode::BreakerOpen, 2_500),
    ];
    let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &script);
    assert_eq!(stop(&steps), Stop::NoProgress);
    let e = p.final_error("m", none());
    assert_eq!((e.code.as_str(), e.retry_after_s), ("deployment_breaker_open", Some(2)));
    let script = [Then::Refuse(RejectCode::Rpm, 100), Then::Fail(BadRequest, None)];
    let (_, p) = run(planner(&["a", "b"], RetryPolicy::default()), &script);
    assert_eq!(p.final_error("m", none()).status, 400);
}

#[test]
fn a_round_of_only_refusals_after_a_failure_stops_for_lack_of_progress() {
    let script = [Then::Fail(ServerError, None), Then::Refuse(RejectCode::Rpm, 100)];
    let (steps, p) = run(planner(&["a"], RetryPolicy::default()), &script);
    assert_eq!((stop(&steps), p.attempts()), (Stop::NoProgress, 1));
}

#[test]
fn a_request_one_deployment_cannot_be_built_for_tries_the_next() {
    let (steps, p) =
        run(planner(&["a", "b"], RetryPolicy::default()), &[Then::Unbuildable("unsupported_content"), Then::Serve]);
    assert_eq!(tries(&steps), vec![(0, 0), (1, 0)]);
    assert_eq!((stop(&steps), p.attempts()), (Stop::Served, 1));
}

#[test]
fn a_request_no_deployment_can_be_built_for_answers_with_the_first_reason() {
    let script = [Then::Unbuildable("unsupported_endpoint"), Then::Unbuildable("unsupported_content")];
    let (steps, p) = run(planner(&["a", "b"], RetryPolicy::default()), &script);
    assert_eq!((stop(&steps), p.attempts()), (Stop::NotRetryable, 0));
    let e = p.final_error("m", none());
    assert_eq!((e.status, e.code.as_str()), (400, "unsupported_endpoint"));
    // An upstream answer, had there been one, says more than the build failure.
    let script = [Then::Unbuildable("unsupported_content"), Then::Fail(Overloaded, None)];
    let (_, p) = run(planner(&["a", "b"], RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }), &script);
    assert_eq!(p.final_error("m", none()).code, "upstream_overloaded");
}

#[test]
fn an_empty_chain_stops_at_once() {
    let (steps, p) = run(planner(&[], RetryPolicy::default()), &[]);
    assert_eq!(steps, vec![Step::Stop(Stop::NotRetryable)]);
    assert_eq!(p.final_error("m", none()).code, "no_deployment_available");
}

#[test]
fn the_same_seed_plans_the_same_waits() {
    let script = vec![Then::Fail(ServerError, None); 3];
    let a = tries(&run(planner(&["a"], RetryPolicy::default()), &script).0);
    let b = tries(&run(planner(&["a"], RetryPolicy::default()), &script).0);
    assert_eq!(a, b);
}
