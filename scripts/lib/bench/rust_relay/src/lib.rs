//! The least a gateway does, in Rust with workers-rs, as plainly as that crate is used: the JS
//! relay worker of `scripts/lib/bench/floor` (`/relay/`) line for line. Served by
//! scripts/bench beside the gateway, with the gateway's own bindings and build steps.

use worker::wasm_bindgen;
use worker::*;

#[cfg(feature = "lean")]
mod lean;

#[cfg(not(feature = "lean"))]
#[event(fetch)]
async fn fetch(mut req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let mut body: serde_json::Value = req.json().await?;
    let stream = body["stream"].as_bool().unwrap_or(false);
    // A stream keeps its model: the mock reads its pacing (delay_ms, words) from it.
    if !stream {
        body["model"] = "gpt-4o-mini".into();
    }
    let target = format!("{}{}", env.var("MOCK_URL")?, req.path());
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    headers.set("authorization", &req.headers().get("authorization")?.unwrap_or_default())?;
    headers.set("x-client-request-id", &request_id())?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_headers(headers).with_body(Some(body.to_string().into()));
    let mut res = Fetch::Request(Request::new_with_init(&target, &init)?).send().await?;
    if stream {
        // Chunk by chunk through wasm, as workers-rs relays a stream.
        let out = Headers::new();
        out.set("content-type", "text/event-stream")?;
        let status = res.status_code();
        return Ok(Response::from_stream(res.stream()?)?.with_status(status).with_headers(out));
    }
    let answer = res.bytes().await?;
    let usage: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
    let tokens = usage["usage"]["total_tokens"].as_u64().unwrap_or(0);
    let out = Headers::new();
    out.set("content-type", "application/json")?;
    out.set("x-gateway-deployment", "mock")?;
    out.set("x-gateway-provider", "openai")?;
    out.set("x-gateway-attempts", "1")?;
    out.set("x-gateway-tokens", &tokens.to_string())?;
    Ok(Response::from_bytes(answer)?.with_status(res.status_code()).with_headers(out))
}

/// The gateway's bindings name this worker a queue consumer; nothing sends to it here.
#[event(queue)]
async fn queue(batch: MessageBatch<String>, _env: Env, _ctx: Context) -> Result<()> {
    batch.ack_all();
    Ok(())
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// As the JS relay's `crypto.randomUUID()`: a fresh id per request.
    #[wasm_bindgen(js_namespace = crypto, js_name = randomUUID)]
    fn request_id() -> String;
}
