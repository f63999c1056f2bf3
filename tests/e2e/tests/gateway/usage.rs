//! Usage metering end to end: a mixed run under a tenant of its own yields exactly one event per
//! request in R2 after dedupe, with the tokens the mock reported and the price table's costs; then
//! `scripts/usage-report` over the same exports prints the same totals.

use e2e::client::{post_with, stream};
use e2e::{stack, Stack, KEY_USAGE};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const TENANT: &str = "tenant-usage";
/// The local queue delivers after max_batch_timeout (5 s); R2 polling allows for a loaded machine.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(90);
const PLAIN_REPEATS: usize = 20;
const PLAIN_WORKERS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Tokens {
    input: u64,
    output: u64,
    cached_read: u64,
    cache_write: u64,
    reasoning: u64,
}

impl Tokens {
    /// From an OpenAI-format `usage` (what the client saw, i.e. what the mock reported).
    fn of(usage: &Value) -> Tokens {
        let prompt = usage["prompt_tokens"].as_u64().expect("prompt_tokens");
        let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
        Tokens {
            input: prompt - cached,
            output: usage["completion_tokens"].as_u64().expect("completion_tokens"),
            cached_read: cached,
            cache_write: 0,
            reasoning: usage["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap_or(0),
        }
    }

    fn in_event(e: &Value) -> Tokens {
        let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {e}"));
        Tokens {
            input: n("input_tokens"),
            output: n("output_tokens"),
            cached_read: n("cached_read_tokens"),
            cache_write: n("cache_write_tokens"),
            reasoning: n("reasoning_tokens"),
        }
    }
}

/// What one request must have produced.
#[derive(Debug)]
struct Expected {
    label: &'static str,
    request_id: String,
    logical_model: &'static str,
    price_key: &'static str,
    status: u16,
    tokens: Tokens,
    estimated: bool,
}

fn chat(s: &Stack, body: &Value, headers: &[(&str, &str)]) -> (String, Value) {
    let r = post_with(&s.url("/v1/chat/completions"), KEY_USAGE, body, headers);
    let id = r.header("x-request-id").unwrap_or_else(|| panic!("no x-request-id: {} {}", r.status, r.body)).to_string();
    let v = serde_json::from_str(&r.body).unwrap_or(Value::Null);
    let failing = body["model"] == "always-500" || body["model"] == "all-fail";
    assert!(r.status == 200 || failing, "{}: {}", r.status, r.body);
    (id, v)
}

fn streamed(s: &Stack, body: &Value) -> (String, Option<Value>) {
    let r = stream(&s.url("/v1/chat/completions"), KEY_USAGE, body);
    assert_eq!(r.status, 200);
    assert!(r.done(), "{:?}", r.events);
    let id = r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-request-id")).expect("x-request-id").1.clone();
    let usage = r.chunks().iter().rev().find(|c| !c["usage"].is_null()).map(|c| c["usage"].clone());
    (id, usage)
}

/// Reads the first SSE bytes, then hangs up while the slow model is still generating.
fn disconnect_mid_stream(s: &Stack, body: &Value) -> String {
    let resp = ureq::post(&s.url("/v1/chat/completions"))
        .set("authorization", &format!("Bearer {KEY_USAGE}"))
        .set("content-type", "application/json")
        .send_string(&body.to_string())
        .expect("stream starts");
    let id = resp.header("x-request-id").expect("x-request-id").to_string();
    let mut reader = resp.into_reader();
    let mut first = [0u8; 64];
    assert!(reader.read(&mut first).expect("first bytes") > 0);
    drop(reader);
    id
}

fn messages(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The gateway's limiter estimate (crate::estimate): ceil(chars / 4) + 4 per message.
fn estimated_input(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4) + 4
}

fn run_mix(s: &Stack) -> Vec<Expected> {
    let mut out = Vec::new();
    let mut add = |label, request_id, logical_model, price_key, status, tokens, estimated| {
        out.push(Expected { label, request_id, logical_model, price_key, status, tokens, estimated })
    };

    let body = json!({"model": "gpt-4o-mini", "messages": messages("Say hello"), "user": "end-user-42",
                      "metadata": {"ab_test": "b", "feature": "overridden"}});
    let (id, v) = chat(s, &body, &[("x-gateway-tags", "feature=search,team=growth")]);
    add("tagged", id, "gpt-4o-mini", "gpt-4o-mini", 200, Tokens::of(&v["usage"]), false);

    let (id, v) = chat(s, &json!({"model": "claude-sonnet", "messages": messages("Bonjour")}), &[]);
    add("anthropic", id, "claude-sonnet", "claude-sonnet-4-5", 200, Tokens::of(&v["usage"]), false);

    let body = json!({"model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true},
                      "messages": messages("stream please")});
    let (id, usage) = streamed(s, &body);
    let stream_tokens = Tokens::of(&usage.expect("usage chunk"));
    add("stream", id, "gpt-4o-mini", "gpt-4o-mini", 200, stream_tokens, false);

    // Same prompt without include_usage: the gateway still asks the vendor and bills the same counts.
    let (id, usage) =
        streamed(s, &json!({"model": "gpt-4o-mini", "stream": true, "messages": messages("stream please")}));
    assert!(usage.is_none(), "usage chunk the client did not ask for");
    add("stream-no-usage", id, "gpt-4o-mini", "gpt-4o-mini", 200, stream_tokens, false);

    let body = json!({"model": "claude-sonnet", "stream": true, "stream_options": {"include_usage": true},
                      "messages": messages("stream in anthropic")});
    let (id, usage) = streamed(s, &body);
    add("anthropic-stream", id, "claude-sonnet", "claude-sonnet-4-5", 200, Tokens::of(&usage.expect("usage")), false);

    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]);
    let (id, v) =
        chat(s, &json!({"model": "gpt-4o-mini", "messages": messages("Weather in Paris?"), "tools": tools}), &[]);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    add("tool-call", id, "gpt-4o-mini", "gpt-4o-mini", 200, Tokens::of(&v["usage"]), false);

    let (id, v) = chat(s, &json!({"model": "primary-500-then-fallback", "messages": messages("fall back")}), &[]);
    add("fallback", id, "primary-500-then-fallback", "e2e-fallback", 200, Tokens::of(&v["usage"]), false);

    let (id, _) = chat(s, &json!({"model": "always-500", "messages": messages("fail")}), &[]);
    add("error", id, "always-500", "e2e-500+status=500", 502, Tokens::default(), false);

    // Two deployments tried, neither answered: not a fallback.
    let (id, _) = chat(s, &json!({"model": "all-fail", "messages": messages("fail twice")}), &[]);
    add("all-failed", id, "all-fail", "e2e-unreachable", 502, Tokens::default(), false);

    // Anthropic cannot return two choices: the next deployment serves, and the event is written.
    let (id, v) = chat(s, &json!({"model": "anthropic-first", "n": 2, "messages": messages("two please")}), &[]);
    add("unbuildable", id, "anthropic-first", "gpt-4o-mini", 200, Tokens::of(&v["usage"]), false);

    // A stream the vendor cuts after bytes were relayed: the event names the interruption.
    let text = "cut me off";
    let body = json!({"model": "cut-stream", "stream": true, "max_tokens": 30, "messages": messages(text)});
    let r = stream(&s.url("/v1/chat/completions"), KEY_USAGE, &body);
    assert!(r.status == 200 && !r.done(), "{:?}", r.events);
    let id = r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-request-id")).expect("x-request-id").1.clone();
    let estimate = Tokens { input: estimated_input(text), output: 30, ..Tokens::default() };
    add("cut", id, "cut-stream", "e2e-cut+cut_after=3+delay_ms=20", 502, estimate, true);

    let (id, v) = chat(s, &json!({"model": "slow-anthropic", "messages": messages("unpriced")}), &[]);
    add("unpriced", id, "slow-anthropic", "e2e-slow-an+delay_ms=150+words=6", 200, Tokens::of(&v["usage"]), false);

    let text = "count slowly";
    let id = disconnect_mid_stream(
        s,
        &json!({"model": "slow-openai", "stream": true, "max_tokens": 40, "messages": messages(text)}),
    );
    let estimate = Tokens { input: estimated_input(text), output: 40, ..Tokens::default() };
    add("disconnect", id, "slow-openai", "e2e-slow+delay_ms=150+words=6", 499, estimate, true);
    // Usage asked: the usage chunk would have been the client's; hanging up still ends and bills it so.
    let text = "count slowly, with usage";
    let body = json!({"model": "slow-openai", "stream": true, "stream_options": {"include_usage": true},
                      "max_tokens": 40, "messages": messages(text)});
    let id = disconnect_mid_stream(s, &body);
    let estimate = Tokens { input: estimated_input(text), output: 40, ..Tokens::default() };
    add("disconnect", id, "slow-openai", "e2e-slow+delay_ms=150+words=6", 499, estimate, true);

    // A few at a time: enough to fill batches, without starving the timing-sensitive tests beside it.
    let workers: Vec<_> = (0..PLAIN_WORKERS)
        .map(|w| {
            std::thread::spawn(move || {
                (w..PLAIN_REPEATS)
                    .step_by(PLAIN_WORKERS)
                    .map(|i| {
                        chat(
                            stack(),
                            &json!({"model": "gpt-4o-mini", "messages": messages(&format!("plain {i}"))}),
                            &[],
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for handle in workers {
        for (id, v) in handle.join().expect("plain requests") {
            add("plain", id, "gpt-4o-mini", "gpt-4o-mini", 200, Tokens::of(&v["usage"]), false);
        }
    }
    out
}

fn prices() -> Value {
    let text = std::fs::read_to_string(e2e::root().join("tests/e2e/fixtures/prices.json")).expect("prices fixture");
    serde_json::from_str(&text).unwrap()
}

/// The fixture's entry in force at the event's time: (version, cost in µ$ rounded half up), or None.
fn expected_cost(prices: &Value, key: &str, ts: &str, t: Tokens) -> Option<(String, u64)> {
    let entry = prices["models"][key]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["effective_from"].as_str().unwrap()[..19] <= ts[..19])?;
    let p = |k: &str| u128::from(entry[k].as_u64().unwrap());
    let total = u128::from(t.input) * p("input")
        + u128::from(t.output) * p("output")
        + u128::from(t.cached_read) * p("cached_read")
        + u128::from(t.cache_write) * p("cache_write");
    Some((format!("{key}@{}", entry["effective_from"].as_str().unwrap()), ((total + 500_000) / 1_000_000) as u64))
}

fn check_layout(files: &BTreeMap<String, String>) {
    for (key, body) in files {
        let parts: Vec<&str> = key.split('/').collect();
        assert_eq!(parts.len(), 4, "{key}");
        assert_eq!(parts[0], "usage");
        let lines: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(body.ends_with('\n'));
        let first = lines[0]["event_id"].as_str().unwrap();
        assert_eq!(parts[3], format!("{first}-{}.ndjson", lines.len()), "object name is <first event id>-<events>");
        for v in &lines {
            assert_eq!(
                parts[1],
                format!("dt={}", v["dt"].as_str().unwrap()),
                "{key}: partitioned by the event's own day"
            );
            assert_eq!(parts[2], format!("hour={:02}", v["hour"].as_u64().unwrap()), "{key}: and hour");
        }
    }
}

#[test]
fn mixed_run_yields_one_priced_event_per_request() {
    let s = stack();
    let expected = run_mix(s);
    let n = expected.len();
    let ids: BTreeSet<&str> = expected.iter().map(|e| e.request_id.as_str()).collect();
    assert_eq!(ids.len(), n, "request ids are unique");

    let out: PathBuf = s.state.parent().unwrap().join("usage-export");
    let started = Instant::now();
    let (files, lines, events) = loop {
        let files = s.exported_usage(&out);
        let (lines, events) = e2e::usage_events_of(TENANT, &files);
        if ids.iter().all(|id| events.contains_key(*id)) || started.elapsed() > DELIVERY_DEADLINE {
            break (files, lines, events);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let missing: Vec<&&str> = ids.iter().filter(|id| !events.contains_key(**id)).collect();
    assert!(missing.is_empty(), "no event in R2 after {DELIVERY_DEADLINE:?} for {missing:?}");
    assert_eq!(events.len(), n, "exactly one event per client request after dedupe");
    assert!(lines >= n);
    check_layout(&files);
    // Each object says what it is and how many events it holds (the dead-letter count reads it).
    let metadata = s.r2_metadata();
    let objects: Vec<_> = files.iter().filter(|(k, _)| k.starts_with("usage/")).collect();
    assert!(!objects.is_empty());
    for (key, body) in objects {
        let object = metadata.get(key).unwrap_or_else(|| panic!("{key} is not in R2's index"));
        assert_eq!(object["content_type"], "application/x-ndjson", "{key}");
        assert_eq!(object["custom"]["events"], body.lines().count().to_string(), "{key}: {object}");
    }

    let prices = prices();
    let mut total_cost = 0u64;
    let mut total = Tokens::default();
    for x in &expected {
        let e = &events[&x.request_id];
        let what = format!("{} ({}): {e}", x.label, x.request_id);
        assert_eq!(
            (e["tenant"].as_str(), e["app"].as_str(), e["env"].as_str()),
            (Some(TENANT), Some("usage-e2e"), Some("test")),
            "{what}"
        );
        assert_eq!(e["logical_model"], x.logical_model, "{what}");
        assert_eq!(e["status"], x.status, "{what}");
        assert_eq!(Tokens::in_event(e), x.tokens, "{what}");
        assert_eq!(e["estimated"], x.estimated, "{what}");
        assert_eq!(e["cache_hit"], false, "{what}");
        let attempts = e["attempts"].as_array().expect("attempts");
        assert_eq!(e["attempt_count"].as_u64(), Some(attempts.len() as u64), "{what}");
        for (i, a) in attempts.iter().enumerate() {
            assert_eq!(a["attempt_id"], format!("{}:{}", x.request_id, i + 1), "{what}");
        }
        let ts = e["ts"].as_str().unwrap();
        match expected_cost(&prices, x.price_key, ts, x.tokens) {
            Some((version, cost)) if x.tokens != Tokens::default() => {
                assert_eq!(e["price_version"], version, "{what}");
                assert_eq!(e["cost_micro_usd"], cost, "{what}");
                assert_eq!(e["price_missing"], false, "{what}");
                total_cost += cost;
            }
            None if x.tokens != Tokens::default() => {
                assert!(e["cost_micro_usd"].is_null() && e["price_version"].is_null(), "{what}");
                assert_eq!(e["price_missing"], true, "{what}");
            }
            _ => assert_eq!(
                (e["cost_micro_usd"].as_u64(), e["price_missing"].as_bool()),
                (Some(0), Some(false)),
                "{what}"
            ),
        }
        total.input += x.tokens.input;
        total.output += x.tokens.output;
        total.cached_read += x.tokens.cached_read;
        match x.label {
            "tagged" => {
                assert_eq!(
                    (e["feature"].as_str(), e["end_user"].as_str()),
                    (Some("search"), Some("end-user-42")),
                    "{what}"
                );
                assert_eq!(e["tags"], json!({"ab_test": "b", "feature": "search", "team": "growth"}), "{what}");
                assert_eq!(
                    e["price_version"], "gpt-4o-mini@2025-01-01T00:00:00Z",
                    "{what}: the 2099 entry is not in force"
                );
            }
            "fallback" => {
                assert_eq!(e["fallback"], true, "{what}");
                assert_eq!(e["deployment"], "oa-fallback", "{what}");
                assert_eq!(attempts[0]["status"], 500, "{what}");
                assert_eq!(attempts[0]["input_tokens"], 0, "{what}");
            }
            "error" => assert_eq!(e["error_class"], "server_error", "{what}"),
            "all-failed" => {
                assert_eq!(e["fallback"], false, "{what}: no deployment answered");
                assert!(attempts.len() >= 2, "{what}");
            }
            "unbuildable" => {
                assert_eq!((e["deployment"].as_str(), e["fallback"].as_bool()), (Some("oa"), Some(false)), "{what}");
                assert_eq!(attempts.len(), 1, "{what}: the unbuildable deployment made no upstream call");
            }
            "cut" => {
                assert_eq!(e["error_code"], "upstream_stream_interrupted", "{what}");
            }
            "stream" | "anthropic-stream" => assert!(e["ttft_ms"].as_u64().is_some(), "{what}"),
            "disconnect" => {
                assert_eq!(e["error_class"], "client_disconnected", "{what}");
                assert_eq!(e["estimated_input_tokens"], x.tokens.input, "{what}");
                assert!(e["actual_input_tokens"].is_null(), "{what}");
            }
            "unpriced" => assert_eq!(e["price_missing"], true, "{what}"),
            _ => {
                assert_eq!(e["fallback"], false, "{what}");
                assert_eq!(e["actual_input_tokens"], x.tokens.input + x.tokens.cached_read, "{what}");
            }
        }
    }

    // A redelivered batch lands in another object: the report must count its events once.
    let (original, body) = files.iter().find(|(_, b)| b.contains(TENANT)).expect("an object with our events");
    let redelivered = out.join(original.replace(".ndjson", "-redelivered.ndjson"));
    std::fs::write(&redelivered, body).expect("duplicate object");
    let duplicates = body.lines().filter(|l| l.contains(&format!("\"tenant\":\"{TENANT}\""))).count();

    let report = Command::new(s.root.join("scripts/usage-report"))
        .args(["--dir", out.to_str().unwrap(), "--tenant", TENANT, "--json"])
        .output()
        .expect("run scripts/usage-report");
    assert!(report.status.success(), "usage-report failed: {}", String::from_utf8_lossy(&report.stderr));
    let r: Value = serde_json::from_slice(&report.stdout).expect("report JSON");
    let t = &r["totals"];
    assert_eq!(r["events"], n, "{r}");
    assert_eq!(r["lines"], lines + duplicates, "{r}");
    assert_eq!(r["duplicates"], lines + duplicates - n, "{r}");
    assert_eq!(t["requests"], n, "{r}");
    assert_eq!(t["input_tokens"], total.input, "{r}");
    assert_eq!(t["output_tokens"], total.output, "{r}");
    assert_eq!(t["cached_read_tokens"], total.cached_read, "{r}");
    assert_eq!(t["cost_micro_usd"], total_cost, "{r}");
    assert_eq!(
        (t["estimated"].as_u64(), t["unpriced"].as_u64(), t["errors"].as_u64()),
        (Some(3), Some(2), Some(5)),
        "estimated: disconnect ×2, cut; unpriced: slow-anthropic, cut; errors: error, all-failed, disconnect ×2, cut: {r}"
    );
    let models: BTreeSet<&str> = r["rows"].as_array().unwrap().iter().filter_map(|row| row["model"].as_str()).collect();
    assert!(
        models.contains("gpt-4o-mini") && models.contains("claude-sonnet-4-5") && models.contains("e2e-fallback"),
        "{models:?}"
    );
    let search = r["rows"].as_array().unwrap().iter().find(|row| row["feature"] == "search").expect("feature row");
    assert_eq!(search["requests"], 1, "{r}");
}
