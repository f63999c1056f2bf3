//! Idempotency keys: a client retry under the same `Idempotency-Key` gets the first request's
//! stored response instead of a second upstream call and a second charge.
//!
//! One [`IdempotencyStore`] object per tenant + key serializes `Begin`, so exactly one request
//! proceeds; KV cannot do that (it is last-write-wins and eventually consistent). The messages and
//! the state machine here are shared by the worker and the object; the state machine is pure
//! (time is an input), the shell at the bottom supplies the clock and persists.
//!
//! Per key: nothing → `Begin` → in flight → `Complete` → done (replayed until the window ends) or
//! `Abandon` → nothing. An in-flight entry whose owner never came back (a crashed isolate) goes
//! stale after `in_flight_ms`, and the next `Begin` proceeds.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};
use worker::js_sys::{Object, Reflect};
use worker::wasm_bindgen; // the #[durable_object] expansion names `wasm_bindgen` unqualified
use worker::wasm_bindgen::JsValue;
use worker::{
    console_error, console_warn, durable_object, DurableObject, Env, Method, Request, RequestInit, Response, Result,
    State, Stub,
};

use crate::object::{now_ms, respond, Alarm, Rearm};
use crate::protocol::ProtocolError;

/// Durable Objects ignore the host; the path is kept for logs.
pub const OBJECT_URL: &str = "https://idempotency.internal/v1";

/// How long a finished request's response is replayed.
pub const DEFAULT_WINDOW_MS: u64 = 24 * 60 * 60 * 1000;

/// After this an unfinished first request no longer blocks its key; set it above the request deadline.
pub const DEFAULT_IN_FLIGHT_MS: u64 = 5 * 60 * 1000;

/// What a client told "still in flight" is asked to wait before trying again.
pub const IN_FLIGHT_RETRY_MS: u64 = 1_000;

