//! End-to-end: the release worker under `wrangler dev` against the mock vendor (one stack per run).

mod admin_guard;
mod admin_tools;
mod budget;
mod cache;
mod completions;
mod dead_letter;
mod durable_config;
mod errors;
mod faults;
mod hostile;
mod layers;
mod limits;
mod messages;
mod responses;
mod routing;
mod streaming;
mod usage;
mod vendor_answers;
mod vendors;
