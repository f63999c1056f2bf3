//! Property: a stream transcript fed in any split (every two-way cut, seeded random multi-way cuts,
//! cuts inside UTF-8 characters and between `\r` and `\n`) translates exactly as when fed whole.

use super::testing::deployment;
use super::{StreamEnd, StreamTranslator, UpstreamError};
use crate::canonical::usage::Usage;

#[derive(Debug, PartialEq)]
struct Outcome {
    out: Vec<u8>,
    usage: Option<Usage>,
    error: Option<UpstreamError>,
    end: StreamEnd,
    emitted: bool,
}

fn run(provider: &str, wants_usage: bool, pieces: &[&[u8]]) -> Outcome {
    let mut t = StreamTranslator::new(&deployment(provider), wants_usage, 1_700_000_000);
    let mut out = Vec::new();
    let mut error = None;
    for piece in pieces {
        if let Some(e) = t.feed(piece, &mut out) {
            assert!(error.is_none(), "an error is returned once");
            error = Some(e);
        }
    }
    let end = t.finish(&mut out);
    Outcome { out, usage: t.usage(), error, end, emitted: t.emitted_any() }
}

/// (provider, transcript, client wants usage)
const TRANSCRIPTS: [(&str, &str, bool); 8] = [
    ("openai", fixture!("openai_stream_text.sse"), false),
    ("openai", fixture!("openai_stream_tools_usage.sse"), true),
    ("openai", fixture!("openai_stream_tools_usage.sse"), false),
    ("openai", fixture!("openai_stream_truncated.sse"), true),
    ("anthropic", fixture!("anthropic_stream_text.sse"), false),
    ("anthropic", fixture!("anthropic_stream_tool_use.sse"), true),
    ("anthropic", fixture!("anthropic_stream_error.sse"), true),
    ("anthropic", fixture!("anthropic_stream_truncated.sse"), true),
];

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn line_ending_variants(transcript: &str) -> [String; 3] {
    [transcript.to_string(), transcript.replace('\n', "\r\n"), transcript.replace('\n', "\r")]
}

#[test]
fn fixtures_exercise_multibyte_characters() {
    for (_, transcript, _) in TRANSCRIPTS {
        assert!(!transcript.is_ascii(), "every transcript carries non-ASCII text");
    }
}

#[test]
fn every_two_way_split_matches_whole() {
    for (provider, transcript, wants_usage) in TRANSCRIPTS {
        let bytes = transcript.as_bytes();
        let whole = run(provider, wants_usage, &[bytes]);
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(run(provider, wants_usage, &[a, b]), whole, "{provider} transcript cut at byte {cut}");
        }
    }
}

#[test]
fn line_endings_do_not_matter() {
    for (provider, transcript, wants_usage) in TRANSCRIPTS {
        let [lf, crlf, cr] = line_ending_variants(transcript);
        let whole = run(provider, wants_usage, &[lf.as_bytes()]);
        assert_eq!(run(provider, wants_usage, &[crlf.as_bytes()]), whole, "{provider} CRLF");
        assert_eq!(run(provider, wants_usage, &[cr.as_bytes()]), whole, "{provider} CR");
    }
}

#[test]
fn random_multi_way_splits_match_whole() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for (provider, transcript, wants_usage) in TRANSCRIPTS {
        let whole = run(provider, wants_usage, &[transcript.as_bytes()]);
        for variant in line_ending_variants(transcript) {
            let bytes = variant.as_bytes();
            for round in 0..150 {
                let max_piece = 1 + rng.below(if round % 3 == 0 { 4 } else { 64 });
                let mut pieces = Vec::new();
                let mut at = 0;
                while at < bytes.len() {
                    let len = rng.below(max_piece + 1).min(bytes.len() - at);
                    pieces.push(&bytes[at..at + len]);
                    at += len;
                }
                assert_eq!(run(provider, wants_usage, &pieces), whole, "{provider} round {round}");
            }
        }
    }
}

#[test]
fn byte_at_a_time_matches_whole() {
    for (provider, transcript, wants_usage) in TRANSCRIPTS {
        let whole = run(provider, wants_usage, &[transcript.as_bytes()]);
        let pieces: Vec<&[u8]> = transcript.as_bytes().chunks(1).collect();
        assert_eq!(run(provider, wants_usage, &pieces), whole, "{provider}");
    }
}

#[test]
fn an_endless_line_fails_the_stream_instead_of_growing() {
    let block = vec![b'x'; 1024 * 1024];
    let mut pieces: Vec<&[u8]> = vec![b"data: "];
    pieces.extend(std::iter::repeat_n(block.as_slice(), crate::http::sse::MAX_LINE_BYTES / block.len() + 1));
    for provider in ["openai", "anthropic"] {
        let outcome = run(provider, false, &pieces);
        let error = outcome.error.expect("the overflow is reported");
        assert!(error.message.contains("SSE line over"), "{provider}: {}", error.message);
        assert_eq!(outcome.end, StreamEnd::Truncated, "{provider}");
        assert!(outcome.out.is_empty(), "{provider}: nothing relayed");
    }
}

/// A lone surrogate escape in a delta (legal JSON) is kept as U+FFFD, never the delta dropped.
#[test]
fn a_lone_surrogate_delta_is_relayed_as_a_replacement_character() {
    let openai = concat!(
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",",
        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\\ud800!\"}}]}\n\n",
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",",
        "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let anthropic = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",",
        "\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,",
        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,",
        "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\\ud800!\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},",
        "\"usage\":{\"output_tokens\":2}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    );
    // OpenAI chunks are relayed as sent (the escape intact); Anthropic deltas are rewritten.
    for (provider, transcript, want) in [("openai", openai, "Hi\\ud800!"), ("anthropic", anthropic, "Hi\u{fffd}!")] {
        let got = run(provider, false, &[transcript.as_bytes()]);
        let text = String::from_utf8(got.out).unwrap();
        assert!(text.contains(want), "{provider}: {text}");
        assert_eq!((got.error, got.end), (None, StreamEnd::Complete), "{provider}");
    }
}
