//! Anthropic Messages to an Anthropic deployment: native pass-through.
//!
//! The client's body goes upstream byte for byte except the top-level `model` value, which is
//! spliced (never re-serialised, so key order, unknown fields, thinking signatures and
//! `cache_control` survive), and a `max_tokens` above the deployment's `max_output`, spliced
//! down; `anthropic-version` and `anthropic-beta` are forwarded as sent.
//! Answers come back as the vendor sent them: the JSON body unchanged, every SSE event relayed
//! verbatim, while the usage is read from `message_start` / `message_delta` (or the body).

use super::event_view::{EventView, Kind};
use super::DEFAULT_VERSION;
use crate::canonical::usage::{AnthropicStreamUsage, Usage};
use crate::canonical::usage_counts::{AnthropicCounts, UsageOf};
use crate::config::routes::{Deployment, ProviderKind};
use crate::http::error::ApiError;
use crate::http::sse::SseParser;
use crate::providers::splice::{splice_at, Ceiling, Span};
use crate::providers::{classify, endpoint, headers, read_json, StreamEnd, UpstreamCall, UpstreamError};

/// What of the client's request travels upstream as sent: the Anthropic headers and the query
/// string (`beta=true`, which the SDKs' beta namespace adds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHeaders {
    pub version: Option<String>,
    pub beta: Option<String>,
    pub query: Option<String>,
}

/// Which Messages API call: the message itself or its token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessagesCall {
    Create,
    CountTokens,
}

/// The field a Messages deployment's `max_output` holds down.
pub const CEILING_FIELD: &str = "max_tokens";

/// The vendor request: the client's bytes with the deployment's model spliced in, and
/// `max_tokens` held to the deployment's declared `max_output`; `spans` where the door's own
/// parse found them (else the body is scanned).
pub fn build(
    dep: &Deployment,
    body: &[u8],
    spans: Option<&[Span]>,
    credential: &str,
    client: &ClientHeaders,
    call: MessagesCall,
) -> Result<UpstreamCall, ApiError> {
    let ceiling = Ceiling::max_output(dep, CEILING_FIELD);
    let body = splice_at(body, spans, &dep.model, ceiling)?;
    let version =
        client.version.as_deref().or(dep.quirks.anthropic_version.as_deref()).unwrap_or(DEFAULT_VERSION).to_string();
    let mut own = vec![("anthropic-version", version.as_str())];
    if let Some(beta) = client.beta.as_deref() {
        own.push(("anthropic-beta", beta));
    }
    let path = match call {
        MessagesCall::Create => "/messages",
        MessagesCall::CountTokens => "/messages/count_tokens",
    };
    let mut url = endpoint(&dep.base_url, path);
    if let Some(query) = client.query.as_deref().filter(|q| !q.is_empty()) {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(query);
    }
    Ok(UpstreamCall { url, headers: headers(dep, credential, &own), body })
}

/// A JSON answer: the body as the vendor sent it, and its usage (none for count_tokens).
pub fn read_answer(body: Vec<u8>) -> Result<(Vec<u8>, Option<Usage>), UpstreamError> {
    let UsageOf(counts) = read_json::<UsageOf<AnthropicCounts>>(&body)?;
    let usage = Usage::from_anthropic_counts(counts);
    Ok((body, usage))
}

/// Relays an Anthropic SSE stream byte for byte and reads its usage on the way.
///
/// Bytes are held until the first content event (anything but `message_start` and `ping`), so a
/// vendor error before it can still fall back; from then on every chunk is passed on unchanged.
/// A vendor `error` event is relayed as sent and reported; the gateway adds no second one.
#[derive(Default)]
pub struct PassthroughStream {
    parser: SseParser,
    held: Vec<u8>,
    started: bool,
    usage: AnthropicStreamUsage,
    done: bool,
    vendor_error_relayed: bool,
    /// The last byte relayed, so an appended error frame starts on a fresh line.
    ends_mid_line: bool,
}

