//! What deployments have lately returned, per door, so a reservation can expect that instead of
//! the client's `max_tokens` (agents ask for 32,000 on every call and use a few hundred).
//!
//! A running average of served attempts' output tokens per (deployment, ingress), kept per isolate
//! and fed by every usage report but token counts'. The estimate is `1.5 × average + 64`, at least
//! 256, capped by the request's `max_tokens`; with no history yet it is `min(max_tokens, 4096)`.
//! It only sizes the reservation: the limiter is settled with the vendor's usage after every call.
//! The over-admission this allows is bounded in docs/limiter.md ("Output estimates for agents").

use crate::canonical::usage::Usage;
use crate::config::routes::Deployment;
use crate::usage::record::{Ingress, RequestOutcome};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// Output reserved while a (deployment, ingress) has no history.
pub const COLD_START_OUTPUT: u64 = 4096;
/// The smallest output reserved once there is history.
pub const MIN_OUTPUT: u64 = 256;
/// Keys kept per isolate; past this, new keys are not learned (their estimate stays cold).
const MAX_KEYS: usize = 4096;
/// Weight of the newest sample, in 1/SCALE (1/5: about the last ten calls matter).
const ALPHA_NUM: u64 = 1;
const ALPHA_DEN: u64 = 5;

#[derive(Debug, Default)]
pub struct OutputHistory {
    /// Running average of output tokens × 1000, and how many samples fed it.
    averages: BTreeMap<(String, u8), (u64, u64)>,
}

impl OutputHistory {
    pub fn record(&mut self, deployment: &str, ingress: Ingress, output: u64) {
        let key = (deployment.to_string(), ingress as u8);
        if !self.averages.contains_key(&key) && self.averages.len() >= MAX_KEYS {
            return;
        }
        let sample = output.saturating_mul(1000);
        let (mean, n) = self.averages.entry(key).or_insert((sample, 0));
        if *n > 0 {
            // mean += α (sample − mean), in integers.
            *mean = if sample >= *mean {
                *mean + (sample - *mean) * ALPHA_NUM / ALPHA_DEN
            } else {
                *mean - (*mean - sample) * ALPHA_NUM / ALPHA_DEN
            };
        }
        *n += 1;
    }

    /// The output to reserve on `deployment` for a request allowing `max_tokens`.
    pub fn estimate(&self, deployment: &str, ingress: Ingress, max_tokens: u64) -> u64 {
        let learned = match self.averages.get(&(deployment.to_string(), ingress as u8)) {
            Some((mean, _)) => (mean.div_ceil(1000).saturating_mul(3) / 2 + 64).max(MIN_OUTPUT),
            None => COLD_START_OUTPUT,
        };
        learned.min(max_tokens)
    }
}

thread_local! {
    static HISTORY: RefCell<OutputHistory> = RefCell::new(OutputHistory::default());
}

/// Learns from a finished request: every served attempt that reported usage.
pub fn record(outcome: &RequestOutcome) {
    HISTORY.with(|h| {
        let mut h = h.borrow_mut();
        for a in outcome.attempts.iter().filter(|a| a.served) {
            if let Some(output) = a.usage.as_ref().and_then(sample) {
                h.record(&a.deployment, outcome.ingress, output);
            }
        }
    });
}

/// The output size an attempt's usage teaches; none from a token count (`count_tokens`), which
/// reports no tokens either way and would drag the average towards nothing.
fn sample(usage: &Usage) -> Option<u64> {
    (usage.input > 0 || usage.output > 0).then_some(usage.output)
}

/// The output to reserve for a request that may go to any deployment of `chain`: the largest of
/// their estimates (the reservation is made with whichever deployment takes it).
pub fn estimate(chain: &[(&str, &Deployment)], ingress: Ingress, max_tokens: u64) -> u64 {
    HISTORY.with(|h| {
        let h = h.borrow();
        chain
            .iter()
            .map(|(id, _)| h.estimate(id, ingress, max_tokens))
            .max()
            .unwrap_or(max_tokens.min(COLD_START_OUTPUT))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_then_learned_and_capped() {
        let mut h = OutputHistory::default();
        assert_eq!(h.estimate("an", Ingress::Messages, 32_000), COLD_START_OUTPUT);
        assert_eq!(h.estimate("an", Ingress::Messages, 1_000), 1_000, "max_tokens caps the cold start");
        h.record("an", Ingress::Messages, 400);
        assert_eq!(h.estimate("an", Ingress::Messages, 32_000), 400 * 3 / 2 + 64);
        assert_eq!(h.estimate("an", Ingress::Messages, 500), 500);
        assert_eq!(h.estimate("an", Ingress::ChatCompletions, 32_000), COLD_START_OUTPUT, "per ingress");
        assert_eq!(h.estimate("other", Ingress::Messages, 32_000), COLD_START_OUTPUT, "per deployment");
        h.record("tiny", Ingress::Messages, 3);
        assert_eq!(h.estimate("tiny", Ingress::Messages, 32_000), MIN_OUTPUT);
    }

    #[test]
    fn running_average_follows_recent_calls() {
        let mut h = OutputHistory::default();
        for _ in 0..50 {
            h.record("an", Ingress::Messages, 100);
        }
        for _ in 0..30 {
            h.record("an", Ingress::Messages, 2_000);
        }
        let e = h.estimate("an", Ingress::Messages, 32_000);
        assert!((2_950..=3_064).contains(&e), "{e}");
        h.record("an", Ingress::Messages, 0);
        assert!(h.estimate("an", Ingress::Messages, 32_000) < e);
    }

    #[test]
    fn token_counts_teach_nothing() {
        assert_eq!(sample(&Usage::default()), None);
        assert_eq!(sample(&Usage { input: 12, ..Default::default() }), Some(0));
        assert_eq!(sample(&Usage { input: 12, output: 30, ..Default::default() }), Some(30));
    }

    #[test]
    fn keys_are_bounded_and_huge_counts_do_not_overflow() {
        let mut h = OutputHistory::default();
        for i in 0..MAX_KEYS + 10 {
            h.record(&format!("d{i}"), Ingress::Messages, 10);
        }
        assert_eq!(h.averages.len(), MAX_KEYS);
        h.record("d0", Ingress::Messages, u64::MAX);
        assert_eq!(h.estimate("d0", Ingress::Messages, 32_000), 32_000);
    }
}
