//! `GET /admin/status` (admin token): which version of each admin document serves and why a newer
//! one was refused, each deployment's live limiter state (breaker, bucket levels, pause) and, for
//! a deployment whose isolates lease from a relay, what this location's relay holds,
//! deployments whose credential is not bound, and the usage events that reached the dead-letter
//! queue. Tenants never reach it: it needs `ADMIN_TOKEN`.

use crate::auth::admin_guard::{self, FailedAttempts};
use crate::config;
use crate::config::credentials;
use crate::config::keys;
use crate::endpoints::health;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::incoming::Incoming;
use crate::http::reply::Reply;
use crate::limits::admission::{self, LIMITER_BINDING};
use crate::limits::lease_policy;
use crate::pipeline::attempt::credential;
use crate::usage::dead_letter;
use futures::future::join_all;
use serde_json::{json, Value};
use std::cell::RefCell;
use worker::Env;

thread_local! {
    /// Bad admin tokens this isolate has seen lately.
    static FAILED: RefCell<FailedAttempts> = RefCell::new(FailedAttempts::default());
}

fn authorize(req: &Incoming, env: &Env, now_ms: u64) -> Result<(), ApiError> {
    if let Some(wait_ms) = FAILED.with(|f| f.borrow_mut().locked_for_ms(now_ms)) {
        return Err(ApiError::new(
            429,
            "rate_limit_error",
            codes::ADMIN_AUTH_RATE_LIMITED,
            "Too many invalid admin tokens; admin requests resume after the indicated delay.",
        )
        .with_retry_after_ms(wait_ms));
    }
    let expected =
        env.secret("ADMIN_TOKEN").map(|s| s.to_string()).or_else(|_| env.var("ADMIN_TOKEN").map(|v| v.to_string()));
    let Ok(expected) = expected else {
        return Err(ApiError::new(
            403,
            "permission_error",
            codes::ADMIN_DISABLED,
            "Set the ADMIN_TOKEN secret to use admin endpoints.",
        ));
    };
    let header = req.headers.get_owned("authorization");
    match keys::bearer(header.as_deref()) {
        // Compare hashes, in constant time, so the comparison time says nothing about the token.
        Some(token)
            if admin_guard::same(&keys::hash_key(token), &keys::hash_key(&expected)) && !expected.is_empty() =>
        {
            Ok(())
        }
        Some(_) => {
            FAILED.with(|f| f.borrow_mut().record_failure(now_ms));
            Err(ApiError::new(403, "permission_error", codes::INVALID_ADMIN_TOKEN, "Invalid admin token."))
        }
        None => Err(ApiError::missing_key()),
    }
}

pub async fn status(req: &Incoming, env: &Env, now_ms: u64) -> Result<Reply, ApiError> {
    authorize(req, env, now_ms)?;
    let docs = health::documents(env, now_ms).await;
    let table = config::store::route_table(env, now_ms).await;
    let routes = &docs[0].1;
    let mut deployments = serde_json::Map::new();
    if let Ok(table) = &table {
        let namespace = env.durable_object(LIMITER_BINDING).map_err(|e| ApiError::internal(e.to_string()))?;
        let limited: Vec<&String> =
            table.deployments.iter().filter(|(_, d)| d.enforced_limits().is_some()).map(|(id, _)| id).collect();
        let reports = join_all(limited.iter().map(|id| {
            let namespace = &namespace;
            async move {
                match limiter::client::stub(namespace, id) {
                    Ok(stub) => limiter::client::status(&stub)
                        .await
                        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
                        .unwrap_or_else(|e| json!({"error": e.to_string()})),
                    Err(e) => json!({"error": e.to_string()}),
                }
            }
        }))
        .await;
        let mut by_id: std::collections::HashMap<&str, Value> =
            limited.iter().map(|s| s.as_str()).zip(reports).collect();
        // This location's relay, for the deployments whose isolates lease from one.
        let relayed: Vec<&String> = table
            .deployments
            .iter()
            .filter(|(_, d)| d.enforced_limits().is_some_and(lease_policy::via_relay))
            .map(|(id, _)| id)
            .collect();
        let relays = join_all(relayed.iter().map(|id| async move {
            let status = match admission::relay_stub(env, &limiter::protocol::object_name(id)) {
                Ok(stub) => limiter::client::relay_status(&stub).await,
                Err(e) => Err(e),
            };
            status.map(|s| json!(s)).unwrap_or_else(|e| json!({"error": e.to_string()}))
        }))
        .await;
        let mut relay_by_id: std::collections::HashMap<&str, Value> =
            relayed.iter().map(|s| s.as_str()).zip(relays).collect();
        for (id, d) in &table.deployments {
            deployments.insert(
                id.clone(),
                json!({
                    "provider": d.provider.as_str(),
                    "model": d.model,
                    "limiter": by_id.remove(id.as_str()).unwrap_or(Value::Null),
                    "relay": relay_by_id.remove(id.as_str()).unwrap_or(Value::Null),
                }),
            );
        }
    }
    let unbound =
        table.as_ref().map_or(Vec::new(), |t| credentials::unbound(t, |name| credential(env, name).is_some()));
    // A refusal's errors, else a read problem: what stands between KV and what serves.
    let problem = routes.refused.as_ref().map(|r| r.errors.join("; ")).or_else(|| routes.problem.clone());
    let body = json!({
        "route_table": {"loaded": routes.serving.is_some(), "problem": problem, "age_ms": routes.age_ms},
        "config": docs.iter().map(|(name, h)| (name.to_string(), json!(h))).collect::<serde_json::Map<_, _>>(),
        "models": table.as_ref().map(|t| t.models.keys().cloned().collect::<Vec<_>>()).unwrap_or_default(),
        "deployments": deployments,
        "unbound_credentials": unbound,
        "usage_dead_letter": dead_letter::parked(env).await,
    });
    Ok(Reply::json(200, body.to_string().into_bytes()))
}
