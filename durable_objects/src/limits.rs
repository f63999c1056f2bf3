//! A deployment's configured limits (from the route table) and the buckets they imply.

use serde::{Deserialize, Serialize};

use crate::breaker::{BreakerConfig, Trip};
use crate::bucket::Refill;
use crate::types::RejectCode;

pub const MINUTE_MS: u64 = 60_000;
pub const DAY_MS: u64 = 86_400_000;

/// Every field may be omitted in the route table; absent limits are not enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tpm: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tpm: Option<u64>,
    /// Requests per UTC day; resets at midnight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    pub breaker: BreakerConfig,
    /// A reservation not settled by then is released (its token estimate stays charged).
    pub reservation_ttl_ms: u64,
    /// How long `insufficient_quota` takes the deployment out of rotation.
    pub quota_pause_ms: u64,
    /// Weighted fair share of `rpm` between tenants while more than one is active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<crate::fair_share::FairShareConfig>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rpm: None,
            tpm: None,
            input_tpm: None,
            output_tpm: None,
            rpd: None,
            max_concurrent: None,
            breaker: BreakerConfig::default(),
            reservation_ttl_ms: 10 * MINUTE_MS,
            quota_pause_ms: 10 * MINUTE_MS,
            fair_share: None,
        }
    }
}

impl Limits {
    /// Whether any bucket limits this deployment (a limiter with none only guards its health).
    pub fn has_buckets(&self) -> bool {
        BucketKind::ALL.iter().any(|k| k.capacity(self).is_some())
    }

    /// Whether a limiter object has anything to enforce: a bucket, in-flight or fair-share
    /// limits, or the breaker. Without, the deployment costs no limiter call at all.
    pub fn enforces_anything(&self) -> bool {
        self.has_buckets() || self.max_concurrent.is_some() || self.fair_share.is_some() || self.breaker.enabled
    }

    /// Problems an admin should fix before uploading the route table.
    pub fn problems(&self) -> Vec<String> {
        let mut found = Vec::new();
        let b = &self.breaker;
        match b.trip {
            Trip::Consecutive { failures: 0 } => found.push("breaker.trip.failures must be at least 1".into()),
            Trip::ErrorRate { window_ms, min_samples, threshold_pct } => {
                if window_ms == 0 {
                    found.push("breaker.trip.window_ms must be positive".into());
                }
                if min_samples == 0 {
                    found.push("breaker.trip.min_samples must be at least 1".into());
                }
                if threshold_pct == 0 || threshold_pct > 100 {
                    found.push("breaker.trip.threshold_pct must be 1..=100".into());
                }
            }
            Trip::Consecutive { .. } => {}
        }
        for (i, step) in b.ramp.iter().enumerate() {
            if step.pct == 0 || step.pct > 100 {
                found.push(format!("breaker.ramp[{i}].pct must be 1..=100"));
            }
        }
        if self.reservation_ttl_ms == 0 {
            found.push("reservation_ttl_ms must be positive".into());
        }
        found
    }
}

/// One of the buckets a deployment may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketKind {
    Rpm,
    Tpm,
    InputTpm,
    OutputTpm,
    Rpd,
}

impl BucketKind {
    pub const ALL: [BucketKind; 5] =
        [BucketKind::Rpm, BucketKind::Tpm, BucketKind::InputTpm, BucketKind::OutputTpm, BucketKind::Rpd];

    pub fn capacity(self, limits: &Limits) -> Option<u64> {
        match self {
            BucketKind::Rpm => limits.rpm,
            BucketKind::Tpm => limits.tpm,
            BucketKind::InputTpm => limits.input_tpm,
            BucketKind::OutputTpm => limits.output_tpm,
            BucketKind::Rpd => limits.rpd,
        }
    }

    pub fn period_ms(self) -> u64 {
        match self {
            BucketKind::Rpd => DAY_MS,
            _ => MINUTE_MS,
        }
    }

    pub fn refill(self) -> Refill {
        match self {
            BucketKind::Rpd => Refill::Window,
            _ => Refill::Continuous,
        }
    }

    pub fn reject_code(self) -> RejectCode {
        match self {
            BucketKind::Rpm => RejectCode::Rpm,
            BucketKind::Tpm => RejectCode::Tpm,
            BucketKind::InputTpm => RejectCode::InputTpm,
            BucketKind::OutputTpm => RejectCode::OutputTpm,
            BucketKind::Rpd => RejectCode::Rpd,
        }
    }
}

/// What one reservation (or one lease) holds in each kind of bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts {
    #[serde(rename = "rq")]
    pub requests: u64,
    #[serde(rename = "tk")]
    pub tokens: u64,
    #[serde(rename = "in")]
    pub input: u64,
    #[serde(rename = "out")]
    pub output: u64,
}

impl Amounts {
    /// One request with its token estimate.
    pub fn request(input: u64, output: u64) -> Self {
        Amounts { requests: 1, tokens: input.saturating_add(output), input, output }
    }

    pub fn get(&self, kind: BucketKind) -> u64 {
        match kind {
            BucketKind::Rpm | BucketKind::Rpd => self.requests,
            BucketKind::Tpm => self.tokens,
            BucketKind::InputTpm => self.input,
            BucketKind::OutputTpm => self.output,
        }
    }

