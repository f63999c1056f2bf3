use super::*;

/// A window boundary, so demand counts start clean.
const T0: u64 = 1_700_000_000_000;
const DEP: &str = "dep";

fn rpm(n: u64) -> Limits {
    Limits { rpm: Some(n), ..Limits::default() }
}

fn rpm_tpm(r: u64, t: u64) -> Limits {
    Limits { rpm: Some(r), tpm: Some(t), ..Limits::default() }
}

fn need(tokens: u64) -> Amounts {
    Amounts::request(tokens, 0)
}

fn grant(requests: u64, tokens: u64) -> LeaseGrant {
    LeaseGrant {
        grant: Amounts { requests, tokens, input: 0, output: 0 },
        ttl_ms: LEASE_TTL_MS,
        remaining_requests: Some(100),
        remaining_tokens: None,
    }
}

/// A cache holding one slice of `requests` (and `tokens`) granted at `now`.
fn holding(limits: &Limits, requests: u64, tokens: u64, now: u64) -> (LeaseLedger, String) {
    let mut c = LeaseLedger::new("iso");
    // Three within a tenth of a second ask (a large limit leases from the first request).
    let ask = (0..3).find_map(|_| c.admit(DEP, limits, need(10), now).ask).expect("an ask");
    c.granted(DEP, &ask.id, limits, &grant(requests, tokens), now).expect("a slice");
    (c, ask.id)
}

fn local(d: &Decision) -> &LocalAdmit {
    d.local.as_ref().expect("admitted locally")
}

fn returns(t: &Tally) -> Vec<(&str, Delta)> {
    t.returns.iter().map(|r| (r.id.as_str(), r.unused)).collect()
}

fn rq(requests: i64, tokens: i64) -> Delta {
    Delta { requests, tokens, ..Delta::default() }
}

// --- asking ---

/// Three requests at `now`: a rate worth a lease (see `lease_policy::HOT_TENTH`); the last decision.
fn burst(c: &mut LeaseLedger, limits: &Limits, now: u64) -> Decision {
    c.admit(DEP, limits, need(1), now);
    c.admit(DEP, limits, need(1), now);
    c.admit(DEP, limits, need(1), now)
}

#[test]
fn a_lone_request_or_a_pair_asks_nothing_the_third_in_a_tenth_asks_alongside() {
    let mut c = LeaseLedger::new("iso");
    let limits = rpm_tpm(1_000, 100_000);
    assert_eq!(c.admit(DEP, &limits, need(100), T0), Decision::default(), "to the object, as before leases");
    assert_eq!(c.admit(DEP, &limits, need(100), T0 + 1), Decision::default());
    let d = c.admit(DEP, &limits, need(100), T0 + 2);
    assert_eq!(d.local, None);
    let ask = d.ask.expect("asks alongside");
    assert_eq!(ask.id, "iso.0");
    // Three in a tenth is 30 a second, capped at twice the second's 3: 6 a second over a slice's
    // 2.75 s, a quarter spare in tokens.
    assert_eq!(ask.want, Amounts { requests: 17, tokens: 2_125, input: 2_125, output: 0 });
}

#[test]
fn a_sustained_rate_leases_an_agents_burst_does_not() {
    let limits = rpm(1_000);
    let mut c = LeaseLedger::new("iso");
    // Four calls 300 ms apart, twice: an agent's turn, no lease.
    for i in 0..8 {
        assert_eq!(c.admit(DEP, &limits, need(1), T0 + i * 300).ask, None, "call {i}");
    }
    // Fifteen within ten seconds: leasing pays.
    let asked = (8..15).find_map(|i| c.admit(DEP, &limits, need(1), T0 + i * 300).ask);
    assert!(asked.is_some());
}

#[test]
fn a_large_limit_leases_from_the_first_request() {
    let mut c = LeaseLedger::new("iso");
    let ask = c.admit(DEP, &rpm(50_000), need(1), T0).ask.expect("a slice is nothing to a limit this large");
    assert_eq!(ask.want.requests, MIN_WANT * 3, "two a second (capped) over 5.75 s");
    assert_eq!(LeaseLedger::new("iso").admit(DEP, &rpm(49_999), need(1), T0).ask, None);
}

#[test]
fn under_a_very_large_limit_a_new_isolate_asks_for_the_rate_its_first_moments_show() {
    let first = LeaseLedger::new("iso").admit(DEP, &rpm(4_000_000), need(1), T0).ask.expect("the first request asks");
    // One request just now reads as ten a second (scaled from no less than a tenth of one),
    // over a hot slice's 5.75 s.
    assert_eq!(first.want.requests, 58);
    let mut c = LeaseLedger::new("iso");
    assert_eq!(c.admit(DEP, &rpm(100_000), need(1), T0).ask.unwrap().want.requests, MIN_WANT * 3, "not scaled");
    // Seconds on, it counts as it always did.
    let mut c = LeaseLedger::new("iso");
    let limits = rpm(4_000_000);
    let ask = c.admit(DEP, &limits, need(1), T0).ask.unwrap();
    c.ask_lost(DEP, &ask.id);
    let later = c.admit(DEP, &limits, need(1), T0 + 3_000).ask.expect("asks again");
    assert_eq!(later.want.requests, MIN_WANT * 3, "1 in the last second, capped at twice the steady rate");
}

#[test]
fn after_ten_quiet_seconds_an_isolate_sizes_its_asks_as_a_new_one() {
    let limits = rpm(4_000_000);
    let mut c = LeaseLedger::new("iso");
    let ask = c.admit(DEP, &limits, need(1), T0).ask.unwrap();
    c.ask_lost(DEP, &ask.id);
    // Twenty seconds later, as a fallback's traffic arrives: one request reads as ten a second.
    let later = c.admit(DEP, &limits, need(1), T0 + 20_000).ask.expect("asks again");
    assert_eq!(later.want.requests, 58);
}

#[test]
fn a_small_limit_is_never_leased() {
    let mut c = LeaseLedger::new("iso");
    for i in 0..100 {
        assert_eq!(c.admit(DEP, &rpm(199), need(1), T0 + i), Decision::default());
    }
    let ask = c.admit(DEP, &rpm(600), need(1), T0 + 100).ask.expect("a larger limit is");
    assert_eq!(ask.want.requests, 12, "a fiftieth of the limit at most");
}

