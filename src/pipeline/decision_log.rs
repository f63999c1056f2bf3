//! One structured log line per routed request that did more than take its first candidate:
//! every candidate, its state, what was chosen and why. Never any prompt content.

use serde_json::{json, Value};

pub struct DecisionLog {
    request_id: String,
    logical_model: String,
    candidates: Vec<Value>,
    warnings: Vec<String>,
    alerts: Vec<Value>,
    served: Option<String>,
    capability_skips: Vec<&'static str>,
    tried: usize,
    emitted: bool,
}

impl DecisionLog {
    pub fn new(request_id: &str, logical_model: &str) -> Self {
        DecisionLog {
            request_id: request_id.to_string(),
            logical_model: logical_model.to_string(),
            candidates: Vec::new(),
            warnings: Vec::new(),
            alerts: Vec::new(),
            served: None,
            capability_skips: Vec::new(),
            tried: 0,
            emitted: false,
        }
    }

    pub fn skip(&mut self, deployment: &str, reason: &str, missing: &[&'static str]) {
        if reason == "capability" {
            self.capability_skips.extend_from_slice(missing);
        }
        self.candidates
            .push(json!({"deployment": deployment, "decision": "skipped", "reason": reason, "missing": missing}));
    }

    pub fn warn_unknown(&mut self, deployment: &str, unknown: &[&'static str]) {
        self.warnings
            .push(format!("{deployment}: capabilities not declared, passed as unknown: {}", unknown.join(", ")));
    }

    /// A deployment's own configuration is broken (its vendor key, model, credential): an
    /// operator must act, so the line is written at error level.
    pub fn alert(&mut self, deployment: &str, reason: &str) {
        self.alerts.push(json!({"deployment": deployment, "reason": reason}));
    }

    pub fn refused(&mut self, deployment: &str, code: &str, retry_after_ms: u64) {
        self.candidates.push(
            json!({"deployment": deployment, "decision": "refused", "reason": code, "retry_after_ms": retry_after_ms}),
        );
    }

    pub fn failed(&mut self, deployment: &str, class: &str) {
        self.tried += 1;
        self.candidates.push(json!({"deployment": deployment, "decision": "failed", "reason": class}));
    }

    pub fn served(&mut self, deployment: &str) {
        self.tried += 1;
        self.candidates.push(json!({"deployment": deployment, "decision": "served"}));
        self.served = Some(deployment.to_string());
    }

    /// Whether the serving deployment was not the first candidate considered.
    pub fn fell_back(&self) -> bool {
        self.served.is_some() && self.candidates.len() > 1
    }

    /// Capabilities that made every skipped candidate ineligible, when nothing else was tried.
    pub fn capability_gap(&self) -> Option<Vec<&'static str>> {
        let only_gates = !self.candidates.is_empty() && self.candidates.iter().all(|c| c["reason"] == "capability");
        if only_gates {
            let mut gap = self.capability_skips.clone();
            gap.sort_unstable();
            gap.dedup();
            Some(gap)
        } else {
            None
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "event": "route_decision",
            "request_id": self.request_id,
            "logical_model": self.logical_model,
            "candidates": self.candidates,
            "served": self.served,
            "fallback": self.fell_back(),
            "warnings": self.warnings,
            "alerts": self.alerts,
        })
    }

    /// Whether the line says more than the usage event already does: a plain success of the
    /// first candidate is left out (logging every request costs a fifth of the throughput).
    pub fn informative(&self) -> bool {
        self.served.is_none() || self.candidates.len() > 1 || !self.warnings.is_empty() || !self.alerts.is_empty()
    }

    pub fn emit(&mut self) {
        if !self.emitted && self.informative() {
            self.emitted = true;
            if self.alerts.is_empty() {
                crate::support::log::info(self.to_json());
            } else {
                crate::support::log::error(self.to_json());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_fallback_and_reasons() {
        let mut log = DecisionLog::new("req_1", "chat");
        log.failed("primary", "server_error");
        log.served("backup");
        assert!(log.fell_back());
        let v = log.to_json();
        assert_eq!(v["candidates"][0]["reason"], "server_error");
        assert_eq!(v["served"], "backup");
        assert_eq!(log.capability_gap(), None);
    }

    #[test]
    fn alerts_name_the_deployment_and_its_fault() {
        let mut log = DecisionLog::new("r", "m");
        log.failed("a", "auth");
        log.alert("a", "vendor_auth");
        log.served("b");
        assert_eq!(log.to_json()["alerts"], json!([{"deployment": "a", "reason": "vendor_auth"}]));
        let mut quiet = DecisionLog::new("r", "m");
        quiet.alert("a", "missing_credential");
        quiet.served("a");
        assert!(quiet.informative(), "an alert is always written");
    }

    #[test]
    fn plain_first_candidate_successes_are_not_logged() {
        let mut plain = DecisionLog::new("r", "m");
        plain.served("a");
        assert!(!plain.informative());
        plain.warn_unknown("a", &["vision"]);
        assert!(plain.informative());
        let mut failed = DecisionLog::new("r", "m");
        failed.failed("a", "timeout");
        assert!(failed.informative());
    }

    #[test]
    fn capability_gap_only_when_every_candidate_was_gated() {
        let mut log = DecisionLog::new("r", "m");
        log.skip("a", "capability", &["tools"]);
        log.skip("b", "capability", &["vision", "tools"]);
        assert_eq!(log.capability_gap(), Some(vec!["tools", "vision"]));
        log.refused("c", "rpm", 10);
        assert_eq!(log.capability_gap(), None);
        log.warn_unknown("c", &["json_mode"]);
        assert!(log.to_json()["warnings"][0].as_str().unwrap().contains("json_mode"));
    }
}
