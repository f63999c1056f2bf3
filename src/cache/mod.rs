//! The exact-response cache: keys, the per-route policy, the KV store, and rebuilding a streamed
//! answer so it can be stored.

pub mod assembly;
pub mod key;
pub mod policy;
pub mod store;