#[test]
fn a_breaker_only_deployment_leases_from_the_first_request_and_then_admits_locally() {
    let mut c = LeaseLedger::new("iso");
    let breaker_only = Limits::default();
    let first = c.admit(DEP, &breaker_only, need(100), T0);
    assert_eq!(first.local, None, "a cold isolate asks the object once");
    let ask = first.ask.expect("a lease rides along with the first admit");
    assert_eq!(ask.want, Amounts { requests: MAX_WANT, ..Amounts::default() }, "it holds nothing back");
    let g = LeaseGrant { grant: ask.want, ttl_ms: LEASE_TTL_MS, remaining_requests: None, remaining_tokens: None };
    c.granted(DEP, &ask.id, &breaker_only, &g, T0).expect("a slice");
    // One request every 400 ms: a slow trickle, still no round trip while the slice lives.
    for i in 1..=6 {
        let d = c.admit(DEP, &breaker_only, need(100), T0 + i * 400);
        assert!(d.local.is_some(), "request {i} admitted locally");
    }
    let ticket = c.admit(DEP, &breaker_only, need(100), T0 + 2_500).local.unwrap().ticket;
    let failed = c.settle_local(DEP, &ticket, &Outcome::Failure, None, &UpstreamSignals::default(), T0 + 2_600);
    let SettleAction::Now(tally) = failed else { panic!("a failure is told at once") };
    assert_eq!((tally.successes, tally.returns.len()), (0, 1), "the slice goes back with it");
    assert_eq!(c.admit(DEP, &breaker_only, need(100), T0 + 2_700).local, None, "then the object decides");
}

#[test]
fn a_fault_found_locally_is_reported_once_per_quiet_time() {
    let mut c = LeaseLedger::new("iso");
    assert!(c.report_fault(DEP, T0), "the first finding is told");
    assert!(!c.report_fault(DEP, T0 + 10), "then the isolate knows");
    assert!(!c.report_fault(DEP, T0 + MAX_QUIET_MS - 1));
    assert!(c.report_fault(DEP, T0 + MAX_QUIET_MS), "and tells again after the quiet time");
    let d = c.admit(DEP, &Limits::default(), need(1), T0 + MAX_QUIET_MS + 1);
    assert_eq!((d.local, d.ask), (None, None), "no lease is asked for while it is known faulty");
}

#[test]
fn a_slow_trickle_never_leases() {
    let mut c = LeaseLedger::new("iso");
    for i in 0..20 {
        assert_eq!(c.admit(DEP, &rpm(1_000), need(1), T0 + i * 1_500), Decision::default());
    }
}

#[test]
fn one_ask_at_a_time_until_it_is_answered_or_times_out() {
    let mut c = LeaseLedger::new("iso");
    let first = burst(&mut c, &rpm(1_000), T0).ask.unwrap();
    assert_eq!(c.admit(DEP, &rpm(1_000), need(1), T0 + 10).ask, None);
    assert_eq!(burst(&mut c, &rpm(1_000), T0 + ASK_TIMEOUT_MS - 1).ask, None);
    let second = c.admit(DEP, &rpm(1_000), need(1), T0 + ASK_TIMEOUT_MS).ask.expect("the lost ask is given up");
    assert_ne!(first.id, second.id);
    c.ask_lost(DEP, &second.id);
    assert!(c.admit(DEP, &rpm(1_000), need(1), T0 + ASK_TIMEOUT_MS + 1).ask.is_some());
}

#[test]
fn the_want_follows_the_rate() {
    let mut c = LeaseLedger::new("iso");
    let mut asks = Vec::new();
    // 200 requests a second for two seconds; answer every ask with nothing (room refusal lasts 1 s).
    for i in 0..400u64 {
        let now = T0 + i * 5;
        if let Some(ask) = c.admit(DEP, &rpm(1_000_000), need(10), now).ask {
            c.refused(DEP, &ask.id, RejectCode::Rpm, 0, now);
            asks.push((now, ask.want.requests));
        }
    }
    let late = asks.iter().rev().find(|(t, _)| *t >= T0 + 1_000).unwrap().1;
    // 200 a second over a hot slice's 5.75 s (a fiftieth of a percent of the limit lives 6 s).
    assert!((1_100..=1_250).contains(&late), "{:?}", &asks[asks.len() - 5..]);
    assert!(asks.iter().all(|&(_, w)| (MIN_WANT..=MAX_WANT).contains(&w)));
    // A burst far beyond the cap asks for the cap.
    let mut busy = LeaseLedger::new("iso");
    let mut last = 0;
    for i in 0..20_000u64 {
        if let Some(ask) = busy.admit(DEP, &rpm(u64::MAX / 4), need(1), T0 + i / 10).ask {
            busy.refused(DEP, &ask.id, RejectCode::Rpm, 0, T0 + i / 10);
            last = ask.want.requests;
        }
    }
    assert_eq!(last, MAX_WANT);
}

#[test]
fn renews_ahead_of_running_dry_and_off_the_path() {
    let limits = rpm(100_000);
    let (mut c, _) = holding(&limits, 40, 0, T0);
    let mut renewal = None;
    for i in 1..40u64 {
        let d = c.admit(DEP, &limits, need(1), T0 + i);
        assert!(d.local.is_some(), "request {i} admitted locally");
        if d.ask.is_some() {
            renewal = Some(i);
            break;
        }
    }
    let at = renewal.expect("asked before running dry");
    assert!(at < 39, "asked while still holding requests ({at})");
}

#[test]
fn renews_when_the_slice_is_about_to_expire() {
    let limits = rpm(100_000);
    let (mut c, _) = holding(&limits, 1_000, 0, T0);
    let end = T0 + LEASE_TTL_MS - EXPIRY_MARGIN_MS;
    // 20 a second: the slice has far more than it can serve, so it is its end that comes first.
    let asked = (T0 + 50..end)
        .step_by(50)
        .find(|&t| {
            let d = c.admit(DEP, &limits, need(1), t);
            assert!(d.local.is_some());
            d.ask.is_some()
        })
        .expect("asked before the end");
    assert!(end - asked <= RENEW_AHEAD_MS && end - asked >= RENEW_AHEAD_MS - 100, "asked {} ms before", end - asked);
}

