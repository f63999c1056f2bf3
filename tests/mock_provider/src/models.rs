//! `GET /v1/models` in OpenAI format, or Anthropic format when the request
//! carries `anthropic-version`.

use crate::fault::Faults;
use crate::http::Request;
use crate::http::Response;
use crate::vendor::{Api, Call};
use serde_json::{json, Value};

const OPENAI: &[(&str, u64)] =
    &[("gpt-4o-mini", 1_721_172_741), ("gpt-4o", 1_715_367_049), ("text-embedding-3-small", 1_705_948_997)];

const ANTHROPIC: &[(&str, &str, &str)] = &[
    ("claude-sonnet-4-5", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z"),
    ("claude-3-5-haiku-20241022", "Claude Haiku 3.5", "2024-10-22T00:00:00Z"),
];

pub fn api_for(req: &Request) -> Api {
    if req.header("anthropic-version").is_some() && req.header("authorization").is_none() {
        Api::Anthropic
    } else {
        Api::OpenAi
    }
}

pub fn list(call: &Call, _: &Faults) -> Response {
    let body = match api_for(call.req) {
        Api::OpenAi => {
            let data: Vec<Value> = OPENAI.iter().map(|(id, created)| openai_model(id, *created)).collect();
            json!({"object": "list", "data": data})
        }
        Api::Anthropic => {
            let data: Vec<Value> = ANTHROPIC.iter().map(|(id, name, at)| anthropic_model(id, name, at)).collect();
            json!({"data": data, "has_more": false, "first_id": ANTHROPIC[0].0, "last_id": ANTHROPIC[ANTHROPIC.len() - 1].0})
        }
    };
    Response::json(200, &body)
}

/// Every id exists, since the mock answers for any model name.
pub fn get(call: &Call, _: &Faults) -> Response {
    let id = call.req.path.trim_start_matches("/v1/models/");
    let body = match api_for(call.req) {
        Api::OpenAi => {
            let created = OPENAI.iter().find(|(m, _)| *m == id).map_or(1_700_000_000, |(_, c)| *c);
            openai_model(id, created)
        }
        Api::Anthropic => {
            let known = ANTHROPIC.iter().find(|(m, _, _)| *m == id);
            let (name, at) = known.map_or((id, "2025-01-01T00:00:00Z"), |(_, n, a)| (*n, *a));
            anthropic_model(id, name, at)
        }
    };
    Response::json(200, &body)
}

fn openai_model(id: &str, created: u64) -> Value {
    json!({"id": id, "object": "model", "created": created, "owned_by": "system"})
}

fn anthropic_model(id: &str, name: &str, created_at: &str) -> Value {
    json!({"type": "model", "id": id, "display_name": name, "created_at": created_at})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call_with(req: &Request) -> Call<'_> {
        Call::new(req, Value::Null, 1, None)
    }

    #[test]
    fn openai_list() {
        let req = Request { method: "GET".into(), path: "/v1/models".into(), ..Request::default() };
        let v = list(&call_with(&req), &Faults::default()).body_json().unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(
            v["data"][0],
            json!({"id": "gpt-4o-mini", "object": "model", "created": 1_721_172_741, "owned_by": "system"})
        );
    }

    #[test]
    fn anthropic_list_and_get() {
        let req = Request {
            method: "GET".into(),
            path: "/v1/models/claude-x".into(),
            headers: vec![("anthropic-version".into(), "2023-06-01".into())],
            ..Request::default()
        };
        let v = list(&call_with(&req), &Faults::default()).body_json().unwrap();
        assert_eq!(v["has_more"], false);
        assert_eq!(v["data"][0]["type"], "model");
        let v = get(&call_with(&req), &Faults::default()).body_json().unwrap();
        assert_eq!(v["id"], "claude-x");
    }
}
