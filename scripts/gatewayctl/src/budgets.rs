//! `gatewayctl budgets`: validate a tenant budget table and upload it to KV.

use crate::Wrangler;
use edge_gateway::config::budgets::{BudgetTable, BUDGETS_KV_KEY};

pub fn validate(file: &str) -> Result<(String, BudgetTable), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let table = BudgetTable::parse(&text)
        .map_err(|errors| errors.iter().map(|e| format!("{file}: {e}")).collect::<Vec<_>>().join("\n"))?;
    Ok((text, table))
}

/// One line per tenant, in dollars, so a misplaced digit shows before it is uploaded.
fn summary(table: &BudgetTable) -> Vec<String> {
    let dollars = |v: Option<u64>| v.map_or("-".to_string(), |m| format!("${}.{:06}", m / 1_000_000, m % 1_000_000));
    table
        .tenants
        .iter()
        .map(|(tenant, rule)| {
            format!(
                "  {tenant}: soft {} hard {} per {}",
                dollars(rule.soft_micro_usd),
                dollars(rule.hard_micro_usd),
                rule.period.as_str()
            )
        })
        .collect()
}

pub fn check(file: &str) -> Result<(), String> {
    let (_, table) = validate(file)?;
    println!("{file}: ok ({} tenants)", table.tenants.len());
    summary(&table).iter().for_each(|line| println!("{line}"));
    Ok(())
}

pub fn put(file: &str, args: &[&str]) -> Result<(), String> {
    let (text, table) = validate(file)?;
    Wrangler::from_flags(args)?.put(BUDGETS_KV_KEY, &text)?;
    println!("budget table from {file} ({} tenants) written to KV key '{BUDGETS_KV_KEY}'", table.tenants.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_table_is_valid() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dev/budgets.json");
        let (_, table) = validate(file).unwrap();
        assert!(!table.tenants.is_empty());
    }

    #[test]
    fn summary_in_dollars() {
        let table = BudgetTable::parse(
            r#"{"version":1,"tenants":{"acme":{"period":"month","soft_micro_usd":80000000,"hard_micro_usd":100000001}}}"#,
        )
        .unwrap();
        assert_eq!(summary(&table), vec!["  acme: soft $80.000000 hard $100.000001 per month".to_string()]);
    }
}
