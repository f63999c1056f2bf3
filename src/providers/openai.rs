//! OpenAI and OpenAI-compatible vendors (DeepSeek, Qwen, GLM, vLLM): the request is the canonical
//! one with a few quirks applied; responses and streams pass through, read only for usage.

use super::chunk_view::ChunkView;
use super::splice::splice_at;
use super::{classify, endpoint, headers, read_json, ChatResult, Raw, StreamEnd, UpstreamCall, UpstreamError};
use crate::canonical::usage::Usage;
use crate::canonical::usage_counts::OpenaiCounts;
use crate::canonical::{ChatFacts, ChatRequest, Content};
use crate::config::routes::{Deployment, MaxTokensField, ProviderKind};
use crate::http::codes;
use crate::http::error::ApiError;
use crate::http::sse::{write_data, SseEvent};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

pub(super) fn build_chat(
    dep: &Deployment,
    req: &ChatRequest,
    credential: &str,
    force_usage: bool,
) -> Result<UpstreamCall, ApiError> {
    let mut body = req.clone();
    body.model = dep.model.clone();
    apply_max_tokens(dep, &mut body);
    if dep.quirks.string_content {
        for content in body.messages.iter_mut().filter_map(|m| m.content.as_mut()) {
            if let Some(text) = content.joined_text() {
                *content = Content::Text(text);
            }
        }
    }
    if !dep.quirks.stream_options || !body.is_stream() {
        body.stream_options = None;
    } else if force_usage {
        body.stream_options.get_or_insert_with(Default::default).include_usage = Some(true);
    }
    let body = serde_json::to_vec(&body).map_err(|e| ApiError::internal(format!("could not encode request: {e}")))?;
    Ok(UpstreamCall { url: endpoint(&dep.base_url, "/chat/completions"), headers: headers(dep, credential, &[]), body })
}

/// The client's own bytes with the deployment's model spliced in, when that is exactly the
/// request [`build_chat`] would send (see [`needs_no_rewrite`]); `None` when something must change.
pub(super) fn passthrough_chat(
    dep: &Deployment,
    facts: &ChatFacts,
    raw: Raw,
    credential: &str,
    force_usage: bool,
) -> Option<UpstreamCall> {
    if !needs_no_rewrite(dep, facts, force_usage) {
        return None;
    }
    let body = splice_at(raw.body, raw.spans, &dep.model, None).ok()?;
    Some(UpstreamCall {
        url: endpoint(&dep.base_url, "/chat/completions"),
        headers: headers(dep, credential, &[]),
        body,
    })
}

/// Whether [`build_chat`] would change nothing but the model: the output cap already in the
/// field the vendor takes (or no default to fill in), and `stream_options` already as it must be.
fn needs_no_rewrite(dep: &Deployment, facts: &ChatFacts, force_usage: bool) -> bool {
    let cap = dep.output_cap(facts.max_output_tokens());
    let within = |sent: Option<u64>| sent.is_none_or(|s| dep.within_max_output(s) == s);
    let cap_as_is = match dep.quirks.max_tokens_field {
        MaxTokensField::MaxTokens => facts.max_completion_tokens.is_none() && facts.max_tokens == cap,
        MaxTokensField::MaxCompletionTokens => facts.max_tokens.is_none() && facts.max_completion_tokens == cap,
        MaxTokensField::AsSent => {
            within(facts.max_tokens)
                && within(facts.max_completion_tokens)
                && (facts.max_output_tokens().is_some() || cap.is_none())
        }
    };
    let options_as_is = if !dep.quirks.stream_options || !facts.stream {
        !facts.stream_options
    } else {
        !force_usage || facts.wants_usage
    };
    let content_as_is = !dep.quirks.string_content || !facts.text_parts;
    cap_as_is && options_as_is && content_as_is
}

/// Renames the output cap to the field the vendor accepts; the deployment default fills a missing one.
fn apply_max_tokens(dep: &Deployment, body: &mut ChatRequest) {
    let value = dep.output_cap(body.max_output_tokens());
    match dep.quirks.max_tokens_field {
        MaxTokensField::MaxTokens => (body.max_tokens, body.max_completion_tokens) = (value, None),
        MaxTokensField::MaxCompletionTokens => (body.max_tokens, body.max_completion_tokens) = (None, value),
        MaxTokensField::AsSent if body.max_output_tokens().is_none() => body.max_tokens = value,
        MaxTokensField::AsSent => {
            body.max_tokens = body.max_tokens.map(|t| dep.within_max_output(t));
            body.max_completion_tokens = body.max_completion_tokens.map(|t| dep.within_max_output(t));
        }
    }
}

