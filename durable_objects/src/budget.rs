//! Tenant budgets: spend caps per tenant and calendar month, enforced by reserve-then-settle.
//!
//! One [`TenantBudget`] object per tenant and period (named `budget:<tenant>:<YYYY-MM>`) holds
//! the micro-dollars settled so far and the reservations of requests still in flight. The worker
//! reserves a request's estimated cost (an upper bound) before any upstream call and settles the
//! actual cost when the request is done; the object serializes both, so concurrent requests
//! cannot together reserve past the hard limit. The spend can pass the hard limit only by what
//! settled requests cost beyond their reservation (an estimate that was too low).
//!
//! The messages and the state machine here are shared by the worker and the object; the state
//! machine is pure (time is an input) and says what to write, the shell at the bottom supplies
//! the clock, writes before it answers, and runs the alarm that expires forgotten reservations.
//!
//! Per reservation: `Reserve` → held → `Settle` → settled (a tombstone, forgotten after
//! [`SETTLED_KEEP_MS`]), or held → its TTL passes → expired (released; a late `Settle` still
//! charges the actual cost until [`EXPIRED_KEEP_MS`] has passed).

use crate::object::{now_ms, respond, Alarm, Rearm};
use crate::utc;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use worker::js_sys::{Object, Reflect};
use worker::wasm_bindgen; // the #[durable_object] expansion names `wasm_bindgen` unqualified
use worker::wasm_bindgen::JsValue;
use worker::{
    console_error, console_warn, durable_object, DurableObject, Env, Method, Request, RequestInit, Response, Result,
    State, Stub,
};

/// Durable Objects ignore the host; the path is kept for logs.
pub const OBJECT_URL: &str = "https://budget.internal/v1";

/// What a request refused only because of other requests' reservations is asked to wait: those
/// settle (usually with a refund) within their requests' deadlines.
pub const IN_FLIGHT_RETRY_MS: u64 = 1_000;

/// How long a settled reservation is remembered. It exists so that the settle's two changes
/// (spent and the reservation's state) are one atomic write; a repeated settle is a no-op
/// whether or not the tombstone is still there.
pub const SETTLED_KEEP_MS: u64 = 60_000;

/// How long an expired reservation still accepts a late settle (which charges the actual cost).
pub const EXPIRED_KEEP_MS: u64 = 24 * 60 * 60 * 1000;

/// A reservation's longest life, whatever the caller asks.
pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// After the period ends (plus this), the object deletes everything it stores.
pub const KEEP_AFTER_PERIOD_MS: u64 = 2 * 24 * 60 * 60 * 1000;

/// Alarms are batched: at most one every this many milliseconds.
pub const MIN_ALARM_GAP_MS: u64 = 5_000;

/// Storage calls take at most 128 keys.
const MAX_KEYS_PER_CALL: usize = 128;

const META_KEY: &str = "meta";
const ENTRY_PREFIX: &str = "r:";
const DAY_MS: u64 = 86_400_000;

/// A budget period: one calendar month, UTC, `[start_ms, end_ms)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    /// `YYYY-MM`: orders like the periods themselves.
    pub key: String,
    pub start_ms: u64,
    pub end_ms: u64,
}

impl Period {
    /// The calendar month (UTC) that contains `now_ms`.
    pub fn month_containing(now_ms: u64) -> Period {
        let days = (now_ms / DAY_MS) as i64;
        let (y, m, _) = utc::civil_from_days(days);
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        Period {
            key: format!("{y:04}-{m:02}"),
            start_ms: utc::days_from_civil(y, m, 1) as u64 * DAY_MS,
            end_ms: utc::days_from_civil(ny, nm, 1) as u64 * DAY_MS,
        }
    }
}

/// The object that holds `tenant`'s budget for `period`.
pub fn object_name(tenant: &str, period: &Period) -> String {
    format!("budget:{tenant}:{}", period.key)
}

