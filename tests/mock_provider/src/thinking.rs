//! Extended thinking: the mock's reasoning text, the signature that binds it, and the check
//! that a replayed assistant `thinking` block carries a signature the mock issued for exactly
//! that text. So a test can prove a proxy forwarded thinking blocks unchanged.
//!
//! A signature is standard base64 of `MAGIC ‖ digest(full reasoning) ‖ digest(SECRET ‖ that
//! digest ‖ shown text)`, 48 bytes. `shown` is the text the response carried: the reasoning,
//! or "" with `display: "omitted"`; verification needs only the replayed block.

use crate::base64;
use serde_json::Value;

const MAGIC: &[u8; 16] = b"mock-thinking-v1";
const SECRET: &[u8] = b"mock-provider thinking signature key";
/// Anthropic's documented floor for `thinking.budget_tokens`.
pub const MIN_BUDGET: u64 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    Summarized,
    Omitted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thinking {
    /// `thinking_delta` pieces (empty when omitted); they concatenate to the block's `thinking`.
    pub pieces: Vec<String>,
    pub signature: String,
    /// Output tokens billed for the reasoning, whether shown or omitted.
    pub tokens: u64,
}

impl Thinking {
    pub fn shown(&self) -> String {
        self.pieces.concat()
    }
}

/// The display mode when the request turns thinking on (`enabled` or `adaptive`).
pub fn requested(body: &Value) -> Option<Display> {
    let t = body.get("thinking")?;
    match t.get("type").and_then(Value::as_str) {
        Some("enabled" | "adaptive") => match t.get("display").and_then(Value::as_str) {
            Some("omitted") => Some(Display::Omitted),
            _ => Some(Display::Summarized),
        },
        _ => None,
    }
}

/// Anthropic's 400 message for a bad `thinking` parameter, if any.
pub fn request_error(body: &Value) -> Option<String> {
    let t = body.get("thinking")?;
    let kind = t.get("type").and_then(Value::as_str);
    if let Some(display) = t.get("display").filter(|_| kind != Some("disabled")) {
        if !matches!(display.as_str(), Some("summarized" | "omitted")) {
            return Some(format!(
                "thinking.{}.display: Input should be 'summarized' or 'omitted'",
                kind.unwrap_or("enabled")
            ));
        }
    }
    match kind {
        Some("enabled") => {}
        Some("disabled" | "adaptive") => return None,
        _ => return Some("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'".to_string()),
    }
    let Some(budget) = t.get("budget_tokens").and_then(Value::as_u64) else {
        return Some("thinking.enabled.budget_tokens: Field required".to_string());
    };
    if budget < MIN_BUDGET {
        return Some(format!("thinking.enabled.budget_tokens: Input should be greater than or equal to {MIN_BUDGET}"));
    }
    let max_tokens = body.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
    if max_tokens <= budget {
        return Some("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size".to_string());
    }
    None
}

/// "Reasoning about reply number N for <model> before answering." (9 words = 9 tokens).
pub fn compose(model: &str, number: u64, display: Display) -> Thinking {
    let text = format!("Reasoning about reply number {number} for {model} before answering.");
    let words: Vec<&str> = text.split(' ').collect();
    let pieces: Vec<String> = match display {
        Display::Omitted => Vec::new(),
        Display::Summarized => {
            words.iter().enumerate().map(|(i, w)| if i == 0 { w.to_string() } else { format!(" {w}") }).collect()
        }
    };
    let signature = sign(&text, &pieces.concat());
    Thinking { pieces, signature, tokens: words.len() as u64 }
}

pub fn sign(reasoning: &str, shown: &str) -> String {
    let full = digest(&[reasoning.as_bytes()]);
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&full);
    bytes.extend_from_slice(&tag(&full, shown));
    base64::encode(&bytes)
}

/// True when the mock issued `signature` for a block whose `thinking` text is `shown`.
pub fn verify(signature: &str, shown: &str) -> bool {
    let Some(bytes) = base64::decode(signature) else { return false };
    if bytes.len() != 48 || &bytes[..16] != MAGIC {
        return false;
    }
    let full: [u8; 16] = bytes[16..32].try_into().unwrap_or_default();
    bytes[32..] == tag(&full, shown)
}

/// Anthropic's 400 message for the first replayed thinking block it would reject.
pub fn replay_error(body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    for (i, m) in messages.iter().enumerate() {
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let Some(blocks) = m.get("content").and_then(Value::as_array) else { continue };
        for (j, block) in blocks.iter().enumerate() {
            if block.get("type").and_then(Value::as_str) != Some("thinking") {
                continue;
            }
            let Some(shown) = block.get("thinking").and_then(Value::as_str) else {
                return Some(format!("messages.{i}.content.{j}.thinking.thinking: Field required"));
            };
            let Some(signature) = block.get("signature").and_then(Value::as_str) else {
                return Some(format!("messages.{i}.content.{j}.thinking.signature: Field required"));
            };
            if !verify(signature, shown) {
                return Some(format!("messages.{i}.content.{j}: Invalid `signature` in `thinking` block"));
            }
        }
    }
    None
}

/// With thinking on, the assistant turn that a trailing `tool_result` answers must start with a
/// thinking block, as Anthropic requires; a proxy that drops thinking blocks fails here.
pub fn missing_block_error(body: &Value) -> Option<String> {
    requested(body)?;
    let messages = body.get("messages")?.as_array()?;
    let [.., assistant, last] = messages.as_slice() else { return None };
    let is_result = |b: &Value| b.get("type").and_then(Value::as_str) == Some("tool_result");
    let answers_tool = last.get("role").and_then(Value::as_str) == Some("user")
        && last.get("content").and_then(Value::as_array).is_some_and(|c| c.iter().any(is_result))
        && assistant.get("role").and_then(Value::as_str) == Some("assistant");
    if !answers_tool {
        return None;
    }
    let found = match assistant.get("content") {
        Some(Value::Array(blocks)) => {
            blocks.first().and_then(|b| b.get("type")).and_then(Value::as_str).unwrap_or("nothing")
        }
        _ => "text",
    };
    if matches!(found, "thinking" | "redacted_thinking") {
        return None;
    }
    let i = messages.len() - 2;
    Some(format!("messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"))
}

