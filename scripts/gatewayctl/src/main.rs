//! `gatewayctl`: the admin side of the gateway's KV (route table, virtual keys, tenant limits,
//! prices, budgets). Every write goes through `wrangler kv`, after validation.

mod budgets;
mod prices;

use edge_gateway::config::credentials;
use edge_gateway::config::keys::{self, kv_name, tenant_kv_name, KeyRecord, Limits, TenantRecord};
use edge_gateway::config::routes::{RouteTable, ROUTES_KV_KEY};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage:
  gatewayctl routes validate FILE [--dev-vars FILE]
  gatewayctl routes put FILE [--local] [--persist-to DIR] [--dev-vars FILE]
    (both warn about credentials the .dev.vars file, by default the checkout's, does not bind)
  gatewayctl keys create --tenant T --app A [--env E] [--models m1,m2] [--expires-in-days N] [--label L] [LIMITS] [--local] [--persist-to DIR]
  gatewayctl keys revoke (KEY | ID) [--local] [--persist-to DIR]   (ID: as `keys list` prints it)
  gatewayctl keys list [--local] [--persist-to DIR]
  gatewayctl keys tenant-limits --tenant T (LIMITS | --clear | --show) [--local] [--persist-to DIR]
    LIMITS: any of --rpm N --tpm N --rpd N --input-tpm N --output-tpm N --max-concurrent N
    (a key's limits apply to that key; a tenant's to all its keys together)
  gatewayctl prices validate FILE
  gatewayctl prices put FILE [--local] [--persist-to DIR] [--force]
  gatewayctl budgets validate FILE
  gatewayctl budgets put FILE [--local] [--persist-to DIR]
--local writes to the local state that scripts/dev serves (.wrangler/dev-state) unless --persist-to names another;
without --local the commands write to the deployed namespace.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["routes", "validate", file, rest @ ..] => validate(file).map(|text| {
            println!("{file}: ok");
            warn_unbound(&text, rest, true);
        }),
        ["routes", "put", file, rest @ ..] => validate(file).and_then(|text| {
            warn_unbound(&text, rest, rest.contains(&"--local"));
            Wrangler::from_flags(rest)?.put(ROUTES_KV_KEY, &text)?;
            println!("route table from {file} written to KV key '{ROUTES_KV_KEY}'");
            Ok(())
        }),
        ["keys", "create", rest @ ..] => create_key(rest),
        ["keys", "revoke", key, rest @ ..] => revoke_key(key, rest),
        ["keys", "list", rest @ ..] => list_keys(rest),
        ["keys", "tenant-limits", rest @ ..] => tenant_limits(rest),
        ["prices", "validate", file, ..] => prices::check(file),
        ["prices", "put", file, rest @ ..] => prices::put(file, rest),
        ["budgets", "validate", file, ..] => budgets::check(file),
        ["budgets", "put", file, rest @ ..] => budgets::put(file, rest),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn validate(file: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    RouteTable::parse(&text)
        .map_err(|errors| errors.iter().map(|e| format!("{file}: {e}")).collect::<Vec<_>>().join("\n"))?;
    Ok(text)
}

/// Warns (never refuses) about deployments whose credential has no secret: locally against
/// `.dev.vars`; for production it names the secrets to look for in `wrangler secret list`.
fn warn_unbound(text: &str, args: &[&str], local: bool) {
    let Ok(table) = RouteTable::parse(text) else { return };
    let path = flag(args, "--dev-vars").map_or_else(dev_vars_path, std::path::PathBuf::from);
    let vars = std::fs::read_to_string(&path).map(|t| credentials::dev_vars_names(&t)).unwrap_or_default();
    for u in credentials::unbound(&table, |name| vars.contains(name)) {
        eprintln!(
            "warning: deployment '{}' names credential '{}', which {} does not bind: locally its requests fail over \
             (503 no_deployment_available when it is the only one)",
            u.deployment,
            u.credential,
            path.display()
        );
    }
    if !local {
        let mut names: Vec<&str> = table.deployments.values().map(|d| d.credential.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        eprintln!(
            "note: the deployed worker must have these secrets: {} (check with `npx wrangler secret list`; \
             /admin/status lists deployments whose credential is unbound)",
            names.join(", ")
        );
    }
}

/// The `.dev.vars` the local gateway reads: `$ROOT/.dev.vars` (set by scripts/lib/env.sh), else this checkout's.
fn dev_vars_path() -> std::path::PathBuf {
    let root = std::env::var("ROOT").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../..").to_string());
    std::path::Path::new(&root).join(".dev.vars")
}

fn flag<'a>(args: &[&'a str], name: &str) -> Option<&'a str> {
    args.iter().position(|a| *a == name).and_then(|i| args.get(i + 1).copied())
}

