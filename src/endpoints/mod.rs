//! One thin adapter per public URL: parse the body, describe the request to the pipeline, and
//! hand it the per-vendor steps.

pub mod admin;
pub mod chat;
mod chat_body;
mod chat_walk;
pub mod embeddings;
pub mod health;
pub mod messages;
mod messages_body;
pub mod models;
#[cfg(test)]
mod odd_json;
pub mod responses;
mod responses_body;
pub mod route;
