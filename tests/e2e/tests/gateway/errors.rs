use e2e::client::{post, request};
use e2e::{stack, KEY, KEY_EXPIRED, KEY_LIMITED_MODELS, KEY_REVOKED};
use serde_json::json;

fn chat_url() -> String {
    stack().url("/v1/chat/completions")
}

fn hello(model: &str) -> serde_json::Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn missing_key_is_401() {
    let r = request("POST", &chat_url(), None, Some(&hello("gpt-4o-mini").to_string()));
    assert_eq!(r.error(401)["code"], "missing_api_key");
}

#[test]
fn unknown_key_is_401() {
    let r = post(&chat_url(), "gk_not_a_real_key", &hello("gpt-4o-mini"));
    assert_eq!(r.error(401)["code"], "invalid_api_key");
}

#[test]
fn revoked_and_expired_keys_are_401() {
    assert_eq!(post(&chat_url(), KEY_REVOKED, &hello("gpt-4o-mini")).error(401)["code"], "key_revoked");
    assert_eq!(post(&chat_url(), KEY_EXPIRED, &hello("gpt-4o-mini")).error(401)["code"], "key_expired");
}

#[test]
fn model_outside_key_allow_list_is_403() {
    let r = post(&chat_url(), KEY_LIMITED_MODELS, &hello("gpt-4o-mini"));
    assert_eq!(r.error(403)["code"], "model_not_allowed");
    assert_eq!(post(&chat_url(), KEY_LIMITED_MODELS, &hello("claude-sonnet")).status, 200);
}

#[test]
fn unknown_model_is_404() {
    let r = post(&chat_url(), KEY, &hello("no-such-model"));
    let e = r.error(404);
    assert_eq!(e["code"], "model_not_found");
    assert_eq!(e["param"], "model");
}

#[test]
fn malformed_json_is_400() {
    let r = request("POST", &chat_url(), Some(KEY), Some("{\"model\": \"gpt-4o-mini\", \"messages\": ["));
    assert_eq!(r.error(400)["type"], "invalid_request_error");
}

#[test]
fn missing_fields_are_400() {
    let r = post(&chat_url(), KEY, &json!({"model": "gpt-4o-mini"}));
    assert_eq!(r.error(400)["param"], "messages");
    let r = post(&chat_url(), KEY, &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.error(400)["param"], "model");
    let r = post(&chat_url(), KEY, &json!({"model": "gpt-4o-mini", "messages": "hi"}));
    r.error(400);
}

#[test]
fn huge_body_is_413() {
    let big = "x".repeat(9 * 1024 * 1024);
    let r = post(&chat_url(), KEY, &json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": big}]}));
    assert_eq!(r.error(413)["code"], "request_too_large");
}

/// Posts `body` with `Transfer-Encoding: chunked` (no `Content-Length`), as a streaming upload does.
fn post_chunked(body: String) -> e2e::client::Reply {
    let req = ureq::post(&chat_url())
        .timeout(std::time::Duration::from_secs(60))
        .set("content-type", "application/json")
        .set("authorization", &format!("Bearer {KEY}"));
    match req.send(std::io::Cursor::new(body.into_bytes())) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => e2e::client::collect(r),
        Err(e) => panic!("chunked POST: {e}"),
    }
}

#[test]
fn a_chunked_body_is_read_and_a_huge_one_is_413() {
    let r = post_chunked(hello("gpt-4o-mini").to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let big = "x".repeat(9 * 1024 * 1024);
    let r = post_chunked(json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": big}]}).to_string());
    assert_eq!(r.error(413)["code"], "request_too_large");
}

#[test]
fn upstream_failure_is_502() {
    let s = stack();
    let r = post(&chat_url(), KEY, &hello("always-500"));
    r.error(502);
    assert!(r.header("x-request-id").is_some());
    assert!(s.mock_calls("e2e-500+status=500") >= 1);
    let r = post(&chat_url(), KEY, &hello("unreachable"));
    r.error(502);
}

#[test]
fn upstream_bad_request_is_passed_as_400() {
    let r = post(&chat_url(), KEY, &hello("always-400"));
    assert_eq!(r.error(400)["type"], "invalid_request_error");
}

#[test]
fn unknown_path_and_wrong_method() {
    let s = stack();
    assert_eq!(request("GET", &s.url("/v1/nope"), Some(KEY), None).error(404)["code"], "unknown_url");
    assert_eq!(request("GET", &chat_url(), Some(KEY), None).error(405)["code"], "method_not_allowed");
}

#[test]
fn fallback_serves_when_primary_fails_and_not_on_400() {
    let s = stack();
    let before = s.mock_calls("e2e-fallback");
    let r = post(&chat_url(), KEY, &hello("primary-500-then-fallback"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-gateway-deployment"), Some("oa-fallback"));
    assert_eq!(r.header("x-gateway-attempts"), Some("2"));
    let r = post(&chat_url(), KEY, &hello("primary-400-no-fallback"));
    r.error(400);
    // Only the 500 case reached the fallback.
    assert_eq!(s.mock_calls("e2e-fallback"), before + 1);
}
