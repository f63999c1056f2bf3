use super::*;
use crate::breaker::{BreakerConfig, RampStep, Trip};
use crate::limits::DAY_MS;
use crate::protocol::Tally;

/// 01:00 UTC on some day, so "midnight" is 23 hours away.
const T0: u64 = 19_000 * DAY_MS + 3_600_000;

fn base_limits() -> Limits {
    Limits {
        rpm: Some(60),
        tpm: Some(6_000),
        breaker: BreakerConfig {
            trip: Trip::Consecutive { failures: 3 },
            open_ms: 10_000,
            ramp: vec![],
            enabled: true,
        },
        ..Limits::default()
    }
}

fn limiter(limits: Limits) -> LimiterState {
    LimiterState::new(limits, T0)
}

fn ask(id: &str, input: u64, output: u64, max_wait_ms: u64) -> AdmitRequest {
    AdmitRequest {
        id: id.into(),
        limits: None,
        estimate: TokenUsage { input, output },
        max_wait_ms,
        lease: None,
        tally: Tally::default(),
        tenant: None,
    }
}

fn admit(s: &mut LimiterState, id: &str, input: u64, output: u64, now: u64) -> AdmitDecision {
    s.admit(&ask(id, input, output, 0), now, 0)
}

fn done(id: &str, outcome: Outcome) -> SettleRequest {
    SettleRequest { id: id.into(), outcome, usage: None, signals: UpstreamSignals::default(), tally: Tally::default() }
}

fn used(id: &str, input: u64, output: u64) -> SettleRequest {
    SettleRequest { usage: Some(TokenUsage { input, output }), ..done(id, Outcome::Success) }
}

fn level(s: &mut LimiterState, kind: BucketKind, now: u64) -> i64 {
    s.status(now).buckets[&kind].available
}

fn levels(s: &mut LimiterState, now: u64) -> Vec<i64> {
    s.status(now).buckets.values().map(|b| b.available).collect()
}

fn rejection(d: &AdmitDecision) -> Option<(RejectCode, u64)> {
    match d {
        AdmitDecision::Rejected { code, retry_after_ms, scope: Scope::Deployment } => Some((*code, *retry_after_ms)),
        AdmitDecision::Admitted { .. } => None,
    }
}

fn start_after(d: &AdmitDecision) -> u64 {
    match d {
        AdmitDecision::Admitted { start_after_ms, .. } => *start_after_ms,
        AdmitDecision::Rejected { .. } => panic!("rejected: {d:?}"),
    }
}

fn is_probe(d: &AdmitDecision) -> bool {
    matches!(d, AdmitDecision::Admitted { probe: true, .. })
}

/// Trips the breaker (3 consecutive failures) at `now`.
fn trip(s: &mut LimiterState, now: u64) {
    for i in 0..3 {
        let id = format!("trip{now}-{i}");
        start_after(&admit(s, &id, 1, 1, now));
        s.settle(&done(&id, Outcome::Failure), now);
    }
    assert_eq!(s.status(now).breaker.state, BreakerState::Open);
}

// --- buckets and reservations ---

#[test]
fn admitted_answer_carries_remaining_counts() {
    let mut s = limiter(base_limits());
    let d = admit(&mut s, "a", 100, 50, T0);
    assert_eq!(
        d,
        AdmitDecision::Admitted {
            start_after_ms: 0,
            remaining_requests: Some(59),
            remaining_tokens: Some(5_850),
            probe: false,
            lease: None
        }
    );
    assert_eq!(s.in_flight(), 1);
}

#[test]
fn no_limits_admit_everything() {
    let mut s = limiter(Limits::default());
    let d = admit(&mut s, "a", 1_000_000, 1_000_000, T0);
    assert_eq!(
        d,
        AdmitDecision::Admitted {
            start_after_ms: 0,
            remaining_requests: None,
            remaining_tokens: None,
            probe: false,
            lease: None
        }
    );
}

#[test]
fn tpm_short_leaves_rpm_untouched() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "big", 5_000, 900, T0));
    let before = levels(&mut s, T0);
    let d = admit(&mut s, "next", 200, 0, T0);
    // 100 tokens left, 100 more needed at 100 tokens/s.
    assert_eq!(rejection(&d), Some((RejectCode::Tpm, 1_000)));
    assert_eq!(levels(&mut s, T0), before);
    assert_eq!(level(&mut s, BucketKind::Rpm, T0), 59);
    assert_eq!(s.in_flight(), 1);
}

#[test]
fn rpm_short_leaves_tpm_untouched() {
    let mut s = limiter(Limits { rpm: Some(1), ..base_limits() });
    start_after(&admit(&mut s, "a", 10, 10, T0));
    let d = admit(&mut s, "b", 10, 10, T0);
    assert_eq!(rejection(&d), Some((RejectCode::Rpm, 60_000)));
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 5_980);
}

#[test]
fn rejection_names_the_bucket_that_needs_longest() {
    let mut s = limiter(Limits { rpm: Some(6), ..base_limits() }); // one request per 10 s
    start_after(&admit(&mut s, "a", 5_900, 0, T0));
    for i in 0..5 {
        start_after(&admit(&mut s, &format!("r{i}"), 0, 0, T0));
    }
    // rpm needs 10 s, tpm needs 2 s for 300 tokens.
    assert_eq!(rejection(&admit(&mut s, "b", 300, 0, T0)), Some((RejectCode::Rpm, 10_000)));
}

