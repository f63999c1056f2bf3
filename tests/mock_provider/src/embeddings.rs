//! OpenAI embeddings with deterministic unit vectors derived from the input.

use crate::fault::{Faults, Key};
use crate::http::Response;
use crate::openai;
use crate::tokens;
use crate::vendor::Call;
use serde_json::{json, Value};

pub const DEFAULT_DIMENSIONS: usize = 8;
const MAX_DIMENSIONS: u64 = 4096;

/// One embedding input: a key to hash and its token cost.
#[derive(Debug, PartialEq, Eq)]
struct Input {
    key: String,
    tokens: u64,
}

pub fn create(call: &Call, f: &Faults) -> Response {
    if call.model.is_empty() {
        return openai::invalid("you must provide a model parameter");
    }
    let Some(input) = call.body.get("input") else {
        return openai::error(
            400,
            "Missing required parameter: 'input'.",
            "invalid_request_error",
            Some("input"),
            Some("missing_required_parameter"),
        );
    };
    let Some(inputs) = inputs(input) else {
        return openai::error(
            400,
            "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
            "invalid_request_error",
            Some("input"),
            None,
        );
    };
    let dims = match call.body.get("dimensions").map(Value::as_u64) {
        None => DEFAULT_DIMENSIONS,
        Some(Some(d)) if (1..=MAX_DIMENSIONS).contains(&d) => d as usize,
        Some(_) => {
            return openai::error(
                400,
                "Invalid value for 'dimensions'.",
                "invalid_request_error",
                Some("dimensions"),
                None,
            )
        }
    };
    let base64 = call.body.get("encoding_format").and_then(Value::as_str) == Some("base64");
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let v = vector(&input.key, dims);
            let embedding = if base64 { Value::from(encode_base64(&v)) } else { json!(v) };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let mut body = json!({"object": "list", "data": data, "model": call.model});
    if !f.has(Key::NoUsage) {
        let prompt: u64 = inputs.iter().map(|i| i.tokens).sum();
        body["usage"] = json!({"prompt_tokens": prompt, "total_tokens": prompt});
    }
    Response::json(200, &body)
}

/// Accepts a string, strings, a token array or token arrays.
fn inputs(v: &Value) -> Option<Vec<Input>> {
    let text = |s: &str| Input { key: s.to_string(), tokens: tokens::tokens_for_chars(s.chars().count()) };
    let token_array = |items: &[Value]| -> Option<Input> {
        let ids: Option<Vec<u64>> = items.iter().map(Value::as_u64).collect();
        let ids = ids?;
        Some(Input { key: format!("{ids:?}"), tokens: ids.len() as u64 })
    };
    let list = match v {
        Value::String(s) => vec![text(s)],
        Value::Array(items) if items.is_empty() => return None,
        Value::Array(items) if items.iter().all(Value::is_number) => vec![token_array(items)?],
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Some(text(s)),
                Value::Array(ids) if !ids.is_empty() => token_array(ids),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    };
    Some(list)
}

/// Unit-length vector seeded by an FNV-1a hash of the input, rounded to 6 places.
pub fn vector(key: &str, dims: usize) -> Vec<f64> {
    let mut state =
        key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    let raw: Vec<f64> = (0..dims)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::EPSILON);
    raw.iter().map(|x| (x / norm * 1e6).round() / 1e6).collect()
}

/// Little-endian f32 bytes in standard base64, as `encoding_format: "base64"` returns.
pub fn encode_base64(v: &[f64]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect();
    crate::base64::encode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Request;
    use crate::vendor::{respond, Api};

    fn run(body: Value) -> Response {
        let req = Request {
            method: "POST".into(),
            headers: vec![("authorization".into(), "Bearer k".into())],
            ..Request::default()
        };
        let call = Call::new(&req, body, 1, None);
        respond(Api::OpenAi, &call, create)
    }

    #[test]
    fn list_shape_and_usage() {
        let v = run(json!({"model": "text-embedding-3-small", "input": ["abcd", "abcdefgh"]})).body_json().unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["model"], "text-embedding-3-small");
        assert_eq!(v["usage"], json!({"prompt_tokens": 3, "total_tokens": 3}));
        let data = v["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        assert_eq!(data[1]["object"], "embedding");
        assert_eq!(data[1]["index"], 1);
        let e = data[0]["embedding"].as_array().unwrap();
        assert_eq!(e.len(), DEFAULT_DIMENSIONS);
        let norm: f64 = e.iter().map(|x| x.as_f64().unwrap().powi(2)).sum();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        assert_ne!(data[0]["embedding"], data[1]["embedding"]);
    }

    #[test]
    fn deterministic_and_dimensions() {
        let a = run(json!({"model": "m", "input": "x", "dimensions": 3})).body_json().unwrap();
        let b = run(json!({"model": "m", "input": "x", "dimensions": 3})).body_json().unwrap();
        assert_eq!(a["data"], b["data"]);
        assert_eq!(a["data"][0]["embedding"].as_array().unwrap().len(), 3);
        assert_eq!(a["usage"]["prompt_tokens"], 1);
    }

    #[test]
    fn token_inputs_and_bad_inputs() {
        let v = run(json!({"model": "m", "input": [1, 2, 3]})).body_json().unwrap();
        assert_eq!((v["data"].as_array().unwrap().len(), v["usage"]["prompt_tokens"].clone()), (1, json!(3)));
        let v = run(json!({"model": "m", "input": [[1, 2], [3]]})).body_json().unwrap();
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        assert_eq!(run(json!({"model": "m", "input": []})).status, 400);
        assert_eq!(run(json!({"model": "m", "input": [{}]})).status, 400);
        assert_eq!(run(json!({"model": "m"})).body_json().unwrap()["error"]["param"], "input");
    }

    #[test]
    fn base64_matches_floats() {
        let v = run(json!({"model": "m", "input": "x", "encoding_format": "base64"})).body_json().unwrap();
        let s = v["data"][0]["embedding"].as_str().unwrap();
        assert_eq!(s, encode_base64(&vector("x", DEFAULT_DIMENSIONS)));
        assert_eq!(s.len(), (DEFAULT_DIMENSIONS * 4).div_ceil(3) * 4);
        assert_eq!(encode_base64(&[]), "");
        // 1.0f32 = 00 00 80 3f.
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
    }
}
