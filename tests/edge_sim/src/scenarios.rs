//! The scenarios of issue 17, at full size (for the docs' table) and small (for `cargo test`).
//! The small ones keep each scenario's shape with fewer isolates and less time.

use limiter::Limits;

use crate::config::{Burst, Config, Estimate, Partition, Tokens};

/// Chat traffic: heavy-tailed prompts and answers, `max_tokens` 1024 reserved for the output.
const CHAT: Tokens = Tokens {
    input_median: 600.0,
    input_sigma: 1.0,
    output_median: 200.0,
    output_sigma: 1.0,
    max_tokens: 1_024,
    estimate: Estimate::MaxTokens,
};

fn base(name: &'static str, seed: u64) -> Config {
    Config {
        name,
        seed,
        locations: 100,
        isolates_per_location: 4,
        // Busy isolates live long; a new deploy recycles them all (every run starts cold).
        isolate_life_s: 600.0,
        rate_per_s: 1_000.0,
        batch_mean: 1.0,
        batch_gap_ms: 0.0,
        zipf: 0.8,
        diurnal: 0.5,
        duration_s: 300,
        warmup_s: 60,
        limits: Limits::default(),
        tokens: CHAT,
        burst: None,
        restart_at_s: None,
        partition: None,
        max_wait_ms: 1_000,
        // ~1,250 decisions a second, as measured on one machine.
        service_us: 800,
        overload_ms: 1_000,
        // SIM_RELAYS=0: isolates lease from the object itself, as before relays.
        relays: std::env::var("SIM_RELAYS").map_or(true, |v| v != "0"),
    }
}

fn rpm(n: u64) -> Limits {
    Limits { rpm: Some(n), ..Limits::default() }
}

/// (a) 50,000 requests a second over 300 locations × 4 isolates, under a limit that allows it.
pub fn scale(seed: u64) -> Config {
    Config {
        locations: 300,
        rate_per_s: 50_000.0,
        zipf: 1.0,
        duration_s: 120,
        limits: Limits { rpm: Some(4_000_000), tpm: Some(10_000_000_000), ..Limits::default() },
        ..base("(a) 50k req/s", seed)
    }
}

/// (a″) (a) with no limit but the default breaker: every isolate leases (the lease only says the
/// breaker is closed), the most common production route.
pub fn breaker_only(seed: u64) -> Config {
    Config { limits: Limits::default(), ..scale(seed) }.named("(a″) 50k req/s, breaker only")
}

/// (b) RPM 600 spread over 200 isolates, offered 95 % of it in bursts (an agent's calls).
pub fn thin(seed: u64) -> Config {
    Config {
        locations: 50,
        rate_per_s: 570.0 / 60.0,
        batch_mean: 4.0,
        batch_gap_ms: 300.0,
        zipf: 0.5,
        duration_s: 900,
        limits: rpm(600),
        ..base("(b) RPM 600 / 200 isolates", seed)
    }
}

/// (c) One location (the busiest) goes 10× for two minutes, pushing the deployment past its
/// limit (the bucket, a minute's worth, runs dry near the end).
pub fn burst(seed: u64) -> Config {
    Config {
        rate_per_s: 360.0,
        batch_mean: 2.0,
        batch_gap_ms: 100.0,
        limits: rpm(24_000),
        burst: Some(Burst { location: 0, factor: 10.0, from_s: 60, to_s: 180 }),
        ..base("(c) 10× burst in one location", seed)
    }
}

/// (d) Offered 1.5× the limit (the bucket is dry after two minutes); the object restarts from
/// its last write at 120 s, and location 1 cannot reach it from 180 s to 210 s (its calls fail
/// after a second; the gateway fails open).
pub fn faults(seed: u64) -> Config {
    Config {
        rate_per_s: 600.0,
        limits: rpm(24_000),
        restart_at_s: Some(120),
        partition: Some(Partition { location: 1, from_s: 180, to_s: 210, fail_ms: 1_000 }),
        ..base("(d) restart + 30 s partition", seed)
    }
}

/// (e) TPM-bound, estimates 5× the real usage (`max_tokens` 5,600 reserved, ~330 used).
pub fn tokens(seed: u64) -> Config {
    Config {
        rate_per_s: 300.0,
        limits: Limits { tpm: Some(15_000_000), ..Limits::default() },
        tokens: Tokens { max_tokens: 5_600, ..CHAT },
        ..base("(e) TPM, estimates 5× usage", seed)
    }
}

/// (e′) TPM-bound agents asking `max_tokens` 32,000, the output estimate learned per isolate.
pub fn agents(seed: u64) -> Config {
    Config {
        rate_per_s: 300.0,
        limits: Limits { tpm: Some(15_000_000), ..Limits::default() },
        tokens: Tokens { max_tokens: 32_000, estimate: Estimate::Learned, ..CHAT },
        ..base("(e′) TPM, agents, learned estimate", seed)
    }
}

/// (a′) (a) with isolates living two minutes instead of ten: five times the cold starts.
pub fn churn(seed: u64) -> Config {
    Config { isolate_life_s: 120.0, ..scale(seed) }.named("(a′) 50k req/s, 2-min isolates")
}

/// (f) Past the object's ceiling: RPM 60,000 offered 2,000 req/s. At a saturated limit every
/// admission goes through the object (admit and settle), which cannot serve 1,000 a second.
pub fn ceiling(seed: u64) -> Config {
    Config { rate_per_s: 2_000.0, limits: rpm(60_000), ..base("(f) saturated past the object's ceiling", seed) }
}

pub fn full(seed: u64) -> Vec<Config> {
    vec![
        scale(seed),
        churn(seed),
        breaker_only(seed),
        thin(seed),
        burst(seed),
        faults(seed),
        tokens(seed),
        agents(seed),
        ceiling(seed),
    ]
}

/// A small run of `c`: `locations` locations and `duration_s`, the traffic scaled with the
/// locations (the limit too, unless `keep_limit`).
pub fn shrink(c: Config, locations: usize, duration_s: u64, keep_limit: bool) -> Config {
    let f = locations as f64 / c.locations as f64;
    let scale = |n: Option<u64>| n.map(|n| ((n as f64 * f) as u64).max(1));
    let limits = if keep_limit {
        c.limits.clone()
    } else {
        Limits { rpm: scale(c.limits.rpm), tpm: scale(c.limits.tpm), ..c.limits.clone() }
    };
    let rate_per_s = if keep_limit { c.rate_per_s } else { c.rate_per_s * f };
    let at = |s: u64| s * duration_s / c.duration_s;
    Config {
        locations,
        rate_per_s,
        duration_s,
        warmup_s: at(c.warmup_s).max(20),
        limits,
        burst: c.burst.map(|b| Burst { from_s: at(b.from_s), to_s: at(b.to_s), ..b }),
        restart_at_s: c.restart_at_s.map(at),
        partition: c.partition.map(|p| Partition { from_s: at(p.from_s), to_s: at(p.to_s), ..p }),
        ..c
    }
}
