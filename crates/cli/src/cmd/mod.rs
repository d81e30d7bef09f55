//! One module per `qm` command: each owns its clap arguments and a `run` that returns the
//! process exit code.

pub mod admin;
pub mod backup;
pub mod check;
pub mod client;
pub mod policy;
pub mod principal;
pub mod report;
pub mod serve;
pub mod simulate;
pub mod supervise;
pub mod whoami;
pub mod workload;
pub mod workload_export;
