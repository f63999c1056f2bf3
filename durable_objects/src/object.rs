//! What every Durable Object class of this crate shares: the clock, the JSON answer, and the
//! one alarm an object keeps armed. Each class (`shell::DeploymentLimiter`,
//! `budget::TenantBudget`, `idempotency::IdempotencyStore`) adds only its own state machine,
//! loading and persistence.

use std::cell::Cell;

use serde::Serialize;
use worker::{console_error, Response, Result, Storage};

/// The runtime's clock, in milliseconds since the Unix epoch (the state machines take it as input).
pub fn now_ms() -> u64 {
    // `Date.now()` itself: worker's `Date::now()` builds a JS Date object to read it.
    worker::js_sys::Date::now() as u64
}

/// 64 random bits from the runtime (ids that must differ between instances).
pub fn random_u64() -> u64 {
    let draw = || (worker::js_sys::Math::random() * 4_294_967_296.0) as u64;
    (draw() << 32) | draw()
}

/// A JSON answer with `status`.
pub fn respond<T: Serialize>(body: &T, status: u16) -> Result<Response> {
    Ok(Response::from_json(body)?.with_status(status))
}

/// When this object's alarm is set to fire, so it is set again only when the time changes.
#[derive(Debug, Default)]
pub struct Alarm {
    at_ms: Cell<Option<u64>>,
}

/// Which armed alarms a new time replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rearm {
    /// Only a later one: the alarm fires no later than every time asked for.
    IfEarlier,
    /// Any other: the alarm fires exactly at the last time asked for.
    IfDifferent,
}

impl Alarm {
    /// The alarm fired, or storage (and with it the alarm) was deleted.
    pub fn cleared(&self) {
        self.at_ms.set(None);
    }

    /// Sets the alarm to fire at `at_ms` unless the armed one already suits; `object` names the
    /// class in the log line if the runtime refuses.
    pub async fn arm(&self, storage: &Storage, now: u64, at_ms: u64, rearm: Rearm, object: &str) {
        let suits = match (self.at_ms.get(), rearm) {
            (Some(armed), Rearm::IfEarlier) => armed <= at_ms,
            (Some(armed), Rearm::IfDifferent) => armed == at_ms,
            (None, _) => false,
        };
        if suits {
            return;
        }
        match storage.set_alarm(at_ms.saturating_sub(now).max(1) as i64).await {
            Ok(()) => self.at_ms.set(Some(at_ms)),
            Err(e) => console_error!("{object}: cannot set alarm: {e}"),
        }
    }
}
