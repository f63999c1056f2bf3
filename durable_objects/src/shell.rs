//! The `DeploymentLimiter` Durable Object: one per deployment, a thin shell over
//! [`LimiterState`] that supplies the clock and randomness and persists snapshots.
//!
//! Persistence is write-behind. Every step marks the state dirty and makes sure an alarm fires
//! within [`WRITE_BEHIND_MS`]; the alarm writes the snapshot, expires reservations and re-arms
//! while any are outstanding. Breaker transitions, the probe slot and pauses are written before
//! answering.
//! What a crash can cost: the bucket deductions, refunds, reservations and lease grants of the
//! last ~1 s. After a restart the buckets look that much fuller (a brief over-admission, which
//! the vendor's own limits and Retry-After then correct), settles of the forgotten reservations
//! arrive as `unknown` (outcome and signals applied, usage not reconciled), and returns of the
//! forgotten leases are charged but never refunded. Breaker state is never lost unless the
//! immediate write itself fails.

use std::cell::{Cell, RefCell};

use worker::wasm_bindgen; // the #[durable_object] expansion names `wasm_bindgen` unqualified
use worker::{
    console_error, console_warn, durable_object, DurableObject, Env, Method, Request, Response, Result, State,
};

use crate::deployment::LimiterState;
use crate::object::{now_ms, respond, Alarm, Rearm};
use crate::protocol::{decode_request, LimiterRequest, LimiterResponse};
use crate::rng::XorShift;

/// How long a change may sit in memory before it is written.
pub const WRITE_BEHIND_MS: u64 = 1_000;

/// Above this the snapshot drops its reservations (Durable Object values are limited to 128 KiB).
const MAX_SNAPSHOT_BYTES: usize = 120 * 1024;

const STORAGE_KEY: &str = "limiter";

#[durable_object(alarm)]
pub struct DeploymentLimiter {
    state: State,
    core: RefCell<Option<LimiterState>>,
    dirty: Cell<bool>,
    alarm: Alarm,
    rng: Cell<XorShift>,
}

impl DurableObject for DeploymentLimiter {
    fn new(state: State, _env: Env) -> Self {
        DeploymentLimiter {
            state,
            core: RefCell::new(None),
            dirty: Cell::new(false),
            alarm: Alarm::default(),
            rng: Cell::new(XorShift::new(now_ms())),
        }
    }

    /// `POST` a [`LimiterRequest`]; `GET` answers the status.
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let request = match req.method() {
            Method::Get => LimiterRequest::Status,
            Method::Post => match decode_request(&req.text().await?) {
                Ok(r) => r,
                Err(e) => return respond(&LimiterResponse::Error { message: e.to_string() }, 400),
            },
            _ => return Response::error("use GET for status or POST a limiter request", 405),
        };
        self.load().await?;
        let now = now_ms();
        let rand = self.next_rand();
        let (response, critical) = {
            let mut guard = self.core.borrow_mut();
            let core = guard.get_or_insert_with(LimiterState::default);
            let before = core.critical_key();
            let response = core.handle(&request, now, rand);
            (response, core.critical_key() != before)
        };
        self.dirty.set(true);
        if critical {
            if let Err(e) = self.persist().await {
                console_error!("limiter: immediate write failed: {e}");
            }
        }
        self.arm_alarm(now, now + WRITE_BEHIND_MS).await;
        respond(&response, 200)
    }

    async fn alarm(&self) -> Result<Response> {
        self.alarm.cleared();
        self.load().await?;
        let now = now_ms();
        let next = {
            let mut guard = self.core.borrow_mut();
            let core = guard.get_or_insert_with(LimiterState::default);
            core.expire(now);
            core.next_expiry()
        };
        self.dirty.set(true);
        let written = self.persist().await;
        if let Err(e) = &written {
            console_error!("limiter: snapshot write failed: {e}");
        }
        let retry = written.is_err().then_some(now + WRITE_BEHIND_MS);
        if let Some(at) = [next, retry].into_iter().flatten().min() {
            self.arm_alarm(now, at.max(now + 1)).await;
        }
        Response::ok("")
    }
}

impl DeploymentLimiter {
    /// Reads the snapshot once per object lifetime; an unreadable one starts afresh.
    async fn load(&self) -> Result<()> {
        if self.core.borrow().is_some() {
            return Ok(());
        }
        let stored: Option<String> = self.state.storage().get(STORAGE_KEY).await?;
        let loaded = match stored.map(|text| LimiterState::from_snapshot(&text)) {
            Some(Ok(state)) => state,
            Some(Err(e)) => {
                console_warn!("limiter: discarding unreadable snapshot: {e}");
                LimiterState::default()
            }
            None => LimiterState::default(),
        };
        let mut core = self.core.borrow_mut();
        if core.is_none() {
            *core = Some(loaded);
        }
        Ok(())
    }

    async fn persist(&self) -> Result<()> {
        if !self.dirty.get() {
            return Ok(());
        }
        let Some(text) = self.core.borrow().as_ref().map(snapshot_text) else {
            return Ok(());
        };
        self.dirty.set(false);
        let written = self.state.storage().put(STORAGE_KEY, text).await;
        if written.is_err() {
            self.dirty.set(true);
        }
        written
    }

    /// Makes sure an alarm fires no later than `at_ms`.
    async fn arm_alarm(&self, now: u64, at_ms: u64) {
        self.alarm.arm(&self.state.storage(), now, at_ms, Rearm::IfEarlier, "limiter").await;
    }

    fn next_rand(&self) -> u64 {
        let mut rng = self.rng.get();
        let value = rng.next_u64();
        self.rng.set(rng);
        value
    }
}

fn snapshot_text(core: &LimiterState) -> String {
    let full = core.to_snapshot();
    if full.len() <= MAX_SNAPSHOT_BYTES {
        return full;
    }
    console_warn!("limiter: {} reservations exceed the snapshot budget; persisting without them", core.in_flight());
    core.to_snapshot_without_reservations()
}
