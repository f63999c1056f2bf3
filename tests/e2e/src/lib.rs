//! Harness for end-to-end tests: starts the mock vendor and the built worker under Miniflare
//! (workerd, `tests/e2e/runtime.cjs`) on free ports with isolated local state, seeds KV, and
//! stops both when the test process exits. `scripts/dev` (wrangler dev) has its own test.

pub mod client;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const KEY: &str = "gk_e2e_tenant_a_0001";
pub const KEY_B: &str = "gk_e2e_tenant_b_0002";
pub const KEY_REVOKED: &str = "gk_e2e_revoked_0003";
pub const KEY_EXPIRED: &str = "gk_e2e_expired_0004";
pub const KEY_LIMITED_MODELS: &str = "gk_e2e_only_claude_0005";
/// Only the usage test uses this tenant, so its events can be counted exactly.
pub const KEY_USAGE: &str = "gk_e2e_usage_0006";
/// Only the budget test uses this tenant: its monthly budget is small enough to run out.
pub const KEY_BUDGET: &str = "gk_e2e_budget_0007";
pub const BUDGET_TENANT: &str = "tenant-budget";
pub const BUDGET_SOFT_MICRO_USD: u64 = 50;
pub const BUDGET_HARD_MICRO_USD: u64 = 600;
/// Layered limits (tests/gateway/layers.rs): two keys of one tenant, key rpm 3 and 4 < tenant rpm 6.
pub const KEY_LAYERS_A: &str = "gk_e2e_layers_a_0008";
pub const KEY_LAYERS_B: &str = "gk_e2e_layers_b_0009";
pub const LAYERS_TENANT: &str = "tenant-layers";
/// A key with rpm 3 whose tenant (rpm 50) is roomy: for deployment refusals.
pub const KEY_LAYERS_C: &str = "gk_e2e_layers_c_0010";
/// Token limits: a key with TPM 800 and a key without limits, under a tenant with TPM 1,000.
pub const KEY_LAYERS_TPM: &str = "gk_e2e_layers_tpm_0011";
pub const KEY_LAYERS_TPM_FREE: &str = "gk_e2e_layers_tpm_0012";
/// The Messages door (tests/gateway/messages.rs): a tenant of its own, so its usage events are
/// found exactly, and a key with rpm 2 for the door's 429.
pub const KEY_MESSAGES: &str = "gk_e2e_messages_0013";
pub const MESSAGES_TENANT: &str = "tenant-messages";
pub const KEY_MESSAGES_RPM: &str = "gk_e2e_messages_rpm_0014";

/// Only the hostile-input test uses this tenant: it counts that every one of its events is stored.
pub const KEY_BYSTANDER: &str = "gk_e2e_bystander_0013";
pub const BYSTANDER_TENANT: &str = "tenant-bystander";

pub struct Stack {
    pub gateway: String,
    pub mock: String,
    pub root: PathBuf,
    pub state: PathBuf,
    /// The runtime's control port: KV writes through the running gateway's own storage.
    control: String,
    /// How to start the gateway again on the same state (`restart`).
    gateway_cmd: String,
    gateway_log: PathBuf,
    // Closing these pipes (at process exit) makes the wrappers kill their process groups:
    // the mock's first, the gateway's second.
    _guards: Mutex<Vec<(Child, ChildStdin)>>,
}

/// What a test's own stack changes from the shared one.
#[derive(Default)]
pub struct StackOptions {
    /// Extra CONFIG KV entries (`{"key","value"}`), seeded after the shared ones.
    pub seed: Vec<serde_json::Value>,
    /// Extra `.dev.vars` lines, `NAME=value`.
    pub vars: Vec<String>,
    /// `max_retries` of the usage queue's consumer (wrangler.toml says 10).
    pub usage_max_retries: Option<u32>,
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

/// Where cargo built this suite, whatever chose it (`CARGO_TARGET_DIR`, `build.target-dir`): a
/// test binary is `<target>/<profile>/deps/<name>`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    exe.and_then(|e| Some(e.parent()?.parent()?.parent()?.to_path_buf())).unwrap_or_else(|| root().join("target"))
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Starts `command` in its own process group; the group dies when our stdin pipe closes.
fn spawn_group(command: &str, cwd: &Path, log: &Path) -> (Child, ChildStdin) {
    let script = format!("{command} > '{}' 2>&1 & read -r _; kill -TERM -- -$$ 2>/dev/null", log.display());
    let mut child = Command::new("setsid")
        .arg("bash")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn setsid bash");
    let stdin = child.stdin.take().expect("stdin");
    (child, stdin)
}

fn sha256_hex(s: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().expect("stdin").write_all(s.as_bytes())?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().expect("hash").to_string()
}

pub fn key_entry(secret: &str, record: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"key": format!("key:{}", sha256_hex(secret)), "value": record.to_string()})
}

