//! Per-deployment limiter: token buckets, circuit breaker and reservations as pure state
//! machines (time and randomness passed in), leases for isolates to admit locally, plus the
//! `DeploymentLimiter` Durable Object shell.

pub mod breaker;
pub mod bucket;
pub mod budget;
pub mod client;
pub mod deployment;
pub mod fair_share;
pub mod idempotency;
pub mod leases;
pub mod limits;
pub mod object;
pub mod protocol;
pub mod relay;
pub mod reservations;
pub mod rng;
pub mod shell;
pub mod types;
pub mod utc;
pub mod window;

pub use deployment::LimiterState;
pub use limits::Limits;
pub use relay::shell::LocationRelay;
pub use shell::DeploymentLimiter;
