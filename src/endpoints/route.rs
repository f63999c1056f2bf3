//! What every model-addressed endpoint checks first: the route table, the logical model, and
//! whether the key may use it.

use crate::auth::context::RequestContext;
use crate::cache::policy::CachedAnswer;
use crate::config;
use crate::config::routes::{LogicalModel, RouteTable};
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::io;
use crate::http::reply::Reply;
use crate::pipeline::report;
use crate::support::clock::now_ms;
use crate::usage::record::RequestOutcome;
use std::rc::Rc;
use worker::{Context, Env};

pub async fn table(env: &Env, rc: &RequestContext) -> Result<Rc<RouteTable>, ApiError> {
    config::store::route_table(env, rc.started_ms).await
}

/// The logical model, if it exists and the key may use it.
pub fn model<'t>(table: &'t RouteTable, rc: &RequestContext, logical: &str) -> Result<&'t LogicalModel, ApiError> {
    // Another tenant's model does not exist for this key: same answer as an unknown name.
    let model = table
        .models
        .get(logical)
        .filter(|m| m.open_to(&rc.key.tenant))
        .ok_or_else(|| ApiError::model_not_found(logical))?;
    if !rc.key.allows_model(logical) {
        return Err(ApiError::new(
            403,
            "permission_error",
            codes::MODEL_NOT_ALLOWED,
            format!("This key may not use model '{logical}'."),
        )
        .with_param("model"));
    }
    Ok(model)
}

/// A cache hit at any door: the usage event records the cost avoided, and the stored answer goes
/// out as JSON, or, for a stream, as `replay` writes it in the door's event format.
pub fn serve_cached(
    answer: CachedAnswer,
    mut outcome: RequestOutcome,
    stream: bool,
    replay: impl FnOnce(&str) -> Option<Vec<u8>>,
    ctx: &Context,
    env: &Env,
) -> Result<Reply, ApiError> {
    let now = now_ms();
    outcome.record_cache_hit(&answer.deployment, answer.usage, now);
    report::finish(outcome, ctx, env);
    let age = answer.age_s(now).to_string();
    let mut response = if stream {
        let sse = replay(&answer.body).ok_or_else(|| ApiError::internal("cached answer could not be replayed"))?;
        io::sse_response(futures::stream::once(async move { Ok(sse) }))?
    } else {
        Reply::json(200, answer.body.into_bytes())
    };
    response.set_header("x-gateway-cache", "hit");
    response.set_header("age", &age);
    response.set_header("x-gateway-deployment", &answer.deployment);
    response.set_header("x-gateway-attempts", "0");
    Ok(response)
}
