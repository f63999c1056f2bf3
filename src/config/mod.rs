//! Every document an admin uploads to KV (routes, keys, prices, budgets), its validation, and the
//! isolate's cached copy of it. `gatewayctl` imports only this layer.

/// Parses an admin-uploaded JSON document and validates it; every problem found is returned, not just the first.
pub fn parse_checked<T: serde::de::DeserializeOwned>(
    text: &str,
    problems: impl FnOnce(&T) -> Vec<String>,
) -> Result<T, Vec<String>> {
    let doc: T = serde_json::from_str(text).map_err(|e| vec![e.to_string()])?;
    let found = problems(&doc);
    if found.is_empty() {
        Ok(doc)
    } else {
        Err(found)
    }
}

pub mod budgets;
pub mod credentials;
pub mod key_lines;
pub mod keys;
pub mod last_good;
pub mod policy;
pub mod prices;
pub mod route_rules;
pub mod routes;
pub mod selection;
pub mod store;
pub mod warm;
