//! The request's one usage event: priced, its budget claim settled, and sent to the usage queue
//! after the response, never delaying the client.

use crate::config;
use crate::config::prices;
use crate::limits::budget;
use crate::support::clock::now_ms;
use crate::usage::event::UsageEvent;
use crate::usage::output_history;
use crate::usage::queue;
use crate::usage::record::{price_key, RequestOutcome};
use worker::{Context, Env};

/// Reports after the response is sent; never delays the client. A request with nothing of its
/// own to await (no budget to settle, no cache hit to look up) hands its outcome to the usage
/// batch it joins, which prices and writes it: no `wait_until` of its own.
pub fn finish(mut outcome: RequestOutcome, ctx: &Context, env: &Env) {
    outcome.finished_ms = Some(now_ms());
    output_history::record(&outcome);
    if outcome.budget.is_none() && outcome.cache_hit.is_none() {
        queue::defer(outcome, ctx, env);
        return;
    }
    let env = env.clone();
    ctx.wait_until(async move { price_and_send(outcome, &env).await });
}

/// Prices the request and sends its usage event; call inside `wait_until`.
pub async fn finish_detached(outcome: RequestOutcome, env: &Env) {
    output_history::record(&outcome);
    price_and_send(outcome, env).await;
}

async fn price_and_send(mut outcome: RequestOutcome, env: &Env) {
    let now = now_ms();
    if let Some(hit) = outcome.cache_hit.as_mut() {
        // The cache keeps only the deployment id; the route table names its vendor and price.
        if let Some(d) =
            config::store::route_table(env, now).await.ok().and_then(|t| t.deployments.get(&hit.deployment).cloned())
        {
            hit.provider = Some(d.provider.as_str().to_string());
            hit.price_key = Some(price_key(&d));
            hit.model = Some(d.model);
        }
    }
    let prices = prices::price_table(env, now).await;
    let mut event = UsageEvent::build(&outcome, prices.as_deref(), outcome.finished_ms.unwrap_or(now));
    if let Some(claim) = &outcome.budget {
        // An unknown cost (no price) keeps the reservation charged rather than nothing.
        let spent = budget::settle(env, claim, event.cost_micro_usd.unwrap_or(claim.reserved_micro_usd)).await;
        event.budget_soft_exceeded = claim.soft_exceeded_after(spent);
    }
    // Every document this request read is known good by now: its durable copy is written here.
    config::store::save_last_good(env).await;
    queue::send(env, &event).await;
}
