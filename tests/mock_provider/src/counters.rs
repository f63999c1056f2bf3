//! Shared server state for the admin API: call counters, last requests and
//! scripted faults, all keyed by the request's full model string; and every request grouped by
//! the caller's correlation id (`x-client-request-id`), so a test reads only its own calls.

use crate::fault::Faults;
use crate::http::{Connection, Request};
use crate::prompt_cache::PromptCache;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

/// Scripts for this model apply to requests for any model without their own.
pub const ANY_MODEL: &str = "*";
/// The header a caller (the gateway) sets to its own request id, as OpenAI documents it.
pub const CORRELATION_HEADER: &str = "x-client-request-id";
/// Correlation ids remembered; the oldest go first so a benchmark's load cannot grow memory.
const MAX_CORRELATED: usize = 20_000;

#[derive(Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Arc<Vec<u8>>,
    pub connection: Option<Arc<Connection>>,
    /// Its place among the requests its connection carried (1-based).
    pub on_connection: u64,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn to_json(&self) -> Value {
        let headers: Map<String, Value> =
            self.headers.iter().map(|(n, v)| (n.clone(), Value::from(v.as_str()))).collect();
        let body =
            serde_json::from_slice(&self.body).unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&self.body)));
        let mut v = json!({
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": headers,
            "body": body,
        });
        // Read when asked: whether the caller still holds the connection open (kept for reuse).
        if let Some(c) = &self.connection {
            v["connection"] = json!({
                "id": c.id,
                "request": self.on_connection,
                "requests": c.requests.load(Ordering::SeqCst),
                "open": c.open.load(Ordering::SeqCst),
            });
        }
        // The bytes as received, for byte-for-byte comparisons: a string, or base64 when not UTF-8.
        match std::str::from_utf8(&self.body) {
            Ok(s) => v["body_raw"] = Value::from(s),
            Err(_) => {
                v["body_raw"] = Value::Null;
                v["body_base64"] = Value::from(crate::base64::encode(&self.body));
            }
        }
        v
    }
}

#[derive(Clone, Debug)]
pub struct Script {
    pub spec: String,
    pub faults: Faults,
    /// None: until cleared.
    pub remaining: Option<u64>,
}

#[derive(Debug)]
pub struct Arrival {
    /// 1-based count of calls for this model (or of all calls when there is none).
    pub number: u64,
    pub scripted: Option<Faults>,
}

#[derive(Default)]
struct Inner {
    total: u64,
    by_model: HashMap<String, u64>,
    by_path: HashMap<String, u64>,
    last: HashMap<String, Arc<Recorded>>,
    last_any: Option<Arc<Recorded>>,
    scripts: HashMap<String, VecDeque<Script>>,
    by_correlation: HashMap<String, Vec<Arc<Recorded>>>,
    correlation_order: VecDeque<String>,
}

impl Inner {
    fn correlate(&mut self, recorded: &Arc<Recorded>) {
        let Some(id) = recorded.header(CORRELATION_HEADER) else { return };
        if let Some(calls) = self.by_correlation.get_mut(id) {
            calls.push(recorded.clone());
            return;
        }
        if self.correlation_order.len() >= MAX_CORRELATED {
            if let Some(oldest) = self.correlation_order.pop_front() {
                self.by_correlation.remove(&oldest);
            }
        }
        self.correlation_order.push_back(id.to_string());
        self.by_correlation.insert(id.to_string(), vec![recorded.clone()]);
    }
}

#[derive(Default)]
pub struct State {
    inner: Mutex<Inner>,
    /// Pause before each SSE event when the model asks for none (`--stream-pace-ms`).
    pub stream_pace_ms: u64,
    pub prompt_cache: PromptCache,
}

