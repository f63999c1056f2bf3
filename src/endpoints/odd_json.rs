//! Test values shared by the chat door's read tests (the walk's and the placed parse's).

/// Values for any place in a request: each JSON kind, escapes, depths, what the checks ask
/// for somewhere, and what `Value` reads in its own way.
pub(super) fn odd_values() -> Vec<String> {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let mut out: Vec<String> = [
        "null",
        "true",
        "false",
        "0",
        "-1",
        "1.5",
        "1e400",
        "\"\"",
        "\"gpt\\u00e9\"",
        "\"\\ud800\"",
        "\"a\\\"b\"",
        "\"text\"",
        "\"image_url\"",
        "\"function\"",
        "\"tool\"",
        "\"assistant\"",
        "\"auto\"",
        "\"json_object\"",
        "[]",
        "{}",
        "[\"x\"]",
        "[{}]",
        "{\"model\":\"y\"}",
        "{\"url\":\"u\"}",
        "{\"name\":\"f\",\"arguments\":\"{}\"}",
        "{\"name\":\"\"}",
        "[{\"type\":\"text\",\"text\":\"t\"}]",
        "[{\"role\":\"user\",\"content\":\"c\"}]",
        "{\"role\":\"user\",\"content\":\"c\"}",
        "{\"$serde_json::private::RawValue\":\"1\"}",
        "{\"$serde_json::private::RawValue\":\"{\\\"url\\\":\\\"u\\\"}\"}",
    ]
    .map(String::from)
    .to_vec();
    out.extend([deep(1), deep(120), deep(127), deep(200)]);
    out
}
