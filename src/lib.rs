//! Edge LLM gateway: a Cloudflare Worker that fronts LLM vendors with one OpenAI-compatible API.
//!
//! Pure modules (no `worker` APIs, tested natively): api_error, canonical, estimate, keys,
//! providers, rate_headers, routes, sse, usage. The platform shell: gateway, chat, admission,
//! config_store, http_io, outcome, request_context, upstream.

pub mod admin;
pub mod admission;
pub mod api_error;
pub mod attempt;
pub mod budget;
pub mod cache_key;
pub mod cache_policy;
pub mod canonical;
pub mod chat;
pub mod config_store;
pub mod decision_log;
pub mod embeddings;
pub mod estimate;
pub mod export;
pub mod gateway;
pub mod http_io;
pub mod idempotency;
pub mod idempotency_gate;
pub mod keys;
pub mod lease_cache;
pub mod log;
pub mod outcome;
pub mod pricing;
pub mod providers;
pub mod rate_headers;
pub mod redact;
pub mod request_context;
pub mod response_cache;
pub mod retry;
pub mod routes;
pub mod selection;
pub mod sse;
pub mod stream_assembly;
pub mod upstream;
pub mod usage;
pub mod usage_event;
pub mod usage_queue;

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
    usage_queue::consume(&batch, &env).await;
    Ok(())
}