/// The response as first sent: status, the headers worth replaying, and the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum IdempotencyRequest {
    Begin(Begin),
    /// The owner's response, to be replayed.
    Complete {
        owner: String,
        response: StoredResponse,
    },
    /// The owner failed in a way a retry may fix: free the key.
    Abandon {
        owner: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Begin {
    /// Hash of the canonical request body: a different body under the same key is refused.
    pub body_hash: String,
    /// The request id of the caller; `Complete` and `Abandon` must name it.
    pub owner: String,
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
    #[serde(default = "default_in_flight_ms")]
    pub in_flight_ms: u64,
}

fn default_window_ms() -> u64 {
    DEFAULT_WINDOW_MS
}

fn default_in_flight_ms() -> u64 {
    DEFAULT_IN_FLIGHT_MS
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum IdempotencyResponse {
    /// The caller owns the key: run the request, then `Complete` or `Abandon`.
    Proceed,
    /// The first request is still running (409).
    InFlight {
        retry_after_ms: u64,
    },
    /// The first request finished: answer with its response.
    Replay {
        response: StoredResponse,
        completed_at_ms: u64,
    },
    /// The key was used with a different body (422).
    Mismatch,
    Stored,
    Released,
    /// `Complete`/`Abandon` from a caller that no longer owns the key (it went stale); ignored.
    Stale,
    Error {
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Entry {
    InFlight { body_hash: String, owner: String, stale_at_ms: u64, window_ms: u64 },
    Done { body_hash: String, owner: String, response: StoredResponse, completed_at_ms: u64, expires_at_ms: u64 },
}

impl Entry {
    fn body_hash(&self) -> &str {
        match self {
            Entry::InFlight { body_hash, .. } | Entry::Done { body_hash, .. } => body_hash,
        }
    }

    fn deadline(&self) -> u64 {
        match *self {
            Entry::InFlight { stale_at_ms, .. } => stale_at_ms,
            Entry::Done { expires_at_ms, .. } => expires_at_ms,
        }
    }
}

/// The state of one tenant + key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    entry: Option<Entry>,
    #[serde(skip)]
    changed: bool,
}

impl IdempotencyState {
    pub fn handle(&mut self, req: &IdempotencyRequest, now_ms: u64) -> IdempotencyResponse {
        match req {
            IdempotencyRequest::Begin(b) => self.begin(b, now_ms),
            IdempotencyRequest::Complete { owner, response } => self.complete(owner, response, now_ms),
            IdempotencyRequest::Abandon { owner } => self.abandon(owner, now_ms),
        }
    }

    pub fn begin(&mut self, b: &Begin, now_ms: u64) -> IdempotencyResponse {
        self.expire(now_ms);
        match &self.entry {
            Some(e) if e.body_hash() != b.body_hash => IdempotencyResponse::Mismatch,
            // A repeated Begin from the owner (its first answer was lost) still owns the key.
            Some(Entry::InFlight { owner, .. }) if *owner == b.owner => IdempotencyResponse::Proceed,
            Some(Entry::InFlight { stale_at_ms, .. }) => {
                IdempotencyResponse::InFlight { retry_after_ms: IN_FLIGHT_RETRY_MS.min(stale_at_ms - now_ms) }
            }
            Some(Entry::Done { response, completed_at_ms, .. }) => {
                IdempotencyResponse::Replay { response: response.clone(), completed_at_ms: *completed_at_ms }
            }
            None => {
                self.entry = Some(Entry::InFlight {
                    body_hash: b.body_hash.clone(),
                    owner: b.owner.clone(),
                    stale_at_ms: now_ms.saturating_add(b.in_flight_ms.max(1)),
                    window_ms: b.window_ms.max(1),
                });
                self.changed = true;
                IdempotencyResponse::Proceed
            }
        }
    }

    pub fn complete(&mut self, owner: &str, response: &StoredResponse, now_ms: u64) -> IdempotencyResponse {
        self.expire(now_ms);
        match self.entry.take() {
            Some(Entry::InFlight { body_hash, owner: o, window_ms, .. }) if o == owner => {
                self.entry = Some(Entry::Done {
                    body_hash,
                    owner: o,
                    response: response.clone(),
                    completed_at_ms: now_ms,
                    expires_at_ms: now_ms.saturating_add(window_ms),
                });
                self.changed = true;
                IdempotencyResponse::Stored
            }
            other => {
                let repeated = matches!(&other, Some(Entry::Done { owner: o, .. }) if o == owner);
                self.entry = other;
                if repeated {
                    IdempotencyResponse::Stored
                } else {
                    IdempotencyResponse::Stale
                }
            }
        }
    }

    pub fn abandon(&mut self, owner: &str, now_ms: u64) -> IdempotencyResponse {
        self.expire(now_ms);
        match &self.entry {
            Some(Entry::InFlight { owner: o, .. }) if o == owner => {
                self.entry = None;
                self.changed = true;
                IdempotencyResponse::Released
            }
            _ => IdempotencyResponse::Stale,
        }
    }

    /// Forgets a response past its window or an in-flight entry gone stale.
    pub fn expire(&mut self, now_ms: u64) {
        if self.entry.as_ref().is_some_and(|e| now_ms >= e.deadline()) {
            self.entry = None;
            self.changed = true;
        }
    }

    /// When [`Self::expire`] next has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        self.entry.as_ref().map(Entry::deadline)
    }

    pub fn is_empty(&self) -> bool {
        self.entry.is_none()
    }

    /// Whether anything changed since the last call: what needs writing.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    pub fn to_snapshot(&self) -> String {
        serde_json::to_string(self).expect("idempotency state always serializes")
    }

    pub fn from_snapshot(text: &str) -> std::result::Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

pub fn encode_request(req: &IdempotencyRequest) -> String {
    serde_json::to_string(req).expect("idempotency requests always serialize")
}

pub fn decode_request(body: &str) -> std::result::Result<IdempotencyRequest, ProtocolError> {
    serde_json::from_str(body).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

pub fn encode_response(resp: &IdempotencyResponse) -> String {
    serde_json::to_string(resp).expect("idempotency responses always serialize")
}

pub fn decode_response(body: &str) -> std::result::Result<IdempotencyResponse, ProtocolError> {
    match serde_json::from_str(body).map_err(|e| ProtocolError::Malformed(e.to_string()))? {
        IdempotencyResponse::Error { message } => Err(ProtocolError::Remote(message)),
        resp => Ok(resp),
    }
}

/// One round trip to a key's object (the worker names the stub).
pub async fn call(stub: &Stub, req: &IdempotencyRequest) -> Result<IdempotencyResponse> {
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(JsValue::from_str(&encode_request(req))));
    let request = Request::new_with_init(OBJECT_URL, &init)?;
    let body = stub.fetch_with_request(request).await?.text().await?;
    decode_response(&body).map_err(|e| worker::Error::RustError(e.to_string()))
}

/// Storage values are limited (128 KiB on KV-backed objects); snapshots are written in pieces.
const CHUNK_BYTES: usize = 120 * 1024;

/// Storage key of the piece count; piece `k` is under `c{k}`.
const COUNT_KEY: &str = "n";

/// `text` in pieces of at most `max` bytes, cut on character boundaries.
fn chunks(text: &str, max: usize) -> Vec<&str> {
    let mut pieces = Vec::with_capacity(text.len() / max + 1);
    let mut rest = text;
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut);
        pieces.push(piece);
        rest = tail;
    }
    pieces.push(rest);
    pieces
}

