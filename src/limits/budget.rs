//! Tenant budgets on the worker's side: the `budgets` table admins keep in KV (cached in the
//! isolate like the price table), the cost a request reserves, and the reserve/settle round trips
//! to the tenant's `TenantBudget` object (`limiter::budget`).
//!
//! A request of a tenant with a budget reserves its estimated cost before any upstream call: the
//! token estimate (`crate::usage::estimate`, output = the max tokens) priced at the most expensive priced
//! deployment of its chain, every prompt token at the dearest prompt price. That is an upper
//! bound unless the vendor counts more prompt tokens than the estimate. A tenant without a budget
//! costs nothing here: no object is called.

use crate::auth::context::RequestContext;
use crate::config::budgets;
use crate::config::prices::{self, PriceTable};
use crate::config::routes::Deployment;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::header_map::HeaderText;
use crate::support::clock::now_ms;
use crate::support::log;
use crate::usage::record::BudgetClaim;
use crate::usage::record::RequestShape;
use limiter::budget::{self, BudgetRefusal, BudgetRequest, BudgetResponse, Period, Reserve, Settle};
use limiter::utc;
use std::time::Duration;
use worker::Env;

pub const BUDGET_BINDING: &str = "BUDGET";
/// Set to `soft_exceeded` on answers admitted while the tenant's spend is past its soft limit.
pub const SOFT_HEADER: &str = "x-gateway-budget";
/// A reservation outlives its request's deadline by this much before it is released unsettled.
pub const SETTLE_SLACK_MS: u64 = 5 * 60_000;
/// The reservation deadline for endpoints without one of their own (embeddings).
pub const DEFAULT_DEADLINE_MS: u64 = 300_000;
/// Every reservation holds at least this, so a budget spent to the last micro-dollar refuses
/// even requests it cannot price.
pub const MIN_RESERVE_MICRO_USD: u64 = 1;
const SETTLE_TRIES: u32 = 2;
const SETTLE_RETRY_DELAY_MS: u64 = 200;

