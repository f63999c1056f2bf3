// Miniflare's options for the built gateway: the bindings of a wrangler.toml (through wrangler's
// own unstable_getMiniflareWorkerOptions) and the `.dev.vars` values, read as wrangler reads them.
// Shared by the end-to-end tests' runtime and the bench's Miniflares; each adds its port, state
// and logging.
"use strict";
const fs = require("fs");
const path = require("path");
const { unstable_getMiniflareWorkerOptions } = require(path.join(process.env.ROOT, "node_modules", "wrangler"));

/** `KEY=value` lines (`#` comments, optional double quotes) as an object. */
function parseVars(file) {
  const out = {};
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    const m = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)\s*$/.exec(line);
    if (m && !line.trim().startsWith("#")) out[m[1]] = m[2].replace(/^"(.*)"$/, "$1");
  }
  return out;
}

/** The worker named by `config`'s `main`, as modules, with its bindings and the dev vars. */
function gatewayOptions(config, devVars) {
  const { workerOptions, main } = unstable_getMiniflareWorkerOptions(config);
  const script = path.resolve(path.dirname(config), main);
  return {
    ...workerOptions,
    modules: true,
    scriptPath: script,
    modulesRoot: path.dirname(script),
    bindings: { ...(workerOptions.bindings || {}), ...parseVars(devVars) },
    host: "127.0.0.1",
  };
}

module.exports = { gatewayOptions };
