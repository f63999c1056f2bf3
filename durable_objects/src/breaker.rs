//! Circuit breaker: closed → open → half-open (one probe) → closed, then a traffic ramp.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::types::{FaultReason, Outcome, RejectCode, Rejection};

/// When the single probe's slot frees is unknown (it frees on settle); ask again after this.
pub const PROBE_RETRY_MS: u64 = 1_000;

/// Number of time buckets the error-rate window is cut into.
const SLOTS: u64 = 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    pub trip: Trip,
    /// How long the breaker stays open before letting one probe through.
    pub open_ms: u64,
    /// After closing, each step lets only `pct`% of admissions through for `ms`; then 100%.
    pub ramp: Vec<RampStep>,
    /// On unless switched off on purpose (`"breaker": {"enabled": false}`): a deployment without
    /// a breaker keeps being sent requests however it fails.
    pub enabled: bool,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            trip: Trip::default(),
            open_ms: 30_000,
            ramp: vec![RampStep { pct: 20, ms: 10_000 }, RampStep { pct: 50, ms: 10_000 }],
            enabled: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Trip {
    /// Opens after this many counted failures in a row.
    Consecutive { failures: u32 },
    /// Opens when, over the last `window_ms`, at least `min_samples` outcomes were seen and
    /// at least `threshold_pct`% of them were counted failures.
    ErrorRate { window_ms: u64, min_samples: u32, threshold_pct: u8 },
}

impl Default for Trip {
    fn default() -> Self {
        Trip::Consecutive { failures: 5 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RampStep {
    pub pct: u8,
    pub ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

/// What opened the breaker last: counted failures under its trip rule, or a fault of the
/// deployment's own configuration (which opens it at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TripCause {
    Failures,
    Fault(FaultReason),
}

impl TripCause {
    /// The reason code `/admin/status` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            TripCause::Failures => "failures",
            TripCause::Fault(reason) => reason.as_str(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "s", rename_all = "snake_case")]
enum Phase {
    Closed,
    Open { until_ms: u64 },
    HalfOpen,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Probe {
    id: String,
    #[serde(rename = "exp")]
    expires_ms: u64,
}

/// What the breaker lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerPass {
    Pass,
    /// Half-open: this admission, if it goes ahead, is the one probe.
    Probe,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerStatus {
    pub state: BreakerState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_until_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    pub ramp_pct: u8,
    /// Why it opened (`failures`, `vendor_auth`, `model_not_found`, `missing_credential`),
    /// kept until a probe closes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub consecutive_failures: u32,
    pub window_ok: u32,
    pub window_failed: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    probe: Option<Probe>,
    /// Start of the ramp after the last close; `None` once the ramp is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ramp_from_ms: Option<u64>,
    #[serde(default)]
    failures: u32,
    #[serde(default)]
    window: Window,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cause: Option<TripCause>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            phase: Phase::Closed,
            probe: None,
            ramp_from_ms: None,
            failures: 0,
            window: Window::default(),
            cause: None,
        }
    }
}

impl Breaker {
    pub fn state(&self) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen => BreakerState::HalfOpen,
        }
    }

    /// Changes exactly when the phase changes or the probe slot is taken or freed: rare events
    /// worth persisting at once (a lost probe slot would let a second probe through).
    pub fn phase_key(&self) -> (BreakerState, u64, bool) {
        let until = match self.phase {
            Phase::Open { until_ms } => until_ms,
            _ => 0,
        };
        (self.state(), until, self.probe.is_some())
    }

    /// Applies what time alone does: open → half-open, an expired probe frees, the ramp ends.
    pub fn advance(&mut self, cfg: &BreakerConfig, now_ms: u64) {
        if let Phase::Open { until_ms } = self.phase {
            if now_ms >= until_ms {
                self.phase = Phase::HalfOpen;
            }
        }
        if self.probe.as_ref().is_some_and(|p| now_ms >= p.expires_ms) {
            self.probe = None;
        }
        if self.ramp_from_ms.is_some() && self.ramp(cfg, now_ms).is_none() {
            self.ramp_from_ms = None;
        }
    }

