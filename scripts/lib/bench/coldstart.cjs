// Cold start: the gateway and the passthrough worker each started in a fresh Miniflare (a new
// workerd process, so a new isolate), ROUNDS times. Per round: how long until the runtime is
// ready (the module, and so the wasm, loaded), then the first request (nothing compiled by use,
// nothing cached: the gateway reads its key's and tenant's records, routes, budgets and prices
// from KV and asks for its first lease) and the second (already warm), each on a new connection.
//
// usage: node coldstart.cjs GATEWAY_CONFIG DEV_VARS SEED_JSON STATE_ROOT FLOOR_DIR MOCK_URL ROUNDS
//                           GATEWAY_BODY GATEWAY_KEY FLOOR_BODY MOCK_KEY
// prints JSON: {"gateway": {"ready_ms": [...], "first_ms": [...], "second_ms": [...]}, "passthrough": {...}}
"use strict";
const http = require("http");
const { startGateway, seed, startFloor } = require("./mf.cjs");

const [config, devVars, seedFile, stateRoot, floorDir, mockUrl, rounds, gwBody, gwKey, floorBody, mockKey] =
  process.argv.slice(2);

/** One POST on a new connection, timed from the request to the last byte of the answer. */
function post(url, body, key) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = http.request(
      url,
      {
        method: "POST",
        agent: false,
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

async function measure(start, prepare, path, body, key, out) {
  const t0 = process.hrtime.bigint();
  const mf = await start();
  out.ready_ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  try {
    await prepare(mf);
    const url = new URL(path, await mf.ready).href;
    out.first_ms.push(await post(url, body, key));
    out.second_ms.push(await post(url, body, key));
  } finally {
    await mf.dispose();
  }
}

async function main() {
  const result = {
    gateway: { ready_ms: [], first_ms: [], second_ms: [] },
    passthrough: { ready_ms: [], first_ms: [], second_ms: [] },
  };
  for (let i = 0; i < Number(rounds); i++) {
    // The seed goes in through Miniflare's own API, which does not run the worker.
    const gateway = () => startGateway({ config, devVars, port: 0, persist: `${stateRoot}/cold-${i}` });
    await measure(gateway, (mf) => seed(mf, seedFile), "/v1/chat/completions", gwBody, gwKey, result.gateway);
    const floor = () => startFloor({ floorDir, mockUrl, port: 0 });
    await measure(floor, async () => {}, "/passthrough/v1/chat/completions", floorBody, mockKey, result.passthrough);
  }
  console.log(JSON.stringify(result));
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