struct Wrangler {
    target: Vec<String>,
}

impl Wrangler {
    fn from_flags(args: &[&str]) -> Result<Self, String> {
        let local = args.contains(&"--local");
        let mut target = vec![if local { "--local" } else { "--remote" }.to_string()];
        match flag(args, "--persist-to") {
            Some(dir) => target.extend(["--persist-to".to_string(), dir.to_string()]),
            None if local => target.extend(["--persist-to".to_string(), dev_state()]),
            None => {}
        }
        Ok(Wrangler { target })
    }

    fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut attempt = 0;
        let out = loop {
            let out = Command::new("wrangler")
                .args(["kv"])
                .args(args)
                .args(["--binding", "CONFIG"])
                .args(&self.target)
                .output()
                .map_err(|e| format!("running wrangler: {e} (run via scripts/, which puts it on PATH)"))?;
            attempt += 1;
            // A running `scripts/dev` holds the local store's lock for moments; get, put and list may repeat.
            if out.status.success() || attempt >= 6 || !busy(&String::from_utf8_lossy(&out.stderr)) {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(250 * attempt));
        };
        if !out.status.success() {
            return Err(format!(
                "wrangler kv {} failed: {}",
                args[..2].join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Writes through a file (`--path`), never an argument: a large table would exceed the
    /// system's argument size ("Argument list too long"), and what was validated is what is sent.
    fn put(&self, key: &str, value: &str) -> Result<(), String> {
        let file = ValueFile::write(value)?;
        self.run(&["key", "put", key, "--path", &file.0]).map(|_| ())
    }

    fn get(&self, key: &str) -> Result<String, String> {
        self.run(&["key", "get", key, "--text"])
    }

    /// The KV names of every virtual key (`key:<sha256>`).
    fn key_names(&self) -> Result<Vec<String>, String> {
        let listed: serde_json::Value =
            serde_json::from_str(&self.run(&["key", "list", "--prefix", "key:"])?).map_err(|e| e.to_string())?;
        Ok(listed.as_array().into_iter().flatten().filter_map(|e| e["name"].as_str().map(str::to_string)).collect())
    }
}

/// Whether wrangler failed only because the local store was locked by another process.
fn busy(stderr: &str) -> bool {
    stderr.contains("SQLITE_BUSY") || stderr.contains("database is locked")
}

/// A value in a private temporary file, removed when dropped.
struct ValueFile(String);

impl ValueFile {
    fn write(value: &str) -> Result<Self, String> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!("gatewayctl-{}-{nanos}.json", std::process::id()));
        std::fs::write(&path, value).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(ValueFile(path.to_string_lossy().into_owned()))
    }
}

impl Drop for ValueFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The state `scripts/dev` serves: `$DEV_STATE` (set by scripts/lib/env.sh), else this checkout's.
fn dev_state() -> String {
    std::env::var("DEV_STATE")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../.wrangler/dev-state").to_string())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn new_secret() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
    Ok(format!("gk_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

fn create_key(args: &[&str]) -> Result<(), String> {
    let tenant = flag(args, "--tenant").ok_or("--tenant is required")?;
    let app = flag(args, "--app").ok_or("--app is required")?;
    let expires_at_ms = match flag(args, "--expires-in-days") {
        Some(d) => Some(now_ms() + d.parse::<u64>().map_err(|_| "--expires-in-days takes a number")? * 86_400_000),
        None => None,
    };
    let record = KeyRecord {
        tenant: tenant.to_string(),
        app: app.to_string(),
        env: flag(args, "--env").unwrap_or("prod").to_string(),
        models: flag(args, "--models").map(|m| m.split(',').map(str::to_string).collect()),
        revoked: false,
        expires_at_ms,
        label: flag(args, "--label").map(str::to_string),
        created_at_ms: Some(now_ms()),
        limits: limits_from_flags(args)?,
        id: String::new(),
    };
    let secret = new_secret()?;
    let value = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    Wrangler::from_flags(args)?.put(&kv_name(&secret), &value)?;
    println!("{secret}");
    eprintln!(
        "Key {} created for tenant '{tenant}', app '{app}' (limits: {}). The secret is shown once; only its hash \
         is stored. Revoke it with the secret or that id.",
        key_id(&kv_name(&secret)),
        keys::describe_limits(record.limits.as_ref())
    );
    Ok(())
}

/// Rate limits from `--rpm`, `--tpm`, `--rpd`, `--input-tpm`, `--output-tpm`, `--max-concurrent`;
/// `None` when none is given.
fn limits_from_flags(args: &[&str]) -> Result<Option<Limits>, String> {
    let number = |name: &str| -> Result<Option<u64>, String> {
        match flag(args, name) {
            None if args.contains(&name) => Err(format!("{name} takes a number")),
            None => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| format!("{name} takes a whole number, not '{v}'")),
        }
    };
    let max_concurrent = number("--max-concurrent")?
        .map(|n| u32::try_from(n).map_err(|_| "--max-concurrent is too large".to_string()))
        .transpose()?;
    let limits = Limits {
        rpm: number("--rpm")?,
        tpm: number("--tpm")?,
        input_tpm: number("--input-tpm")?,
        output_tpm: number("--output-tpm")?,
        rpd: number("--rpd")?,
        max_concurrent,
        ..Limits::default()
    };
    Ok(keys::enforced(Some(&limits)).cloned())
}

/// Sets (or clears, or shows) a tenant's rate limits: the KV record `tenant:<name>`.
fn tenant_limits(args: &[&str]) -> Result<(), String> {
    let tenant = flag(args, "--tenant").ok_or("--tenant is required")?;
    if tenant.trim().is_empty() {
        return Err("--tenant must not be empty".into());
    }
    let wrangler = Wrangler::from_flags(args)?;
    let name = tenant_kv_name(tenant);
    if args.contains(&"--show") {
        let text = wrangler.get(&name)?;
        if text.trim().is_empty() || text.trim() == "Value not found" {
            println!("tenant '{tenant}': no limits (no KV key '{name}')");
            return Ok(());
        }
        let record = TenantRecord::parse(text.trim()).map_err(|e| format!("{name}: {}", e.join("; ")))?;
        println!("tenant '{tenant}': {}", keys::describe_limits(record.limits.as_ref()));
        return Ok(());
    }
    if args.contains(&"--clear") {
        wrangler.run(&["key", "delete", &name])?;
        println!("tenant '{tenant}': limits cleared (KV key '{name}' deleted)");
        return Ok(());
    }
    let limits = limits_from_flags(args)?.ok_or(
        "give at least one limit (--rpm, --tpm, --rpd, --input-tpm, --output-tpm, --max-concurrent) or --clear",
    )?;
    let record = TenantRecord { limits: Some(limits) };
    let value = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    TenantRecord::parse(&value).map_err(|e| e.join("; "))?;
    wrangler.put(&name, &value)?;
    println!("tenant '{tenant}': {} (KV key '{name}')", keys::describe_limits(record.limits.as_ref()));
    Ok(())
}

/// How `keys list` names a key: enough of its hash to be unique, never the secret.
const ID_LEN: usize = "key:".len() + 16;

fn key_id(name: &str) -> &str {
    &name[..name.len().min(ID_LEN)]
}

/// The KV name of the key an admin means: the secret itself, or an id (or whole name) from `keys list`.
fn resolve_key(given: &str, wrangler: &Wrangler) -> Result<String, String> {
    if !given.starts_with("key:") {
        return Ok(kv_name(given));
    }
    let matches = matching_names(given, &wrangler.key_names()?);
    match matches.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!("no key whose id starts with '{given}' (see `keys list`)")),
        _ => Err(format!("'{given}' matches {} keys; give more of the id", matches.len())),
    }
}

fn matching_names(given: &str, names: &[String]) -> Vec<String> {
    if names.iter().any(|n| n == given) {
        return vec![given.to_string()];
    }
    names.iter().filter(|n| n.starts_with(given) && given.len() > "key:".len()).cloned().collect()
}

fn revoke_key(given: &str, args: &[&str]) -> Result<(), String> {
    let wrangler = Wrangler::from_flags(args)?;
    let name = resolve_key(given, &wrangler)?;
    let mut record: KeyRecord =
        serde_json::from_str(wrangler.get(&name)?.trim()).map_err(|e| format!("{name} is not a key record: {e}"))?;
    record.revoked = true;
    wrangler.put(&name, &serde_json::to_string(&record).map_err(|e| e.to_string())?)?;
    println!("revoked {} (tenant '{}', app '{}')", key_id(&name), record.tenant, record.app);
    Ok(())
}

fn list_keys(args: &[&str]) -> Result<(), String> {
    let wrangler = Wrangler::from_flags(args)?;
    println!(
        "{:<20} {:<16} {:<16} {:<6} {:<8} {:<20} label",
        "id (for revoke)", "tenant", "app", "env", "state", "limits"
    );
    for name in wrangler.key_names()? {
        let Ok(record) = serde_json::from_str::<KeyRecord>(wrangler.get(&name)?.trim()) else { continue };
        let state = match record.check(now_ms()) {
            Ok(()) => "active",
            Err(edge_gateway::config::keys::KeyRefusal::Revoked) => "revoked",
            Err(_) => "expired",
        };
        println!(
            "{:<20} {:<16} {:<16} {:<6} {:<8} {:<20} {}",
            key_id(&name),
            record.tenant,
            record.app,
            record.env,
            state,
            keys::describe_limits(record.limits.as_ref()),
            record.label.unwrap_or_default()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_locked_local_store_is_tried_again() {
        assert!(busy("error: e = workerd/util/sqlite.c++:842: failed: SQLite failed; database is locked: SQLITE_BUSY"));
        assert!(!busy("✘ [ERROR] Not logged in."));
        assert!(!busy(""));
    }

    #[test]
    fn limits_come_from_flags() {
        let l = limits_from_flags(&["--tenant", "t", "--rpm", "3", "--tpm", "1000"]).unwrap().unwrap();
        assert_eq!((l.rpm, l.tpm, l.rpd, l.max_concurrent), (Some(3), Some(1_000), None, None));
        assert_eq!(keys::describe_limits(Some(&l)), "rpm=3 tpm=1000");
        let l = limits_from_flags(&["--rpd", "50", "--max-concurrent", "4"]).unwrap().unwrap();
        assert_eq!((l.rpd, l.max_concurrent), (Some(50), Some(4)));
        assert_eq!(limits_from_flags(&["--tenant", "t"]).unwrap(), None, "no flags, no limits");
        assert!(limits_from_flags(&["--rpm", "three"]).unwrap_err().contains("--rpm"));
        assert!(limits_from_flags(&["--rpm"]).is_err());
        assert!(limits_from_flags(&["--max-concurrent", "99999999999"]).is_err());
    }

    #[test]
    fn a_listed_id_names_exactly_one_key() {
        let names: Vec<String> = ["key:aaaa1111", "key:aaaa2222", "key:bbbb3333"].map(String::from).to_vec();
        assert_eq!(matching_names("key:bbbb", &names), ["key:bbbb3333"]);
        assert_eq!(matching_names("key:aaaa", &names).len(), 2, "ambiguous");
        assert_eq!(matching_names("key:aaaa1111", &names), ["key:aaaa1111"]);
        assert!(matching_names("key:", &names).is_empty(), "the bare prefix names nothing");
        assert!(matching_names("key:cccc", &names).is_empty());
        let long = kv_name("gk_secret");
        assert_eq!(key_id(&long).len(), ID_LEN);
        assert_eq!(matching_names(key_id(&long), std::slice::from_ref(&long)), [long]);
    }

    #[test]
    fn a_tenant_record_is_what_the_gateway_reads() {
        let limits = limits_from_flags(&["--rpm", "6"]).unwrap();
        let value = serde_json::to_string(&TenantRecord { limits }).unwrap();
        assert_eq!(value, r#"{"limits":{"rpm":6}}"#);
        assert_eq!(TenantRecord::parse(&value).unwrap().limits.and_then(|l| l.rpm), Some(6));
    }
}
