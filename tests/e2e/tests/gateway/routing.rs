//! Selection and fallback: timeouts, capability gate, retries, and a broken route table.

use e2e::client::{post, post_with};
use e2e::{stack, KEY};
use serde_json::json;
use std::time::{Duration, Instant};

fn hello(model: &str) -> serde_json::Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn slow_first_token_is_aborted_and_the_fallback_serves_within_the_deadline() {
    let s = stack();
    let started = Instant::now();
    let r = post(&s.url("/v1/chat/completions"), KEY, &hello("slow-first-token"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(started.elapsed() < Duration::from_millis(3000), "took {:?}", started.elapsed());
    assert_eq!(r.header("x-gateway-deployment"), Some("oa-after-slow"));
    assert_eq!(r.header("x-gateway-fallback"), Some("true"));
    assert_eq!(s.mock_calls("e2e-slow-first+delay_first_ms=5000"), 1);
}

#[test]
fn client_deadline_bounds_the_whole_request() {
    let s = stack();
    let started = Instant::now();
    let r = post_with(&s.url("/v1/chat/completions"), KEY, &hello("deadline"), &[("x-gateway-timeout-ms", "250")]);
    assert!(started.elapsed() < Duration::from_millis(2500), "took {:?}", started.elapsed());
    assert_eq!(r.error(504)["code"], "upstream_timeout", "{}", r.body);
}

#[test]
fn tools_request_skips_a_deployment_without_tools() {
    let s = stack();
    let mut with_tools = hello("tools-gate");
    with_tools["tools"] = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    let r = post(&s.url("/v1/chat/completions"), KEY, &with_tools);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-gateway-deployment"), Some("oa-tools"));
    assert_eq!(s.mock_calls("e2e-no-tools"), 0, "the gated deployment is never called");
    let plain = post(&s.url("/v1/chat/completions"), KEY, &hello("tools-gate"));
    assert_eq!(plain.header("x-gateway-deployment"), Some("oa-no-tools"));
}

#[test]
fn retryable_error_is_retried_with_backoff() {
    let s = stack();
    ureq::post(&format!("{}/_mock/faults", s.mock))
        .send_string(&json!({"model": "e2e-retry", "fault": "status=503", "times": 1}).to_string())
        .expect("script");
    let r = post(&s.url("/v1/chat/completions"), KEY, &hello("retry-same"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-gateway-attempts"), Some("2"));
    assert_eq!(s.mock_calls("e2e-retry"), 2);
}

#[test]
fn primary_down_at_load_keeps_success_at_100_percent_within_the_retry_budget() {
    let s = stack();
    let n = 60;
    let handles: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(|| post(&stack().url("/v1/chat/completions"), KEY, &hello("primary-down"))))
        .collect();
    let replies: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let failed: Vec<String> =
        replies.iter().filter(|r| r.status != 200).map(|r| format!("{} {}", r.status, r.body)).take(3).collect();
    let ok = replies.len() - replies.iter().filter(|r| r.status != 200).count();
    assert_eq!(ok, n, "every request served by the fallback; failures: {failed:?}");
    let primary = s.mock_calls("e2e-down+status=503");
    // One attempt per request on the primary, plus at most the retry budget (20% of requests, per isolate).
    assert!(primary >= n as u64 && primary <= n as u64 + n as u64 / 5 + 1, "primary calls {primary}");
    assert_eq!(s.mock_calls("e2e-up"), n as u64);
}

#[test]
fn a_broken_route_table_leaves_the_gateway_serving_the_old_one() {
    let s = stack();
    let good = std::fs::read_to_string(s.state.join("../routes.json")).expect("seeded table");
    s.put_config("routes", "{\"version\": 1, \"deployments\": {");
    std::thread::sleep(Duration::from_millis(1500));
    let r = post(&s.url("/v1/chat/completions"), KEY, &hello("gpt-4o-mini"));
    let status = s.admin_status("dev-admin-token");
    s.put_config("routes", &good);
    assert_eq!(r.status, 200, "still serving: {}", r.body);
    assert_eq!(status.status, 200, "{}", status.body);
    let v = status.json();
    assert_eq!(v["route_table"]["loaded"], true);
    assert!(v["route_table"]["problem"].as_str().is_some_and(|p| p.contains("line")), "{v}");
}

#[test]
fn admin_status_needs_the_admin_token_and_shows_limiter_state() {
    let s = stack();
    assert_eq!(s.admin_status(KEY).error(403)["code"], "invalid_admin_token");
    post(&s.url("/v1/chat/completions"), KEY, &hello("vendor-429"));
    let v = s.admin_status("dev-admin-token").json();
    let limiter = &v["deployments"]["oa-429"]["limiter"];
    assert!(limiter["breaker"].is_object(), "{v}");
    assert!(limiter["buckets"].is_object(), "{v}");
}

#[test]
fn a_deployment_whose_vendor_key_is_refused_falls_back_and_the_client_never_sees_a_401() {
    let s = stack();
    for _ in 0..2 {
        let r = post(&s.url("/v1/chat/completions"), KEY, &hello("wrong-vendor-key-first"));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-gateway-deployment"), Some("oa-after-401"));
        assert_eq!(r.header("x-gateway-attempts"), Some("2"));
        let calls = s.upstream_calls(&r);
        let models: Vec<_> = calls.iter().map(|c| c["body"]["model"].as_str().unwrap_or("").to_string()).collect();
        assert_eq!(models, ["e2e-401+status=401", "e2e-after-401"], "tried once, never retried on the bad key");
    }
}
