//! One deployment's limiter across the whole edge, simulated: N locations × M isolates running
//! the gateway's real lease ledger against one real limiter object, with seeded traffic, round
//! trips, a single-server object and faults. `scenarios` holds the runs the docs report;
//! `cargo run --profile sim -p edge-sim` (or `scripts/simulate`) prints their table.

pub mod config;
pub mod metrics;
pub mod rng;
pub mod scenarios;
pub mod world;
