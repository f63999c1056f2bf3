// Starting the bench's workers under Miniflare: the gateway from its wrangler.toml (bindings via
// wrangler's own unstable_getMiniflareWorkerOptions, KV seeded after start) and the floor worker.
// Shared by miniflare.cjs (the long-running targets), coldstart.cjs and first_compile.cjs (fresh
// isolates), with the helpers those two share: the workerd processes started, and a timed POST.
"use strict";
require("./v8flags.cjs");
const fs = require("fs");
const http = require("http");
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

/** `/proc/PID/stat` fields after the command name (state is [0], ppid [1], utime [11], stime [12]). */
function statFields(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  return { comm: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")), rest: stat.slice(stat.lastIndexOf(")") + 2).split(" ") };
}

/** The workerd processes this node process has started (Miniflare spawns one per instance). */
function workerdChildren() {
  const pids = new Set();
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const { comm, rest } = statFields(name);
      if (comm === "workerd" && Number(rest[1]) === process.pid) pids.add(Number(name));
    } catch {
      // The process ended while the list was read.
    }
  }
  return pids;
}

/** One POST (on a new connection unless `agent` keeps one), timed from the request to the last byte of the answer. */
function post(url, body, key, agent = false) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = http.request(
      url,
      {
        method: "POST",
        agent,
        headers: { "content-type": "application/json", authorization: `Bearer ${key}`, "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on("end", () => {
          const ms = Number(process.hrtime.bigint() - t0) / 1e6;
          if (res.statusCode !== 200) reject(new Error(`${url}: status ${res.statusCode}`));
          else resolve(ms);
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

module.exports = { startGateway, seed, startFloor, statFields, workerdChildren, post };