#[test]
fn max_wait_reserves_a_place_in_line() {
    let mut s = limiter(base_limits()); // 1 request per second
    for i in 0..60 {
        start_after(&admit(&mut s, &format!("r{i}"), 0, 0, T0));
    }
    assert_eq!(start_after(&s.admit(&ask("q1", 0, 0, 1_500), T0, 0)), 1_000);
    assert_eq!(level(&mut s, BucketKind::Rpm, T0), -1);
    assert_eq!(start_after(&s.admit(&ask("q2", 0, 0, 2_500), T0, 0)), 2_000, "queued behind q1");
    let d = s.admit(&ask("q3", 0, 0, 2_500), T0, 0);
    assert_eq!(rejection(&d), Some((RejectCode::Rpm, 3_000)));
    assert_eq!(level(&mut s, BucketKind::Rpm, T0), -2, "the refused one took nothing");
    assert_eq!(level(&mut s, BucketKind::Rpm, T0 + 3_000), 1);
}

#[test]
fn max_wait_never_queues_past_a_zero_limit() {
    let mut s = limiter(Limits { tpm: Some(0), ..base_limits() });
    let d = s.admit(&ask("a", 1, 0, u64::MAX), T0, 0);
    assert_eq!(rejection(&d), Some((RejectCode::Tpm, 60_000)));
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn demand_above_capacity_is_capped_then_charged() {
    let mut s = limiter(base_limits());
    assert_eq!(start_after(&admit(&mut s, "huge", 9_000, 1_000, T0)), 0);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 0);
    s.settle(&used("huge", 9_000, 1_000), T0);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), -4_000);
}

#[test]
fn settle_refunds_the_unused_estimate() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 1_000, 2_000, T0));
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 3_000);
    let report = s.settle(&used("a", 900, 100), T0);
    assert_eq!(report, SettleReport { reservation: SettleMatch::Settled, breaker: BreakerState::Closed });
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 5_000);
    assert_eq!(level(&mut s, BucketKind::Rpm, T0), 59, "the request itself stays counted");
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn settles_carried_in_a_tally_refund_once_and_count_as_successes() {
    use crate::protocol::LateSettle;
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 1_000, 2_000, T0));
    start_after(&admit(&mut s, "b", 1_000, 2_000, T0));
    // Two failures in a row: a third would trip the breaker (3 consecutive).
    start_after(&admit(&mut s, "f1", 0, 0, T0));
    start_after(&admit(&mut s, "f2", 0, 0, T0));
    s.settle(&done("f1", Outcome::Failure), T0);
    s.settle(&done("f2", Outcome::Failure), T0);
    let settles = vec![
        LateSettle { id: "a".into(), usage: Some(TokenUsage { input: 900, output: 100 }) },
        LateSettle { id: "b".into(), usage: None },
        LateSettle { id: "a".into(), usage: Some(TokenUsage { input: 0, output: 0 }) },
    ];
    let tally = Tally { settles, ..Tally::default() };
    s.admit(&AdmitRequest { tally, ..ask("c", 0, 0, 0) }, T0 + 1, 0);
    // a: 3,000 taken, 1,000 used; b keeps its estimate; the repeat of a changes nothing.
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 1), 6_000 - 1_000 - 3_000);
    assert_eq!(s.in_flight(), 1, "only c is left in flight");
    // The carried successes broke the run of failures: one more failure does not trip.
    s.settle(&done("c", Outcome::Failure), T0 + 2);
    assert_eq!(s.status(T0 + 2).breaker.state, BreakerState::Closed);
}

#[test]
fn extra_usage_goes_negative_and_later_requests_wait_it_off() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 1_000, 1_000, T0));
    s.settle(&used("a", 1_000, 7_000), T0);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), -2_000);
    assert_eq!(rejection(&admit(&mut s, "b", 100, 0, T0)), Some((RejectCode::Tpm, 21_000)));
    assert_eq!(start_after(&admit(&mut s, "b", 100, 0, T0 + 21_000)), 0);
}

#[test]
fn settle_without_usage_keeps_the_estimate() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 1_000, 1_000, T0));
    s.settle(&done("a", Outcome::Success), T0);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 4_000);
}

#[test]
fn input_and_output_buckets_are_reserved_and_reconciled_separately() {
    let mut s = limiter(Limits { input_tpm: Some(1_000), output_tpm: Some(600), ..base_limits() });
    start_after(&admit(&mut s, "a", 800, 500, T0));
    assert_eq!(rejection(&admit(&mut s, "b", 100, 200, T0)), Some((RejectCode::OutputTpm, 10_000)));
    assert_eq!(level(&mut s, BucketKind::InputTpm, T0), 200);
    s.settle(&used("a", 700, 50), T0);
    assert_eq!(level(&mut s, BucketKind::InputTpm, T0), 300);
    assert_eq!(level(&mut s, BucketKind::OutputTpm, T0), 550);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 5_250);
}