#[test]
fn asks_for_what_the_slices_will_not_serve() {
    let limits = rpm(100_000);
    let (mut c, _) = holding(&limits, 30, 0, T0);
    // 100 a second (a large limit: the first request asked): the fifth sees 60 a second (six in
    // this tenth), so the 25 held last less than half a second; a slice sized at twice the
    // second's rate (12 a second) over a hot slice's 5.75 s needs 69.
    let asked: Vec<_> =
        (0..10u64).filter_map(|i| c.admit(DEP, &limits, need(1), T0 + i * 10).ask.map(|a| (i, a))).collect();
    assert_eq!(asked.len(), 1, "one ask in flight");
    assert_eq!((asked[0].0, asked[0].1.want.requests), (4, 69 - 25));
}

#[test]
fn at_most_a_few_slices_are_held() {
    let limits = rpm(1_000_000);
    let mut c = LeaseLedger::new("iso");
    for i in 0..50u64 {
        if let Some(ask) = c.admit(DEP, &limits, need(1), T0 + i).ask {
            c.granted(DEP, &ask.id, &limits, &grant(10, 0), T0 + i);
        }
    }
    assert!(c.deployments[DEP].slices.len() <= MAX_SLICES);
}

#[test]
fn in_flight_limits_mean_no_leases() {
    let limits = Limits { max_concurrent: Some(10), ..rpm(1_000) };
    let mut c = LeaseLedger::new("iso");
    assert_eq!(c.admit(DEP, &limits, need(1), T0), Decision::default());
    assert!(!leasable(&limits) && leasable(&rpm(1)));
}

// --- admitting locally ---

#[test]
fn a_slice_admits_exactly_what_it_holds_then_is_handed_back() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, id) = holding(&limits, 3, 100, T0);
    for i in 0..3 {
        let d = c.admit(DEP, &limits, need(30), T0 + i);
        let ticket = &local(&d).ticket;
        assert_eq!((&ticket.lease, ticket.taken), (&id, Amounts { requests: 1, tokens: 30, input: 0, output: 0 }));
    }
    assert_eq!(c.admit(DEP, &limits, need(1), T0 + 3).local, None, "drained");
    let tally = c.take_tally(DEP, T0 + 3);
    assert_eq!(returns(&tally), vec![(id.as_str(), rq(0, 10))], "the unused tokens go back");
}

#[test]
fn a_request_larger_than_the_slice_goes_to_the_object() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, _) = holding(&limits, 5, 100, T0);
    assert_eq!(c.admit(DEP, &limits, need(101), T0).local, None);
    assert_eq!(c.held(DEP), rq(5, 100), "nothing taken");
    assert!(c.admit(DEP, &limits, need(100), T0).local.is_some());
}

#[test]
fn only_limited_buckets_must_cover() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 2, 0, T0);
    assert!(c.admit(DEP, &limits, need(50_000), T0).local.is_some(), "tokens are not limited here");
}

#[test]
fn oldest_slice_first() {
    let limits = rpm(1_000);
    let (mut c, old) = holding(&limits, 2, 0, T0);
    c.granted(DEP, "newer", &limits, &grant(5, 0), T0 + 100);
    assert_eq!(local(&c.admit(DEP, &limits, need(1), T0 + 200)).ticket.lease, old);
    assert_eq!(local(&c.admit(DEP, &limits, need(1), T0 + 200)).ticket.lease, old);
    assert_eq!(local(&c.admit(DEP, &limits, need(1), T0 + 200)).ticket.lease, "newer");
}

#[test]
fn local_admissions_report_what_is_left() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 5, 0, T0);
    let d = c.admit(DEP, &limits, need(1), T0);
    assert_eq!(local(&d).remaining_requests, Some(104), "the object's count plus what this isolate holds");
}

#[test]
fn a_slice_stops_before_its_ttl_and_expiry_hands_it_back() {
    let limits = rpm(1_000);
    let (mut c, id) = holding(&limits, 5, 0, T0);
    let end = T0 + LEASE_TTL_MS - EXPIRY_MARGIN_MS;
    assert!(!c.expire(DEP, end - 1));
    assert!(c.admit(DEP, &limits, need(1), end - 1).local.is_some());
    assert!(c.expire(DEP, end), "something to hand back");
    assert_eq!(c.admit(DEP, &limits, need(1), end).local, None);
    assert_eq!(returns(&c.take_tally(DEP, end)), vec![(id.as_str(), rq(4, 0))]);
    assert!(!c.expire(DEP, end + 1), "nothing left to hand back");
}

#[test]
fn changed_limits_retire_the_slices() {
    let (mut c, id) = holding(&rpm(1_000), 5, 0, T0);
    assert_eq!(c.admit(DEP, &rpm(2_000), need(1), T0).local, None);
    assert_eq!(returns(&c.take_tally(DEP, T0)), vec![(id.as_str(), rq(5, 0))]);
}

#[test]
fn a_lease_granted_meanwhile_covers_a_refused_request() {
    let limits = rpm(1_000);
    let mut c = LeaseLedger::new("iso");
    assert_eq!(c.admit_held(DEP, &limits, need(1), T0), None);
    c.granted(DEP, "late", &limits, &grant(2, 0), T0);
    assert_eq!(c.admit_held(DEP, &limits, need(1), T0).map(|l| l.ticket.lease), Some("late".into()));
}

#[test]
fn an_empty_grant_installs_nothing_but_ends_the_ask() {
    let limits = rpm(1_000);
    let mut c = LeaseLedger::new("iso");
    let ask = burst(&mut c, &limits, T0).ask.unwrap();
    assert_eq!(c.granted(DEP, &ask.id, &limits, &grant(0, 0), T0), None);
    assert!(c.admit(DEP, &limits, need(1), T0 + 1).ask.is_some());
}

// --- refusals ---

#[test]
fn a_health_refusal_hands_everything_back_and_stays_quiet() {
    let limits = rpm(1_000);
    let (mut c, held) = holding(&limits, 2, 0, T0);
    let ask = c.admit(DEP, &limits, need(1), T0 + 100).ask.expect("renewal");
    assert!(c.refused(DEP, &ask.id, RejectCode::Paused, 2_000, T0 + 100));
    assert_eq!(c.admit(DEP, &limits, need(1), T0 + 200), Decision::default(), "no local admission, no ask");
    assert_eq!(returns(&c.take_tally(DEP, T0 + 200)), vec![(held.as_str(), rq(1, 0))]);
    assert!(burst(&mut c, &limits, T0 + 2_100).ask.is_some(), "asks again after the pause");
}

