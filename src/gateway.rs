//! The fetch handler: routing, authentication, and the small endpoints.

use crate::auth;
use crate::auth::context::{new_request_id, RequestContext};
use crate::endpoints;
use crate::endpoints::admin;
use crate::endpoints::chat;
use crate::endpoints::embeddings;
use crate::endpoints::responses;
use crate::http;
use crate::http::error::ApiError;
use crate::http::incoming::Incoming;
use crate::http::outgoing;
use crate::idempotency;
use crate::idempotency::gate::Entry;
use crate::providers::passthrough::MessagesCall;
use crate::support::clock::now_ms;
use worker::{Context, Env, Method, Response};

pub async fn handle(req: Incoming, env: Env, ctx: Context) -> worker::web_sys::Response {
    let request_id = new_request_id();
    let started_ms = now_ms();
    let path = req.path.clone();
    let method = req.method.clone();
    // The Messages door answers in Anthropic's format, errors included.
    let messages_call = match path.as_str() {
        "/v1/messages" => Some(MessagesCall::Create),
        "/v1/messages/count_tokens" => Some(MessagesCall::CountTokens),
        _ => None,
    };
    match (&method, messages_call) {
        (Method::Post, Some(call)) => {
            let response = endpoints::messages::serve(req, call, &env, &ctx, &request_id, started_ms).await;
            return outgoing::into_runtime(response, Some(&request_id));
        }
        (_, Some(_)) => {
            let err = ApiError::method_not_allowed(&format!("{method:?}").to_uppercase(), &path);
            return outgoing::into_runtime(http::anthropic_error::error_response(&err, Some(&request_id)), None);
        }
        _ => {}
    }
    let result = match (method.clone(), path.as_str()) {
        (Method::Get, "/admin/status") => admin::status(&req, &env, started_ms).await,
        (Method::Get, "/healthz") => endpoints::health::healthz(&env, started_ms).await,
        (Method::Get, "/v1/models") => match auth::authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => endpoints::models::list(&rc, &env).await,
            Err(e) => Err(e),
        },
        (Method::Post, "/v1/chat/completions") => match auth::authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => match http::io::read_body(&req).await {
                Ok(body) => idempotent(rc, body, &env, &ctx, Door::Chat).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        (Method::Post, "/v1/responses") => match auth::authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => match http::io::read_body(&req).await {
                Ok(body) => idempotent(rc, body, &env, &ctx, Door::Responses).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        (Method::Post, "/v1/responses/input_tokens") => {
            match auth::authenticate(&req, &env, &request_id, started_ms).await {
                Ok(rc) => match http::io::read_body(&req).await {
                    Ok(body) => responses::input_tokens(rc, body, &env, &ctx).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        }
        (Method::Get, p) if p.starts_with("/v1/responses/") => Err(responses::not_stored()),
        (Method::Post, "/v1/embeddings") => match auth::authenticate(&req, &env, &request_id, started_ms).await {
            Ok(rc) => match http::io::read_body(&req).await {
                Ok(body) => embeddings::create(rc, body, &env, &ctx).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        (_, "/v1/models" | "/v1/chat/completions" | "/v1/embeddings" | "/v1/responses" | "/healthz") => {
            Err(ApiError::method_not_allowed(&format!("{method:?}").to_uppercase(), &path))
        }
        _ => Err(ApiError::not_found(&path)),
    };
    match result {
        Ok(response) => outgoing::into_runtime(response, Some(&request_id)),
        Err(err) => outgoing::into_runtime(http::io::error_response(&err, Some(&request_id)), None),
    }
}

/// The doors behind the `Idempotency-Key` gate.
#[derive(Clone, Copy)]
enum Door {
    Chat,
    Responses,
}

async fn door(door: Door, rc: RequestContext, body: Vec<u8>, env: &Env, ctx: &Context) -> Result<Response, ApiError> {
    match door {
        Door::Chat => chat::completions(rc, body, env, ctx).await,
        Door::Responses => responses::create(rc, body, env, ctx).await,
    }
}

async fn idempotent(
    rc: RequestContext,
    body: Vec<u8>,
    env: &Env,
    ctx: &Context,
    which: Door,
) -> Result<Response, ApiError> {
    match idempotency::gate::enter(&rc, env, &body).await? {
        Entry::Open => door(which, rc, body, env, ctx).await,
        Entry::Replay(response) => Ok(response),
        Entry::Proceed(claim) => claim.finish(door(which, rc, body, env, ctx).await).await,
    }
}
