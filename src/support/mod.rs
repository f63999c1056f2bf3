//! What every layer may use: structured logs, redaction, the one clock, awaiting JS promises.

pub mod clock;
pub mod entropy;
pub mod log;
pub mod lone_surrogates;
pub mod promise;
pub mod redact;