/// The tenant's limits, sent with every reservation so a config change applies at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetLimits {
    /// Past this much settled spend, admitted requests are flagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_micro_usd: Option<u64>,
    /// Spend plus reservations plus this request may not pass this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_micro_usd: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum BudgetRequest {
    Reserve(Reserve),
    Settle(Settle),
    Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reserve {
    /// The request id; `Settle` names it. A repeated `Reserve` with the same id changes nothing.
    pub id: String,
    pub period: Period,
    /// The request's estimated cost, an upper bound where the estimate allows.
    pub amount_micro_usd: u64,
    pub limits: BudgetLimits,
    /// After this the reservation is released unless settled (capped at [`MAX_TTL_MS`]).
    pub ttl_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    pub id: String,
    /// What the request actually cost (0 for failures the vendor does not bill).
    pub actual_micro_usd: u64,
    /// The request ran without a reservation (the object could not be reached when it started):
    /// charge it even though nothing is held under its id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreserved: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetAdmission {
    /// Settled spend in this period.
    pub spent_micro_usd: u64,
    /// Reservations in flight, this one included.
    pub reserved_micro_usd: u64,
    /// The settled spend is past the soft limit.
    pub soft_exceeded: bool,
    pub period_end_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRefusal {
    pub spent_micro_usd: u64,
    pub reserved_micro_usd: u64,
    pub hard_micro_usd: u64,
    pub amount_micro_usd: u64,
    /// The settled spend alone leaves no room: nothing changes until the period ends. Otherwise
    /// other requests' reservations are in the way and a retry soon may pass.
    pub exhausted: bool,
    /// When a retry can pass: the period's end when exhausted, else [`IN_FLIGHT_RETRY_MS`].
    pub retry_after_ms: u64,
    pub period_end_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStatus {
    pub period: Option<Period>,
    pub spent_micro_usd: u64,
    pub reserved_micro_usd: u64,
    pub held: usize,
    pub expired: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum BudgetResponse {
    Admitted(BudgetAdmission),
    Refused(BudgetRefusal),
    /// The reservation was replaced by the actual cost; `late` when it had already expired (or,
    /// for an unreserved settle, there was none).
    Settled {
        spent_micro_usd: u64,
        late: bool,
    },
    /// Nothing held under that id (already settled, never reserved, or forgotten): no change.
    Unknown {
        spent_micro_usd: u64,
    },
    Status(BudgetStatus),
    Error {
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Entry {
    Held { amount: u64, expires_at_ms: u64 },
    Settled { forget_at_ms: u64 },
    Expired { amount: u64, forget_at_ms: u64 },
}

impl Entry {
    fn deadline(&self) -> u64 {
        match *self {
            Entry::Held { expires_at_ms, .. } => expires_at_ms,
            Entry::Settled { forget_at_ms } | Entry::Expired { forget_at_ms, .. } => forget_at_ms,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    #[serde(default)]
    period: Option<Period>,
    #[serde(default)]
    spent_micro_usd: u64,
}

/// What to write, in order: wipe everything, then `puts` (the first [`MAX_KEYS_PER_CALL`] in one
/// atomic call; what must change together comes first), then `deletes` (only forgotten entries,
/// whose removal needs no atomicity).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Writes {
    pub delete_all: bool,
    pub puts: Vec<(String, String)>,
    pub deletes: Vec<String>,
}

impl Writes {
    pub fn is_empty(&self) -> bool {
        !self.delete_all && self.puts.is_empty() && self.deletes.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Pending {
    delete_all: bool,
    meta: bool,
    /// The entry the current operation is about: written with the meta, first.
    primary: Option<String>,
    puts: BTreeSet<String>,
    deletes: BTreeSet<String>,
}

/// The budget of one tenant in one period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetState {
    period: Option<Period>,
    spent: u64,
    /// Sum of the held reservations.
    reserved: u64,
    entries: BTreeMap<String, Entry>,
    pending: Pending,
}

impl BudgetState {
    pub fn handle(&mut self, req: &BudgetRequest, now_ms: u64) -> BudgetResponse {
        match req {
            BudgetRequest::Reserve(r) => self.reserve(r, now_ms),
            BudgetRequest::Settle(s) => self.settle(s, now_ms),
            BudgetRequest::Status => {
                self.tick(now_ms);
                BudgetResponse::Status(self.status())
            }
        }
    }

    pub fn reserve(&mut self, r: &Reserve, now_ms: u64) -> BudgetResponse {
        self.tick(now_ms);
        match &self.period {
            None => self.adopt(r.period.clone()),
            // Objects are named per period, so this only happens to an object reused across periods.
            Some(p) if r.period.key > p.key => self.roll_over(r.period.clone()),
            // A straggler from the period before (a skewed clock) counts against this one.
            Some(_) => {}
        }
        let period_end_ms = self.period.as_ref().map_or(r.period.end_ms, |p| p.end_ms);
        if self.entries.contains_key(&r.id) {
            return BudgetResponse::Admitted(self.admission(&r.limits, period_end_ms));
        }
        let amount = r.amount_micro_usd;
        if let Some(hard) = r.limits.hard_micro_usd {
            if self.spent.saturating_add(self.reserved).saturating_add(amount) > hard {
                let exhausted = self.spent.saturating_add(amount) > hard;
                let retry_after_ms =
                    if exhausted { period_end_ms.saturating_sub(now_ms).max(1) } else { IN_FLIGHT_RETRY_MS };
                return BudgetResponse::Refused(BudgetRefusal {
                    spent_micro_usd: self.spent,
                    reserved_micro_usd: self.reserved,
                    hard_micro_usd: hard,
                    amount_micro_usd: amount,
                    exhausted,
                    retry_after_ms,
                    period_end_ms,
                });
            }
        }
        let expires_at_ms = now_ms.saturating_add(r.ttl_ms.clamp(1, MAX_TTL_MS));
        self.entries.insert(r.id.clone(), Entry::Held { amount, expires_at_ms });
        self.reserved = self.reserved.saturating_add(amount);
        self.mark_primary(&r.id);
        BudgetResponse::Admitted(self.admission(&r.limits, period_end_ms))
    }

    /// Replaces the reservation with the actual cost (a refund or an extra charge).
    pub fn settle(&mut self, s: &Settle, now_ms: u64) -> BudgetResponse {
        self.tick(now_ms);
        let late = match self.entries.get(&s.id) {
            Some(Entry::Held { amount, .. }) => {
                self.reserved = self.reserved.saturating_sub(*amount);
                false
            }
            Some(Entry::Expired { .. }) => true,
            None if s.unreserved => true,
            Some(Entry::Settled { .. }) | None => return BudgetResponse::Unknown { spent_micro_usd: self.spent },
        };
        self.spent = self.spent.saturating_add(s.actual_micro_usd);
        self.entries.insert(s.id.clone(), Entry::Settled { forget_at_ms: now_ms.saturating_add(SETTLED_KEEP_MS) });
        self.pending.meta = true;
        self.mark_primary(&s.id);
        BudgetResponse::Settled { spent_micro_usd: self.spent, late }
    }

    pub fn status(&self) -> BudgetStatus {
        let count = |f: fn(&Entry) -> bool| self.entries.values().filter(|e| f(e)).count();
        BudgetStatus {
            period: self.period.clone(),
            spent_micro_usd: self.spent,
            reserved_micro_usd: self.reserved,
            held: count(|e| matches!(e, Entry::Held { .. })),
            expired: count(|e| matches!(e, Entry::Expired { .. })),
        }
    }

    /// Releases reservations past their TTL, forgets old tombstones, and wipes everything once
    /// the period is long over.
    pub fn tick(&mut self, now_ms: u64) {
        if self.period.as_ref().is_some_and(|p| now_ms >= p.end_ms.saturating_add(KEEP_AFTER_PERIOD_MS)) {
            *self = BudgetState::default();
            self.pending.delete_all = true;
            return;
        }
        let due: Vec<String> =
            self.entries.iter().filter(|(_, e)| now_ms >= e.deadline()).map(|(id, _)| id.clone()).collect();
        for id in due {
            let Some(entry) = self.entries.get(&id).copied() else { continue };
            let next = match entry {
                Entry::Held { amount, expires_at_ms } => {
                    self.reserved = self.reserved.saturating_sub(amount);
                    let forget_at_ms = expires_at_ms.saturating_add(EXPIRED_KEEP_MS);
                    (now_ms < forget_at_ms).then_some(Entry::Expired { amount, forget_at_ms })
                }
                Entry::Settled { .. } | Entry::Expired { .. } => None,
            };
            match next {
                Some(e) => {
                    self.entries.insert(id.clone(), e);
                    self.mark_put(&id);
                }
                None => {
                    self.entries.remove(&id);
                    self.mark_delete(&id);
                }
            }
        }
    }

    /// When [`Self::tick`] next has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let cleanup = self.period.as_ref().map(|p| p.end_ms.saturating_add(KEEP_AFTER_PERIOD_MS));
        self.entries.values().map(Entry::deadline).chain(cleanup).min()
    }

    /// When to run the alarm: the next deadline, but no sooner than [`MIN_ALARM_GAP_MS`] from now.
    pub fn alarm_time(&self, now_ms: u64) -> Option<u64> {
        self.next_deadline().map(|d| d.max(now_ms.saturating_add(MIN_ALARM_GAP_MS)))
    }

    pub fn is_empty(&self) -> bool {
        self.period.is_none() && self.entries.is_empty() && self.spent == 0
    }

    /// The writes that make storage match memory since the last call.
    pub fn take_writes(&mut self) -> Writes {
        let pending = std::mem::take(&mut self.pending);
        let mut puts = Vec::new();
        if pending.meta {
            let meta = Meta { period: self.period.clone(), spent_micro_usd: self.spent };
            puts.push((META_KEY.to_string(), serde_json::to_string(&meta).expect("meta always serializes")));
        }
        let primary = pending.primary.iter().filter(|id| pending.puts.contains(*id));
        for id in primary.chain(pending.puts.iter().filter(|id| Some(*id) != pending.primary.as_ref())) {
            if let Some(e) = self.entries.get(id) {
                puts.push((entry_key(id), serde_json::to_string(e).expect("entries always serialize")));
            }
        }
        let deletes = pending.deletes.iter().map(|id| entry_key(id)).collect();
        Writes { delete_all: pending.delete_all, puts, deletes }
    }

    /// Rebuilds the state from stored `(key, value)` pairs; unreadable ones are skipped and named.
    pub fn from_storage(pairs: impl IntoIterator<Item = (String, String)>) -> (BudgetState, Vec<String>) {
        let mut state = BudgetState::default();
        let mut problems = Vec::new();
        for (key, value) in pairs {
            if key == META_KEY {
                match serde_json::from_str::<Meta>(&value) {
                    Ok(meta) => {
                        state.period = meta.period;
                        state.spent = meta.spent_micro_usd;
                    }
                    Err(e) => problems.push(format!("{key}: {e}")),
                }
            } else if let Some(id) = key.strip_prefix(ENTRY_PREFIX) {
                match serde_json::from_str::<Entry>(&value) {
                    Ok(entry) => {
                        if let Entry::Held { amount, .. } = entry {
                            state.reserved = state.reserved.saturating_add(amount);
                        }
                        state.entries.insert(id.to_string(), entry);
                    }
                    Err(e) => problems.push(format!("{key}: {e}")),
                }
            } else {
                problems.push(format!("{key}: unknown key"));
            }
        }
        (state, problems)
    }

    fn admission(&self, limits: &BudgetLimits, period_end_ms: u64) -> BudgetAdmission {
        BudgetAdmission {
            spent_micro_usd: self.spent,
            reserved_micro_usd: self.reserved,
            soft_exceeded: limits.soft_micro_usd.is_some_and(|soft| self.spent > soft),
            period_end_ms,
        }
    }

    fn adopt(&mut self, period: Period) {
        self.period = Some(period);
        self.pending.meta = true;
    }

    /// A newer period starts from nothing; reservations of the old one are dropped (their late
    /// settles find nothing and change nothing).
    fn roll_over(&mut self, period: Period) {
        let ids: Vec<String> = self.entries.keys().cloned().collect();
        for id in ids {
            self.entries.remove(&id);
            self.mark_delete(&id);
        }
        self.spent = 0;
        self.reserved = 0;
        self.adopt(period);
    }

    fn mark_put(&mut self, id: &str) {
        self.pending.deletes.remove(id);
        self.pending.puts.insert(id.to_string());
    }

    fn mark_delete(&mut self, id: &str) {
        self.pending.puts.remove(id);
        self.pending.deletes.insert(id.to_string());
    }

    fn mark_primary(&mut self, id: &str) {
        self.mark_put(id);
        self.pending.primary = Some(id.to_string());
    }
}

fn entry_key(id: &str) -> String {
    format!("{ENTRY_PREFIX}{id}")
}

pub fn encode_request(req: &BudgetRequest) -> String {
    serde_json::to_string(req).expect("budget requests always serialize")
}

pub fn decode_request(body: &str) -> std::result::Result<BudgetRequest, String> {
    serde_json::from_str(body).map_err(|e| format!("malformed budget request: {e}"))
}

pub fn encode_response(resp: &BudgetResponse) -> String {
    serde_json::to_string(resp).expect("budget responses always serialize")
}

pub fn decode_response(body: &str) -> std::result::Result<BudgetResponse, String> {
    match serde_json::from_str(body).map_err(|e| format!("malformed budget response: {e}"))? {
        BudgetResponse::Error { message } => Err(format!("budget object error: {message}")),
        resp => Ok(resp),
    }
}

/// One round trip to a tenant's budget object (the worker names the stub).
pub async fn call(stub: &Stub, req: &BudgetRequest) -> Result<BudgetResponse> {
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(JsValue::from_str(&encode_request(req))));
    let request = Request::new_with_init(OBJECT_URL, &init)?;
    let body = stub.fetch_with_request(request).await?.text().await?;
    decode_response(&body).map_err(worker::Error::RustError)
}

/// One object per tenant and period, holding that budget's [`BudgetState`].
///
/// Every change is written before the answer: a reservation that was admitted but not stored
/// would let the next request past the hard limit. Reserve is one write, settle one atomic write
/// of two keys; the alarm releases expired reservations and, days after the period, deletes all.
#[durable_object(alarm)]
pub struct TenantBudget {
    state: State,
    core: RefCell<Option<BudgetState>>,
    alarm: Alarm,
}

impl DurableObject for TenantBudget {
    fn new(state: State, _env: Env) -> Self {
        TenantBudget { state, core: RefCell::new(None), alarm: Alarm::default() }
    }

    /// `POST` a [`BudgetRequest`]; answers a [`BudgetResponse`].
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        if req.method() != Method::Post {
            return Response::error("POST a budget request", 405);
        }
        let request = match decode_request(&req.text().await?) {
            Ok(r) => r,
            Err(message) => return respond(&BudgetResponse::Error { message }, 400),
        };
        self.load().await?;
        let now = now_ms();
        let (response, writes) = {
            let mut guard = self.core.borrow_mut();
            let core = guard.get_or_insert_with(BudgetState::default);
            let response = core.handle(&request, now);
            (response, core.take_writes())
        };
        if let Err(e) = self.persist(writes).await {
            // Memory is ahead of storage: forget it, reload on the next request, and say so.
            console_error!("budget: write failed: {e}");
            *self.core.borrow_mut() = None;
            return respond(&BudgetResponse::Error { message: format!("write failed: {e}") }, 500);
        }
        self.arm_alarm(now).await;
        respond(&response, 200)
    }

    async fn alarm(&self) -> Result<Response> {
        self.alarm.cleared();
        self.load().await?;
        let now = now_ms();
        let writes = {
            let mut guard = self.core.borrow_mut();
            let core = guard.get_or_insert_with(BudgetState::default);
            core.tick(now);
            core.take_writes()
        };
        if let Err(e) = self.persist(writes).await {
            *self.core.borrow_mut() = None;
            return Err(e);
        }
        self.arm_alarm(now).await;
        Response::ok("")
    }
}

impl TenantBudget {
    /// Reads the stored state once per object lifetime.
    async fn load(&self) -> Result<()> {
        if self.core.borrow().is_some() {
            return Ok(());
        }
        let stored = self.state.storage().list().await?;
        let mut pairs = Vec::new();
        stored.for_each(&mut |value, key| {
            if let (Some(k), Some(v)) = (key.as_string(), value.as_string()) {
                pairs.push((k, v));
            }
        });
        let (loaded, problems) = BudgetState::from_storage(pairs);
        for problem in problems {
            console_warn!("budget: skipping unreadable stored entry {problem}");
        }
        let mut core = self.core.borrow_mut();
        if core.is_none() {
            *core = Some(loaded);
        }
        Ok(())
    }

    async fn persist(&self, writes: Writes) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let storage = self.state.storage();
        if writes.delete_all {
            storage.delete_all().await?;
            self.alarm.cleared();
        }
        for chunk in writes.puts.chunks(MAX_KEYS_PER_CALL) {
            let values = Object::new();
            for (key, value) in chunk {
                Reflect::set(&values, &JsValue::from_str(key), &JsValue::from_str(value))?;
            }
            storage.put_multiple_raw(values).await?;
        }
        for chunk in writes.deletes.chunks(MAX_KEYS_PER_CALL) {
            storage.delete_multiple(chunk.to_vec()).await?;
        }
        Ok(())
    }

    /// Keeps an alarm armed no later than the state needs one.
    async fn arm_alarm(&self, now: u64) {
        let wanted = self.core.borrow().as_ref().and_then(|c| c.alarm_time(now));
        let Some(at) = wanted else { return };
        self.alarm.arm(&self.state.storage(), now, at, Rearm::IfEarlier, "budget").await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;
    /// 2026-07-15T00:00:00Z.
    const JULY_15: u64 = 1_784_073_600_000;

    fn july() -> Period {
        Period::month_containing(JULY_15)
    }

    fn limits(soft: Option<u64>, hard: Option<u64>) -> BudgetLimits {
        BudgetLimits { soft_micro_usd: soft, hard_micro_usd: hard }
    }

    fn reserve(id: &str, amount: u64, l: BudgetLimits) -> Reserve {
        Reserve { id: id.into(), period: july(), amount_micro_usd: amount, limits: l, ttl_ms: 10 * MIN }
    }

    fn hard(h: u64) -> BudgetLimits {
        limits(None, Some(h))
    }

    fn settle(id: &str, actual: u64) -> Settle {
        Settle { id: id.into(), actual_micro_usd: actual, unreserved: false }
    }

    fn admitted(r: BudgetResponse) -> BudgetAdmission {
        match r {
            BudgetResponse::Admitted(a) => a,
            other => panic!("expected admitted, got {other:?}"),
        }
    }

    fn refused(r: BudgetResponse) -> BudgetRefusal {
        match r {
            BudgetResponse::Refused(r) => r,
            other => panic!("expected refused, got {other:?}"),
        }
    }

    #[test]
    fn months_utc_with_their_boundaries() {
        let p = july();
        assert_eq!(p.key, "2026-07");
        assert_eq!(p.start_ms, 1_782_864_000_000, "2026-07-01T00:00:00Z");
        assert_eq!(p.end_ms, 1_785_542_400_000, "2026-08-01T00:00:00Z");
        assert_eq!(Period::month_containing(p.end_ms - 1), p);
        assert_eq!(Period::month_containing(p.start_ms), p);
        assert_eq!(Period::month_containing(p.end_ms).key, "2026-08");
        let dec = Period::month_containing(1_798_675_200_000); // 2026-12-31T00:00:00Z
        assert_eq!((dec.key.as_str(), dec.end_ms), ("2026-12", 1_798_761_600_000), "ends 2027-01-01");
        assert_eq!(Period::month_containing(dec.end_ms).key, "2027-01");
        let feb_leap = Period::month_containing(1_709_164_800_000); // 2024-02-29
        assert_eq!((feb_leap.key.as_str(), feb_leap.end_ms - feb_leap.start_ms), ("2024-02", 29 * DAY_MS));
        let feb = Period::month_containing(1_771_891_200_000); // 2026-02-24
        assert_eq!((feb.key.as_str(), feb.end_ms - feb.start_ms), ("2026-02", 28 * DAY_MS));
        assert_eq!(Period::month_containing(0).key, "1970-01");
        assert_eq!(object_name("acme", &p), "budget:acme:2026-07");
    }

    #[test]
    fn civil_conversions_agree_over_centuries() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = utc::civil_from_days(days);
            assert_eq!(utc::days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn reserve_within_hard_then_refused_past_it() {
        let mut s = BudgetState::default();
        let a = admitted(s.reserve(&reserve("r1", 400, hard(1000)), JULY_15));
        assert_eq!((a.spent_micro_usd, a.reserved_micro_usd, a.soft_exceeded), (0, 400, false));
        assert_eq!(a.period_end_ms, july().end_ms);
        admitted(s.reserve(&reserve("r2", 600, hard(1000)), JULY_15));
        // Exactly at the limit passes; one micro-dollar more does not.
        let r = refused(s.reserve(&reserve("r3", 1, hard(1000)), JULY_15 + 5));
        assert_eq!((r.spent_micro_usd, r.reserved_micro_usd, r.hard_micro_usd, r.amount_micro_usd), (0, 1000, 1000, 1));
        assert!(!r.exhausted, "only reservations are in the way");
        assert_eq!(r.retry_after_ms, IN_FLIGHT_RETRY_MS);
        assert_eq!(s.status().held, 2, "a refusal holds nothing");
    }

    #[test]
    fn exhausted_budget_resets_at_the_period_end() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 900, hard(1000)), JULY_15);
        s.settle(&settle("r1", 950), JULY_15 + 1);
        let r = refused(s.reserve(&reserve("r2", 60, hard(1000)), JULY_15 + 2));
        assert!(r.exhausted);
        assert_eq!(r.retry_after_ms, july().end_ms - (JULY_15 + 2));
        assert_eq!(r.period_end_ms, july().end_ms);
        // A request that still fits the rest is admitted.
        admitted(s.reserve(&reserve("r3", 50, hard(1000)), JULY_15 + 3));
    }

    #[test]
    fn zero_hard_refuses_everything_and_no_hard_refuses_nothing() {
        let mut s = BudgetState::default();
        assert!(refused(s.reserve(&reserve("r1", 1, hard(0)), JULY_15)).exhausted);
        for k in 0..50 {
            admitted(s.reserve(&reserve(&format!("s{k}"), u64::MAX / 10, limits(Some(1), None)), JULY_15));
        }
    }

    #[test]
    fn soft_limit_flags_once_settled_spend_is_past_it() {
        let mut s = BudgetState::default();
        let l = limits(Some(100), Some(1000));
        assert!(!admitted(s.reserve(&reserve("r1", 300, l), JULY_15)).soft_exceeded, "reservations do not count");
        s.settle(&settle("r1", 100), JULY_15 + 1);
        assert!(!admitted(s.reserve(&reserve("r2", 10, l), JULY_15 + 2)).soft_exceeded, "at the limit is not past it");
        s.settle(&settle("r2", 1), JULY_15 + 3);
        let a = admitted(s.reserve(&reserve("r3", 10, l), JULY_15 + 4));
        assert!(a.soft_exceeded);
        assert_eq!(a.spent_micro_usd, 101);
        assert!(!admitted(s.reserve(&reserve("r4", 10, limits(None, Some(1000))), JULY_15 + 5)).soft_exceeded);
    }

    #[test]
    fn settle_refunds_what_the_estimate_overstated() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 600, hard(1000)), JULY_15);
        assert!(!refused(s.reserve(&reserve("r2", 500, hard(1000)), JULY_15)).exhausted);
        assert_eq!(
            s.settle(&settle("r1", 120), JULY_15 + 1),
            BudgetResponse::Settled { spent_micro_usd: 120, late: false }
        );
        let a = admitted(s.reserve(&reserve("r2", 500, hard(1000)), JULY_15 + 2));
        assert_eq!((a.spent_micro_usd, a.reserved_micro_usd), (120, 500));
    }

    #[test]
    fn settle_charges_what_the_estimate_understated() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 100, hard(1000)), JULY_15);
        s.reserve(&reserve("r2", 100, hard(1000)), JULY_15);
        s.settle(&settle("r1", 1_100), JULY_15 + 1);
        let st = s.status();
        assert_eq!((st.spent_micro_usd, st.reserved_micro_usd), (1_100, 100), "the overshoot is what r1 understated");
        s.settle(&settle("r2", 50), JULY_15 + 2);
        assert!(refused(s.reserve(&reserve("r3", 0, hard(1000)), JULY_15 + 3)).exhausted);
    }

    #[test]
    fn settle_is_idempotent_and_ignores_unknown_ids() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 100, hard(1000)), JULY_15);
        s.take_writes();
        assert_eq!(
            s.settle(&settle("r1", 40), JULY_15 + 1),
            BudgetResponse::Settled { spent_micro_usd: 40, late: false }
        );
        assert!(!s.take_writes().is_empty());
        assert_eq!(s.settle(&settle("r1", 40), JULY_15 + 2), BudgetResponse::Unknown { spent_micro_usd: 40 });
        assert_eq!(s.settle(&settle("nope", 999), JULY_15 + 2), BudgetResponse::Unknown { spent_micro_usd: 40 });
        assert!(s.take_writes().is_empty(), "nothing changed");
        // After the tombstone is forgotten a repeat is still a no-op.
        let later = JULY_15 + 1 + SETTLED_KEEP_MS;
        assert_eq!(s.settle(&settle("r1", 40), later), BudgetResponse::Unknown { spent_micro_usd: 40 });
        assert_eq!(s.take_writes().deletes, vec!["r:r1".to_string()]);
        assert!(s.entries.is_empty());
    }

    #[test]
    fn unreserved_request_is_charged_once() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 100, hard(1000)), JULY_15);
        let charge = |id: &str, actual| Settle { unreserved: true, ..settle(id, actual) };
        assert_eq!(
            s.settle(&charge("lost", 30), JULY_15 + 1),
            BudgetResponse::Settled { spent_micro_usd: 30, late: true }
        );
        assert_eq!(s.settle(&charge("lost", 30), JULY_15 + 2), BudgetResponse::Unknown { spent_micro_usd: 30 });
        // Its reservation was stored after all (only the answer was lost): settled as usual.
        assert_eq!(
            s.settle(&charge("r1", 80), JULY_15 + 3),
            BudgetResponse::Settled { spent_micro_usd: 110, late: false }
        );
        assert_eq!(s.status().reserved_micro_usd, 0);
    }

    #[test]
    fn repeated_reserve_holds_once() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 700, hard(1000)), JULY_15);
        s.take_writes();
        let again = admitted(s.reserve(&reserve("r1", 700, hard(1000)), JULY_15 + 1));
        assert_eq!(again.reserved_micro_usd, 700);
        assert!(s.take_writes().is_empty());
    }

    #[test]
    fn unsettled_reservation_expires_and_a_late_settle_still_charges() {
        let mut s = BudgetState::default();
        let mut r = reserve("r1", 800, hard(1000));
        r.ttl_ms = MIN;
        s.reserve(&r, JULY_15);
        assert_eq!(s.next_deadline(), Some(JULY_15 + MIN));
        assert!(!refused(s.reserve(&reserve("r2", 300, hard(1000)), JULY_15 + MIN - 1)).exhausted);
        // The TTL passes: released, and r2 fits.
        admitted(s.reserve(&reserve("r2", 300, hard(1000)), JULY_15 + MIN));
        let st = s.status();
        assert_eq!((st.reserved_micro_usd, st.held, st.expired), (300, 1, 1));
        assert_eq!(
            s.settle(&settle("r1", 200), JULY_15 + 2 * MIN),
            BudgetResponse::Settled { spent_micro_usd: 200, late: true }
        );
        assert_eq!(
            s.settle(&settle("r1", 200), JULY_15 + 2 * MIN + 1),
            BudgetResponse::Unknown { spent_micro_usd: 200 }
        );
    }

    #[test]
    fn expired_reservations_are_forgotten_after_a_day() {
        let mut s = BudgetState::default();
        let mut r = reserve("r1", 10, hard(1000));
        r.ttl_ms = MIN;
        s.reserve(&r, JULY_15);
        s.tick(JULY_15 + MIN);
        assert_eq!(s.status().expired, 1);
        assert_eq!(s.next_deadline(), Some(JULY_15 + MIN + EXPIRED_KEEP_MS));
        s.take_writes();
        s.tick(JULY_15 + MIN + EXPIRED_KEEP_MS);
        assert_eq!(s.status().expired, 0);
        assert_eq!(s.take_writes().deletes, vec!["r:r1".to_string()]);
        assert_eq!(
            s.settle(&settle("r1", 5), JULY_15 + MIN + EXPIRED_KEEP_MS),
            BudgetResponse::Unknown { spent_micro_usd: 0 }
        );
    }

    #[test]
    fn ttl_is_capped_and_at_least_a_millisecond() {
        let mut s = BudgetState::default();
        let mut r = reserve("r1", 10, hard(1000));
        r.ttl_ms = u64::MAX;
        s.reserve(&r, JULY_15);
        r.id = "r2".into();
        r.ttl_ms = 0;
        s.reserve(&r, JULY_15);
        assert_eq!(s.entries["r1"].deadline(), JULY_15 + MAX_TTL_MS);
        assert_eq!(s.entries["r2"].deadline(), JULY_15 + 1);
    }

    #[test]
    fn hundred_concurrent_reservations_never_pass_hard() {
        let mut s = BudgetState::default();
        let admitted_ids: Vec<String> = (0..100)
            .filter_map(|k| {
                let id = format!("r{k}");
                matches!(s.reserve(&reserve(&id, 27, hard(600)), JULY_15 + k), BudgetResponse::Admitted(_))
                    .then_some(id)
            })
            .collect();
        assert_eq!(admitted_ids.len(), 600 / 27);
        assert!(s.status().reserved_micro_usd <= 600);
        for id in &admitted_ids {
            s.settle(&settle(id, 24), JULY_15 + 200);
        }
        let st = s.status();
        assert_eq!((st.spent_micro_usd, st.reserved_micro_usd, st.held), (22 * 24, 0, 0));
        // Refunds make room for more, up to the hard limit and no further.
        let mut k = 0;
        while let BudgetResponse::Admitted(_) = s.reserve(&reserve(&format!("more{k}"), 27, hard(600)), JULY_15 + 300) {
            s.settle(&settle(&format!("more{k}"), 24), JULY_15 + 301);
            k += 1;
        }
        let spent = s.status().spent_micro_usd;
        assert!(spent <= 600 && spent + 27 > 600, "{spent}");
    }

    #[test]
    fn a_newer_period_starts_from_zero() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 500, hard(1000)), JULY_15);
        s.settle(&settle("r1", 900), JULY_15 + 1);
        s.reserve(&reserve("r2", 50, hard(1000)), JULY_15 + 2);
        s.take_writes();
        let august = Period::month_containing(july().end_ms);
        let mut r = reserve("r3", 900, hard(1000));
        r.period = august.clone();
        let a = admitted(s.reserve(&r, august.start_ms + 10));
        assert_eq!((a.spent_micro_usd, a.reserved_micro_usd, a.period_end_ms), (0, 900, august.end_ms));
        let w = s.take_writes();
        assert_eq!(w.deletes, vec!["r:r1".to_string(), "r:r2".to_string()]);
        assert!(w.puts[0].1.contains("2026-08"), "{w:?}");
        // The old period's reservation settles late: nothing held under it any more.
        assert_eq!(s.settle(&settle("r2", 40), august.start_ms + 20), BudgetResponse::Unknown { spent_micro_usd: 0 });
        // A straggler stamped with the old period counts against the current one.
        let straggler = refused(s.reserve(&reserve("r4", 200, hard(1000)), august.start_ms + 30));
        assert_eq!(straggler.period_end_ms, august.end_ms);
    }

    #[test]
    fn everything_is_deleted_days_after_the_period() {
        let mut s = BudgetState::default();
        s.reserve(&reserve("r1", 5, hard(1000)), JULY_15);
        s.settle(&settle("r1", 5), JULY_15 + 1);
        s.reserve(&reserve("r2", 5, hard(1000)), JULY_15 + 2);
        s.take_writes();
        let cleanup = july().end_ms + KEEP_AFTER_PERIOD_MS;
        s.tick(cleanup - 1);
        assert!(!s.is_empty());
        s.tick(cleanup);
        assert!(s.is_empty());
        assert_eq!(s.next_deadline(), None);
        let w = s.take_writes();
        assert!(w.delete_all && w.puts.is_empty() && w.deletes.is_empty(), "{w:?}");
    }

    #[test]
    fn alarms_are_batched() {
        let mut s = BudgetState::default();
        assert_eq!(s.alarm_time(JULY_15), None);
        s.reserve(&reserve("r1", 5, hard(1000)), JULY_15);
        assert_eq!(s.alarm_time(JULY_15), Some(JULY_15 + 10 * MIN));
        s.settle(&settle("r1", 5), JULY_15);
        assert_eq!(s.next_deadline(), Some(JULY_15 + SETTLED_KEEP_MS));
        assert_eq!(s.alarm_time(JULY_15 + SETTLED_KEEP_MS - 1), Some(JULY_15 + SETTLED_KEEP_MS - 1 + MIN_ALARM_GAP_MS));
    }

    #[test]
    fn settle_writes_spend_and_tombstone_together_first() {
        let mut s = BudgetState::default();
        let mut short = reserve("a-short", 7, hard(1000));
        short.ttl_ms = 1;
        s.reserve(&short, JULY_15);
        s.reserve(&reserve("z-main", 100, hard(1000)), JULY_15);
        let w = s.take_writes();
        assert_eq!(w.puts.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), vec!["meta", "r:z-main", "r:a-short"]);
        // The settle also expires a-short; its own two keys still lead the one atomic call.
        s.settle(&settle("z-main", 90), JULY_15 + 5);
        let w = s.take_writes();
        assert_eq!(w.puts.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), vec!["meta", "r:z-main", "r:a-short"]);
        assert_eq!(
            w.puts[0].1,
            r#"{"period":{"key":"2026-07","start_ms":1782864000000,"end_ms":1785542400000},"spent_micro_usd":90}"#
        );
        assert_eq!(w.puts[1].1, format!(r#"{{"state":"settled","forget_at_ms":{}}}"#, JULY_15 + 5 + SETTLED_KEEP_MS));
        assert!(w.puts[2].1.starts_with(r#"{"state":"expired","amount":7,"#));
    }

    #[test]
    fn state_survives_a_reload_from_storage() {
        let mut s = BudgetState::default();
        let mut storage: BTreeMap<String, String> = BTreeMap::new();
        let mut apply = |s: &mut BudgetState| {
            let w = s.take_writes();
            if w.delete_all {
                storage.clear();
            }
            storage.extend(w.puts);
            w.deletes.iter().for_each(|k| {
                storage.remove(k);
            });
            storage.clone()
        };
        s.reserve(&reserve("r1", 300, hard(1000)), JULY_15);
        s.reserve(&reserve("r2", 200, hard(1000)), JULY_15);
        s.settle(&settle("r1", 250), JULY_15 + 1);
        let mut short = reserve("r3", 40, hard(1000));
        short.ttl_ms = 2;
        s.reserve(&short, JULY_15 + 1);
        s.tick(JULY_15 + 3);
        let stored = apply(&mut s);
        let (mut restored, problems) = BudgetState::from_storage(stored);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(restored.status(), s.status());
        assert_eq!((restored.status().spent_micro_usd, restored.status().reserved_micro_usd), (250, 200));
        assert_eq!(restored.settle(&settle("r1", 250), JULY_15 + 4), BudgetResponse::Unknown { spent_micro_usd: 250 });
        assert_eq!(
            restored.settle(&settle("r3", 30), JULY_15 + 4),
            BudgetResponse::Settled { spent_micro_usd: 280, late: true }
        );
        let (_, problems) = BudgetState::from_storage([
            ("meta".to_string(), "{".to_string()),
            ("r:x".to_string(), r#"{"state":"weird"}"#.to_string()),
            ("other".to_string(), "1".to_string()),
        ]);
        assert_eq!(problems.len(), 3);
    }

    #[test]
    fn status_reports_and_ticks() {
        let mut s = BudgetState::default();
        assert_eq!(
            s.handle(&BudgetRequest::Status, JULY_15),
            BudgetResponse::Status(BudgetStatus {
                period: None,
                spent_micro_usd: 0,
                reserved_micro_usd: 0,
                held: 0,
                expired: 0
            })
        );
        s.handle(&BudgetRequest::Reserve(reserve("r1", 10, hard(100))), JULY_15);
        s.handle(&BudgetRequest::Settle(settle("r1", 3)), JULY_15);
        let BudgetResponse::Status(st) = s.handle(&BudgetRequest::Status, JULY_15) else { panic!() };
        assert_eq!((st.period, st.spent_micro_usd), (Some(july()), 3));
    }

    #[test]
    fn wire_format() {
        let text = r#"{"op":"reserve","id":"req_1","period":{"key":"2026-07","start_ms":1,"end_ms":2},"amount_micro_usd":27,"limits":{"soft_micro_usd":50,"hard_micro_usd":600},"ttl_ms":60000}"#;
        let req = decode_request(text).unwrap();
        assert_eq!(encode_request(&req), text);
        let BudgetRequest::Reserve(r) = &req else { panic!() };
        assert_eq!((r.limits.soft_micro_usd, r.limits.hard_micro_usd), (Some(50), Some(600)));
        let settle = BudgetRequest::Settle(settle("req_1", 24));
        assert_eq!(encode_request(&settle), r#"{"op":"settle","id":"req_1","actual_micro_usd":24}"#);
        let charge = decode_request(r#"{"op":"settle","id":"req_1","actual_micro_usd":24,"unreserved":true}"#).unwrap();
        assert!(matches!(charge, BudgetRequest::Settle(Settle { unreserved: true, .. })));
        assert_eq!(decode_request(r#"{"op":"status"}"#).unwrap(), BudgetRequest::Status);
        assert!(decode_request(r#"{"op":"spend"}"#).is_err());
        let only_hard: BudgetLimits = serde_json::from_str(r#"{"hard_micro_usd":5}"#).unwrap();
        assert_eq!(only_hard, hard(5));
        assert_eq!(serde_json::to_string(&only_hard).unwrap(), r#"{"hard_micro_usd":5}"#);

        let answers = [
            BudgetResponse::Admitted(BudgetAdmission {
                spent_micro_usd: 1,
                reserved_micro_usd: 2,
                soft_exceeded: true,
                period_end_ms: 3,
            }),
            BudgetResponse::Refused(BudgetRefusal {
                spent_micro_usd: 1,
                reserved_micro_usd: 2,
                hard_micro_usd: 3,
                amount_micro_usd: 4,
                exhausted: false,
                retry_after_ms: 1000,
                period_end_ms: 5,
            }),
            BudgetResponse::Settled { spent_micro_usd: 9, late: false },
            BudgetResponse::Unknown { spent_micro_usd: 9 },
        ];
        for a in answers {
            assert_eq!(decode_response(&encode_response(&a)).unwrap(), a);
        }
        assert_eq!(
            encode_response(&BudgetResponse::Unknown { spent_micro_usd: 9 }),
            r#"{"outcome":"unknown","spent_micro_usd":9}"#
        );
        assert!(encode_response(&BudgetResponse::Settled { spent_micro_usd: 1, late: true })
            .starts_with(r#"{"outcome":"settled""#));
        let err = encode_response(&BudgetResponse::Error { message: "bad".into() });
        assert_eq!(decode_response(&err), Err("budget object error: bad".to_string()));
    }
}
