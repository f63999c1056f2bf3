//! The request pipeline every endpoint shares: which deployment to try next, how long to wait,
//! when to stop (the pure planner), and the one driver that admits, sends, settles and records.

pub mod answer_limit;
pub mod attempt;
pub mod decision_log;
pub mod gate;
pub mod plan;
pub mod report;
pub mod retry;
pub mod run;
pub mod step;
pub mod stream;
pub mod stream_body;
pub mod timeouts;
pub mod upstream;
