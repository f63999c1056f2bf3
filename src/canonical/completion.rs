//! OpenAI `chat.completion` and `chat.completion.chunk` as the gateway writes them, declared once:
//! the Anthropic translators and the cache's replay of a stored answer produce these.

use crate::canonical::usage::OpenaiUsage;
use crate::canonical::FunctionCall;
use serde::Serialize;

/// One streamed chunk; `U` is the usage shape the writer holds (typed or raw JSON).
#[derive(Serialize)]
pub struct Chunk<'a, U: Serialize> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<&'a str>,
    pub choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<U>,
}

pub const CHUNK_OBJECT: &str = "chat.completion.chunk";

#[derive(Serialize)]
pub struct ChunkChoice<'a> {
    pub index: u32,
    pub delta: Delta<'a>,
    pub logprobs: Option<()>,
    pub finish_reason: Option<&'a str>,
}

impl<'a> ChunkChoice<'a> {
    /// A choice that carries only `delta`.
    pub fn delta(index: u32, delta: Delta<'a>) -> Self {
        ChunkChoice { index, delta, logprobs: None, finish_reason: None }
    }
}

#[derive(Serialize, Default)]
pub struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<[ToolDelta<'a>; 1]>,
}

#[derive(Serialize)]
pub struct ToolDelta<'a> {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<ToolFunction<'a>>,
}

/// A tool call's function in a chunk: a piece of it as it streams, or a whole stored call.
#[derive(Serialize)]
#[serde(untagged)]
pub enum ToolFunction<'a> {
    Piece(FunctionDelta<'a>),
    Whole(&'a FunctionCall),
}

#[derive(Serialize)]
pub struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    pub arguments: &'a str,
}

/// A whole answer the gateway writes itself (one choice).
#[derive(Serialize)]
pub struct Completion<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [CompletionChoice; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<OpenaiUsage>,
}

#[derive(Serialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<()>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
    pub refusal: Option<()>,
}

#[derive(Serialize)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut,
}

#[derive(Serialize)]
pub struct FunctionOut {
    pub name: String,
    pub arguments: String,
}
