//! A token bucket in exact integer arithmetic whose balance may go negative (debt).
//!
//! The level is kept in ticks of `1/scale` token, where `scale` is the refill period for a
//! continuous bucket: refilling `capacity` tokens per `period_ms` is then exactly `capacity`
//! ticks per millisecond, so no rounding ever accumulates.

use serde::{Deserialize, Serialize};

/// How a bucket gets its tokens back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refill {
    /// Linearly, `capacity` per `period_ms`.
    Continuous,
    /// All at once at every multiple of `period_ms` since the Unix epoch (UTC midnight for a day).
    Window,
}

/// Why a demand cannot be met now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    /// The bucket will hold enough after this many milliseconds.
    Wait(u64),
    /// A zero-capacity bucket never will.
    Never,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    #[serde(rename = "cap")]
    capacity: u64,
    #[serde(rename = "per")]
    period_ms: u64,
    #[serde(rename = "mode")]
    refill: Refill,
    #[serde(rename = "lvl")]
    level: i64,
    #[serde(rename = "at")]
    updated_ms: u64,
}

/// Headroom so that `capacity * scale` and the debt below zero never overflow an i64.
const LEVEL_LIMIT: i64 = i64::MAX / 4;

impl Bucket {
    /// A full bucket.
    pub fn new(capacity: u64, period_ms: u64, refill: Refill, now_ms: u64) -> Self {
        let mut bucket = Bucket { capacity: 0, period_ms: period_ms.max(1), refill, level: 0, updated_ms: now_ms };
        bucket.capacity = bucket.clamp_capacity(capacity);
        bucket.level = bucket.full();
        bucket
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }

    pub fn refill(&self) -> Refill {
        self.refill
    }

    /// Whole tokens available at `now_ms`; negative while in debt.
    pub fn available(&self, now_ms: u64) -> i64 {
        self.level_at(now_ms).div_euclid(self.scale())
    }

    /// Takes `n` (capped at capacity) if the bucket holds it; returns the amount taken.
    pub fn take(&mut self, n: u64, now_ms: u64) -> Result<u64, Shortfall> {
        match self.time_until(n, now_ms) {
            Ok(0) => Ok(self.force_take(n, now_ms)),
            Ok(wait) => Err(Shortfall::Wait(wait)),
            Err(never) => Err(never),
        }
    }

    /// Takes `n` (capped at capacity) even into debt: the caller holds its place in line.
    pub fn force_take(&mut self, n: u64, now_ms: u64) -> u64 {
        self.take_for(n, now_ms, now_ms)
    }

    /// Like [`Bucket::force_take`] for a use that starts at `start_ms`: the level is kept no
    /// higher than if the take happened then, so refill lost at the cap meanwhile is not
    /// handed out twice. (A window bucket counts it in the current window.)
    pub fn take_for(&mut self, n: u64, now_ms: u64, start_ms: u64) -> u64 {
        self.take_queued(n, now_ms, start_ms).0
    }

    /// [`Bucket::take_for`], also saying how many whole tokens the level was lowered by beyond
    /// the take (the refill forgone until `start_ms`): giving back both undoes the take.
    pub fn take_queued(&mut self, n: u64, now_ms: u64, start_ms: u64) -> (u64, u64) {
        self.sync(now_ms);
        let taken = self.capped(n);
        let before = self.level as i128;
        let mut level = before;
        if self.refill == Refill::Continuous {
            let refill_until_start = start_ms.saturating_sub(now_ms) as i128 * self.capacity as i128;
            level = level.min(self.full() as i128 - refill_until_start);
        }
        let forgone = u64::try_from((before - level) / self.scale() as i128).unwrap_or(0);
        self.level = self.bounded(level - self.ticks(taken));
        (taken, forgone)
    }

    /// Gives back tokens that were taken but not used.
    pub fn refund(&mut self, n: u64, now_ms: u64) {
        self.sync(now_ms);
        self.level = self.bounded(self.level as i128 + self.ticks(n));
    }

