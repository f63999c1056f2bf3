//! The per-deployment limiter under real concurrency: exact RPM/TPM, breaker, vendor 429 pauses.

use e2e::client::{post, post_with};
use e2e::{stack, KEY};
use serde_json::json;
use std::time::{Duration, Instant};

fn hello(model: &str) -> serde_json::Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

const NO_WAIT: &[(&str, &str)] = &[("x-gateway-max-wait-ms", "0")];

#[test]
fn rpm_holds_exactly_under_200_concurrent_requests() {
    let s = stack();
    let started = Instant::now();
    let handles: Vec<_> = (0..200)
        .map(|_| {
            std::thread::spawn(move || post_with(&stack().url("/v1/chat/completions"), KEY, &hello("rpm50"), NO_WAIT))
        })
        .collect();
    let replies: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let elapsed = started.elapsed();
    let ok = replies.iter().filter(|r| r.status == 200).count() as u64;
    let upstream = s.mock_calls("e2e-rpm50");
    // 50 per minute refill one every 1.2 s: only time spent in the burst can add admissions.
    let refilled = (elapsed.as_millis() as u64) / 1200;
    assert_eq!(ok, upstream, "every admitted request made exactly one upstream call");
    assert!(upstream >= 50 && upstream <= 50 + refilled, "upstream calls {upstream}, burst took {elapsed:?}");
    for r in replies.iter().filter(|r| r.status != 200) {
        let e = r.error(429);
        assert_eq!(e["code"], "deployment_rpm", "{}", r.body);
        assert_eq!(r.header("x-gateway-limit"), Some("rpm"));
        assert_eq!(r.header("x-gateway-limit-scope"), Some("deployment"));
        assert!(r.header("retry-after").and_then(|v| v.parse::<u64>().ok()).is_some_and(|s| (1..=2).contains(&s)));
    }
    std::thread::sleep(Duration::from_millis(1300));
    let again = post_with(&s.url("/v1/chat/completions"), KEY, &hello("rpm50"), NO_WAIT);
    assert_eq!(again.status, 200, "a refilled request passes: {}", again.body);
}

#[test]
fn tpm_holds_with_large_requests() {
    let s = stack();
    // About 404 estimated input tokens + 96 output = 500 per request: 4 fit in 2,000 TPM.
    let big =
        json!({"model": "tpm2000", "max_tokens": 96, "messages": [{"role": "user", "content": "x".repeat(1600)}]});
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let body = big.clone();
            std::thread::spawn(move || post_with(&stack().url("/v1/chat/completions"), KEY, &body, NO_WAIT))
        })
        .collect();
    let replies: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = replies.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 4, "{:?}", replies.iter().map(|r| r.status).collect::<Vec<_>>());
    assert_eq!(s.mock_calls("e2e-tpm+delay_first_ms=800"), 4);
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!(r.error(429)["code"], "deployment_tpm");
    }
}

#[test]
fn consecutive_5xx_open_the_breaker_then_one_probe_closes_it() {
    let s = stack();
    let url = s.url("/v1/chat/completions");
    ureq::post(&format!("{}/_mock/faults", s.mock))
        .send_string(&json!({"model": "e2e-breaker", "fault": "status=500", "times": 3}).to_string())
        .expect("script faults");
    for _ in 0..3 {
        post(&url, KEY, &hello("breaker")).error(502);
    }
    let refused = post(&url, KEY, &hello("breaker"));
    assert_eq!(refused.error(429)["code"], "deployment_breaker_open", "{}", refused.body);
    assert_eq!(s.mock_calls("e2e-breaker"), 3, "no upstream call while open");
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(post(&url, KEY, &hello("breaker")).status, 200, "the probe succeeds");
    assert_eq!(s.mock_calls("e2e-breaker"), 4);
    assert_eq!(post(&url, KEY, &hello("breaker")).status, 200, "closed again");
    assert_eq!(s.mock_calls("e2e-breaker"), 5);
}

