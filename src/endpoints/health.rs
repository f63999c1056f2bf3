//! `GET /healthz`: can this isolate serve, and does it serve the admin documents now in KV?
//!
//! 200 `{"status":"ok"}`; 200 `{"status":"degraded","degraded":["routes",…]}` while a refused,
//! missing or unreadable document is stood in for by the last good one (traffic is served, so a
//! load balancer keeps the gateway in rotation; monitors that should page on it match the body);
//! 503 `{"status":"unavailable"}` when there is no route table to serve at all.

use crate::config;
use crate::config::budgets;
use crate::config::last_good::DocHealth;
use crate::config::prices;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use serde_json::json;
use worker::Env;

/// Each admin document's health in this isolate, after the usual cached read of each.
pub async fn documents(env: &Env, now_ms: u64) -> [(&'static str, DocHealth); 3] {
    config::warm::documents(env, now_ms).await;
    [
        ("routes", config::store::route_health(now_ms)),
        ("prices", prices::price_health(now_ms)),
        ("budgets", budgets::budget_health(now_ms)),
    ]
}

pub async fn healthz(env: &Env, now_ms: u64) -> Result<Reply, ApiError> {
    let docs = documents(env, now_ms).await;
    let degraded: Vec<&str> = docs.iter().filter(|(_, h)| h.degraded).map(|(name, _)| *name).collect();
    let (status, body) = if docs[0].1.serving.is_none() {
        (503, json!({"status": "unavailable", "reason": "no_route_table"}))
    } else if degraded.is_empty() {
        (200, json!({"status": "ok"}))
    } else {
        (200, json!({"status": "degraded", "degraded": degraded}))
    };
    Ok(Reply::json(status, body.to_string().into_bytes()))
}
