//! Route table, virtual keys and tenant records read from KV, cached in the isolate for a short TTL.
//!
//! A route table (or price or budget table) that fails validation never takes effect: the
//! gateway keeps serving what it served, or the durable last-good copy in a new isolate, and
//! reports the refusal (log, `/admin/status`, `/healthz`): see `config::last_good`.

use crate::config::keys::{self, KeyRecord, TenantRecord};
use crate::config::last_good::{self, DocHealth, FollowUp, Stamp};
pub use crate::config::last_good::{DocPolicy, DocSlot};
use crate::config::routes::{RouteTable, ROUTES_KV_KEY};
use crate::http::codes;
use crate::http::error::ApiError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use worker::{Env, KvStore};

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

/// Reads one JSON document from CONFIG KV (route table, prices, budgets) unless the isolate's copy
/// is fresh; a document that fails validation never takes effect: this isolate keeps what it
/// serves, or, with nothing yet, serves the durable last-good copy (`config::last_good`).
pub async fn cached_doc<T>(
    slot: &'static std::thread::LocalKey<RefCell<DocSlot<T>>>,
    policy: &DocPolicy,
    env: &Env,
    now_ms: u64,
    parse: impl Fn(&str) -> Result<T, Vec<String>>,
) -> Option<Rc<T>> {
    let ttl = cache_ttl_ms(env);
    let fresh = slot.with(|s| {
        let s = s.borrow();
        s.fresh(now_ms, ttl, policy).then(|| s.doc.clone())
    });
    if let Some(doc) = fresh {
        return doc;
    }
    let kv = match env.kv(CONFIG_BINDING) {
        Ok(kv) => kv,
        Err(e) => {
            let read = Err(e.to_string());
            return slot.with(|s| settle(&mut s.borrow_mut(), read, now_ms, policy, &parse));
        }
    };
    let read = read_text(&kv, policy.kv_key).await;
    let observed = slot.with(|s| s.borrow_mut().observe(read, now_ms, policy, &parse));
    if let Some(line) = observed.log {
        crate::support::log::error(line);
    }
    match observed.follow_up {
        FollowUp::Nothing => {}
        // Off the request's path: written from a request's `wait_until` (`save_last_good`).
        FollowUp::Promote { text, stamp } => {
            PROMOTIONS.with(|p| p.borrow_mut().push(Promotion { policy: *policy, text, stamp }))
        }
        FollowUp::Fallback => {
            let copy = read_copy(&kv, policy.kv_key).await;
            let line = slot.with(|s| s.borrow_mut().adopt(copy, policy, &parse));
            crate::support::log::error(line);
        }
    }
    slot.with(|s| s.borrow().doc.clone())
}

fn settle<T>(
    slot: &mut DocSlot<T>,
    read: Result<Option<String>, String>,
    now_ms: u64,
    policy: &DocPolicy,
    parse: &impl Fn(&str) -> Result<T, Vec<String>>,
) -> Option<Rc<T>> {
    if let Some(line) = slot.observe(read, now_ms, policy, parse).log {
        crate::support::log::error(line);
    }
    slot.doc.clone()
}

async fn read_text(kv: &KvStore, key: &str) -> Result<Option<String>, String> {
    kv.get(key).text().await.map_err(|e| e.to_string())
}

type Copy = Result<Option<(String, Option<Stamp>)>, String>;

async fn read_copy(kv: &KvStore, doc_key: &str) -> Copy {
    let read = kv.get(&last_good::kv_key(doc_key)).text_with_metadata::<Stamp>().await;
    read.map(|(text, stamp)| text.map(|t| (t, stamp))).map_err(|e| e.to_string())
}

/// A newly validated document this isolate has yet to copy to `last_good:<key>`.
struct Promotion {
    policy: DocPolicy,
    text: String,
    stamp: Stamp,
}

/// Writes the durable copies this isolate's reads found due; called from a request's
/// `wait_until`, so a new version costs the request that first sees it nothing.
pub async fn save_last_good(env: &Env) {
    let due = PROMOTIONS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if due.is_empty() {
        return;
    }
    let Ok(kv) = env.kv(CONFIG_BINDING) else { return };
    for p in due {
        promote(&kv, &p.policy, &p.text, &p.stamp).await;
    }
}

/// Copies a newly validated document to `last_good:<key>`, unless the copy already holds it:
/// every isolate that sees a new version would otherwise write the same value.
async fn promote(kv: &KvStore, policy: &DocPolicy, text: &str, stamp: &Stamp) {
    let copy = read_copy(kv, policy.kv_key).await;
    let held = matches!(&copy, Ok(Some((t, _))) if t == text);
    if held {
        return;
    }
    let key = last_good::kv_key(policy.kv_key);
    let written = match kv.put(&key, text).and_then(|put| put.metadata(stamp)) {
        Ok(put) => put.execute().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let event = format!("{}_last_good_saved", policy.name);
    match written {
        Ok(()) => {
            crate::support::log::info(serde_json::json!({"event": event, "key": key, "version": stamp.fingerprint}))
        }
        Err(e) => crate::support::log::error(
            serde_json::json!({"event": event, "key": key, "version": stamp.fingerprint, "error": e}),
        ),
    }
}

thread_local! {
    static PROMOTIONS: RefCell<Vec<Promotion>> = const { RefCell::new(Vec::new()) };
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

/// What `/admin/status` and `/healthz` report about the route table in this isolate.
pub fn route_health(now_ms: u64) -> DocHealth {
    TABLE.with(|t| t.borrow().health(&ROUTES, now_ms))
}

const ROUTES: DocPolicy =
    DocPolicy { kv_key: ROUTES_KV_KEY, name: "route_table", clear_when_missing: false, retry_until_loaded: true };

pub async fn route_table(env: &Env, now_ms: u64) -> Result<Rc<RouteTable>, ApiError> {
    let parse = |text: &str| RouteTable::parse(text).map_err(|errors| errors.iter().map(|e| e.to_string()).collect());
    match cached_doc(&TABLE, &ROUTES, env, now_ms, parse).await {
        Some(table) => Ok(table),
        None => {
            let problem = TABLE.with(|t| {
                let t = t.borrow();
                let refused =
                    t.refused.as_ref().map(|r| format!("version {} refused: {}", r.fingerprint, r.errors.join("; ")));
                refused.or_else(|| t.problem.clone()).unwrap_or_else(|| "not loaded".into())
            });
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
