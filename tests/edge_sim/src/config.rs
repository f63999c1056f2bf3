//! What one simulated run is: the edge (locations, isolates, round trips), the traffic, the
//! deployment's limits and the faults.

use limiter::Limits;

#[derive(Debug, Clone)]
pub struct Config {
    pub name: &'static str,
    pub seed: u64,
    pub locations: usize,
    pub isolates_per_location: usize,
    /// Mean life of an isolate; it then retires (takes no new requests, finishes its work) and a
    /// fresh one takes its place.
    pub isolate_life_s: f64,
    /// Offered requests per second, all locations together (bursts come on top).
    pub rate_per_s: f64,
    /// Requests per arrival: 1 is Poisson; more is bursty (an agent's or a page's calls).
    pub batch_mean: f64,
    /// Mean gap between the requests of one batch.
    pub batch_gap_ms: f64,
    /// Location sizes fall off as rank^-zipf (a few large metros, a long tail).
    pub zipf: f64,
    /// Amplitude of the diurnal swing of each location (its phase is its time zone); one
    /// day is compressed into the run, so the mix of busy locations shifts while it runs.
    pub diurnal: f64,
    pub duration_s: u64,
    /// Windows and utilisation are measured after this (the bucket starts full).
    pub warmup_s: u64,
    pub limits: Limits,
    pub tokens: Tokens,
    pub burst: Option<Burst>,
    pub restart_at_s: Option<u64>,
    pub partition: Option<Partition>,
    /// What each request may wait for a place in line (interactive: 1 s).
    pub max_wait_ms: u64,
    /// The object's service time per call (one call at a time).
    pub service_us: u64,
    /// Isolates lease from their location's relay, which leases from the object.
    pub relays: bool,
    /// A call finding this much work queued ahead of it fails at once ("Durable Object is
    /// overloaded"); the isolate treats it as unreachable.
    pub overload_ms: u64,
}

/// Request sizes (log-normal, heavy-tailed) and how the gateway estimates them.
#[derive(Debug, Clone, Copy)]
pub struct Tokens {
    pub input_median: f64,
    pub input_sigma: f64,
    pub output_median: f64,
    pub output_sigma: f64,
    /// The client's `max_tokens`: caps the real output.
    pub max_tokens: u64,
    pub estimate: Estimate,
}

/// How the reserved output is estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimate {
    /// The client's `max_tokens` (chat completions door).
    MaxTokens,
    /// The isolate's learned output history (Messages door, `usage::output_history`).
    Learned,
}

/// One location's rate multiplied by `factor` from `from_s` to `to_s`.
#[derive(Debug, Clone, Copy)]
pub struct Burst {
    pub location: usize,
    pub factor: f64,
    pub from_s: u64,
    pub to_s: u64,
}

/// One location cannot reach the object from `from_s` to `to_s`; its calls fail after `fail_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Partition {
    pub location: usize,
    pub from_s: u64,
    pub to_s: u64,
    pub fail_ms: u64,
}

impl Config {
    pub fn named(self, name: &'static str) -> Self {
        Config { name, ..self }
    }
}
