//! No usage event is lost when R2 keeps refusing a batch (issue 15): with the test-only fault
//! `USAGE_EXPORT_FAULT_TENANT` every `usage/` write holding that tenant's events fails, so its
//! messages exhaust the consumer's retries (lowered to 1 here) and reach the dead-letter queue,
//! whose consumer parks them under `usage-dlq/` with the error; `/admin/status` counts them, and
//! every event, faulty tenant's or not, is stored somewhere the report reads.

use e2e::client::{post, request};
use e2e::{key_entry, own_stack, usage_events_of, StackOptions, KEY};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const FAULTY_KEY: &str = "gk_e2e_dead_letter_0102";
const FAULTY_TENANT: &str = "tenant-dead-letter";
const REQUESTS: usize = 12;
/// Two deliveries and the dead-letter one, each after a batch window of up to 5 s, on a busy machine.
const DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn events_r2_keeps_refusing_are_parked_with_their_error_and_counted() {
    let s = own_stack(
        "dead-letter",
        StackOptions {
            seed: vec![key_entry(FAULTY_KEY, json!({"tenant": FAULTY_TENANT, "app": "dlq-e2e"}))],
            vars: vec![format!("USAGE_EXPORT_FAULT_TENANT={FAULTY_TENANT}"), "USAGE_REDELIVERY_DELAY_S=0".into()],
            usage_max_retries: Some(1),
        },
    );
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let mut faulty = BTreeSet::new();
    let mut healthy = BTreeSet::new();
    for _ in 0..REQUESTS {
        for (key, ids) in [(FAULTY_KEY, &mut faulty), (KEY, &mut healthy)] {
            let r = post(&s.url("/v1/chat/completions"), key, &body);
            assert_eq!(r.status, 200, "{}", r.body);
            ids.insert(r.header("x-request-id").unwrap().to_string());
        }
    }
    let out = s.state.parent().expect("run dir").join("exports");
    let deadline = Instant::now() + DEADLINE;
    let files = loop {
        let files = s.exported_usage(&out);
        let parked: BTreeSet<String> = usage_events_of(FAULTY_TENANT, &files).1.into_keys().collect();
        let stored: BTreeSet<String> = usage_events_of("tenant-a", &files).1.into_keys().collect();
        if parked.is_superset(&faulty) && stored.is_superset(&healthy) {
            break files;
        }
        assert!(
            Instant::now() < deadline,
            "within {DEADLINE:?}: {} of {REQUESTS} parked",
            parked.intersection(&faulty).count()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // Events share their object's fate: healthy ones batched with a faulty one are parked too.
    let mut parked_lines = 0;
    for (key, body) in &files {
        let one: BTreeMap<String, String> = std::iter::once((key.clone(), body.clone())).collect();
        if usage_events_of(FAULTY_TENANT, &one).0 > 0 {
            assert!(key.starts_with("usage-dlq/dt="), "the fault kept them out of usage/: {key}");
        }
        if key.starts_with("usage-dlq/") {
            parked_lines += body.lines().count();
        }
    }
    assert!(parked_lines >= REQUESTS, "{parked_lines} parked");
    // Each parked copy says in R2 what it holds and why it is there (the status counts read it).
    let metadata = s.r2_metadata();
    for (key, body) in files.iter().filter(|(k, _)| k.starts_with("usage-dlq/")) {
        let object = metadata.get(key).unwrap_or_else(|| panic!("{key} is not in R2's index"));
        assert_eq!(object["content_type"], "application/x-ndjson", "{key}");
        assert_eq!(object["custom"]["events"], body.lines().count().to_string(), "{key}: {object}");
        assert_eq!(object["custom"]["redelivered"], "false", "{key}: {object}");
        let error = object["custom"]["error"].as_str().unwrap_or_default();
        assert!(error.contains("injected fault"), "{key}: {object}");
    }
    let v = request("GET", &s.url("/admin/status"), Some("dev-admin-token"), None).json();
    let dlq = &v["usage_dead_letter"];
    assert_eq!(dlq["events"].as_u64(), Some(parked_lines as u64), "{v}");
    assert_eq!(
        dlq["not_redelivered"].as_u64(),
        Some(parked_lines as u64),
        "every parked object held a faulty event: {v}"
    );
    assert_eq!(dlq["complete"], true);
    let errors = dlq["errors"].as_array().expect("errors");
    assert!(errors.iter().any(|e| e.as_str().is_some_and(|e| e.contains("injected fault"))), "their error: {v}");
}
