//! Edge LLM gateway: a Cloudflare Worker that fronts LLM vendors with one OpenAI-compatible API.
//!
//! Pure modules (no `worker` APIs, tested natively): api_error, canonical, estimate, keys,
//! providers, rate_headers, routes, sse, usage. The platform shell: gateway, chat, admission,
//! config_store, http_io, outcome, request_context, upstream.

pub mod auth;
pub mod cache;
pub mod canonical;
pub mod config;
pub mod endpoints;
pub mod gateway;
pub mod http;
pub mod idempotency;
pub mod limits;
pub mod pipeline;
pub mod providers;
pub mod support;
pub mod usage;

pub use limiter::budget::TenantBudget;
pub use limiter::idempotency::IdempotencyStore;
pub use limiter::DeploymentLimiter;

use worker::{event, Context, Env, Request, Response, Result};

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    Ok(gateway::handle(req, env, ctx).await)
}

/// The usage queue's consumer: each batch becomes NDJSON objects in R2.
#[event(queue)]
async fn queue(batch: worker::MessageBatch<String>, env: Env, _ctx: Context) -> Result<()> {
    usage::queue::consume(&batch, &env).await;
    Ok(())
}