#[test]
fn requests_per_day_reset_at_utc_midnight() {
    let mut s = limiter(Limits { rpd: Some(2), ..base_limits() });
    start_after(&admit(&mut s, "a", 0, 0, T0));
    start_after(&admit(&mut s, "b", 0, 0, T0));
    let midnight = T0 - T0 % DAY_MS + DAY_MS;
    assert_eq!(rejection(&admit(&mut s, "c", 0, 0, T0 + 5_000)), Some((RejectCode::Rpd, midnight - T0 - 5_000)));
    assert!(rejection(&admit(&mut s, "c", 0, 0, midnight - 1)).is_some());
    assert_eq!(start_after(&admit(&mut s, "c", 0, 0, midnight)), 0);
    assert_eq!(
        admit(&mut s, "d", 0, 0, midnight),
        AdmitDecision::Admitted {
            start_after_ms: 0,
            remaining_requests: Some(0),
            remaining_tokens: Some(6_000),
            probe: false,
            lease: None
        }
    );
}

#[test]
fn concurrency_slot_is_taken_and_released_on_settle() {
    let mut s = limiter(Limits { max_concurrent: Some(2), ..base_limits() });
    start_after(&admit(&mut s, "a", 1, 1, T0));
    start_after(&admit(&mut s, "b", 1, 1, T0));
    let before = levels(&mut s, T0);
    assert_eq!(rejection(&admit(&mut s, "c", 1, 1, T0)), Some((RejectCode::Concurrency, CONCURRENCY_RETRY_MS)));
    assert_eq!(levels(&mut s, T0), before, "buckets untouched when the slot is missing");
    s.settle(&done("a", Outcome::Success), T0 + 10);
    assert_eq!(start_after(&admit(&mut s, "c", 1, 1, T0 + 10)), 0);
}

#[test]
fn expiry_releases_the_slot_but_keeps_the_estimate() {
    let limits = Limits { max_concurrent: Some(1), reservation_ttl_ms: 5_000, ..base_limits() };
    let mut s = limiter(limits);
    start_after(&admit(&mut s, "a", 3_000, 0, T0));
    assert_eq!(rejection(&admit(&mut s, "b", 0, 0, T0 + 4_999)).map(|r| r.0), Some(RejectCode::Concurrency));
    s.expire(T0 + 5_000);
    assert_eq!(s.in_flight(), 0);
    // 3000 taken, 5 s × 100/s refilled: the estimate was not given back.
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 5_000), 3_500);
    assert_eq!(start_after(&admit(&mut s, "b", 0, 0, T0 + 5_000)), 0);
}

#[test]
fn late_settle_of_an_expired_reservation_reconciles_tokens_once() {
    let mut s = limiter(Limits { reservation_ttl_ms: 1_000, ..base_limits() });
    start_after(&admit(&mut s, "a", 3_000, 0, T0));
    s.expire(T0 + 1_000);
    let report = s.settle(&used("a", 1_000, 0), T0 + 1_000);
    assert_eq!(report.reservation, SettleMatch::Late);
    // 3000 taken, 100 refilled, 2000 given back.
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 1_000), 5_100);
    assert_eq!(s.settle(&used("a", 1_000, 0), T0 + 1_000).reservation, SettleMatch::Duplicate);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 1_000), 5_100);
}

#[test]
fn settle_is_idempotent() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 1_000, 0, T0));
    let failed = SettleRequest { usage: Some(TokenUsage { input: 10, output: 0 }), ..done("a", Outcome::Failure) };
    assert_eq!(s.settle(&failed, T0).reservation, SettleMatch::Settled);
    let after_first = s.status(T0);
    assert_eq!(s.settle(&failed, T0).reservation, SettleMatch::Duplicate);
    assert_eq!(s.status(T0), after_first);
    assert_eq!(after_first.breaker.consecutive_failures, 1);
}

#[test]
fn unknown_settle_still_applies_outcome_and_signals() {
    let mut s = limiter(base_limits());
    let req = SettleRequest {
        signals: UpstreamSignals { retry_after_ms: Some(3_000), remaining_tokens: Some(100), ..Default::default() },
        ..done("never-seen", Outcome::Failure)
    };
    assert_eq!(s.settle(&req, T0).reservation, SettleMatch::Unknown);
    let status = s.status(T0);
    assert_eq!(status.breaker.consecutive_failures, 1);
    assert_eq!(status.pause, Some(Pause { until_ms: T0 + 3_000, reason: PauseReason::RetryAfter }));
    assert_eq!(status.buckets[&BucketKind::Tpm].available, 100);
    assert_eq!(status.buckets[&BucketKind::Rpm].available, 60);
    assert_eq!(s.settle(&req, T0).reservation, SettleMatch::Duplicate);
    assert_eq!(s.status(T0).breaker.consecutive_failures, 1);
}

#[test]
fn retried_admit_answers_again_without_taking_twice() {
    let mut s = limiter(base_limits());
    for i in 0..60 {
        start_after(&admit(&mut s, &format!("r{i}"), 0, 0, T0));
    }
    assert_eq!(start_after(&s.admit(&ask("q", 100, 0, 5_000), T0, 0)), 1_000);
    let before = levels(&mut s, T0 + 400);
    assert_eq!(start_after(&s.admit(&ask("q", 100, 0, 5_000), T0 + 400, 0)), 600);
    assert_eq!(levels(&mut s, T0 + 400), before);
    assert_eq!(s.in_flight(), 61);
}

// --- breaker through the limiter ---

#[test]
fn open_breaker_rejects_before_buckets_until_half_open() {
    let mut s = limiter(base_limits());
    trip(&mut s, T0);
    let before = levels(&mut s, T0 + 1);
    assert_eq!(rejection(&admit(&mut s, "x", 1, 1, T0 + 1)), Some((RejectCode::BreakerOpen, 9_999)));
    assert_eq!(levels(&mut s, T0 + 1), before);
    assert!(is_probe(&admit(&mut s, "p", 1, 1, T0 + 10_000)));
}

