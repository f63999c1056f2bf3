//! The `LocationRelay` Durable Object: one per limiter object and location (named by
//! [`crate::protocol::relay_name`]), a thin shell over [`Relay`] that supplies the clock, calls the limiter
//! object, and keeps an alarm for parents at their end and outcomes due there.
//!
//! Nothing is persisted: a relay that restarts has lost its parents, which the object then
//! counts as used until they expire (never an over-admission), and the returns of its subs
//! are charged without refund.

use std::cell::RefCell;
use std::time::Duration;

use worker::wasm_bindgen; // the #[durable_object] expansion names `wasm_bindgen` unqualified
use worker::{console_error, durable_object, DurableObject, Env, Method, Request, Response, Result, State};

use super::{Relay, SubAnswer, UNHEALTHY_QUIET_MS, UPSTREAM_TIMEOUT_MS};
use crate::breaker::BreakerState;
use crate::client::{self, within, OBJECT_HEADER};
use crate::object::{now_ms, respond, Alarm, Rearm};
use crate::protocol::{
    decode_request, LeaseDecision, LeaseRequest, LimiterRequest, LimiterResponse, RejectCode, ReportAck, Tally,
};

/// A waiting ask looks at the relay after this long, then twice as long each time up to 16 ms.
const POLL_FIRST_MS: u64 = 1;
const POLL_MAX_MS: u64 = 16;

#[durable_object(alarm)]
pub struct LocationRelay {
    state: State,
    env: Env,
    relay: RefCell<Option<Relay>>,
    object: RefCell<Option<String>>,
    /// A renewal decided while answering an isolate: the alarm sends it, so the answer does not
    /// wait for the object.
    renewal: RefCell<Option<LeaseRequest>>,
    alarm: Alarm,
}

impl DurableObject for LocationRelay {
    fn new(state: State, env: Env) -> Self {
        LocationRelay {
            state,
            env,
            relay: RefCell::new(None),
            object: RefCell::new(None),
            renewal: RefCell::new(None),
            alarm: Alarm::default(),
        }
    }

    /// `POST` a lease or a report (with [`OBJECT_HEADER`]); `GET` answers the relay's status.
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        if req.method() == Method::Get {
            let status = self.with(|r| r.status());
            return respond(&status, 200);
        }
        if req.method() != Method::Post {
            return Response::error("use GET for status or POST a lease or report", 405);
        }
        let Some(object) = req.headers().get(OBJECT_HEADER)?.filter(|o| !o.is_empty()) else {
            let message = format!("missing {OBJECT_HEADER}");
            return respond(&LimiterResponse::Error { message }, 400);
        };
        self.object.borrow_mut().get_or_insert(object);
        let request = match decode_request(&req.text().await?) {
            Ok(r) => r,
            Err(e) => return respond(&LimiterResponse::Error { message: e.to_string() }, 400),
        };
        let response = match request {
            LimiterRequest::Lease(ask) => LimiterResponse::Lease(self.lease(ask).await),
            LimiterRequest::Report(tally) => {
                let now = now_ms();
                let breaker = self.with(|r| {
                    r.report(&tally, now);
                    if r.is_quiet(now) {
                        BreakerState::Open
                    } else {
                        BreakerState::Closed
                    }
                });
                LimiterResponse::Report(ReportAck { breaker })
            }
            _ => {
                let message = "a relay answers lease and report only".to_string();
                return respond(&LimiterResponse::Error { message }, 400);
            }
        };
        self.arm().await;
        respond(&response, 200)
    }

    async fn alarm(&self) -> Result<Response> {
        self.alarm.cleared();
        let renewal = self.renewal.borrow_mut().take();
        if let Some(up) = renewal {
            self.ask_object(up).await;
        }
        let due = self.with(|r| r.due_report(now_ms()));
        if let Some(tally) = due {
            self.report(tally).await;
        }
        self.arm().await;
        Response::ok("")
    }
}

impl LocationRelay {
    fn with<T>(&self, f: impl FnOnce(&mut Relay) -> T) -> T {
        let mut guard = self.relay.borrow_mut();
        let relay = guard.get_or_insert_with(|| Relay::new(&format!("{:016x}", crate::object::random_u64())));
        f(relay)
    }

