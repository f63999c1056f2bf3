//! The JSON messages between the worker and a deployment's limiter object.
//!
//! The worker POSTs one [`LimiterRequest`] to [`OBJECT_URL`] on the stub named by
//! [`object_name`] and reads back one [`LimiterResponse`]; `GET` answers the status.
//!
//! Leases (see [`crate::leases`]): `lease` takes a slice of the buckets for an isolate to admit
//! against locally, `report` hands back what it did not use; an admit may ask for a lease in the
//! same round trip, and every request may carry the isolate's [`Tally`] of local outcomes.
//!
//! The same object class also limits a virtual key or a tenant (a *scope*, named by
//! [`scope_object_name`]): the worker admits a request there before any deployment, and
//! `release`s that admission when a later layer refuses, so nothing stays taken.

use std::fmt;

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::breaker::{BreakerState, BreakerStatus};
use crate::leases::{Calls, LeaseStatus};
use crate::limits::{Amounts, BucketKind, Delta, Limits};
pub use crate::types::{BucketStatus, FaultReason, Outcome, Pause, PauseReason, RejectCode};

/// Durable Objects ignore the host; the path is kept for logs and future routing.
pub const OBJECT_URL: &str = "https://limiter.internal/v1";

/// The Durable Object name for a deployment id (stable: same id, same object).
pub fn object_name(deployment: &str) -> String {
    format!("deployment:{deployment}")
}

/// The name of `object`'s relay in `location` (a Cloudflare colo): one per object and location.
pub fn relay_name(object: &str, location: &str) -> String {
    format!("relay:{object}@{location}")
}

/// The Durable Object name of a scope's limiter: `scope:key:<key id>` or `scope:tenant:<name>`.
/// Never the name of a deployment's object (those start with `deployment:`).
pub fn scope_object_name(scope: &str, name: &str) -> String {
    format!("scope:{scope}:{name}")
}

