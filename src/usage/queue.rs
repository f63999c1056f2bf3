//! The usage pipeline's platform side: sending events to the usage queue, and the queue consumer that stores them in R2 as NDJSON.

use crate::config;
use crate::config::prices;
use crate::support::clock::now_ms;
use crate::support::promise;
use crate::usage::event::UsageEvent;
use crate::usage::export::{self, ExportObject};
use crate::usage::record::RequestOutcome;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use worker::js_sys;
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::JsValue;
use worker::{Bucket, Context, Delay, Env, MessageBatch, MessageExt, QueueRetryOptionsBuilder, RawMessage};

pub const QUEUE_BINDING: &str = "USAGE_QUEUE";
pub const BUCKET_BINDING: &str = "USAGE_BUCKET";
/// Tries per send and per R2 write; waits between them grow 4× from the first delay.
const SEND_TRIES: u32 = 4;
const SEND_FIRST_DELAY_MS: u64 = 100;
const PUT_TRIES: u32 = 3;
const PUT_FIRST_DELAY_MS: u64 = 200;
/// Redelivery delay after a failed write, unless `USAGE_REDELIVERY_DELAY_S` says otherwise.
const REDELIVERY_DELAY_S: u32 = 30;

/// Events of concurrent requests in this isolate leave together: the first waits this long for
/// company, then one `sendBatch` carries them all (one queue call instead of one per request).
const BATCH_WINDOW_MS: u64 = 20;
/// Events that one opened batch collects at most.
const MAX_BATCH: usize = 100;
/// A message carries the events of one partition hour up to this size (Queues take 128 KB):
/// a batch of concurrent requests is usually one message, so the queue's own per-message work
/// (and its per-message billing) is paid once per batch, not once per event.
const MAX_MESSAGE_BYTES: usize = 96 * 1024;
/// `sendBatch` takes at most 100 messages and 256 KB per call.
const MAX_CALL_MESSAGES: usize = 100;
const MAX_CALL_BYTES: usize = 240 * 1024;
/// Between message bodies in the one string handed to JS: serde_json escapes every control
/// character, so no JSON line holds it.
const MESSAGE_SEPARATOR: char = '\u{1e}';

/// What a batch collects: an event's line (with its partition hour), or the outcome of a
/// request with nothing of its own to await, priced when the batch leaves.
enum Pending {
    Line(u64, String),
    Outcome(Box<RequestOutcome>),
}

type Lines = Rc<RefCell<Vec<Pending>>>;

thread_local! {
    static OPEN: RefCell<Option<Lines>> = const { RefCell::new(None) };
}

/// Adds to the open batch; `Some` when this opened a new one (its opener sends it).
fn join(item: Pending) -> Option<Lines> {
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if let Some(lines) = open.as_ref() {
            if lines.borrow().len() < MAX_BATCH {
                lines.borrow_mut().push(item);
                return None;
            }
        }
        let lines: Lines = Rc::new(RefCell::new(vec![item]));
        *open = Some(lines.clone());
        Some(lines)
    })
}

/// Hands a request's outcome to the open batch, which prices it and sends its event; a request
/// that opens a batch sends it from its own `wait_until`.
pub fn defer(outcome: RequestOutcome, ctx: &Context, env: &Env) {
    if let Some(lines) = join(Pending::Outcome(Box::new(outcome))) {
        let env = env.clone();
        ctx.wait_until(async move { flush(env, lines).await });
    }
}

/// The batch's events as lines: outcomes priced with the price table in force now (an event's
/// price still follows its own time), then the durable copies of the documents they read.
async fn lines_of(env: &Env, items: Vec<Pending>) -> Vec<(u64, String)> {
    let now = now_ms();
    let outcomes = items.iter().any(|i| matches!(i, Pending::Outcome(_)));
    let prices = if outcomes { prices::price_table(env, now).await } else { None };
    let mut lines = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Pending::Line(hour, line) => lines.push((hour, line)),
            Pending::Outcome(o) => {
                let event = UsageEvent::build(&o, prices.as_deref(), o.finished_ms.unwrap_or(now));
                if let Some(line) = line_of(&event) {
                    lines.push((export::partition_hour(event.ts_ms), line));
                }
            }
        }
    }
    if outcomes {
        // Every document these requests read is known good by now.
        config::store::save_last_good(env).await;
    }
    lines
}

/// An event's line is about 900 bytes: written into room for it, not grown from serde_json's 128.
const LINE_CAPACITY: usize = 1536;

fn line_of(event: &UsageEvent) -> Option<String> {
    let mut line = Vec::with_capacity(LINE_CAPACITY);
    let written = serde_json::to_writer(&mut line, event).map_err(|e| e.to_string());
    match written.and_then(|()| String::from_utf8(line).map_err(|e| e.to_string())) {
        Ok(line) => Some(line),
        Err(e) => {
            crate::support::log::error(serde_json::json!({"event": "usage_send_failed", "error": e, "usage": event}));
            None
        }
    }
}

