//! The HTTP edge of the gateway: client-facing errors, response building, and the SSE parser.

pub mod anthropic_error;
pub mod codes;
pub mod error;
pub mod header_map;
pub mod incoming;
pub mod io;
pub mod outgoing;
pub mod reply;
pub mod sse;