#[test]
fn a_refusal_for_room_keeps_the_slices() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 3, 0, T0);
    let ask = c.admit(DEP, &limits, need(1), T0 + 100).ask.expect("renewal");
    assert!(!c.refused(DEP, &ask.id, RejectCode::Rpm, 1_000, T0 + 100));
    let d = c.admit(DEP, &limits, need(1), T0 + 200);
    assert!(d.local.is_some() && d.ask.is_none());
    assert!(burst(&mut c, &limits, T0 + 1_100).ask.is_some());
}

#[test]
fn quiet_is_bounded() {
    let limits = rpm(1_000);
    let mut c = LeaseLedger::new("iso");
    let ask = burst(&mut c, &limits, T0).ask.unwrap();
    c.refused(DEP, &ask.id, RejectCode::BreakerOpen, 600_000, T0);
    assert_eq!(burst(&mut c, &limits, T0 + MAX_QUIET_MS - 1).ask, None);
    assert!(c.admit(DEP, &limits, need(1), T0 + MAX_QUIET_MS).ask.is_some());
}

#[test]
fn an_unhealthy_answer_stops_local_admission() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 5, 0, T0);
    assert!(c.unhealthy(DEP, MAX_QUIET_MS, T0));
    assert_eq!(c.admit(DEP, &limits, need(1), T0 + 1), Decision::default());
}

// --- settling ---

#[test]
fn local_settles_refund_and_charge_the_slice() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, _) = holding(&limits, 4, 1_000, T0);
    let a = local(&c.admit(DEP, &limits, need(400), T0)).ticket.clone();
    let b = local(&c.admit(DEP, &limits, need(400), T0)).ticket.clone();
    assert_eq!(c.held(DEP), rq(2, 200));
    let done = |c: &mut LeaseLedger, t: &Ticket, used: u64| {
        c.settle_local(
            DEP,
            t,
            &Outcome::Success,
            Some(TokenUsage { input: used, output: 0 }),
            &UpstreamSignals::default(),
            T0,
        )
    };
    assert_eq!(done(&mut c, &a, 100), SettleAction::Done);
    assert_eq!(c.held(DEP), rq(2, 500), "300 unused tokens are admitted against again");
    done(&mut c, &b, 1_000);
    assert_eq!(c.held(DEP), rq(2, -100), "used beyond the estimate: the slice is in debt");
    assert_eq!(c.admit(DEP, &limits, need(1), T0).local, None, "a slice in debt admits nothing");
    let tally = c.take_tally(DEP, T0);
    assert_eq!(tally.successes, 2);
}

#[test]
fn a_settle_after_the_hand_back_corrects_the_buckets() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, _) = holding(&limits, 1, 500, T0);
    let t = local(&c.admit(DEP, &limits, need(500), T0)).ticket.clone();
    c.take_tally(DEP, T0); // the drained slice went back with the last message
    let used = Some(TokenUsage { input: 200, output: 0 });
    c.settle_local(DEP, &t, &Outcome::Success, used, &UpstreamSignals::default(), T0);
    let tally = c.take_tally(DEP, T0);
    assert_eq!(tally.adjust, rq(0, 300));
    assert_eq!(tally.successes, 1);
}

#[test]
fn no_usage_keeps_the_estimate() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, _) = holding(&limits, 2, 1_000, T0);
    let t = local(&c.admit(DEP, &limits, need(400), T0)).ticket.clone();
    c.settle_local(DEP, &t, &Outcome::Neutral, None, &UpstreamSignals::default(), T0);
    assert_eq!(c.held(DEP), rq(1, 600));
    assert!(c.take_tally(DEP, T0).is_empty(), "a neutral outcome is nothing to report");
}

#[test]
fn a_failure_is_urgent_and_hands_every_slice_back() {
    let limits = rpm(1_000);
    let (mut c, id) = holding(&limits, 5, 0, T0);
    let ok = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
    let bad = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
    let quiet = UpstreamSignals::default();
    assert_eq!(c.settle_local(DEP, &ok, &Outcome::Success, None, &quiet, T0), SettleAction::Done);
    let SettleAction::Now(tally) = c.settle_local(DEP, &bad, &Outcome::Failure, None, &quiet, T0) else {
        panic!("a failure goes to the object at once");
    };
    assert_eq!(tally.successes, 1, "the success before it goes first");
    assert_eq!(returns(&tally), vec![(id.as_str(), rq(3, 0))]);
    assert_eq!(c.admit(DEP, &limits, need(1), T0 + 1).local, None);
}

#[test]
fn vendor_pauses_and_quota_are_urgent() {
    let limits = rpm(1_000);
    for (outcome, signals) in [
        (Outcome::RateLimited { retry_after_ms: None }, UpstreamSignals::default()),
        (Outcome::QuotaExhausted, UpstreamSignals::default()),
        (Outcome::Success, UpstreamSignals { retry_after_ms: Some(2_000), ..UpstreamSignals::default() }),
    ] {
        let (mut c, _) = holding(&limits, 5, 0, T0);
        let t = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
        let action = c.settle_local(DEP, &t, &outcome, None, &signals, T0);
        assert!(matches!(action, SettleAction::Now(_)), "{outcome:?} {signals:?}");
        assert_eq!(c.held(DEP), Delta::default());
    }
}

#[test]
fn a_retry_after_keeps_the_isolate_from_asking() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 5, 0, T0);
    let t = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
    let told = UpstreamSignals { retry_after_ms: Some(2_000), ..UpstreamSignals::default() };
    c.settle_local(DEP, &t, &Outcome::RateLimited { retry_after_ms: Some(2_000) }, None, &told, T0);
    assert_eq!(burst(&mut c, &limits, T0 + 1_999).ask, None);
    assert!(c.admit(DEP, &limits, need(1), T0 + 2_000).ask.is_some());
}

