//! Every document an admin uploads to KV (routes, keys, prices, budgets), its validation, and the
//! isolate's cached copy of it. `gatewayctl` imports only this layer.

pub mod budgets;
pub mod keys;
pub mod policy;
pub mod prices;
pub mod routes;
pub mod selection;
pub mod store;
