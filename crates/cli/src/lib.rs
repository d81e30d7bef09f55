//! The library behind the `qm` command.
//!
//! - [`scenario`] and [`check`]: `qm check`, policy scenarios (small YAML or JSON files that
//!   describe a service environment, its quota shares and a sequence of steps with
//!   expectations) played through the production scheduling core (`qm-core`) exactly as the
//!   server and the simulator drive it; the format is in `docs/scenarios.md`;
//! - [`cluster`]: cluster files for `qm simulate`, `qm plan` and `qm apply` (the scenario format
//!   without steps, plus tenants and resource names);
//! - [`client`]: the HTTP client and the formatting behind the client commands (`qm submit`,
//!   `qm jobs`, `qm explain`, `qm watch`, ...);
//! - [`policy`]: policy as code — the diff between a cluster file and a running server, the
//!   jobs a change would expose to preemption, apply and the audit log;
//! - [`error`]: the error type of files that cannot be read or checked.
//!
//! The binary (`src/main.rs`, one file per command under `src/cmd/`) only parses arguments,
//! prints and picks the exit code.

pub mod check;
pub mod client;
pub mod cluster;
pub mod error;
pub mod policy;
pub mod scenario;

pub use error::Error;
