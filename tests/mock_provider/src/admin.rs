//! Admin API for tests: counters, last request, scripted faults, reset.

use crate::counters::{Script, State};
use crate::fault::Faults;
use crate::http::{Request, Response};
use serde_json::{json, Value};

pub fn handle(state: &State, req: &Request) -> Response {
    let model = req.query_param("model");
    if let (Some(id), "GET", "/_mock/calls" | "/_mock/last") =
        (req.query_param("request_id"), req.method.as_str(), req.path.as_str())
    {
        return correlated(state, &id, req.path == "/_mock/last");
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/_mock/health") => Response::text(200, "ok"),
        ("GET", "/_mock/calls") => match model {
            Some(m) => Response::json(200, &json!({"model": m, "calls": state.calls_for(&m)})),
            None => Response::json(200, &state.calls()),
        },
        ("GET", "/_mock/last") => match state.last(model.as_deref()) {
            Some(r) => Response::json(200, &r.to_json()),
            None => {
                let what = model.map_or("any model".to_string(), |m| format!("model `{m}`"));
                fail(404, &format!("no request recorded for {what}"))
            }
        },
        ("GET", "/_mock/faults") => Response::json(200, &state.scripts()),
        ("POST", "/_mock/faults") => set_fault(state, req),
        ("POST", "/_mock/reset") => {
            state.reset();
            Response::json(200, &json!({"ok": true}))
        }
        (method, path) => fail(404, &format!("unknown admin endpoint {method} {path}")),
    }
}

/// `calls?request_id=`: how many requests carried the id, and each of them; `last?request_id=`: the latest.
fn correlated(state: &State, id: &str, last_only: bool) -> Response {
    let calls = state.correlated(id);
    if !last_only {
        let requests: Vec<Value> = calls.iter().map(|r| r.to_json()).collect();
        return Response::json(200, &json!({"request_id": id, "calls": calls.len(), "requests": requests}));
    }
    match calls.last() {
        Some(r) => Response::json(200, &r.to_json()),
        None => fail(404, &format!("no request recorded for request id `{id}`")),
    }
}

fn fail(status: u16, message: &str) -> Response {
    Response::json(status, &json!({"error": message}))
}

/// Body `{"model", "fault": "k=v,…" | null, "times"?: N, "append"?: bool}`.
fn set_fault(state: &State, req: &Request) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
        return fail(400, "body must be a JSON object");
    };
    let Some(model) = body.get("model").and_then(Value::as_str) else {
        return fail(400, "`model` (string) is required");
    };
    let spec = match body.get("fault") {
        Some(Value::Null) => {
            let cleared = state.clear_script(model);
            return Response::json(200, &json!({"ok": true, "model": model, "cleared": cleared}));
        }
        Some(Value::String(s)) => s.clone(),
        _ => return fail(400, "`fault` must be a fault spec string, or null to clear"),
    };
    let remaining = match body.get("times") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => return fail(400, "`times` must be a positive integer (omit it for until cleared)"),
        },
    };
    let faults = match Faults::parse(&spec.replace('+', ","), ',') {
        Ok(f) => f,
        Err(e) => return fail(400, &format!("bad fault spec: {e}")),
    };
    let append = body.get("append").and_then(Value::as_bool).unwrap_or(false);
    let script = Script { spec: spec.clone(), faults, remaining };
    state.set_script(model, script, append);
    Response::json(200, &json!({"ok": true, "model": model, "fault": spec, "times": remaining}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn req(method: &str, target: &str, body: &str) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            body: Arc::new(body.as_bytes().to_vec()),
            ..Request::default()
        }
    }

    #[test]
    fn fault_script_validation() {
        let s = State::default();
        let post = |body: &str| handle(&s, &req("POST", "/_mock/faults", body));
        assert_eq!(post(r#"{"model":"m","fault":"status=500","times":2}"#).status, 200);
        assert_eq!(post(r#"{"model":"m","fault":"statu=500"}"#).status, 400);
        assert_eq!(post(r#"{"model":"m","fault":"status=500","times":0}"#).status, 400);
        assert_eq!(post(r#"{"fault":"status=500"}"#).status, 400);
        assert_eq!(post(r#"{"model":"m"}"#).status, 400);
        let listed = handle(&s, &req("GET", "/_mock/faults", "")).body_json().unwrap();
        assert_eq!(listed, json!({"m": [{"fault": "status=500", "remaining": 2}]}));
        let cleared = post(r#"{"model":"m","fault":null}"#).body_json().unwrap();
        assert_eq!(cleared["cleared"], true);
    }

    #[test]
    fn calls_last_health_reset() {
        let s = State::default();
        assert_eq!(handle(&s, &req("GET", "/_mock/health", "")).status, 200);
        let v = handle(&s, &req("GET", "/_mock/calls?model=a%2Bb", "")).body_json().unwrap();
        assert_eq!(v, json!({"model": "a+b", "calls": 0}));
        assert_eq!(handle(&s, &req("GET", "/_mock/last?model=x", "")).status, 404);
        assert_eq!(handle(&s, &req("GET", "/_mock/last?request_id=r9", "")).status, 404);
        let v = handle(&s, &req("GET", "/_mock/calls?request_id=r9", "")).body_json().unwrap();
        assert_eq!(v, json!({"request_id": "r9", "calls": 0, "requests": []}));
        assert_eq!(handle(&s, &req("POST", "/_mock/reset", "")).status, 200);
        assert_eq!(handle(&s, &req("GET", "/_mock/nope", "")).status, 404);
    }
}
