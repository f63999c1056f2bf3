use super::*;
use crate::breaker::{BreakerConfig, RampStep, Trip};
use crate::limits::{DAY_MS, MINUTE_MS};
use crate::protocol::{AdmitRequest, LeaseAsk};

const T0: u64 = 19_000 * DAY_MS + 3_600_000;

fn limits(rpm: u64) -> Limits {
    Limits {
        rpm: Some(rpm),
        tpm: Some(1_000_000),
        breaker: BreakerConfig {
            trip: Trip::Consecutive { failures: 3 },
            open_ms: 10_000,
            ramp: vec![],
            enabled: true,
        },
        ..Limits::default()
    }
}

fn want(requests: u64, tokens_each: u64) -> Amounts {
    Amounts { requests, tokens: requests * tokens_each, input: 0, output: 0 }
}

fn ask(id: &str, want: Amounts) -> LeaseRequest {
    LeaseRequest { id: id.into(), want, limits: None, tally: Tally::default() }
}

fn grant(d: &LeaseDecision) -> Amounts {
    match d {
        LeaseDecision::Granted(g) => g.grant,
        LeaseDecision::Refused { code, .. } => panic!("refused: {code:?}"),
    }
}

fn refused(d: &LeaseDecision) -> RejectCode {
    match d {
        LeaseDecision::Refused { code, .. } => *code,
        LeaseDecision::Granted(g) => panic!("granted {g:?}"),
    }
}

fn rpm_level(s: &mut LimiterState, now: u64) -> i64 {
    s.status(now).buckets[&BucketKind::Rpm].available
}

fn tpm_level(s: &mut LimiterState, now: u64) -> i64 {
    s.status(now).buckets[&BucketKind::Tpm].available
}

fn giving_back(id: &str, requests: i64, tokens: i64) -> LeaseReturn {
    LeaseReturn { id: id.into(), unused: Delta { requests, tokens, ..Delta::default() } }
}

fn admit_req(id: &str, lease: Option<LeaseAsk>) -> AdmitRequest {
    AdmitRequest {
        id: id.into(),
        limits: None,
        estimate: TokenUsage { input: 10, output: 10 },
        max_wait_ms: 0,
        lease,
        tally: Tally::default(),
        tenant: None,
    }
}

fn trip(s: &mut LimiterState, now: u64) {
    for i in 0..3 {
        let id = format!("f{i}");
        assert!(s.admit(&admit_req(&id, None), now, 0).is_admitted());
        s.settle(
            &SettleRequest {
                id,
                outcome: Outcome::Failure,
                usage: None,
                signals: UpstreamSignals::default(),
                tally: Tally::default(),
            },
            now,
        );
    }
}

#[test]
fn a_lease_is_a_tenth_of_a_small_bucket_taken_at_once() {
    let mut s = LimiterState::new(limits(50), T0);
    let d = s.lease(&ask("L1", want(20, 100)), T0);
    assert_eq!(
        d,
        LeaseDecision::Granted(LeaseGrant {
            grant: want(5, 100),
            ttl_ms: LEASE_TTL_MS,
            remaining_requests: Some(45),
            remaining_tokens: Some(999_500),
        })
    );
    assert_eq!(rpm_level(&mut s, T0), 45);
    let status = s.status(T0);
    assert_eq!(status.leases.live, 1);
    assert_eq!(status.leases.held, want(5, 100));
    assert_eq!(status.in_flight, 0, "a lease is not an in-flight request");
}

#[test]
fn a_large_bucket_grants_what_is_wanted() {
    let mut s = LimiterState::new(limits(100_000), T0);
    assert_eq!(grant(&s.lease(&ask("L1", want(600, 30)), T0)), want(600, 30));
}

#[test]
fn the_token_bucket_scales_the_whole_lease() {
    let mut s = LimiterState::new(Limits { tpm: Some(20_000), ..limits(10_000) }, T0);
    // A tenth of TPM is 2,000 tokens: four 500-token requests.
    assert_eq!(grant(&s.lease(&ask("L1", want(100, 500)), T0)), want(4, 500));
    let mut small = LimiterState::new(Limits { tpm: Some(2_000), ..limits(10_000) }, T0);
    assert_eq!(refused(&small.lease(&ask("L1", want(10, 500)), T0)), RejectCode::Tpm, "200 tokens carry no request");
    assert_eq!(tpm_level(&mut small, T0), 2_000, "a refusal takes nothing");
}

#[test]
fn leases_together_hold_at_most_half_a_bucket() {
    let mut s = LimiterState::new(limits(50), T0);
    let total: u64 = (0..10)
        .filter_map(|i| match s.lease(&ask(&format!("L{i}"), want(20, 1)), T0) {
            LeaseDecision::Granted(g) => Some(g.grant.requests),
            LeaseDecision::Refused { .. } => None,
        })
        .sum();
    assert_eq!(total, 25);
    assert_eq!(rpm_level(&mut s, T0), 25, "the other half is left for per-request admits");
    assert!(s.admit(&admit_req("r", None), T0, 0).is_admitted());
}

