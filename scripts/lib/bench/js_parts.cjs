// What the pieces of the gateway's upstream call cost in workerd, each alone: the `fetch` init
// (as a `Request`, which converts the same init without I/O) with its headers in each shape the
// runtime takes, an answer's `Response` (JSON bytes or a stream) with its headers in each shape,
// the `AbortController`, the timer, and the `Promise` with its closures.
// usage: node js_parts.cjs [ITERATIONS]   (run on an idle core: taskset -c 0 node ...)
// Prints µs per call: the median of 5 requests of ITERATIONS calls each, less an empty loop's.
"use strict";
const path = require("path");
const { Miniflare } = require(path.join(process.env.ROOT || path.join(__dirname, "../../.."), "node_modules", "miniflare"));

const WORKER = `
const HT = "x-client-request-id\\nreq_0123456789abcdef01234567\\naccept-encoding\\ngzip\\ncontent-type\\napplication/json\\n" +
  "authorization\\nBearer sk-mock-openai-local\\nx-stainless-lang\\njs\\nuser-agent\\nedge-gateway\\n";
const BODY = new TextEncoder().encode(JSON.stringify({ model: "gpt-4o-mini", max_tokens: 64, messages: [
  { role: "system", content: "You are a helpful assistant." }, { role: "user", content: "Say hello in one short sentence." }] }));
const URL_ = "http://127.0.0.1:9/v1/chat/completions";
const pairs = (t) => { const p = t.split("\\n"), out = []; for (let i = 0; i + 1 < p.length; i += 2) out.push([p[i], p[i + 1]]); return out; };
const dict = (t) => { const h = Object.create(null); for (const [k, v] of pairs(t)) h[k] = v; return h; };
const literal = (t) => { const h = {}; for (const [k, v] of pairs(t)) h[k] = v; return h; };
const headers = (t) => { const h = new Headers(); for (const [k, v] of pairs(t)) h.append(k, v); return h; };
// A JSON answer as the gateway sends it: its body, then its headers (x-request-id last).
const ANSWER = new TextEncoder().encode(JSON.stringify({ id: "chatcmpl-mock", object: "chat.completion", created: 1,
  model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hello there! How can I help?" },
  finish_reason: "stop" }], usage: { prompt_tokens: 23, completion_tokens: 8, total_tokens: 31 } }));
const RT = "content-type\\napplication/json\\nx-gateway-fallback\\nfalse\\nx-gateway-cache\\nmiss\\n" +
  "x-gateway-deployment\\nmock-openai\\nx-gateway-provider\\nopenai\\nx-gateway-attempts\\n1\\n" +
  "x-ratelimit-remaining-requests\\n99\\nx-request-id\\nreq_0123456789abcdef01234567\\n";
const setText = (h, t) => { const p = t.split("\\n"); for (let i = 0; i + 1 < p.length; i += 2) h.set(p[i], p[i + 1]); };
const init = (h, signal) => ({ method: "POST", headers: h, body: BODY.slice(), signal });
const parts = {
  empty() {},
  "Request, headers as a null-prototype object (the gateway's)": () => new Request(URL_, init(dict(HT))),
  "Request, headers as an object literal": () => new Request(URL_, init(literal(HT))),
  "Request, headers as a Headers": () => new Request(URL_, init(headers(HT))),
  "Request, headers as [name, value] pairs": () => new Request(URL_, init(pairs(HT))),
  "Request, null-prototype headers and an AbortSignal": () => new Request(URL_, init(dict(HT), new AbortController().signal)),
  "Response, no headers": () => new Response(ANSWER.slice(), { status: 200 }),
  "Response, its headers set on a Headers first (the gateway's before 7a8e55c)": () => {
    const h = new Headers();
    setText(h, RT);
    return new Response(ANSWER.slice(), { status: 200, headers: h });
  },
  "Response, headers as a null-prototype object": () => new Response(ANSWER.slice(), { status: 200, headers: dict(RT) }),
  "Response, then its own headers set (the gateway's)": () => {
    const r = new Response(ANSWER.slice(), { status: 200 });
    setText(r.headers, RT);
    return r;
  },
  "Response, a stream, its headers set on a Headers first": () => {
    const h = new Headers();
    setText(h, RT);
    return new Response(new IdentityTransformStream().readable, { status: 200, headers: h });
  },
  "Response, a stream, then its own headers set": () => {
    const r = new Response(new IdentityTransformStream().readable, { status: 200 });
    setText(r.headers, RT);
    return r;
  },
  "AbortController": () => new AbortController().signal,
  "setTimeout + clearTimeout": () => clearTimeout(setTimeout(() => {}, 60000)),
  "AbortSignal.timeout": () => AbortSignal.timeout(60000),
  "Promise with the exchange's closures": () => new Promise((resolve) => {
    let done = false;
    const finish = (out) => { if (!done) { done = true; resolve(out); } };
    const described = (res, out) => { out.status = res.status; return out; };
    finish(described({ status: 200 }, { kind: 0 }));
  }),
};
export default {
  async fetch(request) {
    const u = new URL(request.url);
    if (u.searchParams.has("list")) return Response.json(Object.keys(parts));
    const part = parts[u.searchParams.get("part")];
    const n = Number(u.searchParams.get("n"));
    for (let i = 0; i < n; i++) part();
    return new Response("ok");
  },
};
`;

async function main() {
  const n = Number(process.argv[2] || 20000);
  const mf = new Miniflare({ modules: true, script: WORKER, compatibilityDate: "2026-04-01" });
  await mf.ready;
  const names = await (await mf.dispatchFetch("http://x/?list")).json();
  const time = async (part, iterations) => {
    const url = `http://x/?part=${encodeURIComponent(part)}&n=${iterations}`;
    await (await mf.dispatchFetch(url)).text();
    const runs = [];
    for (let i = 0; i < 5; i++) {
      const t0 = process.hrtime.bigint();
      await (await mf.dispatchFetch(url)).text();
      runs.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    return runs.sort((a, b) => a - b)[2] / iterations;
  };
  const floor = await time("empty", n);
  console.log(`| part (workerd, ${n} calls per request) | µs per call |\n|---|---:|`);
  for (const name of names.filter((k) => k !== "empty")) console.log(`| ${name} | ${((await time(name, n)) - floor).toFixed(2)} |`);
  await mf.dispose();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
