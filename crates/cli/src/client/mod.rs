//! The client side of `qm`: the commands that talk to a running `qm serve` (`qm submit`,
//! `qm jobs`, `qm job`, `qm logs`, `qm explain`, `qm priority`, `qm terminate`, `qm shares`,
//! `qm watch`, `qm principal`, `qm whoami`).
//!
//! The split keeps effects at the edge:
//!
//! - [`http`]: the one place that speaks HTTP — the AWS Batch REST-JSON operations (with the
//!   `qm-api` wire types) and the `/qm/v1` endpoints (usage, logs, principals) — and maps every
//!   failure to a [`http::ClientError`] that says what to do; every request signed with
//!   AWS SigV4 when there is a key;
//! - [`credentials`]: the AWS credentials chain that finds the key, and writing a newly
//!   issued key into a shared credentials file;
//! - [`principal`]: the principals API (`/qm/v1/principals`, `/qm/v1/whoami`) and its tables;
//! - [`submit`]: the SageMaker `CreateTrainingJob` payload built from flags;
//! - [`format`](mod@format): tables and detail views — functions from data (and `now`) to strings;
//! - [`explain`]: plain-words explanations of a job's state from its reason code;
//! - [`report`]: `qm report usage` as a table or CSV;
//! - [`review`]: `qm report review` as tables or a self-contained HTML page;
//! - [`time`]: ages and UTC timestamps without a date library;
//! - [`workload`]: `qm workload export` and `calibrate`, the server's jobs of a window in the
//!   simulator's workload schema.
//!
//! The binary's `cmd/client.rs`, `cmd/principal.rs` and `cmd/whoami.rs` only parse flags,
//! call these and print.

pub mod credentials;
pub mod explain;
pub mod format;
pub mod http;
pub mod principal;
pub mod report;
pub mod review;
pub mod submit;
pub mod time;
pub mod workload;

pub use http::{Client, ClientError};
