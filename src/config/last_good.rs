//! What an isolate serves of one admin document (routes, prices, budgets), and the durable
//! last-good copy that keeps a refused upload from ever taking effect, also in an isolate that
//! starts after it. Pure: the KV reads and writes live in `config::store`, which feeds the
//! results in here and does what `Observed::follow_up` asks.
//!
//! Every document that validates is copied by the gateway to `last_good:<key>` (KV metadata:
//! its fingerprint and when it validated). A new isolate whose current document is refused or
//! missing serves that copy instead and says so in `/admin/status` and `/healthz`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::rc::Rc;

pub const KV_PREFIX: &str = "last_good:";

/// The KV key of a document's last-good copy.
pub fn kv_key(doc_key: &str) -> String {
    format!("{KV_PREFIX}{doc_key}")
}

/// Names a document version in logs and status: the first 16 hex digits of its SHA-256.
pub fn fingerprint(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The KV metadata stored with a last-good copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub fingerprint: String,
    pub validated_ms: u64,
}

/// Where the serving version was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The admin's key itself (`routes`, `prices`, `budgets`).
    Current,
    /// The gateway's copy, `last_good:<key>`.
    LastGood,
}

/// The version an isolate serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    pub fingerprint: String,
    pub source: Source,
    pub validated_ms: u64,
}

/// The newest upload, refused: it never took effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub fingerprint: String,
    pub errors: Vec<String>,
    pub seen_ms: u64,
}

/// How one document behaves when it is absent or unreadable.
#[derive(Debug, Clone, Copy)]
pub struct DocPolicy {
    pub kv_key: &'static str,
    /// Log events are `<name>_unavailable`, `<name>_rejected`, `<name>_fallback`, `<name>_last_good_*`.
    pub name: &'static str,
    /// Deleting the key turns the feature off (budgets) instead of keeping the last good copy.
    pub clear_when_missing: bool,
    /// Without a good copy yet, ask KV again on every call instead of once per TTL.
    pub retry_until_loaded: bool,
}

/// What `config::store` must do after an observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowUp {
    Nothing,
    /// A newly validated document: copy it to `last_good:<key>` unless the copy already holds it.
    Promote {
        text: String,
        stamp: Stamp,
    },
    /// Nothing valid to serve: read `last_good:<key>` and `adopt` it.
    Fallback,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub follow_up: FollowUp,
    /// A log line to write (`None`: nothing worth saying).
    pub log: Option<Value>,
}

impl Observed {
    fn quiet(follow_up: FollowUp) -> Self {
        Observed { follow_up, log: None }
    }
}

/// One document as this isolate holds it. A document that fails to parse or cannot be read
/// never replaces the one served.
pub struct DocSlot<T> {
    pub doc: Option<Rc<T>>,
    /// The current key's text as last read (valid or not), to skip re-validating it.
    raw: Option<String>,
    pub fetched_ms: Option<u64>,
    /// Reading the current key failed, or it is missing.
    pub problem: Option<String>,
    pub serving: Option<Version>,
    pub refused: Option<Refusal>,
    /// The last-good copy was already asked for since the current key last changed.
    fallback_tried: bool,
}

impl<T> Default for DocSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Health of one document, as `/admin/status` and `/healthz` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DocHealth {
    pub kv_key: &'static str,
    pub serving: Option<Version>,
    pub refused: Option<Refusal>,
    pub problem: Option<String>,
    pub age_ms: u64,
    pub degraded: bool,
}

impl<T> DocSlot<T> {
    pub const fn new() -> Self {
        DocSlot {
            doc: None,
            raw: None,
            fetched_ms: None,
            problem: None,
            serving: None,
            refused: None,
            fallback_tried: false,
        }
    }

    /// Whether the cached copy can answer without asking KV.
    pub fn fresh(&self, now_ms: u64, ttl_ms: u64, policy: &DocPolicy) -> bool {
        let recent = self.fetched_ms.is_some_and(|at| now_ms.saturating_sub(at) < ttl_ms);
        recent && (self.doc.is_some() || !policy.retry_until_loaded)
    }

    /// The isolate serves something other than the current key's document: refused, missing or unreadable.
    pub fn degraded(&self) -> bool {
        self.serving.is_some() && (self.refused.is_some() || self.problem.is_some())
    }

    pub fn health(&self, policy: &DocPolicy, now_ms: u64) -> DocHealth {
        DocHealth {
            kv_key: policy.kv_key,
            serving: self.serving.clone(),
            refused: self.refused.clone(),
            problem: self.problem.clone(),
            age_ms: self.fetched_ms.map_or(0, |at| now_ms.saturating_sub(at)),
            degraded: self.degraded(),
        }
    }

