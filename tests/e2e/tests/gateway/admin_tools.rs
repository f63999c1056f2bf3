//! The admin tools a user runs: `scripts/keys` issues and revokes keys against the running gateway's KV.

use e2e::client::post;
use e2e::stack;
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

fn gatewayctl(args: &[&str]) -> String {
    let s = stack();
    let bin = e2e::target_dir().join("debug/gatewayctl");
    assert!(bin.exists(), "{} missing: scripts/test builds it", bin.display());
    let path = format!("{}:{}", s.root.join("node_modules/.bin").display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(bin)
        .args(args)
        .args(["--local", "--persist-to", s.state.to_str().unwrap()])
        .current_dir(&s.root)
        .env("PATH", path)
        .env("WRANGLER_SEND_METRICS", "false")
        .output()
        .expect("run gatewayctl");
    assert!(out.status.success(), "gatewayctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn keys_created_with_the_cli_work_and_revoked_ones_are_refused_within_the_cache_ttl() {
    let s = stack();
    let key = gatewayctl(&["keys", "create", "--tenant", "cli-tenant", "--app", "cli-app", "--models", "gpt-4o-mini"]);
    let key = key.trim().to_string();
    assert!(key.starts_with("gk_") && key.len() > 30, "{key}");
    let hello = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post(&s.url("/v1/chat/completions"), &key, &hello).status, 200);
    let listed = gatewayctl(&["keys", "list"]);
    assert!(listed.contains("cli-tenant") && !listed.contains(&key), "list shows tenants, never secrets:\n{listed}");
    gatewayctl(&["keys", "revoke", &key]);
    // Revocation takes effect within CONFIG_CACHE_TTL_MS (1 s in dev) after the KV write.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(&s.url("/v1/chat/completions"), &key, &hello);
        if r.status == 401 {
            assert_eq!(r.error(401)["code"], "key_revoked");
            break;
        }
        assert!(Instant::now() < deadline, "revoked key still accepted");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn routes_validate_warns_about_credentials_nobody_bound() {
    let root = e2e::root();
    let dir = root.join("target/e2e").join(std::process::id().to_string()).join("unbound");
    std::fs::create_dir_all(&dir).unwrap();
    let deployment = |credential: &str| json!({"provider": "openai", "base_url": "https://api.openai.com/v1", "model": "m", "credential": credential});
    let table = json!({"version": 1, "deployments": {"bound": deployment("MOCK_OPENAI_KEY"), "lost": deployment("NOT_BOUND_KEY")},
                       "models": {"chat": {"chain": ["bound", "lost"]}}});
    let (routes, vars) = (dir.join("routes.json"), dir.join("dev.vars"));
    std::fs::write(&routes, table.to_string()).unwrap();
    std::fs::write(&vars, "# local\nMOCK_OPENAI_KEY=sk-local\n").unwrap();
    let out = Command::new(e2e::target_dir().join("debug/gatewayctl"))
        .args(["routes", "validate", routes.to_str().unwrap(), "--dev-vars", vars.to_str().unwrap()])
        .output()
        .expect("run gatewayctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning, not a refusal: {stderr}");
    assert!(stderr.contains("deployment 'lost' names credential 'NOT_BOUND_KEY'"), "{stderr}");
    assert!(!stderr.contains("'bound'"), "{stderr}");
}
