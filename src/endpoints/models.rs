//! `GET /v1/models`: the logical models this key may use: open to its tenant (a model's `tenants`)
//! and allowed by the key (its `models`). An unrestricted key sees its tenant's and the shared ones.

use crate::auth::context::RequestContext;
use crate::config;
use crate::http::error::ApiError;
use crate::http::reply::Reply;
use worker::Env;

pub async fn list(rc: &RequestContext, env: &Env) -> Result<Reply, ApiError> {
    let table = config::store::route_table(env, rc.started_ms).await?;
    let data: Vec<serde_json::Value> = table
        .models
        .iter()
        .filter(|(name, model)| model.open_to(&rc.key.tenant) && rc.key.allows_model(name))
        .map(|(name, _)| name)
        .map(|name| serde_json::json!({"id": name, "object": "model", "created": 0, "owned_by": "edge-gateway"}))
        .collect();
    let body = serde_json::json!({"object": "list", "data": data});
    Ok(Reply::json(200, body.to_string().into_bytes()))
}
