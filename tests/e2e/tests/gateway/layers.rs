//! Layered limits end to end: key → tenant → deployment, each refusing with its own reason code
//! and no upstream call, and all or nothing across the layers (what an earlier layer took is
//! released when a later one refuses).

use e2e::client::{post, post_with, stream, Reply};
use e2e::{stack, KEY_LAYERS_A, KEY_LAYERS_B, KEY_LAYERS_C, KEY_LAYERS_TPM, KEY_LAYERS_TPM_FREE, LAYERS_TENANT};
use serde_json::json;
use std::time::{Duration, Instant};

const NO_WAIT: &[(&str, &str)] = &[("x-gateway-max-wait-ms", "0")];

fn hello(model: &str) -> serde_json::Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

fn chat(key: &str, model: &str) -> Reply {
    post_with(&stack().url("/v1/chat/completions"), key, &hello(model), NO_WAIT)
}

/// A 429 with this reason code, its limit and scope headers, and a Retry-After.
fn assert_refused(r: &Reply, code: &str, limit: &str, scope: &str) {
    let e = r.error(429);
    assert_eq!(e["code"], code, "{}", r.body);
    assert_eq!(e["type"], "rate_limit_error", "{}", r.body);
    assert_eq!(r.header("x-gateway-limit"), Some(limit), "{}", r.body);
    assert_eq!(r.header("x-gateway-limit-scope"), Some(scope), "{}", r.body);
    assert!(r.header("x-gateway-limit-reset-ms").and_then(|v| v.parse::<u64>().ok()).is_some(), "{:?}", r.headers);
    assert!(r.header("retry-after").and_then(|v| v.parse::<u64>().ok()).is_some_and(|s| s >= 1), "{:?}", r.headers);
}

#[test]
fn key_then_tenant_limits_refuse_with_their_own_codes_and_a_tenant_refusal_releases_the_key() {
    let s = stack();
    let upstream = "e2e-layers";
    let started = Instant::now();

    // Key A: rpm 3 (< tenant 6 < deployment 100). The 4th is refused at the key.
    for i in 1..=3 {
        let r = chat(KEY_LAYERS_A, "layers");
        assert_eq!(r.status, 200, "key A request {i}: {}", r.body);
    }
    let refused = chat(KEY_LAYERS_A, "layers");
    assert_refused(&refused, "key_rpm", "rpm", "key");
    assert!(refused.error(429)["message"].as_str().unwrap().contains("API key"), "{}", refused.body);
    // Every endpoint goes through the same layers.
    let emb = post_with(&s.url("/v1/embeddings"), KEY_LAYERS_A, &json!({"model": "layers", "input": "x"}), NO_WAIT);
    assert_refused(&emb, "key_rpm", "rpm", "key");
    assert_eq!(s.mock_calls(upstream), 3, "refused requests make no upstream call");

    // Key B (rpm 4) of the same tenant takes the tenant to 6 (one of them streamed)...
    for i in 1..=2 {
        let r = chat(KEY_LAYERS_B, "layers");
        assert_eq!(r.status, 200, "key B request {i}: {}", r.body);
    }
    let streamed = stream(
        &s.url("/v1/chat/completions"),
        KEY_LAYERS_B,
        &json!({"model": "layers", "stream": true,
        "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(streamed.status, 200);
    assert!(streamed.done(), "the stream completes");
    // ...and its next, which its key admits (4th of 4), is refused by the tenant.
    let refused = chat(KEY_LAYERS_B, "layers");
    assert_refused(&refused, "tenant_rpm", "rpm", "tenant");
    let message = refused.error(429)["message"].as_str().unwrap().to_string();
    assert!(message.contains(LAYERS_TENANT), "{message}");
    assert_eq!(s.mock_calls(upstream), 6, "exactly the tenant's 6 went upstream");

    // The tenant refills one request every 10 s from its first take. Key B refills one every
    // 15 s: only if the tenant's refusal released what B's key took does B have one left now.
    let tenant_refilled = Duration::from_millis(11_000);
    std::thread::sleep(tenant_refilled.saturating_sub(started.elapsed()));
    assert!(started.elapsed() < Duration::from_millis(14_500), "too slow to tell a release from a refill");
    let after = chat(KEY_LAYERS_B, "layers");
    assert_eq!(after.status, 200, "key B still had the request the tenant refused: {}", after.body);
    // That was B's 4th at its key: the next is the key's to refuse (the tenant is not asked).
    assert_refused(&chat(KEY_LAYERS_B, "layers"), "key_rpm", "rpm", "key");
    assert_refused(&chat(KEY_LAYERS_A, "layers"), "key_rpm", "rpm", "key");
    assert_eq!(s.mock_calls(upstream), 7);
}

#[test]
fn a_deployment_refusal_still_reads_deployment_and_releases_key_and_tenant() {
    let s = stack();
    // Key C: rpm 3, tenant rpm 50; the deployment allows 2 a minute.
    for i in 1..=2 {
        let r = chat(KEY_LAYERS_C, "layers-tight");
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
    }
    let refused = chat(KEY_LAYERS_C, "layers-tight");
    assert_refused(&refused, "deployment_rpm", "rpm", "deployment");
    assert_eq!(s.mock_calls("e2e-layers-tight"), 2, "no upstream call for the refusal");
    // No deployment took the 3rd: the key gave it back, so it still has one request this minute.
    let elsewhere = chat(KEY_LAYERS_C, "layers-after");
    assert_eq!(elsewhere.status, 200, "key C's refused request was released: {}", elsewhere.body);
    assert_refused(&chat(KEY_LAYERS_C, "layers-after"), "key_rpm", "rpm", "key");
    assert_eq!(s.mock_calls("e2e-layers-after"), 1);
}

#[test]
fn token_limits_refuse_at_the_key_before_the_tenant() {
    let s = stack();
    // "hi" is ⌈2/4⌉ + 4 = 5 prompt tokens: 600 tokens reserved with max_tokens 595.
    let big = json!({"model": "layers-slow", "max_tokens": 595, "messages": [{"role": "user", "content": "hi"}]});
    let url = s.url("/v1/chat/completions");
    let first = {
        let (url, body) = (url.clone(), big.clone());
        std::thread::spawn(move || post(&url, KEY_LAYERS_TPM, &body))
    };
    // While the first holds 600 of its key's 800 and its tenant's 1,000 (the vendor answers after 1.5 s):
    std::thread::sleep(Duration::from_millis(400));
    let same_key = post_with(&url, KEY_LAYERS_TPM, &big, NO_WAIT);
    assert_refused(&same_key, "key_tpm", "tpm", "key");
    let other_key = post_with(&url, KEY_LAYERS_TPM_FREE, &big, NO_WAIT);
    assert_refused(&other_key, "tenant_tpm", "tpm", "tenant");
    let first = first.join().unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(s.mock_calls("e2e-layers-slow+delay_first_ms=1500"), 1, "the refused made no upstream call");
}
