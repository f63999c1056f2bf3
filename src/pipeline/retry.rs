//! Retry policy: exponential backoff with full jitter, Retry-After as a floor, and a retry
//! budget so an outage does not become a retry storm. Time and randomness are passed in.

pub use crate::config::policy::RetryPolicy;

/// Full jitter: uniform in [0, min(max, base·2^retry)], never below Retry-After.
pub fn backoff_ms(policy: &RetryPolicy, retry: u32, retry_after_ms: Option<u64>, random: u64) -> u64 {
    let ceiling = policy.base_backoff_ms.saturating_mul(1u64 << retry.min(20)).min(policy.max_backoff_ms);
    let jittered = if ceiling == 0 { 0 } else { random % ceiling.saturating_add(1) };
    jittered.max(retry_after_ms.unwrap_or(0))
}

/// Requests and retries seen for one deployment in the current and previous windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryBudget {
    window_start_ms: u64,
    requests: u64,
    retries: u64,
    prev_requests: u64,
    prev_retries: u64,
}

impl RetryBudget {
    fn roll(&mut self, policy: &RetryPolicy, now_ms: u64) {
        let window = policy.budget_window_ms.max(1);
        if now_ms >= self.window_start_ms + 2 * window {
            *self = RetryBudget { window_start_ms: now_ms - now_ms % window, ..RetryBudget::default() };
        } else if now_ms >= self.window_start_ms + window {
            self.prev_requests = self.requests;
            self.prev_retries = self.retries;
            self.requests = 0;
            self.retries = 0;
            self.window_start_ms += window;
        }
    }

    pub fn record_request(&mut self, policy: &RetryPolicy, now_ms: u64) {
        self.roll(policy, now_ms);
        self.requests += 1;
    }

    /// Takes one retry from the budget if the share allows it (a floor of one retry per window
    /// keeps a quiet deployment retryable).
    pub fn try_retry(&mut self, policy: &RetryPolicy, now_ms: u64) -> bool {
        self.roll(policy, now_ms);
        let requests = self.requests + self.prev_requests;
        let retries = self.retries + self.prev_retries;
        let allowed = (requests * u64::from(policy.budget_pct) / 100).max(1);
        if retries < allowed {
            self.retries += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let p = RetryPolicy::default();
        assert_eq!(backoff_ms(&p, 0, None, 0), 0);
        for r in 0..1000u64 {
            assert!(backoff_ms(&p, 0, None, r) <= 100);
            assert!(backoff_ms(&p, 3, None, r) <= 800);
            assert!(backoff_ms(&p, 30, None, r) <= 2_000);
        }
        let spread: std::collections::BTreeSet<u64> = (0..200u64).map(|r| backoff_ms(&p, 2, None, r * 7919)).collect();
        assert!(spread.len() > 100, "full jitter spreads waits");
    }

    #[test]
    fn the_largest_backoffs_an_admin_can_write_do_not_overflow() {
        let p = RetryPolicy { base_backoff_ms: u64::MAX, max_backoff_ms: u64::MAX, ..RetryPolicy::default() };
        for retry in [0, 1, 63, u32::MAX] {
            for random in [0, 1, u64::MAX] {
                assert_eq!(backoff_ms(&p, retry, None, random), random % u64::MAX);
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let p = RetryPolicy::default();
        for r in 0..100 {
            assert!(backoff_ms(&p, 0, Some(1_500), r) >= 1_500);
        }
        assert_eq!(backoff_ms(&RetryPolicy { base_backoff_ms: 0, ..p }, 5, Some(7), 3), 7);
    }

    #[test]
    fn budget_limits_retries_to_a_share_of_requests() {
        let p = RetryPolicy::default();
        let mut b = RetryBudget::default();
        for _ in 0..100 {
            b.record_request(&p, 1_000);
        }
        let granted = (0..100).filter(|_| b.try_retry(&p, 1_000)).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn budget_has_a_floor_and_recovers_with_time() {
        let p = RetryPolicy::default();
        let mut b = RetryBudget::default();
        assert!(b.try_retry(&p, 0), "a quiet deployment may retry once");
        assert!(!b.try_retry(&p, 1));
        assert!(!b.try_retry(&p, 10_500), "previous window still counts");
        assert!(b.try_retry(&p, 25_000), "two windows later the slate is clean");
    }
}

/// The isolate's retry budgets, one per deployment. Per isolate, not global: each isolate keeps
/// its own share, which bounds retries per isolate without a round trip.
pub mod retry_budget {
    use super::{RetryBudget, RetryPolicy};
    use std::cell::RefCell;
    use std::collections::HashMap;

    thread_local! {
        static BUDGETS: RefCell<HashMap<String, RetryBudget>> = RefCell::new(HashMap::new());
    }

    pub fn record_request(deployment: &str, policy: &RetryPolicy, now_ms: u64) {
        BUDGETS.with(|b| b.borrow_mut().entry(deployment.to_string()).or_default().record_request(policy, now_ms));
    }

    pub fn try_retry(deployment: &str, policy: &RetryPolicy, now_ms: u64) -> bool {
        BUDGETS.with(|b| b.borrow_mut().entry(deployment.to_string()).or_default().try_retry(policy, now_ms))
    }
}
