//! Vendor rate-limit headers → the limiter's `UpstreamSignals`.
//!
//! OpenAI: `x-ratelimit-remaining-requests|tokens` and `x-ratelimit-reset-requests|tokens` as
//! durations (`1s`, `6m0s`, `20ms`). Anthropic: `anthropic-ratelimit-requests|tokens-remaining`
//! and `-reset` as RFC 3339 times (converted with the caller's clock).

use limiter::protocol::UpstreamSignals;

/// Parses OpenAI's duration format: a sequence of `<number><unit>` with units h, m, s, ms.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    match duration_prefix(text.trim()) {
        Some((ms, "")) => Some(ms),
        _ => None,
    }
}

/// The longest leading duration (`1m30s`, `120ms`, `1.5s`) and what follows it.
pub fn duration_prefix(text: &str) -> Option<(u64, &str)> {
    let mut total = 0f64;
    let mut rest = text;
    let mut any = false;
    loop {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let Ok(value) = rest[..digits].parse::<f64>() else { break };
        let unit = &rest[digits..];
        let (factor, unit_len) = if unit.starts_with("ms") {
            (1.0, 2)
        } else if unit.starts_with('h') {
            (3_600_000.0, 1)
        } else if unit.starts_with('m') {
            (60_000.0, 1)
        } else if unit.starts_with('s') {
            (1000.0, 1)
        } else {
            break;
        };
        total += value * factor;
        any = true;
        rest = &unit[unit_len..];
    }
    any.then(|| (total.ceil() as u64, rest))
}

/// Every vendor response header the gateway reads (`retry-after` and what `signals` looks up),
/// `\n`-separated: the runtime hands over only these. perf: iterating a vendor's ~20 headers cost
/// ~10 µs per answer, looking up these ~2 µs (measured in workerd).
pub const READ: &str = "retry-after\nx-ratelimit-remaining-requests\nanthropic-ratelimit-requests-remaining\n\
    x-ratelimit-remaining-tokens\nanthropic-ratelimit-tokens-remaining\nx-ratelimit-reset-requests\n\
    anthropic-ratelimit-requests-reset\nx-ratelimit-reset-tokens\nanthropic-ratelimit-tokens-reset";

/// Reads the signals from a header lookup; `retry_after_ms` is filled by the caller's classifier.
pub fn signals<S: AsRef<str>>(header: impl Fn(&str) -> Option<S>, now_ms: u64) -> UpstreamSignals {
    let num = |name: &str| header(name).and_then(|v| v.as_ref().trim().parse::<u64>().ok());
    let anthropic_reset = |name: &str| {
        header(name).and_then(|v| limiter::utc::parse_rfc3339_ms(v.as_ref())).map(|at| at.saturating_sub(now_ms))
    };
    UpstreamSignals {
        retry_after_ms: None,
        remaining_requests: num("x-ratelimit-remaining-requests")
            .or_else(|| num("anthropic-ratelimit-requests-remaining")),
        remaining_tokens: num("x-ratelimit-remaining-tokens").or_else(|| num("anthropic-ratelimit-tokens-remaining")),
        reset_requests_ms: header("x-ratelimit-reset-requests")
            .and_then(|v| parse_duration_ms(v.as_ref()))
            .or_else(|| anthropic_reset("anthropic-ratelimit-requests-reset")),
        reset_tokens_ms: header("x-ratelimit-reset-tokens")
            .and_then(|v| parse_duration_ms(v.as_ref()))
            .or_else(|| anthropic_reset("anthropic-ratelimit-tokens-reset")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_durations() {
        assert_eq!(parse_duration_ms("1s"), Some(1000));
        assert_eq!(parse_duration_ms("6m0s"), Some(360_000));
        assert_eq!(parse_duration_ms("20ms"), Some(20));
        assert_eq!(parse_duration_ms("1h2m3.5s"), Some(3_723_500));
        assert_eq!(parse_duration_ms("0.5s"), Some(500));
        assert_eq!(parse_duration_ms(""), None);
        assert_eq!(parse_duration_ms("5x"), None);
        assert_eq!(parse_duration_ms("s"), None);
    }

    #[test]
    fn every_header_the_signals_read_is_handed_over() {
        let asked = std::cell::RefCell::new(Vec::new());
        signals(
            |name| {
                asked.borrow_mut().push(name.to_string());
                None::<&str>
            },
            0,
        );
        let read: Vec<&str> = READ.split('\n').collect();
        assert_eq!(asked.borrow().len(), 8);
        for name in asked.borrow().iter() {
            assert!(read.contains(&name.as_str()), "{name} is read but not handed over");
        }
        assert!(read.contains(&"retry-after"));
        assert!(read.iter().all(|n| !n.is_empty() && n.trim() == *n && n.to_ascii_lowercase() == *n), "{read:?}");
    }

    #[test]
    fn signals_from_either_vendor() {
        let openai = |n: &str| match n {
            "x-ratelimit-remaining-requests" => Some("3".to_string()),
            "x-ratelimit-reset-tokens" => Some("1m".to_string()),
            _ => None,
        };
        let s = signals(openai, 0);
        assert_eq!((s.remaining_requests, s.remaining_tokens, s.reset_tokens_ms), (Some(3), None, Some(60_000)));
        let anthropic = |n: &str| match n {
            "anthropic-ratelimit-tokens-remaining" => Some("900".to_string()),
            "anthropic-ratelimit-tokens-reset" => Some("1970-01-01T00:00:10Z".to_string()),
            _ => None,
        };
        let s = signals(anthropic, 4_000);
        assert_eq!((s.remaining_tokens, s.reset_tokens_ms), (Some(900), Some(6_000)));
        assert!(signals(|_| None::<&str>, 0).is_empty());
    }
}
