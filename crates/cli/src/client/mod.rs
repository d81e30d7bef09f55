//! The client side of `qm`: the commands that talk to a running `qm serve` (`qm submit`,
//! `qm jobs`, `qm job`, `qm logs`, `qm explain`, `qm priority`, `qm terminate`, `qm shares`,
//! `qm watch`).
//!
//! The split keeps effects at the edge:
//!
//! - [`http`]: the one place that speaks HTTP — the AWS Batch REST-JSON operations (with the
//!   `qm-api` wire types) and the two `/qm/v1` endpoints (usage, logs) — and maps every
//!   failure to a [`http::ClientError`] that says what to do;
//! - [`submit`]: the SageMaker `CreateTrainingJob` payload built from flags;
//! - [`format`](mod@format): tables and detail views — functions from data (and `now`) to strings;
//! - [`explain`]: plain-words explanations of a job's state from its reason code;
//! - [`report`]: `qm report usage` as a table or CSV;
//! - [`time`]: ages and UTC timestamps without a date library.
//!
//! The binary's `cmd/client.rs` only parses flags, calls these and prints.

pub mod explain;
pub mod format;
pub mod http;
pub mod report;
pub mod submit;
pub mod time;

pub use http::{Client, ClientError};
