//! Per-deployment limiter: token buckets, circuit breaker and reservations as pure state
//! machines (time and randomness passed in), plus the `DeploymentLimiter` Durable Object shell.

pub mod breaker;
pub mod bucket;
pub mod client;
pub mod deployment;
pub mod idempotency;
pub mod limits;
pub mod protocol;
pub mod reservations;
pub mod rng;
pub mod shell;

pub use deployment::LimiterState;
pub use limits::Limits;
pub use shell::DeploymentLimiter;
