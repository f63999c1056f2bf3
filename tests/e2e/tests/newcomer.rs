//! A newcomer's first command: `scripts/dev` on a fresh copy of the checkout, before anything else
//! ran there, serves the curls it prints; stopping it leaves nothing running; a second start on
//! other ports keeps what an admin uploaded with `--local`, and a key is revocable by its listed id.
//!
//! The copy builds into a target directory of its own kept under the suite's (`newcomer/`, through
//! `CARGO_TARGET_DIR`, which every script honours), so nothing it builds mixes with the suite's
//! artifacts. Before the first start that directory is given the registry crates the suite has
//! already compiled (`seed_registry_builds`): the same crates from the same `Cargo.lock`, so only
//! the time changes (the suite itself compiles them from cold on a fresh machine). The copy's own
//! crates are always built from its own sources, and no binary is handed over.
//! `build/`, `.dev.vars`, `node_modules/` and `.wrangler/` start empty, as on a real clone.
//!
//! Time bounds are generous on purpose: the first start may build from cold (several minutes on
//! two busy cores), so readiness may take up to 25 minutes before the test gives up.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const FIRST_START: Duration = Duration::from_secs(25 * 60);
const RESTART: Duration = Duration::from_secs(10 * 60);
const STOP: Duration = Duration::from_secs(60);

/// A copy of what a clone of this checkout would hold: tracked and untracked, never ignored, files
/// (never the build directory, wherever it is).
fn fresh_clone(root: &Path, dest: &Path) {
    let target = e2e::target_dir();
    let _ = std::fs::remove_dir_all(dest);
    std::fs::create_dir_all(dest).expect("clone dir");
    let out = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    for name in out.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        let (from, to) = (root.join(&name), dest.join(&name));
        if !from.exists() || from.starts_with(&target) {
            continue; // deleted in the work tree, not yet committed; or a build product
        }
        std::fs::create_dir_all(to.parent().unwrap()).expect("mkdir");
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copy {name}: {e}"));
    }
}

/// The copy's own cargo target directory (see the module's comment).
fn clone_target() -> PathBuf {
    e2e::target_dir().join("newcomer")
}

/// The profile directories a start builds into: host debug (the admin tool and the mock), host
/// release (the wasm build's build scripts and proc-macros) and the wasm release build.
const SEEDED_PROFILES: &[&str] = &["debug", "release", "wasm32-unknown-unknown/release"];

/// Copies into `dest` the suite's compiled registry crates (see the module's comment): each
/// profile's `.fingerprint`, `build` and `deps`, then removes from them every entry of the
/// workspace's own packages, so cargo finds those missing and compiles them from the copy.
fn seed_registry_builds(dest: &Path) {
    let ours = workspace_crate_names();
    for profile in SEEDED_PROFILES {
        for kind in [".fingerprint", "build", "deps"] {
            let from = e2e::target_dir().join(profile).join(kind);
            if !from.is_dir() {
                continue;
            }
            let to = dest.join(profile).join(kind);
            std::fs::create_dir_all(&to).expect("mkdir");
            // -a keeps the times cargo's fingerprints compare; -n keeps what an earlier run left.
            let status = Command::new("cp").arg("-an").arg(from.join(".")).arg(&to).status().expect("cp");
            assert!(status.success(), "copying {} failed", from.display());
            for entry in std::fs::read_dir(&to).expect("read_dir").flatten() {
                if is_ours(&entry.file_name().to_string_lossy(), &ours) {
                    let path = entry.path();
                    let _ = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
                }
            }
        }
    }
}

/// The workspace's package and target names, `-` spelled `_` as in cargo's file names.
fn workspace_crate_names() -> Vec<String> {
    let out = Command::new("cargo")
        .args(["metadata", "--no-deps", "--offline", "--format-version", "1"])
        .current_dir(e2e::root())
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata json");
    let mut names = Vec::new();
    for package in meta["packages"].as_array().expect("packages") {
        names.push(package["name"].as_str().expect("name").replace('-', "_"));
        for target in package["targets"].as_array().into_iter().flatten() {
            names.push(target["name"].as_str().expect("target name").replace('-', "_"));
        }
    }
    names
}

