//! The `budgets` table admins keep in KV: per tenant, a period and soft/hard limits in
//! micro-dollars; validated before it is uploaded or used, cached in the isolate like the price table.

use crate::config::last_good::DocHealth;
use crate::config::store::{cached_doc, DocPolicy, DocSlot};
use limiter::budget::BudgetLimits;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use worker::Env;

pub const BUDGETS_KV_KEY: &str = "budgets";
pub const SUPPORTED_VERSION: u32 = 1;
const MAX_TENANT_CHARS: usize = 256;

/// The KV value under `budgets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetTable {
    pub version: u32,
    pub tenants: BTreeMap<String, TenantRule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRule {
    pub period: PeriodKind,
    /// Integer micro-dollars; past this, answers carry the warning header and events are flagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_micro_usd: Option<u64>,
    /// Integer micro-dollars; requests that could take the spend past this are refused (402).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_micro_usd: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeriodKind {
    /// Calendar month, UTC.
    Month,
}

impl PeriodKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PeriodKind::Month => "month",
        }
    }
}

impl TenantRule {
    pub fn limits(&self) -> BudgetLimits {
        BudgetLimits { soft_micro_usd: self.soft_micro_usd, hard_micro_usd: self.hard_micro_usd }
    }
}

impl BudgetTable {
    /// Parses and validates; every problem found is returned, not just the first.
    pub fn parse(text: &str) -> Result<BudgetTable, Vec<String>> {
        crate::config::parse_checked(text, BudgetTable::problems)
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.version != SUPPORTED_VERSION {
            out.push(format!("unsupported version {} (this gateway reads version {SUPPORTED_VERSION})", self.version));
        }
        for (tenant, rule) in &self.tenants {
            if tenant.trim().is_empty() || tenant.chars().count() > MAX_TENANT_CHARS {
                out.push(format!("tenant '{tenant}': names are 1 to {MAX_TENANT_CHARS} characters"));
            }
            match (rule.soft_micro_usd, rule.hard_micro_usd) {
                (None, None) => out.push(format!("tenant '{tenant}': set soft_micro_usd, hard_micro_usd or both")),
                (Some(soft), Some(hard)) if soft > hard => out.push(format!(
                    "tenant '{tenant}': soft_micro_usd {soft} is above hard_micro_usd {hard}: the hard limit would refuse before the soft one warns"
                )),
                _ => {}
            }
        }
        out
    }

    pub fn rule(&self, tenant: &str) -> Option<&TenantRule> {
        self.tenants.get(tenant)
    }
}

thread_local! {
    static BUDGETS_SLOT: RefCell<DocSlot<BudgetTable>> = const { RefCell::new(DocSlot::new()) };
}

const BUDGETS: DocPolicy =
    DocPolicy { kv_key: BUDGETS_KV_KEY, name: "budget_table", clear_when_missing: true, retry_until_loaded: false };

/// The budget table. No key means no budgets; an invalid or unreadable table never replaces the
/// last good one.
pub async fn budget_table(env: &Env, now_ms: u64) -> Option<Rc<BudgetTable>> {
    cached_doc(&BUDGETS_SLOT, &BUDGETS, env, now_ms, BudgetTable::parse).await
}

/// What `/admin/status` and `/healthz` report about the table in this isolate.
pub fn budget_health(now_ms: u64) -> DocHealth {
    BUDGETS_SLOT.with(|s| s.borrow().health(&BUDGETS, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_and_validates_the_table() {
        let t = BudgetTable::parse(
            &json!({"version": 1, "tenants": {
                "acme": {"period": "month", "soft_micro_usd": 80_000_000, "hard_micro_usd": 100_000_000},
                "soft-only": {"period": "month", "soft_micro_usd": 5},
                "frozen": {"period": "month", "hard_micro_usd": 0}
            }})
            .to_string(),
        )
        .unwrap();
        assert_eq!(
            t.rule("acme").unwrap().limits(),
            BudgetLimits { soft_micro_usd: Some(80_000_000), hard_micro_usd: Some(100_000_000) }
        );
        assert_eq!(t.rule("soft-only").unwrap().hard_micro_usd, None);
        assert!(t.rule("nobody").is_none());

        let bad = BudgetTable::parse(
            &json!({"version": 2, "tenants": {
                "": {"period": "month", "hard_micro_usd": 1},
                "none": {"period": "month"},
                "upside-down": {"period": "month", "soft_micro_usd": 10, "hard_micro_usd": 5}
            }})
            .to_string(),
        )
        .unwrap_err();
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(bad[0].contains("version 2"));
        for text in [
            r#"{"version":1,"tenants":{"a":{"period":"week","hard_micro_usd":1}}}"#,
            r#"{"version":1,"tenants":{"a":{"period":"month","hard_micro_usd":-1}}}"#,
            r#"{"version":1,"tenants":{"a":{"period":"month","hard_micro_usd":1.5}}}"#,
            r#"{"version":1,"tenants":{"a":{"period":"month","hard_usd":1}}}"#,
            r#"{"version":1,"tenants":{},"keys":{}}"#,
        ] {
            assert!(BudgetTable::parse(text).is_err(), "{text}");
        }
    }
}
