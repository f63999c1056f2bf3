# Sourced by every script: the pinned tool versions and the offline build settings, in one place.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export ROOT
# Where cargo puts builds: $CARGO_TARGET_DIR when the user sets one (made absolute, so every script
# and every cargo call agree on it whatever their directory), else target/ in the checkout.
if [[ -n "${CARGO_TARGET_DIR:-}" ]]; then
  [[ "$CARGO_TARGET_DIR" == /* ]] || CARGO_TARGET_DIR="$ROOT/$CARGO_TARGET_DIR"
  export CARGO_TARGET_DIR
fi
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export TARGET_DIR
WASM_BINDGEN_VERSION=0.2.130
WORKER_BUILD_VERSION=0.8.7
WRANGLER_VERSION=4.86.0
export PATH="$ROOT/node_modules/.bin:$HOME/.cargo/bin:$PATH"
# worker-build would download these; point it at the installed copies instead.
export WASM_BINDGEN_BIN="$HOME/.cargo/bin/wasm-bindgen"
export ESBUILD_BIN="$ROOT/node_modules/@esbuild/linux-x64/bin/esbuild"
# wasm-opt from the pinned npm package binaryen (package.json), so the release build never downloads it.
export WASM_OPT_BIN="$ROOT/node_modules/.bin/wasm-opt"
export WRANGLER_SEND_METRICS=false
export CLOUDFLARE_CF_FETCH_ENABLED=false
export WRANGLER_LOG_SANITIZE=true
# Keep wrangler's config and logs inside the checkout, not in $HOME.
export XDG_CONFIG_HOME="$ROOT/.wrangler/xdg"
export NO_UPDATE_NOTIFIER=1

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
# The local state scripts/dev serves; admin commands with --local write here too.
export DEV_STATE="$ROOT/.wrangler/dev-state"
