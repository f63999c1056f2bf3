// What V8 compiles for the gateway's first request on a new isolate. V8 compiles each wasm function
// lazily, with Liftoff, on its first call, and on a new isolate that compiling is most of the first
// request's CPU. Run with BENCH_V8_FLAGS=--perf-basic-prof: V8 then appends every function it
// compiles to /tmp/perf-PID.map with its machine code's size, so the map read before and after the
// request says what the request compiled. Deterministic for a build (unlike timings), so it tells
// two builds' cold paths apart in one run.
//
// usage: BENCH_V8_FLAGS=--perf-basic-prof node first_compile.cjs GATEWAY_CONFIG DEV_VARS SEED_JSON
//          STATE_ROOT BODY KEY OUT_JSON [COMPARE_CONFIG]
// writes OUT_JSON: {"gateway": {"answer": {"wasm_bytes", "wasm_functions", "js_bytes", "js_functions"},
//   "after": {...}, "largest": [[bytes, name], ...]}, "compare": {...}}; "answer" is what was compiled
//   until the first answer's last byte, "after" in the 300 ms after it (its usage event, its settle).
"use strict";
const fs = require("fs");
const { startGateway, seed, workerdChildren, post } = require("./mf.cjs");

const [config, devVars, seedFile, stateRoot, body, key, outJson, compareConfig] = process.argv.slice(2);
if (!(process.env.BENCH_V8_FLAGS || "").includes("--perf-basic-prof")) {
  console.error("first_compile.cjs needs BENCH_V8_FLAGS=--perf-basic-prof");
  process.exit(2);
}

// A wasm function's entry: `JS:<rust path>-<function index>-<tier>`; everything else is JS or V8's own.
const WASM = /^JS:(.*)-\d+-(liftoff|turbofan)$/;

/** Entries of the perf map from line `from` on: sizes by kind, and the wasm functions. */
function compiled(lines, from) {
  const out = { wasm_bytes: 0, wasm_functions: 0, js_bytes: 0, js_functions: 0 };
  const wasm = [];
  for (const line of lines.slice(from)) {
    const [, size, ...rest] = line.split(" ");
    const name = rest.join(" ");
    const bytes = parseInt(size, 16) || 0;
    const m = WASM.exec(name);
    if (m) {
      out.wasm_bytes += bytes;
      out.wasm_functions += 1;
      wasm.push([bytes, m[1].replace(/::h[0-9a-f]{16}$/, "").replace(/\[[0-9a-f]+\]/g, "")]);
    } else if (name.startsWith("JS:")) {
      out.js_bytes += bytes;
      out.js_functions += 1;
    }
  }
  return { sizes: out, wasm };
}

async function measure(built, who) {
  const before = workerdChildren();
  const mf = await startGateway({ config: built, devVars, port: 0, persist: `${stateRoot}/compile-${who}` });
  const started = [...workerdChildren()].filter((pid) => !before.has(pid));
  if (started.length !== 1) throw new Error(`expected one new workerd process, found ${started.length}`);
  const map = `/tmp/perf-${started[0]}.map`;
  const read = () => (fs.existsSync(map) ? fs.readFileSync(map, "utf8").split("\n").filter(Boolean) : []);
  try {
    await seed(mf, seedFile);
    const url = new URL("/v1/chat/completions", await mf.ready).href;
    const start = read().length;
    await post(url, body, key);
    const answered = read();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const later = read();
    const answer = compiled(answered, start);
    const after = compiled(later, answered.length);
    answer.wasm.sort((a, b) => b[0] - a[0]);
    return { answer: answer.sizes, after: after.sizes, largest: answer.wasm.slice(0, 8) };
  } finally {
    await mf.dispose();
    fs.rmSync(map, { force: true });
  }
}

async function main() {
  const result = { gateway: await measure(config, "gateway") };
  if (compareConfig) result.compare = await measure(compareConfig, "compare");
  fs.writeFileSync(outJson, JSON.stringify(result));
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
