//! Usage: what one request cost, from the token estimate a reservation uses to the usage event
//! analysts read in R2.

pub mod dead_letter;
pub mod estimate;
pub mod event;
pub mod export;
pub mod output_history;
pub mod queue;
pub mod record;
pub mod tags;
