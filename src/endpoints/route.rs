//! What every model-addressed endpoint checks first: the route table, the logical model, and
//! whether the key may use it.

use crate::auth::context::RequestContext;
use crate::config;
use crate::config::routes::{LogicalModel, RouteTable};
use crate::http::codes;
use crate::http::error::ApiError;
use std::rc::Rc;
use worker::Env;

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