#[test]
fn vendor_headers_with_less_room_than_held_are_urgent() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 10, 0, T0);
    let t = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
    let tight = UpstreamSignals { remaining_requests: Some(3), ..UpstreamSignals::default() };
    assert!(matches!(c.settle_local(DEP, &t, &Outcome::Success, None, &tight, T0), SettleAction::Now(_)));
}

#[test]
fn other_vendor_headers_ride_with_the_next_message_aged() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 10, 0, T0);
    let t = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
    let roomy =
        UpstreamSignals { remaining_requests: Some(400), reset_requests_ms: Some(1_000), ..UpstreamSignals::default() };
    assert_eq!(c.settle_local(DEP, &t, &Outcome::Success, None, &roomy, T0), SettleAction::Done);
    let tally = c.take_tally(DEP, T0 + 300);
    assert_eq!(tally.signals.remaining_requests, Some(400));
    assert_eq!(tally.signals.reset_requests_ms, Some(700));
}

#[test]
fn an_object_admission_settles_with_the_pending_tally() {
    let limits = rpm(1_000);
    let (mut c, id) = holding(&limits, 5, 0, T0);
    let t = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
    c.settle_local(DEP, &t, &Outcome::Success, None, &UpstreamSignals::default(), T0);
    let none = UpstreamSignals::default();
    let ObjectSettle::Now(tally) = c.settle_object(DEP, "r1", &Outcome::Success, None, &none, false, T0) else {
        panic!("not deferrable: sent now");
    };
    assert_eq!((tally.successes, tally.returns.len()), (1, 0));
    assert_eq!(c.held(DEP), rq(4, 0), "a success keeps the slices");
    let ObjectSettle::Now(tally) = c.settle_object(DEP, "r2", &Outcome::Failure, None, &none, true, T0) else {
        panic!("a failure is never deferred");
    };
    assert_eq!(returns(&tally), vec![(id.as_str(), rq(4, 0))], "a failure hands them back");
}

#[test]
fn a_plain_success_of_an_object_admission_rides_in_a_later_tally_within_a_second() {
    let mut c = LeaseLedger::new("iso");
    let none = UpstreamSignals::default();
    let usage = Some(TokenUsage { input: 10, output: 5 });
    let first = c.settle_object(DEP, "r1", &Outcome::Success, usage, &none, true, T0);
    assert_eq!(first, ObjectSettle::Later { due_ms: Some(T0 + SETTLE_DELAY_MS) }, "the first starts a watcher");
    let second = c.settle_object(DEP, "r2", &Outcome::Success, None, &none, true, T0 + 10);
    assert_eq!(second, ObjectSettle::Later { due_ms: None }, "one watcher at a time");
    assert_eq!(c.flush_step(DEP, T0 + 500), FlushStep::WaitUntil(T0 + SETTLE_DELAY_MS));
    let tally = c.take_tally(DEP, T0 + 600);
    let ids: Vec<_> = tally.settles.iter().map(|s| (s.id.as_str(), s.usage)).collect();
    assert_eq!(ids, vec![("r1", usage), ("r2", None)], "the next message carries them");
    assert_eq!(c.flush_step(DEP, T0 + SETTLE_DELAY_MS), FlushStep::Done, "carried: the watcher ends");
    // A lost message puts them back with no watcher: the next admission starts one, once.
    c.restore_tally(DEP, tally);
    assert!(c.arm_flush(DEP));
    assert!(!c.arm_flush(DEP));
    assert_eq!(c.flush_step(DEP, T0 + 1_100), FlushStep::Send, "they waited their second");
    // The watcher's report is lost too: back again, due a second after that try, not at once.
    let lost = c.take_tally(DEP, T0 + 1_100);
    c.restore_tally(DEP, lost);
    assert_eq!(c.flush_step(DEP, T0 + 1_101), FlushStep::WaitUntil(T0 + 1_100 + SETTLE_DELAY_MS));
    // While a watcher runs, a new success starts none; once it ended, the next one does.
    assert_eq!(
        c.settle_object(DEP, "r5", &Outcome::Success, None, &none, true, T0 + 1_200),
        ObjectSettle::Later { due_ms: None }
    );
    c.take_tally(DEP, T0 + 1_300);
    assert_eq!(c.flush_step(DEP, T0 + 1_300), FlushStep::Done);
    let next = c.settle_object(DEP, "r6", &Outcome::Success, None, &none, true, T0 + 1_400);
    assert_eq!(next, ObjectSettle::Later { due_ms: Some(T0 + 1_400 + SETTLE_DELAY_MS) });
    // A 429 (urgent), a probe or an in-flight slot (not deferrable) go at once.
    let limited = Outcome::RateLimited { retry_after_ms: None };
    assert!(matches!(c.settle_object(DEP, "r3", &limited, None, &none, true, T0), ObjectSettle::Now(_)));
    assert!(matches!(c.settle_object(DEP, "r4", &Outcome::Success, None, &none, false, T0), ObjectSettle::Now(_)));
}

// --- releasing (a later layer refused the request) ---

#[test]
fn a_release_puts_the_request_back_into_its_slice() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, _) = holding(&limits, 2, 1_000, T0);
    let t = local(&c.admit(DEP, &limits, need(400), T0)).ticket.clone();
    assert_eq!(c.held(DEP), rq(1, 600));
    assert_eq!(c.release_local(DEP, &t, T0), SettleAction::Done);
    assert_eq!(c.held(DEP), rq(2, 1_000), "the request and its tokens are admitted against again");
    assert!(c.take_tally(DEP, T0).is_empty(), "no success, nothing to tell the object");
}

#[test]
fn a_release_after_the_slice_drained_rides_on_its_return_at_once() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, id) = holding(&limits, 1, 500, T0);
    let t = local(&c.admit(DEP, &limits, need(400), T0)).ticket.clone();
    assert_eq!(c.held(DEP), Delta::default(), "drained: its return waits for the next message");
    let SettleAction::Now(tally) = c.release_local(DEP, &t, T0) else { panic!("sent at once") };
    assert_eq!(returns(&tally), vec![(id.as_str(), rq(1, 500))], "handed back as if never used");
    assert!(tally.released.is_empty());
}