/// A deployment's upper-bound cost for the request: prompt tokens at the dearest prompt price
/// (input, cache read or cache write), output at the output price, rounded up. `None` when the
/// price table has no entry for the deployment at `at_ms`.
pub fn deployment_cost(d: &Deployment, shape: &RequestShape, prices: &PriceTable, at_ms: u64) -> Option<u64> {
    let key = d.price.as_deref().unwrap_or(&d.model);
    let price = prices.price_at(key, at_ms)?.entry;
    let e = shape.estimate(d.default_max_tokens);
    let prompt_price = price.input.max(price.cached_read).max(price.cache_write);
    let total = u128::from(e.input) * u128::from(prompt_price) + u128::from(e.output) * u128::from(price.output);
    Some(u64::try_from(total.div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

/// What a request reserves: the most any deployment of its chain could bill it (fallback may
/// reach any of them; only one attempt is ever billed), at least [`MIN_RESERVE_MICRO_USD`].
pub fn estimate_cost(
    chain: &[(&str, &Deployment)],
    shape: Option<&RequestShape>,
    prices: Option<&PriceTable>,
    at_ms: u64,
) -> u64 {
    let shape = shape.copied().unwrap_or(RequestShape { text_chars: 0, messages: 0, max_output: None, choices: 1 });
    let most =
        prices.map_or(0, |p| chain.iter().filter_map(|(_, d)| deployment_cost(d, &shape, p, at_ms)).max().unwrap_or(0));
    most.max(MIN_RESERVE_MICRO_USD)
}

/// The client's answer when the budget refuses: 402, OpenAI's `insufficient_quota` type, code
/// `budget_exceeded`, which limit and scope, and when a retry can pass.
pub fn refusal_error(tenant: &str, period: &Period, r: &BudgetRefusal) -> ApiError {
    let why = if r.exhausted {
        format!("the budget resets at {}", utc::iso_ms(r.period_end_ms))
    } else {
        format!("{} µ$ are reserved by requests in flight; retry after {} ms", r.reserved_micro_usd, r.retry_after_ms)
    };
    ApiError::new(
        402,
        "insufficient_quota",
        codes::BUDGET_EXCEEDED,
        format!(
            "Tenant '{tenant}' has spent {} of its {} µ$ budget for {}; this request may cost up to {} µ$ (limit 'budget', scope tenant): {why}.",
            r.spent_micro_usd, r.hard_micro_usd, period.key, r.amount_micro_usd
        ),
    )
    .with_retry_after_ms(r.retry_after_ms)
    .with_header("x-gateway-limit", "budget")
    .with_header("x-gateway-limit-scope", "tenant")
    .with_header("x-gateway-limit-reset-ms", r.retry_after_ms.to_string())
}

async fn call(env: &Env, object: &str, req: &BudgetRequest) -> worker::Result<BudgetResponse> {
    let stub = env.durable_object(BUDGET_BINDING)?.id_from_name(object)?.get_stub()?;
    budget::call(&stub, req).await
}

/// Reserves the request's estimated cost with its tenant's budget, before any upstream call.
///
/// `Ok(None)` when the tenant has no budget (nothing is called); `Ok(Some(claim))` when admitted
/// (`claim.soft_exceeded`: past the soft limit, see [`mark`]); `Err` is the 402 to send, which the
/// caller records as the request's usage event. If the object cannot be reached the request is
/// admitted and the problem logged (fail open, like the limiter); its actual cost is still charged.
pub async fn admit(
    env: &Env,
    rc: &RequestContext,
    shape: Option<&RequestShape>,
    chain: &[(&str, &Deployment)],
    deadline_ms: u64,
) -> Result<Option<BudgetClaim>, ApiError> {
    let now = now_ms();
    let Some(table) = budgets::budget_table(env, now).await else { return Ok(None) };
    let Some(rule) = table.rule(&rc.key.tenant).copied() else { return Ok(None) };
    let prices = prices::price_table(env, now).await;
    let amount = estimate_cost(chain, shape, prices.as_deref(), rc.started_ms);
    let period = Period::month_containing(now);
    let object = budget::object_name(&rc.key.tenant, &period);
    let request = BudgetRequest::Reserve(Reserve {
        id: rc.request_id.clone(),
        period: period.clone(),
        amount_micro_usd: amount,
        limits: rule.limits(),
        ttl_ms: deadline_ms.saturating_sub(now).saturating_add(SETTLE_SLACK_MS),
    });
    let claim = |held: bool, soft_exceeded: bool| BudgetClaim {
        object: object.clone(),
        id: rc.request_id.clone(),
        reserved_micro_usd: amount,
        held,
        soft_micro_usd: rule.soft_micro_usd,
        soft_exceeded,
    };
    match call(env, &object, &request).await {
        Ok(BudgetResponse::Admitted(a)) => Ok(Some(claim(true, a.soft_exceeded))),
        Ok(BudgetResponse::Refused(r)) => Err(refusal_error(&rc.key.tenant, &period, &r)),
        other => {
            let error = match other {
                Ok(answer) => format!("unexpected answer: {answer:?}"),
                Err(e) => e.to_string(),
            };
            log::error(
                serde_json::json!({"event": "budget_unreachable", "tenant": rc.key.tenant, "object": object, "error": error, "admitted": true}),
            );
            Ok(Some(claim(false, false)))
        }
    }
}

/// Replaces the claim's reservation with the actual cost; returns the settled spend after it.
/// A settle is idempotent, so a failed one is retried; if it keeps failing the reservation
/// expires on its own and the actual cost is logged for reconciliation.
pub async fn settle(env: &Env, claim: &BudgetClaim, actual_micro_usd: u64) -> Option<u64> {
    let request = BudgetRequest::Settle(Settle { id: claim.id.clone(), actual_micro_usd, unreserved: !claim.held });
    let mut error = String::new();
    for attempt in 0..SETTLE_TRIES {
        if attempt > 0 {
            worker::Delay::from(Duration::from_millis(SETTLE_RETRY_DELAY_MS)).await;
        }
        match call(env, &claim.object, &request).await {
            Ok(BudgetResponse::Settled { spent_micro_usd, .. } | BudgetResponse::Unknown { spent_micro_usd }) => {
                return Some(spent_micro_usd)
            }
            Ok(answer) => error = format!("unexpected answer: {answer:?}"),
            Err(e) => error = e.to_string(),
        }
    }
    log::error(serde_json::json!({"event": "budget_settle_failed", "object": claim.object, "id": claim.id,
                                         "actual_micro_usd": actual_micro_usd, "reserved_micro_usd": claim.reserved_micro_usd, "error": error}));
    None
}

/// Adds the soft-limit warning header to an admitted request's answer.
pub fn mark(headers: &mut HeaderText, soft_exceeded: bool) {
    if soft_exceeded {
        let _ = headers.add(SOFT_HEADER, "soft_exceeded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::routes::RouteTable;
    use serde_json::json;

    const T0: u64 = 1_767_323_045_678; // 2026-01-02T03:04:05.678Z

    fn routes() -> RouteTable {
        RouteTable::parse(
            &json!({"version": 1, "deployments": {
                "cheap": {"provider": "openai", "base_url": "http://x/v1", "model": "gpt-4o-mini", "credential": "K"},
                "dear": {"provider": "anthropic", "base_url": "http://x/v1", "model": "claude", "credential": "K",
                         "price": "claude-sonnet-4-5", "default_max_tokens": 512},
                "unpriced": {"provider": "openai", "base_url": "http://x/v1", "model": "mystery", "credential": "K"}
            }, "models": {"m": {"chain": ["cheap", "dear", "unpriced"]}}})
            .to_string(),
        )
        .unwrap()
    }

    fn prices() -> PriceTable {
        PriceTable::parse(
            &json!({"version": 1, "models": {
                "gpt-4o-mini": [{"effective_from": "2024-07-18T00:00:00Z", "input": 150000, "output": 600000, "cached_read": 75000, "cache_write": 0}],
                "claude-sonnet-4-5": [{"effective_from": "2025-01-01T00:00:00Z", "input": 3000000, "output": 15000000, "cached_read": 300000, "cache_write": 3750000}]
            }})
            .to_string(),
        )
        .unwrap()
    }

    #[test]
    fn estimate_is_the_dearest_deployment_of_the_chain() {
        let routes = routes();
        let p = prices();
        let shape = RequestShape { text_chars: 400, messages: 2, max_output: Some(100), choices: 1 };
        // 400 / 4 + 2 × 4 = 108 prompt tokens, 100 output.
        let cheap = deployment_cost(&routes.deployments["cheap"], &shape, &p, T0).unwrap();
        assert_eq!(cheap, (108 * 150_000 + 100 * 600_000u64).div_ceil(1_000_000));
        // Prompt tokens at the cache-write price (the dearest prompt price), rounded up.
        let dear = deployment_cost(&routes.deployments["dear"], &shape, &p, T0).unwrap();
        assert_eq!(dear, (108 * 3_750_000 + 100 * 15_000_000u64).div_ceil(1_000_000));
        assert_eq!(deployment_cost(&routes.deployments["unpriced"], &shape, &p, T0), None);
        let chain = routes.chain("m", 0, None).unwrap();
        assert_eq!(estimate_cost(&chain, Some(&shape), Some(&p), T0), dear);
        // Without the client's max tokens the deployment's default (512) applies, else 1024.
        let open = RequestShape { max_output: None, ..shape };
        assert_eq!(
            estimate_cost(&chain[..1], Some(&open), Some(&p), T0),
            (108 * 150_000 + 1024 * 600_000u64).div_ceil(1_000_000)
        );
        let dear_only: Vec<_> = chain.iter().copied().filter(|(id, _)| *id == "dear").collect();
        assert_eq!(
            estimate_cost(&dear_only, Some(&open), Some(&p), T0),
            (108 * 3_750_000 + 512 * 15_000_000u64).div_ceil(1_000_000)
        );
        // Not priced yet at that time, no table, or nothing priced: the minimum.
        assert_eq!(estimate_cost(&chain, Some(&shape), Some(&p), 0), MIN_RESERVE_MICRO_USD);
        assert_eq!(estimate_cost(&chain, Some(&shape), None, T0), MIN_RESERVE_MICRO_USD);
        let unpriced: Vec<_> = chain.iter().copied().filter(|(id, _)| *id == "unpriced").collect();
        assert_eq!(estimate_cost(&unpriced, Some(&shape), Some(&p), T0), MIN_RESERVE_MICRO_USD);
        // No shape recorded: a one-token prompt and the default output.
        assert_eq!(estimate_cost(&chain[..1], None, Some(&p), T0), (150_000 + 1024 * 600_000u64).div_ceil(1_000_000));
    }

    #[test]
    fn estimate_bounds_what_the_event_will_bill() {
        let routes = routes();
        let p = prices();
        let shape = RequestShape { text_chars: 40, messages: 1, max_output: Some(20), choices: 1 };
        let reserved = deployment_cost(&routes.deployments["cheap"], &shape, &p, T0).unwrap();
        // The vendor counts no more than the estimate: 10 + 4 prompt tokens, 20 output.
        let billed = crate::canonical::usage::Usage { input: 9, cached_read: 5, output: 20, ..Default::default() };
        assert!(p.price_at("gpt-4o-mini", T0).unwrap().entry.cost_micro_usd(&billed) <= reserved);
    }

    #[test]
    fn refusal_names_limit_scope_and_reset() {
        let period = Period::month_containing(T0);
        let exhausted = BudgetRefusal {
            spent_micro_usd: 590,
            reserved_micro_usd: 0,
            hard_micro_usd: 600,
            amount_micro_usd: 27,
            exhausted: true,
            retry_after_ms: period.end_ms - T0,
            period_end_ms: period.end_ms,
        };
        let e = refusal_error("acme", &period, &exhausted);
        assert_eq!((e.status, e.kind, e.code.as_str()), (402, "insufficient_quota", "budget_exceeded"));
        assert_eq!(e.retry_after_s, Some((period.end_ms - T0).div_ceil(1000)));
        assert_eq!(
            e.headers,
            vec![
                ("x-gateway-limit", "budget".to_string()),
                ("x-gateway-limit-scope", "tenant".to_string()),
                ("x-gateway-limit-reset-ms", (period.end_ms - T0).to_string()),
            ]
        );
        assert!(e.message.contains("2026-01") && e.message.contains("2026-02-01T00:00:00.000Z"), "{}", e.message);
        let busy = BudgetRefusal {
            spent_micro_usd: 100,
            reserved_micro_usd: 480,
            exhausted: false,
            retry_after_ms: 1000,
            ..exhausted
        };
        let e = refusal_error("acme", &period, &busy);
        assert_eq!(e.retry_after_s, Some(1));
        assert!(e.message.contains("480 µ$ are reserved"), "{}", e.message);
        let body: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(body["error"]["code"], "budget_exceeded");
    }

    #[test]
    fn soft_flag_for_the_event() {
        let claim = BudgetClaim {
            object: "budget:acme:2026-01".into(),
            id: "req_1".into(),
            reserved_micro_usd: 27,
            held: true,
            soft_micro_usd: Some(50),
            soft_exceeded: false,
        };
        assert!(!claim.soft_exceeded_after(None));
        assert!(!claim.soft_exceeded_after(Some(50)));
        assert!(claim.soft_exceeded_after(Some(51)), "this request's own cost crossed it");
        let admitted_past = BudgetClaim { soft_exceeded: true, ..claim.clone() };
        assert!(admitted_past.soft_exceeded_after(None));
        let no_soft = BudgetClaim { soft_micro_usd: None, ..claim };
        assert!(!no_soft.soft_exceeded_after(Some(u64::MAX)));
    }
}
