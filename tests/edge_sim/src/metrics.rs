//! What a run measured, and the table row it becomes.
//!
//! Admissions are counted per millisecond at the time their capacity is used (a local admit at
//! once; an object admit after its place in line). Over-admission is measured against the exact
//! token bucket of the limit: the most that any stretch of time admitted beyond a full bucket
//! plus its refill over that stretch, as a share of the limit (0 means the exact limiter could
//! have admitted the same).

use limiter::Limits;

const MINUTE_MS: usize = 60_000;

#[derive(Debug, Default)]
pub struct Recorder {
    /// Reservations the object still held a minute after the last arrival (every request has
    /// ended by then, so each is a settle that never arrived).
    pub unsettled_after_end: Option<usize>,
    /// Requests and real tokens of admissions, per millisecond of use.
    pub used_requests: Vec<u32>,
    pub used_tokens: Vec<u64>,
    pub requests: u64,
    pub local: u64,
    pub via_object: u64,
    pub refused: u64,
    /// Refused while other isolates' slices held unused room for the request.
    pub false_refused: u64,
    /// Admitted without the object because it could not be reached.
    pub fail_open: u64,
    /// Calls the object shed, overloaded.
    pub overloaded: u64,
    /// Added latency of requests that waited for the object (ms).
    pub waited_ms: Vec<u32>,
    /// Time each call spent in the object's queue (µs).
    pub queue_us: Vec<u32>,
    /// Calls the object answered, per second.
    pub calls_per_s: Vec<u32>,
    pub estimated_tokens: u64,
    pub real_tokens: u64,
    /// Requests and real tokens the isolates would send, per second of arrival.
    pub offered_requests: Vec<u32>,
    pub offered_tokens: Vec<u64>,
}

impl Recorder {
    pub fn new(duration_s: u64) -> Self {
        // Room for uses after the end (places in line) up to a minute.
        let ms = (duration_s as usize + 61) * 1_000;
        let seconds = duration_s as usize + 61;
        Recorder {
            used_requests: vec![0; ms],
            used_tokens: vec![0; ms],
            calls_per_s: vec![0; seconds],
            offered_requests: vec![0; seconds],
            offered_tokens: vec![0; seconds],
            ..Recorder::default()
        }
    }

    pub fn used(&mut self, at_ms: u64, tokens: u64) {
        let i = (at_ms as usize).min(self.used_requests.len() - 1);
        self.used_requests[i] += 1;
        self.used_tokens[i] += tokens;
    }

    pub fn offered(&mut self, at_ms: u64, tokens: u64) {
        let i = (at_ms as usize / 1_000).min(self.offered_requests.len() - 1);
        self.offered_requests[i] += 1;
        self.offered_tokens[i] += tokens;
    }

    pub fn call(&mut self, at_ms: u64, queued_us: u64) {
        let i = (at_ms as usize / 1_000).min(self.calls_per_s.len() - 1);
        self.calls_per_s[i] += 1;
        self.queue_us.push(queued_us.min(u32::MAX as u64) as u32);
    }
}

/// One scenario's results.
#[derive(Debug, Clone)]
pub struct Report {
    pub name: &'static str,
    /// What the limit is measured in: "rpm" or "tpm".
    pub unit: &'static str,
    pub limit: u64,
    pub isolates: usize,
    pub requests: u64,
    /// Offered load after warm-up, % of the limit.
    pub offered_pct: f64,
    /// Over-admission beyond the exact bucket, % of the limit: worst, and p99 of each second's worst.
    pub over_max_pct: f64,
    pub over_p99_pct: f64,
    /// Admitted in a sliding minute, % of the limit: worst and p99 (after warm-up).
    pub window_max_pct: f64,
    pub window_p99_pct: f64,
    pub utilisation_pct: f64,
    pub refused_pct: f64,
    pub false_refused_pct: f64,
    pub local_pct: f64,
    pub fail_open: u64,
    pub overloaded: u64,
    pub calls_mean_per_s: f64,
    pub calls_peak_per_s: u32,
    /// The peak in the warm-up (every isolate starts cold).
    pub calls_start_peak_per_s: u32,
    pub queue_p50_ms: f64,
    pub queue_p99_ms: f64,
    pub waited_pct: f64,
    pub waited_p50_ms: u32,
    pub waited_p99_ms: u32,
    /// Estimated over real tokens, all requests.
    pub estimate_ratio: f64,
}