/// Sends one event. The request that opens a batch sends it, inside its own `wait_until`, after
/// the window, packed into as few messages as the queue takes; requests that join only add their
/// line. Nobody awaits another request's I/O: in Workers a promise resolved from another
/// request's context is a hang. A batch that keeps failing is logged event by event so nothing
/// is silently dropped.
pub async fn send(env: &Env, event: &UsageEvent) {
    let Some(line) = line_of(event) else { return };
    if let Some(lines) = join(Pending::Line(export::partition_hour(event.ts_ms), line)) {
        flush(env.clone(), lines).await;
    }
}

async fn flush(env: Env, lines: Lines) {
    promise::sleep(BATCH_WINDOW_MS).await;
    // Close this batch before sending: events from now on start the next one.
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if open.as_ref().is_some_and(|open| Rc::ptr_eq(open, &lines)) {
            *open = None;
        }
    });
    let items = std::mem::take(&mut *lines.borrow_mut());
    let lines = lines_of(&env, items).await;
    let bodies = export::pack(&lines, MAX_MESSAGE_BYTES);
    let mut unsent: Vec<String> = Vec::new();
    let mut error = String::new();
    for call in export::calls(bodies, MAX_CALL_MESSAGES, MAX_CALL_BYTES) {
        match send_with_retries(&env, &call).await {
            Ok(()) => {}
            Err(e) => {
                error = e;
                // A body is its lines joined by `\n` (no JSON line holds a raw one).
                unsent.extend(call.iter().flat_map(|b| b.split('\n').map(str::to_string)));
            }
        }
    }
    // One bad event must not take the others with it: what failed is split, each event sent alone.
    let several = lines.len() > 1;
    for line in &unsent {
        let alone = if several { send_batch_once(&env, std::slice::from_ref(line)).await } else { Err(error.clone()) };
        if let Err(error) = alone {
            let usage: serde_json::Value = serde_json::from_str(line).unwrap_or(serde_json::Value::Null);
            crate::support::log::error(
                serde_json::json!({"event": "usage_send_failed", "error": error, "tries": SEND_TRIES, "usage": usage}),
            );
        }
    }
}

// The whole batch handed to the queue in one call: worker's `send_batch` builds each message
// object from wasm (a string conversion, an object and two property sets per event).
#[wasm_bindgen(inline_js = "
export function send_lines(env, name, text) {
  const queue = env[name];
  if (queue === undefined) throw new Error('no binding ' + name);
  return queue.sendBatch(text.split('\\u001e').map((body) => ({ body, contentType: 'text' })));
}
")]
extern "C" {
    /// `sendBatch` of each `\u{1e}`-separated body as a text message.
    #[wasm_bindgen(catch)]
    fn send_lines(env: &Env, name: &str, text: &str) -> Result<js_sys::Promise, JsValue>;
}

async fn send_with_retries(env: &Env, bodies: &[String]) -> Result<(), String> {
    let mut error = String::new();
    for attempt in 0..SEND_TRIES {
        if attempt > 0 {
            Delay::from(Duration::from_millis(SEND_FIRST_DELAY_MS * 4u64.pow(attempt - 1))).await;
        }
        match send_batch_once(env, bodies).await {
            Ok(()) => return Ok(()),
            Err(e) => error = e,
        }
    }
    Err(error)
}

/// One `sendBatch` of these message bodies.
async fn send_batch_once(env: &Env, bodies: &[String]) -> Result<(), String> {
    // Text, not structured objects: the consumer stores the producer's bytes as they are.
    let text = bodies.join(&MESSAGE_SEPARATOR.to_string());
    let sent = send_lines(env, QUEUE_BINDING, &text)
        .map_err(|e| format!("queue binding {QUEUE_BINDING}: {}", worker::Error::from(e)))?;
    promise::settled(&sent).await.map(|_| ()).map_err(|e| worker::Error::from(e).to_string())
}