#[test]
fn vendor_retry_after_holds_all_traffic_until_then() {
    let s = stack();
    let url = s.url("/v1/chat/completions");
    ureq::post(&format!("{}/_mock/faults", s.mock))
        .send_string(&json!({"model": "e2e-429", "fault": "status=429,retry_after=2", "times": 1}).to_string())
        .expect("script faults");
    let first = post(&url, KEY, &hello("vendor-429"));
    first.error(429);
    assert!(first.header("retry-after").is_some());
    let held = post(&url, KEY, &hello("vendor-429"));
    assert_eq!(held.error(429)["code"], "deployment_paused", "{}", held.body);
    assert_eq!(s.mock_calls("e2e-429"), 1, "held without calling the vendor");
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(post(&url, KEY, &hello("vendor-429")).status, 200);
    assert_eq!(s.mock_calls("e2e-429"), 2);
}

/// A served answer whose rate-limit headers say nothing is left pulls the deployment's bucket down:
/// the next request is not sent to the vendor before the reset.
#[test]
fn vendor_remaining_requests_on_a_success_hold_the_next_request() {
    let s = stack();
    let url = s.url("/v1/chat/completions");
    ureq::post(&format!("{}/_mock/faults", s.mock))
        .send_string(
            &json!({"model": "e2e-remaining", "fault": "remaining_requests=0,reset_ms=3000", "times": 1}).to_string(),
        )
        .expect("script faults");
    let first = post(&url, KEY, &hello("vendor-remaining"));
    assert_eq!(first.status, 200, "{}", first.body);
    let held = post_with(&url, KEY, &hello("vendor-remaining"), NO_WAIT);
    assert_eq!(held.error(429)["code"], "deployment_rpm", "{}", held.body);
    assert_eq!(s.mock_calls("e2e-remaining"), 1, "held without calling the vendor");
}