    /// Whether an admission may go ahead; `rand` decides ramp sampling.
    pub fn check(&mut self, cfg: &BreakerConfig, now_ms: u64, rand: u64) -> Result<BreakerPass, Rejection> {
        if !cfg.enabled {
            return Ok(BreakerPass::Pass);
        }
        self.advance(cfg, now_ms);
        match self.phase {
            Phase::Open { until_ms } => {
                Err(Rejection { code: RejectCode::BreakerOpen, retry_after_ms: until_ms.saturating_sub(now_ms) })
            }
            Phase::HalfOpen => match &self.probe {
                Some(p) => Err(Rejection {
                    code: RejectCode::HalfOpenProbeInFlight,
                    retry_after_ms: PROBE_RETRY_MS.min(p.expires_ms.saturating_sub(now_ms)),
                }),
                None => Ok(BreakerPass::Probe),
            },
            Phase::Closed => match self.ramp(cfg, now_ms) {
                Some((pct, step_end)) if rand % 100 >= u64::from(pct) => {
                    Err(Rejection { code: RejectCode::Ramping, retry_after_ms: step_end - now_ms })
                }
                _ => Ok(BreakerPass::Pass),
            },
        }
    }

    /// Whether the isolates may admit on their own: only when closed and fully ramped up.
    pub fn lease_gate(&mut self, cfg: &BreakerConfig, now_ms: u64) -> Result<(), Rejection> {
        if !cfg.enabled {
            return Ok(());
        }
        self.advance(cfg, now_ms);
        match self.phase {
            Phase::Open { until_ms } => {
                Err(Rejection { code: RejectCode::BreakerOpen, retry_after_ms: until_ms.saturating_sub(now_ms) })
            }
            Phase::HalfOpen => {
                Err(Rejection { code: RejectCode::HalfOpenProbeInFlight, retry_after_ms: PROBE_RETRY_MS })
            }
            Phase::Closed => match self.ramp(cfg, now_ms) {
                Some((_, step_end)) => Err(Rejection { code: RejectCode::Ramping, retry_after_ms: step_end - now_ms }),
                None => Ok(()),
            },
        }
    }

    /// Feeds `n` successes of locally admitted requests, reported in one batch. They count only
    /// while closed: outcomes of requests admitted before a trip change nothing.
    pub fn record_successes(&mut self, cfg: &BreakerConfig, n: u64, now_ms: u64) {
        self.advance(cfg, now_ms);
        if n > 0 && self.phase == Phase::Closed && cfg.enabled {
            self.failures = 0;
            self.window.add_n(cfg, now_ms, n, 0);
        }
    }

    /// Ties the half-open probe slot to a reservation.
    pub fn begin_probe(&mut self, id: &str, expires_ms: u64) {
        self.probe = Some(Probe { id: id.to_owned(), expires_ms });
    }

    /// Frees the probe slot if `id` holds it (its reservation expired unsettled).
    pub fn release_probe(&mut self, id: &str) {
        if self.is_probe(id) {
            self.probe = None;
        }
    }

    pub fn is_probe(&self, id: &str) -> bool {
        self.probe.as_ref().is_some_and(|p| p.id == id)
    }

    /// Feeds the outcome of reservation `id`. While open, and while half-open for anything but
    /// the probe, outcomes are of requests admitted before the trip and change nothing.
    pub fn record(&mut self, cfg: &BreakerConfig, id: &str, outcome: &Outcome, now_ms: u64) {
        if !cfg.enabled {
            return;
        }
        self.advance(cfg, now_ms);
        match self.phase {
            Phase::Open { .. } => {}
            Phase::Closed => match outcome {
                Outcome::Success => {
                    self.failures = 0;
                    self.window.add(cfg, now_ms, false);
                }
                Outcome::Failure => {
                    self.count_failure(cfg, now_ms);
                    if self.tripped(cfg, now_ms) {
                        self.open(cfg, now_ms, TripCause::Failures);
                    }
                }
                Outcome::Fault { reason } => {
                    self.count_failure(cfg, now_ms);
                    self.open(cfg, now_ms, TripCause::Fault(*reason));
                }
                Outcome::RateLimited { .. } | Outcome::QuotaExhausted | Outcome::Neutral => {}
            },
            Phase::HalfOpen if self.is_probe(id) => {
                self.probe = None;
                match outcome {
                    Outcome::Success => self.close(now_ms),
                    Outcome::Failure => {
                        self.count_failure(cfg, now_ms);
                        self.open(cfg, now_ms, TripCause::Failures);
                    }
                    Outcome::Fault { reason } => {
                        self.count_failure(cfg, now_ms);
                        self.open(cfg, now_ms, TripCause::Fault(*reason));
                    }
                    // "Slow down" says nothing about health: back to open, history kept, not counted.
                    Outcome::RateLimited { .. } => {
                        let cause = self.cause.unwrap_or(TripCause::Failures);
                        self.open(cfg, now_ms, cause)
                    }
                    // Inconclusive: the next admission becomes the probe.
                    Outcome::QuotaExhausted | Outcome::Neutral => {}
                }
            }
            Phase::HalfOpen => {}
        }
    }

