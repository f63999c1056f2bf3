//! What admins upload and how the admin endpoint is guarded (issue 18 items 7, 8, 11): the
//! validator refuses tables that cannot be right, line by line; `scripts/routes put` uploads a
//! table of any size; repeated bad admin tokens are slowed down.

use e2e::client::request;
use e2e::stack;
use std::path::Path;
use std::process::{Command, Output};

/// Runs the built `gatewayctl` (what `scripts/routes` runs) against a scratch local state of its
/// own, so nothing here touches the running gateway's route table.
fn gatewayctl(args: &[&str], state: &Path) -> Output {
    let s = stack();
    let bin = e2e::target_dir().join("debug/gatewayctl");
    assert!(bin.exists(), "{} missing: scripts/test builds it", bin.display());
    let path = format!("{}:{}", s.root.join("node_modules/.bin").display(), std::env::var("PATH").unwrap_or_default());
    Command::new(bin)
        .args(args)
        .args(["--local", "--persist-to", state.to_str().unwrap()])
        .current_dir(&s.root)
        .env("PATH", path)
        .env("WRANGLER_SEND_METRICS", "false")
        .output()
        .expect("run gatewayctl")
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = stack().state.parent().unwrap().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn deployment(model: &str, credential: &str, base_url: &str) -> String {
    format!(r#"{{"provider": "openai", "base_url": "{base_url}", "model": "{model}", "credential": "{credential}"}}"#)
}

#[test]
fn the_validator_refuses_what_cannot_be_right_each_at_its_line() {
    let dir = scratch("routes-probed");
    let ok = |m: &str| deployment(m, "OPENAI_API_KEY", "https://api.openai.com/v1");
    let lines = [
        "{".to_string(),
        r#"  "version": 1,"#.into(),
        r#"  "deployments": {"#.into(),
        format!(r#"    "ok": {},"#, ok("gpt-4o-mini")),
        format!(r#"    "": {},"#, ok("m")),
        format!(r#"    "bad\r\nid": {},"#, ok("m")),
        format!(r#"    "padded": {},"#, ok(" gpt-4o ")),
        format!(r#"    "leaks-admin": {},"#, deployment("m", "ADMIN_TOKEN", "https://api.openai.com/v1")),
        format!(r#"    "a-path": {},"#, deployment("m", "../.dev.vars", "https://api.openai.com/v1")),
        format!(r#"    "no-host": {},"#, deployment("m", "K", "http://")),
        r#"    "authz": {"provider": "openai", "base_url": "https://x.example/v1", "model": "m", "credential": "K", "quirks": {"headers": {"Authorization": "Bearer x"}}},"#.into(),
        r#"    "zero": {"provider": "openai", "base_url": "https://x.example/v1", "model": "m", "credential": "K", "timeouts": {"idle_ms": 0}},"#.into(),
        r#"    "rpm0": {"provider": "openai", "base_url": "https://x.example/v1", "model": "m", "credential": "K", "limits": {"rpm": 0}}"#.into(),
        "  },".into(),
        r#"  "models": {"#.into(),
        r#"    "chat": {"chain": ["ok"], "timeout_ms": 60000, "max_timeout_ms": 1000},"#.into(),
        r#"    "nobody": {"chain": [{"deployment": "ok", "weight": 0}]},"#.into(),
        r#"    "retry-forever": {"chain": ["ok"], "retry": {"max_attempts": 1000000}}"#.into(),
        "  }".into(),
        "}".into(),
    ];
    let file = dir.join("routes.json");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let file = file.to_str().unwrap();
    let out = gatewayctl(&["routes", "put", file], &dir.join("state"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a table with every probed mistake was accepted");
    for (line, says) in [
        (5, "deployment id must not be empty"),
        (6, "control character"),
        (7, "model ' gpt-4o ' has leading or trailing whitespace"),
        (8, "'ADMIN_TOKEN' is the gateway's own setting"),
        (9, "credential '../.dev.vars' must name a secret"),
        (10, "base_url 'http://' has no host"),
        (11, "header 'Authorization' carries the vendor credential"),
        (12, "timeouts.idle_ms must be at least 1"),
        (13, "rpm 0 would refuse every request"),
        (16, "timeout_ms 60000 is above max_timeout_ms 1000"),
        (17, "every chain entry has weight 0"),
        (18, "retry.max_attempts 1000000 must be 1..=20"),
    ] {
        let want = format!("{file}: line {line}: ");
        assert!(
            stderr.lines().any(|l| l.starts_with(&want) && l.contains(says)),
            "no '{says}' at line {line}:\n{stderr}"
        );
    }
    assert_eq!(stderr.lines().count(), 12, "one line per problem:\n{stderr}");
    assert!(!dir.join("state").exists(), "a refused table never reached wrangler");
}

#[test]
fn routes_put_uploads_a_table_of_700_deployments() {
    let dir = scratch("routes-700");
    let deployments: Vec<String> = (0..700)
        .map(|i| {
            let url = format!("https://region-{}.vendor.example.com/openai/v1", i % 7);
            let d = deployment(&format!("vendor-model-{i:04}"), "OPENAI_API_KEY", &url);
            // A deployment as admins write them: capabilities and timeouts declared.
            let more = r#", "capabilities": {"tools": true, "json_mode": true, "context_window": 128000}, "timeouts": {"connect_ms": 5000}}"#;
            format!(r#"    "d{i:04}": {}{more}"#, d.trim_end_matches('}'))
        })
        .collect();
    let chain: Vec<String> = (0..700).map(|i| format!(r#""d{i:04}""#)).collect();
    let table = format!(
        "{{\n  \"version\": 1,\n  \"deployments\": {{\n{}\n  }},\n  \"models\": {{\"big\": {{\"chain\": [{}]}}}}\n}}\n",
        deployments.join(",\n"),
        chain.join(", ")
    );
    assert!(table.len() > 128 * 1024, "over the ~128 KiB a single argument may hold: {} bytes", table.len());
    let file = dir.join("routes.json");
    std::fs::write(&file, &table).unwrap();
    let state = dir.join("state");
    let out = gatewayctl(&["routes", "put", file.to_str().unwrap()], &state);
    assert!(out.status.success(), "put failed: {}", String::from_utf8_lossy(&out.stderr));
    let s = stack();
    let got = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source scripts/lib/env.sh && wrangler kv key get routes --text --local --binding CONFIG --persist-to '{}'",
            state.display()
        ))
        .current_dir(&s.root)
        .output()
        .expect("wrangler kv key get");
    assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim_end(), table.trim_end(), "KV holds the table byte for byte");
}

/// Item 11: bad admin tokens are slowed down per isolate. After five within ten seconds every
/// admin request (a good token too: a guess must learn nothing) gets 429 with Retry-After until
/// the oldest leaves the window. Other tests reading the status wait it out (`Stack::admin_status`).
#[test]
fn repeated_bad_admin_tokens_are_refused_for_a_while_then_the_good_token_works() {
    let s = stack();
    let url = s.url("/admin/status");
    let mut refused = None;
    // Five bad tokens lock it; another test's one bad token may already count, so look for the 429.
    for i in 0..6 {
        let r = request("GET", &url, Some(&format!("guess-{i}")), None);
        if r.status == 429 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.error(403)["code"], "invalid_admin_token");
    }
    let refused = refused.expect("six bad admin tokens in a row were never slowed down");
    assert_eq!(refused.error(429)["code"], "admin_auth_rate_limited");
    let wait_s: u64 = refused.header("retry-after").expect("retry-after").parse().unwrap();
    assert!((1..=10).contains(&wait_s), "retry-after {wait_s}");
    let good_while_locked = request("GET", &url, Some("dev-admin-token"), None);
    assert_eq!(good_while_locked.status, 429, "a locked isolate must not confirm a good token");
    std::thread::sleep(std::time::Duration::from_secs(wait_s));
    assert_eq!(s.admin_status("dev-admin-token").status, 200);
}
