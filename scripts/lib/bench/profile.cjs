// A V8 CPU profile of the worker isolate behind `wrangler dev --inspector-port PORT` while a load
// command runs, summarised by function (the wasm keeps its name section, so Rust functions
// show up by name).
//
// usage: node profile.cjs INSPECTOR_PORT OUT.json CMD ARGS...
// OUT.json: {"total_ms", "samples", "interval_us", "categories": {...}, "self": [[name, ms]...],
//            "inclusive": [[name, ms]...]}
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const path = require("path");
const http = require("http");
const WebSocket = require(path.join(process.env.ROOT, "node_modules", "ws"));

const [port, out, ...cmd] = process.argv.slice(2);

function getJson(url) {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        let data = "";
        res.on("data", (c) => (data += c));
        res.on("end", () => {
          try {
            resolve(JSON.parse(data));
          } catch (e) {
            reject(e);
          }
        });
      })
      .on("error", reject);
  });
}

async function main() {
  const targets = await getJson(`http://127.0.0.1:${port}/json`);
  // Miniflare lists its internal workers too; the user worker is core:user:<name>.
  const target = targets.find((t) => String(t.id).startsWith("core:user:")) || targets[0];
  if (!target) throw new Error("no inspector target");
  const url = target.webSocketDebuggerUrl || `ws://127.0.0.1:${port}/${target.id}`;
  const ws = new WebSocket(url);
  await new Promise((r, j) => {
    ws.once("open", r);
    ws.once("error", j);
  });
  let id = 0;
  const pending = new Map();
  const contexts = [];
  ws.on("message", (m) => {
    const msg = JSON.parse(m.toString());
    if (msg.method === "Runtime.executionContextCreated") contexts.push(msg.params.context.id);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result);
    }
  });
  const send = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const n = ++id;
      pending.set(n, { resolve, reject });
      ws.send(JSON.stringify({ id: n, method, params }));
    });
  const intervalUs = Number(process.env.BENCH_PROFILE_INTERVAL_US || 100);
  await send("Profiler.enable");
  await send("Profiler.setSamplingInterval", { interval: intervalUs });
  await send("Profiler.start");
  const code = await new Promise((resolve) => {
    const child = spawn(cmd[0], cmd.slice(1), { stdio: "inherit" });
    child.on("exit", (c) => resolve(c));
  });
  const { profile } = await send("Profiler.stop");
  if (code !== 0) throw new Error(`load command exited with ${code}`);
  // BENCH_PROFILE_RAW: the whole .cpuprofile too, for reading in DevTools or with a script.
  if (process.env.BENCH_PROFILE_RAW) fs.writeFileSync(process.env.BENCH_PROFILE_RAW, JSON.stringify(profile));
  const summary = summarise(profile, intervalUs);
  await send("Runtime.enable").catch(() => {});
  summary.memory = await memory(send, contexts).catch((e) => ({ error: String(e.message || e) }));
  ws.close();
  fs.writeFileSync(out, JSON.stringify(summary));
}

// The isolate's memory right after the load: V8's JS heap, and the size of every WebAssembly.Memory
// (the Rust heap lives in the wasm module's linear memory, outside the JS heap).
async function memory(send, contexts) {
  const heap = await send("Runtime.getHeapUsage");
  const out = { js_heap_used: heap.usedSize, js_heap_total: heap.totalSize };
  try {
    const params = { expression: "WebAssembly.Memory.prototype" };
    if (contexts.length) params.contextId = contexts[0];
    const proto = await send("Runtime.evaluate", params);
    const found = await send("Runtime.queryObjects", { prototypeObjectId: proto.result.objectId });
    const sizes = await send("Runtime.callFunctionOn", {
      objectId: found.objects.objectId,
      functionDeclaration: "function () { return this.map((m) => m.buffer.byteLength); }",
      returnByValue: true,
    });
    out.wasm_memories = sizes.result.value;
  } catch (e) {
    out.wasm_error = String(e.message || e);
  }
  return out;
}

function clean(frame) {
  let name = frame.functionName || "(anonymous)";
  name = name.replace(/::h[0-9a-f]{16}$/, "");
  if (frame.url && frame.url.startsWith("wasm://")) return name;
  if (name.startsWith("(")) return name;
  const file = frame.url ? frame.url.split("/").pop() : "";
  return file ? `${name} [js ${file}:${frame.lineNumber + 1}:${frame.columnNumber + 1}]` : `${name} [js]`;
}

function category(frame) {
  const name = frame.functionName || "";
  if (name === "(idle)" || name === "(program)" || name === "(garbage collector)" || name === "(root)") return name;
  if (frame.url && frame.url.startsWith("wasm://")) return "wasm (Rust)";
  return "JavaScript (glue, runtime)";
}

function summarise(profile, intervalUs) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children || []) parent.set(c, n.id);
  const selfUs = new Map();
  const deltas = profile.timeDeltas || [];
  profile.samples.forEach((s, i) => {
    const dt = deltas[i + 1] !== undefined ? deltas[i + 1] : intervalUs;
    selfUs.set(s, (selfUs.get(s) || 0) + dt);
  });
  const self = new Map();
  const callers = new Map();
  const inclusive = new Map();
  const cats = new Map();
  let total = 0;
  for (const [nodeId, us] of selfUs) {
    total += us;
    const node = byId.get(nodeId);
    const name = clean(node.callFrame);
    self.set(name, (self.get(name) || 0) + us);
    // The nearest named caller (skipping wasm-bindgen shims and other anonymous frames).
    let p = parent.get(nodeId);
    while (p !== undefined && /^\(anonymous\)|shim|wasm-to-js|js-to-wasm|^[a-zA-Z_$]{1,2} \[js|__wbg_/.test(clean(byId.get(p).callFrame))) p = parent.get(p);
    const caller = p === undefined ? "(none)" : clean(byId.get(p).callFrame);
    if (!callers.has(name)) callers.set(name, new Map());
    callers.get(name).set(caller, (callers.get(name).get(caller) || 0) + us);
    const cat = category(node.callFrame);
    cats.set(cat, (cats.get(cat) || 0) + us);
    // Inclusive: every distinct name on the stack gets this sample once.
    const seen = new Set();
    for (let n = nodeId; n !== undefined; n = parent.get(n)) {
      const nm = clean(byId.get(n).callFrame);
      if (seen.has(nm)) continue;
      seen.add(nm);
      inclusive.set(nm, (inclusive.get(nm) || 0) + us);
    }
  }
  const top = (m, k) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([n, us]) => [n, +(us / 1000).toFixed(1)]);
  return {
    total_ms: +(total / 1000).toFixed(1),
    samples: profile.samples.length,
    interval_us: intervalUs,
    categories: Object.fromEntries(top(cats, 20)),
    self: top(self, 25).map(([n, ms]) => [n, ms, top(callers.get(n) || new Map(), 3)]),
    inclusive: top(inclusive, 40),
  };
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
