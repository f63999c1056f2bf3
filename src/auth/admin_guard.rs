//! Slowing down admin-token guessing: an isolate that has seen `MAX_FAILURES` bad admin tokens
//! within `WINDOW_MS` refuses every admin request (good tokens too, so a guess learns nothing)
//! until the oldest of them leaves the window. Pure: the shell keeps one per isolate.

use std::collections::VecDeque;

pub const MAX_FAILURES: usize = 5;
pub const WINDOW_MS: u64 = 10_000;

/// When the recent bad admin tokens were presented.
#[derive(Debug, Default)]
pub struct FailedAttempts {
    at_ms: VecDeque<u64>,
}

impl FailedAttempts {
    /// How long until admin requests are heard again; `None` when they are now.
    pub fn locked_for_ms(&mut self, now_ms: u64) -> Option<u64> {
        self.forget_before(now_ms);
        if self.at_ms.len() < MAX_FAILURES {
            return None;
        }
        self.at_ms.front().map(|oldest| (oldest + WINDOW_MS).saturating_sub(now_ms).max(1))
    }

    pub fn record_failure(&mut self, now_ms: u64) {
        self.forget_before(now_ms);
        if self.at_ms.len() == MAX_FAILURES {
            self.at_ms.pop_front();
        }
        self.at_ms.push_back(now_ms);
    }

    fn forget_before(&mut self, now_ms: u64) {
        while self.at_ms.front().is_some_and(|t| t + WINDOW_MS <= now_ms) {
            self.at_ms.pop_front();
        }
    }
}

/// Whether two strings are equal, in time that depends on their length only.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_after_max_failures_until_the_oldest_leaves_the_window() {
        let mut f = FailedAttempts::default();
        for i in 0..MAX_FAILURES as u64 {
            assert_eq!(f.locked_for_ms(1_000 + i * 100), None, "failure {i} is still heard");
            f.record_failure(1_000 + i * 100);
        }
        assert_eq!(f.locked_for_ms(1_500), Some(WINDOW_MS - 500));
        assert_eq!(f.locked_for_ms(1_000 + WINDOW_MS - 1), Some(1));
        assert_eq!(f.locked_for_ms(1_000 + WINDOW_MS), None, "the oldest has left the window");
        f.record_failure(1_000 + WINDOW_MS);
        assert_eq!(f.locked_for_ms(1_000 + WINDOW_MS), Some(100), "five again within the window");
    }

    #[test]
    fn failures_spread_out_never_lock_and_memory_stays_bounded() {
        let mut f = FailedAttempts::default();
        for i in 0..1_000u64 {
            let now = i * (WINDOW_MS / MAX_FAILURES as u64 + 1);
            assert_eq!(f.locked_for_ms(now), None, "at {now}");
            f.record_failure(now);
            assert!(f.at_ms.len() <= MAX_FAILURES);
        }
    }

    #[test]
    fn comparison_is_exact() {
        assert!(same("abc", "abc") && same("", ""));
        assert!(!same("abc", "abd") && !same("abc", "ab") && !same("ab", "abc"));
    }
}
