//! Route table, virtual keys and tenant records read from KV, cached in the isolate for a short TTL.
//!
//! A route table that fails to parse never replaces the last good one: the gateway keeps
//! serving and reports the problem (log + status endpoint).

use crate::config::keys::{self, KeyRecord, TenantRecord};
use crate::config::routes::{RouteTable, ROUTES_KV_KEY};
use crate::http::codes;
use crate::http::error::ApiError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use worker::Env;

pub const CONFIG_BINDING: &str = "CONFIG";
const DEFAULT_TTL_MS: u64 = 5_000;
const MAX_CACHED_KEYS: usize = 10_000;
const MAX_CACHED_TENANTS: usize = 10_000;

struct CachedKey {
    record: Option<Rc<KeyRecord>>,
    fetched_ms: u64,
}

struct CachedTenant {
    record: Option<Rc<TenantRecord>>,
    raw: Option<String>,
    fetched_ms: u64,
}

/// One JSON document in CONFIG KV (route table, prices, budgets), cached per isolate for the
/// config TTL. A document that fails to parse or cannot be read never replaces the last good one.
pub struct DocSlot<T> {
    doc: Option<Rc<T>>,
    raw: Option<String>,
    fetched_ms: Option<u64>,
    problem: Option<String>,
}

impl<T> Default for DocSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> DocSlot<T> {
    pub const fn new() -> Self {
        DocSlot { doc: None, raw: None, fetched_ms: None, problem: None }
    }
}

/// How one document behaves when it is absent or unreadable.
pub struct DocPolicy {
    pub kv_key: &'static str,
    /// Log events are `<name>_unavailable` and `<name>_rejected`.
    pub name: &'static str,
    /// Deleting the key turns the feature off (budgets) instead of keeping the last good copy.
    pub clear_when_missing: bool,
    /// Without a good copy yet, ask KV again on every call instead of once per TTL.
    pub retry_until_loaded: bool,
}

pub async fn cached_doc<T>(
    slot: &'static std::thread::LocalKey<RefCell<DocSlot<T>>>,
    policy: &DocPolicy,
    env: &Env,
    now_ms: u64,
    parse: impl FnOnce(&str) -> Result<T, Vec<String>>,
) -> Option<Rc<T>> {
    let ttl = cache_ttl_ms(env);
    let fresh = slot.with(|s| {
        let s = s.borrow();
        let recent = s.fetched_ms.is_some_and(|at| now_ms.saturating_sub(at) < ttl);
        (recent && (s.doc.is_some() || !policy.retry_until_loaded)).then(|| s.doc.clone())
    });
    if let Some(doc) = fresh {
        return doc;
    }
    let raw = match env.kv(CONFIG_BINDING) {
        Ok(kv) => kv.get(policy.kv_key).text().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    slot.with(|s| {
        let mut s = s.borrow_mut();
        s.fetched_ms = Some(now_ms);
        match raw {
            Err(e) => {
                let problem = format!("reading KV key '{}' failed: {e}", policy.kv_key);
                crate::support::log::error(serde_json::json!({"event": format!("{}_unavailable", policy.name), "error": problem, "serving_last_good": s.doc.is_some()}));
                s.problem = Some(problem);
            }
            Ok(None) if policy.clear_when_missing => *s = DocSlot { fetched_ms: Some(now_ms), ..DocSlot::new() },
            Ok(None) => s.problem = Some(format!("KV key '{}' is missing", policy.kv_key)),
            Ok(Some(text)) if s.raw.as_deref() == Some(text.as_str()) => {}
            Ok(Some(text)) => {
                match parse(&text) {
                    Ok(doc) => {
                        s.doc = Some(Rc::new(doc));
                        s.problem = None;
                    }
                    Err(errors) => {
                        let joined = errors.join("; ");
                        crate::support::log::error(serde_json::json!({"event": format!("{}_rejected", policy.name), "errors": joined, "serving_last_good": s.doc.is_some()}));
                        s.problem = Some(joined);
                    }
                }
                s.raw = Some(text);
            }
        }
        s.doc.clone()
    })
}

thread_local! {
    static TABLE: RefCell<DocSlot<RouteTable>> = const { RefCell::new(DocSlot::new()) };
    static KEYS: RefCell<HashMap<String, CachedKey>> = RefCell::new(HashMap::new());
    static TENANTS: RefCell<HashMap<String, CachedTenant>> = RefCell::new(HashMap::new());
}

thread_local! {
    static TTL_MS: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Read once per isolate: vars are fixed for an isolate's life, and every lookup asks for it.
pub fn cache_ttl_ms(env: &Env) -> u64 {
    TTL_MS.with(|t| match t.get() {
        Some(ttl) => ttl,
        None => {
            let ttl =
                env.var("CONFIG_CACHE_TTL_MS").ok().and_then(|v| v.to_string().parse().ok()).unwrap_or(DEFAULT_TTL_MS);
            t.set(Some(ttl));
            ttl
        }
    })
}

/// What the status endpoint reports about the route table.
pub struct TableHealth {
    pub loaded: bool,
    pub problem: Option<String>,
    pub age_ms: u64,
}

pub fn table_health(now_ms: u64) -> TableHealth {
    TABLE.with(|t| {
        let t = t.borrow();
        TableHealth {
            loaded: t.doc.is_some(),
            problem: t.problem.clone(),
            age_ms: t.fetched_ms.map_or(0, |at| now_ms.saturating_sub(at)),
        }
    })
}

const ROUTES: DocPolicy =
    DocPolicy { kv_key: ROUTES_KV_KEY, name: "route_table", clear_when_missing: false, retry_until_loaded: true };

pub async fn route_table(env: &Env, now_ms: u64) -> Result<Rc<RouteTable>, ApiError> {
    let parse = |text: &str| RouteTable::parse(text).map_err(|errors| errors.iter().map(|e| e.to_string()).collect());
    match cached_doc(&TABLE, &ROUTES, env, now_ms, parse).await {
        Some(table) => Ok(table),
        None => {
            let problem = TABLE.with(|t| t.borrow().problem.clone()).unwrap_or_else(|| "not loaded".into());
            Err(ApiError::unavailable(
                codes::NO_ROUTE_TABLE,
                format!("The gateway has no valid route table: {problem}"),
            ))
        }
    }
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
    let text =
        kv.get(&name).text().await.map_err(|e| ApiError::unavailable(codes::KEY_STORE_UNAVAILABLE, e.to_string()))?;
    let record = match text {
        None => None,
        Some(t) => match serde_json::from_str::<KeyRecord>(&t) {
            Ok(mut r) => {
                r.id = keys::key_id(&name);
                Some(Rc::new(r))
            }
            Err(e) => {
                crate::support::log::error(serde_json::json!({"event": "key_record_invalid", "error": e.to_string()}));
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
            Err(e) => crate::support::log::error(serde_json::json!({"event": "tenant_record_unavailable", "tenant": tenant,
                                                            "error": e, "serving_last_good": cached.record.is_some()})),
            Ok(None) => {
                cached.record = None;
                cached.raw = None;
            }
            Ok(Some(text)) if cached.raw.as_deref() == Some(text.as_str()) => {}
            Ok(Some(text)) => {
                match TenantRecord::parse(&text) {
                    Ok(record) => cached.record = Some(Rc::new(record)),
                    Err(errors) => crate::support::log::error(serde_json::json!({"event": "tenant_record_invalid", "tenant": tenant,
                                                                         "errors": errors, "serving_last_good": cached.record.is_some()})),
                }
                cached.raw = Some(text);
            }
        }
        cached.record.clone()
    })
}
