//! What routing, limits, usage and a pass-through read of a chat request, however it was read:
//! from a [`ChatRequest`], or by the chat door's walk over the bytes without building one.

use super::{ChatRequest, Content, Role};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatFacts {
    pub model: String,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options` was sent (not null).
    pub stream_options: bool,
    /// `stream_options.include_usage: true`.
    pub wants_usage: bool,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    /// Some message's content is an array of text parts only (a string-content vendor needs it joined).
    pub text_parts: bool,
    /// [`ChatRequest::text_chars`].
    pub text_chars: usize,
    pub messages: usize,
    /// [`ChatRequest::choices`].
    pub choices: u64,
    /// [`ChatRequest::needs_tools`], [`ChatRequest::needs_json`], [`ChatRequest::needs_vision`].
    pub tools: bool,
    pub json_mode: bool,
    pub vision: bool,
    pub user: Option<String>,
    pub metadata: Option<Map<String, Value>>,
}

impl ChatFacts {
    pub fn of(chat: &ChatRequest) -> ChatFacts {
        ChatFacts {
            model: chat.model.clone(),
            stream: chat.is_stream(),
            stream_options: chat.stream_options.is_some(),
            wants_usage: chat.wants_usage(),
            max_tokens: chat.max_tokens,
            max_completion_tokens: chat.max_completion_tokens,
            text_parts: chat.messages.iter().any(|m| m.content.as_ref().is_some_and(Content::is_text_parts)),
            text_chars: chat.text_chars(),
            messages: chat.messages.len(),
            choices: chat.choices(),
            tools: chat.needs_tools(),
            json_mode: chat.needs_json(),
            vision: chat.needs_vision(),
            user: chat.user.clone(),
            metadata: chat.metadata.clone(),
        }
    }

    pub fn max_output_tokens(&self) -> Option<u64> {
        self.max_completion_tokens.or(self.max_tokens)
    }
}

/// A message's role by its name in a request; `None` for a name that is not one.
pub fn role_named(name: &str) -> Option<Role> {
    Some(match name {
        "system" => Role::System,
        "developer" => Role::Developer,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        "function" => Role::Function,
        _ => return None,
    })
}
