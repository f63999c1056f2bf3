use super::*;
use crate::protocol::LateSettle;
use crate::rng::XorShift;

const T: u64 = 1_700_000_000_000;

fn rpm_tpm() -> Limits {
    Limits { rpm: Some(600_000), tpm: Some(600_000_000), ..Limits::default() }
}

fn ask(id: &str, requests: u64) -> LeaseRequest {
    LeaseRequest {
        id: id.to_string(),
        want: Amounts { requests, tokens: requests * 1_000, input: 0, output: 0 },
        limits: Some(rpm_tpm()),
        tally: Tally::default(),
    }
}

fn granted(requests: u64, ttl_ms: u64) -> LeaseGrant {
    LeaseGrant {
        grant: Amounts { requests, tokens: requests * 1_000, input: 0, output: 0 },
        ttl_ms,
        remaining_requests: Some(1_000),
        remaining_tokens: None,
    }
}

fn now(answer: SubAnswer) -> LeaseGrant {
    match answer {
        SubAnswer::Now(d) => sub_of(&d),
        SubAnswer::Wait => panic!("expected an answer now"),
    }
}

fn sub_of(decision: &LeaseDecision) -> LeaseGrant {
    match decision {
        LeaseDecision::Granted(g) => *g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// A relay holding one parent of `requests` for 6 s, granted at `T`.
fn warm(requests: u64) -> Relay {
    let mut relay = Relay::new("r");
    let (answer, up) = relay.ask(&ask("i.0", 1), T);
    assert_eq!(answer, SubAnswer::Wait);
    let up = up.expect("a cold relay asks the object");
    relay.upstream_granted(&up.id, &granted(requests, 6_000), T);
    relay
}

#[test]
fn a_cold_relay_asks_once_and_the_waiting_asks_are_carved_from_the_answer() {
    let mut relay = Relay::new("r");
    let (answer, up) = relay.ask(&ask("a.0", 100), T);
    assert_eq!(answer, SubAnswer::Wait);
    let up = up.expect("ask the object");
    assert_eq!(up.want.requests, 800, "room for eight asks like the first");
    assert_eq!(up.want.tokens, 800_000, "with its mix");
    assert_eq!(up.limits, Some(rpm_tpm()));
    let (second, none) = relay.ask(&ask("b.0", 50), T + 5);
    assert_eq!((second, none), (SubAnswer::Wait, None), "one ask to the object at a time");
    let before = relay.changes();
    relay.upstream_granted(&up.id, &granted(800, 6_000), T + 80);
    assert_ne!(relay.changes(), before);
    let (a, renew) = relay.ask_again(&ask("a.0", 100), T + 81);
    let (b, _) = relay.ask_again(&ask("b.0", 50), T + 81);
    assert_eq!((now(a.clone()).grant.requests, now(b).grant.requests), (100, 50));
    assert_eq!(now(a).ttl_ms, 6_000 - PARENT_MARGIN_MS + 80 - 81, "a sub ends with its parent");
    assert_eq!(relay.held().requests, 650);
    assert!(renew.is_none());
    assert_eq!(relay.status().counts.upstream_asks, 1);
}

#[test]
fn a_short_parent_waits_for_a_larger_one_and_gives_what_it_has_when_the_wait_is_over() {
    let mut relay = warm(30);
    let (answer, up) = relay.ask(&ask("a.0", 40), T + 10);
    assert_eq!(answer, SubAnswer::Wait, "a whole sub from the next parent");
    let up = up.expect("asks the object for more");
    assert_eq!(up.want.requests, 320);
    let sub = sub_of(&relay.give_up(&ask("a.0", 40), T + 3_000));
    assert_eq!((sub.grant.requests, sub.grant.tokens), (30, 30_000), "scaled, keeping the mix");
}

#[test]
fn a_parent_with_room_renews_ahead_when_the_asks_outrun_it() {
    let mut relay = warm(100);
    let first = now(relay.ask(&ask("a.0", 40), T + 10).0);
    assert_eq!(first.grant.requests, 40);
    let (answer, up) = relay.ask(&ask("b.0", 40), T + 20);
    assert_eq!(now(answer).grant.requests, 40);
    assert!(up.is_some(), "20 left against 81 asked lately: renew ahead");
}

#[test]
fn a_parent_near_its_end_grants_nothing() {
    let mut relay = warm(1_000);
    let end = T + 6_000 - PARENT_MARGIN_MS;
    let (answer, up) = relay.ask(&ask("a.0", 10), end - MIN_SUB_MS + 1);
    assert_eq!(answer, SubAnswer::Wait, "waits for a fresh parent");
    assert!(up.is_some());
}

#[test]
fn a_retried_ask_gets_the_same_sub() {
    let mut relay = warm(1_000);
    let (first, _) = relay.ask(&ask("a.0", 10), T + 10);
    let (again, _) = relay.ask(&ask("a.0", 10), T + 20);
    assert_eq!(
        sub_of(match &first {
            SubAnswer::Now(d) => d,
            _ => unreachable!(),
        })
        .grant
        .requests,
        10
    );
    assert!(matches!(again, SubAnswer::Now(LeaseDecision::Granted(g)) if g.grant.requests == 10));
    assert_eq!(relay.held().requests, 990, "carved once");
}

fn returning(id: &str, requests: i64, tokens: i64) -> Tally {
    Tally {
        returns: vec![LeaseReturn { id: id.to_string(), unused: Delta { requests, tokens, ..Delta::default() } }],
        ..Tally::default()
    }
}

#[test]
fn a_sub_handed_back_goes_into_its_parent_once() {
    let mut relay = warm(1_000);
    relay.ask(&ask("a.0", 100), T + 10);
    assert_eq!(relay.held().requests, 900);
    relay.report(&returning("a.0", 60, 70_000), T + 20);
    assert_eq!(relay.held().requests, 960);
    assert_eq!(relay.held().tokens, 970_000);
    relay.report(&returning("a.0", 60, 70_000), T + 30);
    assert_eq!(relay.held().requests, 960, "a resent return is ignored");
    assert_eq!(relay.due_report(T + 31), None, "nothing for the object");
}

#[test]
fn a_return_never_refunds_more_than_the_sub_took() {
    let mut relay = warm(1_000);
    relay.ask(&ask("a.0", 100), T + 10);
    relay.report(&returning("a.0", 500, 0), T + 20);
    assert_eq!(relay.held().requests, 1_000);
}

#[test]
fn a_parent_at_its_end_goes_back_and_late_subs_go_to_the_object_as_released() {
    let mut relay = warm(1_000);
    relay.ask(&ask("a.0", 100), T + 10);
    let end = T + 6_000 - PARENT_MARGIN_MS;
    assert_eq!(relay.next_due_ms(), Some(end));
    assert_eq!(relay.due_report(end), None, "goes back with an ask within a few seconds");
    let report = relay.due_report(end + REFUND_WITHIN_MS).expect("the parent goes back");
    assert_eq!(report.returns.len(), 1);
    assert_eq!(report.returns[0].unused.requests, 900);
    relay.report(&returning("a.0", 40, -5_000), end + 100);
    assert_eq!(relay.due_report(end + 100), None, "not at once");
    let late = relay.due_report(end + 100 + REFUND_WITHIN_MS).expect("due");
    assert_eq!(late.released, Delta { requests: 40, ..Delta::default() });
    assert_eq!(late.adjust, Delta { tokens: -5_000, ..Delta::default() }, "used beyond: charged");
    relay.report(&returning("a.0", 40, 0), end + 2_000);
    assert_eq!(relay.due_report(end + 10_000), None, "never twice");
    assert_eq!(relay.status().counts.returned_late, 1);
}

#[test]
fn an_unknown_return_is_charged_and_never_refunded() {
    let mut relay = Relay::new("r");
    relay.report(&returning("lost.3", 10, -300), T);
    let report = relay.due_report(T + REFUND_WITHIN_MS).expect("the charge goes on");
    assert_eq!(report.released, Delta::default());
    assert_eq!(report.adjust.tokens, -300);
}

#[test]
fn the_rest_of_a_tally_is_forwarded_successes_within_a_second_refunds_within_five() {
    let mut relay = warm(1_000);
    let tally = Tally { adjust: Delta { tokens: 900, ..Delta::default() }, ..Tally::default() };
    relay.report(&tally, T + 100);
    assert_eq!(relay.next_due_ms(), Some(T + 100 + REFUND_WITHIN_MS));
    let settle = LateSettle { id: "r1".into(), usage: None };
    relay.report(&Tally { successes: 7, settles: vec![settle], ..Tally::default() }, T + 200);
    assert_eq!(relay.next_due_ms(), Some(T + 200 + FORWARD_WITHIN_MS), "a settle and successes are due sooner");
    assert_eq!(relay.due_report(T + 500), None);
    let sent = relay.due_report(T + 1_200).expect("due");
    assert_eq!((sent.successes, sent.adjust.tokens, sent.settles.len()), (7, 900, 1));
    // An ask to the object before then carries it instead.
    relay.report(&Tally { successes: 2, ..Tally::default() }, T + 1_200);
    let (_, up) = relay.ask(&ask("big", 5_000), T + 1_300);
    assert_eq!(up.expect("short: asks").tally.successes, 2);
    assert_eq!(relay.due_report(T + 5_000), None);
}

#[test]
fn a_health_refusal_hands_every_parent_back_and_refuses_isolates_meanwhile() {
    let mut relay = warm(1_000);
    let (_, up) = relay.ask(&ask("a.0", 900), T + 10);
    let up = up.expect("renews ahead");
    relay.upstream_refused(&up.id, RejectCode::BreakerOpen, 2_000, T + 50);
    let report = relay.due_report(T + 50).expect("parents go back at once");
    assert_eq!(report.returns.len(), 1);
    let (answer, up) = relay.ask(&ask("b.0", 1), T + 60);
    assert_eq!(answer, SubAnswer::Now(LeaseDecision::Refused { code: RejectCode::BreakerOpen, retry_after_ms: 1_990 }));
    assert!(up.is_none());
    let (_, up) = relay.ask(&ask("c.0", 1), T + 2_050);
    assert!(up.is_some(), "asks again once the quiet time is over");
}

#[test]
fn a_room_refusal_refuses_isolates_without_asking_again() {
    let mut relay = Relay::new("r");
    let (_, up) = relay.ask(&ask("a.0", 10), T);
    relay.upstream_refused(&up.unwrap().id, RejectCode::Tpm, 800, T + 40);
    let refusal = LeaseDecision::Refused { code: RejectCode::Tpm, retry_after_ms: 1_000 };
    assert_eq!(relay.ask_again(&ask("a.0", 10), T + 41), (SubAnswer::Now(refusal), None));
    let (answer, up) = relay.ask(&ask("b.0", 10), T + 100);
    assert!(matches!(answer, SubAnswer::Now(LeaseDecision::Refused { code: RejectCode::Tpm, .. })));
    assert!(up.is_none(), "held until the object's retry time");
    assert!(relay.ask(&ask("c.0", 10), T + 840).1.is_some());
}

#[test]
fn a_lost_call_keeps_what_it_carried_and_backs_off() {
    let mut relay = Relay::new("r");
    relay.report(&Tally { successes: 3, ..Tally::default() }, T);
    let (_, up) = relay.ask(&ask("a.0", 10), T + 1);
    let up = up.unwrap();
    assert_eq!(up.tally.successes, 3);
    relay.upstream_lost(Some(&up.id), up.tally, T + 5_001);
    assert!(matches!(relay.ask_again(&ask("a.0", 10), T + 5_002).0, SubAnswer::Now(LeaseDecision::Refused { .. })));
    assert!(relay.ask(&ask("b.0", 10), T + 5_003).1.is_none(), "backs off");
    let sent = relay.due_report(T + 5_001 + UPSTREAM_BACKOFF_MS).expect("tries again");
    assert_eq!(sent.successes, 3);
}

#[test]
fn parents_serve_asks_under_their_own_limits_only() {
    let mut relay = warm(1_000);
    let mut other = ask("a.0", 10);
    other.limits = Some(Limits { rpm: Some(900_000), ..Limits::default() });
    let (answer, up) = relay.ask(&other, T + 10);
    assert_eq!(answer, SubAnswer::Wait, "the parent under the other limits does not serve it");
    let up = up.expect("asks under the new limits");
    assert_eq!(up.limits, other.limits);
    relay.upstream_granted(&up.id, &granted(500, 6_000), T + 50);
    assert_eq!(now(relay.ask_again(&other, T + 51).0).grant.requests, 10);
    // An isolate still on the old table is served by the old parent.
    assert_eq!(now(relay.ask(&ask("b.0", 20), T + 60).0).grant.requests, 20);
    assert_eq!(relay.held().requests, 1_000 - 20 + 500 - 10);
}

#[test]
fn a_late_answer_to_an_ask_given_up_goes_straight_back() {
    let mut relay = Relay::new("r");
    let (_, up) = relay.ask(&ask("a.0", 10), T);
    let up = up.unwrap();
    relay.upstream_lost(Some(&up.id), up.tally, T + 5_000);
    relay.upstream_granted(&up.id, &granted(80, 6_000), T + 5_100);
    assert_eq!(relay.status().parents, 0);
    let back = relay.due_report(T + 5_100 + REFUND_WITHIN_MS).expect("returned");
    assert_eq!(returns_of(&back), vec![(up.id.as_str(), 80)]);
}

#[test]
fn a_grant_cut_short_holds_further_asks_for_a_moment() {
    let mut relay = Relay::new("r");
    let (_, up) = relay.ask(&ask("a.0", 10), T);
    let up = up.unwrap();
    relay.upstream_granted(&up.id, &granted(5, 6_000), T + 40);
    let (answer, again) = relay.ask_again(&ask("a.0", 10), T + 41);
    assert!(again.is_none(), "no ask to the object right after a short grant");
    assert_eq!(now(answer).grant.requests, 5, "what is left");
}

fn returns_of(t: &Tally) -> Vec<(&str, i64)> {
    t.returns.iter().map(|r| (r.id.as_str(), r.unused.requests)).collect()
}

/// Whatever isolates ask and return, in any order, the relay never gives the object back more
/// than it was granted, and never grants isolates more than its parents held.
#[test]
fn conservation_under_random_traffic() {
    for seed in 1..=40u64 {
        let mut rng = XorShift::new(seed);
        let mut relay = Relay::new("r");
        let (mut granted_up, mut refunded, mut given) = (0i64, 0i64, 0i64);
        let mut outstanding: Vec<(String, u64)> = Vec::new();
        let mut now = T;
        for step in 0..2_000u64 {
            now += rng.next_u64() % 40;
            let roll = rng.next_u64() % 10;
            if roll < 5 {
                let id = format!("i.{step}");
                let want = 1 + rng.next_u64() % 300;
                let (answer, up) = relay.ask(&ask(&id, want), now);
                if let Some(up) = up {
                    if rng.next_u64().is_multiple_of(4) {
                        relay.upstream_lost(Some(&up.id), up.tally, now);
                    } else {
                        refunded += back(&up.tally);
                        let n = rng.next_u64() % 500;
                        granted_up += n as i64;
                        relay.upstream_granted(&up.id, &granted(n, 3_000 + rng.next_u64() % 3_000), now);
                    }
                }
                let decision = match answer {
                    SubAnswer::Now(d) => d,
                    SubAnswer::Wait => relay.give_up(&ask(&id, want), now),
                };
                if let LeaseDecision::Granted(g) = decision {
                    given += g.grant.requests as i64;
                    outstanding.push((id, g.grant.requests));
                }
            } else if roll < 9 && !outstanding.is_empty() {
                let i = (rng.next_u64() % outstanding.len() as u64) as usize;
                let (id, took) = outstanding.swap_remove(i);
                let unused = (rng.next_u64() % (took + 1)) as i64;
                given -= unused;
                relay.report(&returning(&id, unused, 0), now);
                if rng.next_u64().is_multiple_of(3) {
                    relay.report(&returning(&id, unused, 0), now + 1);
                }
            } else if let Some(t) = relay.due_report(now) {
                refunded += back(&t);
            }
            let held = relay.held().requests;
            assert!(held >= 0, "seed {seed}: a parent went below zero");
            assert!(given + held + refunded <= granted_up, "seed {seed} step {step}");
        }
        // Everything that was granted is accounted for: held, given out (used or outstanding), or back.
        let pending = relay.due_report(now + 60_000).map_or(0, |t| back(&t));
        assert!(given + refunded + pending <= granted_up, "seed {seed}");
    }
}

/// The requests a message gives back to the object.
fn back(t: &Tally) -> i64 {
    t.returns.iter().map(|r| r.unused.requests).sum::<i64>() + t.released.requests
}

#[test]
fn an_isolate_that_heard_of_a_trip_stops_the_relay_at_once() {
    let mut relay = warm(1_000);
    relay.ask(&ask("a.0", 10), T + 10);
    let tally = Tally { unhealthy: true, ..returning("a.0", 10, 0) };
    relay.report(&tally, T + 20);
    assert!(relay.is_quiet(T + 21));
    let (answer, up) = relay.ask(&ask("b.0", 1), T + 30);
    assert!(matches!(answer, SubAnswer::Now(LeaseDecision::Refused { code: RejectCode::BreakerOpen, .. })));
    assert!(up.is_none());
    let back = relay.due_report(T + 20).expect("its parents go back at once");
    assert_eq!(back.returns[0].unused.requests, 1_000);
    assert!(!back.unhealthy, "the object heard it from the isolate");
    assert!(!relay.is_quiet(T + 20 + UNHEALTHY_QUIET_MS));
}

#[test]
fn a_quiet_time_running_is_never_shortened() {
    let mut relay = warm(1_000);
    relay.unhealthy(RejectCode::BreakerOpen, 4_000, T + 10);
    relay.unhealthy(RejectCode::BreakerOpen, 1_000, T + 20);
    assert!(relay.is_quiet(T + 4_009));
    assert!(!relay.is_quiet(T + 4_010));
}