impl State {
    pub fn with_stream_pace(stream_pace_ms: u64) -> State {
        State { stream_pace_ms, ..State::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts and records a /v1 request and takes one use of its scripted fault.
    pub fn arrive(&self, req: &Request, model: Option<&str>) -> Arrival {
        let recorded = Arc::new(Recorded {
            method: req.method.clone(),
            path: req.path.clone(),
            query: req.query.clone(),
            headers: req.headers.clone(),
            body: req.body.clone(),
            connection: req.connection.clone(),
            on_connection: req.connection.as_ref().map_or(0, |c| c.requests.load(Ordering::SeqCst)),
        });
        let mut inner = self.lock();
        inner.total += 1;
        *inner.by_path.entry(req.path.clone()).or_default() += 1;
        inner.last_any = Some(recorded.clone());
        inner.correlate(&recorded);
        let Some(model) = model else {
            return Arrival { number: inner.total, scripted: None };
        };
        let number = {
            let n = inner.by_model.entry(model.to_string()).or_default();
            *n += 1;
            *n
        };
        inner.last.insert(model.to_string(), recorded);
        let key = if inner.scripts.contains_key(model) { model } else { ANY_MODEL };
        Arrival { number, scripted: take_script(&mut inner.scripts, key) }
    }

    pub fn calls(&self) -> Value {
        let inner = self.lock();
        json!({"total": inner.total, "by_model": inner.by_model, "by_path": inner.by_path})
    }

    pub fn calls_for(&self, model: &str) -> u64 {
        self.lock().by_model.get(model).copied().unwrap_or(0)
    }

    /// Every request that carried this correlation id, oldest first.
    pub fn correlated(&self, id: &str) -> Vec<Arc<Recorded>> {
        self.lock().by_correlation.get(id).cloned().unwrap_or_default()
    }

    pub fn last(&self, model: Option<&str>) -> Option<Arc<Recorded>> {
        let inner = self.lock();
        match model {
            Some(m) => inner.last.get(m).cloned(),
            None => inner.last_any.clone(),
        }
    }

    /// Replaces the model's script, or queues behind it when `append`.
    pub fn set_script(&self, model: &str, script: Script, append: bool) {
        let mut inner = self.lock();
        let queue = inner.scripts.entry(model.to_string()).or_default();
        if !append {
            queue.clear();
        }
        queue.push_back(script);
    }

    pub fn clear_script(&self, model: &str) -> bool {
        self.lock().scripts.remove(model).is_some()
    }

    pub fn scripts(&self) -> Value {
        let inner = self.lock();
        let map: Map<String, Value> = inner
            .scripts
            .iter()
            .map(|(model, queue)| {
                let items = queue.iter().map(|s| json!({"fault": s.spec, "remaining": s.remaining})).collect();
                (model.clone(), Value::Array(items))
            })
            .collect();
        Value::Object(map)
    }

    pub fn reset(&self) {
        *self.lock() = Inner::default();
        self.prompt_cache.clear();
    }
}

fn take_script(scripts: &mut HashMap<String, VecDeque<Script>>, key: &str) -> Option<Faults> {
    let queue = scripts.get_mut(key)?;
    let front = queue.front_mut()?;
    let faults = front.faults.clone();
    if let Some(n) = front.remaining.as_mut() {
        *n -= 1;
        if *n == 0 {
            queue.pop_front();
        }
    }
    if queue.is_empty() {
        scripts.remove(key);
    }
    Some(faults)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::Key;

    fn req(path: &str) -> Request {
        Request {
            method: "POST".into(),
            path: path.into(),
            headers: vec![("authorization".into(), "Bearer k".into())],
            body: Arc::new(br#"{"model":"m"}"#.to_vec()),
            ..Request::default()
        }
    }

    fn script(spec: &str, remaining: Option<u64>) -> Script {
        Script { spec: spec.into(), faults: Faults::parse(spec, ',').unwrap(), remaining }
    }

    #[test]
    fn counts_and_records() {
        let s = State::default();
        assert_eq!(s.arrive(&req("/v1/a"), Some("m")).number, 1);
        assert_eq!(s.arrive(&req("/v1/a"), Some("m")).number, 2);
        s.arrive(&req("/v1/b"), None);
        assert_eq!(s.calls_for("m"), 2);
        assert_eq!(s.calls(), json!({"total": 3, "by_model": {"m": 2}, "by_path": {"/v1/a": 2, "/v1/b": 1}}));
        let last = s.last(Some("m")).unwrap().to_json();
        assert_eq!(last["body"], json!({"model": "m"}));
        assert_eq!(last["headers"]["authorization"], "Bearer k");
        assert_eq!(last["body_raw"], r#"{"model":"m"}"#);
        let mut binary = req("/v1/b");
        binary.body = Arc::new(vec![0xff, 0x00]);
        s.arrive(&binary, None);
        let raw = s.last(None).unwrap().to_json();
        assert_eq!((raw["body_raw"].clone(), raw["body_base64"].clone()), (Value::Null, json!("/wA=")));
        assert_eq!(s.last(None).unwrap().path, "/v1/b");
        assert!(s.correlated("r1").is_empty(), "requests without the header are not correlated");
        assert!(raw.get("connection").is_none(), "no connection outside the server");
        let mut carried = req("/v1/a");
        let conn = Arc::new(crate::http::Connection::new(7));
        conn.requests.store(2, Ordering::SeqCst);
        carried.connection = Some(conn.clone());
        s.arrive(&carried, None);
        assert_eq!(
            s.last(None).unwrap().to_json()["connection"],
            json!({"id": 7, "request": 2, "requests": 2, "open": true})
        );
        conn.requests.store(3, Ordering::SeqCst);
        conn.open.store(false, Ordering::SeqCst);
        let later = s.last(None).unwrap().to_json()["connection"].clone();
        assert_eq!(later, json!({"id": 7, "request": 2, "requests": 3, "open": false}), "read when asked");
        s.reset();
        assert_eq!(s.calls()["total"], 0);
        assert!(s.last(Some("m")).is_none());
    }

    #[test]
    fn requests_are_grouped_by_correlation_id_and_bounded() {
        let s = State::default();
        let tagged = |id: &str, path: &str| {
            let mut r = req(path);
            r.headers.push(("X-Client-Request-Id".into(), id.into()));
            r
        };
        s.arrive(&tagged("r1", "/v1/a"), Some("m"));
        s.arrive(&tagged("r2", "/v1/b"), Some("m"));
        s.arrive(&tagged("r1", "/v1/c"), Some("m"));
        let paths: Vec<_> = s.correlated("r1").iter().map(|r| r.path.clone()).collect();
        assert_eq!(paths, ["/v1/a", "/v1/c"]);
        assert_eq!(s.correlated("r2").len(), 1);
        for i in 0..MAX_CORRELATED {
            s.arrive(&tagged(&format!("fill{i}"), "/v1/a"), None);
        }
        assert!(s.correlated("r1").is_empty(), "the oldest ids are forgotten first");
        assert_eq!(s.correlated(&format!("fill{}", MAX_CORRELATED - 1)).len(), 1);
        assert_eq!(s.lock().by_correlation.len(), MAX_CORRELATED);
    }

    #[test]
    fn scripts_run_out_and_queue() {
        let s = State::default();
        s.set_script("m", script("status=500", Some(2)), false);
        s.set_script("m", script("status=429", Some(1)), true);
        let status = |s: &State| s.arrive(&req("/v1/a"), Some("m")).scripted.and_then(|f| f.get(Key::Status));
        assert_eq!(status(&s), Some(500));
        assert_eq!(status(&s), Some(500));
        assert_eq!(status(&s), Some(429));
        assert_eq!(status(&s), None);
    }

    #[test]
    fn forever_scripts_replace_and_clear() {
        let s = State::default();
        s.set_script("m", script("status=500", None), false);
        s.set_script("m", script("status=503", None), false);
        for _ in 0..3 {
            let f = s.arrive(&req("/v1/a"), Some("m")).scripted.unwrap();
            assert_eq!(f.get(Key::Status), Some(503));
        }
        assert!(s.clear_script("m"));
        assert!(s.arrive(&req("/v1/a"), Some("m")).scripted.is_none());
    }

    #[test]
    fn wildcard_applies_when_model_has_no_script() {
        let s = State::default();
        s.set_script(ANY_MODEL, script("quota", Some(1)), false);
        s.set_script("own", script("status=502", Some(1)), false);
        let own = s.arrive(&req("/v1/a"), Some("own")).scripted.unwrap();
        assert_eq!(own.get(Key::Status), Some(502));
        assert!(s.arrive(&req("/v1/a"), Some("other")).scripted.unwrap().has(Key::Quota));
        assert!(s.arrive(&req("/v1/a"), Some("other")).scripted.is_none());
        assert_eq!(s.scripts(), json!({}));
    }
}