/// What `GET` (or `LimiterRequest::Status`) answers: the object's live state, for `/admin/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    pub now_ms: u64,
    pub breaker: BreakerStatus,
    pub buckets: BTreeMap<BucketKind, BucketStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
    pub in_flight: u64,
    pub limits: Limits,
    pub leases: LeaseStatus,
    pub calls: Calls,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LimiterRequest {
    Admit(AdmitRequest),
    Settle(SettleRequest),
    Lease(LeaseRequest),
    /// Hands back expired or drained leases and local outcomes, asking for nothing.
    Report(Tally),
    /// Undoes an admission whose request went no further: everything it took goes back.
    Release(ReleaseRequest),
    Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LimiterResponse {
    Admit(AdmitDecision),
    Settle(SettleReport),
    Lease(LeaseDecision),
    Report(ReportAck),
    Release(ReleaseReport),
    Status(Box<StatusReport>),
    Error { message: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmitRequest {
    /// Chosen by the caller, unique per attempt; settle refers to it.
    pub id: String,
    /// The route table's current limits; `None` keeps the ones the object has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Estimated prompt tokens and the output budget (max tokens).
    #[serde(default)]
    pub estimate: TokenUsage,
    /// How long the caller is willing to sleep for bucket capacity; 0 means not at all.
    #[serde(default)]
    pub max_wait_ms: u64,
    /// Also take a lease in this round trip (granted only if this admission needs no wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseAsk>,
    #[serde(default, skip_serializing_if = "Tally::is_empty")]
    pub tally: Tally,
    /// Who is asking, for the deployment's fair share between tenants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleRequest {
    pub id: String,
    pub outcome: Outcome,
    /// What the vendor reported; `None` keeps the estimate charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    #[serde(default, skip_serializing_if = "UpstreamSignals::is_empty")]
    pub signals: UpstreamSignals,
    /// Applied before this outcome, so the isolate's earlier local successes come first.
    #[serde(default, skip_serializing_if = "Tally::is_empty")]
    pub tally: Tally,
}

/// Cancels the admission `id` before its request used it (a later layer refused, or no
/// deployment would take the request): its request, tokens, concurrency slot and probe slot go
/// back, and the breaker learns nothing. Idempotent, like settle; a settle after it is a duplicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    pub id: String,
    #[serde(default, skip_serializing_if = "Tally::is_empty")]
    pub tally: Tally,
}

/// What a release found: `settled` = a live reservation, given back in full; `late` = one that
/// had expired (given back, except requests per day); `duplicate` / `unknown` = nothing done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseReport {
    pub reservation: SettleMatch,
}

/// A lease wanted: `id` is chosen by the isolate, unique per lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAsk {
    pub id: String,
    /// What the isolate expects to need before the lease expires; the object may grant less.
    pub want: Amounts,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRequest {
    pub id: String,
    pub want: Amounts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    #[serde(default, skip_serializing_if = "Tally::is_empty")]
    pub tally: Tally,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    /// Taken from the buckets: the isolate may admit against it until `ttl_ms` from now.
    pub grant: Amounts,
    pub ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_tokens: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum LeaseDecision {
    Granted(LeaseGrant),
    /// Nothing taken: a health code (breaker, ramp, pause) means admit through the object only.
    Refused {
        code: RejectCode,
        retry_after_ms: u64,
    },
}

/// A lease handed back: `unused` is what it still held (negative tokens: used beyond it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseReturn {
    pub id: String,
    #[serde(default)]
    pub unused: Delta,
}

/// What an isolate did locally since it last spoke to the object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tally {
    /// Locally admitted requests that succeeded (the breaker learns them in a batch).
    #[serde(skip_serializing_if = "is_zero")]
    pub successes: u64,
    /// Token corrections of requests settled after their lease was handed back.
    #[serde(skip_serializing_if = "Delta::is_empty")]
    pub adjust: Delta,
    /// The latest vendor rate-limit headers seen on a local success (resets relative to now).
    #[serde(skip_serializing_if = "UpstreamSignals::is_empty")]
    pub signals: UpstreamSignals,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub returns: Vec<LeaseReturn>,
    /// Local admissions released (their request went no further) after their lease was handed
    /// back: requests and tokens are refunded (requests per day are not: the day is unknown).
    #[serde(skip_serializing_if = "Delta::is_empty")]
    pub released: Delta,
    /// Successful object admissions settled since, sent with this message rather than alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub settles: Vec<LateSettle>,
    /// To a relay: the object told this isolate the deployment is unhealthy (the relay stops
    /// granting slices at once rather than when its own leases end). The object ignores it.
    #[serde(skip_serializing_if = "is_false")]
    pub unhealthy: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A successful object admission's settle, carried in a tally: its usage replaces the estimate
/// (`None` keeps the estimate charged) and the breaker counts a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateSettle {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Tally {
    pub fn is_empty(&self) -> bool {
        *self == Tally::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportAck {
    pub breaker: BreakerState,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
}

/// Rate-limit headers the vendor sent, already parsed; reset times are relative to now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamSignals {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_requests_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_tokens_ms: Option<u64>,
}

impl UpstreamSignals {
    pub fn is_empty(&self) -> bool {
        *self == UpstreamSignals::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum AdmitDecision {
    Admitted {
        /// Sleep this long before calling upstream: the place in line is already held.
        start_after_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remaining_requests: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remaining_tokens: Option<u64>,
        /// This attempt is the half-open probe: its outcome opens or closes the breaker.
        #[serde(default)]
        probe: bool,
        /// The lease asked for alongside, if one was granted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease: Option<LeaseGrant>,
    },
    Rejected {
        code: RejectCode,
        retry_after_ms: u64,
        scope: Scope,
    },
}

impl AdmitDecision {
    pub fn is_admitted(&self) -> bool {
        matches!(self, AdmitDecision::Admitted { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Deployment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleReport {
    pub reservation: SettleMatch,
    /// The breaker after this outcome.
    pub breaker: BreakerState,
}

/// What the settled id referred to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleMatch {
    /// A live reservation: usage reconciled, slot released.
    Settled,
    /// A reservation that had expired: usage reconciled, outcome applied.
    Late,
    /// Already settled: nothing was done.
    Duplicate,
    /// Never seen (or forgotten): outcome and signals applied, no usage to reconcile.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// The body was not valid JSON for the expected message.
    Malformed(String),
    /// The object answered with an error.
    Remote(String),
    /// The object answered a different operation than the one asked.
    Mismatch { expected: &'static str },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Malformed(e) => write!(f, "malformed limiter message: {e}"),
            ProtocolError::Remote(e) => write!(f, "limiter error: {e}"),
            ProtocolError::Mismatch { expected } => write!(f, "limiter answered another operation than {expected}"),
        }
    }
}

impl std::error::Error for ProtocolError {}

pub fn encode_request(req: &LimiterRequest) -> String {
    serde_json::to_string(req).expect("limiter requests always serialize")
}

pub fn decode_request(body: &str) -> Result<LimiterRequest, ProtocolError> {
    serde_json::from_str(body).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

pub fn encode_response(resp: &LimiterResponse) -> String {
    serde_json::to_string(resp).expect("limiter responses always serialize")
}

pub fn decode_response(body: &str) -> Result<LimiterResponse, ProtocolError> {
    match serde_json::from_str(body).map_err(|e| ProtocolError::Malformed(e.to_string()))? {
        LimiterResponse::Error { message } => Err(ProtocolError::Remote(message)),
        resp => Ok(resp),
    }
}

pub fn decode_admit(body: &str) -> Result<AdmitDecision, ProtocolError> {
    match decode_response(body)? {
        LimiterResponse::Admit(d) => Ok(d),
        _ => Err(ProtocolError::Mismatch { expected: "admit" }),
    }
}

pub fn decode_settle(body: &str) -> Result<SettleReport, ProtocolError> {
    match decode_response(body)? {
        LimiterResponse::Settle(r) => Ok(r),
        _ => Err(ProtocolError::Mismatch { expected: "settle" }),
    }
}

pub fn decode_lease(body: &str) -> Result<LeaseDecision, ProtocolError> {
    match decode_response(body)? {
        LimiterResponse::Lease(d) => Ok(d),
        _ => Err(ProtocolError::Mismatch { expected: "lease" }),
    }
}

pub fn decode_release(body: &str) -> Result<ReleaseReport, ProtocolError> {
    match decode_response(body)? {
        LimiterResponse::Release(r) => Ok(r),
        _ => Err(ProtocolError::Mismatch { expected: "release" }),
    }
}

pub fn decode_status(body: &str) -> Result<StatusReport, ProtocolError> {
    match decode_response(body)? {
        LimiterResponse::Status(s) => Ok(*s),
        _ => Err(ProtocolError::Mismatch { expected: "status" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip_request(req: LimiterRequest) {
        assert_eq!(decode_request(&encode_request(&req)).unwrap(), req);
    }

    #[test]
    fn admit_wire_format() {
        let req = LimiterRequest::Admit(AdmitRequest {
            id: "r1".into(),
            limits: Some(Limits { rpm: Some(10), ..Limits::default() }),
            estimate: TokenUsage { input: 120, output: 256 },
            max_wait_ms: 500,
            lease: None,
            tally: Tally::default(),
            tenant: None,
        });
        let v: serde_json::Value = serde_json::from_str(&encode_request(&req)).unwrap();
        assert_eq!(v["op"], "admit");
        assert_eq!(v["id"], "r1");
        assert_eq!(v["estimate"], json!({"input":120,"output":256}));
        assert_eq!(v["max_wait_ms"], 500);
        assert_eq!(v["limits"]["rpm"], 10);
        round_trip_request(req);
        let minimal = decode_request(r#"{"op":"admit","id":"r2"}"#).unwrap();
        assert_eq!(
            minimal,
            LimiterRequest::Admit(AdmitRequest {
                id: "r2".into(),
                limits: None,
                estimate: TokenUsage::default(),
                max_wait_ms: 0,
                lease: None,
                tally: Tally::default(),
                tenant: None,
            })
        );
    }

    #[test]
    fn settle_wire_format() {
        let body = r#"{"op":"settle","id":"r1","outcome":{"kind":"rate_limited","retry_after_ms":2000},
            "usage":{"input":100,"output":7},"signals":{"remaining_tokens":0,"reset_tokens_ms":6000}}"#;
        let req = decode_request(body).unwrap();
        let LimiterRequest::Settle(s) = &req else { panic!("not a settle") };
        assert_eq!(s.outcome, Outcome::RateLimited { retry_after_ms: Some(2_000) });
        assert_eq!(s.usage, Some(TokenUsage { input: 100, output: 7 }));
        assert_eq!(s.signals.remaining_tokens, Some(0));
        assert_eq!(s.signals.reset_tokens_ms, Some(6_000));
        round_trip_request(req);
        let bare = decode_request(r#"{"op":"settle","id":"r1","outcome":{"kind":"success"}}"#).unwrap();
        let LimiterRequest::Settle(s) = bare else { panic!("not a settle") };
        assert!(s.signals.is_empty() && s.usage.is_none());
        round_trip_request(LimiterRequest::Status);
    }

    #[test]
    fn decisions_wire_format() {
        let admitted = LimiterResponse::Admit(AdmitDecision::Admitted {
            start_after_ms: 0,
            remaining_requests: Some(9),
            remaining_tokens: None,
            probe: false,
            lease: None,
        });
        let text = encode_response(&admitted);
        assert_eq!(
            text,
            r#"{"op":"admit","decision":"admitted","start_after_ms":0,"remaining_requests":9,"probe":false}"#
        );
        assert_eq!(decode_response(&text).unwrap(), admitted);

        let rejected = LimiterResponse::Admit(AdmitDecision::Rejected {
            code: RejectCode::HalfOpenProbeInFlight,
            retry_after_ms: 1_000,
            scope: Scope::Deployment,
        });
        let text = encode_response(&rejected);
        assert_eq!(
            text,
            r#"{"op":"admit","decision":"rejected","code":"half_open_probe_in_flight","retry_after_ms":1000,"scope":"deployment"}"#
        );
        assert!(!decode_admit(&text).unwrap().is_admitted());
    }

    #[test]
    fn codes_serialize_as_their_names() {
        use RejectCode::*;
        for code in [
            Rpm,
            Tpm,
            InputTpm,
            OutputTpm,
            Rpd,
            Concurrency,
            BreakerOpen,
            HalfOpenProbeInFlight,
            Ramping,
            Paused,
            QuotaExhausted,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        }
        assert!(BreakerOpen.is_health() && QuotaExhausted.is_health() && !Tpm.is_health() && !Concurrency.is_health());
    }

    #[test]
    fn settle_report_and_errors_decode() {
        let report = SettleReport { reservation: SettleMatch::Late, breaker: BreakerState::HalfOpen };
        let text = encode_response(&LimiterResponse::Settle(report));
        assert_eq!(text, r#"{"op":"settle","reservation":"late","breaker":"half_open"}"#);
        assert_eq!(decode_settle(&text).unwrap(), report);
        assert_eq!(decode_admit(&text), Err(ProtocolError::Mismatch { expected: "admit" }));
        let err = encode_response(&LimiterResponse::Error { message: "bad".into() });
        assert_eq!(decode_settle(&err), Err(ProtocolError::Remote("bad".into())));
        assert!(matches!(decode_response("{"), Err(ProtocolError::Malformed(_))));
    }

    #[test]
    fn lease_wire_format() {
        let want = Amounts { requests: 20, tokens: 4_000, input: 0, output: 0 };
        let req = LimiterRequest::Lease(LeaseRequest { id: "i.1".into(), want, limits: None, tally: Tally::default() });
        let text = encode_request(&req);
        assert_eq!(text, r#"{"op":"lease","id":"i.1","want":{"rq":20,"tk":4000,"in":0,"out":0}}"#);
        assert_eq!(decode_request(&text).unwrap(), req);

        let granted = LimiterResponse::Lease(LeaseDecision::Granted(LeaseGrant {
            grant: want,
            ttl_ms: 3_000,
            remaining_requests: Some(7),
            remaining_tokens: None,
        }));
        let text = encode_response(&granted);
        assert_eq!(
            text,
            r#"{"op":"lease","decision":"granted","grant":{"rq":20,"tk":4000,"in":0,"out":0},"ttl_ms":3000,"remaining_requests":7}"#
        );
        assert_eq!(
            decode_lease(&text).unwrap(),
            LeaseDecision::Granted(LeaseGrant { remaining_requests: Some(7), ..lease_grant(want) })
        );
        let refused = r#"{"op":"lease","decision":"refused","code":"paused","retry_after_ms":900}"#;
        assert_eq!(
            decode_lease(refused).unwrap(),
            LeaseDecision::Refused { code: RejectCode::Paused, retry_after_ms: 900 }
        );
    }

    fn lease_grant(grant: Amounts) -> LeaseGrant {
        LeaseGrant { grant, ttl_ms: 3_000, remaining_requests: None, remaining_tokens: None }
    }

    #[test]
    fn tallies_ride_along_and_are_left_out_when_empty() {
        let tally = Tally {
            successes: 12,
            adjust: Delta { tokens: -40, ..Delta::default() },
            signals: UpstreamSignals { remaining_tokens: Some(900), ..UpstreamSignals::default() },
            returns: vec![LeaseReturn {
                id: "i.0".into(),
                unused: Delta { requests: 3, tokens: 250, ..Delta::default() },
            }],
            released: Delta { requests: 1, tokens: 15, ..Delta::default() },
            settles: vec![LateSettle { id: "r7".into(), usage: Some(TokenUsage { input: 4, output: 2 }) }],
            unhealthy: true,
        };
        let v: serde_json::Value = serde_json::to_value(LimiterRequest::Report(tally.clone())).unwrap();
        assert_eq!(
            v,
            json!({"op":"report","successes":12,"adjust":{"tk":-40},"signals":{"remaining_tokens":900},
                   "returns":[{"id":"i.0","unused":{"rq":3,"tk":250}}],"released":{"rq":1,"tk":15},
                   "settles":[{"id":"r7","usage":{"input":4,"output":2}}],"unhealthy":true})
        );
        assert_eq!(decode_request(&v.to_string()).unwrap(), LimiterRequest::Report(tally.clone()));
        let settle = decode_request(r#"{"op":"settle","id":"r","outcome":{"kind":"failure"},"tally":{"successes":2}}"#);
        let LimiterRequest::Settle(s) = settle.unwrap() else { panic!("not a settle") };
        assert_eq!(s.tally.successes, 2);
        let admit = LimiterRequest::Admit(AdmitRequest {
            id: "r".into(),
            limits: None,
            estimate: TokenUsage::default(),
            max_wait_ms: 0,
            lease: Some(LeaseAsk { id: "i.2".into(), want: Amounts::default() }),
            tally: Tally::default(),
            tenant: None,
        });
        let v: serde_json::Value = serde_json::from_str(&encode_request(&admit)).unwrap();
        assert!(v.get("tally").is_none(), "an empty tally is left out: {v}");
        assert_eq!(v["lease"]["id"], "i.2");
        let ack = encode_response(&LimiterResponse::Report(ReportAck { breaker: BreakerState::Open }));
        assert_eq!(ack, r#"{"op":"report","breaker":"open"}"#);
    }

    #[test]
    fn object_names_are_stable() {
        assert_eq!(object_name("gpt4o-east"), "deployment:gpt4o-east");
        assert_eq!(scope_object_name("key", "0123abcd"), "scope:key:0123abcd");
        assert_eq!(scope_object_name("tenant", "acme"), "scope:tenant:acme");
        assert_ne!(scope_object_name("tenant", "x"), object_name("scope:tenant:x"));
    }

    #[test]
    fn release_wire_format() {
        let req = LimiterRequest::Release(ReleaseRequest { id: "req_1:key".into(), tally: Tally::default() });
        let text = encode_request(&req);
        assert_eq!(text, r#"{"op":"release","id":"req_1:key"}"#);
        assert_eq!(decode_request(&text).unwrap(), req);
        let with_tally = decode_request(r#"{"op":"release","id":"r","tally":{"released":{"rq":1,"tk":30}}}"#).unwrap();
        let LimiterRequest::Release(r) = with_tally else { panic!("not a release") };
        assert_eq!(r.tally.released, Delta { requests: 1, tokens: 30, ..Delta::default() });

        let report = ReleaseReport { reservation: SettleMatch::Settled };
        let text = encode_response(&LimiterResponse::Release(report));
        assert_eq!(text, r#"{"op":"release","reservation":"settled"}"#);
        assert_eq!(decode_release(&text).unwrap(), report);
        assert_eq!(decode_settle(&text), Err(ProtocolError::Mismatch { expected: "settle" }));
    }
}
