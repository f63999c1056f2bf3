//! A deployment's own faults take it out of rotation, never the client's request: a vendor
//! refusing the gateway's key, a credential not bound; breakers by default; timeouts that
//! count only the deployment's failures.

use e2e::client::{post, request};
use e2e::{stack, Stack, KEY};
use serde_json::{json, Value};

fn hello(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

fn breaker_of(s: &Stack, deployment: &str) -> Value {
    let v = request("GET", &s.url("/admin/status"), Some("dev-admin-token"), None).json();
    v["deployments"][deployment]["limiter"]["breaker"].clone()
}

#[test]
fn a_vendor_refusing_the_gateways_key_opens_the_breaker_with_reason_vendor_auth() {
    let s = stack();
    let n = 6;
    for i in 0..n {
        let r = post(&s.url("/v1/chat/completions"), KEY, &hello("vendor-auth-drill"));
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert_eq!(r.header("x-gateway-deployment"), Some("oa-after-auth"));
        let tried: Vec<String> = s.upstream_calls(&r).iter().map(|c| c["body"]["model"].to_string()).collect();
        if i == 0 {
            assert_eq!(tried.len(), 2, "the first request meets the 401 and falls back: {tried:?}");
        } else {
            assert_eq!(tried.len(), 1, "request {i}: the open breaker skips the broken key: {tried:?}");
        }
    }
    assert_eq!(s.mock_calls("e2e-auth-broken+status=401"), 1, "one call found the fault");
    let breaker = breaker_of(s, "oa-auth-broken");
    assert_eq!(breaker["state"], "open", "{breaker}");
    assert_eq!(breaker["reason"], "vendor_auth", "{breaker}");
}

#[test]
fn a_credential_that_is_not_bound_is_reported_as_the_deployments_fault() {
    let s = stack();
    for _ in 0..3 {
        let r = post(&s.url("/v1/chat/completions"), KEY, &hello("unbound-credential"));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-gateway-deployment"), Some("oa-after-unbound"));
    }
    assert_eq!(s.mock_calls("e2e-unbound"), 0, "never called without its key");
    // The report goes to the breaker in the background, after the answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let breaker = loop {
        let b = breaker_of(s, "oa-unbound");
        if b["state"] == "open" || std::time::Instant::now() > deadline {
            break b;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        (breaker["state"].as_str(), breaker["reason"].as_str()),
        (Some("open"), Some("missing_credential")),
        "{breaker}"
    );
}

fn limiter_calls(s: &Stack, deployment: &str) -> u64 {
    let v = request("GET", &s.url("/admin/status"), Some("dev-admin-token"), None).json();
    let calls = &v["deployments"][deployment]["limiter"]["calls"];
    ["admit", "settle", "lease", "report", "release"].iter().map(|op| calls[op].as_u64().unwrap_or(0)).sum()
}

#[test]
fn a_deployment_without_limits_has_a_breaker_that_costs_no_round_trip_while_healthy() {
    let s = stack();
    let n = 40;
    for i in 0..n {
        let r = post(&s.url("/v1/chat/completions"), KEY, &hello("plain-flaky"));
        assert_eq!(r.header("x-gateway-deployment"), Some("oa-plain-flaky"), "request {i}: {}", r.body);
    }
    // The first request asks the object and brings a lease back; a slice lives 3 s, so a slow
    // machine may need one renewal and its hand-back per 3 s: still far from one per request.
    let calls = limiter_calls(s, "oa-plain-flaky");
    eprintln!("limiter messages for {n} healthy requests without limits: {calls}");
    assert!((1..=8).contains(&calls), "{calls} limiter messages for {n} healthy requests");

    // Now the vendor fails every call: the default breaker (5 consecutive failures) opens.
    let script = json!({"model": "e2e-plain-flaky", "fault": "status=500", "times": 10});
    ureq::post(&format!("{}/_mock/faults", s.mock)).send_string(&script.to_string()).expect("script");
    let before = s.mock_calls("e2e-plain-flaky");
    for i in 0..10 {
        let r = post(&s.url("/v1/chat/completions"), KEY, &hello("plain-flaky"));
        assert_eq!(r.status, 200, "request {i}: the backup serves: {}", r.body);
        assert_eq!(r.header("x-gateway-deployment"), Some("oa-plain-backup"));
        let tried = s.upstream_calls(&r).len();
        assert_eq!(tried, if i < 5 { 2 } else { 1 }, "request {i}: skipped without a call once open");
    }
    let clear = json!({"model": "e2e-plain-flaky", "fault": null});
    ureq::post(&format!("{}/_mock/faults", s.mock)).send_string(&clear.to_string()).expect("clear");
    assert_eq!(s.mock_calls("e2e-plain-flaky") - before, 5, "five failures, then no call");
    let breaker = breaker_of(s, "oa-plain-flaky");
    assert_eq!((breaker["state"].as_str(), breaker["reason"].as_str()), (Some("open"), Some("failures")), "{breaker}");
}