impl Report {
    pub fn of(
        name: &'static str,
        rec: &mut Recorder,
        limits: &Limits,
        isolates: usize,
        duration_s: u64,
        warmup_s: u64,
    ) -> Self {
        let (unit, limit, used, offered): (_, _, Vec<u64>, Vec<u64>) = match limits.rpm {
            Some(rpm) => (
                "rpm",
                rpm,
                rec.used_requests.iter().map(|&n| n as u64).collect(),
                rec.offered_requests.iter().map(|&n| n as u64).collect(),
            ),
            // The breaker only: nothing to measure admissions against.
            None if limits.tpm.is_none() => {
                ("none", u64::MAX, vec![0; rec.used_requests.len()], vec![0; rec.offered_requests.len()])
            }
            None => ("tpm", limits.tpm.unwrap_or(u64::MAX), rec.used_tokens.clone(), rec.offered_tokens.clone()),
        };
        let (over_max, over_p99) = over_admission(&used, limit);
        let (window_max, window_p99) = windows(&used, warmup_s as usize, duration_s as usize);
        let measured_min = (duration_s - warmup_s) as f64 / 60.0;
        let span =
            |v: &[u64], per: usize| v[warmup_s as usize * per..duration_s as usize * per].iter().sum::<u64>() as f64;
        let pct = |n: u64| 100.0 * n as f64 / rec.requests.max(1) as f64;
        let steady = &rec.calls_per_s[warmup_s as usize..duration_s as usize];
        Report {
            name,
            unit,
            limit,
            isolates,
            requests: rec.requests,
            offered_pct: 100.0 * span(&offered, 1) / (limit as f64 * measured_min),
            over_max_pct: 100.0 * over_max / limit as f64,
            over_p99_pct: 100.0 * over_p99 / limit as f64,
            window_max_pct: 100.0 * window_max as f64 / limit as f64,
            window_p99_pct: 100.0 * window_p99 as f64 / limit as f64,
            utilisation_pct: 100.0 * span(&used, 1_000) / (limit as f64 * measured_min),
            refused_pct: pct(rec.refused),
            false_refused_pct: pct(rec.false_refused),
            local_pct: pct(rec.local),
            fail_open: rec.fail_open,
            overloaded: rec.overloaded,
            calls_mean_per_s: steady.iter().map(|&n| n as f64).sum::<f64>() / steady.len().max(1) as f64,
            calls_peak_per_s: steady.iter().copied().max().unwrap_or(0),
            calls_start_peak_per_s: rec.calls_per_s[..warmup_s as usize].iter().copied().max().unwrap_or(0),
            queue_p50_ms: percentile(&mut rec.queue_us, 50.0) as f64 / 1_000.0,
            queue_p99_ms: percentile(&mut rec.queue_us, 99.0) as f64 / 1_000.0,
            waited_pct: pct(rec.waited_ms.len() as u64),
            waited_p50_ms: percentile(&mut rec.waited_ms, 50.0),
            waited_p99_ms: percentile(&mut rec.waited_ms, 99.0),
            estimate_ratio: rec.estimated_tokens as f64 / rec.real_tokens.max(1) as f64,
        }
    }

    pub const HEADER: &'static str = "| scenario | limit | isolates | requests | offered | over-admission max / p99 | minute max / p99 | utilisation | refused (false) | local | object calls/s mean / peak (cold start) | queue p50 / p99 | waited | added p50 / p99 | est/real | fail-open / shed |\n\
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

