//! Fair share of a deployment between tenants: while more than one tenant is active, none may
//! take more than its weighted share of the requests per minute (plus a bounded burst), so one
//! noisy tenant cannot starve the others. A tenant alone may use everything.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FairShareConfig {
    /// Tenant weights; a tenant not listed weighs `default_weight`.
    pub weights: BTreeMap<String, u32>,
    pub default_weight: u32,
    /// Extra percent of its share a tenant may take in a burst.
    pub burst_pct: u32,
    /// A tenant counts as active (and its usage as recent) for this long.
    pub window_ms: u64,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        FairShareConfig { weights: BTreeMap::new(), default_weight: 1, burst_pct: 10, window_ms: 60_000 }
    }
}

impl FairShareConfig {
    fn weight(&self, tenant: &str) -> u64 {
        u64::from(self.weights.get(tenant).copied().unwrap_or(self.default_weight).max(1))
    }
}

/// One tenant's admissions in the current and previous window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUse {
    window_start_ms: u64,
    count: u64,
    prev_count: u64,
    last_seen_ms: u64,
}

impl TenantUse {
    fn roll(&mut self, window_ms: u64, now_ms: u64) {
        let window = window_ms.max(1);
        if now_ms >= self.window_start_ms.saturating_add(2 * window) {
            *self = TenantUse {
                window_start_ms: now_ms - now_ms % window,
                last_seen_ms: self.last_seen_ms,
                ..TenantUse::default()
            };
        } else if now_ms >= self.window_start_ms + window {
            self.prev_count = self.count;
            self.count = 0;
            self.window_start_ms += window;
        }
    }

    /// Sliding-window estimate: this window plus the overlapping part of the previous one.
    fn recent(&self, window_ms: u64, now_ms: u64) -> u64 {
        let window = window_ms.max(1);
        let into = now_ms.saturating_sub(self.window_start_ms).min(window);
        self.count + self.prev_count * (window - into) / window
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantShares {
    tenants: BTreeMap<String, TenantUse>,
}

impl TenantShares {
    fn active_weight(&self, cfg: &FairShareConfig, now_ms: u64) -> u64 {
        self.tenants
            .iter()
            .filter(|(_, u)| now_ms.saturating_sub(u.last_seen_ms) < cfg.window_ms)
            .map(|(t, _)| cfg.weight(t))
            .sum()
    }

    /// Whether `tenant` may take one more request of a deployment allowing `rpm`; refusals say
    /// how long until one more fits.
    pub fn check(&mut self, cfg: &FairShareConfig, tenant: &str, rpm: u64, now_ms: u64) -> Result<(), u64> {
        let use_ = self.tenants.entry(tenant.to_string()).or_default();
        use_.roll(cfg.window_ms, now_ms);
        use_.last_seen_ms = now_ms;
        let weight = cfg.weight(tenant);
        let total = self.active_weight(cfg, now_ms).max(weight);
        if total == weight {
            return Ok(());
        }
        let share = (rpm * weight).div_ceil(total);
        let cap = (share * (100 + u64::from(cfg.burst_pct))).div_ceil(100).max(1);
        let recent = self.tenants.get(tenant).map(|u| u.recent(cfg.window_ms, now_ms)).unwrap_or(0);
        if recent < cap {
            Ok(())
        } else {
            Err((cfg.window_ms / cap).max(1))
        }
    }

    pub fn record(&mut self, cfg: &FairShareConfig, tenant: &str, now_ms: u64) {
        let use_ = self.tenants.entry(tenant.to_string()).or_default();
        use_.roll(cfg.window_ms, now_ms);
        use_.count += 1;
        use_.last_seen_ms = now_ms;
    }

    /// Forgets tenants idle for two windows, so the map stays small.
    pub fn prune(&mut self, cfg: &FairShareConfig, now_ms: u64) {
        self.tenants.retain(|_, u| now_ms.saturating_sub(u.last_seen_ms) < 2 * cfg.window_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(burst_pct: u32) -> FairShareConfig {
        FairShareConfig { burst_pct, ..FairShareConfig::default() }
    }

    fn take(s: &mut TenantShares, c: &FairShareConfig, tenant: &str, rpm: u64, now: u64) -> bool {
        let ok = s.check(c, tenant, rpm, now).is_ok();
        if ok {
            s.record(c, tenant, now);
        }
        ok
    }

    #[test]
    fn a_tenant_alone_may_use_everything() {
        let (c, mut s) = (cfg(0), TenantShares::default());
        assert!((0..100).all(|i| take(&mut s, &c, "a", 20, i)));
    }

    #[test]
    fn a_flooding_tenant_is_held_to_its_share_while_another_is_active() {
        let (c, mut s) = (cfg(0), TenantShares::default());
        assert!(take(&mut s, &c, "b", 20, 0));
        let a = (1..=30).filter(|i| take(&mut s, &c, "a", 20, *i)).count();
        assert_eq!(a, 10, "half of 20");
        let b = (31..=40).filter(|i| take(&mut s, &c, "b", 20, *i)).count();
        assert_eq!(b, 9, "b keeps the rest of its half");
        let refused = s.check(&c, "a", 20, 41).unwrap_err();
        assert_eq!(refused, 6_000, "one request's worth of the window");
    }

    #[test]
    fn weights_and_burst_shape_the_cap() {
        let mut c = cfg(50);
        c.weights.insert("big".into(), 3);
        let mut s = TenantShares::default();
        assert!(take(&mut s, &c, "small", 40, 0));
        let big = (1..=100).filter(|i| take(&mut s, &c, "big", 40, *i)).count();
        assert_eq!(big, 45, "3/4 of 40 = 30, +50 % burst");
    }

    #[test]
    fn idle_tenants_stop_counting_and_windows_slide() {
        let (c, mut s) = (cfg(0), TenantShares::default());
        assert!(take(&mut s, &c, "b", 20, 0));
        assert_eq!((1..=30).filter(|i| take(&mut s, &c, "a", 20, *i)).count(), 10);
        // b idle for a window: a is alone again.
        assert!(take(&mut s, &c, "a", 20, 61_000));
        s.prune(&c, 200_000);
        assert!(s.tenants.is_empty());
    }

    #[test]
    fn previous_window_still_counts_partly() {
        let u = TenantUse { window_start_ms: 60_000, count: 0, prev_count: 10, last_seen_ms: 60_000 };
        assert_eq!(u.recent(60_000, 60_000), 10);
        assert_eq!(u.recent(60_000, 90_000), 5);
        assert_eq!(u.recent(60_000, 120_000), 0);
    }
}
