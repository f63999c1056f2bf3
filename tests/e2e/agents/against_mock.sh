#!/usr/bin/env bash
# Proves the agent recipes against the mock vendor directly (no gateway): builds and starts
# mock-provider, runs Claude Code (one tool turn, its thinking block replayed and verified by the
# mock) and Codex (one function call turn), and checks what reached the mock. Installs the pinned
# CLIs into .tools/ when missing. Exits non-zero on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$ROOT"
nice -n 10 cargo build -q -p mock-provider
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
log="$(mktemp)"
"$target_dir/debug/mock-provider" --port 0 >"$log" &
mock_pid=$!
trap 'kill "$mock_pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 50); do grep -q listening "$log" && break; sleep 0.1; done
addr="$(sed -n 's/^mock-provider listening on //p' "$log")"
[[ -n "$addr" ]] || { echo "against_mock.sh: mock-provider did not start" >&2; exit 1; }
run_id="claude-$$"

answer="$(tests/e2e/agents/claude_code.sh --base-url "http://$addr" --tools Read --header "x-client-request-id: $run_id")"
echo "claude -p: $answer"
curl -sf "http://$addr/_mock/calls?request_id=$run_id" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["calls"] == 2, ("expected a tool turn of 2 requests", d["calls"])
first, second = d["requests"]
for r in d["requests"]:
    assert (r["method"], r["path"], r["query"]) == ("POST", "/v1/messages", "beta=true"), r["path"]
    assert r["headers"]["anthropic-version"] == "2023-06-01"
    assert "claude-code-20250219" in r["headers"]["anthropic-beta"]
    assert r["body"]["stream"] is True and r["body"]["thinking"]["type"] == "enabled"
replayed = second["body"]["messages"][1]["content"]
assert [b["type"] for b in replayed] == ["thinking", "text", "tool_use"], replayed
assert second["body"]["messages"][2]["content"][0]["type"] == "tool_result"
print("claude: 2 requests, thinking block replayed with its signature and accepted")
'

answer="$(tests/e2e/agents/codex.sh --base-url "http://$addr/v1")"
echo "codex exec: $answer"
curl -sf "http://$addr/_mock/calls" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["by_path"].get("/v1/responses") == 2, d
print("codex: 2 requests to /v1/responses (function call, then the answer)")
'
