// The same built workers that scripts/bench runs under `wrangler dev`, run by Miniflare directly:
// no dev proxy in front and no inspector attached (wrangler dev's inspector proxy turns every
// inspector event — one per console.log, several per subrequest — into an HTTP POST to the
// wrangler node process). Bindings come from the same wrangler.toml, via wrangler's own
// unstable_getMiniflareWorkerOptions.
//
// usage: node miniflare.cjs GATEWAY_CONFIG DEV_VARS SEED_JSON STATE_DIR GATEWAY_PORT FLOOR_DIR MOCK_URL FLOOR_PORT
//                           GATEWAY_INSPECTOR_PORT (for profile.cjs; idle unless a client attaches)
//                           [CONFIG PORT]... (more gateways: variants of the build, each with its own state)
// Prints "ready" once both answer.
"use strict";
const fs = require("fs");
const path = require("path");
const root = process.env.ROOT;
const { Miniflare, Log, LogLevel } = require(path.join(root, "node_modules", "miniflare"));
const { unstable_getMiniflareWorkerOptions } = require(path.join(root, "node_modules", "wrangler"));

const [config, devVars, seedFile, state, gwPort, floorDir, mockUrl, floorPort, inspectorPort, ...variants] =
  process.argv.slice(2);

function parseVars(file) {
  const out = {};
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    const m = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)\s*$/.exec(line);
    if (m && !line.trim().startsWith("#")) out[m[1]] = m[2].replace(/^"(.*)"$/, "$1");
  }
  return out;
}

async function startGateway(configPath, port, persist, inspector) {
  const { workerOptions, main } = unstable_getMiniflareWorkerOptions(configPath);
  const script = path.resolve(path.dirname(configPath), main);
  const mf = new Miniflare({
    ...workerOptions,
    name: "edge-gateway-bench",
    modules: true,
    scriptPath: script,
    modulesRoot: path.dirname(script),
    bindings: { ...(workerOptions.bindings || {}), ...parseVars(devVars) },
    host: "127.0.0.1",
    port: Number(port),
    ...(inspector ? { inspectorPort: Number(inspector) } : {}),
    defaultPersistRoot: persist,
    log: new Log(LogLevel.WARN),
  });
  await mf.ready;
  const kv = await mf.getKVNamespace("CONFIG");
  for (const { key, value } of JSON.parse(fs.readFileSync(seedFile, "utf8"))) await kv.put(key, value);
  return mf;
}

async function main() {
  const instances = [await startGateway(config, gwPort, state, inspectorPort)];
  for (let i = 0; i + 1 < variants.length; i += 2) {
    instances.push(await startGateway(variants[i], variants[i + 1], `${state}-variant${i / 2}`));
  }
  const floor = new Miniflare({
    name: "bench-floor",
    modules: true,
    scriptPath: path.join(floorDir, "index.js"),
    modulesRoot: floorDir,
    compatibilityDate: "2026-04-01",
    bindings: { MOCK_URL: mockUrl },
    host: "127.0.0.1",
    port: Number(floorPort),
    log: new Log(LogLevel.WARN),
  });
  await floor.ready;
  instances.push(floor);
  console.log("ready");
  const stop = async () => {
    await Promise.allSettled(instances.map((mf) => mf.dispose()));
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