pub(super) fn build_embeddings(dep: &Deployment, body: &Value, credential: &str) -> Result<UpstreamCall, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid_request(codes::INVALID_TYPE, "The request body must be a JSON object."));
    };
    if obj.get("input").is_none_or(Value::is_null) {
        return Err(ApiError::invalid_request(
            codes::MISSING_REQUIRED_PARAMETER,
            "Missing required parameter: 'input'.",
        )
        .with_param("input"));
    }
    let mut obj = obj.clone();
    obj.insert("model".into(), Value::from(dep.model.clone()));
    Ok(UpstreamCall {
        url: endpoint(&dep.base_url, "/embeddings"),
        headers: headers(dep, credential, &[]),
        body: Value::Object(obj).to_string().into_bytes(),
    })
}

/// What the gateway reads of a chat answer it passes through: whether it has choices, its usage,
/// and an error some compatible vendors send with a 200. Nothing else is built.
#[derive(Deserialize)]
struct AnswerShape {
    #[serde(default)]
    choices: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    usage: Option<OpenaiCounts>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

pub(super) fn translate_chat_response(body: Vec<u8>) -> Result<ChatResult, UpstreamError> {
    let shape: AnswerShape = read_json(&body)?;
    match shape.choices {
        None if shape.error.is_some() => return Err(classify(ProviderKind::Openai, 200, None, &body)),
        None => return Err(UpstreamError::malformed(200, "the upstream response has no choices")),
        Some(c) if c.is_empty() => return Err(UpstreamError::empty_response(200, "the upstream returned no choices")),
        Some(_) => {}
    }
    let usage = shape.usage.and_then(Usage::from_openai_counts);
    Ok(ChatResult { body, usage })
}

pub(super) fn translate_embeddings_response(body: Vec<u8>) -> Result<(Vec<u8>, Option<Usage>), UpstreamError> {
    let v = read_json(&body)?;
    reject_error_body(&v, &body)?;
    if !v.get("data").is_some_and(Value::is_array) {
        return Err(UpstreamError::malformed(200, "the upstream embeddings response has no data"));
    }
    let usage = v.get("usage").and_then(Usage::from_openai);
    Ok((body, usage))
}

/// Some compatible vendors answer 200 with an error body.
fn reject_error_body(v: &Value, body: &[u8]) -> Result<(), UpstreamError> {
    if v.get("error").is_some_and(|e| !e.is_null()) && v.get("choices").is_none() && v.get("data").is_none() {
        return Err(classify(ProviderKind::Openai, 200, None, body));
    }
    Ok(())
}

pub(crate) struct OpenaiStream {
    wants_usage: bool,
    /// Role-only chunks held back until real output, so a failure before it can still be retried.
    held: Vec<u8>,
    released: bool,
    usage: Option<Usage>,
    finish_seen: bool,
    done: bool,
}

impl OpenaiStream {
    pub(super) fn new(wants_usage: bool) -> Self {
        OpenaiStream { wants_usage, held: Vec::new(), released: false, usage: None, finish_seen: false, done: false }
    }

    pub(super) fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<u8>) -> Result<(), UpstreamError> {
        if ev.data.trim() == "[DONE]" {
            self.release(out);
            write_data(out, "[DONE]");
            self.done = true;
            return Ok(());
        }
        // A client parses every data line as a JSON object; a cut or garbled event would break it.
        let Ok(chunk) = crate::support::lone_surrogates::parse::<ChunkView>(&ev.data, "openai stream event") else {
            return Ok(());
        };
        if chunk.error && chunk.choices.is_none() {
            return Err(classify(ProviderKind::Openai, 0, None, ev.data.as_bytes()));
        }
        if let Some(u) = chunk.usage.and_then(Usage::from_openai_counts) {
            self.usage = Some(u);
        }
        let choices = chunk.choices.as_deref().unwrap_or_default();
        self.finish_seen |= choices.iter().any(|c| c.finished);
        // Clients that did not ask for usage may index choices[0] of the usage-only chunk.
        if choices.is_empty() && chunk.usage.is_some() && !self.wants_usage {
            return Ok(());
        }
        // Azure opens with a `choices: []` chunk of prompt filter results: nothing to show either.
        if !self.released && (choices.is_empty() || choices.iter().all(|c| c.preamble)) {
            write_data(&mut self.held, &ev.data);
            return Ok(());
        }
        self.release(out);
        write_data(out, &ev.data);
        Ok(())
    }