#[test]
fn a_release_after_the_return_was_sent_is_refunded_as_released() {
    let limits = rpm_tpm(1_000, 100_000);
    let (mut c, _) = holding(&limits, 1, 500, T0);
    let t = local(&c.admit(DEP, &limits, need(400), T0)).ticket.clone();
    c.take_tally(DEP, T0); // the drained slice went back with another message
    let SettleAction::Now(tally) = c.release_local(DEP, &t, T0) else { panic!("sent at once") };
    assert!(tally.returns.is_empty());
    assert_eq!(tally.released, rq(1, 400));
    c.restore_tally(DEP, *tally);
    assert_eq!(c.take_tally(DEP, T0).released, rq(1, 400), "a lost release goes with the next message");
}

#[test]
fn a_lost_tally_is_sent_with_the_next_message() {
    let limits = rpm(1_000);
    let (mut c, id) = holding(&limits, 5, 0, T0);
    let t = local(&c.admit(DEP, &limits, need(1), T0)).ticket.clone();
    let SettleAction::Now(lost) = c.settle_local(DEP, &t, &Outcome::Failure, None, &UpstreamSignals::default(), T0)
    else {
        panic!("urgent");
    };
    let t2 = Ticket { lease: "gone".into(), taken: need(0), limited: Limited::of(&limits) };
    c.settle_local(DEP, &t2, &Outcome::Success, None, &UpstreamSignals::default(), T0);
    c.restore_tally(DEP, *lost);
    let next = c.take_tally(DEP, T0);
    assert_eq!(next.successes, 1);
    assert_eq!(returns(&next), vec![(id.as_str(), rq(4, 0))]);
}

#[test]
fn deployments_are_separate() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 5, 0, T0);
    assert_eq!(c.admit("other", &limits, need(1), T0).local, None);
    assert_eq!(c.held("other"), Delta::default());
    assert_eq!(c.held(DEP), rq(5, 0));
}

#[test]
fn a_grant_that_arrives_after_the_deployment_failed_goes_straight_back() {
    let limits = rpm(1_000);
    let (mut c, _) = holding(&limits, 2, 0, T0);
    let d = c.admit(DEP, &limits, need(1), T0 + 10);
    let ask = d.ask.expect("renewal in flight");
    let failed =
        c.settle_local(DEP, &d.local.unwrap().ticket, &Outcome::Failure, None, &UpstreamSignals::default(), T0);
    assert!(matches!(failed, SettleAction::Now(_)));
    assert_eq!(c.granted(DEP, &ask.id, &limits, &grant(30, 0), T0 + 20), Some(T0 + 20), "hand back at once");
    assert_eq!(c.admit_held(DEP, &limits, need(1), T0 + 20), None);
    assert!(c.expire(DEP, T0 + 20));
    assert_eq!(returns(&c.take_tally(DEP, T0 + 20)), vec![(ask.id.as_str(), rq(30, 0))]);
}

// --- sparing the object (lease_policy) ---

#[test]
fn a_room_refusal_is_repeated_locally_for_a_moment() {
    let limits = rpm(1_000);
    let mut c = LeaseLedger::new("iso");
    assert_eq!(c.held_off(DEP, 1_000, T0), None);
    c.room_refused(DEP, RejectCode::Rpm, 1_400, 1_000, T0);
    assert_eq!(c.held_off(DEP, 1_000, T0 + 10), Some((RejectCode::Rpm, 1_390)), "retry when the object said");
    assert_eq!(c.held_off(DEP, 30_000, T0 + 10), None, "a request that can wait longer still asks");
    assert_eq!(c.held_off(DEP, 1_000, T0 + 1_000), None, "for a second at most");
    assert_eq!(c.held_off("other", 1_000, T0 + 10), None, "per deployment");
    // Asks still go while held: slices carry what the refill brings.
    assert!(burst(&mut c, &limits, T0 + 20).ask.is_some());
}

#[test]
fn only_bucket_refusals_are_repeated() {
    let mut c = LeaseLedger::new("iso");
    for code in [RejectCode::Concurrency, RejectCode::FairShare, RejectCode::BreakerOpen] {
        c.room_refused(DEP, code, 1_000, 1_000, T0);
        assert_eq!(c.held_off(DEP, 1_000, T0 + 1), None, "{code:?}");
    }
    c.room_refused(DEP, RejectCode::Tpm, 300, 1_000, T0);
    assert_eq!(c.held_off(DEP, 1_000, T0 + 299), Some((RejectCode::Tpm, 1)));
    assert_eq!(c.held_off(DEP, 1_000, T0 + 300), None);
}

#[test]
fn a_failed_call_backs_off_for_a_second() {
    let mut c = LeaseLedger::new("iso");
    assert!(!c.backing_off(DEP, T0));
    c.unreachable(DEP, T0);
    assert!(c.backing_off(DEP, T0 + 999));
    assert!(!c.backing_off(DEP, T0 + 1_000));
    assert!(!c.backing_off("other", T0 + 1));
}

#[test]
fn a_busy_isolate_leaves_expired_returns_to_its_next_ask() {
    let limits = rpm(1_000);
    let (mut c, first) = holding(&limits, 50, 0, T0);
    c.granted(DEP, "second", &limits, &grant(100, 0), T0 + 1_000).unwrap();
    // Ten a second: the first slice is not drained before it expires.
    for t in (T0..T0 + 2_800).step_by(100) {
        assert!(c.admit(DEP, &limits, need(1), t).local.is_some());
    }
    assert!(!c.expire(DEP, T0 + 2_800), "a slice is left and the isolate is busy: the next ask carries it");
    assert_eq!(returns(&c.take_tally(DEP, T0 + 2_800)), vec![(first.as_str(), rq(50 - 28, 0))]);
    // Quiet: the last slice's expiry sends the tally itself.
    assert!(c.expire(DEP, T0 + 1_000 + LEASE_TTL_MS + 15_000));
}

#[test]
fn a_long_round_trip_renews_earlier() {
    let limits = rpm(100_000);
    let ask_at = |rtt: u64| {
        let mut c = LeaseLedger::new("iso");
        let ask = c.admit(DEP, &limits, need(1), T0).ask.expect("a large limit asks at once");
        c.granted(DEP, &ask.id, &limits, &grant(60, 0), T0 + rtt).unwrap();
        // 20 a second from the grant on: the first time an ask goes.
        (T0 + rtt..T0 + 10_000).step_by(50).find(|&t| c.admit(DEP, &limits, need(1), t).ask.is_some()).unwrap()
    };
    let near = ask_at(10);
    let far = ask_at(400);
    assert!(far - 400 < near - 10, "far asks sooner after its grant: {} vs {}", far - T0 - 400, near - T0 - 10);
}

