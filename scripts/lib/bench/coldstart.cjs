// Cold start: the gateway and the passthrough worker each started in a fresh Miniflare (a new
// workerd process, so a new isolate), ROUNDS times. Per round: how long until the runtime is
// ready (the module, and so the wasm, loaded), then the first request (nothing compiled by use,
// nothing cached: the gateway reads its key's and tenant's records, routes, budgets and prices
// from KV and asks for its first lease) and the second (already warm), each on a new connection.
// Then the young isolate's CPU per request, in blocks up to its 1,000th request (one kept-alive
// connection, one request at a time): V8 runs new code unoptimised and compiles what gets hot
// while requests wait on the same process, so an isolate's first hundreds of requests cost more.
//
// usage: node coldstart.cjs GATEWAY_CONFIG DEV_VARS SEED_JSON STATE_ROOT FLOOR_DIR MOCK_URL ROUNDS
//                           GATEWAY_BODY GATEWAY_KEY FLOOR_BODY MOCK_KEY OUT_JSON [COMPARE_CONFIG]
// writes OUT_JSON (the workers' own log lines share stdout): {"gateway": {"ready_ms": [...],
//   "first_ms": [...], "second_ms": [...], "young_cpu_ms": {"3-100": [...], ...}}, "passthrough": {...}}
// With COMPARE_CONFIG (BENCH_COMPARE's other build), "compare" too, measured in the same rounds,
// the two builds taking turns to go first.
"use strict";
const fs = require("fs");
const http = require("http");
const { execFileSync } = require("child_process");
const { startGateway, seed, startFloor, statFields, workerdChildren, post } = require("./mf.cjs");

const [config, devVars, seedFile, stateRoot, floorDir, mockUrl, rounds, gwBody, gwKey, floorBody, mockKey, outJson, compareConfig] =
  process.argv.slice(2);

const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());
// Requests 3–100, 101–500 and 501–1000: after the first two, each block's CPU per request.
const BLOCKS = [
  [3, 100],
  [101, 500],
  [501, 1000],
];

function cpuMs(pid) {
  const { rest } = statFields(pid);
  return ((Number(rest[11]) + Number(rest[12])) * 1000) / CLK_TCK;
}

async function measure(start, prepare, path, body, key, out) {
  const before = workerdChildren();
  const t0 = process.hrtime.bigint();
  const mf = await start();
  out.ready_ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    await prepare(mf);
    const url = new URL(path, await mf.ready).href;
    out.first_ms.push(await post(url, body, key));
    out.second_ms.push(await post(url, body, key));
    const started = [...workerdChildren()].filter((pid) => !before.has(pid));
    if (started.length !== 1) throw new Error(`expected one new workerd process, found ${started.length}`);
    for (const [from, to] of BLOCKS) {
      const cpu0 = cpuMs(started[0]);
      for (let i = from; i <= to; i++) await post(url, body, key, agent);
      // The block's usage events leave in batches up to 20 ms after it: counted with it.
      await new Promise((resolve) => setTimeout(resolve, 300));
      (out.young_cpu_ms[`${from}-${to}`] ||= []).push((cpuMs(started[0]) - cpu0) / (to - from + 1));
    }
  } finally {
    agent.destroy();
    await mf.dispose();
  }
}

async function main() {
  const fresh = () => ({ ready_ms: [], first_ms: [], second_ms: [], young_cpu_ms: {} });
  const result = { gateway: fresh(), passthrough: fresh(), ...(compareConfig ? { compare: fresh() } : {}) };
  for (let i = 0; i < Number(rounds); i++) {
    const builds = [["gateway", config]];
    if (compareConfig) builds[i % 2 ? "unshift" : "push"](["compare", compareConfig]);
    for (const [who, built] of builds) {
      // The seed goes in through Miniflare's own API, which does not run the worker.
      const gateway = () => startGateway({ config: built, devVars, port: 0, persist: `${stateRoot}/cold-${who}-${i}` });
      await measure(gateway, (mf) => seed(mf, seedFile), "/v1/chat/completions", gwBody, gwKey, result[who]);
    }
    const floor = () => startFloor({ floorDir, mockUrl, port: 0 });
    await measure(floor, async () => {}, "/passthrough/v1/chat/completions", floorBody, mockKey, result.passthrough);
  }
  fs.writeFileSync(outJson, JSON.stringify(result));
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
