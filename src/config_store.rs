//! Route table, virtual keys and tenant records read from KV, cached in the isolate for a short TTL.
//!
//! A route table that fails to parse never replaces the last good one: the gateway keeps
//! serving and reports the problem (log + status endpoint).

use crate::api_error::ApiError;
use crate::keys::{self, KeyRecord, TenantRecord};
use crate::routes::{RouteTable, ROUTES_KV_KEY};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use worker::Env;

pub const CONFIG_BINDING: &str = "CONFIG";
const DEFAULT_TTL_MS: u64 = 5_000;
const MAX_CACHED_KEYS: usize = 10_000;
const MAX_CACHED_TENANTS: usize = 10_000;

struct CachedTable {
    table: Option<Rc<RouteTable>>,
    raw: String,
    fetched_ms: u64,
    problem: Option<String>,
}

struct CachedKey {
    record: Option<Rc<KeyRecord>>,
    fetched_ms: u64,
}

struct CachedTenant {
    record: Option<Rc<TenantRecord>>,
    raw: Option<String>,
    fetched_ms: u64,
}

thread_local! {
    static TABLE: RefCell<Option<CachedTable>> = const { RefCell::new(None) };
    static KEYS: RefCell<HashMap<String, CachedKey>> = RefCell::new(HashMap::new());
    static TENANTS: RefCell<HashMap<String, CachedTenant>> = RefCell::new(HashMap::new());
}

pub fn cache_ttl_ms(env: &Env) -> u64 {
    env.var("CONFIG_CACHE_TTL_MS").ok().and_then(|v| v.to_string().parse().ok()).unwrap_or(DEFAULT_TTL_MS)
}

/// What the status endpoint reports about the route table.
pub struct TableHealth {
    pub loaded: bool,
    pub problem: Option<String>,
    pub age_ms: u64,
}

pub fn table_health(now_ms: u64) -> TableHealth {
    TABLE.with(|t| match &*t.borrow() {
        Some(c) => TableHealth {
            loaded: c.table.is_some(),
            problem: c.problem.clone(),
            age_ms: now_ms.saturating_sub(c.fetched_ms),
        },
        None => TableHealth { loaded: false, problem: None, age_ms: 0 },
    })
}

pub async fn route_table(env: &Env, now_ms: u64) -> Result<Rc<RouteTable>, ApiError> {
    let ttl = cache_ttl_ms(env);
    let fresh = TABLE.with(|t| {
        t.borrow().as_ref().and_then(|c| (now_ms.saturating_sub(c.fetched_ms) < ttl).then(|| c.table.clone())).flatten()
    });
    if let Some(table) = fresh {
        return Ok(table);
    }
    let kv = env.kv(CONFIG_BINDING).map_err(|e| ApiError::internal(format!("KV binding {CONFIG_BINDING}: {e}")))?;
    let raw = kv.get(ROUTES_KV_KEY).text().await;
    TABLE.with(|t| {
        let mut slot = t.borrow_mut();
        let cached = slot.get_or_insert_with(|| CachedTable { table: None, raw: String::new(), fetched_ms: 0, problem: None });
        cached.fetched_ms = now_ms;
        match raw {
            Err(e) => cached.problem = Some(format!("reading KV key '{ROUTES_KV_KEY}' failed: {e}")),
            Ok(None) => cached.problem = Some(format!("KV key '{ROUTES_KV_KEY}' is missing")),
            Ok(Some(text)) if text == cached.raw && cached.table.is_some() => {}
            Ok(Some(text)) => match RouteTable::parse(&text) {
                Ok(table) => {
                    cached.table = Some(Rc::new(table));
                    cached.problem = None;
                    cached.raw = text;
                }
                Err(errors) => {
                    let joined = errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ");
                    crate::log::error(serde_json::json!({"event": "route_table_rejected", "errors": joined, "serving_last_good": cached.table.is_some()})
                    );
                    cached.problem = Some(joined);
                    cached.raw = text;
                }
            },
        }
        cached.table.clone().ok_or_else(|| {
            ApiError::unavailable(
                "no_route_table",
                format!(
                    "The gateway has no valid route table: {}",
                    cached.problem.as_deref().unwrap_or("not loaded")
                ),
            )
        })
    })
}