/// One object per tenant + idempotency key, holding that key's [`IdempotencyState`].
///
/// Every change is written before the answer (a lost in-flight mark would let a duplicate run);
/// an alarm at the entry's deadline deletes everything, so idle keys leave nothing behind.
#[durable_object(alarm)]
pub struct IdempotencyStore {
    state: State,
    core: RefCell<Option<IdempotencyState>>,
    alarm: Alarm,
}

impl DurableObject for IdempotencyStore {
    fn new(state: State, _env: Env) -> Self {
        IdempotencyStore { state, core: RefCell::new(None), alarm: Alarm::default() }
    }

    /// `POST` an [`IdempotencyRequest`]; answers an [`IdempotencyResponse`].
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        if req.method() != Method::Post {
            return Response::error("POST an idempotency request", 405);
        }
        let request = match decode_request(&req.text().await?) {
            Ok(r) => r,
            Err(e) => return respond(&IdempotencyResponse::Error { message: e.to_string() }, 400),
        };
        self.load().await?;
        let now = now_ms();
        let (response, changed) = {
            let mut guard = self.core.borrow_mut();
            let core = guard.get_or_insert_with(IdempotencyState::default);
            let response = core.handle(&request, now);
            (response, core.take_changed())
        };
        if changed {
            if let Err(e) = self.persist().await {
                console_error!("idempotency: write failed: {e}");
            }
        }
        self.arm_alarm(now).await;
        respond(&response, 200)
    }

    async fn alarm(&self) -> Result<Response> {
        self.alarm.cleared();
        self.load().await?;
        let now = now_ms();
        let changed = {
            let mut guard = self.core.borrow_mut();
            let core = guard.get_or_insert_with(IdempotencyState::default);
            core.expire(now);
            core.take_changed()
        };
        if changed {
            self.persist().await?;
        }
        self.arm_alarm(now).await;
        Response::ok("")
    }
}

impl IdempotencyStore {
    /// Reads the snapshot once per object lifetime; an unreadable one starts afresh.
    async fn load(&self) -> Result<()> {
        if self.core.borrow().is_some() {
            return Ok(());
        }
        let storage = self.state.storage();
        let mut text = String::new();
        let count: Option<u32> = storage.get(COUNT_KEY).await?;
        for k in 0..count.unwrap_or(0) {
            let piece: Option<String> = storage.get(&format!("c{k}")).await?;
            text.push_str(&piece.unwrap_or_default());
        }
        let loaded = match count.map(|_| IdempotencyState::from_snapshot(&text)) {
            Some(Ok(state)) => state,
            Some(Err(e)) => {
                console_warn!("idempotency: discarding unreadable snapshot: {e}");
                IdempotencyState::default()
            }
            None => IdempotencyState::default(),
        };
        let mut core = self.core.borrow_mut();
        if core.is_none() {
            *core = Some(loaded);
        }
        Ok(())
    }

    async fn persist(&self) -> Result<()> {
        let text = match self.core.borrow().as_ref() {
            Some(core) if !core.is_empty() => core.to_snapshot(),
            _ => String::new(),
        };
        let storage = self.state.storage();
        if text.is_empty() {
            return storage.delete_all().await;
        }
        let pieces = chunks(&text, CHUNK_BYTES);
        let values = Object::new();
        Reflect::set(&values, &COUNT_KEY.into(), &JsValue::from(pieces.len() as u32))?;
        for (k, piece) in pieces.iter().enumerate() {
            Reflect::set(&values, &format!("c{k}").into(), &JsValue::from_str(piece))?;
        }
        storage.put_multiple_raw(values).await
    }

