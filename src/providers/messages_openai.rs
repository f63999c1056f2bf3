//! The Anthropic Messages door to an OpenAI-format deployment: the Messages request translated to
//! a chat-completions request, and the answer (JSON or stream) translated back to Messages.
//!
//! Rules for what has no equivalent (docs/architecture.md, "The Messages door"):
//! - `thinking` / `redacted_thinking` blocks in the history are dropped (their signatures mean
//!   nothing to another vendor), and so is the `thinking` request field; an OpenAI-format vendor's
//!   own reasoning is not returned as thinking blocks.
//! - `cache_control`, `context_management`, `metadata`, `top_k` and unknown fields are dropped.
//! - Server-side tools (a `type` other than `custom`, e.g. `web_search_20250305`) run at Anthropic
//!   only: they are dropped from `tools`.
//! - Images become `image_url` parts (base64 as a data URL); PDF and other non-text documents are
//!   refused with a 400 naming them; text documents become text.
//! - A tool result's images are dropped (OpenAI tool messages carry text only), noted in the text.

mod request;
mod response;
mod stream;

pub use request::build;
pub use response::translate_response;
pub use stream::OpenaiStreamToMessages;

/// OpenAI's `finish_reason` as Anthropic's `stop_reason`.
fn stop_reason(finish_reason: Option<&str>, has_tool_calls: bool) -> &'static str {
    match finish_reason {
        Some("length") => "max_tokens",
        Some("content_filter") => "refusal",
        Some("tool_calls" | "function_call") => "tool_use",
        _ if has_tool_calls => "tool_use",
        _ => "end_turn",
    }
}

/// Anthropic's usage object for a translated answer.
fn usage_json(u: &crate::canonical::usage::Usage) -> serde_json::Value {
    serde_json::json!({
        "input_tokens": u.input,
        "cache_creation_input_tokens": u.cache_write,
        "cache_read_input_tokens": u.cached_read,
        "output_tokens": u.output,
    })
}
