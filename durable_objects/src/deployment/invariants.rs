//! Seeded random traffic against one limiter, checking what must hold whatever happens.

use std::collections::BTreeMap;

use super::*;
use crate::breaker::{BreakerConfig, RampStep, Trip};
use crate::limits::{DAY_MS, MINUTE_MS};
use crate::protocol::Tally;
use crate::rng::XorShift;

const T0: u64 = 19_000 * DAY_MS + 3_600_000;
const RPM: u64 = 30;
const MAX_CONCURRENT: u32 = 6;

fn limits() -> Limits {
    Limits {
        rpm: Some(RPM),
        tpm: Some(40_000),
        input_tpm: Some(15_000),
        rpd: Some(2_000),
        max_concurrent: Some(MAX_CONCURRENT),
        breaker: BreakerConfig {
            trip: Trip::Consecutive { failures: 4 },
            open_ms: 3_000,
            ramp: vec![RampStep { pct: 50, ms: 2_000 }],
            enabled: true,
        },
        reservation_ttl_ms: 20_000,
        ..Limits::default()
    }
}

fn random_outcome(rng: &mut XorShift) -> Outcome {
    match rng.below(1_000) {
        0..=699 => Outcome::Success,
        700..=849 => Outcome::Failure,
        850..=919 => Outcome::RateLimited { retry_after_ms: (rng.below(2) == 0).then(|| rng.below(3_000)) },
        920..=996 => Outcome::Neutral,
        _ => Outcome::QuotaExhausted,
    }
}

fn random_signals(rng: &mut XorShift) -> UpstreamSignals {
    if rng.below(5) > 0 {
        return UpstreamSignals::default();
    }
    UpstreamSignals {
        // Request clamps are left out: they would hide an over-admission from the RPM check.
        remaining_tokens: Some(rng.below(5_000)),
        reset_tokens_ms: Some(rng.below(70_000)),
        ..UpstreamSignals::default()
    }
}

#[derive(Default)]
struct Seen {
    admitted: usize,
    queued: usize,
    codes: BTreeMap<&'static str, usize>,
}

/// Returns the start times of every admission.
fn run(seed: u64, seen: &mut Seen) -> Vec<u64> {
    let mut quota = limits();
    quota.quota_pause_ms = 5_000;
    let mut rng = XorShift::new(seed);
    let mut s = LimiterState::new(quota, T0);
    let mut now = T0;
    let mut starts = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for step in 0..3_000u64 {
        now += rng.below(400);
        match rng.below(10) {
            0..=5 => {
                let max_wait_ms = rng.below(4) * 1_000;
                let req = AdmitRequest {
                    id: format!("r{step}"),
                    limits: None,
                    estimate: TokenUsage { input: rng.below(600), output: rng.below(400) },
                    max_wait_ms,
                    lease: None,
                    tally: Tally::default(),
                    tenant: None,
                };
                let mut before = s.clone();
                let before_status = before.status(now);
                match s.admit(&req, now, rng.next_u64()) {
                    AdmitDecision::Admitted { start_after_ms, .. } => {
                        assert!(start_after_ms <= max_wait_ms);
                        seen.admitted += 1;
                        seen.queued += usize::from(start_after_ms > 0);
                        starts.push(now + start_after_ms);
                        open.push(req.id);
                    }
                    AdmitDecision::Rejected { code, .. } => {
                        *seen.codes.entry(code.as_str()).or_default() += 1;
                        let after = s.status(now);
                        assert_eq!(after.buckets, before_status.buckets, "a refusal took something ({code:?})");
                        assert_eq!(after.in_flight, before_status.in_flight);
                    }
                }
            }
            6..=8 if !open.is_empty() => {
                let id = open.swap_remove(rng.below(open.len() as u64) as usize);
                let usage = (rng.below(3) > 0).then(|| TokenUsage { input: rng.below(800), output: rng.below(500) });
                let req = SettleRequest {
                    id,
                    outcome: random_outcome(&mut rng),
                    usage,
                    signals: random_signals(&mut rng),
                    tally: Tally::default(),
                };
                s.settle(&req, now);
                assert_eq!(s.settle(&req, now).reservation, SettleMatch::Duplicate);
            }
            _ => {
                let req = SettleRequest {
                    id: format!("ghost{step}"),
                    outcome: random_outcome(&mut rng),
                    usage: None,
                    signals: random_signals(&mut rng),
                    tally: Tally::default(),
                };
                assert_eq!(s.settle(&req, now).reservation, SettleMatch::Unknown);
            }
        }

        check_invariants(&mut s, now, step);
    }
    starts
}

/// What must hold after every step; every 97th step also reloads from the snapshot.
fn check_invariants(s: &mut LimiterState, now: u64, step: u64) {
    let status = s.status(now);
    assert!(status.in_flight <= u64::from(MAX_CONCURRENT));
    for b in status.buckets.values() {
        assert!(b.available <= b.capacity as i64);
    }
    let probes: Vec<&str> = s.reservations().live().filter(|(_, r)| r.probe).map(|(id, _)| id).collect();
    assert!(probes.len() <= 1, "two probes in flight: {probes:?}");
    if let Some(id) = probes.first() {
        assert_eq!(status.breaker.state, BreakerState::HalfOpen);
        assert_eq!(status.breaker.probe.as_deref(), Some(*id));
    }

    if step.is_multiple_of(97) {
        // A restart from the snapshot changes nothing.
        let text = s.to_snapshot();
        *s = LimiterState::from_snapshot(&text).unwrap();
        assert_eq!(s.to_snapshot(), text);
    }
}

#[test]
fn random_traffic_keeps_invariants() {
    let mut seen = Seen::default();
    for seed in 0..12 {
        let mut starts = run(seed, &mut seen);
        starts.sort_unstable();
        // Replayed at their start times, the admissions must fit a reference RPM bucket that
        // starts full (which bounds every window: a full bucket plus the window's refill).
        let (full, mut level, mut at) = (RPM * MINUTE_MS, (RPM * MINUTE_MS) as i64, T0);
        for (i, &start) in starts.iter().enumerate() {
            level = (level + ((start - at) * RPM) as i64).min(full as i64) - MINUTE_MS as i64;
            at = start;
            assert!(level >= 0, "seed {seed}: start #{i} at {start} exceeds the rate");
        }
    }
    // The run must have exercised the interesting paths.
    eprintln!("admitted {} queued {} refused {:?}", seen.admitted, seen.queued, seen.codes);
    assert!(seen.admitted > 500, "{} admitted", seen.admitted);
    assert!(seen.queued > 50, "{} queued", seen.queued);
    for code in ["rpm", "tpm", "concurrency", "breaker_open", "paused"] {
        assert!(seen.codes.get(code).is_some_and(|&n| n > 0), "never refused for {code}: {:?}", seen.codes);
    }
}