    /// An isolate's ask: answered at once, or after the relay's own ask to the object (made by
    /// this request or another one in flight), at most [`UPSTREAM_TIMEOUT_MS`] later.
    async fn lease(&self, ask: LeaseRequest) -> LeaseDecision {
        let deadline = now_ms() + UPSTREAM_TIMEOUT_MS;
        let (mut answer, mut upstream) = self.with(|r| r.ask(&ask, now_ms()));
        loop {
            match answer {
                SubAnswer::Now(decision) => {
                    if let Some(up) = upstream.take() {
                        // Answered already: the renewal goes from the alarm, off this answer's path.
                        *self.renewal.borrow_mut() = Some(up);
                        let now = now_ms();
                        self.alarm.arm(&self.state.storage(), now, now + 1, Rearm::IfEarlier, "relay").await;
                    }
                    return decision;
                }
                SubAnswer::Wait => {
                    // This request's own ask to the object: its answer is the change to wait for.
                    let asked = upstream.is_some();
                    if let Some(up) = upstream.take() {
                        self.ask_object(up).await;
                    }
                    if now_ms() >= deadline {
                        return self.with(|r| r.give_up(&ask, now_ms()));
                    }
                    if !asked {
                        self.wait_for_change(deadline).await;
                    }
                    (answer, upstream) = self.with(|r| r.ask_again(&ask, now_ms()));
                }
            }
        }
    }

    /// Waits until the relay changes (an answer from the object) or `until_ms`.
    async fn wait_for_change(&self, until_ms: u64) {
        let seen = self.with(|r| r.changes());
        let mut step = POLL_FIRST_MS;
        while now_ms() < until_ms && self.with(|r| r.changes()) == seen {
            worker::Delay::from(Duration::from_millis(step.min(until_ms - now_ms()))).await;
            step = (step * 2).min(POLL_MAX_MS);
        }
    }

    async fn ask_object(&self, up: LeaseRequest) {
        let (id, tally) = (up.id.clone(), up.tally.clone());
        let answer = match self.limiter() {
            Ok(stub) => within(UPSTREAM_TIMEOUT_MS, client::lease(&stub, None, up)).await,
            Err(e) => Err(e),
        };
        let now = now_ms();
        match answer {
            Ok(LeaseDecision::Granted(grant)) => self.with(|r| r.upstream_granted(&id, &grant, now)),
            Ok(LeaseDecision::Refused { code, retry_after_ms }) => {
                self.with(|r| r.upstream_refused(&id, code, retry_after_ms, now))
            }
            Err(e) => {
                self.log_failed("relay_lease_failed", &e.to_string());
                self.with(|r| r.upstream_lost(Some(&id), tally, now));
            }
        }
    }

    async fn report(&self, tally: Tally) {
        let answer = match self.limiter() {
            Ok(stub) => within(UPSTREAM_TIMEOUT_MS, client::report(&stub, None, tally.clone())).await,
            Err(e) => Err(e),
        };
        let now = now_ms();
        match answer {
            Ok(ack) if ack.breaker != BreakerState::Closed => {
                self.with(|r| r.unhealthy(RejectCode::BreakerOpen, UNHEALTHY_QUIET_MS, now))
            }
            Ok(_) => {}
            Err(e) => {
                self.log_failed("relay_report_failed", &e.to_string());
                self.with(|r| r.upstream_lost(None, tally, now));
            }
        }
    }

    fn limiter(&self) -> Result<worker::Stub> {
        let object = self.object.borrow().clone().unwrap_or_default();
        client::stub_named(&self.env.durable_object(client::LIMITER_BINDING)?, &object)
    }

    /// Makes sure the alarm fires when the relay next has something to do.
    async fn arm(&self) {
        let now = now_ms();
        if let Some(at) = self.with(|r| r.next_due_ms()) {
            self.alarm.arm(&self.state.storage(), now, at.max(now + 1), Rearm::IfEarlier, "relay").await;
        }
    }

    fn log_failed(&self, event: &str, error: &str) {
        let object = self.object.borrow().clone().unwrap_or_default();
        console_error!("{}", serde_json::json!({"event": event, "limiter": object, "error": error}));
    }
}
