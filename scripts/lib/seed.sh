# Seeds the dev state's local KV with what it lacks: the route table (pointed at the mock's port),
# the demo key and prices. An admin's own upload is kept, and scripts/dev says so.
# usage: seed_dev_state MOCK_PORT STATE_DIR
DEMO_KEY="gk_demo_local_0000000000000000"
seed_dev_state() {
  local port="$1" state="$2" listed
  listed="$(wrangler kv key list --local --persist-to "$state" --binding CONFIG 2>/dev/null || echo '[]')"
  python3 - "$ROOT" "$port" "$state" "$DEMO_KEY" "$listed" <<'PY'
import hashlib, json, os, subprocess, sys
root, port, state, demo_key, listed = sys.argv[1:]
present = {entry["name"] for entry in json.loads(listed or "[]")}
seeds = {
    "routes": open(f"{root}/dev/routes.json").read().replace("{{MOCK_PORT}}", port),
    "key:" + hashlib.sha256(demo_key.encode()).hexdigest(): open(f"{root}/dev/demo-key.json").read(),
    "prices": open(f"{root}/dev/prices.json").read(),
}
for value in seeds.values():
    json.loads(value)
# What scripts/dev wrote last time: a value still equal to it is ours to refresh (the port may differ).
record_file = os.path.join(state, "seeded.json")
seeded = json.load(open(record_file)) if os.path.exists(record_file) else {}

def current(name):
    out = subprocess.run(["wrangler", "kv", "key", "get", name, "--text", "--local", "--persist-to", state,
                          "--binding", "CONFIG"], capture_output=True, text=True)
    # wrangler prints the value plus a newline of its own.
    return out.stdout[:-1] if out.returncode == 0 and out.stdout.endswith("\n") else None

writes = []
for name, value in seeds.items():
    if name not in present:
        writes.append(name)
    elif name.startswith("key:"):
        continue  # a demo key an admin revoked stays revoked
    elif current(name) in (seeded.get(name), value):
        if seeded.get(name) != value:
            writes.append(name)
    else:
        print(f"\033[1;33mscripts/dev: keeping the '{name}' document already in local KV: it is not the one scripts/dev "
              f"seeded (an admin uploaded it). To go back to dev/{name}.json: rm -rf {state}\033[0m", file=sys.stderr)
if writes:
    bulk = os.path.join(state, "seed-bulk.json")
    json.dump([{"key": n, "value": seeds[n]} for n in writes], open(bulk, "w"))
    subprocess.run(["wrangler", "kv", "bulk", "put", bulk, "--local", "--persist-to", state, "--binding", "CONFIG"],
                   check=True, capture_output=True)
    os.remove(bulk)
    seeded.update({n: seeds[n] for n in writes})
    json.dump(seeded, open(record_file, "w"))
    print("seeded: " + ", ".join("demo key" if n.startswith("key:") else n for n in writes), file=sys.stderr)
PY
}
