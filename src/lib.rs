//! Edge LLM gateway: a Cloudflare Worker that fronts LLM vendors with one OpenAI-compatible API.
//!
//! Folders are layers; each imports only from itself and the layers below (docs/architecture.md):
//! `support` → `http` → `canonical` → `config` → `auth` → `providers` → `usage` → `cache` →
//! `idempotency` → `limits` → `pipeline` → `endpoints` → `gateway`.
//!
//! Pure (no `worker` APIs at run time, tested natively): `canonical`, `config` (the documents;
//! `store` and the `price_table`/`budget_table` loaders read KV),
//! `providers`, `usage` (but `queue`, `dead_letter`), `cache::{key, policy, assembly}`, `idempotency` (the key
//! and body rules), `limits::{lease_ledger, refusal}`, `pipeline::{plan, gate, retry, decision_log,
//! step}`, `http::{error, codes, sse}`, `support::redact`. The platform shell: `gateway`,
//! `endpoints`, `auth`, `config::store`, `cache::store`, `idempotency::gate`, `limits::{admission,
//! budget}`, `pipeline::{run, stream, upstream, report, attempt}`, `usage::{queue, dead_letter}`, `http::io`,
//! `support::{clock, log, promise}`.

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
pub use limiter::LocationRelay;

use worker::{event, Context, Env, Result};

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: worker::web_sys::Request, env: Env, ctx: Context) -> Result<worker::web_sys::Response> {
    limits::location::note(&req);
    // The runtime's own request and response, each handled in as few calls into JS as it can.
    Ok(gateway::handle(http::incoming::Incoming::new(req), env, ctx).await)
}

/// The usage queue's consumer (each batch becomes NDJSON objects in R2) and its dead-letter
/// queue's consumer (redelivers and parks what the first could not store).
#[event(queue)]
async fn queue(batch: worker::MessageBatch<String>, env: Env, _ctx: Context) -> Result<()> {
    if usage::dead_letter::is_dead_letter_queue(&batch.queue()) {
        usage::dead_letter::consume(&batch, &env).await;
    } else {
        usage::queue::consume(&batch, &env).await;
    }
    Ok(())
}