impl PassthroughStream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Relays `chunk` into `out` (or holds it before the first content event); `Some` when the
    /// vendor reported an error.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Option<UpstreamError> {
        if self.done || self.vendor_error_relayed {
            return None;
        }
        self.parser.feed(chunk);
        if self.started {
            self.relay(chunk, out);
        } else {
            self.held.extend_from_slice(chunk);
        }
        while let Some(ev) = self.parser.next_event() {
            let Ok(data) = crate::support::lone_surrogates::parse::<EventView>(&ev.data, "anthropic stream event")
            else {
                continue;
            };
            let kind = data.kind.or_else(|| ev.event.as_deref().map(Kind::of)).unwrap_or(Kind::Other);
            match kind {
                Kind::MessageStart => self.usage.start(data.message_usage),
                Kind::MessageDelta => self.usage.delta(data.usage),
                Kind::ContentBlockDelta => self.usage.delivered_chars(data.delivered_chars()),
                Kind::MessageStop => self.done = true,
                Kind::Error => {
                    let err = classify(ProviderKind::Anthropic, 0, None, ev.data.as_bytes());
                    if self.started {
                        self.vendor_error_relayed = true;
                    }
                    return Some(err);
                }
                _ => {}
            }
            if !self.started && !matches!(kind, Kind::MessageStart | Kind::Ping) {
                self.started = true;
                let held = std::mem::take(&mut self.held);
                self.relay(&held, out);
            }
        }
        None
    }

    fn relay(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        if let Some(last) = bytes.last() {
            self.ends_mid_line = !matches!(last, b'\n' | b'\r');
        }
        out.extend_from_slice(bytes);
    }

    /// Whether `message_stop` was relayed (after it, nothing more is).
    pub fn ended(&self) -> bool {
        self.done && self.started && !self.vendor_error_relayed
    }

    pub fn finish(&mut self, out: &mut Vec<u8>) -> StreamEnd {
        if !self.done && !self.vendor_error_relayed {
            // A last event without its blank line still counts.
            while let Some(ev) = self.parser.finish() {
                if ev.data.contains("\"message_stop\"") {
                    self.done = true;
                }
            }
        }
        if !self.started && self.done {
            let held = std::mem::take(&mut self.held);
            self.started = true;
            self.relay(&held, out);
        }
        if self.done && !self.vendor_error_relayed {
            StreamEnd::Complete
        } else {
            StreamEnd::Truncated
        }
    }

    pub fn usage(&self) -> Option<Usage> {
        self.usage.usage()
    }

    /// Whether the output in [`usage`](Self::usage) is estimated from what was delivered.
    pub fn usage_estimated(&self) -> bool {
        self.usage.estimated()
    }

    pub fn emitted_any(&self) -> bool {
        self.started
    }

    /// The gateway's error frame, unless the vendor's own error event already reached the client.
    pub fn error_event(&self, err: &ApiError) -> Vec<u8> {
        if self.vendor_error_relayed {
            return Vec::new();
        }
        let mut out = if self.ends_mid_line { b"\n\n".to_vec() } else { Vec::new() };
        out.extend_from_slice(&crate::http::anthropic_error::stream_error_event(err));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing::deployment;
    use crate::providers::ErrorClass;

    #[test]
    fn build_forwards_version_and_betas() {
        let dep = deployment("anthropic");
        let client = ClientHeaders {
            version: Some("2023-06-01".into()),
            beta: Some("claude-code-20250219,interleaved-thinking-2025-05-14".into()),
            query: Some("beta=true".into()),
        };
        let call =
            build(&dep, br#"{"model":"sonnet","max_tokens":5}"#, None, "k", &client, MessagesCall::Create).unwrap();
        assert_eq!(call.url, "https://api.anthropic.com/v1/messages?beta=true");
        assert_eq!(String::from_utf8_lossy(&call.body), r#"{"model":"claude-sonnet-4-5","max_tokens":5}"#);
        assert!(call.headers.contains(&("x-api-key".into(), "k".into())));
        assert!(call.headers.contains(&("anthropic-version".into(), "2023-06-01".into())));
        assert!(call
            .headers
            .contains(&("anthropic-beta".into(), "claude-code-20250219,interleaved-thinking-2025-05-14".into())));
        let count =
            build(&dep, br#"{"model":"s"}"#, None, "k", &ClientHeaders::default(), MessagesCall::CountTokens).unwrap();
        assert_eq!(count.url, "https://api.anthropic.com/v1/messages/count_tokens");
        assert!(count.headers.contains(&("anthropic-version".into(), DEFAULT_VERSION.into())));
        assert!(!count.headers.iter().any(|(k, _)| k == "anthropic-beta"));
    }

    #[test]
    fn json_answer_is_kept_and_usage_read() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"","signature":"c2ln"},{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"cache_creation_input_tokens":7,"cache_read_input_tokens":11,"cache_creation":{"ephemeral_5m_input_tokens":3,"ephemeral_1h_input_tokens":4},"output_tokens":20}}"#;
        let (text, usage) = read_answer(body.to_vec()).unwrap();
        assert_eq!(text, body);
        let u = usage.unwrap();
        assert_eq!((u.input, u.output, u.cached_read, u.cache_write), (5, 20, 11, 7));
        assert_eq!(read_answer(br#"{"input_tokens":42}"#.to_vec()).unwrap().1, None);
        assert_eq!(read_answer(Vec::new()).unwrap_err().class, ErrorClass::EmptyResponse);
        // A body that is not UTF-8 is a malformed answer (the next deployment may serve it).
        let at = body.windows(4).position(|w| w == b"\"hi\"").unwrap() + 2;
        let mut broken = body.to_vec();
        broken.insert(at, 0xff);
        assert_eq!(read_answer(broken).unwrap_err().class, ErrorClass::ServerError);
    }

    const STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":2000,\"output_tokens\":1}}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn stream_relayed_byte_for_byte_at_any_split() {
        for size in [1, 2, 7, 64, 4096] {
            let mut s = PassthroughStream::new();
            let mut out = Vec::new();
            for chunk in STREAM.as_bytes().chunks(size) {
                assert_eq!(s.feed(chunk, &mut out), None);
            }
            assert_eq!(s.finish(&mut out), StreamEnd::Complete);
            assert_eq!(String::from_utf8(out).unwrap(), STREAM, "split {size}");
            let u = s.usage().unwrap();
            assert_eq!((u.input, u.output, u.cached_read, u.cache_write), (25, 15, 2000, 100));
        }
    }

    #[test]
    fn ended_once_message_stop_is_relayed_and_not_after_a_vendor_error() {
        let mut s = PassthroughStream::new();
        let mut out = Vec::new();
        let stop = STREAM.find("event: message_stop").unwrap();
        s.feed(&STREAM.as_bytes()[..stop], &mut out);
        assert!(!s.ended());
        // The event's blank line not yet in: not over.
        s.feed(&STREAM.as_bytes()[stop..STREAM.len() - 1], &mut out);
        assert!(!s.ended());
        s.feed(b"\n", &mut out);
        assert!(s.ended());
        assert_eq!(String::from_utf8(out).unwrap(), STREAM);
        let mut failed = PassthroughStream::new();
        let head = STREAM.split("event: content_block_stop").next().unwrap();
        failed.feed(head.as_bytes(), &mut Vec::new());
        failed
            .feed(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"}}\n\n", &mut Vec::new());
        failed.feed(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", &mut Vec::new());
        assert!(!failed.ended());
    }

    #[test]
    fn nothing_emitted_before_content_so_early_errors_fall_back() {
        let mut s = PassthroughStream::new();
        let mut out = Vec::new();
        let start = STREAM.split("event: content_block_start").next().unwrap();
        assert_eq!(s.feed(start.as_bytes(), &mut out), None);
        assert!(!s.emitted_any() && out.is_empty());
        let err = s.feed(
            b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            &mut out,
        );
        assert_eq!(err.map(|e| e.class), Some(ErrorClass::Overloaded));
        assert!(out.is_empty() && !s.emitted_any());
    }

    #[test]
    fn vendor_error_after_content_is_relayed_once() {
        let mut s = PassthroughStream::new();
        let mut out = Vec::new();
        let head = STREAM.split("event: content_block_stop").next().unwrap();
        s.feed(head.as_bytes(), &mut out);
        assert!(s.emitted_any());
        let frame =
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n";
        assert!(s.feed(frame.as_bytes(), &mut out).is_some());
        assert_eq!(String::from_utf8(out.clone()).unwrap(), format!("{head}{frame}"));
        assert!(s.error_event(&ApiError::internal("x")).is_empty());
        assert_eq!(s.finish(&mut out), StreamEnd::Truncated);
        assert_eq!(s.usage().map(|u| u.input), Some(25));
    }

    #[test]
    fn a_stream_cut_after_text_bills_the_text_not_the_placeholder() {
        let mut s = PassthroughStream::new();
        let cut = STREAM.find("event: message_delta").unwrap();
        s.feed(&STREAM.as_bytes()[..cut], &mut Vec::new());
        assert_eq!(s.finish(&mut Vec::new()), StreamEnd::Truncated);
        assert_eq!((s.usage().map(|u| (u.input, u.output)), s.usage_estimated()), (Some((25, 2)), true), "Hello: 2");
        let mut whole = PassthroughStream::new();
        whole.feed(STREAM.as_bytes(), &mut Vec::new());
        assert_eq!((whole.usage().map(|u| u.output), whole.usage_estimated()), (Some(15), false));
    }

    #[test]
    fn cut_stream_is_truncated_and_gets_an_error_frame_on_a_new_line() {
        let mut s = PassthroughStream::new();
        let mut out = Vec::new();
        let cut = &STREAM[..STREAM.find("Hello").unwrap()];
        s.feed(cut.as_bytes(), &mut out);
        assert_eq!(s.finish(&mut out), StreamEnd::Truncated);
        let frame = String::from_utf8(s.error_event(&ApiError::internal("cut"))).unwrap();
        assert!(
            frame.starts_with("\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\""),
            "{frame}"
        );
    }
}
