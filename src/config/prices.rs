//! The versioned price table admins keep in KV (`prices`) and the exact cost arithmetic.
//!
//! Prices are integer micro-dollars per million tokens, by token kind. A key (a deployment's
//! `price`, else its real model name) holds entries in ascending `effective_from`; the entry in
//! force at the request's time applies, so a new entry never re-prices earlier requests.
//!
//! Cost of one attempt, in micro-dollars, rounded once, half up:
//! `(Σ tokens_kind × price_kind + 500_000) / 1_000_000` over input, output, cached_read and
//! cache_write (reasoning tokens are part of output and billed there). Cache writes with a 1-hour
//! TTL (Anthropic's `ephemeral_1h_input_tokens`) are priced at `cache_write_1h` when the entry has
//! one, else at `cache_write`; the rest of `cache_write` are 5-minute writes. Integer math in
//! u128: no floats.

use crate::canonical::usage::Usage;
use crate::config::last_good::DocHealth;
use crate::config::store::{cached_doc, DocPolicy, DocSlot};
use limiter::utc;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use worker::Env;

pub const PRICES_KV_KEY: &str = "prices";
pub const SUPPORTED_VERSION: u32 = 1;
const TOKENS_PER_PRICE_UNIT: u128 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    pub version: u32,
    pub models: BTreeMap<String, Vec<PriceEntry>>,
}

/// Micro-dollars per million tokens of each kind, from `effective_from` until the next entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    pub effective_from: String,
    pub input: u64,
    pub output: u64,
    pub cached_read: u64,
    /// 5-minute cache writes (and every write of vendors with a single TTL).
    pub cache_write: u64,
    /// 1-hour cache writes (Anthropic: twice the input price); `None` prices them as `cache_write`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<u64>,
}

/// The entry that priced a request, named so analysts can tell which one it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedPrice<'a> {
    pub key: &'a str,
    pub entry: &'a PriceEntry,
}

impl AppliedPrice<'_> {
    /// `<key>@<effective_from>`: stable, because an entry in force is never edited (see `history_changes`).
    pub fn version(&self) -> String {
        [self.key, "@", &self.entry.effective_from].concat()
    }
}

impl PriceEntry {
    fn starts_ms(&self) -> Option<u64> {
        utc::parse_rfc3339_ms(&self.effective_from)
    }

    pub fn cost_micro_usd(&self, usage: &Usage) -> u64 {
        let part = |tokens: u64, price: u64| u128::from(tokens) * u128::from(price);
        let long = usage.cache_write_1h.min(usage.cache_write);
        let total = part(usage.input, self.input)
            .saturating_add(part(usage.output, self.output))
            .saturating_add(part(usage.cached_read, self.cached_read))
            .saturating_add(part(usage.cache_write - long, self.cache_write))
            .saturating_add(part(long, self.cache_write_1h.unwrap_or(self.cache_write)));
        let rounded = total.saturating_add(TOKENS_PER_PRICE_UNIT / 2) / TOKENS_PER_PRICE_UNIT;
        u64::try_from(rounded).unwrap_or(u64::MAX)
    }
}

impl PriceTable {
    /// Parses and validates; every problem found is returned, not just the first.
    pub fn parse(text: &str) -> Result<PriceTable, Vec<String>> {
        crate::config::parse_checked(text, PriceTable::problems)
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.version != SUPPORTED_VERSION {
            out.push(format!("unsupported version {} (this gateway reads version {SUPPORTED_VERSION})", self.version));
        }
        for (key, entries) in &self.models {
            if key.trim().is_empty() {
                out.push("a model key is empty".to_string());
            }
            if entries.is_empty() {
                out.push(format!("'{key}' has no price entries"));
            }
            let mut previous: Option<(u64, &str)> = None;
            for (i, entry) in entries.iter().enumerate() {
                let Some(from) = entry.starts_ms() else {
                    out.push(format!(
                        "'{key}' entry {i}: effective_from '{}' is not a UTC time like 2024-07-18T00:00:00Z",
                        entry.effective_from
                    ));
                    continue;
                };
                if let Some((prev, prev_text)) = previous {
                    if from <= prev {
                        out.push(format!(
                            "'{key}' entry {i}: effective_from {} must come after the previous entry's {prev_text}",
                            entry.effective_from
                        ));
                    }
                }
                previous = Some((from, &entry.effective_from));
            }
        }
        out
    }

