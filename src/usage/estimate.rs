//! Token estimate for the limiter's reservation only; billing always uses the vendor's usage.

/// Characters per token for mixed English text and JSON (a deliberately generous ratio).
const CHARS_PER_TOKEN: usize = 4;
/// Per-message framing tokens (role markers) that vendors count on top of the text.
const TOKENS_PER_MESSAGE: u64 = 4;
/// Output reserved when neither the client nor the deployment names a maximum.
pub const DEFAULT_OUTPUT_TOKENS: u64 = 1024;

use crate::canonical::{ChatFacts, ChatRequest};
use serde::{Deserialize, Serialize};

/// What the limiter's token estimate was computed from, kept to re-derive it for billing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestShape {
    pub text_chars: usize,
    pub messages: usize,
    /// The client's output maximum for one answer.
    pub max_output: Option<u64>,
    /// Answers asked for (`n`): each may use `max_output`.
    #[serde(default = "one")]
    pub choices: u64,
}

fn one() -> u64 {
    1
}

impl RequestShape {
    /// A chat request's shape, from the facts the door read.
    pub fn of_facts(f: &ChatFacts) -> RequestShape {
        RequestShape {
            text_chars: f.text_chars,
            messages: f.messages,
            max_output: f.max_output_tokens(),
            choices: f.choices,
        }
    }

    /// A chat request's shape.
    pub fn of(chat: &ChatRequest) -> RequestShape {
        RequestShape {
            text_chars: chat.text_chars(),
            messages: chat.messages.len(),
            max_output: chat.max_output_tokens(),
            choices: chat.choices(),
        }
    }

    /// The request's estimate on a deployment with `deployment_default` output tokens: every
    /// choice's output counts.
    pub fn estimate(&self, deployment_default: Option<u32>) -> TokenEstimate {
        let one = estimate(self.text_chars, self.messages, self.max_output, deployment_default);
        TokenEstimate { output: one.output.saturating_mul(self.choices.max(1)), ..one }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEstimate {
    pub input: u64,
    pub output: u64,
}

/// `text_chars`: all text in messages, tools and schemas; `max_output`: the client's max tokens.
pub fn estimate(
    text_chars: usize,
    messages: usize,
    max_output: Option<u64>,
    deployment_default: Option<u32>,
) -> TokenEstimate {
    let input = text_chars.div_ceil(CHARS_PER_TOKEN) as u64 + messages as u64 * TOKENS_PER_MESSAGE;
    let output = max_output.or(deployment_default.map(u64::from)).unwrap_or(DEFAULT_OUTPUT_TOKENS);
    TokenEstimate { input: input.max(1), output }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_rounds_up_and_counts_message_framing() {
        assert_eq!(estimate(0, 0, None, None).input, 1);
        assert_eq!(estimate(5, 1, None, None).input, 2 + 4);
        assert_eq!(estimate(400, 2, None, None).input, 100 + 8);
    }

    #[test]
    fn every_choice_counts_its_output_once() {
        let shape = RequestShape { text_chars: 40, messages: 1, max_output: Some(100), choices: 1 };
        assert_eq!(shape.estimate(None), TokenEstimate { input: 14, output: 100 });
        assert_eq!(RequestShape { choices: 5, ..shape }.estimate(None), TokenEstimate { input: 14, output: 500 });
        let open = RequestShape { max_output: None, choices: 1000, ..shape };
        assert_eq!(open.estimate(Some(256)).output, 256_000);
        assert_eq!(open.estimate(None).output, 1000 * DEFAULT_OUTPUT_TOKENS);
        assert_eq!(RequestShape { choices: 0, ..shape }.estimate(None).output, 100, "0 reads as 1");
        let huge = RequestShape { max_output: Some(u64::MAX), choices: u64::MAX, ..shape };
        assert_eq!(huge.estimate(None).output, u64::MAX, "saturates, never wraps");
    }

    #[test]
    fn output_prefers_client_then_deployment_then_default() {
        assert_eq!(estimate(4, 1, Some(50), Some(900)).output, 50);
        assert_eq!(estimate(4, 1, None, Some(900)).output, 900);
        assert_eq!(estimate(4, 1, None, None).output, DEFAULT_OUTPUT_TOKENS);
    }
}
