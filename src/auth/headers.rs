//! The gateway's numeric request headers (`x-gateway-timeout-ms`, `x-gateway-max-wait-ms`,
//! `x-gateway-cache-ttl`), read strictly: a value the gateway cannot honour is a 400 naming the
//! header, never silently ignored (a `0` deadline used to become 1 ms and blame the vendor).

use crate::http::codes;
use crate::http::error::ApiError;

pub const TIMEOUT_MS: &str = "x-gateway-timeout-ms";
pub const MAX_WAIT_MS: &str = "x-gateway-max-wait-ms";
pub const CACHE_TTL: &str = "x-gateway-cache-ttl";

/// The numeric headers of one request, each already checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NumericHeaders {
    /// The client's deadline, at least 1 ms (the route's `max_timeout_ms` still bounds it).
    pub timeout_ms: Option<u64>,
    /// How long to wait for a limiter's capacity; 0 means refuse at once.
    pub max_wait_ms: Option<u64>,
    /// Seconds to keep a cached answer, at least 1 (the route's `max_ttl_s` still bounds it).
    pub cache_ttl_s: Option<u64>,
}

impl NumericHeaders {
    /// Reads the headers through `header` (name → value as sent).
    pub fn read(header: impl Fn(&str) -> Option<String>) -> Result<Self, ApiError> {
        Ok(NumericHeaders {
            timeout_ms: whole_number(TIMEOUT_MS, header(TIMEOUT_MS).as_deref(), 1)?,
            max_wait_ms: whole_number(MAX_WAIT_MS, header(MAX_WAIT_MS).as_deref(), 0)?,
            cache_ttl_s: whole_number(CACHE_TTL, header(CACHE_TTL).as_deref(), 1)?,
        })
    }
}

/// A header holding a whole number of at least `min`; absent is `None`, anything else a 400.
fn whole_number(name: &str, value: Option<&str>, min: u64) -> Result<Option<u64>, ApiError> {
    let Some(raw) = value else { return Ok(None) };
    let text = raw.trim();
    let parsed = if text.bytes().all(|b| b.is_ascii_digit()) { text.parse::<u64>().ok() } else { None };
    match parsed {
        Some(n) if n >= min => Ok(Some(n)),
        _ => Err(invalid(name, raw, min)),
    }
}

fn invalid(name: &str, raw: &str, min: u64) -> ApiError {
    let shown: String = raw.chars().take(40).collect();
    ApiError::invalid_request(
        codes::INVALID_HEADER,
        format!("Invalid value for header '{name}': '{shown}'. Expected a whole number from {min} to {}.", u64::MAX),
    )
    .with_param(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<NumericHeaders, ApiError> {
        NumericHeaders::read(|name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn good_values_are_read() {
        assert_eq!(read(&[]).unwrap(), NumericHeaders::default());
        let h = read(&[(TIMEOUT_MS, " 2500 "), (MAX_WAIT_MS, "0"), (CACHE_TTL, "60")]).unwrap();
        assert_eq!((h.timeout_ms, h.max_wait_ms, h.cache_ttl_s), (Some(2500), Some(0), Some(60)));
        assert_eq!(read(&[(TIMEOUT_MS, &u64::MAX.to_string())]).unwrap().timeout_ms, Some(u64::MAX));
    }

    #[test]
    fn bad_values_name_their_header() {
        for (name, value) in [
            (TIMEOUT_MS, "0"),
            (TIMEOUT_MS, "-5"),
            (TIMEOUT_MS, "1.5"),
            (TIMEOUT_MS, "soon"),
            (TIMEOUT_MS, ""),
            (TIMEOUT_MS, "+100"),
            (TIMEOUT_MS, "1e3"),
            (TIMEOUT_MS, "99999999999999999999999"),
            (MAX_WAIT_MS, "-1"),
            (MAX_WAIT_MS, "later"),
            (CACHE_TTL, "0"),
            (CACHE_TTL, "1h"),
        ] {
            let err = read(&[(name, value)]).unwrap_err();
            assert_eq!((err.status, err.code.as_str()), (400, codes::INVALID_HEADER), "{name}: {value}");
            assert_eq!(err.param.as_deref(), Some(name));
            assert!(err.message.contains(name), "{}", err.message);
        }
    }

    #[test]
    fn a_long_value_is_not_echoed_whole() {
        let err = read(&[(CACHE_TTL, &"x".repeat(10_000))]).unwrap_err();
        assert!(err.message.len() < 200, "{}", err.message.len());
    }
}
