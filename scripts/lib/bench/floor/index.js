// The runtime floor for scripts/bench: a module worker that does as little as a worker can.
//   POST /v1/chat/completions  -> reads the request body (so the connection can be kept alive,
//                                 as the gateway's is), returns a fixed OpenAI-shaped completion
//   POST /passthrough/<path>   -> forwards the request to env.MOCK_URL/<path> and returns the
//                                 response as is (the cost of one subrequest, no logic)
//   POST /relay/<path>         -> the least a gateway does, in plain JS: reads and parses the body,
//                                 splices the model, fetches with its own headers, reads the whole
//                                 answer and its usage, answers with five headers of its own;
//                                 a stream is relayed chunk by chunk through JS, unparsed
//   POST /hold/<path>          -> /relay/'s stream, but answered only once a chunk with text has
//                                 come (as the gateway does, so that a failure before any text can
//                                 still fall back): what holding costs in plain JS
//   POST /native/<path>        -> /relay/'s stream written into the runtime's IdentityTransformStream
//                                 instead of enqueued in a JS ReadableStream (what the gateway does)
// Not part of the product: it only gives the gateway's numbers something to be compared with.
const BODY = JSON.stringify({
  id: "chatcmpl-floor",
  object: "chat.completion",
  created: 0,
  model: "gpt-4o-mini",
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: "Hello from gpt-4o-mini: this is reply number 1." },
      finish_reason: "stop",
    },
  ],
  usage: { prompt_tokens: 6, completion_tokens: 8, total_tokens: 14 },
});
const HEADERS = { "content-type": "application/json" };

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname.startsWith("/passthrough/")) {
      const target = env.MOCK_URL + url.pathname.slice("/passthrough".length) + url.search;
      return fetch(target, { method: request.method, headers: request.headers, body: request.body });
    }
    if (url.pathname.startsWith("/relay/")) return relay(request, env, url, "/relay");
    if (url.pathname.startsWith("/hold/")) return relay(request, env, url, "/hold");
    if (url.pathname.startsWith("/native/")) return relay(request, env, url, "/native");
    await request.arrayBuffer();
    return new Response(BODY, { headers: HEADERS });
  },
};

async function relay(request, env, url, prefix) {
  const body = await request.json();
  // A stream keeps its model: the mock reads its pacing (delay_ms, words) from it.
  if (!body.stream) body.model = "gpt-4o-mini";
  const target = env.MOCK_URL + url.pathname.slice(prefix.length);
  const headers = new Headers({
    "content-type": "application/json",
    authorization: request.headers.get("authorization"),
    "x-client-request-id": crypto.randomUUID(),
  });
  const res = await fetch(target, { method: "POST", headers, body: JSON.stringify(body) });
  if (body.stream && prefix === "/native") return nativeStream(res);
  if (body.stream) return prefix === "/hold" ? holdStream(res) : relayStream(res);
  const answer = await res.arrayBuffer();
  const usage = JSON.parse(new TextDecoder().decode(answer)).usage;
  const out = new Headers({ "content-type": "application/json", "x-gateway-deployment": "mock" });
  out.set("x-gateway-provider", "openai");
  out.set("x-gateway-attempts", "1");
  out.set("x-gateway-tokens", String(usage ? usage.total_tokens : 0));
  return new Response(answer, { status: res.status, headers: out });
}

// The least any relay that looks at a stream does: each chunk read in JS and enqueued again
// (after `held`, the chunks a holding relay read before answering).
function relayStream(res, reader = res.body.getReader(), held = []) {
  const body = new ReadableStream({
    start(c) {
      for (const chunk of held) c.enqueue(chunk);
    },
    async pull(c) {
      const { done, value } = await reader.read();
      if (done) c.close();
      else c.enqueue(value);
    },
    cancel(why) {
      return reader.cancel(why);
    },
  });
  return new Response(body, { status: res.status, headers: { "content-type": "text/event-stream" } });
}

// The same, each chunk read in JS and written into a native stream the runtime sends without
// calling back into JS; a write waits until the client took the chunk before.
function nativeStream(res) {
  const reader = res.body.getReader();
  const { readable, writable } = new IdentityTransformStream();
  const writer = writable.getWriter();
  (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return await writer.close();
        await writer.write(value);
      }
    } catch (e) {
      writer.abort(e).catch(() => {});
      reader.cancel(e).catch(() => {});
    }
  })();
  return new Response(readable, { status: res.status, headers: { "content-type": "text/event-stream" } });
}

const TEXT = /"content":\s*"[^"]/;

// The same relay, answered only when a chunk with text has come; the chunks before it go first.
async function holdStream(res) {
  const reader = res.body.getReader();
  const held = [];
  const text = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    held.push(value);
    if (TEXT.test(text.decode(value, { stream: true }))) break;
  }
  return relayStream(res, reader, held);
}