    pub fn status(&self, cfg: &BreakerConfig, now_ms: u64) -> BreakerStatus {
        let (window_ok, window_failed) = self.window.counts(cfg, now_ms);
        BreakerStatus {
            state: self.state(),
            open_until_ms: match self.phase {
                Phase::Open { until_ms } => Some(until_ms),
                _ => None,
            },
            probe: self.probe.as_ref().map(|p| p.id.clone()),
            ramp_pct: match self.phase {
                Phase::Closed => self.ramp(cfg, now_ms).map_or(100, |(pct, _)| pct),
                _ => 0,
            },
            reason: self.cause.map(|c| c.as_str().to_string()),
            consecutive_failures: self.failures,
            window_ok,
            window_failed,
        }
    }

    fn count_failure(&mut self, cfg: &BreakerConfig, now_ms: u64) {
        self.failures = self.failures.saturating_add(1);
        self.window.add(cfg, now_ms, true);
    }

    fn tripped(&self, cfg: &BreakerConfig, now_ms: u64) -> bool {
        match cfg.trip {
            Trip::Consecutive { failures } => self.failures >= failures.max(1),
            Trip::ErrorRate { min_samples, threshold_pct, .. } => {
                let (ok, failed) = self.window.counts(cfg, now_ms);
                let total = u64::from(ok) + u64::from(failed);
                total >= u64::from(min_samples.max(1)) && u64::from(failed) * 100 >= u64::from(threshold_pct) * total
            }
        }
    }

    fn open(&mut self, cfg: &BreakerConfig, now_ms: u64, cause: TripCause) {
        self.phase = Phase::Open { until_ms: now_ms.saturating_add(cfg.open_ms) };
        self.cause = Some(cause);
        self.probe = None;
        self.ramp_from_ms = None;
    }

    /// Recovery proven: history starts afresh, traffic ramps up.
    fn close(&mut self, now_ms: u64) {
        self.phase = Phase::Closed;
        self.failures = 0;
        self.window = Window::default();
        self.cause = None;
        self.ramp_from_ms = Some(now_ms);
    }

    /// The ramp step in force: its percentage and when it ends.
    fn ramp(&self, cfg: &BreakerConfig, now_ms: u64) -> Option<(u8, u64)> {
        let start = self.ramp_from_ms?;
        let mut end = start;
        for step in &cfg.ramp {
            end = end.saturating_add(step.ms);
            if now_ms < end {
                return (step.pct < 100).then_some((step.pct, end));
            }
        }
        None
    }
}

/// Outcomes over the last `window_ms`, in `SLOTS` time buckets (bounded memory).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Window {
    #[serde(rename = "w")]
    width_ms: u64,
    slots: VecDeque<Slot>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Slot {
    #[serde(rename = "i")]
    index: u64,
    ok: u32,
    #[serde(rename = "fail")]
    failed: u32,
}

impl Window {
    fn width_for(cfg: &BreakerConfig) -> Option<u64> {
        match cfg.trip {
            Trip::ErrorRate { window_ms, .. } => Some((window_ms / SLOTS).max(1)),
            Trip::Consecutive { .. } => None,
        }
    }

    fn add(&mut self, cfg: &BreakerConfig, now_ms: u64, failed: bool) {
        let (ok, failed) = if failed { (0, 1) } else { (1, 0) };
        self.add_n(cfg, now_ms, ok, failed);
    }

