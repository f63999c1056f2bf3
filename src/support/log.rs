//! Structured JSON log lines, always passed through redaction: nothing personal reaches the logs.

use crate::support::redact::redact;
use serde_json::Value;

/// The line as it is written: compact JSON with personal data and secrets replaced.
pub fn line(entry: &Value) -> String {
    redact(&entry.to_string())
}

pub fn info(entry: Value) {
    let text = line(&entry);
    #[cfg(target_arch = "wasm32")]
    worker::console_log!("{text}");
    #[cfg(not(target_arch = "wasm32"))]
    println!("{text}");
}

pub fn error(entry: Value) {
    let text = line(&entry);
    #[cfg(target_arch = "wasm32")]
    worker::console_error!("{text}");
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{text}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_are_redacted() {
        let l = line(&json!({"event": "x", "user": "jane.doe@example.com", "key": "sk-proj-abcdefghijklmnopqrstuvwx"}));
        assert!(!l.contains("jane.doe"), "{l}");
        assert!(!l.contains("abcdefghijklmnop"), "{l}");
        assert!(l.contains("\"event\":\"x\""));
    }
}
