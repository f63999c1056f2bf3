//! The exact-response cache: keys, the per-route policy, the KV store, and rebuilding a streamed
//! answer so it can be stored. Chat completions and Anthropic `message` answers are kept, each
//! replayed in its own door's format.

pub mod assembly;
pub mod key;
pub mod message;
pub mod policy;
pub mod store;

use serde_json::Value;

/// The format of the answers a door's cache entries hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerFormat {
    /// `chat.completion` (chat completions door).
    ChatCompletion,
    /// Anthropic `message` (Messages door).
    Message,
}

impl AnswerFormat {
    /// Whether a complete answer in this format may be kept.
    pub fn storable(self, body: &Value) -> bool {
        match self {
            AnswerFormat::ChatCompletion => policy::storable(body),
            AnswerFormat::Message => message::storable(body),
        }
    }
}
