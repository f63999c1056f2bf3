//! `GET /admin/status` (admin token): the route table's health and each deployment's live
//! limiter state (breaker, bucket levels, pause). Tenants never reach it: it needs `ADMIN_TOKEN`.

use crate::config;
use crate::config::keys;
use crate::http;
use crate::http::codes;
use crate::http::error::ApiError;
use crate::limits::admission::LIMITER_BINDING;
use futures::future::join_all;
use serde_json::{json, Value};
use worker::{Env, Request, Response};

fn authorize(req: &Request, env: &Env) -> Result<(), ApiError> {
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
    let header = req.headers().get("authorization").ok().flatten();
    match keys::bearer(header.as_deref()) {
        // Compare hashes so the comparison time says nothing about the token.
        Some(token) if keys::hash_key(token) == keys::hash_key(&expected) && !expected.is_empty() => Ok(()),
        Some(_) => Err(ApiError::new(403, "permission_error", codes::INVALID_ADMIN_TOKEN, "Invalid admin token.")),
        None => Err(ApiError::missing_key()),
    }
}

pub async fn status(req: &Request, env: &Env, now_ms: u64) -> Result<Response, ApiError> {
    authorize(req, env)?;
    let table = config::store::route_table(env, now_ms).await;
    let health = config::store::table_health(now_ms);
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
        for (id, d) in &table.deployments {
            deployments.insert(
                id.clone(),
                json!({
                    "provider": d.provider.as_str(),
                    "model": d.model,
                    "limiter": by_id.remove(id.as_str()).unwrap_or(Value::Null),
                }),
            );
        }
    }
    let body = json!({
        "route_table": {"loaded": health.loaded, "problem": health.problem, "age_ms": health.age_ms},
        "models": table.as_ref().map(|t| t.models.keys().cloned().collect::<Vec<_>>()).unwrap_or_default(),
        "deployments": deployments,
    });
    http::io::json_response(200, body.to_string().into_bytes())
}