#[test]
fn vendor_retry_after_is_a_floor_for_the_retry() {
    let s = stack();
    ureq::post(&format!("{}/_mock/faults", s.mock))
        .send_string(&json!({"model": "e2e-429-retried", "fault": "status=429,retry_after=1", "times": 1}).to_string())
        .expect("script faults");
    let started = Instant::now();
    let r = post(&s.url("/v1/chat/completions"), KEY, &hello("vendor-429-retried"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(started.elapsed() >= Duration::from_millis(1000), "retried before Retry-After: {:?}", started.elapsed());
    assert_eq!(r.header("x-gateway-attempts"), Some("2"));
    assert_eq!(s.mock_calls("e2e-429-retried"), 2);
}

/// The limiter object's own report for a deployment (`GET /admin/status`).
fn limiter_status(deployment: &str) -> serde_json::Value {
    let reply = stack().admin_status("dev-admin-token");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["deployments"][deployment]["limiter"].clone()
}

/// Round trips that admit, settle, lease or report (status reads are not counted).
fn round_trips(limiter: &serde_json::Value) -> u64 {
    ["admit", "settle", "lease", "report"].iter().map(|op| limiter["calls"][op].as_u64().unwrap_or(0)).sum()
}

#[test]
fn a_burst_to_a_roomy_deployment_admits_locally_against_leases() {
    let s = stack();
    let before = round_trips(&limiter_status("oa-leased"));
    let n = 200u64;
    let started = Instant::now();
    for i in 0..n {
        let r = post(&s.url("/v1/chat/completions"), KEY, &hello("leased"));
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert!(r.header("x-ratelimit-remaining-requests").is_some(), "request {i} tells what is left");
    }
    let elapsed = started.elapsed();
    let during = round_trips(&limiter_status("oa-leased")) - before;
    // The leases' watchers hand back what is left when they expire (6 s: these slices are under
    // 1 % of the bucket, `HOT_LEASE_TTL_MS`): count those too.
    std::thread::sleep(Duration::from_millis(6_500));
    let after = limiter_status("oa-leased");
    let trips = round_trips(&after) - before;
    eprintln!("{n} requests in {elapsed:?}: {during} limiter round trips, {trips} with the hand-backs; {after}");
    assert_eq!(s.mock_calls("e2e-leased"), n);
    assert!(trips * 10 <= n, "{trips} round trips for {n} requests: {after}");
    assert!(after["leases"]["granted"].as_u64().is_some_and(|g| g >= 1), "{after}");
    assert_eq!(after["leases"]["live"], 0, "every lease was handed back: {after}");
    assert_eq!(after["leases"]["held"]["rq"], 0, "{after}");
}

/// `n` requests to `model` released together: when each was sent, when answered, the reply.
fn all_at_once(n: usize, model: &'static str) -> Vec<(Instant, Instant, e2e::client::Reply)> {
    let start = std::sync::Arc::new(std::sync::Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let sent = Instant::now();
                let r = post(&stack().url("/v1/chat/completions"), KEY, &hello(model));
                (sent, Instant::now(), r)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn concurrent_requests_to_a_cold_isolate_wait_for_its_first_lease_instead_of_each_calling() {
    let s = stack();
    let n = 40;
    let replies = all_at_once(n, "leased-cold");
    for (i, (_, _, r)) in replies.iter().enumerate() {
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
    }
    // The test means something only if requests were in flight together with the first one: the
    // mock answers after 300 ms, so on a busy machine the threads' sends still overlap it.
    let first_done = replies.iter().map(|(_, done, _)| *done).min().unwrap();
    let overlapping = replies.iter().filter(|(sent, _, _)| *sent < first_done).count();
    assert!(overlapping >= n / 2, "only {overlapping} of {n} requests were sent before the first was answered");
    assert_eq!(s.mock_calls("e2e-leased-cold+delay_first_ms=300"), n as u64);
    let after = limiter_status("oa-leased-cold");
    let admits = after["calls"]["admit"].as_u64().unwrap_or(0);
    // The first request admits with the object and asks for a lease alongside; the others wait
    // for that answer (or a renewal's) and admit against the slice. Each request calling on its
    // own would make up to 40 admits and 40 settles.
    eprintln!("{n} concurrent requests to a cold deployment: {admits} admits; {after}");
    assert!(admits <= 4, "{admits} admits for {n} concurrent requests: {after}");
    assert!(round_trips(&after) <= 12, "{} round trips: {after}", round_trips(&after));
}

#[test]
fn an_object_admitted_success_is_settled_in_a_later_message_within_a_second_or_so() {
    let s = stack();
    // RPM 100 is too small to lease: the object admits each request (one round trip) and the
    // success's settle rides with the isolate's next message, or a report a second later.
    // An estimate of 60,000 tokens: the bucket (100,000 a minute) takes ~36 s to refill that, so a
    // full bucket below means the usage replaced the estimate, not that time passed.
    let body = json!({"model": "settle-later", "max_tokens": 60000, "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&s.url("/v1/chat/completions"), KEY, &body);
    assert_eq!(r.status, 200, "{}", r.body);
    let used = r.json()["usage"]["total_tokens"].as_i64().unwrap();
    let started = Instant::now();
    let settled = loop {
        let status = limiter_status("oa-settle-later");
        if status["in_flight"] == 0 {
            break status;
        }
        // The watcher reports after 1 s; a busy machine may take a few more.
        assert!(started.elapsed() < Duration::from_secs(15), "never settled: {status}");
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("settled after {:?}: {settled}", started.elapsed());
    assert_eq!(settled["calls"]["admit"], 1, "{settled}");
    assert_eq!(settled["calls"]["settle"].as_u64().unwrap_or(0), 0, "no settle message of its own: {settled}");
    assert!(settled["calls"]["report"].as_u64().unwrap_or(0) >= 1, "the watcher's report carried it: {settled}");
    // The estimate (60,000+ tokens) was replaced by the usage the vendor reported.
    let tpm = settled["buckets"]["tpm"]["available"].as_i64().unwrap();
    assert!(tpm >= 100_000 - used, "tpm {tpm}: the reservation was not reconciled ({used} used)");
    assert!(started.elapsed() < Duration::from_secs(10), "settled only after {:?}", started.elapsed());
}

#[test]
fn a_second_tenant_keeps_its_share_while_the_first_floods() {
    let s = stack();
    let url = s.url("/v1/chat/completions");
    assert_eq!(post_with(&url, e2e::KEY_B, &hello("fair"), NO_WAIT).status, 200, "tenant b becomes active");
    let flood: Vec<_> = (0..30)
        .map(|_| std::thread::spawn(|| post_with(&stack().url("/v1/chat/completions"), KEY, &hello("fair"), NO_WAIT)))
        .collect();
    let flood: Vec<_> = flood.into_iter().map(|h| h.join().unwrap()).collect();
    let a_ok = flood.iter().filter(|r| r.status == 200).count();
    assert_eq!(a_ok, 10, "tenant a is held to half of rpm 20 while b is active");
    for r in flood.iter().filter(|r| r.status != 200) {
        assert_eq!(r.error(429)["code"], "deployment_fair_share", "{}", r.body);
    }
    let b: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| post_with(&stack().url("/v1/chat/completions"), e2e::KEY_B, &hello("fair"), NO_WAIT))
        })
        .collect();
    let b_ok = b.into_iter().map(|h| h.join().unwrap()).filter(|r| r.status == 200).count();
    assert_eq!(b_ok, 8, "tenant b still gets its share after the flood");
    assert_eq!(s.mock_calls("e2e-fair"), 19);
}

/// This location's relay for a deployment (`GET /admin/status`).
fn relay_status(deployment: &str) -> serde_json::Value {
    let reply = stack().admin_status("dev-admin-token");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["deployments"][deployment]["relay"].clone()
}

#[test]
fn a_wide_deployments_isolates_lease_from_their_locations_relay_and_everything_comes_back() {
    // RPM 1,000,000: isolates lease from the relay, which leases from the object.
    let s = stack();
    let n = 40;
    for (i, (_, _, r)) in all_at_once(n, "wide").into_iter().enumerate() {
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert!(r.header("x-ratelimit-remaining-requests").is_some(), "request {i} tells what is left");
    }
    assert_eq!(s.mock_calls("e2e-wide"), n as u64);
    let limiter = limiter_status("oa-wide");
    let relay = relay_status("oa-wide");
    eprintln!("{n} concurrent requests to a wide deployment: limiter {limiter}; relay {relay}");
    // No request called the object: the relay's slices admitted them all.
    assert_eq!(limiter["calls"]["admit"], 0, "{limiter}");
    assert!(relay["granted"].as_u64().is_some_and(|g| g >= 1), "{relay}");
    assert!(relay["upstream_asks"].as_u64().is_some_and(|a| (1..=3).contains(&a)), "{relay}");
    assert_eq!(limiter["calls"]["lease"], relay["upstream_asks"], "every lease the object granted was the relay's");
    // The slices (6 s under 1 % of the bucket) and the relay's parent end; what they held goes
    // back with the relay's next ask or, none coming, its report 5 s later (`REFUND_WITHIN_MS`).
    std::thread::sleep(Duration::from_millis(12_500));
    let (limiter, relay) = (limiter_status("oa-wide"), relay_status("oa-wide"));
    assert_eq!(relay["parents"], 0, "{relay}");
    assert_eq!(relay["held"]["rq"].as_i64().unwrap_or(0), 0, "{relay}");
    assert_eq!(limiter["leases"]["live"], 0, "every parent was handed back: {limiter}");
    assert_eq!(limiter["leases"]["held"]["rq"], 0, "{limiter}");
    let granted = limiter["leases"]["granted_requests"].as_u64().unwrap();
    let returned = limiter["leases"]["returned_requests"].as_u64().unwrap();
    assert_eq!(granted - returned, n as u64, "the object counts exactly the requests served: {limiter}");
}
