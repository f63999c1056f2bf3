//! When an isolate leases and how much: the adaptive part of the lease ledger, tuned on the edge
//! simulation (`tests/edge_sim`, docs/limiter.md "At internet scale").
//!
//! - Lease only for a sustained rate, or a request rate so high that the round trip a lease
//!   saves is worth it at once: a short burst on a small limit would strand a slice that other
//!   isolates' requests are then refused for.
//! - Never fragment a small limit: a slice is at most [`FRAGMENTS`]th of the bucket, and a
//!   bucket too small for even the smallest slice is admitted request by request.
//! - Size a slice from the isolate's own rate, growing with a burst but not beyond twice what
//!   the last second or the last ten seconds show; under a very large limit a new isolate's
//!   first second counts at the rate it implies, not as a quiet second.
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

/// A limit on requests whose largest slice is at least this (every request bucket 500,000 or
/// more: RPM, and RPD when set) sizes a new
/// isolate's slices from its first moments' rate (`young_rate`): what over-asking strands is
/// nothing to it. Below it the simulation's bursty and saturated scenarios ((c), (f)) refused
/// and over-admitted more; a tokens-only limit is left alone too ((e): no gain, more refusals).
pub const YOUNG_SLICE: u64 = 10_000;

/// Whether a new isolate's rate is scaled up from its first moments (see [`YOUNG_SLICE`]);
/// `u64::MAX` is `max_slice` of a limit without request buckets.
pub fn scale_young(max_slice: Option<u64>) -> bool {
    max_slice.is_some_and(|n| (YOUNG_SLICE..u64::MAX).contains(&n))
}

/// Whether isolates lease from their location's relay rather than the object: for a deployment
/// limited only by its breaker, or whose request limits are very large (see [`YOUNG_SLICE`]).
/// Under smaller limits the relays' parents strand capacity other locations need: the
/// simulation's bursty, saturated and token-bound scenarios ((c) to (f)) refused, called and
/// over-admitted more with relays.
pub fn via_relay(limits: &Limits) -> bool {
    !limits.has_buckets() || scale_young(max_slice(limits))
}

/// Requests in the last second as a rate, for an isolate that has seen the deployment for only
/// `age_ms` of it: scaled up to a whole second (from at least a tenth of one).
pub fn young_rate(second: u64, age_ms: u64) -> u64 {
    const SECOND_MS: u64 = 1_000;
    if age_ms >= SECOND_MS {
        return second;
    }
    (second * SECOND_MS).div_ceil(age_ms.max(SECOND_MS / 10))
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
    fn a_young_isolates_second_is_scaled_to_its_rate() {
        assert_eq!(young_rate(8, 200), 40, "eight requests in its first 200 ms: 40 a second");
        assert_eq!(young_rate(1, 0), 10, "one request, just now: at most ten a second");
        assert_eq!(young_rate(3, 50), 30, "never scaled from less than a tenth of a second");
        assert_eq!(young_rate(40, 1_000), 40, "a whole second seen: as counted");
        assert_eq!(young_rate(40, 60_000), 40);
        assert_eq!(young_rate(0, 500), 0);
        assert_eq!(young_rate(7, 999), 8, "rounded up");
    }

    #[test]
    fn only_very_large_request_limits_scale_a_young_isolates_rate() {
        let slice = |rpm| max_slice(&Limits { rpm: Some(rpm), ..Limits::default() });
        assert!(!scale_young(slice(60_000)), "(f)'s limit: a slice of 1,200");
        assert!(!scale_young(slice(499_999)));
        assert!(scale_young(slice(500_000)));
        assert!(scale_young(slice(4_000_000)), "(a)'s limit");
        assert!(!scale_young(max_slice(&Limits { tpm: Some(15_000_000), ..Limits::default() })), "tokens only");
        assert!(!scale_young(None));
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
