//! One usage event per client request, with the attempts inside it: what finance and analysts read.
//!
//! Built from a `RequestOutcome` and the price table after the response; pure (time is an input).
//! Tokens come from the vendor's usage; an attempt that produced a response without usage is
//! charged the limiter's estimate and flagged `estimated`, and so is a cut stream whose output
//! count never came (its output estimated from what it delivered). Failed attempts that never produced a
//! response carry zero tokens (vendors do not bill them). Costs follow `crate::config::prices`.

// UTC calendar helpers live in the limiter crate, shared with the budget object.
use limiter::utc;

use crate::canonical::usage::Usage;
use crate::config::prices::PriceTable;
#[cfg(test)]
use crate::usage::record::CacheHit;
use crate::usage::record::{Attempt, Ingress, RequestOutcome, RequestShape};
use crate::usage::tags;
#[cfg(test)]
use crate::usage::tags::{merge_tags, metadata_tags, parse_tags_header};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// The part of `cache_write_tokens` written with a 1-hour TTL (the rest are 5-minute writes).
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

impl TokenCounts {
    fn of(u: &Usage) -> Self {
        TokenCounts {
            input_tokens: u.input,
            output_tokens: u.output,
            cached_read_tokens: u.cached_read,
            cache_write_tokens: u.cache_write,
            reasoning_tokens: u.reasoning,
            cache_write_1h_tokens: u.cache_write_1h,
        }
    }

