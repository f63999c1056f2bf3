// With BENCH_V8_FLAGS set (e.g. `--perf-basic-prof`, which makes V8 write /tmp/perf-PID.map so that
// `perf` names every wasm and JS function), each workerd that Miniflare starts in this process runs
// with those V8 flags. Miniflare has no option for workerd's `v8Flags`, so its config serialiser is
// amended as the module loads; nothing on disk changes. Require this before Miniflare.
"use strict";
const Module = require("module");

const flags = (process.env.BENCH_V8_FLAGS || "").split(/\s+/).filter(Boolean);
const ANCHOR = "const struct = message.initRoot(Config);";

if (flags.length > 0) {
  const compile = Module.prototype._compile;
  Module.prototype._compile = function (content, filename) {
    if (/[\\/]miniflare[\\/]dist[\\/]src[\\/]index\.js$/.test(filename)) {
      if (!content.includes(ANCHOR)) throw new Error(`BENCH_V8_FLAGS: ${filename} no longer contains "${ANCHOR}"`);
      content = content.replace(ANCHOR, `config.v8Flags = ${JSON.stringify(flags)}; ${ANCHOR}`);
    }
    return compile.call(this, content, filename);
  };
}
