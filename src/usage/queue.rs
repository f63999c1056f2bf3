//! The usage pipeline's platform side: sending events to the usage queue, and the queue consumer that stores them in R2 as NDJSON.

use crate::usage::event::UsageEvent;
use crate::usage::export::{self, ExportObject};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;
use worker::js_sys::{self, futures::JsFuture};
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::JsValue;
use worker::{Bucket, Delay, Env, HttpMetadata, MessageBatch, MessageExt, QueueRetryOptionsBuilder, RawMessage};

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
/// Cloudflare Queues accept at most 100 messages per `sendBatch`.
const MAX_BATCH: usize = 100;

type Lines = Rc<RefCell<Vec<String>>>;

thread_local! {
    static OPEN: RefCell<Option<Lines>> = const { RefCell::new(None) };
}

/// Sends one event. The request that opens a batch sends it, inside its own `wait_until`, after
/// the window; requests that join only add their line. Nobody awaits another request's I/O: in
/// Workers a promise resolved from another request's context is a hang. A batch that keeps
/// failing is logged event by event so nothing is silently dropped.
pub async fn send(env: &Env, event: &UsageEvent) {
    let line = match serde_json::to_string(event) {
        Ok(line) => line,
        Err(e) => {
            crate::support::log::error(
                serde_json::json!({"event": "usage_send_failed", "error": e.to_string(), "usage": event}),
            );
            return;
        }
    };
    let opened = OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if let Some(lines) = open.as_ref() {
            if lines.borrow().len() < MAX_BATCH {
                lines.borrow_mut().push(line.clone());
                return None;
            }
        }
        let lines: Lines = Rc::new(RefCell::new(vec![line.clone()]));
        *open = Some(lines.clone());
        Some(lines)
    });
    if let Some(lines) = opened {
        flush(env.clone(), lines).await;
    }
}

async fn flush(env: Env, lines: Lines) {
    Delay::from(Duration::from_millis(BATCH_WINDOW_MS)).await;
    // Close this batch before sending: events from now on start the next one.
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if open.as_ref().is_some_and(|open| Rc::ptr_eq(open, &lines)) {
            *open = None;
        }
    });
    let lines = std::mem::take(&mut *lines.borrow_mut());
    let mut error = String::new();
    for attempt in 0..SEND_TRIES {
        if attempt > 0 {
            Delay::from(Duration::from_millis(SEND_FIRST_DELAY_MS * 4u64.pow(attempt - 1))).await;
        }
        match send_batch_once(&env, &lines).await {
            Ok(()) => return,
            Err(e) => error = e,
        }
    }
    // One bad event must not take the others with it: the batch is split, each event sent alone.
    for line in &lines {
        let alone =
            if lines.len() > 1 { send_batch_once(&env, std::slice::from_ref(line)).await } else { Err(error.clone()) };
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
  return queue.sendBatch(text.split('\\n').map((body) => ({ body, contentType: 'text' })));
}
")]
extern "C" {
    /// `sendBatch` of each `\n`-separated line as a text message.
    #[wasm_bindgen(catch)]
    fn send_lines(env: &Env, name: &str, text: &str) -> Result<js_sys::Promise, JsValue>;
}

async fn send_batch_once(env: &Env, lines: &[String]) -> Result<(), String> {
    // Text, not structured objects: the consumer stores the producer's bytes as they are. A JSON
    // line never holds a raw line break (serde_json escapes them), so one joins the batch.
    let text = lines.join("\n");
    let sent = send_lines(env, QUEUE_BINDING, &text)
        .map_err(|e| format!("queue binding {QUEUE_BINDING}: {}", worker::Error::from(e)))?;
    JsFuture::from(sent).await.map(|_| ()).map_err(|e| worker::Error::from(e).to_string())
}

/// Stores a batch as one NDJSON object per partition; acks a message only once its object is in
/// R2, and marks the rest for redelivery (after `max_retries` they go to the dead-letter queue,
/// whose consumer is `usage::dead_letter`).
pub async fn consume(batch: &MessageBatch<String>, env: &Env) {
    let messages: Vec<_> = batch.raw_iter().collect();
    let bodies: Vec<Option<String>> = messages.iter().map(|m| text_of(&m.body())).collect();
    let plan = export::plan(&bodies);
    reject(&plan, &messages, &bodies);
    let later = QueueRetryOptionsBuilder::new().with_delay_seconds(redelivery_delay_s(env)).build();
    let bucket = match env.bucket(BUCKET_BINDING) {
        Ok(b) => b,
        Err(e) => {
            crate::support::log::error(serde_json::json!({"event": "usage_export_failed", "error": e.to_string()}));
            plan.objects.iter().flat_map(|o| &o.members).for_each(|&i| messages[i].retry_with_options(&later));
            return;
        }
    };
    let fault = export_fault(env);
    for object in &plan.objects {
        match store(&bucket, object, fault.as_deref()).await {
            Ok(()) => object.members.iter().for_each(|&i| messages[i].ack()),
            Err(error) => {
                crate::support::log::error(
                    serde_json::json!({"event": "usage_export_failed", "key": object.key, "events": object.events, "error": error}),
                );
                object.members.iter().for_each(|&i| messages[i].retry_with_options(&later));
            }
        }
    }
}

/// Messages that are not usage events are logged in full and acked: retrying cannot fix them.
pub fn reject(plan: &export::Plan, messages: &[RawMessage], bodies: &[Option<String>]) {
    for r in &plan.rejected {
        crate::support::log::error(
            serde_json::json!({"event": "usage_message_rejected", "reason": r.reason, "body": bodies[r.index]}),
        );
        messages[r.index].ack();
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

/// Writes an export object to its `usage/` key (with `fault`: fails for that tenant's events).
pub async fn store(bucket: &Bucket, object: &ExportObject, fault: Option<&str>) -> Result<(), String> {
    if let Some(tenant) = fault.filter(|t| export::holds_tenant(&object.body, t)) {
        return Err(format!("injected fault: USAGE_EXPORT_FAULT_TENANT={tenant}"));
    }
    let metadata = HashMap::from([("events".to_string(), object.events.to_string())]);
    put(bucket, &object.key, &object.body, metadata).await
}

/// One NDJSON object, tried `PUT_TRIES` times.
pub async fn put(bucket: &Bucket, key: &str, body: &str, metadata: HashMap<String, String>) -> Result<(), String> {
    let mut error = String::new();
    for attempt in 0..PUT_TRIES {
        if attempt > 0 {
            Delay::from(Duration::from_millis(PUT_FIRST_DELAY_MS * 4u64.pow(attempt - 1))).await;
        }
        let http = HttpMetadata { content_type: Some(export::CONTENT_TYPE.to_string()), ..HttpMetadata::default() };
        let result = bucket
            .put(key.to_string(), body.as_bytes().to_vec())
            .http_metadata(http)
            .custom_metadata(metadata.clone())
            .execute()
            .await;
        match result {
            Ok(_) => return Ok(()),
            Err(e) => error = e.to_string(),
        }
    }
    Err(error)
}
