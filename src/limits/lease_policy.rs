//! When an isolate leases and how much: the adaptive part of the lease ledger, tuned on the edge
//! simulation (`tests/edge_sim`, docs/limiter.md "At internet scale").
//!
//! - Lease only for a sustained rate, or a request rate so high that the round trip a lease
//!   saves is worth it at once: a short burst on a small limit would strand a slice that other
//!   isolates' requests are then refused for.
//! - Never fragment a small limit: a slice is at most [`FRAGMENTS`]th of the bucket, and a
//!   bucket too small for even the smallest slice is admitted request by request.
//! - Size a slice from the isolate's own rate, growing with a burst but not beyond twice what
//!   the last second or the last ten seconds show.
//! - Renew ahead of running dry by the round trip this isolate measures, so a slow or busy object
//!   does not leave isolates without a slice (and then flooding it with per-request admits).
//! - Hand back expired slices on their own message only when no ask will carry them soon.
//! - After the object refused for want of room, refuse like requests locally for a short while
//!   ([`HOLD_MAX_MS`]): at a saturated limit every request would otherwise cost a round trip.
//! - After a call failed, fail open without calling for a second ([`UNREACHABLE_BACKOFF_MS`]),
//!   so an overloaded object recovers.

use limiter::limits::{BucketKind, Limits};

/// A lease is asked for at least this many requests (the ledger's `MIN_WANT` is this).
pub const MIN_SLICE: u64 = 4;

/// A slice holds at most this fraction of any request-counting bucket (1/50: a limit of 200
/// requests or fewer is never leased).
pub const FRAGMENTS: u64 = 50;

/// Requests over the last ten seconds from which leasing pays (a slice's life at that rate
/// fills the smallest slice).
pub const SUSTAINED_10S: u64 = 15;

/// Requests within the last second, or the last tenth of one, that show a rate worth leasing
/// for at once (a newly started isolate of a busy deployment).
pub const HOT_SECOND: u64 = 8;
pub const HOT_TENTH: u64 = 3;

/// A limit whose largest slice is at least this is leased from the first request: a stranded
/// slice is nothing to it, and a new isolate of a busy deployment saves its first round trips.
pub const LARGE_SLICE: u64 = 1_000;

/// Renew at least this long before the slices run dry...
pub const MIN_RENEW_AHEAD_MS: u64 = 500;
/// ...and at most this long (a slice's usable life is 2.75 s).
pub const MAX_RENEW_AHEAD_MS: u64 = 1_500;

/// The longest a refusal for want of room is repeated locally.
pub const HOLD_MAX_MS: u64 = 1_000;

/// After a call to the object failed (unreachable, overloaded), requests no slice covers are
/// admitted without calling it for this long (failing open, as the call would): an overloaded
/// object then drains instead of being flooded by per-request admits. Lease asks still go, one
/// at a time, and find out when it is back.
pub const UNREACHABLE_BACKOFF_MS: u64 = 1_000;

/// Counts of this isolate's requests to one deployment (this one included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rates {
    pub tenth: u64,
    pub second: u64,
    pub ten_seconds: u64,
}

/// Whether a lease would serve more than the requests that brought it (`max_slice` as below).
pub fn worth_leasing(r: Rates, max_slice: Option<u64>) -> bool {
    match max_slice {
        None => false,
        Some(n) if n >= LARGE_SLICE => true,
        Some(_) => r.ten_seconds >= SUSTAINED_10S || r.second >= HOT_SECOND || r.tenth >= HOT_TENTH,
    }
}

/// Requests per second to size a slice by: the burst rate, capped at twice the steadier ones.
pub fn sizing_rate(r: Rates) -> u64 {
    let burst = r.second.max(r.tenth * 10);
    let steady = r.second.max(r.ten_seconds.div_ceil(10));
    burst.min(2 * steady)
}

/// The most requests one slice should take from `limits`, or `None` when its request buckets
/// are too small to lease without fragmenting them.
pub fn max_slice(limits: &Limits) -> Option<u64> {
    let smallest = [BucketKind::Rpm, BucketKind::Rpd].iter().filter_map(|k| k.capacity(limits)).min();
    match smallest {
        None => Some(u64::MAX),
        Some(capacity) => Some(capacity / FRAGMENTS).filter(|&n| n >= MIN_SLICE),
    }
}