#[test]
fn half_open_lets_exactly_one_probe_through() {
    let mut s = limiter(base_limits());
    trip(&mut s, T0);
    let t = T0 + 10_000;
    assert!(is_probe(&admit(&mut s, "p", 1, 1, t)));
    assert_eq!(rejection(&admit(&mut s, "x", 1, 1, t)).map(|r| r.0), Some(RejectCode::HalfOpenProbeInFlight));
    assert_eq!(s.status(t).breaker.probe.as_deref(), Some("p"));
}

#[test]
fn probe_that_finds_no_bucket_room_does_not_hold_the_slot() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "hog", 5_990, 0, T0));
    trip(&mut s, T0);
    let t = T0 + 10_000;
    assert_eq!(rejection(&admit(&mut s, "p", 2_000, 0, t)).map(|r| r.0), Some(RejectCode::Tpm));
    assert!(is_probe(&admit(&mut s, "q", 1, 1, t)));
}

#[test]
fn probe_success_closes() {
    let mut s = limiter(base_limits());
    trip(&mut s, T0);
    let t = T0 + 10_000;
    admit(&mut s, "p", 1, 1, t);
    let report = s.settle(&done("p", Outcome::Success), t + 100);
    assert_eq!(report.breaker, BreakerState::Closed);
    assert!(!is_probe(&admit(&mut s, "a", 1, 1, t + 100)));
    assert!(rejection(&admit(&mut s, "b", 1, 1, t + 100)).is_none());
}

#[test]
fn probe_failure_reopens() {
    let mut s = limiter(base_limits());
    trip(&mut s, T0);
    let t = T0 + 10_000;
    admit(&mut s, "p", 1, 1, t);
    assert_eq!(s.settle(&done("p", Outcome::Failure), t + 100).breaker, BreakerState::Open);
    assert_eq!(rejection(&admit(&mut s, "x", 1, 1, t + 100)), Some((RejectCode::BreakerOpen, 10_000)));
}

#[test]
fn rate_limited_probe_reopens_without_counting_or_wiping() {
    let mut s = limiter(base_limits());
    trip(&mut s, T0);
    let t = T0 + 10_000;
    admit(&mut s, "p", 1, 1, t);
    let report = s.settle(&done("p", Outcome::RateLimited { retry_after_ms: Some(2_000) }), t + 100);
    assert_eq!(report.breaker, BreakerState::Open);
    let status = s.status(t + 100);
    assert_eq!(status.breaker.consecutive_failures, 3);
    assert_eq!(status.pause, Some(Pause { until_ms: t + 2_100, reason: PauseReason::RetryAfter }));
}

#[test]
fn expired_probe_reservation_frees_the_probe_slot() {
    let mut s = limiter(Limits { reservation_ttl_ms: 2_000, ..base_limits() });
    trip(&mut s, T0);
    let t = T0 + 10_000;
    assert!(is_probe(&admit(&mut s, "p", 1, 1, t)));
    assert_eq!(rejection(&admit(&mut s, "x", 1, 1, t + 1_999)).map(|r| r.0), Some(RejectCode::HalfOpenProbeInFlight));
    assert!(is_probe(&admit(&mut s, "q", 1, 1, t + 2_000)));
    // The late answer of the first probe is no longer the probe's.
    s.settle(&done("p", Outcome::Failure), t + 2_001);
    assert_eq!(s.status(t + 2_001).breaker.state, BreakerState::HalfOpen);
}

#[test]
fn rate_limits_never_count_in_closed() {
    let mut s = limiter(base_limits());
    for i in 0..10 {
        let id = format!("r{i}");
        let t = T0 + i * 2_000;
        start_after(&admit(&mut s, &id, 1, 1, t));
        s.settle(&done(&id, Outcome::RateLimited { retry_after_ms: None }), t);
    }
    let status = s.status(T0 + 20_000);
    assert_eq!(status.breaker.state, BreakerState::Closed);
    assert_eq!(status.breaker.consecutive_failures, 0);
}

#[test]
fn client_errors_and_quota_do_not_count() {
    let mut s = limiter(base_limits());
    for (i, outcome) in
        [Outcome::Neutral, Outcome::Neutral, Outcome::Neutral, Outcome::QuotaExhausted].iter().enumerate()
    {
        let id = format!("r{i}");
        start_after(&admit(&mut s, &id, 1, 1, T0));
        s.settle(&done(&id, *outcome), T0);
    }
    assert_eq!(s.status(T0).breaker.consecutive_failures, 0);
}

#[test]
fn error_rate_mode_trips_through_settles() {
    let breaker = BreakerConfig {
        trip: Trip::ErrorRate { window_ms: 60_000, min_samples: 4, threshold_pct: 50 },
        open_ms: 5_000,
        ramp: vec![],
        enabled: true,
    };
    let mut s = limiter(Limits { breaker, ..base_limits() });
    for (i, outcome) in [Outcome::Success, Outcome::Failure, Outcome::Success, Outcome::Failure].iter().enumerate() {
        let id = format!("r{i}");
        start_after(&admit(&mut s, &id, 1, 1, T0));
        s.settle(&done(&id, *outcome), T0);
    }
    assert_eq!(s.status(T0).breaker.state, BreakerState::Open);
}

