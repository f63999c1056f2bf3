//! Authentication: the bearer key checked against its KV record, and what the gateway then knows
//! about the request.

pub mod context;
