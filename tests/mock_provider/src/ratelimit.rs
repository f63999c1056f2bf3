//! Rate-limit and retry-after headers in each vendor's documented format.

use crate::fault::{Faults, Key};

pub const DEFAULT_LIMIT_REQUESTS: u64 = 500;
pub const DEFAULT_LIMIT_TOKENS: u64 = 200_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub limit_requests: u64,
    pub remaining_requests: u64,
    pub limit_tokens: u64,
    pub remaining_tokens: u64,
    pub reset_ms: u64,
}

impl RateLimit {
    /// Headers go on every 429, and on any response once an override key is set.
    pub fn for_response(f: &Faults, status: u16) -> Option<RateLimit> {
        let limited = status == 429;
        if !limited && !f.wants_rate_limit_headers() {
            return None;
        }
        let limit_requests = f.get(Key::LimitRequests).unwrap_or(DEFAULT_LIMIT_REQUESTS);
        let limit_tokens = f.get(Key::LimitTokens).unwrap_or(DEFAULT_LIMIT_TOKENS);
        let default_remaining = if limited { 0 } else { limit_requests.saturating_sub(1) };
        let default_reset = if limited { retry_after_secs(f, status).unwrap_or(1) * 1000 } else { 1000 };
        Some(RateLimit {
            limit_requests,
            remaining_requests: f.get(Key::RemainingRequests).unwrap_or(default_remaining),
            limit_tokens,
            remaining_tokens: f.get(Key::RemainingTokens).unwrap_or(limit_tokens),
            reset_ms: f.get(Key::ResetMs).unwrap_or(default_reset),
        })
    }

    pub fn openai_headers(&self) -> Vec<(String, String)> {
        let reset = go_duration(self.reset_ms);
        vec![
            h("x-ratelimit-limit-requests", self.limit_requests),
            h("x-ratelimit-remaining-requests", self.remaining_requests),
            h("x-ratelimit-reset-requests", &reset),
            h("x-ratelimit-limit-tokens", self.limit_tokens),
            h("x-ratelimit-remaining-tokens", self.remaining_tokens),
            h("x-ratelimit-reset-tokens", &reset),
        ]
    }

    pub fn anthropic_headers(&self, now_ms: u64) -> Vec<(String, String)> {
        let reset = rfc3339(now_ms + self.reset_ms);
        vec![
            h("anthropic-ratelimit-requests-limit", self.limit_requests),
            h("anthropic-ratelimit-requests-remaining", self.remaining_requests),
            h("anthropic-ratelimit-requests-reset", &reset),
            h("anthropic-ratelimit-tokens-limit", self.limit_tokens),
            h("anthropic-ratelimit-tokens-remaining", self.remaining_tokens),
            h("anthropic-ratelimit-tokens-reset", &reset),
        ]
    }
}

/// Every 429 gets `retry-after` (default 1 s); other errors only when asked for.
pub fn retry_after_secs(f: &Faults, status: u16) -> Option<u64> {
    match status {
        429 => Some(f.get(Key::RetryAfter).unwrap_or(1)),
        400.. => f.get(Key::RetryAfter),
        _ => None,
    }
}

fn h(name: &str, value: impl ToString) -> (String, String) {
    (name.to_string(), value.to_string())
}

/// Go-style duration as OpenAI sends it: `17ms`, `1s`, `1.5s`, `6m0s`, `1h0m0s`.
pub fn go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (hours, minutes) = (ms / 3_600_000, ms / 60_000 % 60);
    let secs_ms = ms % 60_000;
    let secs = if secs_ms.is_multiple_of(1000) {
        format!("{}", secs_ms / 1000)
    } else {
        let frac = format!("{:03}", secs_ms % 1000);
        format!("{}.{}", secs_ms / 1000, frac.trim_end_matches('0'))
    };
    match (hours, minutes) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// RFC 3339 UTC timestamp with second precision, e.g. `2024-05-01T12:00:03Z`.
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(17), "17ms");
        assert_eq!(go_duration(1000), "1s");
        assert_eq!(go_duration(1500), "1.5s");
        assert_eq!(go_duration(360_000), "6m0s");
        assert_eq!(go_duration(90_250), "1m30.25s");
        assert_eq!(go_duration(3_600_000), "1h0m0s");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_714_564_803_999), "2024-05-01T12:00:03Z");
    }

    #[test]
    fn defaults_on_429() {
        let f = Faults::parse("retry_after=2", ',').unwrap();
        let rl = RateLimit::for_response(&f, 429).unwrap();
        assert_eq!(rl.remaining_requests, 0);
        assert_eq!(rl.reset_ms, 2000);
        assert_eq!(retry_after_secs(&f, 429), Some(2));
        assert_eq!(retry_after_secs(&Faults::default(), 429), Some(1));
        assert_eq!(retry_after_secs(&Faults::default(), 503), None);
        assert_eq!(retry_after_secs(&f, 200), None);
    }

    #[test]
    fn overrides_reach_successful_responses() {
        assert!(RateLimit::for_response(&Faults::default(), 200).is_none());
        let f = Faults::parse("remaining_requests=3,reset_ms=1500", ',').unwrap();
        let rl = RateLimit::for_response(&f, 200).unwrap();
        let headers = rl.openai_headers();
        assert!(headers.contains(&h("x-ratelimit-remaining-requests", 3)));
        assert!(headers.contains(&h("x-ratelimit-reset-requests", "1.5s")));
        assert!(headers.contains(&h("x-ratelimit-remaining-tokens", DEFAULT_LIMIT_TOKENS)));
        let a = rl.anthropic_headers(0);
        assert!(a.contains(&h("anthropic-ratelimit-requests-remaining", 3)));
        assert!(a.contains(&h("anthropic-ratelimit-tokens-reset", "1970-01-01T00:00:01Z")));
    }
}
