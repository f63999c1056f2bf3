//! Tenant budgets end to end. A tenant whose monthly hard budget pays for about two dozen
//! requests sends a few alone (the soft-limit header must appear once its spend is past the soft
//! limit, never before), then 100 at once, then more until the budget is spent. The settled
//! spend stays within the hard limit plus what under-estimated reservations could add (nothing
//! here: every estimate is an upper bound); every refusal is a 402 `budget_exceeded` with its
//! limit headers and made no upstream call; settles refund what estimates overstated, so the
//! budget is used up to the last request that fits. The usage events carry the soft flag, the
//! refusals and the same costs.

use e2e::client::{post, Reply};
use e2e::{stack, Stack, BUDGET_HARD_MICRO_USD as HARD, BUDGET_SOFT_MICRO_USD as SOFT, BUDGET_TENANT, KEY_BUDGET};
use serde_json::json;
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const MODEL: &str = "budget-capped";
/// The deployment's real model: the mock counts calls by it.
const UPSTREAM_MODEL: &str = "e2e-budget+words=10+delay_first_ms=200";
const CONCURRENT: usize = 100;
const MAX_TOKENS: u64 = 10;
/// The route prices the deployment as `e2e-fallback`: 1 µ$ per prompt token, 2 µ$ per output token.
const PROMPT_PRICE: u64 = 1;
const OUTPUT_PRICE: u64 = 2;
/// What each request reserves (docs/budgets.md): its 10-character message estimates ⌈10/4⌉ + 4 = 7
/// prompt tokens, and the output is its max_tokens.
const ESTIMATE: u64 = 7 * PROMPT_PRICE + MAX_TOKENS * OUTPUT_PRICE;
/// What a refusal caused only by other requests' reservations asks the client to wait.
const IN_FLIGHT_RETRY_MS: u64 = 1_000;
const DAY_MS: u64 = 86_400_000;
const DELIVERY_DEADLINE: Duration = Duration::from_secs(90);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// One request; `n` keeps each message distinct and exactly 10 characters long.
fn ask(s: &Stack, n: usize) -> Reply {
    let body = json!({"model": MODEL, "max_tokens": MAX_TOKENS,
                      "messages": [{"role": "user", "content": format!("budget {n:03}")}]});
    post(&s.url("/v1/chat/completions"), KEY_BUDGET, &body)
}

fn request_id(r: &Reply) -> String {
    r.header("x-request-id").unwrap_or_else(|| panic!("no x-request-id: {} {}", r.status, r.body)).to_string()
}

fn soft_header(r: &Reply) -> bool {
    match r.header("x-gateway-budget") {
        None => false,
        Some(v) => {
            assert_eq!(v, "soft_exceeded");
            true
        }
    }
}

/// What an admitted request cost, from the usage the vendor reported; never above its reservation.
fn cost(r: &Reply) -> u64 {
    assert_eq!(r.status, 200, "{}", r.body);
    let usage = &r.json()["usage"];
    let c = usage["prompt_tokens"].as_u64().unwrap() * PROMPT_PRICE
        + usage["completion_tokens"].as_u64().unwrap() * OUTPUT_PRICE;
    assert!(c <= ESTIMATE, "cost {c} above the reservation {ESTIMATE}: {usage}");
    c
}

/// Checks a refusal's shape; true when the budget is spent for the period (not just busy).
fn check_refusal(r: &Reply) -> bool {
    let e = r.error(402);
    assert_eq!((e["code"].as_str(), e["type"].as_str()), (Some("budget_exceeded"), Some("insufficient_quota")), "{e}");
    assert_eq!(r.header("x-gateway-limit"), Some("budget"));
    assert_eq!(r.header("x-gateway-limit-scope"), Some("tenant"));
    let reset: u64 = r.header("x-gateway-limit-reset-ms").expect("reset header").parse().expect("reset ms");
    let retry_after: u64 = r.header("retry-after").expect("Retry-After").parse().expect("Retry-After seconds");
    assert_eq!(retry_after, reset.div_ceil(1000).max(1));
    if reset == IN_FLIGHT_RETRY_MS {
        return false;
    }
    // Spent for the month: it resets at the next month's start, midnight UTC.
    let resets_at = now_ms() + reset;
    let from_midnight = resets_at % DAY_MS;
    assert!(from_midnight.min(DAY_MS - from_midnight) < 60_000, "reset {reset} ms is not at a midnight");
    assert!(reset <= 31 * DAY_MS, "reset {reset} ms is more than a month away");
    true
}

#[derive(Debug)]
struct Admitted {
    id: String,
    cost: u64,
    soft_header: bool,
    /// The spend of every request answered so far, this one included, is at most the soft limit.
    surely_under_soft: bool,
}