    /// The entry in force at `at_ms` for `key`; `None` when the key is unknown or not yet priced then.
    pub fn price_at(&self, key: &str, at_ms: u64) -> Option<AppliedPrice<'_>> {
        let (key, entries) = self.models.get_key_value(key)?;
        let entry = entries.iter().rev().find(|e| e.starts_ms().is_some_and(|from| from <= at_ms))?;
        Some(AppliedPrice { key, entry })
    }

    /// Why uploading `self` over `current` would re-price history: an entry already in force at
    /// `now_ms` was changed or removed, or a new entry starts at or before `now_ms`.
    pub fn history_changes(&self, current: &PriceTable, now_ms: u64) -> Vec<String> {
        let mut out = Vec::new();
        let in_force = |e: &PriceEntry| e.starts_ms().is_some_and(|from| from <= now_ms);
        for (key, entries) in &current.models {
            for old in entries.iter().filter(|e| in_force(e)) {
                let kept = self.models.get(key).is_some_and(|new| new.contains(old));
                if !kept {
                    out.push(format!(
                        "'{key}' entry effective {} is already in force: it may not change or disappear",
                        old.effective_from
                    ));
                }
            }
        }
        for (key, entries) in &self.models {
            for new in entries.iter().filter(|e| in_force(e)) {
                let same_start = |old: &Vec<PriceEntry>| old.iter().any(|o| o.effective_from == new.effective_from);
                // An edited entry in force was reported above; this catches entries inserted into the past.
                let known = current.models.get(key).is_some_and(same_start);
                if !known {
                    out.push(format!(
                        "'{key}' new entry effective {} starts in the past: new prices must start in the future",
                        new.effective_from
                    ));
                }
            }
        }
        out
    }
}

thread_local! {
    static PRICES_SLOT: RefCell<DocSlot<PriceTable>> = const { RefCell::new(DocSlot::new()) };
}

const PRICES: DocPolicy =
    DocPolicy { kv_key: PRICES_KV_KEY, name: "price_table", clear_when_missing: false, retry_until_loaded: false };

/// The price table; `None` until one was read: events are then flagged unpriced.
pub async fn price_table(env: &Env, now_ms: u64) -> Option<Rc<PriceTable>> {
    cached_doc(&PRICES_SLOT, &PRICES, env, now_ms, PriceTable::parse).await
}

