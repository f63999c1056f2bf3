// The end-to-end tests' gateway: the built worker run by Miniflare (workerd) directly, with the
// bindings of the test's wrangler.toml (KV, Durable Objects, Queues, R2) persisted where
// `wrangler --local --persist-to STATE` reads and writes them. Not `wrangler dev`: its dev proxy
// sits in front of the worker on pooled connections, and when one of those fails mid-POST it
// answers 503 "Your worker restarted mid-request" (it compares a URL with a path to one without,
// so every proxy-side fetch failure reads as a restart) — a flake of the harness, not the gateway.
//
// usage: node runtime.cjs CONFIG DEV_VARS STATE PORT CONTROL_PORT
// Prints "ready" once the gateway answers. CONTROL_PORT takes `POST /kv/<binding>` with
// `[{"key","value"}]`: writes go through this process's own storage, never a second opener.
"use strict";
const http = require("http");
const path = require("path");
const root = process.env.ROOT;
const { Miniflare, Log, LogLevel } = require(path.join(root, "node_modules", "miniflare"));
const { gatewayOptions } = require(path.join(root, "scripts", "lib", "gateway-options.cjs"));

const [config, devVars, state, port, controlPort] = process.argv.slice(2);

function control(mf) {
  return http.createServer((req, res) => {
    const m = /^\/kv\/([A-Z_]+)$/.exec(req.url || "");
    if (req.method !== "POST" || !m) {
      res.writeHead(404).end("unknown control request\n");
      return;
    }
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", async () => {
      try {
        const kv = await mf.getKVNamespace(m[1]);
        for (const { key, value } of JSON.parse(body)) await kv.put(key, value);
        res.writeHead(200).end("ok\n");
      } catch (e) {
        res.writeHead(500).end(String(e && e.stack ? e.stack : e) + "\n");
      }
    });
  });
}

async function main() {
  const mf = new Miniflare({
    ...gatewayOptions(config, devVars),
    port: Number(port),
    // wrangler's --persist-to DIR keeps its simulators' state in DIR/v3.
    defaultPersistRoot: path.join(state, "v3"),
    log: new Log(LogLevel.WARN),
  });
  await mf.ready;
  await new Promise((resolve) => control(mf).listen(Number(controlPort), "127.0.0.1", resolve));
  console.log("ready");
  const stop = async () => {
    await mf.dispose().catch(() => {});
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
