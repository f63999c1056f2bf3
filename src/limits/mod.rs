//! Limits on the worker's side: admission with a deployment's, key's and tenant's limiter, the
//! leases it admits against locally, the refusals a client sees, and the tenant budget client.

pub mod admission;
pub mod budget;
pub mod lease_ledger;
pub mod lease_policy;
pub mod location;
pub mod refusal;
