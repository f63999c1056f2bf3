//! `gatewayctl prices`: validate a price table and upload it to KV without re-pricing history.

use crate::{now_ms, Wrangler};
use edge_gateway::config::prices::{PriceTable, PRICES_KV_KEY};

pub fn validate(file: &str) -> Result<(String, PriceTable), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let table = PriceTable::parse(&text)
        .map_err(|errors| errors.iter().map(|e| format!("{file}: {e}")).collect::<Vec<_>>().join("\n"))?;
    Ok((text, table))
}

pub fn check(file: &str) -> Result<(), String> {
    let (_, table) = validate(file)?;
    let entries: usize = table.models.values().map(Vec::len).sum();
    println!("{file}: ok ({} price keys, {entries} entries)", table.models.len());
    Ok(())
}

/// Refuses to change an entry already in force (or add one in the past) unless `--force`.
pub fn put(file: &str, args: &[&str]) -> Result<(), String> {
    let (text, table) = validate(file)?;
    let wrangler = Wrangler::from_flags(args)?;
    if !args.contains(&"--force") {
        if let Some(current) = current(&wrangler)? {
            let changes = table.history_changes(&current, now_ms());
            if !changes.is_empty() {
                return Err(format!(
                    "{file} would re-price requests already made:\n  {}\nAdd a new entry with a future effective_from instead (or pass --force).",
                    changes.join("\n  ")
                ));
            }
        }
    }
    wrangler.put(PRICES_KV_KEY, &text)?;
    println!("price table from {file} written to KV key '{PRICES_KV_KEY}'");
    Ok(())
}

fn current(wrangler: &Wrangler) -> Result<Option<PriceTable>, String> {
    let Ok(text) = wrangler.get(PRICES_KV_KEY) else { return Ok(None) };
    let text = text.trim();
    if text.is_empty() || text == "Value not found" {
        return Ok(None);
    }
    match PriceTable::parse(text) {
        Ok(table) => Ok(Some(table)),
        Err(errors) => {
            eprintln!("warning: the stored price table is invalid ({}); not comparing history", errors.join("; "));
            Ok(None)
        }
    }
}