#[test]
fn hard_limit_holds_under_a_hundred_concurrent_requests() {
    let s = stack();
    let mut admitted: Vec<Admitted> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut n = 0;
    let answered = |admitted: &[Admitted]| admitted.iter().map(|a| a.cost).sum::<u64>();

    // Alone, one after another: the header appears once the settled spend is past the soft limit.
    // Settles land just after each answer, so the first request past it may still come back without.
    loop {
        let before = answered(&admitted);
        let r = ask(s, n);
        n += 1;
        let c = cost(&r);
        let soft = soft_header(&r);
        assert!(!soft || before > SOFT, "soft header with at most {before} µ$ settled (soft limit {SOFT})");
        admitted.push(Admitted {
            id: request_id(&r),
            cost: c,
            soft_header: soft,
            surely_under_soft: before + c <= SOFT,
        });
        if soft {
            break;
        }
        assert!(n < 10, "no soft header after {n} requests ({} µ$ answered, soft limit {SOFT})", answered(&admitted));
        if answered(&admitted) > SOFT {
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let calls_before = s.mock_calls(UPSTREAM_MODEL);
    assert_eq!(calls_before, admitted.len() as u64);

    // A hundred at once.
    let barrier = Barrier::new(CONCURRENT);
    let replies: Vec<Reply> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CONCURRENT)
            .map(|i| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    ask(s, n + i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("request thread")).collect()
    });
    n += CONCURRENT;
    let (mut burst_admitted, mut burst_refused) = (0, 0);
    for r in &replies {
        match r.status {
            200 => {
                burst_admitted += 1;
                let c = cost(r);
                assert!(soft_header(r), "past the soft limit before the burst, yet no header: {:?}", r.headers);
                admitted.push(Admitted { id: request_id(r), cost: c, soft_header: true, surely_under_soft: false });
            }
            402 => {
                burst_refused += 1;
                check_refusal(r);
                refused.push(request_id(r));
            }
            other => panic!("neither admitted nor refused ({other}): {}", r.body),
        }
    }
    assert!(burst_admitted > 0 && burst_refused > 0, "{burst_admitted} admitted, {burst_refused} refused");
    assert!(answered(&admitted) <= HARD, "{} µ$ spent after the burst", answered(&admitted));

    // Then one at a time until the budget itself (not requests in flight) refuses.
    let mut exhausted = false;
    for _ in 0..40 {
        let r = ask(s, n);
        n += 1;
        if r.status == 200 {
            let c = cost(&r);
            assert!(soft_header(&r));
            admitted.push(Admitted { id: request_id(&r), cost: c, soft_header: true, surely_under_soft: false });
            continue;
        }
        refused.push(request_id(&r));
        if check_refusal(&r) {
            exhausted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(exhausted, "the budget never refused as spent");

    let spent = answered(&admitted);
    // Each estimate was an upper bound, so reservations in flight that under-estimated add nothing.
    let under_estimated: u64 = admitted.iter().map(|a| a.cost.saturating_sub(ESTIMATE)).sum();
    assert!(spent <= HARD + under_estimated, "spent {spent} µ$ of a {HARD} µ$ hard limit");
    // Refunds took effect: the budget ran out only when the next reservation no longer fitted.
    assert!(spent + ESTIMATE > HARD, "refused with {spent} µ$ spent of {HARD}: unsettled reservations left behind?");
    assert_eq!(
        s.mock_calls(UPSTREAM_MODEL),
        admitted.len() as u64,
        "one upstream call per admitted request, none for the {} refused",
        refused.len()
    );

    eprintln!(
        "budget: {} admitted ({burst_admitted} of {CONCURRENT} in the burst), {} refused, {spent} of {HARD} µ$ spent",
        admitted.len(),
        refused.len()
    );
    check_events(s, &admitted, &refused, spent);
}

/// The usage events in R2: the soft flag, the refusals, and the same costs.
fn check_events(s: &Stack, admitted: &[Admitted], refused: &[String], spent: u64) {
    let out = s.state.parent().unwrap().join("budget-export");
    let started = Instant::now();
    let events = loop {
        let events = e2e::usage_events_of(BUDGET_TENANT, &s.exported_usage(&out)).1;
        let all = admitted.iter().map(|a| &a.id).chain(refused).all(|id| events.contains_key(id));
        if all || started.elapsed() > DELIVERY_DEADLINE {
            break events;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(events.len(), admitted.len() + refused.len(), "one event per request");
    for a in admitted {
        let e = events.get(&a.id).unwrap_or_else(|| panic!("no event for admitted {}", a.id));
        assert_eq!((e["status"].as_u64(), e["cost_micro_usd"].as_u64()), (Some(200), Some(a.cost)), "{e}");
        if a.soft_header {
            assert_eq!(e["budget_soft_exceeded"], true, "admitted past the soft limit: {e}");
        }
        if a.surely_under_soft {
            assert_eq!(e["budget_soft_exceeded"], false, "never past the soft limit: {e}");
        }
    }
    for id in refused {
        let e = events.get(id).unwrap_or_else(|| panic!("no event for refused {id}"));
        assert_eq!(
            (e["status"].as_u64(), e["error_code"].as_str(), e["attempt_count"].as_u64(), e["cost_micro_usd"].as_u64()),
            (Some(402), Some("budget_exceeded"), Some(0), Some(0)),
            "{e}"
        );
        assert_eq!(e["budget_soft_exceeded"], false, "{e}");
    }
    let total: u64 = events.values().filter_map(|e| e["cost_micro_usd"].as_u64()).sum();
    assert_eq!(total, spent);
}
