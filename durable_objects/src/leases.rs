//! Leases: an isolate takes a short-lived slice of every bucket, admits against it locally and
//! hands back what it did not use, so one deployment serves far more than one object's rate.
//!
//! The object grants from its buckets (the slice is taken at once), so everything the isolates
//! hold is already counted: the limits stay exact whatever the isolates do. What a slice can
//! shift is *when* its capacity is used: up to [`LEASE_TTL_MS`] after the object took it.

use serde::{Deserialize, Serialize};

use crate::limits::{Amounts, BucketKind};

/// How long an isolate may admit against a lease.
pub const LEASE_TTL_MS: u64 = 3_000;

/// A slice that is at most 1/[`HOT_SHARE_DIVISOR`] of every bucket lives this long instead: a
/// busy isolate on a large limit then asks half as often (the edge simulation's 50,000 req/s
/// need it to stay under the object's rate), at the cost of a larger time shift (see docs).
pub const HOT_LEASE_TTL_MS: u64 = 6_000;
pub const HOT_SHARE_DIVISOR: u64 = 100;

/// The object counts a lease as outstanding this much longer, so a return in flight is not late.
pub const LEASE_GRACE_MS: u64 = 2_000;

/// How long handed-back and expired lease ids are remembered (a later return is `unknown`).
pub const LEASE_MEMORY_MS: u64 = 60_000;

/// One lease holds at most this fraction of a bucket's capacity (but at least 1).
pub const SHARE_DIVISOR: u64 = 10;

/// All outstanding leases together hold at most this percentage of a bucket's capacity, so
/// per-request admissions (large requests, other isolates) always find room.
pub const LEASED_MAX_PCT: u64 = 50;

/// After a refusal for want of room, the isolate waits this long before asking again.
pub const LEASE_RETRY_MS: u64 = 1_000;

/// The most one lease may take from a bucket of `capacity`.
pub fn share(capacity: u64) -> u64 {
    (capacity / SHARE_DIVISOR).max(1)
}

/// The most a new lease may take from a bucket, given what it holds and what leases hold.
pub fn room(capacity: u64, available: i64, leased: u64) -> u64 {
    let pool = (capacity.saturating_mul(LEASED_MAX_PCT) / 100).saturating_sub(leased);
    share(capacity).min(pool).min(u64::try_from(available).unwrap_or(0))
}

/// `want` scaled down by one factor until it fits `room` in every bucket, so the slice keeps the
/// isolate's mix of requests and tokens. Returns the size and the bucket that bound it, if any.
pub fn grant_size(want: Amounts, rooms: &[(BucketKind, u64)]) -> (Amounts, Option<BucketKind>) {
    // The smallest room/want ratio, as a fraction num/den (starting at 1/1).
    let (mut num, mut den, mut binding) = (1u128, 1u128, None);
    for &(kind, room) in rooms {
        let w = u128::from(want.get(kind));
        if w > 0 && u128::from(room) * den < w * num {
            (num, den, binding) = (u128::from(room), w, Some(kind));
        }
    }
    let scale = |n: u64| u64::try_from(u128::from(n) * num / den).unwrap_or(u64::MAX);
    let size = Amounts {
        requests: scale(want.requests),
        tokens: scale(want.tokens),
        input: scale(want.input),
        output: scale(want.output),
    };
    (size, binding)
}

/// How long a lease of `size` lives, given the capacities of the deployment's buckets. A lease
/// of a deployment without buckets (the breaker's word only) keeps the short life, so a trip
/// reaches every isolate as soon as before.
pub fn lease_ttl(size: Amounts, capacities: impl IntoIterator<Item = (BucketKind, u64)>) -> u64 {
    let mut any = false;
    let small = capacities.into_iter().all(|(kind, capacity)| {
        any = true;
        size.get(kind) <= capacity / HOT_SHARE_DIVISOR
    });
    if any && small {
        HOT_LEASE_TTL_MS
    } else {
        LEASE_TTL_MS
    }
}

/// How many of each message the object has answered since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Calls {
    pub admit: u64,
    pub settle: u64,
    pub lease: u64,
    pub report: u64,
    pub status: u64,
    pub release: u64,
}