#[test]
fn never_grants_into_debt() {
    let mut s = LimiterState::new(limits(50), T0);
    for i in 0..48 {
        assert!(s.admit(&admit_req(&format!("r{i}"), None), T0, 0).is_admitted());
    }
    assert_eq!(grant(&s.lease(&ask("L1", want(20, 1)), T0)).requests, 2);
    assert_eq!(refused(&s.lease(&ask("L2", want(20, 1)), T0)), RejectCode::Rpm);
    assert_eq!(rpm_level(&mut s, T0), 0);
}

#[test]
fn a_repeated_ask_takes_nothing_twice() {
    let mut s = LimiterState::new(limits(50), T0);
    let first = s.lease(&ask("L1", want(20, 1)), T0);
    assert_eq!(s.lease(&ask("L1", want(20, 1)), T0), first);
    assert_eq!(rpm_level(&mut s, T0), 45);
}

#[test]
fn what_is_returned_unused_goes_back_and_no_more() {
    let mut s = LimiterState::new(limits(100), T0);
    assert_eq!(grant(&s.lease(&ask("L1", want(10, 100)), T0)), want(10, 100));
    assert_eq!(s.take_back(&giving_back("L1", 7, 900), T0), SettleMatch::Settled);
    assert_eq!(rpm_level(&mut s, T0), 97);
    assert_eq!(tpm_level(&mut s, T0), 999_900);
    assert_eq!(s.take_back(&giving_back("L1", 7, 900), T0), SettleMatch::Duplicate);
    assert_eq!(rpm_level(&mut s, T0), 97, "a duplicate return refunds nothing");

    s.lease(&ask("L2", want(10, 100)), T0);
    s.take_back(&giving_back("L2", 50, 0), T0);
    assert_eq!(rpm_level(&mut s, T0), 97, "a refund never exceeds what the lease took");
    let status = s.status(T0);
    assert_eq!((status.leases.live, status.leases.counts.returned_requests), (0, 17));
}

#[test]
fn tokens_used_beyond_the_lease_are_charged_on_return() {
    let mut s = LimiterState::new(limits(100), T0);
    s.lease(&ask("L1", want(10, 100)), T0);
    s.take_back(&giving_back("L1", 0, -4_000), T0);
    assert_eq!(tpm_level(&mut s, T0), 1_000_000 - 1_000 - 4_000);
}

#[test]
fn an_unknown_return_charges_but_never_refunds() {
    let mut s = LimiterState::new(limits(100), T0);
    s.admit(&admit_req("r", None), T0, 0);
    assert_eq!(s.take_back(&giving_back("ghost", 5, 500), T0), SettleMatch::Unknown);
    assert_eq!(rpm_level(&mut s, T0), 99);
    s.take_back(&giving_back("ghost2", 0, -300), T0);
    assert_eq!(tpm_level(&mut s, T0), 1_000_000 - 20 - 300);
}

#[test]
fn an_expired_lease_stays_charged_and_a_late_return_still_refunds() {
    let mut s = LimiterState::new(limits(60), T0); // one request a second
    s.lease(&ask("L1", want(6, 1)), T0);
    let expiry = T0 + LEASE_TTL_MS + LEASE_GRACE_MS;
    assert_eq!(s.status(expiry - 1).leases.live, 1);
    assert_eq!(s.next_expiry(), Some(expiry));
    assert_eq!(s.status(expiry).leases.live, 0);
    // Five seconds refilled five of the six.
    assert_eq!(rpm_level(&mut s, expiry), 59);
    let mut late = s.clone();
    assert_eq!(late.take_back(&giving_back("L1", 6, 0), expiry), SettleMatch::Late);
    assert_eq!(rpm_level(&mut late, expiry), 60);
    // Past the memory, the id is forgotten: a return then refunds nothing.
    let forgotten = expiry + LEASE_MEMORY_MS;
    s.expire(forgotten);
    assert_eq!(s.take_back(&giving_back("L1", 6, 0), forgotten), SettleMatch::Unknown);
}