/// Stores a batch as one NDJSON object per partition; acks a message only once its object is in
/// R2, and marks the rest for redelivery (after `max_retries` they go to the dead-letter queue,
/// whose consumer is `usage::dead_letter`). One object's body exists at a time.
pub async fn consume(batch: &MessageBatch<String>, env: &Env) {
    let messages: Vec<_> = batch.raw_iter().collect();
    let bodies: Vec<Option<String>> = messages.iter().map(|m| text_of(&m.body())).collect();
    let plan = export::plan(&bodies);
    reject(&plan);
    let mut stored = Vec::with_capacity(plan.objects.len());
    match env.bucket(BUCKET_BINDING) {
        Ok(bucket) => {
            let fault = export_fault(env);
            for object in &plan.objects {
                let result = store(&bucket, object, &object.body(&bodies), fault.as_deref()).await;
                if let Err(error) = &result {
                    crate::support::log::error(
                        serde_json::json!({"event": "usage_export_failed", "key": object.key, "events": object.events, "error": error}),
                    );
                }
                stored.push(result.is_ok());
            }
        }
        Err(e) => {
            crate::support::log::error(serde_json::json!({"event": "usage_export_failed", "error": e.to_string()}))
        }
    }
    settle(&plan, &stored, &messages, env);
}

/// Acks the messages whose events are all stored (or that held none) and redelivers the rest later.
pub fn settle(plan: &export::Plan, stored: &[bool], messages: &[RawMessage], env: &Env) {
    let later = QueueRetryOptionsBuilder::new().with_delay_seconds(redelivery_delay_s(env)).build();
    let (ack, retry) = plan.settle(stored);
    ack.iter().for_each(|&i| messages[i].ack());
    retry.iter().for_each(|&i| messages[i].retry_with_options(&later));
}

/// Text that is not a usage event is logged in full: retrying cannot fix it.
pub fn reject(plan: &export::Plan) {
    for r in &plan.rejected {
        crate::support::log::error(
            serde_json::json!({"event": "usage_message_rejected", "reason": r.reason, "body": r.text}),
        );
    }
}

pub fn text_of(body: &JsValue) -> Option<String> {
    body.as_string().or_else(|| worker::js_sys::JSON::stringify(body).ok().and_then(|s| s.as_string()))
}

/// `USAGE_REDELIVERY_DELAY_S` (default 30): with the queue's 10 retries, rides out ~5 minutes of R2 trouble.
pub fn redelivery_delay_s(env: &Env) -> u32 {
    env.var("USAGE_REDELIVERY_DELAY_S").ok().and_then(|v| v.to_string().parse().ok()).unwrap_or(REDELIVERY_DELAY_S)
}

/// Test-only fault injection, unset in production (`wrangler.toml` has no such var): writes of
/// `usage/` objects holding an event of the tenant named by `USAGE_EXPORT_FAULT_TENANT` fail.
pub fn export_fault(env: &Env) -> Option<String> {
    env.var("USAGE_EXPORT_FAULT_TENANT").ok().map(|v| v.to_string()).filter(|t| !t.is_empty())
}

/// Writes an export object's `body` to its `usage/` key (with `fault`: fails for that tenant's events).
pub async fn store(bucket: &Bucket, object: &ExportObject, body: &str, fault: Option<&str>) -> Result<(), String> {
    if let Some(tenant) = fault.filter(|t| export::holds_tenant(body, t)) {
        return Err(format!("injected fault: USAGE_EXPORT_FAULT_TENANT={tenant}"));
    }
    put(bucket, &object.key, body, &[("events", &object.events.to_string())]).await
}

// The object's bytes copied out of wasm once, by the runtime's put: worker's builder copied them
// into a second Vec in wasm memory per try, which then stayed as the heap's high-water mark.
#[wasm_bindgen(inline_js = "
export function put_ndjson(bucket, key, body, type, metadata) {
  return bucket.put(key, body.slice(), { httpMetadata: { contentType: type }, customMetadata: JSON.parse(metadata) });
}
")]
extern "C" {
    /// `body` is a view of wasm memory: copied before the runtime holds it; `metadata` a JSON object.
    #[wasm_bindgen(catch)]
    fn put_ndjson(
        bucket: &JsValue,
        key: &str,
        body: &[u8],
        type_: &str,
        metadata: &str,
    ) -> Result<js_sys::Promise, JsValue>;
}

/// One NDJSON object with its custom metadata, tried `PUT_TRIES` times.
pub async fn put(bucket: &Bucket, key: &str, body: &str, metadata: &[(&str, &str)]) -> Result<(), String> {
    let metadata: serde_json::Map<String, serde_json::Value> =
        metadata.iter().map(|(name, value)| (name.to_string(), serde_json::Value::from(*value))).collect();
    let metadata = serde_json::Value::Object(metadata).to_string();
    let mut error = String::new();
    for attempt in 0..PUT_TRIES {
        if attempt > 0 {
            Delay::from(Duration::from_millis(PUT_FIRST_DELAY_MS * 4u64.pow(attempt - 1))).await;
        }
        let result = match put_ndjson(bucket.as_ref(), key, body.as_bytes(), export::CONTENT_TYPE, &metadata) {
            Ok(sent) => promise::settled(&sent).await.map(|_| ()),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) => error = worker::Error::from(e).to_string(),
        }
    }
    Err(error)
}
