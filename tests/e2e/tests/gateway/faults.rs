//! A deployment's own faults take it out of rotation, never the client's request: a vendor
//! refusing the gateway's key, a credential not bound; breakers by default; timeouts that
//! count only the deployment's failures.

use e2e::client::{post, post_with, request, stream, Reply};
use e2e::{stack, Stack, KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

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

#[test]
fn a_stream_still_sending_past_its_total_bound_ends_with_an_error_event() {
    let s = stack();
    // One word every 150 ms for 200 words (30 s); the deployment's total_ms is 1,500.
    let body =
        json!({"model": "stream-past-total", "stream": true, "messages": [{"role": "user", "content": "go on"}]});
    let r = stream(&s.url("/v1/chat/completions"), KEY, &body);
    assert_eq!(r.status, 200);
    let (at, last) = r.events.last().cloned().expect("events");
    assert!(at < Duration::from_secs(6), "ended at {at:?}, not when the vendor stopped");
    assert!(!r.done(), "no [DONE] after a cut");
    let error: Value = serde_json::from_str(&last).expect("the last event is JSON");
    assert_eq!(error["error"]["code"], "upstream_stream_interrupted", "{last}");
    assert!(error["error"]["message"].as_str().unwrap().contains("time limit"), "{last}");
    assert!(!r.text().is_empty(), "text was delivered before the bound");
}

#[test]
fn a_stream_that_goes_quiet_past_idle_ms_ends_with_an_error_event() {
    let s = stack();
    // Two words 20 ms apart, then nothing with the connection held open; idle_ms is 600, and
    // first_token_ms (5,000) is the later deadline the stream's one timer is first armed for.
    // Usage asked or not: the usage chunk held back or not, the same bound.
    for asked in [false, true] {
        let body = json!({"model": "stream-stalls", "stream": true, "stream_options": {"include_usage": asked},
                          "messages": [{"role": "user", "content": "hi"}]});
        let started = Instant::now();
        let r = stream(&s.url("/v1/chat/completions"), KEY, &body);
        let took = started.elapsed();
        assert_eq!(r.status, 200);
        assert!(!r.text().is_empty(), "the words before the silence are delivered");
        assert!(!r.done(), "no [DONE] after a cut");
        let error: Value = serde_json::from_str(&r.events.last().expect("events").1).expect("the last event is JSON");
        assert_eq!(error["error"]["code"], "upstream_stream_interrupted", "{asked}: {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains("idle timeout"), "{error}");
        // Not before the bound, and well before the first-token deadline (about 0.7 s when idle; the
        // upper bound leaves a busy machine 2.8 s more).
        assert!(took >= Duration::from_millis(600), "{asked}: ended after {took:?}");
        assert!(took < Duration::from_millis(3500), "{asked}: ended after {took:?}");
    }
}

#[test]
fn the_messages_door_ends_a_stream_past_its_total_bound_with_its_own_error_event() {
    let s = stack();
    let body = json!({"model": "claude-past-total-test", "max_tokens": 512, "stream": true,
                      "messages": [{"role": "user", "content": "go on"}]});
    let started = Instant::now();
    let r = ureq::post(&s.url("/v1/messages"))
        .set("x-api-key", KEY)
        .set("anthropic-version", "2023-06-01")
        .send_string(&body.to_string())
        .expect("200");
    let text = r.into_string().unwrap();
    assert!(started.elapsed() < Duration::from_secs(6), "took {:?}", started.elapsed());
    assert!(text.contains("event: content_block_delta"), "{text}");
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: error\ndata: {\"type\":\"error\""), "{last}");
}

fn timed_out_at_the_clients_deadline(r: &Reply, started: Instant) {
    assert!(started.elapsed() < Duration::from_millis(1_400), "took {:?}", started.elapsed());
    assert_eq!(r.error(504)["code"], "upstream_timeout", "{}", r.body);
}

#[test]
fn requests_cut_by_their_own_deadline_leave_the_breaker_untouched() {
    let s = stack();
    // The vendor answers after 1.5 s (JSON headers) or sends its first word after 1.5 s
    // (stream); each breaker trips at 3 counted failures. Three JSON and three streamed
    // requests each give up at their own 300 ms deadline, before the vendor could answer.
    let deadline = [("x-gateway-timeout-ms", "300")];
    for (model, streamed) in [("slow-but-healthy", false), ("slow-tokens", true)] {
        for _ in 0..3 {
            let body = json!({"model": model, "stream": streamed, "messages": [{"role": "user", "content": "hi"}]});
            let started = Instant::now();
            let r = post_with(&s.url("/v1/chat/completions"), KEY, &body, &deadline);
            timed_out_at_the_clients_deadline(&r, started);
        }
    }
    for deployment in ["oa-slow-healthy", "oa-slow-tokens"] {
        let b = breaker_of(s, deployment);
        assert_eq!(
            (b["state"].as_str(), b["consecutive_failures"].as_u64()),
            (Some("closed"), Some(0)),
            "{deployment}: {b}"
        );
    }
    // Without the client's deadline the same vendor serves: it was healthy all along.
    let r = post(&s.url("/v1/chat/completions"), KEY, &hello("slow-but-healthy"));
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_vendor_sending_only_keep_alives_meets_the_first_token_timeout_and_the_request_falls_back() {
    let s = stack();
    // OpenAI format: a role-only chunk, then `: ping` every 100 ms; Anthropic: message_start,
    // content_block_start, then `event: ping` every 100 ms. first_token_ms is 800.
    for model in ["pings-only", "pings-only-an"] {
        let body = json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        let started = Instant::now();
        let r = stream(&s.url("/v1/chat/completions"), KEY, &body);
        assert_eq!(r.status, 200, "{model}");
        assert!(r.done() && !r.text().is_empty(), "{model}: the fallback's whole answer");
        assert_eq!(
            r.headers.iter().find(|(k, _)| k == "x-gateway-deployment").map(|(_, v)| v.as_str()),
            Some("oa-after-pings")
        );
        assert!(started.elapsed() < Duration::from_secs(4), "{model}: took {:?}", started.elapsed());
    }
}
