//! Anthropic Messages API: requests translated from the canonical form, responses and streams back.

mod event_view;
pub mod passthrough;
mod request;
mod response;
mod stream;

pub(super) use request::build_chat;
pub(super) use response::translate_chat_response;
pub(crate) use stream::AnthropicStream;

const DEFAULT_VERSION: &str = "2023-06-01";

/// Anthropic's `stop_reason` as an OpenAI `finish_reason`.
fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}