fn wait_http(url: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if ureq::get(url).timeout(Duration::from_secs(2)).call().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Any HTTP answer, error statuses included.
fn answers(url: &str) -> bool {
    match ureq::get(url).timeout(Duration::from_secs(2)).call() {
        Ok(_) | Err(ureq::Error::Status(..)) => true,
        Err(_) => false,
    }
}

static STACK: OnceLock<Stack> = OnceLock::new();

pub fn stack() -> &'static Stack {
    STACK.get_or_init(|| {
        launch(&root().join("target/e2e").join(std::process::id().to_string()), StackOptions::default())
    })
}

/// A stack of the test's own (own mock, own state), for tests that restart the gateway or need
/// settings the shared stack must not have; it stops when the test process exits.
pub fn own_stack(name: &str, options: StackOptions) -> Stack {
    launch(&root().join("target/e2e").join(std::process::id().to_string()).join(name), options)
}

fn launch(run_dir: &Path, options: StackOptions) -> Stack {
    let root = root();
    let run_dir = run_dir.to_path_buf();
    std::fs::create_dir_all(&run_dir).expect("run dir");
    let state = run_dir.join("state");
    let mock_bin = std::env::var("MOCK_PROVIDER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| target_dir().join("debug/mock-provider"));
    assert!(
        mock_bin.exists(),
        "{} missing: run `cargo build -p mock-provider` (scripts/test does)",
        mock_bin.display()
    );

    let mock_port = free_port();
    let mock_log = run_dir.join("mock.log");
    let mock = spawn_group(&format!("'{}' --port {mock_port}", mock_bin.display()), &root, &mock_log);
    let mock_url = format!("http://127.0.0.1:{mock_port}");
    assert!(wait_http(&format!("{mock_url}/_mock/health"), Duration::from_secs(20)), "mock did not start");

    let routes = std::fs::read_to_string(root.join("tests/e2e/fixtures/routes.json"))
        .expect("routes fixture")
        .replace("{{MOCK_PORT}}", &mock_port.to_string());
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    std::fs::write(run_dir.join("routes.json"), &routes).expect("routes copy");
    let seed = serde_json::json!([
        {"key": "routes", "value": routes},
        key_entry(KEY, serde_json::json!({"tenant": "tenant-a", "app": "e2e", "env": "test"})),
        key_entry(KEY_B, serde_json::json!({"tenant": "tenant-b", "app": "e2e", "env": "test"})),
        key_entry(KEY_REVOKED, serde_json::json!({"tenant": "tenant-a", "app": "e2e", "revoked": true})),
        key_entry(KEY_EXPIRED, serde_json::json!({"tenant": "tenant-a", "app": "e2e", "expires_at_ms": now_ms - 1000})),
        key_entry(KEY_LIMITED_MODELS, serde_json::json!({"tenant": "tenant-a", "app": "e2e", "models": ["claude-sonnet"]})),
        key_entry(KEY_USAGE, serde_json::json!({"tenant": "tenant-usage", "app": "usage-e2e", "env": "test"})),
        {"key": "prices", "value": std::fs::read_to_string(root.join("tests/e2e/fixtures/prices.json")).expect("prices fixture")},
        key_entry(KEY_BUDGET, serde_json::json!({"tenant": BUDGET_TENANT, "app": "budget-e2e", "env": "test"})),
        {"key": "budgets", "value": serde_json::json!({"version": 1, "tenants": {BUDGET_TENANT: {"period": "month",
            "soft_micro_usd": BUDGET_SOFT_MICRO_USD, "hard_micro_usd": BUDGET_HARD_MICRO_USD}}}).to_string()},
        key_entry(KEY_LAYERS_A, serde_json::json!({"tenant": LAYERS_TENANT, "app": "layers-e2e", "limits": {"rpm": 3}})),
        key_entry(KEY_LAYERS_B, serde_json::json!({"tenant": LAYERS_TENANT, "app": "layers-e2e", "limits": {"rpm": 4}})),
        {"key": format!("tenant:{LAYERS_TENANT}"), "value": serde_json::json!({"limits": {"rpm": 6}}).to_string()},
        key_entry(KEY_LAYERS_C, serde_json::json!({"tenant": "tenant-layers-dep", "app": "layers-e2e", "limits": {"rpm": 3}})),
        {"key": "tenant:tenant-layers-dep", "value": serde_json::json!({"limits": {"rpm": 50}}).to_string()},
        key_entry(KEY_LAYERS_TPM, serde_json::json!({"tenant": "tenant-layers-tpm", "app": "layers-e2e", "limits": {"tpm": 800}})),
        key_entry(KEY_LAYERS_TPM_FREE, serde_json::json!({"tenant": "tenant-layers-tpm", "app": "layers-e2e"})),
        {"key": "tenant:tenant-layers-tpm", "value": serde_json::json!({"limits": {"tpm": 1000}}).to_string()},
        key_entry(KEY_BYSTANDER, serde_json::json!({"tenant": BYSTANDER_TENANT, "app": "hostile-e2e", "env": "test"})),
        key_entry(KEY_MESSAGES, serde_json::json!({"tenant": MESSAGES_TENANT, "app": "messages-e2e", "env": "test"})),
        key_entry(KEY_MESSAGES_RPM, serde_json::json!({"tenant": "tenant-messages-rpm", "app": "messages-e2e", "limits": {"rpm": 2}})),
    ]);
    // A test's own entries replace the shared ones of the same key.
    let own: Vec<serde_json::Value> = options.seed.iter().map(|e| e["key"].clone()).collect();
    let seed: Vec<serde_json::Value> =
        seed.as_array().unwrap().iter().filter(|e| !own.contains(&e["key"])).cloned().chain(options.seed).collect();
    let seed_file = run_dir.join("seed.json");
    std::fs::write(&seed_file, serde_json::Value::from(seed).to_string()).expect("seed");
    wrangler(&root, &["kv", "bulk", "put", "--local", "--binding", "CONFIG"], &state, &[seed_file.to_str().unwrap()]);

    let config = isolated_config(&root, &run_dir, options.usage_max_retries);
    let env_file = run_dir.join("dev.vars");
    let vars = std::fs::read_to_string(root.join("dev/dev.vars")).expect("dev vars");
    std::fs::write(&env_file, format!("{vars}\n{}\n", options.vars.join("\n"))).expect("own dev vars");
    let port = free_port();
    let control = free_port();
    let gateway_log = run_dir.join("gateway.log");
    let cmd = format!(
        "node tests/e2e/runtime.cjs '{}' '{}' '{}' {port} {control}",
        config.display(),
        env_file.display(),
        state.display()
    );
    let gateway_cmd = format!("source scripts/lib/env.sh && {cmd}");
    let gateway = spawn_group(&gateway_cmd, &root, &gateway_log);
    let gateway_url = format!("http://127.0.0.1:{port}");
    // Generous: the first start compiles the wasm module, slow on a busy machine.
    if !wait_http(&format!("{gateway_url}/healthz"), Duration::from_secs(120)) {
        let log = std::fs::read_to_string(&gateway_log).unwrap_or_default();
        panic!("the gateway (Miniflare) did not answer within 120 s; its log:\n{log}");
    }
    let control = format!("http://127.0.0.1:{control}");
    Stack {
        gateway: gateway_url,
        mock: mock_url,
        root,
        state,
        control,
        gateway_cmd,
        gateway_log,
        _guards: Mutex::new(vec![mock, gateway]),
    }
}

/// A copy of the built worker and a wrangler config without the build step, so the run tests
/// exactly what `scripts/build-worker` built and edits to src/ during the run don't reload it.
fn isolated_config(root: &Path, run_dir: &Path, usage_max_retries: Option<u32>) -> PathBuf {
    let build = run_dir.join("build");
    let status = Command::new("cp").arg("-r").arg(root.join("build")).arg(&build).status().expect("cp build");
    assert!(status.success() && build.join("index.js").exists(), "build/ missing: run scripts/build-worker first");
    let original = std::fs::read_to_string(root.join("wrangler.toml")).expect("wrangler.toml");
    let mut out = String::new();
    let mut in_build = false;
    let mut top_level = true;
    for line in original.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_build = trimmed == "[build]";
            top_level = false;
        }
        if in_build {
            continue;
        }
        if top_level && trimmed.starts_with("name =") {
            // A name of its own keeps concurrent runs apart in wrangler's local dev registry.
            out.push_str(&format!("name = \"edge-gateway-e2e-{}\"\n", std::process::id()));
        } else if top_level && trimmed.starts_with("main =") {
            out.push_str(&format!("main = \"{}\"\n", build.join("index.js").display()));
        } else if let (Some(n), true) =
            (usage_max_retries, trimmed.starts_with("max_retries =") && !in_dlq_consumer(&out))
        {
            out.push_str(&format!("max_retries = {n}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    let config = run_dir.join("wrangler.toml");
    std::fs::write(&config, out).expect("write config");
    config
}

/// Whether the config written so far is inside the dead-letter queue's consumer table.
fn in_dlq_consumer(written: &str) -> bool {
    let last_queue = written.lines().rev().find(|l| l.trim_start().starts_with("queue ="));
    last_queue.is_some_and(|l| l.contains("-dlq\""))
}

fn wrangler(root: &Path, args: &[&str], state: &Path, tail: &[&str]) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source scripts/lib/env.sh && wrangler {} --persist-to '{}' {}",
            args.join(" "),
            state.display(),
            tail.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(" ")
        ))
        .current_dir(root)
        .output()
        .expect("run wrangler");
    assert!(
        out.status.success(),
        "wrangler {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Stack {
    /// Stops the gateway, runs `between` (e.g. `wrangler kv key put` on the stopped state), and
    /// starts it again on the same state and ports: a new isolate, as after a deploy or an eviction.
    pub fn restart(&self, between: impl FnOnce(&Stack)) {
        let mut guards = self._guards.lock().unwrap();
        let (mut child, stdin) = guards.pop().expect("the gateway's guard");
        drop(stdin);
        let _ = child.wait();
        // The runtime disposes its storage after the wrapper is gone: wait until the port is free.
        let addr = self.gateway.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(&addr).is_ok() {
            assert!(Instant::now() < deadline, "the gateway did not stop within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_millis(500));
        between(self);
        guards.push(spawn_group(&self.gateway_cmd, &self.root, &self.gateway_log));
        let deadline = Instant::now() + Duration::from_secs(120);
        while !answers(&self.url("/healthz")) {
            let log = std::fs::read_to_string(&self.gateway_log).unwrap_or_default();
            assert!(Instant::now() < deadline, "the restarted gateway did not answer within 120 s; its log:\n{log}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Writes one CONFIG KV key with `wrangler kv key put --local` (the admin's plain workflow,
    /// no validation): only while the gateway is stopped, inside `restart`.
    pub fn wrangler_kv_put(&self, key: &str, value: &str) {
        wrangler(&self.root, &["kv", "key", "put", "--local", "--binding", "CONFIG"], &self.state, &[key, value]);
    }

    /// Writes one key into the running gateway's local KV (CONFIG namespace), as an admin's
    /// `wrangler kv key put --local` would, through the runtime's own storage.
    pub fn put_config(&self, key: &str, value: &str) {
        let body = serde_json::json!([{"key": key, "value": value}]).to_string();
        let reply = ureq::post(&format!("{}/kv/CONFIG", self.control)).send_string(&body);
        assert!(reply.is_ok(), "KV write through the runtime failed: {reply:?}");
    }

    /// How many requests the mock received for a model string.
    pub fn mock_calls(&self, model: &str) -> u64 {
        let url = format!("{}/_mock/calls?model={}", self.mock, client::encode(model));
        let v: serde_json::Value =
            serde_json::from_str(&ureq::get(&url).call().expect("mock calls").into_string().unwrap()).unwrap();
        v["calls"].as_u64().unwrap_or(0)
    }

    /// The upstream requests the gateway made for one of its requests (by the reply's
    /// `x-request-id`, which it sends upstream as `x-client-request-id`): only this test's calls.
    pub fn upstream_calls(&self, reply: &client::Reply) -> Vec<serde_json::Value> {
        self.upstream_calls_for(reply.header("x-request-id").expect("reply without x-request-id"))
    }

    /// The upstream requests the gateway made for the request with this `x-request-id`.
    pub fn upstream_calls_for(&self, id: &str) -> Vec<serde_json::Value> {
        let url = format!("{}/_mock/calls?request_id={}", self.mock, client::encode(id));
        let v: serde_json::Value =
            serde_json::from_str(&ureq::get(&url).call().expect("mock calls").into_string().unwrap()).unwrap();
        v["requests"].as_array().cloned().unwrap_or_default()
    }

    /// The last upstream request made for `reply`'s request; panics if there was none.
    pub fn upstream_last(&self, reply: &client::Reply) -> serde_json::Value {
        let calls = self.upstream_calls(reply);
        calls.last().cloned().unwrap_or_else(|| panic!("no upstream request for this reply: {}", reply.body))
    }

    /// The last request for a model string: only for a model no other test calls.
    pub fn mock_last(&self, model: &str) -> serde_json::Value {
        let url = format!("{}/_mock/last?model={}", self.mock, client::encode(model));
        serde_json::from_str(&ureq::get(&url).call().expect("mock last").into_string().unwrap()).unwrap()
    }

    /// Each stored usage object's content type and custom metadata, by key, as
    /// `scripts/usage-report --metadata` reads them from Miniflare's R2 index.
    pub fn r2_metadata(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        serde_json::from_slice(&self.usage_report(&["--metadata"])).expect("R2 metadata JSON")
    }

    /// Copies the gateway's local R2 usage objects (through the report script's reader) into
    /// `out` and returns them by key.
    pub fn exported_usage(&self, out: &Path) -> std::collections::BTreeMap<String, String> {
        let _ = std::fs::remove_dir_all(out);
        self.usage_report(&["--copy-to".as_ref(), out.as_os_str()]);
        let mut files = std::collections::BTreeMap::new();
        let mut dirs = vec![out.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let key = path.strip_prefix(out).unwrap().to_string_lossy().into_owned();
                    files.insert(key, std::fs::read_to_string(&path).expect("object"));
                }
            }
        }
        files
    }

    /// `scripts/usage-report --dir <local state> ARGS`, which must succeed; its stdout.
    fn usage_report<A: AsRef<std::ffi::OsStr>>(&self, args: &[A]) -> Vec<u8> {
        let run = Command::new(self.root.join("scripts/usage-report"))
            .arg("--dir")
            .arg(&self.state)
            .args(args)
            .output()
            .expect("run scripts/usage-report");
        assert!(run.status.success(), "usage-report failed: {}", String::from_utf8_lossy(&run.stderr));
        run.stdout
    }

    /// `GET /admin/status` with `token`. The gateway refuses every admin request for a few seconds
    /// after repeated bad tokens (tests/gateway/admin_guard.rs provokes that): waits that out.
    pub fn admin_status(&self, token: &str) -> client::Reply {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let reply = client::request("GET", &self.url("/admin/status"), Some(token), None);
            if reply.status != 429 || std::time::Instant::now() > deadline {
                return reply;
            }
            let wait_s = reply.header("retry-after").and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
            std::thread::sleep(Duration::from_secs(wait_s.min(15)));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.gateway)
    }
}

/// A tenant's usage events in exported NDJSON objects: how many lines, and the events by id.
pub fn usage_events_of(
    tenant: &str,
    files: &std::collections::BTreeMap<String, String>,
) -> (usize, std::collections::BTreeMap<String, serde_json::Value>) {
    let mut lines = 0;
    let mut events = std::collections::BTreeMap::new();
    for body in files.values() {
        for line in body.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("NDJSON line ({e}): {line}"));
            if v["tenant"] == tenant {
                lines += 1;
                events.insert(v["event_id"].as_str().expect("event_id").to_string(), v);
            }
        }
    }
    (lines, events)
}
