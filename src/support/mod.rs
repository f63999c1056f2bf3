//! What every layer may use: structured logs, redaction, the one clock, awaiting JS promises,
//! reading a few members of JSON without building it.

pub mod clock;
pub mod entropy;
pub mod json_view;
pub mod log;
pub mod lone_surrogates;
pub mod promise;
pub mod redact;