#[test]
fn ramp_after_close_admits_the_configured_share() {
    let limits = Limits {
        rpm: None,
        tpm: None,
        breaker: BreakerConfig {
            trip: Trip::Consecutive { failures: 3 },
            open_ms: 10_000,
            ramp: vec![RampStep { pct: 20, ms: 10_000 }, RampStep { pct: 50, ms: 10_000 }],
            enabled: true,
        },
        ..Limits::default()
    };
    let mut s = limiter(limits);
    trip(&mut s, T0);
    let t = T0 + 10_000;
    admit(&mut s, "p", 1, 1, t);
    s.settle(&done("p", Outcome::Success), t);
    let count = |s: &mut LimiterState, now: u64| {
        (0..100u64).filter(|r| s.admit(&ask(&format!("{now}-{r}"), 1, 1, 0), now, *r).is_admitted()).count()
    };
    assert_eq!(count(&mut s, t + 1), 20);
    assert_eq!(count(&mut s, t + 10_000), 50);
    assert_eq!(count(&mut s, t + 20_000), 100);
    let mut fresh = limiter(s.limits().clone());
    trip(&mut fresh, T0);
    admit(&mut fresh, "p", 1, 1, t);
    fresh.settle(&done("p", Outcome::Success), t);
    assert_eq!(rejection(&fresh.admit(&ask("x", 1, 1, 0), t + 4_000, 20)), Some((RejectCode::Ramping, 6_000)));
}

// --- vendor signals and pauses ---

#[test]
fn retry_after_pauses_the_whole_deployment() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 1, 1, T0));
    let req = SettleRequest {
        signals: UpstreamSignals { retry_after_ms: Some(5_000), ..Default::default() },
        ..done("a", Outcome::RateLimited { retry_after_ms: None })
    };
    s.settle(&req, T0);
    let before = levels(&mut s, T0 + 1_000);
    assert_eq!(rejection(&admit(&mut s, "b", 1, 1, T0 + 1_000)), Some((RejectCode::Paused, 4_000)));
    assert_eq!(rejection(&s.admit(&ask("c", 1, 1, 60_000), T0 + 1_000, 0)), Some((RejectCode::Paused, 4_000)));
    assert_eq!(levels(&mut s, T0 + 1_000), before);
    assert_eq!(start_after(&admit(&mut s, "b", 1, 1, T0 + 5_000)), 0);
    assert_eq!(s.status(T0 + 5_000).pause, None);
}

#[test]
fn retry_after_in_the_outcome_or_on_a_5xx_pauses_too() {
    let mut s = limiter(base_limits());
    s.settle(&done("x", Outcome::RateLimited { retry_after_ms: Some(2_000) }), T0);
    assert_eq!(rejection(&admit(&mut s, "a", 1, 1, T0)), Some((RejectCode::Paused, 2_000)));
    let unavailable = SettleRequest {
        signals: UpstreamSignals { retry_after_ms: Some(9_000), ..Default::default() },
        ..done("y", Outcome::Failure)
    };
    s.settle(&unavailable, T0);
    assert_eq!(rejection(&admit(&mut s, "a", 1, 1, T0)), Some((RejectCode::Paused, 9_000)));
}

#[test]
fn bare_429_pauses_briefly() {
    let mut s = limiter(base_limits());
    s.settle(&done("x", Outcome::RateLimited { retry_after_ms: None }), T0);
    assert_eq!(rejection(&admit(&mut s, "a", 1, 1, T0)), Some((RejectCode::Paused, RATE_LIMITED_PAUSE_MS)));
    // With remaining-headers instead, the buckets slow down and no blind pause is added.
    let mut t = limiter(base_limits());
    let req = SettleRequest {
        signals: UpstreamSignals { remaining_requests: Some(0), ..Default::default() },
        ..done("x", Outcome::RateLimited { retry_after_ms: None })
    };
    t.settle(&req, T0);
    assert_eq!(rejection(&admit(&mut t, "a", 1, 1, T0)), Some((RejectCode::Rpm, 1_000)));
}

#[test]
fn pauses_only_extend() {
    let mut s = limiter(base_limits());
    s.settle(&done("x", Outcome::RateLimited { retry_after_ms: Some(10_000) }), T0);
    s.settle(&done("y", Outcome::RateLimited { retry_after_ms: Some(1_000) }), T0);
    assert_eq!(rejection(&admit(&mut s, "a", 1, 1, T0)), Some((RejectCode::Paused, 10_000)));
}

#[test]
fn quota_exhausted_pauses_for_the_configured_time() {
    let mut s = limiter(Limits { quota_pause_ms: 120_000, ..base_limits() });
    start_after(&admit(&mut s, "a", 1, 1, T0));
    s.settle(&done("a", Outcome::QuotaExhausted), T0);
    assert_eq!(rejection(&admit(&mut s, "b", 1, 1, T0 + 20_000)), Some((RejectCode::QuotaExhausted, 100_000)));
    assert_eq!(s.status(T0).breaker.state, BreakerState::Closed);
    assert_eq!(start_after(&admit(&mut s, "b", 1, 1, T0 + 120_000)), 0);
}

#[test]
fn quota_pause_defaults_to_ten_minutes() {
    let mut s = limiter(base_limits());
    s.settle(&done("a", Outcome::QuotaExhausted), T0);
    assert_eq!(s.status(T0).pause, Some(Pause { until_ms: T0 + 600_000, reason: PauseReason::Quota }));
}