    pub fn set(&mut self, kind: BucketKind, value: u64) {
        match kind {
            BucketKind::Rpm | BucketKind::Rpd => self.requests = value,
            BucketKind::Tpm => self.tokens = value,
            BucketKind::InputTpm => self.input = value,
            BucketKind::OutputTpm => self.output = value,
        }
    }
}

/// Signed amounts handed back to the buckets: positive is a refund, negative a charge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Delta {
    #[serde(rename = "rq", skip_serializing_if = "is_zero")]
    pub requests: i64,
    #[serde(rename = "tk", skip_serializing_if = "is_zero")]
    pub tokens: i64,
    #[serde(rename = "in", skip_serializing_if = "is_zero")]
    pub input: i64,
    #[serde(rename = "out", skip_serializing_if = "is_zero")]
    pub output: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl Delta {
    /// What is left of `held` after `spent`.
    pub fn between(held: Amounts, spent: Amounts) -> Self {
        let diff = |a: u64, b: u64| signed(a).saturating_sub(signed(b));
        Delta {
            requests: diff(held.requests, spent.requests),
            tokens: diff(held.tokens, spent.tokens),
            input: diff(held.input, spent.input),
            output: diff(held.output, spent.output),
        }
    }

    pub fn get(&self, kind: BucketKind) -> i64 {
        match kind {
            BucketKind::Rpm | BucketKind::Rpd => self.requests,
            BucketKind::Tpm => self.tokens,
            BucketKind::InputTpm => self.input,
            BucketKind::OutputTpm => self.output,
        }
    }

    pub fn plus(self, other: Delta) -> Self {
        Delta {
            requests: self.requests.saturating_add(other.requests),
            tokens: self.tokens.saturating_add(other.tokens),
            input: self.input.saturating_add(other.input),
            output: self.output.saturating_add(other.output),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Delta::default()
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::RampStep;

    #[test]
    fn empty_object_means_defaults() {
        let limits: Limits = serde_json::from_str("{}").unwrap();
        assert_eq!(limits, Limits::default());
        assert_eq!(limits.reservation_ttl_ms, 600_000);
        assert_eq!(limits.quota_pause_ms, 600_000);
        assert!(limits.problems().is_empty());
    }

    #[test]
    fn route_table_shape_parses() {
        let json = r#"{"rpm":500,"tpm":200000,"rpd":10000,"max_concurrent":20,
            "breaker":{"trip":{"mode":"error_rate","window_ms":60000,"min_samples":20,"threshold_pct":50},
                       "open_ms":15000,"ramp":[{"pct":25,"ms":5000}]}}"#;
        let limits: Limits = serde_json::from_str(json).unwrap();
        assert_eq!(limits.rpm, Some(500));
        assert_eq!(limits.max_concurrent, Some(20));
        assert_eq!(limits.breaker.open_ms, 15_000);
        assert_eq!(limits.breaker.ramp, vec![RampStep { pct: 25, ms: 5_000 }]);
        let again: Limits = serde_json::from_str(&serde_json::to_string(&limits).unwrap()).unwrap();
        assert_eq!(again, limits);
    }

    #[test]
    fn typos_are_refused() {
        assert!(serde_json::from_str::<Limits>(r#"{"rpn":5}"#).is_err());
    }

    #[test]
    fn problems_are_listed() {
        let mut limits = Limits::default();
        limits.breaker.trip = Trip::ErrorRate { window_ms: 0, min_samples: 0, threshold_pct: 101 };
        limits.breaker.ramp = vec![RampStep { pct: 0, ms: 1 }];
        assert_eq!(limits.problems().len(), 4);
    }

    #[test]
    fn deltas_are_signed_differences() {
        let left = Delta::between(Amounts::request(100, 20), Amounts::request(150, 5));
        assert_eq!(left, Delta { requests: 0, tokens: -35, input: -50, output: 15 });
        assert_eq!(left.get(BucketKind::Rpd), 0);
        assert_eq!(left.get(BucketKind::InputTpm), -50);
        let sum = left.plus(Delta { requests: 2, tokens: 35, ..Delta::default() });
        assert_eq!(sum, Delta { requests: 2, tokens: 0, input: -50, output: 15 });
        assert!(Delta::default().is_empty() && !sum.is_empty());
        assert_eq!(serde_json::to_string(&sum).unwrap(), r#"{"rq":2,"in":-50,"out":15}"#);
        let huge = Delta::between(Amounts { requests: u64::MAX, ..Amounts::default() }, Amounts::default());
        assert_eq!(huge.requests, i64::MAX);
    }

    #[test]
    fn request_amounts_map_to_buckets() {
        let a = Amounts::request(100, 20);
        assert_eq!(a.get(BucketKind::Rpm), 1);
        assert_eq!(a.get(BucketKind::Rpd), 1);
        assert_eq!(a.get(BucketKind::Tpm), 120);
        assert_eq!(a.get(BucketKind::InputTpm), 100);
        assert_eq!(a.get(BucketKind::OutputTpm), 20);
    }
}