    fn add_n(&mut self, cfg: &BreakerConfig, now_ms: u64, ok: u64, failed: u64) {
        let Some(width) = Self::width_for(cfg) else {
            self.slots.clear();
            return;
        };
        if width != self.width_ms {
            *self = Window { width_ms: width, slots: VecDeque::new() };
        }
        let index = now_ms / width;
        while self.slots.front().is_some_and(|s| s.index + SLOTS <= index) {
            self.slots.pop_front();
        }
        if self.slots.back().is_none_or(|s| s.index < index) {
            self.slots.push_back(Slot { index, ok: 0, failed: 0 });
        }
        let slot = self.slots.back_mut().expect("a slot was just ensured");
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        slot.failed = slot.failed.saturating_add(clamp(failed));
        slot.ok = slot.ok.saturating_add(clamp(ok));
    }

    fn counts(&self, cfg: &BreakerConfig, now_ms: u64) -> (u32, u32) {
        match Self::width_for(cfg) {
            Some(width) if width == self.width_ms => {
                let index = now_ms / width;
                self.slots
                    .iter()
                    .filter(|s| s.index + SLOTS > index)
                    .fold((0, 0), |(ok, failed), s| (ok.saturating_add(s.ok), failed.saturating_add(s.failed)))
            }
            _ => (0, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consecutive(failures: u32) -> BreakerConfig {
        BreakerConfig { trip: Trip::Consecutive { failures }, open_ms: 1_000, ramp: vec![], enabled: true }
    }

    fn error_rate() -> BreakerConfig {
        BreakerConfig {
            trip: Trip::ErrorRate { window_ms: 10_000, min_samples: 4, threshold_pct: 50 },
            open_ms: 1_000,
            ramp: vec![],
            enabled: true,
        }
    }

    fn fail(b: &mut Breaker, cfg: &BreakerConfig, now: u64) {
        b.record(cfg, "x", &Outcome::Failure, now);
    }

    fn ok(b: &mut Breaker, cfg: &BreakerConfig, now: u64) {
        b.record(cfg, "x", &Outcome::Success, now);
    }

    /// A breaker that has tripped at t=0 and reaches half-open at t=1000.
    fn tripped() -> (Breaker, BreakerConfig) {
        let cfg = consecutive(2);
        let mut b = Breaker::default();
        fail(&mut b, &cfg, 0);
        fail(&mut b, &cfg, 0);
        assert_eq!(b.state(), BreakerState::Open);
        (b, cfg)
    }

    #[test]
    fn a_fault_opens_at_once_with_its_reason_until_a_probe_closes() {
        let cfg = consecutive(5);
        let mut b = Breaker::default();
        fail(&mut b, &cfg, 0);
        let fault = Outcome::Fault { reason: FaultReason::VendorAuth };
        b.record(&cfg, "x", &fault, 10);
        assert_eq!(b.state(), BreakerState::Open, "one vendor 401 is enough");
        let status = b.status(&cfg, 10);
        assert_eq!((status.reason.as_deref(), status.consecutive_failures), (Some("vendor_auth"), 2));
        assert_eq!(b.check(&cfg, 1_010, 0), Ok(BreakerPass::Probe));
        assert_eq!(b.status(&cfg, 1_010).reason.as_deref(), Some("vendor_auth"), "kept while half-open");
        b.begin_probe("p", 5_000);
        let missing = Outcome::Fault { reason: FaultReason::ModelNotFound };
        b.record(&cfg, "p", &missing, 1_020);
        assert_eq!(b.status(&cfg, 1_020).reason.as_deref(), Some("model_not_found"), "the probe's fault");
        assert_eq!(b.check(&cfg, 2_020, 0), Ok(BreakerPass::Probe));
        b.begin_probe("q", 5_000);
        b.record(&cfg, "q", &Outcome::Success, 2_030);
        assert_eq!((b.state(), b.status(&cfg, 2_030).reason), (BreakerState::Closed, None));
    }

    #[test]
    fn failures_trip_with_reason_failures_and_a_fault_while_open_changes_nothing() {
        let (mut b, cfg) = tripped();
        assert_eq!(b.status(&cfg, 0).reason.as_deref(), Some("failures"));
        b.record(&cfg, "x", &Outcome::Fault { reason: FaultReason::MissingCredential }, 10);
        assert_eq!(b.status(&cfg, 10).reason.as_deref(), Some("failures"), "admitted before the trip");
        let snapshot = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<Breaker>(&snapshot).unwrap(), b, "the cause survives a reload");
    }

    #[test]
    fn a_breaker_switched_off_passes_everything_and_learns_nothing() {
        let cfg = BreakerConfig { enabled: false, ..consecutive(1) };
        let mut b = Breaker::default();
        fail(&mut b, &cfg, 0);
        b.record(&cfg, "x", &Outcome::Fault { reason: FaultReason::VendorAuth }, 1);
        assert_eq!((b.state(), b.status(&cfg, 1).consecutive_failures), (BreakerState::Closed, 0));
        assert_eq!(b.check(&cfg, 2, 0), Ok(BreakerPass::Pass));
        assert_eq!(b.lease_gate(&cfg, 2), Ok(()));
    }

    #[test]
    fn consecutive_failures_trip() {
        let cfg = consecutive(3);
        let mut b = Breaker::default();
        fail(&mut b, &cfg, 0);
        fail(&mut b, &cfg, 1);
        ok(&mut b, &cfg, 2); // a success breaks the run
        fail(&mut b, &cfg, 3);
        fail(&mut b, &cfg, 4);
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&mut b, &cfg, 5);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.check(&cfg, 5, 0), Err(Rejection { code: RejectCode::BreakerOpen, retry_after_ms: 1_000 }));
    }

