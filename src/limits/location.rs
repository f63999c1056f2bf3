//! Where this isolate runs: the Cloudflare location (`request.cf.colo`) names the relay its
//! leases come from. An isolate never moves, so the first request's answer holds for its life.

use std::cell::OnceCell;

use worker::wasm_bindgen::JsValue;

/// The location when the runtime names none (local development).
const UNKNOWN: &str = "local";

thread_local! {
    static COLO: OnceCell<String> = const { OnceCell::new() };
}

/// Reads the location from the first request's `cf` object (later requests cost nothing).
pub fn note(req: &worker::web_sys::Request) {
    COLO.with(|colo| {
        colo.get_or_init(|| {
            let cf = worker::js_sys::Reflect::get(req, &JsValue::from_str("cf")).ok();
            let name = cf.and_then(|cf| worker::js_sys::Reflect::get(&cf, &JsValue::from_str("colo")).ok());
            name.and_then(|n| n.as_string()).filter(|n| valid(n)).unwrap_or_else(|| UNKNOWN.to_string())
        });
    });
}

/// This isolate's location (`local` before any request, or where the runtime names none).
pub fn here() -> String {
    COLO.with(|colo| colo.get().cloned().unwrap_or_else(|| UNKNOWN.to_string()))
}

/// A location code as Cloudflare writes them (`DFW`, `FRA`): short and plain, so it can name an object.
fn valid(name: &str) -> bool {
    (1..=16).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_short_codes_name_a_location() {
        assert!(valid("DFW") && valid("fra1"));
        assert!(!valid("") && !valid("a/b") && !valid("x".repeat(17).as_str()) && !valid("ÄB"));
    }
}
