//! The pipeline every vendor endpoint shares: faults, auth, error faults,
//! the endpoint itself, then response-shaping faults and headers.

use crate::fault::{self, Faults, Key};
use crate::http::{Body, Request, Response, Timing};
use crate::prompt_cache::PromptCache;
use crate::ratelimit::{self, RateLimit};
use crate::{anthropic, openai, reply};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    OpenAi,
    Anthropic,
}

/// One /v1 request after counting, with what the endpoints need.
pub struct Call<'a> {
    pub req: &'a Request,
    /// Null when the body is empty or not JSON.
    pub body: Value,
    /// Full model string as sent, fault suffix included; empty when absent.
    pub model: String,
    pub number: u64,
    pub scripted: Option<Faults>,
    pub request_id: String,
    /// The server's prompt cache; None in unit tests, where every breakpoint writes.
    pub prompt_cache: Option<&'a PromptCache>,
}

impl<'a> Call<'a> {
    pub fn new(req: &'a Request, body: Value, number: u64, scripted: Option<Faults>) -> Call<'a> {
        let model = body.get("model").and_then(Value::as_str).unwrap_or("").to_string();
        Call { req, body, model, number, scripted, request_id: reply::id("req_"), prompt_cache: None }
    }

    pub fn base_model(&self) -> &str {
        fault::split_model(&self.model).0
    }

    pub fn bool_field(&self, name: &str) -> bool {
        self.body.get(name).and_then(Value::as_bool).unwrap_or(false)
    }
}

pub fn respond(api: Api, call: &Call, endpoint: impl FnOnce(&Call, &Faults) -> Response) -> Response {
    let header = call.req.header("x-mock-fault");
    let resp = match fault::collect(&call.model, header, call.scripted.as_ref()) {
        Err(e) => invalid(api, call, &format!("mock-provider: bad fault spec: {e}")),
        Ok(faults) => {
            let resp = run(api, call, &faults, endpoint);
            shape(api, call, resp, &faults)
        }
    };
    let id_header = match api {
        Api::OpenAi => "x-request-id",
        Api::Anthropic => "request-id",
    };
    resp.with_header(id_header, &call.request_id)
}

/// A 400 that repeats the presented credential verbatim (no known key prefix needed to leak it).
fn echo_key_error(api: Api, call: &Call) -> Response {
    let header =
        |name: &str| call.req.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let key = header("authorization")
        .map(|v| v.trim_start_matches("Bearer ").to_string())
        .or_else(|| header("x-api-key"))
        .or_else(|| header("api-key"))
        .unwrap_or_default();
    let message = format!("The API key {key} is not valid for this endpoint.");
    match api {
        Api::OpenAi => openai::error(400, &message, "invalid_request_error", None, Some("invalid_key_format")),
        Api::Anthropic => anthropic::error(400, "invalid_request_error", &message, &call.request_id),
    }
}

fn run(api: Api, call: &Call, faults: &Faults, endpoint: impl FnOnce(&Call, &Faults) -> Response) -> Response {
    let auth_error = match api {
        Api::OpenAi => openai::auth_error(call.req),
        Api::Anthropic => anthropic::auth_error(call),
    };
    if let Some(resp) = auth_error {
        return resp;
    }
    if faults.has(Key::EchoCredential) {
        return echo_key_error(api, call);
    }
    let fault_error = match api {
        Api::OpenAi => openai::fault_error(faults, call.base_model()),
        Api::Anthropic => anthropic::fault_error(faults, call),
    };
    if let Some(resp) = fault_error {
        return resp;
    }
    if call.req.method == "POST" && !call.body.is_object() {
        return match api {
            Api::OpenAi => openai::unparsable_body(),
            Api::Anthropic => {
                invalid(api, call, "There was an error parsing the body of your request: expected a JSON object.")
            }
        };
    }
    endpoint(call, faults)
}

pub fn invalid(api: Api, call: &Call, message: &str) -> Response {
    match api {
        Api::OpenAi => openai::invalid(message),
        Api::Anthropic => anthropic::error(400, "invalid_request_error", message, &call.request_id),
    }
}

/// Adds `"x_mock_padding": "aaa…"` (`n` filler bytes) as a JSON object's first member.
fn pad_json(bytes: &mut Vec<u8>, n: usize) {
    if bytes.first() != Some(&b'{') || bytes.len() < 2 {
        return;
    }
    let mut padded = Vec::with_capacity(bytes.len() + n + 24);
    padded.extend_from_slice(b"{\"x_mock_padding\":\"");
    padded.resize(padded.len() + n, b'a');
    padded.extend_from_slice(if bytes[1] == b'}' { b"\"" } else { b"\"," });
    padded.extend_from_slice(&bytes[1..]);
    *bytes = padded;
}

/// The escape of a lone high surrogate after the reply's first word ("Hello"), once.
fn with_lone_surrogate(text: &str) -> String {
    text.replacen("Hello", "Hello\\ud800", 1)
}

fn accepts_gzip(req: &Request) -> bool {
    req.header("accept-encoding").is_some_and(|v| {
        v.split(',').any(|c| c.split(';').next().is_some_and(|name| name.trim().eq_ignore_ascii_case("gzip")))
    })
}

/// Applies body faults to successes, rate-limit/retry headers and timing.
fn shape(api: Api, call: &Call, mut resp: Response, faults: &Faults) -> Response {
    if resp.status == 200 {
        if faults.has(Key::Empty) {
            let content_type = match &resp.body {
                Body::Full { content_type, .. } => content_type,
                Body::Sse(_) => "text/event-stream",
            };
            resp.body = Body::Full { content_type, bytes: Vec::new() };
        } else if faults.has(Key::Malformed) {
            match &mut resp.body {
                Body::Full { bytes, .. } => bytes.truncate(bytes.len() / 2),
                Body::Sse(sse) => sse.corrupt(),
            }
        }
        if faults.has(Key::LoneSurrogate) && !faults.has(Key::Empty) && !faults.has(Key::Malformed) {
            match &mut resp.body {
                Body::Full { bytes, .. } => *bytes = with_lone_surrogate(&String::from_utf8_lossy(bytes)).into_bytes(),
                Body::Sse(sse) => sse.first_content(with_lone_surrogate),
            }
        }
        if let Some(n) = faults.get(Key::PadBytes) {
            match &mut resp.body {
                Body::Full { bytes, .. } => pad_json(bytes, n as usize),
                Body::Sse(sse) => sse.pad_after_first_content(n as usize),
            }
        }
    }
    if let Some(rl) = RateLimit::for_response(faults, resp.status) {
        let headers = match api {
            Api::OpenAi => rl.openai_headers(),
            Api::Anthropic => rl.anthropic_headers(reply::unix_ms()),
        };
        resp.headers.extend(headers);
    }
    if let Some(secs) = ratelimit::retry_after_secs(faults, resp.status) {
        resp.headers.push(("retry-after".into(), secs.to_string()));
    }
    resp.gzip = faults.has(Key::Gzip) && accepts_gzip(call.req);
    resp.timing = Timing {
        delay_first_ms: faults.get(Key::DelayFirstMs).unwrap_or(0),
        delay_ms: faults.get(Key::DelayMs).unwrap_or(0),
        cut_after: faults.get(Key::CutAfter),
        stall_after: faults.get(Key::StallAfter),
        error_after: faults.get(Key::ErrorAfter),
        ping_ms: faults.get(Key::PingMs),
        linger_ms: faults.get(Key::LingerMs).unwrap_or(0),
        chunked: faults.has(Key::Chunked),
    };
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            ..Request::default()
        }
    }

    fn ok(_: &Call, _: &Faults) -> Response {
        Response::json(200, &json!({"ok": true, "padding": "xxxxxxxx"}))
    }

    fn header<'r>(resp: &'r Response, name: &str) -> Option<&'r str> {
        resp.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn gzip_only_when_the_request_accepts_it() {
        for (accept, expected) in
            [(Some("gzip, deflate, br"), true), (Some("br;q=1, GZIP;q=0.5"), true), (Some("br"), false), (None, false)]
        {
            let mut headers = vec![("authorization", "Bearer k")];
            headers.extend(accept.map(|a| ("accept-encoding", a)));
            let req = request(&headers);
            let call = Call::new(&req, json!({"model": "gpt+gzip"}), 1, None);
            assert_eq!(respond(Api::OpenAi, &call, ok).gzip, expected, "{accept:?}");
        }
    }

    #[test]
    fn echo_key_repeats_the_presented_credential() {
        let req = request(&[("authorization", "Bearer abc.DEF123456")]);
        let call = Call::new(&req, json!({"model": "gpt+echo_key"}), 1, None);
        let resp = respond(Api::OpenAi, &call, ok);
        assert_eq!(resp.status, 400);
        assert!(resp.body_json().unwrap()["error"]["message"].as_str().unwrap().contains("abc.DEF123456"));
    }

    #[test]
    fn bad_fault_spec_is_a_400_even_without_auth() {
        let req = request(&[]);
        let call = Call::new(&req, json!({"model": "gpt+statu=500"}), 1, None);
        let resp = respond(Api::OpenAi, &call, ok);
        assert_eq!(resp.status, 400);
        let msg = resp.body_json().unwrap()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains("unknown fault key `statu`"), "{msg}");
        assert!(header(&resp, "x-request-id").unwrap().starts_with("req_"));
    }

    #[test]
    fn auth_before_faults_then_429_headers() {
        let req = request(&[]);
        let call = Call::new(&req, json!({"model": "gpt+status=500"}), 1, None);
        assert_eq!(respond(Api::OpenAi, &call, ok).status, 401);
        let req = request(&[("authorization", "Bearer k"), ("x-mock-fault", "status=429,retry_after=3")]);
        let call = Call::new(&req, json!({"model": "gpt"}), 1, None);
        let resp = respond(Api::OpenAi, &call, ok);
        assert_eq!(resp.status, 429);
        assert_eq!(header(&resp, "retry-after"), Some("3"));
        assert_eq!(header(&resp, "x-ratelimit-reset-requests"), Some("3s"));
        assert_eq!(header(&resp, "x-ratelimit-remaining-requests"), Some("0"));
    }

    #[test]
    fn empty_and_malformed_shape_successes() {
        let req = request(&[("authorization", "Bearer k")]);
        let call = Call::new(&req, json!({"model": "gpt+empty"}), 1, None);
        match respond(Api::OpenAi, &call, ok).body {
            Body::Full { bytes, .. } => assert!(bytes.is_empty()),
            Body::Sse(_) => panic!("expected full body"),
        }
        let call = Call::new(&req, json!({"model": "gpt+malformed+delay_ms=5+cut_after=1"}), 1, None);
        let resp = respond(Api::OpenAi, &call, ok);
        assert_eq!(resp.status, 200);
        assert!(resp.body_json().is_none());
        assert_eq!(resp.timing.delay_ms, 5);
        assert_eq!(resp.timing.cut_after, Some(1));
    }

    #[test]
    fn lone_surrogate_follows_the_first_word_once() {
        let req = request(&[("authorization", "Bearer k")]);
        let hello = |_: &Call, _: &Faults| Response::json(200, &json!({"text": "Hello from m. Hello again"}));
        let call = Call::new(&req, json!({"model": "gpt+lone_surrogate"}), 1, None);
        match respond(Api::OpenAi, &call, hello).body {
            Body::Full { bytes, .. } => {
                assert_eq!(String::from_utf8(bytes).unwrap(), r#"{"text":"Hello\ud800 from m. Hello again"}"#)
            }
            Body::Sse(_) => panic!("expected full body"),
        }
    }

    #[test]
    fn pad_bytes_weighs_json_and_streams_down() {
        let mut body = br#"{"a":1}"#.to_vec();
        pad_json(&mut body, 5);
        assert_eq!(body, br#"{"x_mock_padding":"aaaaa","a":1}"#);
        let mut empty = b"{}".to_vec();
        pad_json(&mut empty, 2);
        assert_eq!(serde_json::from_slice::<Value>(&empty).unwrap(), json!({"x_mock_padding": "aa"}));
    }

    #[test]
    fn non_object_post_body_is_rejected() {
        let req = request(&[("x-api-key", "k"), ("anthropic-version", "2023-06-01")]);
        let call = Call::new(&req, Value::Null, 1, None);
        let resp = respond(Api::Anthropic, &call, ok);
        assert_eq!(resp.status, 400);
        assert_eq!(resp.body_json().unwrap()["error"]["type"], "invalid_request_error");
        assert!(header(&resp, "request-id").is_some());
    }
}