#[test]
fn vendor_remaining_clamps_buckets_down_only() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 100, 0, T0));
    let req = SettleRequest {
        signals: UpstreamSignals {
            remaining_requests: Some(30),
            remaining_tokens: Some(9_999),
            reset_requests_ms: Some(55_000),
            reset_tokens_ms: Some(1_000),
            ..Default::default()
        },
        ..used("a", 100, 0)
    };
    s.settle(&req, T0);
    // 30 remaining, but full only in 55 s: our bucket must not be full sooner.
    assert_eq!(level(&mut s, BucketKind::Rpm, T0), 5);
    assert_eq!(level(&mut s, BucketKind::Rpm, T0 + 55_000), 60);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 5_900, "a larger vendor figure never raises ours");
    let zero = SettleRequest {
        signals: UpstreamSignals { remaining_tokens: Some(0), ..Default::default() },
        ..done("b", Outcome::Success)
    };
    s.settle(&zero, T0);
    assert_eq!(rejection(&admit(&mut s, "c", 50, 0, T0)), Some((RejectCode::Tpm, 500)));
}

// --- limits, status, snapshots ---

#[test]
fn limit_change_keeps_levels() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 4_000, 0, T0));
    let raised = Limits { tpm: Some(12_000), ..base_limits() };
    let d = s.admit(&AdmitRequest { limits: Some(raised.clone()), ..ask("b", 0, 0, 0) }, T0, 0);
    assert_eq!(start_after(&d), 0);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), 2_000, "not reset to the new capacity");
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 1_000), 2_200, "refills at the new rate");
    let lowered = Limits { tpm: Some(1_000), ..raised };
    s.set_limits(&lowered, T0 + 1_000);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 1_000), 1_000);
}

#[test]
fn limits_added_start_full_and_removed_stop_applying() {
    let mut s = limiter(base_limits());
    s.set_limits(&Limits { rpd: Some(1_000), tpm: None, ..base_limits() }, T0);
    let buckets = s.status(T0).buckets;
    assert_eq!(buckets.keys().copied().collect::<Vec<_>>(), vec![BucketKind::Rpm, BucketKind::Rpd]);
    assert_eq!(buckets[&BucketKind::Rpd].available, 1_000);
    assert_eq!(start_after(&admit(&mut s, "a", 1_000_000, 0, T0)), 0);
}

#[test]
fn status_reports_everything_an_admin_needs() {
    let mut s = limiter(Limits { max_concurrent: Some(4), ..base_limits() });
    start_after(&admit(&mut s, "a", 10, 0, T0));
    let status = s.status(T0);
    assert_eq!(status.now_ms, T0);
    assert_eq!(status.in_flight, 1);
    assert_eq!(status.breaker.state, BreakerState::Closed);
    assert_eq!(status.buckets[&BucketKind::Rpm], BucketStatus { capacity: 60, available: 59, period_ms: 60_000 });
    assert_eq!(status.limits.max_concurrent, Some(4));
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["buckets"]["rpm"]["available"], 59);
    assert_eq!(json["breaker"]["state"], "closed");
}

#[test]
fn handle_dispatches_every_request() {
    let mut s = limiter(base_limits());
    let admitted = s.handle(&LimiterRequest::Admit(ask("a", 1, 1, 0)), T0, 0);
    assert!(matches!(admitted, LimiterResponse::Admit(AdmitDecision::Admitted { .. })));
    let settled = s.handle(&LimiterRequest::Settle(done("a", Outcome::Success)), T0, 0);
    assert!(matches!(settled, LimiterResponse::Settle(SettleReport { reservation: SettleMatch::Settled, .. })));
    assert!(matches!(s.handle(&LimiterRequest::Status, T0, 0), LimiterResponse::Status(_)));
}

#[test]
fn snapshot_round_trip_keeps_everything() {
    let mut s = limiter(Limits { rpd: Some(100), max_concurrent: Some(5), ..base_limits() });
    start_after(&admit(&mut s, "a", 500, 100, T0));
    start_after(&admit(&mut s, "b", 50, 10, T0));
    s.settle(&used("b", 40, 5), T0);
    trip(&mut s, T0);
    s.settle(&done("q", Outcome::QuotaExhausted), T0);

    let text = s.to_snapshot();
    let mut back = LimiterState::from_snapshot(&text).unwrap();
    assert_eq!(back.to_snapshot(), text);
    assert_eq!(back.status(T0 + 5), s.status(T0 + 5));
    assert_eq!(back.settle(&done("b", Outcome::Success), T0).reservation, SettleMatch::Duplicate);
    assert_eq!(back.settle(&used("a", 1, 1), T0).reservation, SettleMatch::Settled);
    assert!(text.len() < 2_000, "compact: {} bytes", text.len());
}

#[test]
fn snapshot_without_reservations_forgets_only_them() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 500, 100, T0));
    let mut slim = LimiterState::from_snapshot(&s.to_snapshot_without_reservations()).unwrap();
    assert_eq!(slim.in_flight(), 0);
    assert_eq!(level(&mut slim, BucketKind::Tpm, T0), 5_400);
    assert_eq!(slim.settle(&used("a", 1, 1), T0).reservation, SettleMatch::Unknown);
}

