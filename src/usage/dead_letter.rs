//! The usage dead-letter queue's consumer: events the usage consumer could not store after all
//! its retries are written again to their `usage/` partition (a redelivery) and, whatever that
//! gives, parked under `usage-dlq/` with the error, so none is lost and every one is counted
//! (`/admin/status` → `usage_dead_letter`). `scripts/usage-report` reads both prefixes and keeps
//! one row per `event_id`.

use crate::usage::export::{self, ExportObject};
use crate::usage::queue::{self, BUCKET_BINDING};
use serde_json::{json, Value};
use worker::{Bucket, Env, Include, MessageBatch, RawMessage};

/// A queue whose name ends so is a dead-letter queue (`edge-gateway-usage-dlq` in wrangler.toml).
pub const DLQ_SUFFIX: &str = "-dlq";
/// R2 custom metadata is capped at 2 KB per object: the error is cut to fit.
const MAX_ERROR_CHARS: usize = 1_000;
/// Pages of 1,000 objects `/admin/status` lists at most before saying it stopped counting.
const MAX_COUNT_PAGES: usize = 20;
/// Distinct errors `/admin/status` shows.
const MAX_ERRORS_SHOWN: usize = 5;

pub fn is_dead_letter_queue(name: &str) -> bool {
    name.ends_with(DLQ_SUFFIX)
}

pub async fn consume(batch: &MessageBatch<String>, env: &Env) {
    let messages: Vec<RawMessage> = batch.raw_iter().collect();
    let bodies: Vec<Option<String>> = messages.iter().map(|m| queue::text_of(&m.body())).collect();
    let plan = export::plan(&bodies);
    queue::reject(&plan);
    let mut stored = Vec::with_capacity(plan.objects.len());
    match env.bucket(BUCKET_BINDING) {
        Ok(bucket) => {
            let fault = queue::export_fault(env);
            for object in &plan.objects {
                stored.push(settle(&bucket, object, &object.body(&bodies), fault.as_deref()).await);
            }
        }
        Err(e) => crate::support::log::error(json!({"event": "usage_dead_letter_failed", "error": e.to_string()})),
    }
    queue::settle(&plan, &stored, &messages, env);
}

/// Redelivers one object and parks its copy; true when the events are stored somewhere.
async fn settle(bucket: &Bucket, object: &ExportObject, body: &str, fault: Option<&str>) -> bool {
    let redelivered = queue::store(bucket, object, body, fault).await;
    let error: String = redelivered.as_ref().err().map_or(String::new(), |e| e.chars().take(MAX_ERROR_CHARS).collect());
    let (events, ok) = (object.events.to_string(), redelivered.is_ok().to_string());
    let metadata = [("events", events.as_str()), ("redelivered", ok.as_str()), ("error", error.as_str())];
    let key = export::parked_key(&object.key);
    let parked = queue::put(bucket, &key, body, &metadata).await;
    let line = json!({"event": "usage_dead_letter", "key": key, "events": object.events,
                      "redelivered": redelivered.is_ok(), "error": error, "parked": parked.as_ref().err()});
    if parked.is_err() && redelivered.is_err() {
        crate::support::log::error(line);
        false
    } else {
        crate::support::log::info(line);
        true
    }
}

/// What `/admin/status` shows: how many events reached the dead-letter queue, and how many of
/// those are only in `usage-dlq/` (their redelivery failed too).
pub async fn parked(env: &Env) -> Value {
    match count(env).await {
        Ok(v) => v,
        Err(e) => json!({"error": e}),
    }
}

async fn count(env: &Env) -> Result<Value, String> {
    let bucket = env.bucket(BUCKET_BINDING).map_err(|e| e.to_string())?;
    let (mut objects, mut events, mut not_redelivered) = (0u64, 0u64, 0u64);
    let mut errors = std::collections::BTreeSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_COUNT_PAGES {
        let mut list =
            bucket.list().prefix(format!("{}/", export::PARKED_PREFIX)).include(vec![Include::CustomMetadata]);
        if let Some(c) = cursor.take() {
            list = list.cursor(c);
        }
        let page = list.execute().await.map_err(|e| e.to_string())?;
        for object in page.objects() {
            let meta = object.custom_metadata().unwrap_or_default();
            let n: u64 = meta.get("events").and_then(|e| e.parse().ok()).unwrap_or(0);
            objects += 1;
            events += n;
            if meta.get("redelivered").map(String::as_str) != Some("true") {
                not_redelivered += n;
            }
            match meta.get("error") {
                Some(e) if !e.is_empty() && errors.len() < MAX_ERRORS_SHOWN => errors.insert(e.clone()),
                _ => false,
            };
        }
        cursor = page.truncated().then(|| page.cursor()).flatten();
        if cursor.is_none() {
            break;
        }
    }
    Ok(json!({"objects": objects, "events": events, "not_redelivered": not_redelivered, "errors": errors,
              "complete": cursor.is_none()}))
}