    /// Charges tokens used beyond what was taken; the balance may go negative.
    pub fn charge(&mut self, n: u64, now_ms: u64) {
        self.sync(now_ms);
        self.level = self.bounded(self.level as i128 - self.ticks(n));
    }

    /// Milliseconds until `n` (capped at capacity) can be taken; `Ok(0)` means now.
    pub fn time_until(&self, n: u64, now_ms: u64) -> Result<u64, Shortfall> {
        if self.capacity == 0 && n > 0 {
            return Err(Shortfall::Never);
        }
        let deficit = self.ticks(self.capped(n)) - self.level_at(now_ms) as i128;
        if deficit <= 0 {
            return Ok(0);
        }
        match self.refill {
            Refill::Continuous => {
                let per_ms = self.capacity as i128;
                Ok(u64::try_from((deficit + per_ms - 1) / per_ms).unwrap_or(u64::MAX))
            }
            Refill::Window => {
                // The next reset fills the bucket (less any debt carried over); beyond that, whole windows.
                let to_boundary = self.period_ms - now_ms % self.period_ms;
                let full = self.full() as i128;
                let after_reset = full + (self.level_at(now_ms) as i128).min(0);
                let windows = if after_reset >= self.ticks(self.capped(n)) { 0 } else { 1 };
                Ok(to_boundary + windows * self.period_ms)
            }
        }
    }

    /// Changes the capacity, keeping the current level (clamped to the new capacity).
    pub fn set_limit(&mut self, capacity: u64, now_ms: u64) {
        self.sync(now_ms);
        self.capacity = self.clamp_capacity(capacity);
        self.level = self.level.min(self.full());
    }

    /// Pulls the level down to what the vendor reports; never raises it.
    ///
    /// `reset_in_ms` is when the vendor's own bucket is full again. When the vendor is the
    /// binding limit (remaining below our capacity) and its reset falls within our period, the
    /// level is also lowered so that ours is not full before the vendor's.
    pub fn clamp_to(&mut self, remaining: u64, reset_in_ms: Option<u64>, now_ms: u64) {
        self.sync(now_ms);
        let mut target = self.ticks(self.capped(remaining));
        if let (Refill::Continuous, Some(reset)) = (self.refill, reset_in_ms) {
            if remaining < self.capacity && reset <= self.period_ms {
                let full_at_reset = self.full() as i128 - reset as i128 * self.capacity as i128;
                target = target.min(full_at_reset.max(0));
            }
        }
        self.level = self.level.min(self.bounded(target));
    }

    /// The level in ticks as of `now_ms`, without changing the bucket.
    fn level_at(&self, now_ms: u64) -> i64 {
        if now_ms <= self.updated_ms {
            return self.level;
        }
        match self.refill {
            Refill::Continuous => {
                let gained = (now_ms - self.updated_ms) as i128 * self.capacity as i128;
                (self.level as i128 + gained).min(self.full() as i128) as i64
            }
            Refill::Window => {
                let windows = now_ms / self.period_ms - self.updated_ms / self.period_ms;
                match windows {
                    0 => self.level,
                    // Debt (a reservation queued past the reset) carries into the next window only.
                    1 => self.bounded(self.full() as i128 + self.level.min(0) as i128),
                    _ => self.full(),
                }
            }
        }
    }

    fn sync(&mut self, now_ms: u64) {
        self.level = self.level_at(now_ms);
        self.updated_ms = self.updated_ms.max(now_ms);
    }

    fn scale(&self) -> i64 {
        match self.refill {
            Refill::Continuous => self.period_ms as i64,
            Refill::Window => 1,
        }
    }

    fn full(&self) -> i64 {
        self.capacity as i64 * self.scale()
    }

    fn capped(&self, n: u64) -> u64 {
        n.min(self.capacity)
    }

    fn ticks(&self, n: u64) -> i128 {
        n as i128 * self.scale() as i128
    }

    fn bounded(&self, level: i128) -> i64 {
        level.clamp(-(LEVEL_LIMIT as i128), self.full() as i128) as i64
    }

