#!/usr/bin/env bash
# Runs the real Claude Code CLI (`claude -p`) once, offline, against an Anthropic-format base URL
# (the gateway's door, or the mock vendor directly) and prints its answer. Installs the pinned CLI
# into .tools/claude-code when missing. Exits non-zero when Claude Code reports an error, times out
# or answers nothing.
#
#   tests/e2e/agents/claude_code.sh --base-url http://127.0.0.1:8787 --key vk-… [options] [PROMPT]
#
# Options (defaults in brackets):
#   --base-url URL      ANTHROPIC_BASE_URL, without /v1 (required)
#   --key KEY           the key Claude Code sends [sk-test]
#   --auth MODE         api-key: ANTHROPIC_API_KEY, sent as `x-api-key`;
#                       bearer: ANTHROPIC_AUTH_TOKEN, sent as `Authorization: Bearer` [api-key]
#   --model ID          --model, e.g. claude-sonnet-4-5 or claude-haiku-4-5 [claude-sonnet-4-5]
#   --tools LIST        --tools: "Read" gives one deterministic tool turn against the mock, ""
#                       none, "default" Claude Code's full set (12 tools, ~87 KB bodies) [Read]
#   --header 'N: V'     an extra header on every request (repeatable), e.g.
#                       'x-client-request-id: run-1' to read the calls back from the mock
#   --json              print Claude Code's whole JSON result instead of the answer text
#   --timeout SECS      give up after this long [120]
#   PROMPT              [say hello]
set -euo pipefail

CLAUDE_CODE_VERSION="2.1.332"
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
TOOLS_DIR="$ROOT/.tools/claude-code"
CLAUDE="$TOOLS_DIR/node_modules/.bin/claude"

base_url="" key="sk-test" auth="api-key" model="claude-sonnet-4-5" tools="Read" json=0 timeout_s=120
headers=()
prompt=()
while (($#)); do
  case "$1" in
    --base-url) base_url="$2"; shift 2 ;;
    --key) key="$2"; shift 2 ;;
    --auth) auth="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --tools) tools="$2"; shift 2 ;;
    --header) headers+=("$2"); shift 2 ;;
    --json) json=1; shift ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; prompt+=("$@"); break ;;
    -*) echo "claude_code.sh: unknown option $1" >&2; exit 2 ;;
    *) prompt+=("$1"); shift ;;
  esac
done
[[ -n "$base_url" ]] || { echo "claude_code.sh: --base-url is required" >&2; exit 2; }
[[ "$auth" == api-key || "$auth" == bearer ]] || { echo "claude_code.sh: --auth is api-key or bearer" >&2; exit 2; }
((${#prompt[@]})) || prompt=("say hello")

# Tests run both of this script's cases at once: one install at a time, the second finds it done.
mkdir -p "$ROOT/.tools"
exec 9>"$ROOT/.tools/install.lock"
flock 9
installed_version() { "$CLAUDE" --version 2>/dev/null | awk '{print $1}'; }
if [[ "$(installed_version)" != "$CLAUDE_CODE_VERSION" ]]; then
  echo "claude_code.sh: installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into .tools/claude-code" >&2
  mkdir -p "$TOOLS_DIR"
  [[ -f "$TOOLS_DIR/package.json" ]] || echo '{"private": true}' > "$TOOLS_DIR/package.json"
  # The package ships its native binary in a per-platform optional dependency; npm's engine warning
  # (it asks for Node 22) does not matter because nothing runs on Node after the install.
  (cd "$TOOLS_DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >&2)
  if [[ "$(installed_version)" != "$CLAUDE_CODE_VERSION" ]]; then
    # npm versions that hold back install scripts leave the placeholder: run the copy step by hand.
    (cd "$TOOLS_DIR/node_modules/@anthropic-ai/claude-code" && node install.cjs >&2)
  fi
  [[ "$(installed_version)" == "$CLAUDE_CODE_VERSION" ]] || { echo "claude_code.sh: install failed" >&2; exit 1; }
fi
flock -u 9

# A fresh HOME and working directory: no login, settings, CLAUDE.md, sessions or git repo leak in,
# and nothing is left behind.
sandbox="$(mktemp -d)"
trap 'rm -rf "$sandbox"' EXIT
mkdir -p "$sandbox/home/.claude" "$sandbox/work"
custom_headers="$(printf '%s\n' "${headers[@]+"${headers[@]}"}")"
env_vars=(
  "PATH=$PATH" "HOME=$sandbox/home" "CLAUDE_CONFIG_DIR=$sandbox/home/.claude" "TERM=dumb"
  "ANTHROPIC_BASE_URL=$base_url"
  "DISABLE_TELEMETRY=1" "DISABLE_ERROR_REPORTING=1" "DISABLE_AUTOUPDATER=1"
  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"
)
if [[ "$auth" == bearer ]]; then env_vars+=("ANTHROPIC_AUTH_TOKEN=$key"); else env_vars+=("ANTHROPIC_API_KEY=$key"); fi
[[ -n "$custom_headers" ]] && env_vars+=("ANTHROPIC_CUSTOM_HEADERS=$custom_headers")

set +e
(cd "$sandbox/work" && env -i "${env_vars[@]}" timeout "$timeout_s" "$CLAUDE" -p "${prompt[*]}" \
  --model "$model" --tools "$tools" --output-format json --no-session-persistence \
  >"$sandbox/out.json" 2>"$sandbox/err.txt" </dev/null)
rc=$?
set -e
if ((rc == 124)); then
  echo "claude_code.sh: no answer within ${timeout_s}s (Claude Code retries errors such as 401 for a long time)" >&2
fi
python3 - "$sandbox/out.json" "$sandbox/err.txt" "$rc" "$json" <<'PY'
import json, sys
out_path, err_path, rc, want_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
raw = open(out_path, encoding="utf-8", errors="replace").read()
err = open(err_path, encoding="utf-8", errors="replace").read()
try:
    result = json.loads(raw)
except ValueError:
    result = None
ok = rc == 0 and isinstance(result, dict) and not result.get("is_error") and result.get("subtype") == "success" \
    and str(result.get("result", "")).strip()
if want_json and result is not None:
    print(json.dumps(result, indent=2))
elif ok:
    print(result["result"].strip())
if not ok:
    sys.stderr.write(f"claude_code.sh: claude exited {rc}\n")
    if result is not None and not want_json:
        sys.stderr.write(json.dumps({k: result.get(k) for k in ("subtype", "is_error", "api_error_status", "result")}) + "\n")
    elif result is None and raw.strip():
        sys.stderr.write(raw[-2000:] + "\n")
    if err.strip():
        sys.stderr.write(err[-2000:] + "\n")
    sys.exit(1)
PY