fn tag(full: &[u8; 16], shown: &str) -> [u8; 16] {
    digest(&[SECRET, full, shown.as_bytes()])
}

/// Two FNV-1a 64-bit hashes with different offsets; parts are length-prefixed.
fn digest(parts: &[&[u8]]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (half, offset) in [0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142].into_iter().enumerate() {
        let mut h = offset;
        for part in parts {
            for b in (part.len() as u64).to_le_bytes().iter().chain(part.iter()) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        out[half * 8..half * 8 + 8].copy_from_slice(&h.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn display_modes_and_signatures() {
        let body = json!({"thinking": {"type": "enabled", "budget_tokens": 2000}});
        assert_eq!(requested(&body), Some(Display::Summarized));
        let body = json!({"thinking": {"type": "enabled", "budget_tokens": 2000, "display": "omitted"}});
        assert_eq!(requested(&body), Some(Display::Omitted));
        assert_eq!(requested(&json!({"thinking": {"type": "disabled"}})), None);
        assert_eq!(requested(&json!({})), None);

        let shown = compose("claude-x", 3, Display::Summarized);
        assert_eq!(shown.shown(), "Reasoning about reply number 3 for claude-x before answering.");
        assert_eq!(shown.tokens, 9);
        assert!(verify(&shown.signature, &shown.shown()));
        assert_eq!(shown, compose("claude-x", 3, Display::Summarized), "deterministic");
        assert!(!verify(&shown.signature, "Reasoning about reply number 4 for claude-x before answering."));
        assert!(!verify(&shown.signature, ""));

        let omitted = compose("claude-x", 3, Display::Omitted);
        assert_eq!((omitted.shown(), omitted.tokens), (String::new(), 9));
        assert!(verify(&omitted.signature, ""));
        assert!(!verify(&omitted.signature, &shown.shown()));
        assert_ne!(omitted.signature, compose("claude-x", 4, Display::Omitted).signature);
    }

    #[test]
    fn tampered_signatures_fail() {
        let t = compose("m", 1, Display::Summarized);
        let mut bytes = base64::decode(&t.signature).unwrap();
        bytes[40] ^= 1;
        assert!(!verify(&base64::encode(&bytes), &t.shown()));
        assert!(!verify("", ""));
        assert!(!verify("not base64!", ""));
        assert!(!verify(&base64::encode(b"short"), ""));
    }

    #[test]
    fn replayed_blocks_are_checked() {
        let t = compose("m", 1, Display::Summarized);
        let good = json!({"type": "thinking", "thinking": t.shown(), "signature": t.signature});
        let body = |block: Value| {
            json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [block, {"type": "text", "text": "x"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}
            ]})
        };
        assert_eq!(replay_error(&body(good.clone())), None);
        let mut edited = good.clone();
        edited["thinking"] = json!("Reasoning, edited.");
        assert_eq!(
            replay_error(&body(edited)).as_deref(),
            Some("messages.1.content.0: Invalid `signature` in `thinking` block")
        );
        let unsigned = json!({"type": "thinking", "thinking": "x"});
        assert_eq!(
            replay_error(&body(unsigned)).as_deref(),
            Some("messages.1.content.0.thinking.signature: Field required")
        );
    }

    #[test]
    fn tool_turn_must_keep_its_thinking_block() {
        let t = compose("m", 1, Display::Omitted);
        let tool_use = json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}});
        let body = |assistant: Value| {
            json!({"thinking": {"type": "enabled", "budget_tokens": 2000}, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": assistant},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
            ]})
        };
        let kept = json!([{"type": "thinking", "thinking": "", "signature": t.signature}, tool_use.clone()]);
        assert_eq!(missing_block_error(&body(kept)), None);
        let stripped = missing_block_error(&body(json!([tool_use.clone()]))).unwrap();
        assert!(
            stripped.starts_with(
                "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`."
            ),
            "{stripped}"
        );
        let mut off = body(json!([tool_use]));
        off["thinking"] = json!({"type": "disabled"});
        assert_eq!(missing_block_error(&off), None, "only when thinking is on");
    }

    #[test]
    fn request_errors() {
        let err = |v: Value| request_error(&v);
        assert_eq!(err(json!({"max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 31999}})), None);
        assert_eq!(err(json!({"max_tokens": 10, "thinking": {"type": "adaptive"}})), None);
        assert_eq!(err(json!({"thinking": {"type": "disabled"}})), None);
        let low = err(json!({"max_tokens": 5000, "thinking": {"type": "enabled", "budget_tokens": 1000}})).unwrap();
        assert!(low.contains("greater than or equal to 1024"), "{low}");
        let over = err(json!({"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 2000}})).unwrap();
        assert!(over.starts_with("`max_tokens` must be greater than `thinking.budget_tokens`"), "{over}");
        assert!(err(json!({"max_tokens": 5000, "thinking": {"type": "enabled"}})).unwrap().ends_with("Field required"));
        let display = json!({"type": "enabled", "budget_tokens": 2000, "display": "full"});
        assert!(err(json!({"max_tokens": 5000, "thinking": display})).unwrap().contains("'summarized' or 'omitted'"));
    }
}