    /// Takes in one read of the current key: `Err` a failed read, `Ok(None)` a missing key.
    pub fn observe(
        &mut self,
        read: Result<Option<String>, String>,
        now_ms: u64,
        policy: &DocPolicy,
        parse: impl Fn(&str) -> Result<T, Vec<String>>,
    ) -> Observed {
        self.fetched_ms = Some(now_ms);
        match read {
            Err(e) => {
                let problem = format!("reading KV key '{}' failed: {e}", policy.kv_key);
                let log = json!({"event": format!("{}_unavailable", policy.name), "error": problem, "serving_last_good": self.doc.is_some()});
                self.problem = Some(problem);
                // Only an isolate with nothing to serve asks, and it read the copy alongside.
                Observed { log: Some(log), ..self.ask_fallback(true) }
            }
            Ok(None) if policy.clear_when_missing => {
                *self = DocSlot { fetched_ms: Some(now_ms), ..DocSlot::new() };
                Observed::quiet(FollowUp::Nothing)
            }
            Ok(None) => {
                self.problem = Some(format!("KV key '{}' is missing", policy.kv_key));
                let first = self.raw.take().is_some() || !self.fallback_tried;
                self.ask_fallback(first)
            }
            Ok(Some(text)) if self.raw.as_deref() == Some(text.as_str()) => Observed::quiet(FollowUp::Nothing),
            Ok(Some(text)) => self.validate(text, now_ms, policy, parse),
        }
    }

    fn validate(
        &mut self,
        text: String,
        now_ms: u64,
        policy: &DocPolicy,
        parse: impl Fn(&str) -> Result<T, Vec<String>>,
    ) -> Observed {
        let fingerprint = fingerprint(&text);
        self.problem = None;
        self.fallback_tried = false;
        let observed = match parse(&text) {
            Ok(doc) => {
                self.doc = Some(Rc::new(doc));
                self.refused = None;
                self.serving =
                    Some(Version { fingerprint: fingerprint.clone(), source: Source::Current, validated_ms: now_ms });
                let stamp = Stamp { fingerprint, validated_ms: now_ms };
                Observed::quiet(FollowUp::Promote { text: text.clone(), stamp })
            }
            Err(errors) => {
                let log = json!({"event": format!("{}_rejected", policy.name), "refused": fingerprint,
                                 "errors": errors.join("; "), "serving": self.serving.as_ref().map(|v| &v.fingerprint)});
                self.refused = Some(Refusal { fingerprint, errors, seen_ms: now_ms });
                let mut observed = self.ask_fallback(true);
                observed.log = Some(log);
                observed
            }
        };
        self.raw = Some(text);
        observed
    }

    /// With nothing to serve, the last-good copy is asked for once per change of the current key.
    fn ask_fallback(&mut self, changed: bool) -> Observed {
        if self.doc.is_some() || (self.fallback_tried && !changed) {
            return Observed::quiet(FollowUp::Nothing);
        }
        self.fallback_tried = true;
        Observed::quiet(FollowUp::Fallback)
    }

