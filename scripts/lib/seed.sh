# Writes a KV bulk file seeding the route table (pointed at a mock port), the demo key and prices.
# usage: seed_file MOCK_PORT OUT_FILE
DEMO_KEY="gk_demo_local_0000000000000000"
seed_file() {
  local port="$1" out="$2" hash
  hash="$(printf '%s' "$DEMO_KEY" | sha256sum | cut -d' ' -f1)"
  python3 - "$ROOT" "$port" "$hash" "$out" <<'PY'
import json, sys
root, port, hash_, out = sys.argv[1:]
routes = open(f"{root}/dev/routes.json").read().replace("{{MOCK_PORT}}", port)
key = open(f"{root}/dev/demo-key.json").read()
prices = open(f"{root}/dev/prices.json").read()
json.loads(routes); json.loads(key); json.loads(prices)
json.dump([{"key": "routes", "value": routes}, {"key": f"key:{hash_}", "value": key}, {"key": "prices", "value": prices}], open(out, "w"))
PY
}
