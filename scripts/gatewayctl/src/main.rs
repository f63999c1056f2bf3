//! `gatewayctl`: the admin side of the gateway's KV (route table, virtual keys, prices, budgets).
//! Every write goes through `wrangler kv`, after validation.

mod budgets;
mod prices;

use edge_gateway::keys::{kv_name, KeyRecord};
use edge_gateway::routes::{RouteTable, ROUTES_KV_KEY};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage:
  gatewayctl routes validate FILE
  gatewayctl routes put FILE [--local] [--persist-to DIR]
  gatewayctl keys create --tenant T --app A [--env E] [--models m1,m2] [--expires-in-days N] [--label L] [--local] [--persist-to DIR]
  gatewayctl keys revoke KEY [--local] [--persist-to DIR]
  gatewayctl keys list [--local] [--persist-to DIR]
  gatewayctl prices validate FILE
  gatewayctl prices put FILE [--local] [--persist-to DIR] [--force]
  gatewayctl budgets validate FILE
  gatewayctl budgets put FILE [--local] [--persist-to DIR]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["routes", "validate", file, ..] => validate(file).map(|_| println!("{file}: ok")),
        ["routes", "put", file, rest @ ..] => validate(file).and_then(|text| {
            Wrangler::from_flags(rest)?.put(ROUTES_KV_KEY, &text)?;
            println!("route table from {file} written to KV key '{ROUTES_KV_KEY}'");
            Ok(())
        }),
        ["keys", "create", rest @ ..] => create_key(rest),
        ["keys", "revoke", key, rest @ ..] => revoke_key(key, rest),
        ["keys", "list", rest @ ..] => list_keys(rest),
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

fn flag<'a>(args: &[&'a str], name: &str) -> Option<&'a str> {
    args.iter().position(|a| *a == name).and_then(|i| args.get(i + 1).copied())
}

struct Wrangler {
    target: Vec<String>,
}

impl Wrangler {
    fn from_flags(args: &[&str]) -> Result<Self, String> {
        let mut target = vec![if args.contains(&"--local") { "--local" } else { "--remote" }.to_string()];
        if let Some(dir) = flag(args, "--persist-to") {
            target.extend(["--persist-to".to_string(), dir.to_string()]);
        }
        Ok(Wrangler { target })
    }

    fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("wrangler")
            .args(["kv"])
            .args(args)
            .args(["--binding", "CONFIG"])
            .args(&self.target)
            .output()
            .map_err(|e| format!("running wrangler: {e} (run via scripts/, which puts it on PATH)"))?;
        if !out.status.success() {
            return Err(format!(
                "wrangler kv {} failed: {}",
                args[..2].join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn put(&self, key: &str, value: &str) -> Result<(), String> {
        self.run(&["key", "put", key, value]).map(|_| ())
    }

    fn get(&self, key: &str) -> Result<String, String> {
        self.run(&["key", "get", key, "--text"])
    }
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
    };
    let secret = new_secret()?;
    let value = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    Wrangler::from_flags(args)?.put(&kv_name(&secret), &value)?;
    println!("{secret}");
    eprintln!("Key created for tenant '{tenant}', app '{app}'. It is shown once; only its hash is stored.");
    Ok(())
}

fn revoke_key(secret: &str, args: &[&str]) -> Result<(), String> {
    let wrangler = Wrangler::from_flags(args)?;
    let name = if secret.starts_with("key:") { secret.to_string() } else { kv_name(secret) };
    let mut record: KeyRecord =
        serde_json::from_str(wrangler.get(&name)?.trim()).map_err(|e| format!("{name} is not a key record: {e}"))?;
    record.revoked = true;
    wrangler.put(&name, &serde_json::to_string(&record).map_err(|e| e.to_string())?)?;
    println!("revoked {name} (tenant '{}', app '{}')", record.tenant, record.app);
    Ok(())
}

fn list_keys(args: &[&str]) -> Result<(), String> {
    let wrangler = Wrangler::from_flags(args)?;
    let listed: serde_json::Value =
        serde_json::from_str(&wrangler.run(&["key", "list", "--prefix", "key:"])?).map_err(|e| e.to_string())?;
    println!("{:<20} {:<16} {:<16} {:<6} {:<8} label", "key (hash prefix)", "tenant", "app", "env", "state");
    for entry in listed.as_array().into_iter().flatten() {
        let Some(name) = entry["name"].as_str() else { continue };
        let Ok(record) = serde_json::from_str::<KeyRecord>(wrangler.get(name)?.trim()) else { continue };
        let state = match record.check(now_ms()) {
            Ok(()) => "active",
            Err(edge_gateway::keys::KeyRefusal::Revoked) => "revoked",
            Err(_) => "expired",
        };
        println!(
            "{:<20} {:<16} {:<16} {:<6} {:<8} {}",
            &name[..name.len().min(20)],
            record.tenant,
            record.app,
            record.env,
            state,
            record.label.unwrap_or_default()
        );
    }
    Ok(())
}
