// The runtime floor for scripts/bench: a module worker that does as little as a worker can.
//   POST /v1/chat/completions  -> reads the request body (so the connection can be kept alive,
//                                 as the gateway's is), returns a fixed OpenAI-shaped completion
//   POST /passthrough/<path>   -> forwards the request to env.MOCK_URL/<path> and returns the
//                                 response as is (the cost of one subrequest, no logic)
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
    await request.arrayBuffer();
    return new Response(BODY, { headers: HEADERS });
  },
};
