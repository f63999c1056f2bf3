//! Credentials a route table names but nobody bound: a deployment whose `credential` has no
//! secret can never be called. `scripts/routes` warns about them (against `.dev.vars` locally)
//! and `/admin/status` lists them (against the worker's own secrets and vars).

use crate::config::routes::RouteTable;
use serde::Serialize;
use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unbound {
    pub deployment: String,
    pub credential: String,
}

/// Deployments whose credential `bound` does not know, in deployment-id order.
pub fn unbound(table: &RouteTable, bound: impl Fn(&str) -> bool) -> Vec<Unbound> {
    table
        .deployments
        .iter()
        .filter(|(_, d)| !bound(&d.credential))
        .map(|(id, d)| Unbound { deployment: id.clone(), credential: d.credential.clone() })
        .collect()
}

/// The names a `.dev.vars` file binds to a non-empty value (`NAME=value`; `#` starts a comment).
pub fn dev_vars_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .filter(|(_, value)| !value.trim().trim_matches('"').is_empty())
        .map(|(name, _)| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn table() -> RouteTable {
        let d = |credential: &str| json!({"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": credential});
        let text = json!({"version": 1,
            "deployments": {"b-unbound": d("NOT_SET"), "a-bound": d("OPENAI_API_KEY"), "c-empty": d("EMPTY_KEY")},
            "models": {"chat": {"chain": ["a-bound", "b-unbound", "c-empty"]}}})
        .to_string();
        RouteTable::parse(&text).unwrap()
    }

    #[test]
    fn deployments_without_a_bound_credential_are_listed() {
        let vars =
            dev_vars_names("# comment\nOPENAI_API_KEY=sk-1\n EMPTY_KEY=\nQUOTED=\"\"\nNOT_SET_EITHER=x\n# NOT_SET=x\n");
        assert_eq!(vars.iter().map(String::as_str).collect::<Vec<_>>(), ["NOT_SET_EITHER", "OPENAI_API_KEY"]);
        let found = unbound(&table(), |name| vars.contains(name));
        let ids: Vec<(&str, &str)> = found.iter().map(|u| (u.deployment.as_str(), u.credential.as_str())).collect();
        assert_eq!(ids, [("b-unbound", "NOT_SET"), ("c-empty", "EMPTY_KEY")]);
        assert!(unbound(&table(), |_| true).is_empty());
    }
}
