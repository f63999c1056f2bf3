//! Counts over a sliding window, kept in two fixed windows (an isolate's request rate, a
//! relay's recent asks).

/// Counted in fixed windows of one width; the count over the last `width` weighs the previous
/// window by its overlap.
#[derive(Debug, Clone, Default)]
pub struct Counter {
    index: u64,
    current: u64,
    previous: u64,
}

impl Counter {
    pub fn record(&mut self, width: u64, now_ms: u64) {
        self.record_n(1, width, now_ms);
    }

    pub fn record_n(&mut self, n: u64, width: u64, now_ms: u64) {
        let index = now_ms / width;
        if index != self.index {
            self.previous = if index == self.index + 1 { self.current } else { 0 };
            self.current = 0;
            self.index = index;
        }
        self.current = self.current.saturating_add(n);
    }

    pub fn over_last(&self, width: u64, now_ms: u64) -> u64 {
        let (current, previous) = match (now_ms / width).saturating_sub(self.index) {
            0 => (self.current, self.previous),
            1 => (0, self.current),
            _ => (0, 0),
        };
        previous * (width - now_ms % width) / width + current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_window_weighs_by_its_overlap() {
        let mut c = Counter::default();
        c.record_n(10, 1_000, 500);
        assert_eq!(c.over_last(1_000, 999), 10);
        assert_eq!(c.over_last(1_000, 1_000), 10);
        assert_eq!(c.over_last(1_000, 1_500), 5);
        c.record(1_000, 1_500);
        assert_eq!(c.over_last(1_000, 1_500), 6);
        assert_eq!(c.over_last(1_000, 2_000), 1);
        assert_eq!(c.over_last(1_000, 3_000), 0, "two windows on: nothing");
    }

    #[test]
    fn a_gap_of_windows_forgets_the_old_count() {
        let mut c = Counter::default();
        c.record_n(7, 100, 50);
        c.record(100, 350);
        assert_eq!(c.over_last(100, 350), 1);
    }
}