/// Whether a file or directory in `.fingerprint`, `build` or `deps` belongs to one of `ours`:
/// cargo names them `[lib]<crate>-<hash>[.<ext>]`.
fn is_ours(entry: &str, ours: &[String]) -> bool {
    let stem = entry.split('.').next().unwrap_or(entry);
    let Some((name, _hash)) = stem.rsplit_once('-') else { return false };
    let name = name.replace('-', "_");
    ours.iter().any(|o| *o == name || name.strip_prefix("lib") == Some(o.as_str()))
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Processes whose command line mentions `dir`, other than this test's own.
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// `scripts/dev` running in the clone, its stdout read line by line.
struct Dev {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    log: PathBuf,
}

impl Dev {
    fn start(clone: &Path, env: &[(&str, String)], log: &Path) -> Dev {
        let stderr = std::fs::File::create(log).expect("log file");
        let mut child = Command::new(clone.join("scripts/dev"))
            .current_dir(clone)
            .env("CARGO_TARGET_DIR", clone_target())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn scripts/dev");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Dev { child, lines, seen: Vec::new(), log: log.to_path_buf() }
    }

    /// Waits for the "Press Ctrl-C" line; panics with the script's output if it never comes.
    fn wait_ready(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_secs(1)) {
                Ok(line) => {
                    let done = line.starts_with("Press Ctrl-C");
                    self.seen.push(line);
                    if done {
                        return;
                    }
                }
                Err(_) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        panic!("scripts/dev exited ({status}) before it was ready:\n{}", self.output());
                    }
                }
            }
        }
        panic!("scripts/dev not ready within {within:?}:\n{}", self.output());
    }

    fn output(&self) -> String {
        format!("{}\n--- stderr:\n{}", self.seen.join("\n"), std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// The printed curl commands (each spans several `\`-continued lines).
    fn curls(&self) -> Vec<String> {
        let mut curls = Vec::new();
        let mut current: Option<String> = None;
        for line in &self.seen {
            let trimmed = line.trim();
            if trimmed.starts_with("curl ") {
                current = Some(String::new());
            }
            if let Some(cmd) = current.as_mut() {
                cmd.push_str(trimmed.trim_end_matches('\\'));
                cmd.push(' ');
                if !trimmed.ends_with('\\') {
                    curls.push(current.take().unwrap());
                }
            }
        }
        curls
    }

    /// SIGTERM, as Ctrl-C's sibling; returns once the script has exited.
    fn stop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + STOP;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("scripts/dev did not exit within {STOP:?} of SIGTERM:\n{}", self.output());
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            std::thread::sleep(Duration::from_secs(3));
            let _ = self.child.kill();
        }
    }
}