/// How long before running dry to ask, from the measured round trip of this isolate's asks.
pub fn renew_ahead_ms(round_trip_ms: Option<u64>) -> u64 {
    let rtt = round_trip_ms.unwrap_or(0);
    (2 * rtt + 100).clamp(MIN_RENEW_AHEAD_MS, MAX_RENEW_AHEAD_MS)
}

/// The next round-trip estimate after one more sample (a quarter weight for the newest).
pub fn blend_round_trip(estimate: Option<u64>, sample_ms: u64) -> u64 {
    estimate.map_or(sample_ms, |e| (3 * e + sample_ms).div_ceil(4))
}

/// Whether an expiry must send its own report: nothing else will carry the returns soon.
pub fn report_at_expiry(slices_left: usize, asks_soon: bool) -> bool {
    slices_left == 0 || !asks_soon
}

/// How long to keep refusing locally after the object refused for want of room.
pub fn hold_ms(retry_after_ms: u64) -> u64 {
    retry_after_ms.min(HOLD_MAX_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(tenth: u64, second: u64, ten_seconds: u64) -> Rates {
        Rates { tenth, second, ten_seconds }
    }

    #[test]
    fn a_burst_of_an_agent_is_not_worth_a_lease_a_busy_isolate_is() {
        let slice = Some(12);
        assert!(!worth_leasing(rates(1, 4, 6), slice), "four calls in a second, now and then");
        assert!(!worth_leasing(rates(2, 7, 14), slice));
        assert!(worth_leasing(rates(0, 2, 15), slice), "1.5 a second, sustained");
        assert!(worth_leasing(rates(2, 8, 8), slice), "a new isolate at 8 a second");
        assert!(worth_leasing(rates(3, 3, 3), slice), "three within 100 ms");
        assert!(!worth_leasing(rates(3, 30, 300), None), "a small limit never");
        assert!(worth_leasing(rates(1, 1, 1), Some(LARGE_SLICE)), "a large one from the first request");
    }

    #[test]
    fn slices_grow_with_a_burst_up_to_twice_the_steady_rate() {
        assert_eq!(sizing_rate(rates(3, 20, 100)), 30, "a burst of 30/s on a steady 20/s");
        assert_eq!(sizing_rate(rates(10, 10, 100)), 20, "capped at twice the steady rate");
        assert_eq!(sizing_rate(rates(0, 50, 100)), 50);
        assert_eq!(sizing_rate(rates(0, 0, 30)), 0, "quiet this second: nothing to size");
        assert_eq!(sizing_rate(rates(1, 1, 300)), 10);
    }

    #[test]
    fn small_request_limits_are_not_leased() {
        let limits = |rpm: Option<u64>, rpd: Option<u64>| Limits { rpm, rpd, ..Limits::default() };
        assert_eq!(max_slice(&limits(Some(50), None)), None);
        assert_eq!(max_slice(&limits(Some(199), None)), None);
        assert_eq!(max_slice(&limits(Some(200), None)), Some(4));
        assert_eq!(max_slice(&limits(Some(600), None)), Some(12));
        assert_eq!(max_slice(&limits(Some(100_000), Some(1_000))), Some(20), "the smaller bucket counts");
        assert_eq!(max_slice(&Limits { tpm: Some(1_000), ..Limits::default() }), Some(u64::MAX));
    }

    #[test]
    fn renewal_covers_the_measured_round_trip() {
        assert_eq!(renew_ahead_ms(None), 500);
        assert_eq!(renew_ahead_ms(Some(3)), 500);
        assert_eq!(renew_ahead_ms(Some(300)), 700);
        assert_eq!(renew_ahead_ms(Some(5_000)), 1_500);
        assert_eq!(blend_round_trip(None, 80), 80);
        assert_eq!(blend_round_trip(Some(80), 480), 180);
    }

    #[test]
    fn expiries_report_only_when_no_ask_will_carry_them() {
        assert!(report_at_expiry(0, true), "the last slice went: report");
        assert!(report_at_expiry(2, false), "quiet: report");
        assert!(!report_at_expiry(1, true), "the next ask carries the returns");
    }

    #[test]
    fn holds_are_short() {
        assert_eq!(hold_ms(250), 250);
        assert_eq!(hold_ms(60_000), HOLD_MAX_MS);
    }
}