/// Lease activity, for the status report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LeaseCounts {
    /// Leases granted (alone or alongside an admit).
    pub granted: u64,
    pub granted_requests: u64,
    /// Requests handed back unused.
    pub returned_requests: u64,
    /// Local successes the isolates reported.
    pub local_successes: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStatus {
    pub live: u64,
    /// What the live leases hold, taken from the buckets.
    pub held: Amounts,
    #[serde(flatten)]
    pub counts: LeaseCounts,
}

#[cfg(test)]
mod tests {
    use super::*;
    use BucketKind::*;

    #[test]
    fn a_share_is_a_tenth_and_never_nothing() {
        assert_eq!(share(50), 5);
        assert_eq!(share(10_000), 1_000);
        assert_eq!(share(9), 1);
        assert_eq!(share(1), 1);
    }

    #[test]
    fn room_is_bounded_by_share_pool_and_level() {
        assert_eq!(room(50, 50, 0), 5);
        assert_eq!(room(50, 3, 0), 3, "never into debt");
        assert_eq!(room(50, -4, 0), 0);
        assert_eq!(room(50, 50, 22), 3, "leases together hold at most half");
        assert_eq!(room(50, 50, 25), 0);
        assert_eq!(room(1, 1, 0), 0, "a one-request bucket is never leased");
        assert_eq!(room(4, 4, 0), 1);
    }

    #[test]
    fn grant_keeps_the_mix() {
        let want = Amounts { requests: 20, tokens: 20_000, input: 0, output: 0 };
        let (size, binding) = grant_size(want, &[(Rpm, 5), (Tpm, 100_000)]);
        assert_eq!(size, Amounts { requests: 5, tokens: 5_000, input: 0, output: 0 });
        assert_eq!(binding, Some(Rpm));
        let (size, binding) = grant_size(want, &[(Rpm, 1_000), (Tpm, 2_500)]);
        assert_eq!(size, Amounts { requests: 2, tokens: 2_500, input: 0, output: 0 });
        assert_eq!(binding, Some(Tpm));
    }

    #[test]
    fn grant_is_all_of_want_when_it_fits() {
        let want = Amounts { requests: 8, tokens: 800, input: 500, output: 300 };
        assert_eq!(grant_size(want, &[(Rpm, 100), (Tpm, 1_000), (InputTpm, 600), (Rpd, 9)]), (want, None));
        assert_eq!(grant_size(want, &[]), (want, None), "no buckets: nothing to scale by");
    }

    #[test]
    fn too_little_room_for_one_request_grants_none() {
        let want = Amounts { requests: 4, tokens: 2_000, input: 0, output: 0 };
        // 200 tokens cannot carry one 500-token request.
        let (size, binding) = grant_size(want, &[(Rpm, 100), (Tpm, 200)]);
        assert_eq!(size.requests, 0);
        assert_eq!(binding, Some(Tpm));
        assert_eq!(grant_size(want, &[(Rpm, 0)]).0, Amounts::default());
    }

    #[test]
    fn a_kind_not_wanted_does_not_bind() {
        let want = Amounts { requests: 4, ..Amounts::default() };
        assert_eq!(grant_size(want, &[(Rpm, 100), (Tpm, 0)]), (want, None));
    }

    #[test]
    fn a_slice_small_against_every_bucket_lives_longer() {
        let size = Amounts { requests: 100, tokens: 50_000, input: 0, output: 0 };
        assert_eq!(lease_ttl(size, [(Rpm, 10_000), (Tpm, 5_000_000)]), HOT_LEASE_TTL_MS);
        assert_eq!(lease_ttl(size, [(Rpm, 9_999), (Tpm, 5_000_000)]), LEASE_TTL_MS);
        assert_eq!(lease_ttl(size, [(Rpm, 1_000_000), (Tpm, 4_999_999)]), LEASE_TTL_MS, "every bucket");
        assert_eq!(lease_ttl(size, [(Rpm, 1_000_000), (Rpd, 5_000)]), LEASE_TTL_MS);
        assert_eq!(lease_ttl(size, []), LEASE_TTL_MS, "no buckets: the breaker's lease stays short");
    }

    #[test]
    fn huge_wants_do_not_overflow() {
        let want = Amounts { requests: u64::MAX, tokens: u64::MAX, input: 1, output: 0 };
        let (size, _) = grant_size(want, &[(Rpm, 7)]);
        assert_eq!((size.requests, size.tokens, size.input), (7, 7, 0));
    }
}
