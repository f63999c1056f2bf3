//! What every request reads from KV, read side by side: on a cold isolate (or when the cached
//! copies expire together) a request waits for the slowest of these reads, not for their sum.
//! Each read still goes to KV only when its cached copy is stale, so a warm isolate pays a
//! few cache checks.

use crate::config::keys::KeyRecord;
use crate::config::{budgets, prices, store};
use crate::http::error::ApiError;
use std::rc::Rc;
use worker::Env;

/// The route table, budgets and prices brought into the isolate's caches, side by side.
pub async fn documents(env: &Env, now_ms: u64) {
    let _ = futures::join!(
        store::route_table(env, now_ms),
        budgets::budget_table(env, now_ms),
        prices::price_table(env, now_ms)
    );
}

/// The presented key's record, with the documents (and then the key's tenant record) brought
/// into the isolate's caches meanwhile.
pub async fn key_and_documents(env: &Env, secret: &str, now_ms: u64) -> Result<Option<Rc<KeyRecord>>, ApiError> {
    let key_then_tenant = async {
        let record = store::key_record(env, secret, now_ms).await;
        if let Ok(Some(key)) = &record {
            // Read by the key and tenant limits before any deployment is asked.
            store::tenant_record(env, &key.tenant, now_ms).await;
        }
        record
    };
    futures::join!(key_then_tenant, documents(env, now_ms)).0
}
