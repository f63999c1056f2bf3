//! The one wall clock: the worker and the Durable Objects read the same function
//! (`limiter::object::now_ms`); pure modules take time as an argument instead.

/// Milliseconds since the Unix epoch, from the runtime (panics on the host: keep it out of pure code).
pub use limiter::object::now_ms;
