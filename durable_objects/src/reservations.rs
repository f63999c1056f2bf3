//! The ledger of live reservations, plus a bounded memory of finished ones so that settle is
//! idempotent and a late settle of an expired reservation can still reconcile its tokens.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::limits::Amounts;

/// Finished ids remembered, per kind; beyond this the oldest are forgotten (bounds the snapshot).
pub const REMEMBERED: usize = 1_024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// What each bucket actually took (demands are capped at capacity).
    #[serde(rename = "t")]
    pub taken: Amounts,
    #[serde(rename = "s")]
    pub start_ms: u64,
    /// When it was taken: a release refunds requests per day only within that day. (0 in
    /// snapshots from before releases existed: never refunded there.)
    #[serde(rename = "at", default)]
    pub taken_ms: u64,
    /// Whole tokens a queued reservation kept its buckets below full, beyond `taken` (the
    /// refill forgone until its start): a release gives these back too.
    #[serde(rename = "f", default, skip_serializing_if = "is_nothing")]
    pub forgone: Amounts,
    #[serde(rename = "exp")]
    pub expires_ms: u64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub probe: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_nothing(a: &Amounts) -> bool {
    *a == Amounts::default()
}

/// What an id referred to when it was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Live(Reservation),
    /// Expired unsettled; its estimate is still charged.
    Expired(Amounts),
    Settled,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Gone {
    id: String,
    at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Lapsed {
    id: String,
    at: u64,
    #[serde(rename = "t")]
    taken: Amounts,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    live: BTreeMap<String, Reservation>,
    #[serde(default)]
    settled: VecDeque<Gone>,
    #[serde(default)]
    expired: VecDeque<Lapsed>,
    /// A lower bound on the earliest expiry, so most calls skip the scan (0 = scan).
    #[serde(skip)]
    next_expiry_ms: u64,
}

impl Ledger {
    pub fn in_flight(&self) -> usize {
        self.live.len()
    }

    pub fn live(&self) -> impl Iterator<Item = (&str, &Reservation)> {
        self.live.iter().map(|(id, r)| (id.as_str(), r))
    }

    pub fn get(&self, id: &str) -> Option<&Reservation> {
        self.live.get(id)
    }

    pub fn insert(&mut self, id: &str, reservation: Reservation) {
        self.next_expiry_ms = self.next_expiry_ms.min(reservation.expires_ms);
        self.live.insert(id.to_owned(), reservation);
    }

    /// Marks `id` finished and says what it was; a second call for the same id says `Settled`.
    pub fn finish(&mut self, id: &str, now_ms: u64) -> Found {
        let found = if let Some(r) = self.live.remove(id) {
            Found::Live(r)
        } else if let Some(i) = self.expired.iter().position(|l| l.id == id) {
            let lapsed = self.expired.remove(i).expect("position is in range");
            Found::Expired(lapsed.taken)
        } else if self.settled.iter().any(|g| g.id == id) {
            return Found::Settled;
        } else {
            Found::Unknown
        };
        self.settled.push_back(Gone { id: id.to_owned(), at: now_ms });
        found
    }

    /// Removes reservations whose time is up and returns them.
    pub fn expire(&mut self, now_ms: u64) -> Vec<(String, Reservation)> {
        if now_ms < self.next_expiry_ms {
            return Vec::new();
        }
        let due: Vec<String> =
            self.live.iter().filter(|(_, r)| r.expires_ms <= now_ms).map(|(id, _)| id.clone()).collect();
        let mut out = Vec::with_capacity(due.len());
        for id in due {
            let r = self.live.remove(&id).expect("id was just listed");
            self.expired.push_back(Lapsed { id: id.clone(), at: now_ms, taken: r.taken });
            out.push((id, r));
        }
        self.next_expiry_ms = self.earliest_expiry().unwrap_or(u64::MAX);
        out
    }

    /// Forgets finished ids older than `keep_ms`, and the oldest beyond [`REMEMBERED`].
    pub fn prune(&mut self, now_ms: u64, keep_ms: u64) {
        let stale = |at: u64| at.saturating_add(keep_ms) <= now_ms;
        while self.settled.front().is_some_and(|g| stale(g.at)) || self.settled.len() > REMEMBERED {
            self.settled.pop_front();
        }
        while self.expired.front().is_some_and(|l| stale(l.at)) || self.expired.len() > REMEMBERED {
            self.expired.pop_front();
        }
    }

    pub fn earliest_expiry(&self) -> Option<u64> {
        self.live.values().map(|r| r.expires_ms).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(expires_ms: u64) -> Reservation {
        Reservation {
            taken: Amounts::request(10, 5),
            start_ms: 0,
            taken_ms: 0,
            forgone: Amounts::default(),
            expires_ms,
            probe: false,
        }
    }

    #[test]
    fn finish_is_idempotent() {
        let mut l = Ledger::default();
        l.insert("a", res(100));
        assert_eq!(l.finish("a", 1), Found::Live(res(100)));
        assert_eq!(l.finish("a", 2), Found::Settled);
        assert_eq!(l.in_flight(), 0);
        assert_eq!(l.finish("zz", 3), Found::Unknown);
        assert_eq!(l.finish("zz", 4), Found::Settled);
    }

    #[test]
    fn expired_reservations_settle_late_once() {
        let mut l = Ledger::default();
        l.insert("a", res(100));
        l.insert("b", res(200));
        assert!(l.expire(99).is_empty());
        let gone = l.expire(100);
        assert_eq!(gone, vec![("a".to_string(), res(100))]);
        assert_eq!(l.in_flight(), 1);
        assert_eq!(l.finish("a", 150), Found::Expired(Amounts::request(10, 5)));
        assert_eq!(l.finish("a", 151), Found::Settled);
    }

    #[test]
    fn expiry_scan_is_skipped_until_due() {
        let mut l = Ledger::default();
        l.insert("a", res(100));
        assert!(l.expire(50).is_empty());
        assert_eq!(l.next_expiry_ms, 100);
        l.insert("b", res(70));
        assert_eq!(l.expire(70).len(), 1);
        assert_eq!(l.next_expiry_ms, 100);
    }

    #[test]
    fn memory_is_bounded_by_time_and_count() {
        let mut l = Ledger::default();
        for i in 0..(REMEMBERED + 10) {
            l.finish(&format!("id{i}"), 0);
        }
        l.prune(0, 1_000);
        assert_eq!(l.settled.len(), REMEMBERED);
        assert_eq!(l.finish("id0", 1), Found::Unknown, "oldest forgotten");
        l.prune(1_000, 1_000);
        assert_eq!(l.settled.len(), 1);
    }

    #[test]
    fn survives_serde_and_rescans_after_load() {
        let mut l = Ledger::default();
        l.insert("a", res(100));
        l.finish("x", 5);
        let text = serde_json::to_string(&l).unwrap();
        let mut back: Ledger = serde_json::from_str(&text).unwrap();
        assert_eq!(back.next_expiry_ms, 0);
        assert_eq!(back.expire(100).len(), 1);
        assert_eq!(back.finish("x", 6), Found::Settled);
    }
}
