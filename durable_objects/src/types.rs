//! The limiter's small shared vocabulary, below every other module: how an attempt ended
//! ([`Outcome`]), which limit refused ([`RejectCode`]), and the status values a report carries.
//! A leaf: it imports nothing from this crate, so the state machines and the messages between
//! them and the worker can all use it without a cycle.

use serde::{Deserialize, Serialize};

/// How an attempt ended, as far as the breaker is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Success,
    /// 5xx, connection failure, first-token timeout, empty response: counts toward tripping.
    Failure,
    /// 429: never counts; pauses the deployment instead.
    RateLimited {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    /// `insufficient_quota` / spend cap: pauses the deployment for `quota_pause_ms`.
    QuotaExhausted,
    /// 4xx caused by the request itself: not the deployment's fault.
    Neutral,
    /// The deployment's own credential or configuration is wrong (vendor 401/403, unknown
    /// model, no secret bound): retrying cannot help, so the breaker opens at once.
    Fault {
        reason: FaultReason,
    },
}

/// Why a deployment is faulty rather than failing now and then; `/admin/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultReason {
    /// The vendor refused the gateway's key for this deployment (401/403).
    VendorAuth,
    /// The vendor does not know the deployment's model (or URL).
    ModelNotFound,
    /// The secret the deployment names is not bound in this worker.
    MissingCredential,
}

impl FaultReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultReason::VendorAuth => "vendor_auth",
            FaultReason::ModelNotFound => "model_not_found",
            FaultReason::MissingCredential => "missing_credential",
        }
    }
}

/// A refusal inside the limiter: which limit, and when to ask again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    pub code: RejectCode,
    pub retry_after_ms: u64,
}

/// Which limit refused an admission (the machine-readable reason the client sees).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectCode {
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
    /// The tenant already has its share of a deployment other tenants are using too.
    FairShare,
}

impl RejectCode {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectCode::Rpm => "rpm",
            RejectCode::Tpm => "tpm",
            RejectCode::InputTpm => "input_tpm",
            RejectCode::OutputTpm => "output_tpm",
            RejectCode::Rpd => "rpd",
            RejectCode::Concurrency => "concurrency",
            RejectCode::BreakerOpen => "breaker_open",
            RejectCode::HalfOpenProbeInFlight => "half_open_probe_in_flight",
            RejectCode::Ramping => "ramping",
            RejectCode::Paused => "paused",
            RejectCode::QuotaExhausted => "quota_exhausted",
            RejectCode::FairShare => "fair_share",
        }
    }

    /// Whether the deployment itself is unhealthy or told us to stop (versus merely busy).
    pub fn is_health(self) -> bool {
        matches!(
            self,
            RejectCode::BreakerOpen
                | RejectCode::HalfOpenProbeInFlight
                | RejectCode::Ramping
                | RejectCode::Paused
                | RejectCode::QuotaExhausted
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    /// The vendor sent Retry-After (or a bare 429).
    RetryAfter,
    /// The vendor said the account's quota or spend cap is exhausted.
    Quota,
}

impl PauseReason {
    pub fn code(self) -> RejectCode {
        match self {
            PauseReason::RetryAfter => RejectCode::Paused,
            PauseReason::Quota => RejectCode::QuotaExhausted,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub until_ms: u64,
    pub reason: PauseReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketStatus {
    pub capacity: u64,
    /// Whole tokens (or requests) available now; negative while in debt.
    pub available: i64,
    pub period_ms: u64,
}