    #[test]
    fn uncounted_outcomes_never_trip_in_closed() {
        let cfg = consecutive(1);
        let mut b = Breaker::default();
        for o in [Outcome::RateLimited { retry_after_ms: Some(5) }, Outcome::Neutral, Outcome::QuotaExhausted] {
            for t in 0..10 {
                b.record(&cfg, "x", &o, t);
            }
        }
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.status(&cfg, 10).consecutive_failures, 0);
    }

    #[test]
    fn error_rate_needs_min_samples() {
        let cfg = error_rate();
        let mut b = Breaker::default();
        fail(&mut b, &cfg, 0);
        fail(&mut b, &cfg, 1);
        fail(&mut b, &cfg, 2);
        assert_eq!(b.state(), BreakerState::Closed, "3 of 3 failed but below min_samples");
        fail(&mut b, &cfg, 3);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn error_rate_uses_threshold() {
        let cfg = error_rate();
        let mut b = Breaker::default();
        for t in 0..6 {
            ok(&mut b, &cfg, t);
        }
        for t in 0..5 {
            fail(&mut b, &cfg, 10 + t);
        }
        assert_eq!(b.state(), BreakerState::Closed, "5 of 11 is below 50%");
        fail(&mut b, &cfg, 20);
        assert_eq!(b.state(), BreakerState::Open, "6 of 12 reaches 50%");
    }

    #[test]
    fn error_rate_window_forgets_old_outcomes() {
        let cfg = error_rate();
        let mut b = Breaker::default();
        for t in 0..3 {
            fail(&mut b, &cfg, t);
        }
        // Ten seconds later those failures have left the window.
        fail(&mut b, &cfg, 10_500);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.status(&cfg, 10_500).window_failed, 1);
        assert!(b.window.slots.len() <= SLOTS as usize);
    }

    #[test]
    fn window_memory_is_bounded() {
        let cfg = BreakerConfig {
            trip: Trip::ErrorRate { window_ms: 10_000, min_samples: u32::MAX, threshold_pct: 100 },
            ..error_rate()
        };
        let mut b = Breaker::default();
        for t in (0..1_000_000).step_by(7) {
            ok(&mut b, &cfg, t);
        }
        assert!(b.window.slots.len() <= SLOTS as usize);
    }

    #[test]
    fn open_becomes_half_open_after_open_ms() {
        let (mut b, cfg) = tripped();
        assert_eq!(b.check(&cfg, 999, 0).unwrap_err().code, RejectCode::BreakerOpen);
        assert_eq!(b.check(&cfg, 1_000, 0), Ok(BreakerPass::Probe));
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn half_open_admits_a_single_probe() {
        let (mut b, cfg) = tripped();
        assert_eq!(b.check(&cfg, 1_000, 0), Ok(BreakerPass::Probe));
        b.begin_probe("p", 60_000);
        let refused = b.check(&cfg, 1_001, 0).unwrap_err();
        assert_eq!(refused.code, RejectCode::HalfOpenProbeInFlight);
        assert_eq!(refused.retry_after_ms, PROBE_RETRY_MS);
        // Outcomes of other (pre-trip) requests change nothing.
        ok(&mut b, &cfg, 1_002);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.is_probe("p"));
    }

    #[test]
    fn probe_success_closes_and_wipes_history() {
        let (mut b, cfg) = tripped();
        b.check(&cfg, 1_000, 0).unwrap();
        b.begin_probe("p", 60_000);
        b.record(&cfg, "p", &Outcome::Success, 1_500);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.status(&cfg, 1_500).consecutive_failures, 0);
        assert_eq!(b.check(&cfg, 1_500, 99), Ok(BreakerPass::Pass));
    }

    #[test]
    fn probe_failure_reopens_and_counts() {
        let (mut b, cfg) = tripped();
        b.check(&cfg, 1_000, 0).unwrap();
        b.begin_probe("p", 60_000);
        b.record(&cfg, "p", &Outcome::Failure, 1_200);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.status(&cfg, 1_200).consecutive_failures, 3);
        assert_eq!(b.check(&cfg, 2_199, 0).unwrap_err().retry_after_ms, 1);
        assert_eq!(b.check(&cfg, 2_200, 0), Ok(BreakerPass::Probe));
    }

    #[test]
    fn rate_limited_probe_reopens_without_counting_or_wiping() {
        let (mut b, cfg) = tripped();
        b.check(&cfg, 1_000, 0).unwrap();
        b.begin_probe("p", 60_000);
        b.record(&cfg, "p", &Outcome::RateLimited { retry_after_ms: None }, 1_100);
        assert_eq!(b.state(), BreakerState::Open);
        let status = b.status(&cfg, 1_100);
        assert_eq!(status.consecutive_failures, 2, "history kept, 429 not counted");
        assert_eq!(status.open_until_ms, Some(2_100));
        assert_eq!(status.probe, None);
    }

    #[test]
    fn rate_limited_probe_keeps_error_window() {
        let cfg = error_rate();
        let mut b = Breaker::default();
        for t in 0..4 {
            fail(&mut b, &cfg, t);
        }
        b.check(&cfg, 1_003, 0).unwrap();
        b.begin_probe("p", 60_000);
        b.record(&cfg, "p", &Outcome::RateLimited { retry_after_ms: Some(1) }, 1_010);
        assert_eq!(b.status(&cfg, 1_010).window_failed, 4);
        assert_eq!(b.status(&cfg, 1_010).window_ok, 0);
    }

    #[test]
    fn neutral_probe_frees_the_slot_only() {
        let (mut b, cfg) = tripped();
        b.check(&cfg, 1_000, 0).unwrap();
        b.begin_probe("p", 60_000);
        b.record(&cfg, "p", &Outcome::Neutral, 1_100);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.check(&cfg, 1_100, 0), Ok(BreakerPass::Probe));
    }

    #[test]
    fn expired_probe_frees_the_slot() {
        let (mut b, cfg) = tripped();
        b.check(&cfg, 1_000, 0).unwrap();
        b.begin_probe("p", 5_000);
        assert_eq!(b.check(&cfg, 4_999, 0).unwrap_err().retry_after_ms, 1);
        assert_eq!(b.check(&cfg, 5_000, 0), Ok(BreakerPass::Probe));
        b.begin_probe("q", 9_000);
        b.release_probe("other");
        assert!(b.is_probe("q"));
        b.release_probe("q");
        assert_eq!(b.check(&cfg, 5_001, 0), Ok(BreakerPass::Probe));
    }

    #[test]
    fn outcomes_while_open_change_nothing() {
        let (mut b, cfg) = tripped();
        ok(&mut b, &cfg, 10);
        fail(&mut b, &cfg, 10);
        assert_eq!(b.status(&cfg, 10).consecutive_failures, 2);
        assert_eq!(b.status(&cfg, 10).open_until_ms, Some(1_000));
    }

    #[test]
    fn ramp_admits_by_percentage_then_everything() {
        let (mut b, mut cfg) = tripped();
        cfg.ramp = vec![RampStep { pct: 20, ms: 10_000 }, RampStep { pct: 50, ms: 10_000 }];
        b.check(&cfg, 1_000, 0).unwrap();
        b.begin_probe("p", 60_000);
        b.record(&cfg, "p", &Outcome::Success, 2_000);

        let passed = |b: &mut Breaker, now: u64| (0..100u64).filter(|r| b.check(&cfg, now, *r).is_ok()).count();
        assert_eq!(passed(&mut b, 2_000), 20);
        assert_eq!(passed(&mut b, 11_999), 20);
        assert_eq!(passed(&mut b, 12_000), 50);
        assert_eq!(passed(&mut b, 22_000), 100);
        assert_eq!(b.ramp_from_ms, None, "ramp is over");

        let mut c = Breaker { ramp_from_ms: Some(0), ..Breaker::default() };
        let refused = c.check(&cfg, 3_000, 99).unwrap_err();
        assert_eq!(refused, Rejection { code: RejectCode::Ramping, retry_after_ms: 7_000 });
        assert_eq!(c.status(&cfg, 3_000).ramp_pct, 20);
    }

    #[test]
    fn failure_during_ramp_trips_again() {
        let cfg = BreakerConfig { ramp: vec![RampStep { pct: 50, ms: 10_000 }], ..consecutive(1) };
        let mut b = Breaker { ramp_from_ms: Some(0), ..Breaker::default() };
        fail(&mut b, &cfg, 100);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.ramp_from_ms, None);
    }

    #[test]
    fn leases_only_while_closed_and_ramped_up() {
        let (mut b, cfg) = tripped();
        assert_eq!(b.lease_gate(&cfg, 400), Err(Rejection { code: RejectCode::BreakerOpen, retry_after_ms: 600 }));
        assert_eq!(b.lease_gate(&cfg, 1_000).unwrap_err().code, RejectCode::HalfOpenProbeInFlight);
        let ramped = BreakerConfig { ramp: vec![RampStep { pct: 50, ms: 2_000 }], ..cfg };
        b.check(&ramped, 1_000, 0).unwrap();
        b.begin_probe("p", 5_000);
        b.record(&ramped, "p", &Outcome::Success, 1_200);
        assert_eq!(b.lease_gate(&ramped, 1_500), Err(Rejection { code: RejectCode::Ramping, retry_after_ms: 1_700 }));
        assert_eq!(b.lease_gate(&ramped, 3_200), Ok(()));
    }

    #[test]
    fn batched_successes_reset_and_fill_the_window() {
        let cfg = consecutive(3);
        let mut b = Breaker::default();
        fail(&mut b, &cfg, 0);
        fail(&mut b, &cfg, 1);
        b.record_successes(&cfg, 7, 2);
        fail(&mut b, &cfg, 3);
        fail(&mut b, &cfg, 4);
        assert_eq!(b.state(), BreakerState::Closed, "the batch broke the run");

        let rate = error_rate();
        let mut r = Breaker::default();
        r.record_successes(&rate, 6, 0);
        for t in 1..=5 {
            fail(&mut r, &rate, t);
        }
        assert_eq!(r.status(&rate, 5).window_ok, 6);
        assert_eq!(r.state(), BreakerState::Closed, "5 of 11 is under 50%");
        fail(&mut r, &rate, 6);
        assert_eq!(r.state(), BreakerState::Open);
        r.record_successes(&rate, 100, 7);
        assert_eq!(r.status(&rate, 7).window_ok, 6, "ignored while open");
    }

    #[test]
    fn config_parses_both_modes() {
        let c: BreakerConfig = serde_json::from_str(r#"{"trip":{"mode":"consecutive","failures":3}}"#).unwrap();
        assert_eq!(c.trip, Trip::Consecutive { failures: 3 });
        assert_eq!(c.open_ms, 30_000);
        let e: BreakerConfig = serde_json::from_str(
            r#"{"trip":{"mode":"error_rate","window_ms":60000,"min_samples":10,"threshold_pct":40},"ramp":[]}"#,
        )
        .unwrap();
        assert_eq!(e.trip, Trip::ErrorRate { window_ms: 60_000, min_samples: 10, threshold_pct: 40 });
        assert!(e.ramp.is_empty());
    }
}