/// What `/admin/status` and `/healthz` report about the table in this isolate.
pub fn price_health(now_ms: u64) -> DocHealth {
    PRICES_SLOT.with(|s| s.borrow().health(&PRICES, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> u64 {
        utc::parse_rfc3339_ms(s).unwrap()
    }

    fn table() -> PriceTable {
        PriceTable::parse(
            &json!({"version": 1, "models": {
                "gpt-4o-mini": [
                    {"effective_from": "2024-07-18T00:00:00Z", "input": 150000, "output": 600000, "cached_read": 75000, "cache_write": 0},
                    {"effective_from": "2025-01-01T00:00:00Z", "input": 100000, "output": 400000, "cached_read": 50000, "cache_write": 0}
                ],
                "claude-sonnet-4-5": [
                    {"effective_from": "2025-09-29T00:00:00Z", "input": 3000000, "output": 15000000, "cached_read": 300000, "cache_write": 3750000}
                ]
            }})
            .to_string(),
        )
        .unwrap()
    }

    fn usage(input: u64, output: u64, cached_read: u64, cache_write: u64) -> Usage {
        Usage { input, output, cached_read, cache_write, reasoning: 0, cache_write_1h: 0 }
    }

    #[test]
    fn entry_in_force_at_request_time_applies() {
        let t = table();
        assert_eq!(t.price_at("gpt-4o-mini", at("2024-07-17T23:59:59Z")), None, "before the first entry");
        let first = t.price_at("gpt-4o-mini", at("2024-07-18T00:00:00Z")).unwrap();
        assert_eq!(first.version(), "gpt-4o-mini@2024-07-18T00:00:00Z");
        let still_first = t.price_at("gpt-4o-mini", at("2024-12-31T23:59:59.999Z")).unwrap();
        assert_eq!(still_first.entry.input, 150_000);
        let second = t.price_at("gpt-4o-mini", at("2026-03-01T00:00:00Z")).unwrap();
        assert_eq!(second.version(), "gpt-4o-mini@2025-01-01T00:00:00Z");
        assert_eq!(t.price_at("unknown-model", at("2026-03-01T00:00:00Z")), None);
    }

    #[test]
    fn cost_is_exact_micro_dollars_rounded_half_up_once() {
        let t = table();
        let p = t.price_at("gpt-4o-mini", at("2024-08-01T00:00:00Z")).unwrap().entry;
        // 1M input tokens at $0.15/Mtok is exactly 150000 µ$.
        assert_eq!(p.cost_micro_usd(&usage(1_000_000, 0, 0, 0)), 150_000);
        // 10 in × 150000 + 10 out × 600000 = 7.5 µ$ → 8 (half up).
        assert_eq!(p.cost_micro_usd(&usage(10, 10, 0, 0)), 8);
        // 3 in × 150000 = 0.45 µ$ → 0; rounding happens on the sum, not per kind.
        assert_eq!(p.cost_micro_usd(&usage(3, 0, 0, 0)), 0);
        assert_eq!(p.cost_micro_usd(&usage(3, 0, 4, 0)), 1, "0.45 + 0.3 = 0.75 → 1");
        assert_eq!(p.cost_micro_usd(&Usage::default()), 0);
        let claude = t.price_at("claude-sonnet-4-5", at("2026-01-01T00:00:00Z")).unwrap().entry;
        // 25 × 3 + 15 × 15 + 2000 × 0.3 + 100 × 3.75 = 75 + 225 + 600 + 375 = 1275 µ$.
        assert_eq!(claude.cost_micro_usd(&usage(25, 15, 2000, 100)), 1_275);
    }

    #[test]
    fn one_hour_cache_writes_priced_apart() {
        let t = table();
        let claude = t.price_at("claude-sonnet-4-5", at("2026-01-01T00:00:00Z")).unwrap().entry.clone();
        let u = Usage { cache_write: 1_000_000, cache_write_1h: 400_000, ..Usage::default() };
        // Without a 1h price, every write is priced as a 5-minute write.
        assert_eq!(claude.cost_micro_usd(&u), 3_750_000);
        let with_1h = PriceEntry { cache_write_1h: Some(6_000_000), ..claude };
        // 600k × $3.75 + 400k × $6 = 2.25 + 2.4 dollars.
        assert_eq!(with_1h.cost_micro_usd(&u), 4_650_000);
        let parsed = PriceTable::parse(
            &json!({"version": 1, "models": {"m": [{"effective_from": "2025-01-01T00:00:00Z",
            "input": 1, "output": 1, "cached_read": 0, "cache_write": 0, "cache_write_1h": 2}]}})
            .to_string(),
        );
        assert_eq!(parsed.unwrap().models["m"][0].cache_write_1h, Some(2));
    }

    #[test]
    fn reasoning_is_billed_inside_output_not_twice() {
        let t = table();
        let p = t.price_at("gpt-4o-mini", at("2025-06-01T00:00:00Z")).unwrap().entry;
        let with_reasoning = Usage {
            input: 0,
            output: 1_000_000,
            cached_read: 0,
            cache_write: 0,
            reasoning: 900_000,
            cache_write_1h: 0,
        };
        assert_eq!(p.cost_micro_usd(&with_reasoning), 400_000);
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let p = PriceEntry {
            effective_from: "2025-01-01T00:00:00Z".into(),
            input: u64::MAX,
            output: u64::MAX,
            cached_read: 0,
            cache_write: 0,
            cache_write_1h: None,
        };
        assert_eq!(p.cost_micro_usd(&usage(u64::MAX, u64::MAX, 0, 0)), u64::MAX);
        let p = PriceEntry { input: 2_000_000, ..p };
        assert_eq!(p.cost_micro_usd(&usage(u64::MAX / 4, 0, 0, 0)), u64::MAX / 2 - 1);
    }

    #[test]
    fn validation_reports_every_problem() {
        let text = json!({"version": 2, "models": {
            "a": [],
            "b": [
                {"effective_from": "2025-01-01T00:00:00Z", "input": 1, "output": 1, "cached_read": 0, "cache_write": 0},
                {"effective_from": "2024-01-01T00:00:00Z", "input": 1, "output": 1, "cached_read": 0, "cache_write": 0},
                {"effective_from": "yesterday", "input": 1, "output": 1, "cached_read": 0, "cache_write": 0}
            ],
            "c": [
                {"effective_from": "2025-01-01T00:00:00Z", "input": 1, "output": 1, "cached_read": 0, "cache_write": 0},
                {"effective_from": "2025-01-01T00:00:00Z", "input": 2, "output": 2, "cached_read": 0, "cache_write": 0}
            ]
        }})
        .to_string();
        let errors = PriceTable::parse(&text).unwrap_err();
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(errors[0].contains("unsupported version 2"));
        assert!(errors[1].contains("'a' has no price entries"));
        assert!(errors[2].contains("'b' entry 1") && errors[2].contains("must come after"));
        assert!(errors[3].contains("'b' entry 2") && errors[3].contains("not a UTC time"));
        assert!(errors[4].contains("'c' entry 1"));
    }

    #[test]
    fn unknown_fields_negative_and_missing_prices_are_rejected() {
        let entry = |extra: serde_json::Value| {
            let mut e = json!({"effective_from": "2025-01-01T00:00:00Z", "input": 1, "output": 1, "cached_read": 0, "cache_write": 0});
            for (k, v) in extra.as_object().unwrap() {
                if v.is_null() {
                    e.as_object_mut().unwrap().remove(k);
                } else {
                    e[k] = v.clone();
                }
            }
            json!({"version": 1, "models": {"m": [e]}}).to_string()
        };
        assert!(PriceTable::parse(&entry(json!({}))).is_ok());
        assert!(PriceTable::parse(&entry(json!({"input": -1}))).unwrap_err()[0].contains("invalid value: integer `-1`"));
        assert!(PriceTable::parse(&entry(json!({"input": 1.5}))).is_err(), "fractions of a micro-dollar");
        assert!(
            PriceTable::parse(&entry(json!({"currency": "EUR"}))).unwrap_err()[0].contains("unknown field `currency`")
        );
        assert!(PriceTable::parse(&entry(json!({"cached_read": null}))).unwrap_err()[0]
            .contains("missing field `cached_read`"));
        assert!(PriceTable::parse(r#"{"version":1,"models":{},"note":"x"}"#).is_err());
    }

    #[test]
    fn history_in_force_may_not_change() {
        let current = table();
        let now = at("2026-01-01T00:00:00Z");
        let mut next = current.clone();
        next.models.get_mut("gpt-4o-mini").unwrap().push(PriceEntry {
            effective_from: "2026-02-01T00:00:00Z".into(),
            input: 1,
            output: 2,
            cached_read: 0,
            cache_write: 0,
            cache_write_1h: None,
        });
        next.models.insert(
            "new-model".into(),
            vec![PriceEntry {
                effective_from: "2026-01-02T00:00:00Z".into(),
                input: 1,
                output: 1,
                cached_read: 0,
                cache_write: 0,
                cache_write_1h: None,
            }],
        );
        assert_eq!(next.history_changes(&current, now), Vec::<String>::new(), "future entries are fine");

        let mut edited = current.clone();
        edited.models.get_mut("gpt-4o-mini").unwrap()[0].output = 1;
        edited.models.remove("claude-sonnet-4-5");
        edited.models.get_mut("gpt-4o-mini").unwrap().push(PriceEntry {
            effective_from: "2025-12-31T00:00:00Z".into(),
            input: 1,
            output: 1,
            cached_read: 0,
            cache_write: 0,
            cache_write_1h: None,
        });
        let changes = edited.history_changes(&current, now);
        assert_eq!(changes.len(), 3, "{changes:#?}");
        assert!(changes[0].contains("'claude-sonnet-4-5' entry effective 2025-09-29T00:00:00Z is already in force"));
        assert!(changes[1].contains("'gpt-4o-mini' entry effective 2024-07-18T00:00:00Z"));
        assert!(changes[2].contains("new entry effective 2025-12-31T00:00:00Z starts in the past"));
    }
}