    fn release(&mut self, out: &mut Vec<u8>) {
        self.released = true;
        out.append(&mut self.held);
    }

    /// Some compatible vendors end after the finish chunk without `[DONE]`; that stream is complete.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        if !self.done && self.finish_seen {
            self.release(out);
            write_data(out, "[DONE]");
            self.done = true;
        }
        if self.done {
            StreamEnd::Complete
        } else {
            StreamEnd::Truncated
        }
    }

    pub(super) fn done(&self) -> bool {
        self.done
    }

    pub(super) fn usage(&self) -> Option<Usage> {
        self.usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing::deployment;
    use crate::providers::{build_chat, translate_chat_response, ErrorClass, StreamTranslator};
    use serde_json::json;

    fn request(v: Value) -> ChatRequest {
        ChatRequest::parse(v.to_string().as_bytes()).unwrap()
    }

    /// Every combination of output cap, stream options and deployment quirks: the pass-through is
    /// taken exactly when it sends what `build_chat` would (as JSON), and then keeps the client's bytes.
    #[test]
    fn passthrough_is_taken_exactly_when_nothing_but_the_model_changes() {
        let caps = [
            json!({}),
            json!({"max_tokens": 64}),
            json!({"max_completion_tokens": 64}),
            json!({"max_tokens": 5, "max_completion_tokens": 64}),
        ];
        let streams = [
            json!({}),
            json!({"stream": false}),
            json!({"stream": true}),
            json!({"stream": true, "stream_options": {"include_usage": true}}),
            json!({"stream": true, "stream_options": {"include_usage": false, "x": 1}}),
            json!({"stream_options": {"include_usage": true}}),
        ];
        let fields = [MaxTokensField::AsSent, MaxTokensField::MaxTokens, MaxTokensField::MaxCompletionTokens];
        let mut taken = 0;
        for cap in &caps {
            for stream in &streams {
                let mut v = json!({"model": "client-model", "zeta": 1, "messages": [{"role": "user", "content": "hi \u{e9}"}], "alpha": {"b": 2, "a": 1}});
                for part in [cap, stream] {
                    v.as_object_mut().unwrap().extend(part.as_object().unwrap().clone());
                }
                // Spacing and key order a re-encoding would change.
                let raw = serde_json::to_string_pretty(&v).unwrap();
                let req = ChatRequest::parse(raw.as_bytes()).unwrap();
                for field in fields {
                    for (default, max_output) in
                        [(None, None), (Some(128), None), (None, Some(32)), (Some(128), Some(32))]
                    {
                        for (stream_options, force) in [(true, true), (true, false), (false, true)] {
                            let mut dep = deployment("openai");
                            dep.quirks.max_tokens_field = field;
                            dep.quirks.stream_options = stream_options;
                            dep.default_max_tokens = default;
                            dep.capabilities.max_output = max_output;
                            let built = build_chat(&dep, &req, "k", force).unwrap();
                            let built: Value = serde_json::from_slice(&built.body).unwrap();
                            let case = format!("{raw} {field:?} {default:?} {max_output:?} {stream_options} {force}");
                            let sent = |name: &str| built.get(name).and_then(Value::as_u64);
                            if let Some(most) = max_output {
                                assert!(
                                    sent("max_tokens").max(sent("max_completion_tokens")) <= Some(most.into()),
                                    "{case}"
                                );
                            }
                            match passthrough_chat(
                                &dep,
                                &ChatFacts::of(&req),
                                Raw { body: raw.as_bytes(), spans: None },
                                "k",
                                force,
                            ) {
                                Some(call) => {
                                    taken += 1;
                                    assert_eq!(
                                        String::from_utf8_lossy(&call.body),
                                        raw.replace("\"client-model\"", "\"gpt-4o-mini\""),
                                        "{case}"
                                    );
                                    assert_eq!(serde_json::from_slice::<Value>(&call.body).unwrap(), built, "{case}");
                                }
                                None => assert_ne!(
                                    built,
                                    {
                                        let mut b = v.clone();
                                        b["model"] = json!("gpt-4o-mini");
                                        b
                                    },
                                    "{case}"
                                ),
                            }
                        }
                    }
                }
            }
        }
        assert!(taken > 50, "the pass-through is the common case ({taken})");
    }

    #[test]
    fn string_content_joins_text_parts_for_vendors_that_take_only_strings() {
        let raw = r#"{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"Be terse."}]},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            {"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:x"}}]},
            {"role":"assistant","content":"plain"}]}"#;
        let req = ChatRequest::parse(raw.as_bytes()).unwrap();
        let mut dep = deployment("openai");
        assert!(
            passthrough_chat(&dep, &ChatFacts::of(&req), Raw { body: raw.as_bytes(), spans: None }, "k", false)
                .is_some(),
            "off: arrays pass through"
        );
        dep.quirks.string_content = true;
        assert!(passthrough_chat(&dep, &ChatFacts::of(&req), Raw { body: raw.as_bytes(), spans: None }, "k", false)
            .is_none());
        let body: Value = serde_json::from_slice(&build_chat(&dep, &req, "k", false).unwrap().body).unwrap();
        assert_eq!(body["messages"][0]["content"], "Be terse.");
        assert_eq!(body["messages"][1]["content"], "a\n\nb");
        assert!(body["messages"][2]["content"].is_array(), "an image cannot be said as text: left as sent");
        assert_eq!(body["messages"][3]["content"], "plain");
        let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let req = ChatRequest::parse(plain.as_bytes()).unwrap();
        assert!(
            passthrough_chat(&dep, &ChatFacts::of(&req), Raw { body: plain.as_bytes(), spans: None }, "k", false)
                .is_some(),
            "strings already"
        );
    }

    /// Structured outputs follow a schema's property order, so a rewritten body keeps the client's.
    #[test]
    fn a_rewritten_body_keeps_the_order_of_schema_properties() {
        let raw = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],
            "response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object",
                "properties":{"reasoning":{"type":"string"},"answer":{"type":"string"}}}}},
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",
                "properties":{"zeta":{"type":"string"},"alpha":{"type":"string"}}}}}]}"#;
        let req = ChatRequest::parse(raw.as_bytes()).unwrap();
        let dep = deployment("openai");
        assert!(
            passthrough_chat(&dep, &ChatFacts::of(&req), Raw { body: raw.as_bytes(), spans: None }, "k", true)
                .is_none(),
            "usage must be asked for"
        );
        let body = String::from_utf8(build_chat(&dep, &req, "k", true).unwrap().body).unwrap();
        let at = |needle: &str| body.find(needle).unwrap_or_else(|| panic!("{needle} in {body}"));
        assert!(at("\"reasoning\"") < at("\"answer\""), "{body}");
        assert!(at("\"zeta\"") < at("\"alpha\""), "{body}");
        assert!(body.contains("\"include_usage\":true"), "{body}");
    }

    #[test]
    fn golden_request_keeps_unknown_fields_and_applies_quirks() {
        let mut dep = deployment("openai");
        dep.quirks.max_tokens_field = MaxTokensField::MaxCompletionTokens;
        dep.quirks.headers.insert("OpenAI-Organization".into(), "org-gateway".into());
        let req = ChatRequest::parse(fixture!("openai_request.json").as_bytes()).unwrap();
        let call = build_chat(&dep, &req, "sk-vendor", true).unwrap();
        assert_eq!(call.url, "https://api.openai.com/v1/chat/completions");
        assert_eq!(
            call.headers,
            vec![
                ("content-type".to_string(), "application/json".to_string()),
                ("authorization".to_string(), "Bearer sk-vendor".to_string()),
                ("OpenAI-Organization".to_string(), "org-gateway".to_string()),
            ]
        );
        let sent: Value = serde_json::from_slice(&call.body).unwrap();
        let want: Value = serde_json::from_str(fixture!("openai_request.upstream.json")).unwrap();
        assert_eq!(sent, want);
    }

    #[test]
    fn stream_options_only_when_streaming_and_supported() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true});
        let mut dep = deployment("openai");
        let sent = |dep: &Deployment, v: Value, force: bool| -> Value {
            serde_json::from_slice(&build_chat(dep, &request(v), "k", force).unwrap().body).unwrap()
        };
        assert_eq!(sent(&dep, base.clone(), true)["stream_options"], json!({"include_usage": true}));
        assert_eq!(sent(&dep, base.clone(), false).get("stream_options"), None);
        let mut with_opts = base.clone();
        with_opts["stream_options"] = json!({"include_usage": false, "include_obfuscation": false});
        assert_eq!(
            sent(&dep, with_opts.clone(), true)["stream_options"],
            json!({"include_usage": true, "include_obfuscation": false})
        );
        let mut not_streaming = with_opts.clone();
        not_streaming["stream"] = json!(false);
        assert_eq!(sent(&dep, not_streaming, true).get("stream_options"), None);
        dep.quirks.stream_options = false;
        assert_eq!(sent(&dep, with_opts, true).get("stream_options"), None);
    }

    #[test]
    fn max_tokens_field_quirk() {
        let mut dep = deployment("openai");
        let sent = |dep: &Deployment, v: Value| -> Value {
            serde_json::from_slice(&build_chat(dep, &request(v), "k", false).unwrap().body).unwrap()
        };
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let both = json!({"model": "m", "messages": msgs, "max_tokens": 10, "max_completion_tokens": 20});
        let none = json!({"model": "m", "messages": msgs});
        assert_eq!(
            (sent(&dep, both.clone())["max_tokens"].clone(), sent(&dep, both.clone())["max_completion_tokens"].clone()),
            (json!(10), json!(20))
        );
        assert_eq!(sent(&dep, none.clone()).get("max_tokens"), None);
        dep.default_max_tokens = Some(300);
        assert_eq!(sent(&dep, none.clone())["max_tokens"], 300);
        dep.quirks.max_tokens_field = MaxTokensField::MaxTokens;
        let v = sent(&dep, both.clone());
        assert_eq!((v["max_tokens"].clone(), v.get("max_completion_tokens")), (json!(20), None));
        dep.quirks.max_tokens_field = MaxTokensField::MaxCompletionTokens;
        let v = sent(&dep, none);
        assert_eq!((v.get("max_tokens"), v["max_completion_tokens"].clone()), (None, json!(300)));
    }

    #[test]
    fn response_passes_through_byte_for_byte() {
        let dep = deployment("openai");
        let body = fixture!("openai_response.json");
        let r = translate_chat_response(&dep, body.into(), 0).unwrap();
        assert_eq!(r.body, body.as_bytes());
        assert_eq!(
            r.usage,
            Some(Usage { input: 9, output: 12, cached_read: 0, cache_write: 0, reasoning: 0, cache_write_1h: 0 })
        );
    }

    #[test]
    fn cached_and_reasoning_usage_normalized() {
        let dep = deployment("openai");
        let r = translate_chat_response(&dep, fixture!("openai_response_reasoning_cached.json").into(), 0).unwrap();
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 1254,
                output: 1320,
                cached_read: 1152,
                cache_write: 0,
                reasoning: 1024,
                cache_write_1h: 0
            })
        );
        let r = translate_chat_response(&dep, fixture!("deepseek_response.json").into(), 0).unwrap();
        assert_eq!(
            r.usage,
            Some(Usage { input: 13, output: 36, cached_read: 64, cache_write: 0, reasoning: 20, cache_write_1h: 0 })
        );
    }

    #[test]
    fn error_body_with_200_and_missing_choices() {
        let dep = deployment("openai");
        let e =
            translate_chat_response(&dep, br#"{"error":{"message":"overloaded","type":"server_error"}}"#.to_vec(), 0)
                .unwrap_err();
        assert_eq!(e.class, ErrorClass::ServerError);
        let e = translate_chat_response(&dep, br#"{"id":"x","choices":[]}"#.to_vec(), 0).unwrap_err();
        assert_eq!(e.class, ErrorClass::EmptyResponse);
        let e = translate_chat_response(&dep, br#"{"id":"x"}"#.to_vec(), 0).unwrap_err();
        assert_eq!(e.class, ErrorClass::ServerError);
    }

    #[test]
    fn embeddings_usage() {
        let body = br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        let (out, usage) = translate_embeddings_response(body.to_vec()).unwrap();
        assert_eq!(out, body);
        assert_eq!(usage, Some(Usage { input: 8, ..Usage::default() }));
    }

    fn run(wants_usage: bool, transcript: &str) -> (String, Option<Usage>, Option<UpstreamError>, StreamEnd, bool) {
        let mut t = StreamTranslator::new(&deployment("openai"), wants_usage, 0);
        let mut out = Vec::new();
        let err = t.feed(transcript.as_bytes(), &mut out);
        let end = t.finish(&mut out);
        (String::from_utf8(out).unwrap(), t.usage(), err, end, t.emitted_any())
    }

    #[test]
    fn golden_stream_text_passes_through() {
        let (out, usage, err, end, emitted) = run(false, fixture!("openai_stream_text.sse"));
        assert_eq!(out, fixture!("openai_stream_text.sse"));
        assert_eq!((usage, err, end, emitted), (None, None, StreamEnd::Complete, true));
    }

    #[test]
    fn golden_stream_tools_with_usage() {
        let (out, usage, err, end, _) = run(true, fixture!("openai_stream_tools_usage.sse"));
        assert_eq!(out, fixture!("openai_stream_tools_usage.sse"));
        let want = Usage { input: 80, output: 17, cached_read: 0, cache_write: 0, reasoning: 0, cache_write_1h: 0 };
        assert_eq!((usage, err, end), (Some(want), None, StreamEnd::Complete));
    }

    #[test]
    fn ended_once_done_is_translated_whatever_the_split() {
        let transcript = fixture!("openai_stream_tools_usage.sse");
        let done = transcript.find("data: [DONE]").unwrap();
        for wants_usage in [false, true] {
            let mut t = StreamTranslator::new(&deployment("openai"), wants_usage, 0);
            let mut out = Vec::new();
            t.feed(&transcript.as_bytes()[..done + 12], &mut out);
            assert!(!t.ended(), "[DONE] without its blank line");
            t.feed(&transcript.as_bytes()[done + 12..], &mut out);
            assert!(t.ended());
            assert_eq!(t.finish(&mut out), StreamEnd::Complete);
        }
        let mut failed = StreamTranslator::new(&deployment("openai"), true, 0);
        failed.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", &mut Vec::new());
        assert!(!failed.ended());
    }

    #[test]
    fn golden_stream_usage_chunk_dropped_when_not_asked() {
        let (out, usage, _, end, _) = run(false, fixture!("openai_stream_tools_usage.sse"));
        assert_eq!(out, fixture!("openai_stream_tools_usage.no_usage.sse"));
        assert_eq!((usage.map(|u| u.output), end), (Some(17), StreamEnd::Complete));
    }

    #[test]
    fn role_chunk_held_until_output_so_early_failures_stay_retryable() {
        let role = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"finish_reason\":null}]}\n\n";
        let (out, _, err, end, emitted) = run(
            false,
            &format!(
                "{role}data: {{\"error\":{{\"message\":\"The server had an error\",\"type\":\"server_error\"}}}}\n\n"
            ),
        );
        assert_eq!((out.as_str(), end, emitted), ("", StreamEnd::Truncated, false));
        assert_eq!(err.map(|e| (e.class, e.status)), Some((ErrorClass::ServerError, 0)));
        let (out, _, _, end, _) = run(false, &format!("{role}: keepalive\n\ndata: [DONE]\n\n"));
        assert_eq!((out, end), (format!("{role}data: [DONE]\n\n"), StreamEnd::Complete));
    }

    #[test]
    fn azure_prompt_filter_chunk_is_held_too() {
        let filter = "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\n\n";
        let (out, _, _, end, emitted) = run(false, filter);
        assert_eq!((out.as_str(), end, emitted), ("", StreamEnd::Truncated, false));
        let content = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n";
        let (out, _, _, _, _) = run(false, &format!("{filter}{content}data: [DONE]\n\n"));
        assert_eq!(out, format!("{filter}{content}data: [DONE]\n\n"));
    }

    #[test]
    fn stream_without_done_after_finish_reason_is_complete() {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}";
        let (out, _, _, end, _) = run(false, body);
        assert_eq!(end, StreamEnd::Complete);
        assert!(out.ends_with("\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), "{out}");
    }

    #[test]
    fn golden_stream_truncated() {
        let (out, usage, err, end, emitted) = run(true, fixture!("openai_stream_truncated.sse"));
        assert_eq!(out, fixture!("openai_stream_truncated.expected.sse"));
        assert_eq!((usage, err, end, emitted), (None, None, StreamEnd::Truncated, true));
    }
}