// --- waiting for an ask in flight ---

#[test]
fn a_request_no_slice_covers_waits_for_the_ask_in_flight_and_then_admits_locally() {
    let mut c = LeaseLedger::new("iso");
    let limits = rpm(100_000);
    let ask = c.admit(DEP, &limits, need(1), T0).ask.expect("a large limit asks with the first request");
    // A cold isolate: its second and third requests wait for that answer instead of calling.
    for i in 1..3 {
        let d = c.admit(DEP, &limits, need(1), T0 + i);
        assert_eq!((d.local.is_none(), d.ask.is_none()), (true, true));
        assert_eq!(d.wait_until_ms, Some(T0 + MAX_ASK_WAIT_MS), "at most until the ask is given up");
    }
    c.granted(DEP, &ask.id, &limits, &grant(20, 0), T0 + 60).expect("a slice");
    let d = c.admit_again(DEP, &limits, need(1), T0 + 60, true);
    assert!(d.local.is_some(), "the grant covers the waiter");
    assert_eq!(d.wait_until_ms, None);
}

#[test]
fn waiters_a_grant_does_not_cover_wait_for_the_next_ask() {
    let mut c = LeaseLedger::new("iso");
    let limits = rpm(100_000);
    let ask = c.admit(DEP, &limits, need(1), T0).ask.unwrap();
    for i in 1..30 {
        assert!(c.admit(DEP, &limits, need(1), T0 + i).wait_until_ms.is_some());
    }
    c.granted(DEP, &ask.id, &limits, &grant(ask.want.requests, 0), T0 + 60);
    let (mut local, mut waiting, mut asks) = (0, 0, Vec::new());
    for _ in 1..30 {
        let d = c.admit_again(DEP, &limits, need(1), T0 + 60, true);
        asks.extend(d.ask);
        match (d.local.is_some(), d.wait_until_ms.is_some()) {
            (true, false) => local += 1,
            (false, true) => waiting += 1,
            other => panic!("neither admitted nor waiting: {other:?}"),
        }
    }
    // The grant covers what it holds; one request asks again (the renewal) and the rest wait for it.
    assert_eq!((local, waiting), (ask.want.requests, 29 - ask.want.requests));
    assert_eq!(asks.len(), 1);
}

#[test]
fn what_a_waiting_request_may_get_moves_the_change_count() {
    let limits = rpm(100_000);
    let mut c = LeaseLedger::new("iso");
    let ask = c.admit(DEP, &limits, need(1), T0).ask.unwrap();
    let mut last = c.changes(DEP);
    let mut moved = |c: &LeaseLedger, what: &str| {
        let now = c.changes(DEP);
        assert!(now > last, "{what} moves the count");
        last = now;
    };
    c.granted(DEP, &ask.id, &limits, &grant(10, 0), T0 + 10);
    moved(&c, "a grant");
    let d = c.admit(DEP, &limits, need(1), T0 + 11);
    c.release_local(DEP, &local(&d).ticket, T0 + 12);
    moved(&c, "a release into the slice");
    let renewal = d.ask.or_else(|| (0..40).find_map(|i| c.admit(DEP, &limits, need(1), T0 + 13 + i).ask));
    c.ask_lost(DEP, &renewal.expect("a renewal").id);
    moved(&c, "an ask given up");
    c.unhealthy(DEP, 1_000, T0 + 60);
    moved(&c, "slices handed back");
}

#[test]
fn no_waiting_once_the_wait_is_spent_or_no_grant_will_cover() {
    let limits = rpm(100_000);
    let asking = || {
        let mut c = LeaseLedger::new("iso");
        let ask = c.admit(DEP, &limits, need(1), T0).ask.unwrap();
        (c, ask)
    };
    let (mut c, _) = asking();
    assert_eq!(c.admit_again(DEP, &limits, need(1), T0 + 5, false).wait_until_ms, None, "its wait is spent");
    let d = c.admit(DEP, &limits, need(1), T0 + MAX_ASK_WAIT_MS);
    assert_eq!((d.wait_until_ms, d.ask.is_some()), (None, true), "the ask is given up and asked anew");

    let (mut c, ask) = asking();
    c.granted(DEP, &ask.id, &limits, &grant(ask.want.requests, 0), T0 + 50);
    c.room_refused(DEP, RejectCode::Rpm, 500, 1_000, T0 + 60);
    let asked: Vec<_> =
        (0..ask.want.requests).filter_map(|i| c.admit(DEP, &limits, need(1), T0 + 61 + i).ask).collect();
    assert_eq!(asked.len(), 1);
    let d = c.admit(DEP, &limits, need(1), T0 + 100);
    assert_eq!((d.local, d.wait_until_ms), (None, None), "held: refused here rather than after a wait");

    let (mut c, _) = asking();
    c.unreachable(DEP, T0 + 1);
    assert_eq!(c.admit(DEP, &limits, need(1), T0 + 2).wait_until_ms, None, "unreachable: fail open, as before");

    let (mut c, _) = asking();
    c.unhealthy(DEP, 1_000, T0 + 1);
    assert_eq!(c.admit(DEP, &limits, need(1), T0 + 2).wait_until_ms, None, "unhealthy: the object decides");

    // A grant cut short for room: the next ask's waiters would wait for crumbs.
    let (mut c, ask) = asking();
    c.granted(DEP, &ask.id, &limits, &grant(ask.want.requests - 1, 0), T0 + 50);
    let asked: Vec<_> =
        (0..ask.want.requests).filter_map(|i| c.admit(DEP, &limits, need(1), T0 + 51 + i).ask).collect();
    assert_eq!(asked.len(), 1, "the slice drained and a renewal is in flight");
    let d = c.admit(DEP, &limits, need(1), T0 + 300);
    assert_eq!((d.local, d.wait_until_ms), (None, None), "to the object, which may queue it for the refill");
    let later = T0 + 50 + limiter::leases::LEASE_RETRY_MS;
    assert!(c.admit(DEP, &limits, need(1), later).wait_until_ms.is_some(), "a while later, waiting again");
}

