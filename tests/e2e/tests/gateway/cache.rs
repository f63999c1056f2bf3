//! Exact-response cache and Idempotency-Key: repeats cost nothing, retries never bill twice.

use e2e::client::{post_with, stream};
use e2e::{stack, KEY, KEY_B};
use serde_json::json;
use std::time::Duration;

const UPSTREAM: &str = "e2e-cached";

fn ask(question: &str) -> serde_json::Value {
    json!({"model": "cached", "temperature": 0, "messages": [{"role": "user", "content": question}]})
}

fn ask_skip(question: &str) -> serde_json::Value {
    json!({"model": "cached-skip", "temperature": 0, "messages": [{"role": "user", "content": question}]})
}

#[test]
fn identical_requests_make_one_upstream_call_also_streamed_and_per_tenant() {
    let s = stack();
    let url = s.url("/v1/chat/completions");
    let before = s.mock_calls(UPSTREAM);
    let body = ask("cache me: capital of France?");
    let first = post_with(&url, KEY, &body, &[]);
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-gateway-cache"), Some("miss"));
    std::thread::sleep(Duration::from_millis(300));
    // Field order and whitespace don't matter.
    let reordered = r#"{"messages":[{"content":"cache me: capital of France?","role":"user"}], "temperature":0.0, "model":"cached"}"#;
    let second = e2e::client::request("POST", &url, Some(KEY), Some(reordered));
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.header("x-gateway-cache"), Some("hit"));
    assert!(second.header("age").is_some());
    assert_eq!(second.body, first.body);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let replay = stream(&url, KEY, &streamed);
    assert!(replay.done(), "{:?}", replay.events);
    assert_eq!(replay.text(), first.json()["choices"][0]["message"]["content"].as_str().unwrap());
    assert_eq!(s.mock_calls(UPSTREAM), before + 1, "one upstream call for three requests");
    let other_tenant = post_with(&url, KEY_B, &body, &[]);
    assert_eq!(other_tenant.header("x-gateway-cache"), Some("miss"), "never served from another tenant's cache");
    assert_eq!(s.mock_calls(UPSTREAM), before + 2);
}

#[test]
fn a_streamed_answer_is_stored_and_serves_later_requests() {
    let s = stack();
    let url = s.url("/v1/chat/completions");
    let body = json!({"model": "cached-stream", "temperature": 0, "stream": true,
                      "messages": [{"role": "user", "content": "stream then cache"}]});
    let first = stream(&url, KEY, &body);
    assert!(first.done());
    assert_eq!(first.headers.iter().find(|(k, _)| k == "x-gateway-cache").map(|(_, v)| v.as_str()), Some("miss"));
    std::thread::sleep(Duration::from_millis(300));
    let mut plain = body.clone();
    plain["stream"] = json!(false);
    let hit = post_with(&url, KEY, &plain, &[]);
    assert_eq!(hit.header("x-gateway-cache"), Some("hit"), "{}", hit.body);
    assert_eq!(hit.json()["choices"][0]["message"]["content"].as_str().unwrap(), first.text());
    assert_eq!(s.mock_calls("e2e-cached-stream"), 1);
}

#[test]
fn cache_is_skipped_when_the_request_or_route_says_so() {
    let s = stack();
    let url = s.url("/v1/chat/completions");
    let no_store = post_with(&url, KEY, &ask_skip("skip me please"), &[("cache-control", "no-store")]);
    assert_eq!(no_store.header("x-gateway-cache"), Some("skip; reason=no_store"));
    let mut warm = ask_skip("creative please");
    warm["temperature"] = json!(0.7);
    assert_eq!(post_with(&url, KEY, &warm, &[]).header("x-gateway-cache"), Some("skip; reason=temperature"));
    let personal = post_with(&url, KEY, &ask_skip("What time is it in Paris?"), &[]);
    assert_eq!(personal.header("x-gateway-cache"), Some("skip; reason=skip_pattern"));
}

#[test]
fn same_idempotency_key_five_times_concurrently_is_one_upstream_call() {
    let s = stack();
    let before = s.mock_calls("e2e-idem+delay_first_ms=400");
    let body = json!({"model": "idempotent", "messages": [{"role": "user", "content": "charge me once"}]});
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                // A well-behaved client retries a 409 after Retry-After.
                for _ in 0..20 {
                    let r =
                        post_with(&stack().url("/v1/chat/completions"), KEY, &body, &[("idempotency-key", "order-42")]);
                    if r.status != 409 {
                        return r;
                    }
                    assert!(r.header("retry-after").is_some());
                    std::thread::sleep(Duration::from_millis(250));
                }
                panic!("still in flight after 20 tries");
            })
        })
        .collect();
    let replies: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(replies.iter().all(|r| r.status == 200), "{:?}", replies.iter().map(|r| r.status).collect::<Vec<_>>());
    assert!(replies.iter().all(|r| r.body == replies[0].body), "identical bodies");
    assert_eq!(replies.iter().filter(|r| r.header("idempotent-replayed") == Some("true")).count(), 4);
    assert_eq!(s.mock_calls("e2e-idem+delay_first_ms=400"), before + 1);
    let mut different = body.clone();
    different["messages"][0]["content"] = json!("something else");
    let reused = post_with(&s.url("/v1/chat/completions"), KEY, &different, &[("idempotency-key", "order-42")]);
    assert_eq!(reused.error(422)["code"], "idempotency_key_reused");
}

#[test]
fn a_task_header_routing_elsewhere_never_gets_another_routes_cached_answer() {
    let s = stack();
    let body = json!({"model": "cached-task-a", "temperature": 0, "messages": [{"role": "user", "content": "task?"}]});
    let first = post_with(&s.url("/v1/chat/completions"), KEY, &body, &[]);
    assert_eq!(first.status, 200, "{}", first.body);
    std::thread::sleep(Duration::from_millis(300)); // the cache write happens after the response
    let again = post_with(&s.url("/v1/chat/completions"), KEY, &body, &[]);
    assert_eq!(again.header("x-gateway-cache"), Some("hit"), "the route's own repeat is a hit");
    // Same body, but the task header resolves it to another logical model and deployment.
    let routed = post_with(&s.url("/v1/chat/completions"), KEY, &body, &[("x-gateway-task", "cached-task-b")]);
    assert_eq!(routed.status, 200, "{}", routed.body);
    assert_ne!(routed.header("x-gateway-cache"), Some("hit"), "another route's answer was served");
    assert_eq!(routed.header("x-gateway-deployment"), Some("oa-cached-task-b"));
    assert_eq!(s.upstream_calls(&routed).len(), 1, "answered by its own deployment");
}