    fn clamp_capacity(&self, capacity: u64) -> u64 {
        capacity.min((LEVEL_LIMIT / self.scale()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;
    const DAY: u64 = 86_400_000;

    fn per_minute(cap: u64) -> Bucket {
        Bucket::new(cap, MIN, Refill::Continuous, 0)
    }

    #[test]
    fn starts_full_and_takes() {
        let mut b = per_minute(10);
        assert_eq!(b.available(0), 10);
        assert_eq!(b.take(4, 0), Ok(4));
        assert_eq!(b.available(0), 6);
    }

    #[test]
    fn short_bucket_takes_nothing_and_says_when() {
        let mut b = per_minute(60); // one per second
        assert_eq!(b.take(60, 0), Ok(60));
        assert_eq!(b.take(2, 0), Err(Shortfall::Wait(2_000)));
        assert_eq!(b.available(0), 0);
        assert_eq!(b.take(2, 2_000), Ok(2));
    }

    #[test]
    fn refill_is_exact_without_drift() {
        let mut b = per_minute(7); // 7 per 60 s does not divide evenly
        b.force_take(7, 0);
        for t in 1..=60_000u64 {
            assert!(b.available(t) <= 7);
        }
        assert_eq!(b.available(60_000), 7);
        // Same result when refilled in many small syncs.
        let mut c = per_minute(7);
        c.force_take(7, 0);
        for t in (0..=60_000).step_by(13) {
            c.refund(0, t);
        }
        c.refund(0, 60_000);
        assert_eq!(c, Bucket { updated_ms: 60_000, ..per_minute(7) });
    }

    #[test]
    fn never_exceeds_capacity() {
        let b = per_minute(10);
        assert_eq!(b.available(10 * MIN), 10);
        let mut b = per_minute(10);
        b.refund(1_000, 5);
        assert_eq!(b.available(5), 10);
    }

    #[test]
    fn demand_above_capacity_is_capped() {
        let mut b = per_minute(100);
        assert_eq!(b.take(250, 0), Ok(100));
        assert_eq!(b.available(0), 0);
        assert_eq!(b.time_until(250, 0), Ok(MIN));
    }

    #[test]
    fn extra_charge_goes_negative_then_waits_it_off() {
        let mut b = per_minute(60);
        b.take(10, 0).unwrap();
        b.charge(110, 0);
        assert_eq!(b.available(0), -60);
        assert_eq!(b.time_until(0, 0), Ok(60_000));
        assert_eq!(b.time_until(1, 0), Ok(61_000));
        assert_eq!(b.take(1, 60_999), Err(Shortfall::Wait(1)));
        assert_eq!(b.take(1, 61_000), Ok(1));
    }

    #[test]
    fn charge_after_idle_refill_is_not_lost() {
        let mut b = per_minute(60);
        b.take(60, 0).unwrap();
        b.charge(30, 120_000); // bucket was full again by then
        assert_eq!(b.available(120_000), 30);
    }

    #[test]
    fn refund_returns_tokens_up_to_capacity() {
        let mut b = per_minute(100);
        b.take(80, 0).unwrap();
        b.refund(30, 0);
        assert_eq!(b.available(0), 50);
        b.refund(500, 0);
        assert_eq!(b.available(0), 100);
    }

    #[test]
    fn force_take_queues_ahead() {
        let mut b = per_minute(60);
        b.take(60, 0).unwrap();
        assert_eq!(b.force_take(3, 0), 3);
        assert_eq!(b.time_until(1, 0), Ok(4_000)); // the next one waits behind
    }

    #[test]
    fn take_for_a_later_start_counts_at_the_start() {
        // Full bucket, use starts in 3 s (another bucket made it wait): the bucket must not
        // also be full again at that moment.
        let mut b = per_minute(60);
        assert_eq!(b.take_for(1, 0, 3_000), 1);
        assert_eq!(b.available(3_000), 59);
        assert_eq!(b.available(0), 56);
        // A bucket already low enough is simply debited.
        let mut c = per_minute(60);
        c.take(50, 0).unwrap();
        c.take_for(1, 0, 3_000);
        assert_eq!(c.available(0), 9);
    }

    #[test]
    fn take_queued_says_how_far_below_full_it_kept_the_level() {
        let mut b = per_minute(60);
        assert_eq!(b.take_queued(1, 0, 3_000), (1, 3));
        b.refund(1 + 3, 0);
        assert_eq!(b.available(0), 60, "giving back both undoes the take");
        // Partly below the cap already: only the part above it is forgone, rounded down.
        let mut c = per_minute(60);
        c.take(1, 0).unwrap();
        c.refund(0, 500); // half a token refilled: level 59.5
        assert_eq!(c.take_queued(1, 500, 3_500), (1, 2));
        assert_eq!(c.take_queued(1, 500, 500), (1, 0));
        let mut w = Bucket::new(2, DAY, Refill::Window, 0);
        assert_eq!(w.take_queued(1, 0, 5_000), (1, 0), "a window bucket is never lowered");
    }

    #[test]
    fn zero_capacity_never_admits() {
        let mut b = per_minute(0);
        assert_eq!(b.take(1, 0), Err(Shortfall::Never));
        assert_eq!(b.time_until(0, 0), Ok(0));
    }

    #[test]
    fn set_limit_keeps_level_clamped() {
        let mut b = per_minute(100);
        b.take(30, 0).unwrap();
        b.set_limit(200, 0);
        assert_eq!(b.available(0), 70);
        assert_eq!(b.available(MIN / 2), 170); // refills at the new rate
        b.set_limit(50, MIN / 2);
        assert_eq!(b.available(MIN / 2), 50);
    }

    #[test]
    fn clamp_only_lowers() {
        let mut b = per_minute(100);
        b.take(50, 0).unwrap();
        b.clamp_to(80, None, 0);
        assert_eq!(b.available(0), 50);
        b.clamp_to(20, None, 0);
        assert_eq!(b.available(0), 20);
    }

    #[test]
    fn clamp_respects_vendor_reset() {
        let mut b = per_minute(60);
        // Vendor: 30 left, full again in 45 s; ours must not be full before then.
        b.clamp_to(30, Some(45_000), 0);
        assert_eq!(b.available(0), 15);
        assert_eq!(b.available(45_000), 60);
        // A reset beyond our period describes another window: only `remaining` applies.
        let mut d = per_minute(60);
        d.clamp_to(30, Some(5 * MIN), 0);
        assert_eq!(d.available(0), 30);
        // A vendor with room to spare does not pull us down.
        let mut e = per_minute(60);
        e.clamp_to(900, Some(1_000), 0);
        assert_eq!(e.available(0), 60);
    }

    #[test]
    fn window_resets_at_boundary() {
        let start = 3 * DAY + 5_000;
        let mut b = Bucket::new(2, DAY, Refill::Window, start);
        b.take(1, start).unwrap();
        b.take(1, start).unwrap();
        let to_midnight = 4 * DAY - start;
        assert_eq!(b.take(1, start + 1), Err(Shortfall::Wait(to_midnight - 1)));
        assert_eq!(b.available(4 * DAY - 1), 0);
        assert_eq!(b.available(4 * DAY), 2);
        assert_eq!(b.take(1, 4 * DAY), Ok(1));
    }

    #[test]
    fn window_carries_queued_debt_one_window() {
        let mut b = Bucket::new(2, DAY, Refill::Window, 0);
        b.take(2, 0).unwrap();
        b.force_take(1, 10); // queued for after midnight
        assert_eq!(b.available(DAY), 1);
        assert_eq!(b.available(2 * DAY), 2);
        assert_eq!(b.time_until(2, DAY - 10), Ok(10 + DAY));
    }

    #[test]
    fn clock_going_backwards_changes_nothing() {
        let mut b = per_minute(60);
        b.take(60, 10_000).unwrap();
        assert_eq!(b.available(5_000), 0);
        assert_eq!(b.take(1, 5_000), Err(Shortfall::Wait(1_000)));
    }

    #[test]
    fn huge_values_saturate() {
        let mut b = per_minute(u64::MAX);
        assert!(b.capacity() > 1_000_000_000_000);
        b.charge(u64::MAX, 0);
        assert!(b.available(0) < 0);
        assert!(b.time_until(1, 0).is_ok());
    }
}