    /// Takes in the read of `last_good:<key>` that a `FollowUp::Fallback` asked for.
    pub fn adopt(
        &mut self,
        read: Result<Option<(String, Option<Stamp>)>, String>,
        policy: &DocPolicy,
        parse: impl Fn(&str) -> Result<T, Vec<String>>,
    ) -> Value {
        let event = format!("{}_fallback", policy.name);
        let key = kv_key(policy.kv_key);
        let (text, stamp) = match read {
            Err(e) => {
                return json!({"event": event, "served": false, "error": format!("reading KV key '{key}' failed: {e}")})
            }
            Ok(None) => {
                return json!({"event": event, "served": false, "error": format!("KV key '{key}' is missing: no document ever validated")})
            }
            Ok(Some(found)) => found,
        };
        match parse(&text) {
            Ok(doc) => {
                let fingerprint = fingerprint(&text);
                let validated_ms = stamp.filter(|s| s.fingerprint == fingerprint).map_or(0, |s| s.validated_ms);
                let version = Version { fingerprint, source: Source::LastGood, validated_ms };
                let log = json!({"event": event, "served": true, "version": version,
                                 "refused": self.refused.as_ref().map(|r| &r.fingerprint), "problem": self.problem});
                self.doc = Some(Rc::new(doc));
                self.serving = Some(version);
                log
            }
            Err(errors) => {
                json!({"event": event, "served": false, "error": format!("KV key '{key}' no longer validates: {}", errors.join("; "))})
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: DocPolicy =
        DocPolicy { kv_key: "doc", name: "doc_table", clear_when_missing: false, retry_until_loaded: true };
    const CLEARING: DocPolicy =
        DocPolicy { kv_key: "doc", name: "doc_table", clear_when_missing: true, retry_until_loaded: false };

    /// A document is valid when it is a number; its value is served.
    fn parse(text: &str) -> Result<u32, Vec<String>> {
        text.trim().parse().map_err(|_| vec![format!("'{text}' is not a number")])
    }

    fn read(text: &str) -> Result<Option<String>, String> {
        Ok(Some(text.to_string()))
    }

    fn copy(text: &str, validated_ms: u64) -> Result<Option<(String, Option<Stamp>)>, String> {
        Ok(Some((text.to_string(), Some(Stamp { fingerprint: fingerprint(text), validated_ms }))))
    }

    fn served(slot: &DocSlot<u32>) -> Option<u32> {
        slot.doc.as_deref().copied()
    }

    #[test]
    fn a_valid_document_serves_and_is_promoted_once() {
        let mut slot = DocSlot::new();
        let seen = slot.observe(read("1"), 10, &POLICY, parse);
        assert_eq!(
            seen.follow_up,
            FollowUp::Promote { text: "1".into(), stamp: Stamp { fingerprint: fingerprint("1"), validated_ms: 10 } }
        );
        assert_eq!(served(&slot), Some(1));
        assert_eq!(slot.serving.as_ref().unwrap().source, Source::Current);
        assert!(!slot.degraded());
        assert_eq!(
            slot.observe(read("1"), 20, &POLICY, parse).follow_up,
            FollowUp::Nothing,
            "unchanged: no re-promotion"
        );
        assert!(matches!(slot.observe(read("2"), 30, &POLICY, parse).follow_up, FollowUp::Promote { .. }));
        assert_eq!(served(&slot), Some(2));
    }

    #[test]
    fn a_refused_upload_keeps_the_served_version_and_is_reported() {
        let mut slot = DocSlot::new();
        slot.observe(read("1"), 10, &POLICY, parse);
        let seen = slot.observe(read("oops"), 20, &POLICY, parse);
        assert_eq!(seen.follow_up, FollowUp::Nothing, "memory still has a good copy");
        assert_eq!(seen.log.unwrap()["event"], "doc_table_rejected");
        assert_eq!(served(&slot), Some(1));
        let health = slot.health(&POLICY, 25);
        assert!(health.degraded);
        assert_eq!(health.serving.unwrap().fingerprint, fingerprint("1"));
        let refusal = health.refused.unwrap();
        assert_eq!((refusal.fingerprint, refusal.seen_ms), (fingerprint("oops"), 20));
        assert!(refusal.errors[0].contains("not a number"));
        assert_eq!(health.age_ms, 5);
        assert_eq!(slot.observe(read("oops"), 30, &POLICY, parse).log, None, "the same refusal is logged once");
        slot.observe(read("3"), 40, &POLICY, parse);
        assert_eq!((served(&slot), slot.refused.clone(), slot.degraded()), (Some(3), None, false), "a fix clears it");
    }

    #[test]
    fn a_new_isolate_facing_a_refused_upload_serves_the_last_good_copy() {
        let mut slot = DocSlot::new();
        assert_eq!(slot.observe(read("oops"), 10, &POLICY, parse).follow_up, FollowUp::Fallback);
        assert_eq!(served(&slot), None);
        let log = slot.adopt(copy("7", 3), &POLICY, parse);
        assert_eq!((log["event"].as_str(), log["served"].as_bool()), (Some("doc_table_fallback"), Some(true)));
        assert_eq!(served(&slot), Some(7));
        assert_eq!(
            slot.serving,
            Some(Version { fingerprint: fingerprint("7"), source: Source::LastGood, validated_ms: 3 })
        );
        assert!(slot.degraded());
        assert_eq!(slot.observe(read("oops"), 20, &POLICY, parse).follow_up, FollowUp::Nothing);
        assert!(matches!(slot.observe(read("8"), 30, &POLICY, parse).follow_up, FollowUp::Promote { .. }));
        assert_eq!(
            (served(&slot), slot.serving.as_ref().unwrap().source, slot.degraded()),
            (Some(8), Source::Current, false)
        );
    }

    #[test]
    fn the_fallback_is_asked_for_once_per_change_of_the_current_key() {
        let mut slot = DocSlot::new();
        assert_eq!(slot.observe(read("oops"), 10, &POLICY, parse).follow_up, FollowUp::Fallback);
        let log = slot.adopt(Ok(None), &POLICY, parse);
        assert_eq!(log["served"], false);
        assert!(log["error"].as_str().unwrap().contains("no document ever validated"));
        assert_eq!(slot.observe(read("oops"), 11, &POLICY, parse).follow_up, FollowUp::Nothing, "no read per request");
        assert_eq!(slot.observe(read("worse"), 12, &POLICY, parse).follow_up, FollowUp::Fallback);
        slot.adopt(Err("timeout".into()), &POLICY, parse);
        assert_eq!(slot.observe(Ok(None), 13, &POLICY, parse).follow_up, FollowUp::Fallback, "deleted: a change");
        assert_eq!(slot.observe(Ok(None), 14, &POLICY, parse).follow_up, FollowUp::Nothing);
        assert_eq!(slot.problem.as_deref(), Some("KV key 'doc' is missing"));
        assert!(!slot.degraded(), "nothing served: unavailable, not degraded");
    }

    #[test]
    fn a_new_isolate_that_cannot_read_the_current_key_serves_the_copy() {
        let mut slot = DocSlot::new();
        let seen = slot.observe(Err("KV down".into()), 10, &POLICY, parse);
        assert_eq!(seen.follow_up, FollowUp::Fallback);
        slot.adopt(copy("4", 2), &POLICY, parse);
        assert_eq!((served(&slot), slot.degraded()), (Some(4), true));
        assert_eq!(slot.observe(Err("KV down".into()), 20, &POLICY, parse).follow_up, FollowUp::Nothing);
        assert!(matches!(slot.observe(read("4"), 30, &POLICY, parse).follow_up, FollowUp::Promote { .. }));
        assert_eq!((served(&slot), slot.degraded()), (Some(4), false));
    }

    #[test]
    fn a_copy_that_no_longer_validates_is_not_served() {
        let mut slot = DocSlot::new();
        slot.observe(read("oops"), 10, &POLICY, parse);
        let log = slot.adopt(copy("stale", 1), &POLICY, parse);
        assert_eq!(log["served"], false);
        assert!(log["error"].as_str().unwrap().contains("no longer validates"));
        assert_eq!(served(&slot), None);
    }

    #[test]
    fn a_stamp_of_another_version_gives_no_validation_time() {
        let mut slot = DocSlot::new();
        slot.observe(read("oops"), 10, &POLICY, parse);
        slot.adopt(
            Ok(Some(("5".into(), Some(Stamp { fingerprint: "other".into(), validated_ms: 9 })))),
            &POLICY,
            parse,
        );
        assert_eq!(slot.serving.as_ref().unwrap().validated_ms, 0);
    }

    #[test]
    fn a_missing_or_unreadable_key_keeps_the_served_version() {
        let mut slot = DocSlot::new();
        slot.observe(read("1"), 10, &POLICY, parse);
        let seen = slot.observe(Err("KV down".into()), 20, &POLICY, parse);
        assert_eq!(seen.log.unwrap()["event"], "doc_table_unavailable");
        assert_eq!((served(&slot), slot.degraded()), (Some(1), true));
        assert_eq!(slot.observe(Ok(None), 30, &POLICY, parse).follow_up, FollowUp::Nothing);
        assert_eq!(served(&slot), Some(1));
        assert!(matches!(slot.observe(read("1"), 40, &POLICY, parse).follow_up, FollowUp::Promote { .. }), "back");
        assert!(!slot.degraded());
    }

    #[test]
    fn a_clearing_document_turns_off_when_deleted() {
        let mut slot = DocSlot::new();
        slot.observe(read("1"), 10, &CLEARING, parse);
        assert_eq!(slot.observe(Ok(None), 20, &CLEARING, parse).follow_up, FollowUp::Nothing);
        assert_eq!((served(&slot), slot.serving.clone(), slot.degraded()), (None, None, false));
        assert_eq!(
            slot.observe(read("oops"), 30, &CLEARING, parse).follow_up,
            FollowUp::Fallback,
            "refusals still fall back"
        );
    }

    #[test]
    fn freshness_follows_the_ttl_and_the_retry_policy() {
        let mut slot: DocSlot<u32> = DocSlot::new();
        assert!(!slot.fresh(0, 100, &POLICY));
        slot.observe(read("oops"), 10, &POLICY, parse);
        assert!(!slot.fresh(20, 100, &POLICY), "nothing served: retried on every call");
        assert!(slot.fresh(20, 100, &CLEARING));
        slot.observe(read("1"), 30, &POLICY, parse);
        assert!(slot.fresh(129, 100, &POLICY));
        assert!(!slot.fresh(130, 100, &POLICY));
    }

    #[test]
    fn fingerprints_are_short_and_stable() {
        assert_eq!(fingerprint(""), "e3b0c44298fc1c14");
        assert_ne!(fingerprint("a"), fingerprint("b"));
        assert_eq!(kv_key("routes"), "last_good:routes");
    }
}