// --- asking the location's relay ---

fn relayed(limits: &Limits, now: u64) -> (LeaseLedger, LeaseAsk) {
    let mut c = LeaseLedger::new("iso").with_relay();
    let d = (0..3).map(|_| c.admit(DEP, limits, need(1), now)).find(|d| d.ask.is_some()).expect("an ask");
    assert!(d.via_relay && d.local.is_none());
    (c, d.ask.expect("an ask for the relay"))
}

#[test]
fn with_a_relay_the_ask_goes_there_and_the_request_waits_for_its_answer() {
    let limits = rpm_tpm(1_000_000, 100_000_000);
    let (mut c, ask) = relayed(&limits, T0);
    assert_eq!(ask.id, "iso.r0");
    assert!(from_relay(&ask.id) && !from_relay("iso.0") && !from_relay("rr.0"));
    let d = c.admit_again(DEP, &limits, need(1), T0 + 1, true);
    assert_eq!((d.local.is_none(), d.ask.is_none()), (true, true));
    assert_eq!(d.wait_until_ms, Some(T0 + ASK_TIMEOUT_MS), "waits for the relay's answer");
    c.granted(DEP, &ask.id, &limits, &grant(100, 10_000), T0 + 3);
    let d = c.admit_again(DEP, &limits, need(1), T0 + 3, true);
    assert_eq!(local(&d).ticket.lease, "iso.r0");
}

#[test]
fn the_relays_slices_go_back_to_the_relay_only() {
    let limits = rpm(1_000_000);
    let (mut c, ask) = relayed(&limits, T0);
    c.granted(DEP, &ask.id, &limits, &grant(1, 0), T0 + 2);
    local(&c.admit_again(DEP, &limits, need(0), T0 + 2, true));
    assert!(c.relay_pending(DEP), "drained: back to the relay");
    let to_object = c.take_tally(DEP, T0 + 3);
    assert!(to_object.returns.is_empty(), "never to the object");
    assert!(c.relay_pending(DEP));
    let to_relay = c.take_relay_tally(DEP, T0 + 3);
    assert_eq!(returns(&to_relay), vec![("iso.r0", rq(0, 0))]);
    assert!(!c.relay_pending(DEP));
    // A lost report puts the return back where it belongs.
    c.restore_tally(DEP, to_relay);
    assert!(c.relay_pending(DEP) && c.take_tally(DEP, T0 + 4).returns.is_empty());
}

#[test]
fn a_released_admission_of_a_returned_relay_slice_goes_with_that_return() {
    let limits = rpm(1_000_000);
    let (mut c, ask) = relayed(&limits, T0);
    c.granted(DEP, &ask.id, &limits, &grant(1, 0), T0 + 2);
    let ticket = local(&c.admit_again(DEP, &limits, need(0), T0 + 2, true)).ticket.clone();
    assert_eq!(c.release_local(DEP, &ticket, T0 + 3), SettleAction::Done, "the relay's report carries it");
    assert_eq!(returns(&c.take_relay_tally(DEP, T0 + 3)), vec![("iso.r0", rq(1, 0))]);
}

/// A relayed ledger whose relay call failed at `now`: its asks go to the object for a while.
fn relay_down(limits: &Limits, now: u64) -> LeaseLedger {
    let (mut c, ask) = relayed(limits, T0);
    c.ask_lost(DEP, &ask.id);
    c.relay_failed(DEP, now);
    c
}

#[test]
fn a_failed_relay_sends_asks_alongside_object_admits_for_a_while() {
    let limits = rpm(1_000_000);
    let mut c = relay_down(&limits, T0 + 5);
    let d = c.admit(DEP, &limits, need(1), T0 + 6);
    assert!(!d.via_relay);
    assert_eq!(d.ask.expect("asks the object").id, "iso.1");
    c.ask_lost(DEP, "iso.1");
    let d = c.admit(DEP, &limits, need(1), T0 + 5 + RELAY_BACKOFF_MS);
    assert!(d.via_relay, "the relay again after the backoff");
}

#[test]
fn the_relay_hears_of_an_unhealthy_deployment_from_an_isolate_that_used_it() {
    let limits = rpm(1_000_000);
    let (mut c, ask) = relayed(&limits, T0);
    c.granted(DEP, &ask.id, &limits, &grant(100, 0), T0 + 2);
    assert!(c.unhealthy(DEP, 2_000, T0 + 10), "its slice goes back");
    assert!(c.relay_pending(DEP));
    let told = c.take_relay_tally(DEP, T0 + 11);
    assert!(told.unhealthy);
    assert_eq!(returns(&told), vec![("iso.r0", rq(100, 0))]);
    assert!(!c.relay_pending(DEP));
    // An isolate that never asked the relay has nothing to tell it.
    let mut other = LeaseLedger::new("iso").with_relay();
    other.unhealthy(DEP, 2_000, T0);
    assert!(!other.relay_pending(DEP));
}

#[test]
fn the_objects_own_slices_never_go_to_the_relay() {
    let limits = rpm(1_000_000);
    let mut c = relay_down(&limits, T0 + 1);
    let object_ask = c.admit(DEP, &limits, need(0), T0 + 2).ask.expect("asks the object");
    c.granted(DEP, &object_ask.id, &limits, &grant(1, 0), T0 + 3);
    local(&c.admit(DEP, &limits, need(0), T0 + 4));
    assert!(c.object_returns_pending(DEP), "drained: back to the object");
    let to_relay = c.take_relay_tally(DEP, T0 + 5);
    assert!(to_relay.returns.is_empty(), "{to_relay:?}");
    assert_eq!(returns(&c.take_tally(DEP, T0 + 5)), vec![("iso.1", rq(0, 0))]);
}

#[test]
fn the_relays_own_word_is_not_told_back_to_it() {
    let limits = rpm(1_000_000);
    let (mut c, ask) = relayed(&limits, T0);
    c.granted(DEP, &ask.id, &limits, &grant(100, 0), T0 + 2);
    assert!(c.relay_unhealthy(DEP, 2_000, T0 + 10));
    assert!(!c.take_relay_tally(DEP, T0 + 11).unhealthy, "no echo");
}
