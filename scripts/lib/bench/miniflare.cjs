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
const { startGateway, seed, startFloor } = require("./mf.cjs");

const [config, devVars, seedFile, state, gwPort, floorDir, mockUrl, floorPort, inspectorPort, ...variants] =
  process.argv.slice(2);

async function gateway(configPath, port, persist, inspector) {
  const mf = await startGateway({ config: configPath, devVars, port, persist, inspector });
  await seed(mf, seedFile);
  return mf;
}

async function main() {
  const instances = [await gateway(config, gwPort, state, inspectorPort)];
  for (let i = 0; i + 1 < variants.length; i += 2) {
    instances.push(await gateway(variants[i], variants[i + 1], `${state}-variant${i / 2}`));
  }
  const floor = await startFloor({ floorDir, mockUrl, port: floorPort });
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