    /// Keeps one alarm at the entry's deadline, or none when there is no entry.
    async fn arm_alarm(&self, now: u64) {
        let deadline = self.core.borrow().as_ref().and_then(IdempotencyState::next_deadline);
        let Some(at) = deadline else { return };
        self.alarm.arm(&self.state.storage(), now, at, Rearm::IfDifferent, "idempotency").await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn begin(hash: &str, owner: &str) -> Begin {
        Begin {
            body_hash: hash.into(),
            owner: owner.into(),
            window_ms: DEFAULT_WINDOW_MS,
            in_flight_ms: DEFAULT_IN_FLIGHT_MS,
        }
    }

    fn ok(body: &str) -> StoredResponse {
        StoredResponse {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    fn replay(body: &str, completed_at_ms: u64) -> IdempotencyResponse {
        IdempotencyResponse::Replay { response: ok(body), completed_at_ms }
    }

    #[test]
    fn first_proceeds_then_in_flight_then_replay() {
        let mut s = IdempotencyState::default();
        assert_eq!(s.begin(&begin("h", "r1"), 0), IdempotencyResponse::Proceed);
        assert!(s.take_changed() && !s.take_changed());
        assert_eq!(
            s.begin(&begin("h", "r2"), 10),
            IdempotencyResponse::InFlight { retry_after_ms: IN_FLIGHT_RETRY_MS }
        );
        assert!(!s.take_changed());
        assert_eq!(s.complete("r1", &ok("{\"a\":1}"), 500), IdempotencyResponse::Stored);
        assert!(s.take_changed());
        assert_eq!(s.begin(&begin("h", "r3"), 600), replay("{\"a\":1}", 500));
        assert_eq!(s.begin(&begin("h", "r2"), 700), replay("{\"a\":1}", 500));
    }

    #[test]
    fn five_concurrent_begins_let_exactly_one_through() {
        let mut s = IdempotencyState::default();
        let outcomes: Vec<_> = (0..5).map(|k| s.begin(&begin("h", &format!("r{k}")), k)).collect();
        let proceeded = outcomes.iter().filter(|o| **o == IdempotencyResponse::Proceed).count();
        assert_eq!(proceeded, 1);
        assert!(outcomes[1..].iter().all(|o| matches!(o, IdempotencyResponse::InFlight { .. })));
    }

    #[test]
    fn different_body_is_a_mismatch_in_flight_and_after() {
        let mut s = IdempotencyState::default();
        s.begin(&begin("h", "r1"), 0);
        assert_eq!(s.begin(&begin("other", "r2"), 1), IdempotencyResponse::Mismatch);
        s.complete("r1", &ok("x"), 2);
        assert_eq!(s.begin(&begin("other", "r3"), 3), IdempotencyResponse::Mismatch);
        assert_eq!(s.begin(&begin("other", "r1"), 3), IdempotencyResponse::Mismatch);
    }

    #[test]
    fn repeated_begin_and_complete_from_the_owner_are_idempotent() {
        let mut s = IdempotencyState::default();
        s.begin(&begin("h", "r1"), 0);
        s.take_changed();
        assert_eq!(s.begin(&begin("h", "r1"), 5), IdempotencyResponse::Proceed);
        assert!(!s.take_changed());
        assert_eq!(s.complete("r1", &ok("x"), 10), IdempotencyResponse::Stored);
        assert_eq!(s.complete("r1", &ok("y"), 11), IdempotencyResponse::Stored);
        assert_eq!(s.begin(&begin("h", "r2"), 12), replay("x", 10));
    }

    #[test]
    fn abandon_frees_the_key_for_a_retry() {
        let mut s = IdempotencyState::default();
        s.begin(&begin("h", "r1"), 0);
        assert_eq!(s.abandon("r2", 1), IdempotencyResponse::Stale);
        assert_eq!(s.abandon("r1", 1), IdempotencyResponse::Released);
        assert!(s.is_empty() && s.take_changed());
        assert_eq!(s.abandon("r1", 2), IdempotencyResponse::Stale);
        assert_eq!(s.begin(&begin("h", "r2"), 3), IdempotencyResponse::Proceed);
        s.complete("r2", &ok("x"), 4);
        assert_eq!(s.abandon("r2", 5), IdempotencyResponse::Stale, "a finished key is not freed");
        assert_eq!(s.begin(&begin("other", "r3"), 6), IdempotencyResponse::Mismatch, "abandon forgets the old body");
    }

    #[test]
    fn abandoned_key_accepts_a_different_body() {
        let mut s = IdempotencyState::default();
        s.begin(&begin("h", "r1"), 0);
        s.abandon("r1", 1);
        assert_eq!(s.begin(&begin("other", "r2"), 2), IdempotencyResponse::Proceed);
    }

    #[test]
    fn crashed_first_request_goes_stale() {
        let mut s = IdempotencyState::default();
        s.begin(&begin("h", "r1"), 0);
        let stale_at = DEFAULT_IN_FLIGHT_MS;
        assert_eq!(s.next_deadline(), Some(stale_at));
        assert_eq!(s.begin(&begin("h", "r2"), stale_at - 300), IdempotencyResponse::InFlight { retry_after_ms: 300 });
        assert_eq!(s.begin(&begin("h", "r2"), stale_at), IdempotencyResponse::Proceed);
        // The original owner finally answers: it no longer owns the key.
        assert_eq!(s.complete("r1", &ok("late"), stale_at + 1), IdempotencyResponse::Stale);
        assert_eq!(s.abandon("r1", stale_at + 1), IdempotencyResponse::Stale);
        assert_eq!(s.complete("r2", &ok("fresh"), stale_at + 2), IdempotencyResponse::Stored);
        assert_eq!(s.begin(&begin("h", "r3"), stale_at + 3), replay("fresh", stale_at + 2));
    }

    #[test]
    fn stale_in_flight_does_not_block_a_different_body() {
        let mut s = IdempotencyState::default();
        s.begin(&Begin { in_flight_ms: MIN, ..begin("h", "r1") }, 0);
        assert_eq!(s.begin(&begin("other", "r2"), MIN - 1), IdempotencyResponse::Mismatch);
        assert_eq!(s.begin(&begin("other", "r2"), MIN), IdempotencyResponse::Proceed);
    }

    #[test]
    fn responses_expire_after_the_window() {
        let mut s = IdempotencyState::default();
        s.begin(&Begin { window_ms: 10 * MIN, ..begin("h", "r1") }, 0);
        s.complete("r1", &ok("x"), MIN);
        assert_eq!(s.next_deadline(), Some(11 * MIN));
        assert_eq!(s.begin(&begin("h", "r2"), 11 * MIN - 1), replay("x", MIN));
        s.take_changed();
        s.expire(11 * MIN - 1);
        assert!(!s.take_changed());
        s.expire(11 * MIN);
        assert!(s.is_empty() && s.take_changed() && s.next_deadline().is_none());
        assert_eq!(s.begin(&begin("other", "r3"), 11 * MIN), IdempotencyResponse::Proceed);
    }

    #[test]
    fn default_window_is_a_day() {
        let mut s = IdempotencyState::default();
        let b: Begin = serde_json::from_str(r#"{"body_hash":"h","owner":"r1"}"#).unwrap();
        assert_eq!((b.window_ms, b.in_flight_ms), (86_400_000, 300_000));
        s.begin(&b, 0);
        s.complete("r1", &ok("x"), 1_000);
        assert_eq!(s.next_deadline(), Some(1_000 + 86_400_000));
    }

    #[test]
    fn zero_durations_are_raised_to_one_ms() {
        let mut s = IdempotencyState::default();
        s.begin(&Begin { window_ms: 0, in_flight_ms: 0, ..begin("h", "r1") }, 5);
        assert_eq!(s.next_deadline(), Some(6));
        s.complete("r1", &ok("x"), 5);
        assert_eq!(s.next_deadline(), Some(6));
    }

    #[test]
    fn handle_dispatches_every_operation() {
        let mut s = IdempotencyState::default();
        let b = IdempotencyRequest::Begin(begin("h", "r1"));
        assert_eq!(s.handle(&b, 0), IdempotencyResponse::Proceed);
        assert_eq!(s.handle(&IdempotencyRequest::Abandon { owner: "r1".into() }, 1), IdempotencyResponse::Released);
        assert_eq!(s.handle(&b, 2), IdempotencyResponse::Proceed);
        let complete = IdempotencyRequest::Complete { owner: "r1".into(), response: ok("x") };
        assert_eq!(s.handle(&complete, 3), IdempotencyResponse::Stored);
    }

    #[test]
    fn snapshots_round_trip() {
        let mut s = IdempotencyState::default();
        assert_eq!(s.to_snapshot(), "{}");
        s.begin(&begin("h", "r1"), 0);
        let in_flight = IdempotencyState::from_snapshot(&s.to_snapshot()).unwrap();
        assert_eq!(in_flight.next_deadline(), s.next_deadline());
        s.complete("r1", &ok("héllo \"x\""), 7);
        let mut restored = IdempotencyState::from_snapshot(&s.to_snapshot()).unwrap();
        assert!(!restored.take_changed());
        assert_eq!(restored.begin(&begin("h", "r2"), 8), replay("héllo \"x\"", 7));
        assert!(IdempotencyState::from_snapshot("{\"entry\":{\"state\":\"weird\"}}").is_err());
    }

    #[test]
    fn wire_format() {
        let req = decode_request(r#"{"op":"begin","body_hash":"h","owner":"r1","in_flight_ms":90000}"#).unwrap();
        assert_eq!(req, IdempotencyRequest::Begin(Begin { in_flight_ms: 90_000, ..begin("h", "r1") }));
        let complete = IdempotencyRequest::Complete { owner: "r1".into(), response: ok("{}") };
        let text = encode_request(&complete);
        assert_eq!(
            text,
            r#"{"op":"complete","owner":"r1","response":{"status":200,"headers":[["content-type","application/json"]],"body":"{}"}}"#
        );
        assert_eq!(decode_request(&text).unwrap(), complete);
        assert_eq!(
            decode_request(r#"{"op":"abandon","owner":"r1"}"#).unwrap(),
            IdempotencyRequest::Abandon { owner: "r1".into() }
        );
        assert!(matches!(decode_request(r#"{"op":"steal"}"#), Err(ProtocolError::Malformed(_))));

        let answers = [
            (IdempotencyResponse::Proceed, r#"{"outcome":"proceed"}"#),
            (
                IdempotencyResponse::InFlight { retry_after_ms: 1000 },
                r#"{"outcome":"in_flight","retry_after_ms":1000}"#,
            ),
            (IdempotencyResponse::Mismatch, r#"{"outcome":"mismatch"}"#),
            (IdempotencyResponse::Stored, r#"{"outcome":"stored"}"#),
            (IdempotencyResponse::Released, r#"{"outcome":"released"}"#),
            (IdempotencyResponse::Stale, r#"{"outcome":"stale"}"#),
        ];
        for (resp, text) in answers {
            assert_eq!(encode_response(&resp), text);
            assert_eq!(decode_response(text).unwrap(), resp);
        }
        let replayed = replay("{}", 5);
        assert_eq!(decode_response(&encode_response(&replayed)).unwrap(), replayed);
        let err = encode_response(&IdempotencyResponse::Error { message: "bad".into() });
        assert_eq!(decode_response(&err), Err(ProtocolError::Remote("bad".into())));
        let bare: StoredResponse = serde_json::from_str(r#"{"status":409,"body":""}"#).unwrap();
        assert!(bare.headers.is_empty());
    }

    #[test]
    fn snapshot_pieces_cut_on_char_boundaries() {
        assert_eq!(chunks("", 4), vec![""]);
        assert_eq!(chunks("abcd", 4), vec!["abcd"]);
        assert_eq!(chunks("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
        let text = "aé你好🚀".repeat(50);
        for max in [4, 5, 7, 64] {
            let pieces = chunks(&text, max);
            assert!(pieces.iter().all(|p| p.len() <= max && !p.is_empty()));
            assert_eq!(pieces.concat(), text);
        }
    }
}