#[test]
fn foreign_snapshots_are_refused() {
    let s = limiter(base_limits());
    let other = s.to_snapshot().replacen("\"v\":1", "\"v\":99", 1);
    assert!(LimiterState::from_snapshot(&other).unwrap_err().contains("version"));
    assert!(LimiterState::from_snapshot("{}").is_err());
}

#[test]
fn critical_key_moves_on_breaker_and_pause_changes_only() {
    let mut s = limiter(base_limits());
    let calm = s.critical_key();
    start_after(&admit(&mut s, "a", 1, 1, T0));
    s.settle(&used("a", 1, 1), T0);
    assert_eq!(s.critical_key(), calm);
    trip(&mut s, T0);
    let open = s.critical_key();
    assert_ne!(open, calm);
    s.settle(&done("z", Outcome::QuotaExhausted), T0);
    let paused = s.critical_key();
    assert_ne!(paused, open);
    let t = T0 + 600_000;
    s.expire(t);
    let half_open = s.critical_key();
    assert_ne!(half_open, paused);
    assert!(is_probe(&admit(&mut s, "p", 1, 1, t)));
    assert_ne!(s.critical_key(), half_open, "taking the probe slot is persisted at once");
}

// --- release: an admission whose request went no further ---

fn release(s: &mut LimiterState, id: &str, now: u64) -> SettleMatch {
    s.release(&ReleaseRequest { id: id.into(), tally: Tally::default() }, now).reservation
}

#[test]
fn release_refunds_everything_the_reservation_took() {
    let limits = Limits {
        rpd: Some(10),
        input_tpm: Some(1_000),
        output_tpm: Some(1_000),
        max_concurrent: Some(1),
        ..base_limits()
    };
    let mut s = limiter(limits);
    let before = levels(&mut s, T0);
    start_after(&admit(&mut s, "a", 300, 200, T0));
    assert_ne!(levels(&mut s, T0), before);
    assert_eq!(rejection(&admit(&mut s, "b", 1, 1, T0)).map(|r| r.0), Some(RejectCode::Concurrency));
    assert_eq!(release(&mut s, "a", T0), SettleMatch::Settled);
    // The request, its tokens in every token bucket, its day's request and its slot: all back.
    assert_eq!(levels(&mut s, T0), before);
    assert_eq!(s.in_flight(), 0);
    assert_eq!(start_after(&admit(&mut s, "b", 1, 1, T0)), 0);
}

#[test]
fn a_released_request_no_longer_counts_against_the_minute() {
    let mut s = limiter(Limits { rpm: Some(3), ..Limits::default() });
    for id in ["a", "b", "c"] {
        start_after(&admit(&mut s, id, 1, 1, T0));
    }
    assert_eq!(rejection(&admit(&mut s, "d", 1, 1, T0)).map(|r| r.0), Some(RejectCode::Rpm));
    release(&mut s, "c", T0);
    assert_eq!(start_after(&admit(&mut s, "d", 1, 1, T0)), 0, "the released request's place is free again");
    assert_eq!(rejection(&admit(&mut s, "e", 1, 1, T0)).map(|r| r.0), Some(RejectCode::Rpm));
}

#[test]
fn release_of_a_place_in_line_gives_it_back() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "big", 5_900, 0, T0));
    // 100 tokens left: 500 more needed at 100 tokens/s.
    let wait = start_after(&s.admit(&ask("queued", 600, 0, 10_000), T0, 0));
    assert_eq!(wait, 5_000);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0), -500);
    release(&mut s, "queued", T0 + 10);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 10), 101);
    // Holding a place 5 s out kept RPM 5 below full; that comes back with the request.
    assert_eq!(level(&mut s, BucketKind::Rpm, T0 + 10), 59);
}

#[test]
fn release_does_not_touch_the_breaker() {
    let mut s = limiter(base_limits());
    for id in ["f1", "f2"] {
        start_after(&admit(&mut s, id, 1, 1, T0));
        s.settle(&done(id, Outcome::Failure), T0);
    }
    let breaker = s.status(T0).breaker;
    assert_eq!(breaker.consecutive_failures, 2);
    start_after(&admit(&mut s, "r", 1, 1, T0));
    release(&mut s, "r", T0);
    assert_eq!(s.status(T0).breaker, breaker, "no success recorded: the run of failures stands");
    start_after(&admit(&mut s, "f3", 1, 1, T0));
    assert_eq!(s.settle(&done("f3", Outcome::Failure), T0).breaker, BreakerState::Open);

    // Error-rate mode: a release adds no sample to the window.
    let limits = Limits {
        breaker: BreakerConfig {
            trip: Trip::ErrorRate { window_ms: 60_000, min_samples: 2, threshold_pct: 50 },
            open_ms: 10_000,
            ramp: vec![],
            enabled: true,
        },
        ..base_limits()
    };
    let mut s = limiter(limits);
    start_after(&admit(&mut s, "r", 1, 1, T0));
    release(&mut s, "r", T0);
    let status = s.status(T0).breaker;
    assert_eq!((status.window_ok, status.window_failed), (0, 0));
}

#[test]
fn a_released_probe_frees_the_probe_slot_and_stays_half_open() {
    let mut s = limiter(base_limits());
    trip(&mut s, T0);
    let t = T0 + 10_000;
    assert!(is_probe(&admit(&mut s, "p", 1, 1, t)));
    let failures = s.status(t).breaker.consecutive_failures;
    release(&mut s, "p", t);
    let status = s.status(t).breaker;
    assert_eq!((status.state, status.probe, status.consecutive_failures), (BreakerState::HalfOpen, None, failures));
    assert!(is_probe(&admit(&mut s, "q", 1, 1, t)), "the next request is the probe");
}

