#!/usr/bin/env bash
# Runs the real Codex CLI (`codex exec`) once, offline, against an OpenAI Responses-format base URL
# (the gateway's /v1/responses door, or the mock vendor directly) and prints its last message.
# Installs the pinned CLI into .tools/codex when missing. Exits non-zero when Codex fails, times
# out or answers nothing.
#
#   tests/e2e/agents/codex.sh --base-url http://127.0.0.1:8787/v1 --key vk-… [options] [PROMPT]
#
# Options (defaults in brackets):
#   --base-url URL    the provider's base_url, with /v1 (required)
#   --key KEY         sent as Authorization: Bearer [sk-test]
#   --model ID        [gpt-4o-mini]
#   --header 'N: V'   an extra header on every request (repeatable); Codex sets its own
#                     x-client-request-id (its session id), so correlate by another name
#   --timeout SECS    give up after this long [120]
#   PROMPT            [say hello]
set -euo pipefail

CODEX_VERSION="0.171.0"
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
TOOLS_DIR="$ROOT/.tools/codex"
CODEX="$TOOLS_DIR/node_modules/.bin/codex"

base_url="" key="sk-test" model="gpt-4o-mini" timeout_s=120
headers=()
prompt=()
while (($#)); do
  case "$1" in
    --base-url) base_url="$2"; shift 2 ;;
    --key) key="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --header) headers+=("$2"); shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; prompt+=("$@"); break ;;
    -*) echo "codex.sh: unknown option $1" >&2; exit 2 ;;
    *) prompt+=("$1"); shift ;;
  esac
done
[[ -n "$base_url" ]] || { echo "codex.sh: --base-url is required" >&2; exit 2; }
((${#prompt[@]})) || prompt=("say hello")

# Tests run both of this script's cases at once: one install at a time, the second finds it done.
mkdir -p "$ROOT/.tools"
exec 9>"$ROOT/.tools/install.lock"
flock 9
installed_version() { "$CODEX" --version 2>/dev/null | awk '{print $2}'; }
if [[ "$(installed_version)" != "$CODEX_VERSION" ]]; then
  echo "codex.sh: installing @openai/codex@$CODEX_VERSION into .tools/codex" >&2
  mkdir -p "$TOOLS_DIR"
  [[ -f "$TOOLS_DIR/package.json" ]] || echo '{"private": true}' > "$TOOLS_DIR/package.json"
  (cd "$TOOLS_DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error "@openai/codex@$CODEX_VERSION" >&2)
  [[ "$(installed_version)" == "$CODEX_VERSION" ]] || { echo "codex.sh: install failed" >&2; exit 1; }
fi
flock -u 9

# Codex refuses to put its helper binaries under /tmp (a warning only); a sandbox under .tools avoids it.
mkdir -p "$ROOT/.tools/tmp"
sandbox="$(mktemp -d "$ROOT/.tools/tmp/codex.XXXXXX")"
trap 'rm -rf "$sandbox"' EXIT
mkdir -p "$sandbox/home/.codex" "$sandbox/work"
toml_string() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
{
  echo "model = $(toml_string "$model")"
  echo 'model_provider = "gateway"'
  echo
  echo '[model_providers.gateway]'
  echo 'name = "gateway"'
  echo "base_url = $(toml_string "$base_url")"
  echo 'env_key = "GATEWAY_API_KEY"'
  echo 'wire_api = "responses"'
  if ((${#headers[@]})); then
    echo
    echo '[model_providers.gateway.http_headers]'
    for h in "${headers[@]}"; do
      echo "$(toml_string "${h%%:*}") = $(toml_string "$(echo "${h#*:}" | sed 's/^ *//')")"
    done
  fi
} > "$sandbox/home/.codex/config.toml"

set +e
(cd "$sandbox/work" && env -i "PATH=$PATH" "HOME=$sandbox/home" "CODEX_HOME=$sandbox/home/.codex" \
  "GATEWAY_API_KEY=$key" timeout "$timeout_s" "$CODEX" exec --skip-git-repo-check --ephemeral \
  -o "$sandbox/last.txt" "${prompt[*]}" >"$sandbox/out.txt" 2>"$sandbox/err.txt" </dev/null)
rc=$?
set -e
answer="$(cat "$sandbox/last.txt" 2>/dev/null || true)"
if ((rc != 0)) || [[ -z "${answer//[[:space:]]/}" ]]; then
  ((rc == 124)) && echo "codex.sh: no answer within ${timeout_s}s" >&2
  echo "codex.sh: codex exited $rc" >&2
  tail -c 2000 "$sandbox/err.txt" >&2
  exit 1
fi
printf '%s\n' "$answer"