    fn add(&mut self, o: &TokenCounts) {
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(o.output_tokens);
        self.cached_read_tokens = self.cached_read_tokens.saturating_add(o.cached_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(o.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(o.reasoning_tokens);
        self.cache_write_1h_tokens = self.cache_write_1h_tokens.saturating_add(o.cache_write_1h_tokens);
    }

    fn is_zero(&self) -> bool {
        *self == TokenCounts::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEvent {
    /// `<request id>:<attempt number>`, numbered from 1.
    pub attempt_id: String,
    pub attempt_no: u32,
    pub deployment: String,
    pub provider: String,
    pub model: String,
    pub price_key: String,
    pub started_ms: u64,
    pub status: u16,
    pub error_class: Option<String>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    /// The vendor answered (a body or a stream's first bytes); only such attempts carry tokens.
    pub served: bool,
    #[serde(flatten)]
    pub tokens: TokenCounts,
    pub estimated: bool,
    pub estimated_input_tokens: Option<u64>,
    pub actual_input_tokens: Option<u64>,
    pub price_version: Option<String>,
    pub cost_micro_usd: Option<u64>,
    pub price_missing: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageEvent {
    pub schema_version: u32,
    /// The request id: stable across queue redeliveries, so duplicates are removed by it.
    pub event_id: String,
    pub ts_ms: u64,
    pub ts: String,
    pub dt: String,
    pub hour: u8,
    pub tenant: String,
    pub app: String,
    pub env: String,
    pub feature: Option<String>,
    pub end_user: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub logical_model: String,
    pub deployment: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub price_key: Option<String>,
    pub stream: bool,
    /// The front door the request came in by; events written before it existed read as chat.
    #[serde(default)]
    pub ingress: Ingress,
    pub status: u16,
    pub error_class: Option<String>,
    pub error_code: Option<String>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub attempt_count: u32,
    pub fallback: bool,
    pub cache_hit: bool,
    #[serde(flatten)]
    pub tokens: TokenCounts,
    pub estimated: bool,
    pub estimated_input_tokens: Option<u64>,
    pub actual_input_tokens: Option<u64>,
    pub price_version: Option<String>,
    pub cost_micro_usd: Option<u64>,
    pub price_missing: bool,
    /// For a cache hit: the tokens and cost the original request was billed, which this one saved.
    pub avoided_tokens: u64,
    pub avoided_cost_micro_usd: Option<u64>,
    /// Admitted while the tenant's settled spend was past its budget's soft limit, or this
    /// request's own cost took it past (see docs/budgets.md).
    #[serde(default)]
    pub budget_soft_exceeded: bool,
    /// What the prompt-cache reads saved against paying the full input price for those tokens
    /// (0 without reads; `null` when a read could not be priced).
    #[serde(default)]
    pub cache_savings_micro_usd: Option<u64>,
    pub attempts: Vec<AttemptEvent>,
}

/// The money cache reads saved on the attempts that reported them, at the prices that billed them.
fn cache_savings(o: &RequestOutcome, prices: Option<&PriceTable>) -> Option<u64> {
    let mut saved = 0u64;
    for (a, u) in o.attempts.iter().filter_map(|a| a.usage.map(|u| (a, u))).filter(|(_, u)| u.cached_read > 0) {
        let entry = prices?.price_at(&a.price_key, o.started_ms)?.entry;
        let uncached = Usage { input: u.input.saturating_add(u.cached_read), cached_read: 0, ..u };
        saved = saved.saturating_add(entry.cost_micro_usd(&uncached).saturating_sub(entry.cost_micro_usd(&u)));
    }
    Some(saved)
}

fn attempt_event(
    request_id: &str,
    no: u32,
    a: &Attempt,
    shape: Option<&RequestShape>,
    prices: Option<&PriceTable>,
    at_ms: u64,
) -> AttemptEvent {
    let estimate = shape.map(|s| s.estimate(a.default_max_tokens));
    let (tokens, estimated) = match (&a.usage, a.served, estimate) {
        (Some(u), _, _) => (TokenCounts::of(u), a.usage_estimated),
        (None, false, _) => (TokenCounts::default(), false),
        (None, true, Some(e)) => {
            (TokenCounts { input_tokens: e.input, output_tokens: e.output, ..TokenCounts::default() }, true)
        }
        (None, true, None) => (TokenCounts::default(), true),
    };
    let billed = Usage {
        input: tokens.input_tokens,
        output: tokens.output_tokens,
        cached_read: tokens.cached_read_tokens,
        cache_write: tokens.cache_write_tokens,
        reasoning: tokens.reasoning_tokens,
        cache_write_1h: tokens.cache_write_1h_tokens,
    };
    let applied = prices.and_then(|t| t.price_at(&a.price_key, at_ms));
    let (price_version, cost_micro_usd, price_missing) = match applied {
        Some(p) => (Some(p.version()), Some(p.entry.cost_micro_usd(&billed)), false),
        // Nothing to bill is exactly zero, whatever the price would have been.
        None if tokens.is_zero() => (None, Some(0), false),
        None => (None, None, true),
    };
    AttemptEvent {
        attempt_id: format!("{request_id}:{no}"),
        attempt_no: no,
        deployment: a.deployment.clone(),
        provider: a.provider.to_string(),
        model: a.model.clone(),
        price_key: a.price_key.clone(),
        started_ms: a.started_ms,
        status: a.status,
        error_class: a.error_class.map(str::to_string),
        latency_ms: a.latency_ms,
        ttft_ms: a.ttft_ms,
        served: a.served,
        tokens,
        estimated,
        estimated_input_tokens: if a.served { estimate.map(|e| e.input) } else { None },
        actual_input_tokens: a.usage.as_ref().map(Usage::prompt_tokens),
        price_version,
        cost_micro_usd,
        price_missing,
    }
}

impl UsageEvent {
    /// Prices every attempt at the request's start time with the table given (`None`: unavailable,
    /// so every attempt with tokens is flagged `price_missing`).
    pub fn build(o: &RequestOutcome, prices: Option<&PriceTable>, finished_ms: u64) -> UsageEvent {
        let attempts: Vec<AttemptEvent> = o
            .attempts
            .iter()
            .zip(1u32..)
            .map(|(a, no)| attempt_event(&o.request_id, no, a, o.shape.as_ref(), prices, o.started_ms))
            .collect();
        let mut tokens = TokenCounts::default();
        attempts.iter().for_each(|a| tokens.add(&a.tokens));
        let price_missing = attempts.iter().any(|a| a.price_missing);
        let cost_micro_usd =
            if price_missing { None } else { Some(attempts.iter().filter_map(|a| a.cost_micro_usd).sum()) };
        let last = o.attempts.last();
        let last_event = attempts.last();
        // A stream that started (HTTP 200) but ended abnormally reports how it ended: 499 or 502.
        let status = match last {
            Some(a) if o.status == 200 && a.status != 200 => a.status,
            _ => o.status,
        };
        let error_class = if status == 200 { None } else { last.and_then(|a| a.error_class).map(str::to_string) };
        let feature = o.tags.get("feature").cloned();
        let hit = o.cache_hit.as_ref();
        let (avoided_tokens, avoided_cost_micro_usd) = match hit {
            None => (0, Some(0)),
            Some(h) => {
                let applied = h.price_key.as_deref().and_then(|k| prices?.price_at(k, o.started_ms));
                let cost = h.avoided.as_ref().zip(applied).map(|(u, p)| p.entry.cost_micro_usd(u));
                (h.avoided.as_ref().map_or(0, Usage::total_tokens), cost)
            }
        };
        let end_user = o.end_user.as_deref().map(tags::bounded).or_else(|| o.tags.get("user").cloned());
        UsageEvent {
            schema_version: SCHEMA_VERSION,
            event_id: o.request_id.clone(),
            ts_ms: o.started_ms,
            ts: utc::iso_ms(o.started_ms),
            dt: utc::date(o.started_ms),
            hour: utc::hour(o.started_ms),
            tenant: o.tenant.clone(),
            app: o.app.clone(),
            env: o.env.clone(),
            feature,
            end_user,
            tags: o.tags.clone(),
            logical_model: o.logical_model.clone(),
            deployment: last.map(|a| a.deployment.clone()).or_else(|| hit.map(|h| h.deployment.clone())),
            provider: last.map(|a| a.provider.to_string()).or_else(|| hit.and_then(|h| h.provider.clone())),
            model: last.map(|a| a.model.clone()).or_else(|| hit.and_then(|h| h.model.clone())),
            price_key: last.map(|a| a.price_key.clone()).or_else(|| hit.and_then(|h| h.price_key.clone())),
            stream: o.stream,
            ingress: o.ingress,
            status,
            error_class,
            error_code: o.error_code.clone(),
            latency_ms: finished_ms.saturating_sub(o.started_ms),
            ttft_ms: last.and_then(|a| a.ttft_ms.map(|t| (a.started_ms + t).saturating_sub(o.started_ms))),
            attempt_count: attempts.len() as u32,
            // Another deployment preceded the one that answered; with no answer there is no fallback.
            fallback: last.is_some_and(|l| l.served && o.attempts.iter().any(|a| a.deployment != l.deployment)),
            cache_hit: hit.is_some(),
            tokens,
            estimated: attempts.iter().any(|a| a.estimated),
            estimated_input_tokens: last_event.and_then(|a| a.estimated_input_tokens),
            actual_input_tokens: last_event.and_then(|a| a.actual_input_tokens),
            price_version: attempts.iter().rev().filter(|a| !a.tokens.is_zero()).find_map(|a| a.price_version.clone()),
            cost_micro_usd,
            price_missing,
            avoided_tokens,
            avoided_cost_micro_usd,
            budget_soft_exceeded: o.budget.as_ref().is_some_and(|b| b.soft_exceeded),
            cache_savings_micro_usd: cache_savings(o, prices),
            attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: u64 = 1_767_323_045_678; // 2026-01-02T03:04:05.678Z

    fn prices() -> PriceTable {
        PriceTable::parse(
            &json!({"version": 1, "models": {
                "gpt-4o-mini": [
                    {"effective_from": "2024-07-18T00:00:00Z", "input": 150000, "output": 600000, "cached_read": 75000, "cache_write": 0},
                    {"effective_from": "2026-01-02T03:04:05.679Z", "input": 1, "output": 1, "cached_read": 1, "cache_write": 1}
                ],
                "claude-sonnet-4-5": [
                    {"effective_from": "2025-01-01T00:00:00Z", "input": 3000000, "output": 15000000, "cached_read": 300000, "cache_write": 3750000}
                ]
            }})
            .to_string(),
        )
        .unwrap()
    }

    fn attempt(deployment: &str, price_key: &str, usage: Option<Usage>, served: bool) -> Attempt {
        Attempt {
            deployment: deployment.into(),
            provider: "openai",
            model: price_key.into(),
            price_key: price_key.into(),
            started_ms: T0 + 10,
            status: if served { 200 } else { 500 },
            error_class: if served { None } else { Some("server_error") },
            usage,
            latency_ms: 90,
            ttft_ms: None,
            served,
            default_max_tokens: None,
            usage_estimated: false,
        }
    }

    fn outcome(attempts: Vec<Attempt>) -> RequestOutcome {
        RequestOutcome {
            request_id: "req_1".into(),
            started_ms: T0,
            tenant: "acme".into(),
            app: "search".into(),
            env: "prod".into(),
            logical_model: "chat".into(),
            stream: false,
            ingress: Ingress::ChatCompletions,
            attempts,
            error_code: None,
            status: 200,
            tags: BTreeMap::new(),
            end_user: None,
            shape: Some(RequestShape { text_chars: 40, messages: 2, max_output: Some(100), choices: 1 }),
            finished_ms: None,
            cache_hit: None,
            budget: None,
        }
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage { input, output, ..Usage::default() }
    }

    #[test]
    fn plain_request_is_priced_from_vendor_usage_at_request_time() {
        let o = outcome(vec![attempt("oa", "gpt-4o-mini", Some(usage(10, 10)), true)]);
        let e = UsageEvent::build(&o, Some(&prices()), T0 + 120);
        assert_eq!(
            (e.event_id.as_str(), e.ts.as_str(), e.dt.as_str(), e.hour),
            ("req_1", "2026-01-02T03:04:05.678Z", "2026-01-02", 3)
        );
        assert_eq!((e.tenant.as_str(), e.app.as_str(), e.env.as_str()), ("acme", "search", "prod"));
        assert_eq!(e.tokens, TokenCounts { input_tokens: 10, output_tokens: 10, ..TokenCounts::default() });
        assert!(!e.estimated && !e.fallback && !e.cache_hit && !e.price_missing);
        // The entry starting 1 ms after the request does not apply: 7.5 µ$ → 8.
        assert_eq!(e.price_version.as_deref(), Some("gpt-4o-mini@2024-07-18T00:00:00Z"));
        assert_eq!(e.cost_micro_usd, Some(8));
        assert_eq!((e.status, e.error_class.as_deref(), e.latency_ms, e.ttft_ms), (200, None, 120, None));
        assert_eq!(
            (e.deployment.as_deref(), e.provider.as_deref(), e.model.as_deref()),
            (Some("oa"), Some("openai"), Some("gpt-4o-mini"))
        );
        assert_eq!((e.estimated_input_tokens, e.actual_input_tokens), (Some(10 + 8), Some(10)));
        assert_eq!(e.attempts[0].attempt_id, "req_1:1");
    }

    #[test]
    fn fallback_bills_only_the_attempt_that_answered() {
        let mut served = attempt(
            "an",
            "claude-sonnet-4-5",
            Some(Usage { input: 25, output: 15, cached_read: 2000, cache_write: 100, reasoning: 0, cache_write_1h: 0 }),
            true,
        );
        served.started_ms = T0 + 200;
        let o = outcome(vec![attempt("oa-500", "e2e-500", None, false), served]);
        let e = UsageEvent::build(&o, Some(&prices()), T0 + 400);
        assert!(e.fallback);
        assert_eq!(e.attempt_count, 2);
        assert_eq!(e.attempts[0].attempt_id, "req_1:1");
        assert_eq!(e.attempts[0].tokens, TokenCounts::default());
        assert_eq!(
            (e.attempts[0].cost_micro_usd, e.attempts[0].price_missing),
            (Some(0), false),
            "unpriced but nothing to bill"
        );
        assert_eq!(e.attempts[0].estimated_input_tokens, None);
        assert_eq!(e.attempts[1].attempt_id, "req_1:2");
        assert_eq!(e.tokens.cached_read_tokens, 2000);
        assert_eq!(e.cost_micro_usd, Some(1_275));
        // 2000 reads at $3 instead of $0.30 per Mtok: 6000 − 600 µ$.
        assert_eq!(e.cache_savings_micro_usd, Some(5_400));
        assert_eq!(UsageEvent::build(&o, None, T0 + 400).cache_savings_micro_usd, None, "a read without a price");
        assert_eq!(e.price_version.as_deref(), Some("claude-sonnet-4-5@2025-01-01T00:00:00Z"));
        assert_eq!((e.status, e.error_class), (200, None));
        assert_eq!(e.deployment.as_deref(), Some("an"));
        assert_eq!(e.actual_input_tokens, Some(2125));
    }

    #[test]
    fn a_request_no_deployment_answered_is_not_a_fallback() {
        let o =
            outcome(vec![attempt("oa-500", "e2e-500", None, false), attempt("an", "claude-sonnet-4-5", None, false)]);
        let e = UsageEvent::build(&o, Some(&prices()), T0);
        assert_eq!((e.attempt_count, e.fallback), (2, false));
    }

    #[test]
    fn retries_on_the_same_deployment_are_not_a_fallback() {
        let o = outcome(vec![
            attempt("oa", "gpt-4o-mini", None, false),
            attempt("oa", "gpt-4o-mini", Some(usage(1, 1)), true),
        ]);
        assert!(!UsageEvent::build(&o, Some(&prices()), T0).fallback);
    }

    #[test]
    fn missing_vendor_usage_falls_back_to_the_estimate_and_is_flagged() {
        let o = outcome(vec![attempt("oa", "gpt-4o-mini", None, true)]);
        let e = UsageEvent::build(&o, Some(&prices()), T0);
        // 40 chars / 4 + 2 messages × 4 = 18 input; the client's max_tokens = 100 output.
        assert!(e.estimated && e.attempts[0].estimated);
        assert_eq!((e.tokens.input_tokens, e.tokens.output_tokens), (18, 100));
        assert_eq!(e.cost_micro_usd, Some((18 * 150_000 + 100 * 600_000 + 500_000) / 1_000_000));
        assert_eq!((e.estimated_input_tokens, e.actual_input_tokens), (Some(18), None));
    }

    #[test]
    fn estimate_uses_the_deployment_default_when_the_client_sets_no_max() {
        let mut o = outcome(vec![attempt("an", "claude-sonnet-4-5", None, true)]);
        o.shape = Some(RequestShape { text_chars: 4, messages: 1, max_output: None, choices: 1 });
        o.attempts[0].default_max_tokens = Some(512);
        let e = UsageEvent::build(&o, Some(&prices()), T0);
        assert_eq!((e.tokens.input_tokens, e.tokens.output_tokens), (5, 512));
        o.shape = None;
        let e = UsageEvent::build(&o, Some(&prices()), T0);
        assert!(e.estimated);
        assert_eq!(e.tokens, TokenCounts::default(), "no shape, nothing to estimate from");
    }

    #[test]
    fn unknown_price_is_null_and_flagged_never_guessed() {
        let o = outcome(vec![attempt("x", "mystery-model", Some(usage(5, 5)), true)]);
        let e = UsageEvent::build(&o, Some(&prices()), T0);
        assert_eq!((e.cost_micro_usd, e.price_version.as_deref(), e.price_missing), (None, None, true));
        assert!(e.attempts[0].price_missing);
        let e = UsageEvent::build(&outcome(vec![attempt("oa", "gpt-4o-mini", Some(usage(5, 5)), true)]), None, T0);
        assert_eq!((e.cost_micro_usd, e.price_missing), (None, true), "no table at all");
    }

    #[test]
    fn failed_request_carries_status_class_and_code() {
        let mut o = outcome(vec![attempt("oa-500", "e2e-500", None, false)]);
        o.status = 502;
        o.error_code = Some("upstream_server_error".into());
        let e = UsageEvent::build(&o, Some(&prices()), T0 + 50);
        assert_eq!(
            (e.status, e.error_class.as_deref(), e.error_code.as_deref()),
            (502, Some("server_error"), Some("upstream_server_error"))
        );
        assert_eq!((e.cost_micro_usd, e.price_missing, e.estimated), (Some(0), false, false));
        assert_eq!(e.price_version, None);
        let mut refused = outcome(vec![]);
        refused.status = 429;
        let e = UsageEvent::build(&refused, Some(&prices()), T0);
        assert_eq!((e.status, e.attempt_count, e.deployment, e.fallback), (429, 0, None, false));
        assert_eq!(e.cost_micro_usd, Some(0));
    }

    #[test]
    fn abnormal_stream_end_and_ttft() {
        let mut a = attempt("oa", "gpt-4o-mini", Some(usage(6, 0)), true);
        a.status = 499;
        a.error_class = Some("client_disconnected");
        a.ttft_ms = Some(140);
        let mut o = outcome(vec![a]);
        o.stream = true;
        let e = UsageEvent::build(&o, Some(&prices()), T0 + 400);
        assert_eq!((e.status, e.error_class.as_deref()), (499, Some("client_disconnected")));
        assert_eq!(e.ttft_ms, Some(150), "from the request's start: 10 ms to the attempt, 140 ms to the first byte");
        assert_eq!(e.attempts[0].ttft_ms, Some(140));
        assert!(!e.estimated, "partial vendor usage is reported as is");
    }

    #[test]
    fn a_cut_stream_billed_from_what_it_delivered_is_flagged() {
        let mut a = attempt("an", "claude", Some(usage(6, 40)), true);
        a.usage_estimated = true;
        let e = UsageEvent::build(&outcome(vec![a]), Some(&prices()), T0 + 400);
        assert!(e.estimated && e.attempts[0].estimated);
        assert_eq!(e.attempts[0].tokens.output_tokens, 40, "the delivered estimate is billed");
    }

    #[test]
    fn tags_from_header_and_metadata() {
        let header = parse_tags_header(" feature=search , team=growth,bad pair,=x,k=,user=u-9,feature=dupe");
        assert_eq!(header.get("feature").map(String::as_str), Some("dupe"), "last one wins within the header");
        assert_eq!(header.len(), 3);
        let meta = metadata_tags(
            json!({"feature": "ignored", "ab_test": 7, "flag": true, "nested": {"a": 1}, "team": "x"})
                .as_object()
                .unwrap(),
        );
        assert_eq!(meta.len(), 4);
        let merged = merge_tags(header, meta);
        assert_eq!(
            merged,
            BTreeMap::from([
                ("ab_test".to_string(), "7".to_string()),
                ("feature".to_string(), "dupe".to_string()),
                ("flag".to_string(), "true".to_string()),
                ("team".to_string(), "growth".to_string()),
                ("user".to_string(), "u-9".to_string()),
            ])
        );
        let mut o = outcome(vec![]);
        o.tags = merged;
        let e = UsageEvent::build(&o, None, T0);
        assert_eq!((e.feature.as_deref(), e.end_user.as_deref()), (Some("dupe"), Some("u-9")));
        o.end_user = Some("body-user".into());
        assert_eq!(UsageEvent::build(&o, None, T0).end_user.as_deref(), Some("body-user"), "the request's `user` wins");
        o.end_user = Some("P".repeat(200_000));
        let event = UsageEvent::build(&o, None, T0);
        assert_eq!(event.end_user.as_deref().map(|u| u.chars().count()), Some(tags::MAX_COPIED_CHARS + 1));
        assert!(serde_json::to_string(&event).unwrap().len() < 16_384, "an event always fits a queue message");
    }

    #[test]
    fn cache_hit_bills_nothing_and_records_what_it_saved() {
        let mut o = outcome(vec![]);
        o.cache_hit = Some(CacheHit {
            deployment: "oa".into(),
            provider: Some("openai".into()),
            model: Some("gpt-4o-mini".into()),
            price_key: Some("gpt-4o-mini".into()),
            avoided: Some(usage(10, 10)),
        });
        let e = UsageEvent::build(&o, Some(&prices()), T0 + 3);
        assert!(e.cache_hit);
        assert_eq!(
            (e.attempt_count, e.tokens, e.cost_micro_usd, e.price_missing),
            (0, TokenCounts::default(), Some(0), false)
        );
        assert_eq!((e.deployment.as_deref(), e.model.as_deref()), (Some("oa"), Some("gpt-4o-mini")));
        assert_eq!((e.avoided_tokens, e.avoided_cost_micro_usd), (20, Some(8)));
        o.cache_hit.as_mut().unwrap().price_key = Some("mystery".into());
        assert_eq!(
            UsageEvent::build(&o, Some(&prices()), T0).avoided_cost_micro_usd,
            None,
            "unknown price, unknown saving"
        );
        let miss = UsageEvent::build(&outcome(vec![attempt("oa", "gpt-4o-mini", Some(usage(1, 1)), true)]), None, T0);
        assert_eq!((miss.cache_hit, miss.avoided_tokens, miss.avoided_cost_micro_usd), (false, 0, Some(0)));
    }

    #[test]
    fn budget_soft_flag_comes_from_the_claim() {
        let mut o = outcome(vec![attempt("oa", "gpt-4o-mini", Some(usage(1, 1)), true)]);
        assert!(!UsageEvent::build(&o, None, T0).budget_soft_exceeded);
        o.budget = Some(crate::usage::record::BudgetClaim {
            object: "budget:acme:2026-01".into(),
            id: "req_1".into(),
            reserved_micro_usd: 27,
            held: true,
            soft_micro_usd: Some(5),
            soft_exceeded: true,
        });
        let e = UsageEvent::build(&o, None, T0);
        assert!(e.budget_soft_exceeded);
        let mut v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["budget_soft_exceeded"], true);
        v.as_object_mut().unwrap().remove("budget_soft_exceeded");
        assert!(
            !serde_json::from_value::<UsageEvent>(v.clone()).unwrap().budget_soft_exceeded,
            "older lines read as false"
        );
        assert_eq!(v["ingress"], "chat_completions");
        v.as_object_mut().unwrap().remove("ingress");
        assert_eq!(serde_json::from_value::<UsageEvent>(v).unwrap().ingress, Ingress::ChatCompletions, "older lines");
    }

    #[test]
    fn serializes_flat_and_round_trips() {
        let o = outcome(vec![attempt("oa", "gpt-4o-mini", Some(usage(10, 10)), true)]);
        let e = UsageEvent::build(&o, Some(&prices()), T0 + 120);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["input_tokens"], 10);
        assert_eq!(v["attempts"][0]["output_tokens"], 10);
        assert_eq!(v["cost_micro_usd"], 8);
        assert!(v["feature"].is_null() && v["ttft_ms"].is_null());
        let line = serde_json::to_string(&e).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<UsageEvent>(&line).unwrap(), e);
    }
}