/// Looks up a presented virtual key; unknown keys are cached too so a flood of bad keys stays off KV.
pub async fn key_record(env: &Env, secret: &str, now_ms: u64) -> Result<Option<Rc<KeyRecord>>, ApiError> {
    let ttl = cache_ttl_ms(env);
    let name = keys::kv_name(secret);
    let hit = KEYS.with(|k| {
        k.borrow().get(&name).and_then(|c| (now_ms.saturating_sub(c.fetched_ms) < ttl).then(|| c.record.clone()))
    });
    if let Some(record) = hit {
        return Ok(record);
    }
    let kv = env.kv(CONFIG_BINDING).map_err(|e| ApiError::internal(format!("KV binding {CONFIG_BINDING}: {e}")))?;
    let text = kv.get(&name).text().await.map_err(|e| ApiError::unavailable("key_store_unavailable", e.to_string()))?;
    let record = match text {
        None => None,
        Some(t) => match serde_json::from_str::<KeyRecord>(&t) {
            Ok(mut r) => {
                r.id = keys::key_id(&name);
                Some(Rc::new(r))
            }
            Err(e) => {
                crate::log::error(serde_json::json!({"event": "key_record_invalid", "error": e.to_string()}));
                None
            }
        },
    };
    KEYS.with(|k| {
        let mut map = k.borrow_mut();
        if map.len() >= MAX_CACHED_KEYS {
            map.clear();
        }
        map.insert(name, CachedKey { record: record.clone(), fetched_ms: now_ms });
    });
    Ok(record)
}

/// The tenant's record (`tenant:<name>`: its rate limits), cached like key records; `None`
/// when the tenant has none. A record that fails to parse or a failed read never replaces the
/// last good one (and without one the tenant is unlimited here: fail open, logged).
pub async fn tenant_record(env: &Env, tenant: &str, now_ms: u64) -> Option<Rc<TenantRecord>> {
    let ttl = cache_ttl_ms(env);
    let hit = TENANTS.with(|t| {
        t.borrow().get(tenant).and_then(|c| (now_ms.saturating_sub(c.fetched_ms) < ttl).then(|| c.record.clone()))
    });
    if let Some(record) = hit {
        return record;
    }
    let name = keys::tenant_kv_name(tenant);
    let read = match env.kv(CONFIG_BINDING) {
        Ok(kv) => kv.get(&name).text().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    TENANTS.with(|t| {
        let mut map = t.borrow_mut();
        if map.len() >= MAX_CACHED_TENANTS && !map.contains_key(tenant) {
            map.clear();
        }
        let cached =
            map.entry(tenant.to_string()).or_insert(CachedTenant { record: None, raw: None, fetched_ms: now_ms });
        cached.fetched_ms = now_ms;
        match read {
            Err(e) => crate::log::error(serde_json::json!({"event": "tenant_record_unavailable", "tenant": tenant,
                                                            "error": e, "serving_last_good": cached.record.is_some()})),
            Ok(None) => {
                cached.record = None;
                cached.raw = None;
            }
            Ok(Some(text)) if cached.raw.as_deref() == Some(text.as_str()) => {}
            Ok(Some(text)) => {
                match TenantRecord::parse(&text) {
                    Ok(record) => cached.record = Some(Rc::new(record)),
                    Err(errors) => crate::log::error(serde_json::json!({"event": "tenant_record_invalid", "tenant": tenant,
                                                                         "errors": errors, "serving_last_good": cached.record.is_some()})),
                }
                cached.raw = Some(text);
            }
        }
        cached.record.clone()
    })
}