#[test]
fn no_leases_while_paused_open_half_open_or_ramping() {
    let mut s = LimiterState::new(limits(1_000), T0);
    let paused = SettleRequest {
        id: "p".into(),
        outcome: Outcome::RateLimited { retry_after_ms: Some(2_000) },
        usage: None,
        signals: UpstreamSignals::default(),
        tally: Tally::default(),
    };
    s.settle(&paused, T0);
    let before = s.status(T0).buckets;
    assert_eq!(refused(&s.lease(&ask("L1", want(10, 1)), T0)), RejectCode::Paused);
    assert_eq!(s.status(T0).buckets, before, "a refusal takes nothing");
    assert_eq!(grant(&s.lease(&ask("L2", want(10, 1)), T0 + 2_000)).requests, 10);

    let ramp = BreakerConfig { ramp: vec![RampStep { pct: 50, ms: 5_000 }], ..limits(1_000).breaker };
    let mut b = LimiterState::new(Limits { breaker: ramp, ..limits(1_000) }, T0);
    trip(&mut b, T0);
    assert_eq!(refused(&b.lease(&ask("L1", want(10, 1)), T0)), RejectCode::BreakerOpen);
    let half_open = T0 + 10_000;
    assert_eq!(refused(&b.lease(&ask("L2", want(10, 1)), half_open)), RejectCode::HalfOpenProbeInFlight);
    // The probe itself may not bring a lease along.
    let probe = b.admit(&admit_req("probe", Some(LeaseAsk { id: "L3".into(), want: want(10, 1) })), half_open, 0);
    assert!(matches!(probe, AdmitDecision::Admitted { probe: true, lease: None, .. }), "{probe:?}");
    b.settle(
        &SettleRequest {
            id: "probe".into(),
            outcome: Outcome::Success,
            usage: None,
            signals: UpstreamSignals::default(),
            tally: Tally::default(),
        },
        half_open,
    );
    assert_eq!(refused(&b.lease(&ask("L4", want(10, 1)), half_open + 1)), RejectCode::Ramping);
    assert_eq!(grant(&b.lease(&ask("L5", want(10, 1)), half_open + 5_000)).requests, 10);
}

#[test]
fn no_leases_when_in_flight_requests_are_limited() {
    let mut s = LimiterState::new(Limits { max_concurrent: Some(100), ..limits(1_000) }, T0);
    assert_eq!(refused(&s.lease(&ask("L1", want(10, 1)), T0)), RejectCode::Concurrency);
}