    pub fn row(&self) -> String {
        // Against a limit: its size, and what was offered, admitted and used of it.
        let (limit, offered, over, minute, utilisation) = if self.unit == "none" {
            let dash = || "—".to_string();
            ("breaker only".to_string(), dash(), dash(), dash(), dash())
        } else {
            (
                format!("{} {}", group(self.limit), self.unit),
                format!("{:.0}%", self.offered_pct),
                format!("{:.2}% / {:.2}%", self.over_max_pct, self.over_p99_pct),
                format!("{:.1}% / {:.1}%", self.window_max_pct, self.window_p99_pct),
                format!("{:.1}%", self.utilisation_pct),
            )
        };
        format!(
            "| {} | {limit} | {} | {} | {offered} | {over} | {minute} | {utilisation} | {:.2}% ({:.2}%) | {:.1}% | {:.0} / {} ({}) | {:.2} / {:.2} ms | {:.2}% | {} / {} ms | {:.1} | {} / {} |",
            self.name,
            self.isolates,
            group(self.requests),
            self.refused_pct,
            self.false_refused_pct,
            self.local_pct,
            self.calls_mean_per_s,
            self.calls_peak_per_s,
            self.calls_start_peak_per_s,
            self.queue_p50_ms,
            self.queue_p99_ms,
            self.waited_pct,
            self.waited_p50_ms,
            self.waited_p99_ms,
            self.estimate_ratio,
            group(self.fail_open),
            group(self.overloaded),
        )
    }
}

/// The worst excess over the exact bucket, and the p99 of each second's worst: Lindley's
/// recursion over the uses (the backlog of a server draining `limit` per minute), less a full bucket.
fn over_admission(used: &[u64], limit: u64) -> (f64, f64) {
    let per_ms = limit as f64 / MINUTE_MS as f64;
    let (mut backlog, mut worst) = (0.0f64, 0.0f64);
    let mut seconds = Vec::with_capacity(used.len() / 1_000 + 1);
    let mut this_second = 0.0f64;
    for (ms, &n) in used.iter().enumerate() {
        backlog = (backlog - per_ms).max(0.0) + n as f64;
        let over = (backlog - limit as f64).max(0.0);
        worst = worst.max(over);
        this_second = this_second.max(over);
        if ms % 1_000 == 999 {
            seconds.push((this_second * 1_000.0) as u64);
            this_second = 0.0;
        }
    }
    (worst, percentile(&mut seconds, 99.0) as f64 / 1_000.0)
}

/// Admitted per sliding minute (1 s steps), from `warmup_s` to the run's end.
fn windows(used: &[u64], warmup_s: usize, duration_s: usize) -> (u64, u64) {
    let per_second: Vec<u64> = used.chunks(1_000).map(|c| c.iter().sum()).collect();
    let mut sums: Vec<u64> =
        (warmup_s..duration_s.saturating_sub(59)).map(|s| per_second[s..s + 60].iter().sum()).collect();
    if sums.is_empty() {
        return (0, 0);
    }
    let max = sums.iter().copied().max().unwrap_or(0);
    (max, percentile(&mut sums, 99.0))
}

pub fn percentile<T: Copy + Ord + Default>(values: &mut [T], pct: f64) -> T {
    if values.is_empty() {
        return T::default();
    }
    let k = (((values.len() - 1) as f64) * pct / 100.0).round() as usize;
    *values.select_nth_unstable(k).1
}

pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_that_holds_exactly_shows_no_excess() {
        // A full bucket of 60 at once, then one a second: exactly what RPM 60 allows.
        let mut used = vec![0u64; 180_000];
        used[0] = 60;
        for s in 1..180 {
            used[s * 1_000] = 1;
        }
        assert!(over_admission(&used, 60).0 < 1e-6);
        used[1] = 3;
        assert!((over_admission(&used, 60).0 - 3.0).abs() < 0.01);
    }

    #[test]
    fn windows_count_a_minute() {
        let used = vec![1u64; 180_000];
        assert_eq!(windows(&used, 60, 180), (60_000, 60_000));
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(group(1_234_567), "1,234,567");
        assert_eq!(group(12), "12");
    }
}
