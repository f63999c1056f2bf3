//! A refused upload never reaches any isolate, including one that starts after it (issue 15):
//! an admin writes invalid routes, prices and budgets with plain `wrangler kv key put` while the
//! gateway is stopped, and the restarted gateway (a new isolate, nothing in memory) serves the
//! last documents that validated, says so in `/admin/status`, and `/healthz` reports degraded.

use e2e::client::{post, request, Reply};
use e2e::{key_entry, own_stack, usage_events_of, Stack, StackOptions, KEY, KEY_B};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Generous: the usage queue batches for up to 5 s, and the machine may be busy.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(90);
const FROZEN_KEY: &str = "gk_e2e_durable_frozen_0101";

fn hello() -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
}

fn status(s: &Stack) -> Value {
    let r = request("GET", &s.url("/admin/status"), Some("dev-admin-token"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn healthz(s: &Stack) -> Reply {
    request("GET", &s.url("/healthz"), None, None)
}

/// The priced usage event of one request, once the queue consumer stored it.
fn event_of(s: &Stack, reply: &Reply, out: &str) -> Value {
    let id = reply.header("x-request-id").expect("x-request-id").to_string();
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    loop {
        let files = s.exported_usage(&s.state.parent().expect("run dir").join(out));
        if let Some(e) = usage_events_of("tenant-a", &files).1.remove(&id) {
            return e;
        }
        assert!(Instant::now() < deadline, "no usage event for {id} within {DELIVERY_DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn refused_routes_prices_and_budgets_never_reach_a_gateway_started_after_them() {
    let budgets = json!({"version": 1, "tenants": {"tenant-frozen": {"period": "month", "hard_micro_usd": 0}}});
    let s = own_stack(
        "durable-config",
        StackOptions {
            seed: vec![
                json!({"key": "budgets", "value": budgets.to_string()}),
                key_entry(FROZEN_KEY, json!({"tenant": "tenant-frozen", "app": "durable-e2e"})),
            ],
            ..StackOptions::default()
        },
    );
    // The first reads validate each document and keep a durable copy of it.
    let health = healthz(&s);
    assert_eq!((health.status, health.json()["status"].as_str()), (200, Some("ok")), "{}", health.body);
    let before = event_of(&s, &post(&s.url("/v1/chat/completions"), KEY, &hello()), "before");
    assert!(before["cost_micro_usd"].as_u64().is_some(), "priced: {before}");
    assert_eq!(post(&s.url("/v1/chat/completions"), FROZEN_KEY, &hello()).status, 402);
    let served = status(&s)["config"].clone();

    s.restart(|s| {
        s.wrangler_kv_put("routes", "{\"version\": 1, \"deployments\": {");
        s.wrangler_kv_put("prices", &json!({"version": 1, "models": {"gpt-4o-mini": [{"input": -1}]}}).to_string());
        s.wrangler_kv_put(
            "budgets",
            &json!({"version": 1, "tenants": {"tenant-frozen": {"period": "week"}}}).to_string(),
        );
    });

    for key in [KEY, KEY_B] {
        let r = post(&s.url("/v1/chat/completions"), key, &hello());
        assert_eq!(r.status, 200, "served from the last good route table: {}", r.body);
    }
    let r = post(&s.url("/v1/chat/completions"), FROZEN_KEY, &hello());
    assert_eq!(r.status, 402, "the last good budgets still apply: {}", r.body);
    let priced = event_of(&s, &post(&s.url("/v1/chat/completions"), KEY, &hello()), "after");
    assert_eq!(priced["cost_micro_usd"], before["cost_micro_usd"], "priced by the last good table: {priced}");
    assert_eq!(priced["price_missing"], false);

    let v = status(&s);
    for doc in ["routes", "prices", "budgets"] {
        let h = &v["config"][doc];
        assert_eq!(h["degraded"], true, "{doc}: {h}");
        assert_eq!(h["serving"]["source"], "last_good", "{doc}: {h}");
        assert_eq!(
            h["serving"]["fingerprint"], served[doc]["serving"]["fingerprint"],
            "{doc}: the version served before"
        );
        assert!(h["serving"]["validated_ms"].as_u64().unwrap_or(0) > 0, "{doc}: {h}");
        let refused = &h["refused"];
        assert!(
            refused["fingerprint"].is_string() && refused["fingerprint"] != h["serving"]["fingerprint"],
            "{doc}: {h}"
        );
        assert!(refused["errors"].as_array().is_some_and(|e| !e.is_empty()), "{doc}: {h}");
    }
    assert!(v["route_table"]["problem"].as_str().is_some_and(|p| p.contains("EOF")), "{v}");
    let health = healthz(&s);
    assert_eq!(health.status, 200, "still serving: load balancers keep it in rotation");
    assert_eq!(health.json(), json!({"status": "degraded", "degraded": ["routes", "prices", "budgets"]}));

    // A valid table again (with a deployment whose credential nobody bound): it serves at once.
    let mut table: Value =
        serde_json::from_str(&std::fs::read_to_string(s.state.join("../routes.json")).unwrap()).unwrap();
    table["deployments"]["oa-unbound"] = json!({"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                                                "model": "e2e-unbound", "credential": "NOT_BOUND_KEY"});
    s.put_config("routes", &table.to_string());
    let deadline = Instant::now() + Duration::from_secs(20);
    let v = loop {
        let v = status(&s);
        if v["config"]["routes"]["serving"]["source"] == "current" {
            break v;
        }
        assert!(Instant::now() < deadline, "the fixed table did not serve within 20 s: {v}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(v["config"]["routes"]["degraded"], false, "{v}");
    assert_eq!(v["config"]["routes"]["refused"], Value::Null);
    assert_eq!(v["unbound_credentials"], json!([{"deployment": "oa-unbound", "credential": "NOT_BOUND_KEY"}]));
    assert_eq!(healthz(&s).json(), json!({"status": "degraded", "degraded": ["prices", "budgets"]}));
}