#[test]
fn an_admit_brings_a_lease_along_unless_it_must_wait() {
    let mut s = LimiterState::new(limits(50), T0);
    let lease = Some(LeaseAsk { id: "L1".into(), want: want(20, 20) });
    match s.admit(&admit_req("r1", lease), T0, 0) {
        AdmitDecision::Admitted { lease: Some(g), remaining_requests, .. } => {
            assert_eq!(g.grant, want(5, 20));
            assert_eq!(remaining_requests, Some(44), "after both the request and the lease");
        }
        d => panic!("{d:?}"),
    }
    for i in 0..44 {
        s.admit(&admit_req(&format!("r{i}+"), None), T0, 0);
    }
    let queued = AdmitRequest {
        max_wait_ms: 5_000,
        lease: Some(LeaseAsk { id: "L2".into(), want: want(20, 20) }),
        ..admit_req("late", None)
    };
    match s.admit(&queued, T0, 0) {
        AdmitDecision::Admitted { start_after_ms, lease, .. } => {
            assert!(start_after_ms > 0);
            assert_eq!(lease, None, "a lease is never granted into debt");
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_tally_feeds_the_breaker_in_order() {
    let mut s = LimiterState::new(limits(1_000), T0);
    let failure = |id: &str, successes: u64| SettleRequest {
        id: id.into(),
        outcome: Outcome::Failure,
        usage: None,
        signals: UpstreamSignals::default(),
        tally: Tally { successes, ..Tally::default() },
    };
    s.settle(&failure("a", 0), T0);
    s.settle(&failure("b", 0), T0);
    // Local successes that came before the third failure break the run.
    s.settle(&failure("c", 4), T0);
    assert_eq!(s.status(T0).breaker.state, BreakerState::Closed);
    assert_eq!(s.status(T0).breaker.consecutive_failures, 1);
    assert_eq!(s.status(T0).leases.counts.local_successes, 4);
}

#[test]
fn a_tally_adjusts_tokens_never_requests() {
    let mut s = LimiterState::new(limits(100), T0);
    for i in 0..3 {
        s.admit(&admit_req(&format!("r{i}"), None), T0, 0);
    }
    let tally = Tally { adjust: Delta { requests: 3, tokens: 40, ..Delta::default() }, ..Tally::default() };
    assert_eq!(s.report(&tally, T0), ReportAck { breaker: BreakerState::Closed });
    assert_eq!(rpm_level(&mut s, T0), 97);
    assert_eq!(tpm_level(&mut s, T0), 1_000_000 - 60 + 40);
    s.report(&Tally { adjust: Delta { tokens: -1_000, ..Delta::default() }, ..Tally::default() }, T0);
    assert_eq!(tpm_level(&mut s, T0), 1_000_000 - 20 - 1_000);
}

#[test]
fn a_tally_gives_back_released_requests_and_tokens_but_not_the_day() {
    let l = Limits { rpd: Some(1_000), ..limits(100) };
    let mut s = LimiterState::new(l, T0);
    s.lease(&ask("L1", want(10, 10)), T0);
    s.take_back(&giving_back("L1", 0, 0), T0);
    assert_eq!((rpm_level(&mut s, T0), tpm_level(&mut s, T0)), (90, 1_000_000 - 100));
    // Two of the lease's local admissions went no further, after it was handed back.
    let tally = Tally { released: Delta { requests: 2, tokens: 20, ..Delta::default() }, ..Tally::default() };
    s.report(&tally, T0);
    assert_eq!((rpm_level(&mut s, T0), tpm_level(&mut s, T0)), (92, 1_000_000 - 80));
    assert_eq!(s.status(T0).buckets[&BucketKind::Rpd].available, 990, "the day is not known: not refunded");
    assert_eq!(s.status(T0).breaker.consecutive_failures, 0);
}

#[test]
fn a_tally_carries_the_vendor_headers() {
    let mut s = LimiterState::new(limits(100), T0);
    let signals = UpstreamSignals { remaining_requests: Some(10), ..UpstreamSignals::default() };
    s.report(&Tally { signals, ..Tally::default() }, T0);
    assert_eq!(rpm_level(&mut s, T0), 10);
    assert_eq!(s.status(T0).pause, None, "remaining headers alone do not pause");
}

#[test]
fn requests_per_day_are_refunded_only_within_the_day() {
    let l = Limits { rpd: Some(1_000), ..limits(10_000) };
    let rpd = |s: &mut LimiterState, now: u64| s.status(now).buckets[&BucketKind::Rpd].available;
    let midnight = T0 - T0 % DAY_MS + DAY_MS;
    let mut s = LimiterState::new(l.clone(), T0);
    s.lease(&ask("L1", want(50, 1)), T0);
    s.take_back(&giving_back("L1", 30, 0), T0 + 100);
    assert_eq!(rpd(&mut s, T0 + 100), 980);

    let late_evening = midnight - 1_000;
    let mut t = LimiterState::new(l, late_evening);
    t.lease(&ask("L1", want(50, 1)), late_evening);
    for i in 0..900 {
        t.admit(&admit_req(&format!("r{i}"), None), midnight + 1, 0);
    }
    t.take_back(&giving_back("L1", 50, 0), midnight + 2);
    assert_eq!(rpd(&mut t, midnight + 2), 100, "yesterday's lease does not refill today");
}

#[test]
fn leases_and_calls_survive_a_restart() {
    let mut s = LimiterState::new(limits(50), T0);
    s.handle(&LimiterRequest::Lease(ask("L1", want(20, 1))), T0, 0);
    s.handle(&LimiterRequest::Admit(admit_req("r", None)), T0, 0);
    s.handle(&LimiterRequest::Report(Tally::default()), T0, 0);
    s.handle(&LimiterRequest::Status, T0, 0);
    let mut back = LimiterState::from_snapshot(&s.to_snapshot()).unwrap();
    let status = back.status(T0);
    assert_eq!(status.leases.live, 1);
    assert_eq!(status.calls, Calls { admit: 1, settle: 0, lease: 1, report: 1, status: 1, release: 0 });
    assert_eq!(back.take_back(&giving_back("L1", 5, 0), T0), SettleMatch::Settled);
    let slim = LimiterState::from_snapshot(&s.to_snapshot_without_reservations()).unwrap();
    assert_eq!(slim.leases().in_flight(), 0);
}

#[test]
fn an_old_snapshot_without_leases_loads() {
    let mut s = LimiterState::new(limits(50), T0);
    let mut v: serde_json::Value = serde_json::from_str(&s.to_snapshot()).unwrap();
    for field in ["leases", "lease_counts", "calls"] {
        v.as_object_mut().unwrap().remove(field);
    }
    let mut back = LimiterState::from_snapshot(&v.to_string()).unwrap();
    assert_eq!(back.status(T0), s.status(T0));
}

#[test]
fn status_reports_leases_and_calls() {
    let mut s = LimiterState::new(limits(MINUTE_MS), T0);
    s.handle(&LimiterRequest::Lease(ask("L1", want(3, 1))), T0, 0);
    let v = serde_json::to_value(s.status(T0)).unwrap();
    assert_eq!(v["leases"]["live"], 1);
    assert_eq!(v["leases"]["granted"], 1);
    assert_eq!(v["leases"]["granted_requests"], 3);
    assert_eq!(v["leases"]["held"]["rq"], 3);
    assert_eq!(v["calls"]["lease"], 1);
}
