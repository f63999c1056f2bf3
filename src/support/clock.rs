//! The one wall clock of the worker crate; pure modules take time as an argument instead.

/// Milliseconds since the Unix epoch, from the runtime (panics on the host: keep it out of pure code).
pub fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}
