//! The fetch handler: routing, authentication, and the small endpoints.

use crate::auth;
use crate::auth::context::{new_request_id, RequestContext};
use crate::config;
use crate::config::keys::{self, KeyRefusal};
use crate::endpoints::admin;
use crate::endpoints::chat;
use crate::endpoints::embeddings;
use crate::http;
use crate::http::error::ApiError;
use crate::idempotency;
use crate::idempotency::gate::Gate;
use worker::{Context, Env, Method, Request, Response};

pub async fn handle(mut req: Request, env: Env, ctx: Context) -> Response {
    let request_id = new_request_id();
    let started_ms = worker::Date::now().as_millis();
    let path = req.path();
    let method = req.method();
    let result = match (method.clone(), path.as_str()) {
        (Method::Get, "/admin/status") => admin::status(&req, &env, started_ms).await,
        (Method::Get, "/healthz") => http::io::json_response(200, br#"{"status":"ok"}"#.to_vec()),
        (Method::Get, "/v1/models") => match authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => list_models(&rc, &env).await,
            Err(e) => Err(e),
        },
        (Method::Post, "/v1/chat/completions") => match authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => match http::io::read_body(&mut req).await {
                Ok(body) => idempotent(&req, rc, body, &env, &ctx).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        (Method::Post, "/v1/embeddings") => match authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => match http::io::read_body(&mut req).await {
                Ok(body) => embeddings::create(rc, body, &env, &ctx).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        (_, "/v1/models" | "/v1/chat/completions" | "/v1/embeddings" | "/healthz") => {
            Err(ApiError::method_not_allowed(&format!("{method:?}").to_uppercase(), &path))
        }
        _ => Err(ApiError::not_found(&path)),
    };
    match result {
        Ok(mut response) => {
            let _ = response.headers_mut().set("x-request-id", &request_id);
            response
        }
        Err(err) => http::io::error_response(&err, Some(&request_id)),
    }
}

/// Chat completions behind the `Idempotency-Key` gate.
async fn idempotent(
    req: &Request,
    rc: RequestContext,
    body: Vec<u8>,
    env: &Env,
    ctx: &Context,
) -> Result<Response, ApiError> {
    match idempotency::gate::enter(req, env, &rc.key.tenant, &rc.request_id, &body).await? {
        Gate::Open => chat::completions(rc, body, env, ctx).await,
        Gate::Replay(response) => Ok(response),
        Gate::Proceed(claim) => claim.finish(chat::completions(rc, body, env, ctx).await).await,
    }
}

async fn authenticate(req: &Request, env: &Env, request_id: &str, now_ms: u64) -> Result<RequestContext, ApiError> {
    let header = req.headers().get("authorization").ok().flatten();
    let secret = keys::bearer(header.as_deref()).ok_or_else(ApiError::missing_key)?;
    let record = config::store::key_record(env, secret, now_ms).await?.ok_or_else(ApiError::invalid_key)?;
    match record.check(now_ms) {
        Ok(()) => {}
        Err(KeyRefusal::Revoked) => {
            return Err(ApiError::new(401, "invalid_request_error", "key_revoked", "This API key has been revoked."))
        }
        Err(KeyRefusal::Expired) => {
            return Err(ApiError::new(401, "invalid_request_error", "key_expired", "This API key has expired."))
        }
        Err(_) => return Err(ApiError::invalid_key()),
    }
    let header = |name: &str| req.headers().get(name).ok().flatten();
    let max_wait_ms =
        auth::context::max_wait_ms(header("x-gateway-priority").as_deref(), header("x-gateway-max-wait-ms").as_deref());
    let non_empty = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    Ok(RequestContext {
        request_id: request_id.to_string(),
        started_ms: now_ms,
        key: record,
        env: env.clone(),
        max_wait_ms,
        task: non_empty(header("x-gateway-task")),
        session_id: non_empty(header("x-session-id")),
        timeout_override_ms: header("x-gateway-timeout-ms").and_then(|v| v.trim().parse().ok()),
        random: auth::context::random_u64(),
        tags: header("x-gateway-tags"),
        cache_control: header("cache-control"),
        cache_ttl: header("x-gateway-cache-ttl"),
    })
}

async fn list_models(rc: &RequestContext, env: &Env) -> Result<Response, ApiError> {
    let table = config::store::route_table(env, rc.started_ms).await?;
    let data: Vec<serde_json::Value> = table
        .models
        .keys()
        .filter(|name| rc.key.allows_model(name))
        .map(|name| serde_json::json!({"id": name, "object": "model", "created": 0, "owned_by": "edge-gateway"}))
        .collect();
    let body = serde_json::json!({"object": "list", "data": data});
    http::io::json_response(200, body.to_string().into_bytes())
}
