//! The relay with the least wasm-to-JS traffic it can have: three calls into JS (read the body,
//! fetch and read the answer, build the response), three promises awaited, bytes in between.

use wasm_bindgen_futures::JsFuture;
use worker::wasm_bindgen;
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::{event, js_sys, web_sys, Context, Env, Result};

#[wasm_bindgen(inline_js = "
export function body_of(request) { return request.arrayBuffer().then((b) => new Uint8Array(b)); }
export function exchange(url, auth, body) {
  const headers = new Headers({ 'content-type': 'application/json', authorization: auth, 'x-client-request-id': crypto.randomUUID() });
  return fetch(url, { method: 'POST', headers, body: body.slice() })
    .then((r) => r.arrayBuffer().then((b) => [r.status, new Uint8Array(b)]));
}
export function answer(status, body, tokens) {
  return new Response(body.slice(), { status, headers: { 'content-type': 'application/json', 'x-gateway-deployment': 'mock',
    'x-gateway-provider': 'openai', 'x-gateway-attempts': '1', 'x-gateway-tokens': tokens } });
}
")]
extern "C" {
    fn body_of(request: &web_sys::Request) -> js_sys::Promise;
    fn exchange(url: &str, auth: &str, body: &[u8]) -> js_sys::Promise;
    fn answer(status: u16, body: &[u8], tokens: &str) -> web_sys::Response;
}

#[event(fetch)]
async fn fetch(req: web_sys::Request, env: Env, _ctx: Context) -> Result<web_sys::Response> {
    let auth = req.headers().get("authorization")?.unwrap_or_default();
    let url = req.url();
    let path = url.find("/v1/").map_or("/v1/chat/completions", |at| &url[at..]);
    let raw = bytes(JsFuture::from(body_of(&req)).await?);
    let mut body: serde_json::Value = serde_json::from_slice(&raw)?;
    if body["stream"].as_bool() != Some(true) {
        body["model"] = "gpt-4o-mini".into();
    }
    let target = format!("{}{path}", env.var("MOCK_URL")?);
    let sent: js_sys::Array =
        JsFuture::from(exchange(&target, &auth, &serde_json::to_vec(&body)?)).await?.unchecked_into();
    let status = sent.get(0).as_f64().unwrap_or(502.0) as u16;
    let answer_bytes = bytes(sent.get(1));
    let usage: serde_json::Value = serde_json::from_slice(&answer_bytes).unwrap_or_default();
    let tokens = usage["usage"]["total_tokens"].as_u64().unwrap_or(0).to_string();
    Ok(answer(status, &answer_bytes, &tokens))
}

fn bytes(value: JsValue) -> Vec<u8> {
    value.unchecked_into::<js_sys::Uint8Array>().to_vec()
}
