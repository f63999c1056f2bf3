// Starting the bench's workers under Miniflare: the gateway from its wrangler.toml (bindings via
// wrangler's own unstable_getMiniflareWorkerOptions, KV seeded after start) and the floor worker.
// Shared by miniflare.cjs (the long-running targets) and coldstart.cjs (fresh isolates).
"use strict";
require("./v8flags.cjs");
const fs = require("fs");
const path = require("path");
const root = process.env.ROOT;
const { Miniflare, Log, LogLevel } = require(path.join(root, "node_modules", "miniflare"));
const { gatewayOptions } = require("../gateway-options.cjs");

/** The gateway under Miniflare, ready (its module evaluated) but not yet seeded. */
async function startGateway({ config, devVars, port, persist, inspector }) {
  const mf = new Miniflare({
    ...gatewayOptions(config, devVars),
    name: "edge-gateway-bench",
    port: Number(port),
    ...(inspector ? { inspectorPort: Number(inspector) } : {}),
    defaultPersistRoot: persist,
    log: new Log(LogLevel.WARN),
  });
  await mf.ready;
  return mf;
}

/** Writes the seed's keys into the gateway's CONFIG namespace (Miniflare's own API, not the worker). */
async function seed(mf, seedFile) {
  const kv = await mf.getKVNamespace("CONFIG");
  for (const { key, value } of JSON.parse(fs.readFileSync(seedFile, "utf8"))) await kv.put(key, value);
}

async function startFloor({ floorDir, mockUrl, port }) {
  const floor = new Miniflare({
    name: "bench-floor",
    modules: true,
    scriptPath: path.join(floorDir, "index.js"),
    modulesRoot: floorDir,
    compatibilityDate: "2026-04-01",
    bindings: { MOCK_URL: mockUrl },
    host: "127.0.0.1",
    port: Number(port),
    log: new Log(LogLevel.WARN),
  });
  await floor.ready;
  return floor;
}

module.exports = { startGateway, seed, startFloor };