fn sh(cmd: &str, cwd: &Path) -> (bool, String) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .current_dir(cwd)
        .env("CARGO_TARGET_DIR", clone_target())
        .output()
        .expect("bash");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn assert_nothing_left(clone: &Path, ports: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = processes_under(clone);
        let busy: Vec<_> = ports.iter().filter(|p| !port_free(**p)).collect();
        if left.is_empty() && busy.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left running after stop: {left:#?}; ports still bound: {busy:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn sse_data_events(body: &str) -> Vec<&str> {
    body.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect()
}

#[test]
fn only_the_workspaces_own_build_entries_are_left_out() {
    let ours: Vec<String> = ["edge_gateway", "mock_provider", "limiter", "e2e"].map(String::from).to_vec();
    for entry in [
        "edge-gateway-0a1b2c3d4e5f6a7b",
        "libedge_gateway-0a1b2c3d4e5f6a7b.rlib",
        "mock_provider-0a1b2c3d4e5f6a7b",
        "mock_provider-0a1b2c3d4e5f6a7b.d",
        "liblimiter-0a1b2c3d4e5f6a7b.rmeta",
        "e2e-0a1b2c3d4e5f6a7b",
    ] {
        assert!(is_ours(entry, &ours), "{entry}");
    }
    for entry in [
        "serde-0a1b2c3d4e5f6a7b",
        "libserde_json-0a1b2c3d4e5f6a7b.rlib",
        "libc-0a1b2c3d4e5f6a7b",
        "liblibc-0a1b2c3d4e5f6a7b.rlib",
        "e2e",
        "wasm-bindgen-0a1b2c3d4e5f6a7b",
    ] {
        assert!(!is_ours(entry, &ours), "{entry}");
    }
}

#[test]
fn scripts_dev_first_on_a_fresh_clone_then_again_on_other_ports() {
    let root = e2e::root();
    let work = root.join("target/e2e").join(format!("newcomer-{}", std::process::id()));
    let clone = work.join("clone");
    fresh_clone(&root, &clone);
    seed_registry_builds(&clone_target());

    // 1. The first command a newcomer runs, on the README's ports when they are free.
    let defaults = port_free(8787) && port_free(9797) && port_free(9229);
    let first: Vec<(&str, String)> = if defaults {
        vec![]
    } else {
        eprintln!("8787/9797/9229 are taken on this machine: the first start uses free ports instead");
        vec![("GATEWAY_PORT", e2e::free_port().to_string()), ("MOCK_PORT", e2e::free_port().to_string())]
    };
    let gateway_port: u16 = first.iter().find(|(k, _)| *k == "GATEWAY_PORT").map_or(8787, |(_, v)| v.parse().unwrap());
    let mock_port: u16 = first.iter().find(|(k, _)| *k == "MOCK_PORT").map_or(9797, |(_, v)| v.parse().unwrap());
    let mut dev = Dev::start(&clone, &first, &work.join("dev-1.log"));
    dev.wait_ready(FIRST_START);
    let curls = dev.curls();
    assert_eq!(curls.len(), 2, "a JSON and a streaming curl:\n{}", dev.output());
    let (ok, body) = sh(&curls[0], &clone);
    assert!(ok, "printed curl failed: {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(answer["object"], "chat.completion", "{body}");
    assert!(answer["choices"][0]["message"]["content"].as_str().is_some_and(|c| !c.is_empty()), "{body}");
    // The streamed curl, timed: its events must arrive over time, not in one piece at the end.
    let timed = format!(
        "{} | while IFS= read -r line; do printf '%s %s\\n' \"$(date +%s%3N)\" \"$line\"; done",
        curls[1].trim()
    );
    let (ok, body) = sh(&timed, &clone);
    assert!(ok, "printed streaming curl failed: {body}");
    let stamps: Vec<u64> =
        body.lines().filter(|l| l.contains(" data:")).filter_map(|l| l.split(' ').next()?.parse().ok()).collect();
    let data: Vec<&str> = body.lines().filter_map(|l| l.split_once(' ').map(|(_, rest)| rest)).collect();
    let events = sse_data_events(&data.join("\n")).len();
    assert!(events >= 5 && data.iter().any(|l| l.contains("[DONE]")), "a whole SSE stream: {body}");
    let spread = stamps.last().unwrap() - stamps.first().unwrap();
    assert!(spread >= 100, "the {events} events arrived within {spread} ms: not incrementally:\n{body}");
    dev.stop();
    assert_nothing_left(&clone, &[gateway_port, mock_port]);

    // 2. An admin uploads a route table and issues a key with `--local` alone, while it is stopped.
    let (gw2, mock2) = (e2e::free_port(), e2e::free_port());
    let routes =
        std::fs::read_to_string(clone.join("dev/routes.json")).unwrap().replace("{{MOCK_PORT}}", &mock2.to_string());
    let mut table: serde_json::Value = serde_json::from_str(&routes).unwrap();
    table["models"]["team-chat"] = serde_json::json!({"chain": ["mock-openai"], "description": "added by an admin"});
    std::fs::write(work.join("admin-routes.json"), table.to_string()).unwrap();
    let (ok, out) = sh(&format!("scripts/routes put '{}' --local", work.join("admin-routes.json").display()), &clone);
    assert!(ok, "routes put --local: {out}");
    let (ok, out) =
        sh("scripts/keys create --tenant team --app newcomer --models team-chat --local 2>/dev/null", &clone);
    assert!(ok, "keys create --local: {out}");
    let secret = out.trim().to_string();
    assert!(secret.starts_with("gk_"), "{out}");

    // 3. scripts/dev again, on other ports: the admin's table and key are served, not reseeded away.
    let mut dev = Dev::start(
        &clone,
        &[("GATEWAY_PORT", gw2.to_string()), ("MOCK_PORT", mock2.to_string())],
        &work.join("dev-2.log"),
    );
    dev.wait_ready(RESTART);
    let stderr = std::fs::read_to_string(&dev.log).unwrap_or_default();
    assert!(stderr.contains("keeping the 'routes' document"), "the kept upload is announced:\n{}", dev.output());
    let curls = dev.curls();
    assert!(curls[0].contains(&format!(":{gw2}/")), "the curl names the chosen port: {}", curls[0]);
    let (ok, body) = sh(&curls[0], &clone);
    assert!(ok && body.contains("chat.completion"), "demo curl on port {gw2}: {body}");
    let team = format!(
        "curl -sS http://127.0.0.1:{gw2}/v1/chat/completions -H 'Authorization: Bearer {secret}' \
         -H 'Content-Type: application/json' -d '{{\"model\":\"team-chat\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
    );
    let (_, body) = sh(&team, &clone);
    assert!(body.contains("chat.completion"), "the admin's key and model work: {body}");

    // 4. Revoke by the id `keys list` prints (the admin no longer has the secret).
    let (ok, listed) = sh("scripts/keys list --local", &clone);
    assert!(ok, "keys list --local: {listed}");
    let id = listed
        .lines()
        .find(|l| l.contains(" team ") && l.contains("newcomer"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("the new key is listed: {listed}"))
        .to_string();
    assert!(!listed.contains(&secret), "list never shows a secret");
    let (ok, out) = sh(&format!("scripts/keys revoke {id} --local"), &clone);
    assert!(ok, "revoke by id: {out}");
    // The dev config cache lives 1 s (dev/dev.vars); allow 20 s for a busy machine.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = sh(&team, &clone);
        if body.contains("key_revoked") {
            break;
        }
        assert!(Instant::now() < deadline, "the revoked key still works: {body}");
        std::thread::sleep(Duration::from_millis(500));
    }
    dev.stop();
    assert_nothing_left(&clone, &[gw2, mock2]);
    drop(dev);
    let _ = std::fs::remove_dir_all(&work);
}