#[test]
fn release_is_idempotent_and_a_settle_after_it_does_nothing() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 100, 0, T0));
    assert_eq!(release(&mut s, "a", T0), SettleMatch::Settled);
    let after = s.status(T0);
    assert_eq!(release(&mut s, "a", T0), SettleMatch::Duplicate);
    assert_eq!(s.settle(&used("a", 500, 500), T0).reservation, SettleMatch::Duplicate);
    assert_eq!(s.status(T0).buckets, after.buckets);
    // Settled first: a release then does nothing either.
    start_after(&admit(&mut s, "b", 100, 0, T0));
    s.settle(&used("b", 10, 0), T0);
    let settled = s.status(T0).buckets;
    assert_eq!(release(&mut s, "b", T0), SettleMatch::Duplicate);
    assert_eq!(s.status(T0).buckets, settled);
    assert_eq!(release(&mut s, "never-seen", T0), SettleMatch::Unknown);
    assert_eq!(s.status(T0).buckets, settled);
}

#[test]
fn requests_per_day_are_released_only_within_their_day() {
    let mut s = limiter(Limits { rpd: Some(2), ..base_limits() });
    let midnight = T0 - T0 % DAY_MS + DAY_MS;
    start_after(&admit(&mut s, "a", 0, 0, midnight - 10));
    start_after(&admit(&mut s, "b", 0, 0, midnight - 10));
    release(&mut s, "b", midnight - 5);
    assert_eq!(level(&mut s, BucketKind::Rpd, midnight - 5), 1);
    start_after(&admit(&mut s, "c", 0, 0, midnight - 5));
    // After midnight the day's window has reset: giving "c" back there would count it twice.
    release(&mut s, "c", midnight + 5);
    assert_eq!(level(&mut s, BucketKind::Rpd, midnight + 5), 2);
}

#[test]
fn a_late_release_gives_back_tokens_but_not_the_day() {
    let mut s = limiter(Limits { rpd: Some(5), reservation_ttl_ms: 1_000, ..base_limits() });
    start_after(&admit(&mut s, "a", 3_000, 0, T0));
    s.expire(T0 + 1_000);
    assert_eq!(release(&mut s, "a", T0 + 1_000), SettleMatch::Late);
    assert_eq!(level(&mut s, BucketKind::Tpm, T0 + 1_000), 6_000);
    assert_eq!(level(&mut s, BucketKind::Rpd, T0 + 1_000), 4);
}

#[test]
fn release_goes_through_handle_and_is_counted() {
    let mut s = limiter(base_limits());
    start_after(&admit(&mut s, "a", 1, 1, T0));
    let answer = s.handle(&LimiterRequest::Release(ReleaseRequest { id: "a".into(), tally: Tally::default() }), T0, 0);
    assert_eq!(answer, LimiterResponse::Release(ReleaseReport { reservation: SettleMatch::Settled }));
    assert_eq!(s.status(T0).calls.release, 1);
}

#[test]
fn an_old_snapshot_reservation_is_released_except_for_the_day() {
    let mut s = limiter(Limits { rpd: Some(5), ..base_limits() });
    start_after(&admit(&mut s, "a", 10, 0, T0));
    // A reservation written before releases existed has no time of taking.
    let text = s.to_snapshot();
    let old = text.replace(&format!("\"s\":{T0},\"at\":{T0}"), &format!("\"s\":{T0}"));
    assert_ne!(old, text);
    let mut back = LimiterState::from_snapshot(&old).unwrap();
    assert_eq!(release(&mut back, "a", T0), SettleMatch::Settled);
    assert_eq!(level(&mut back, BucketKind::Rpm, T0), 60);
    assert_eq!(level(&mut back, BucketKind::Rpd, T0), 4);
}

#[test]
fn fair_share_holds_a_flooding_tenant_while_another_is_active() {
    let share = crate::fair_share::FairShareConfig { burst_pct: 0, ..Default::default() };
    let limits = Limits { rpm: Some(20), fair_share: Some(share), ..Limits::default() };
    let mut s = LimiterState::new(limits, T0);
    let as_tenant = |id: String, t: &str| AdmitRequest { tenant: Some(t.into()), ..ask(&id, 1, 1, 0) };
    assert!(s.admit(&as_tenant("b0".into(), "b"), T0, 0).is_admitted());
    let a = (0..30).filter(|i| s.admit(&as_tenant(format!("a{i}"), "a"), T0, 0).is_admitted()).count();
    assert_eq!(a, 10, "a is held to half while b is active");
    match s.admit(&as_tenant("a99".into(), "a"), T0, 0) {
        AdmitDecision::Rejected { code: RejectCode::FairShare, retry_after_ms, .. } => assert!(retry_after_ms > 0),
        d => panic!("{d:?}"),
    }
    let b = (1..10).filter(|i| s.admit(&as_tenant(format!("b{i}"), "b"), T0, 0).is_admitted()).count();
    assert_eq!(b, 9, "b keeps its half");
    let untagged = (0..5).filter(|i| s.admit(&ask(&format!("n{i}"), 1, 1, 0), T0, 0).is_admitted()).count();
    assert_eq!(untagged, 0, "the bucket itself is empty now");
}
