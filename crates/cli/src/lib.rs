//! The library behind the `qm` command.
//!
//! Today it holds `qm check`: policy scenarios, small YAML or JSON files that describe a
//! service environment, its quota shares and a sequence of steps (submit, finish, advance,
//! update a share...) with expectations, played through the production scheduling core
//! (`qm-core`) exactly as the server and the simulator drive it. The format is documented in
//! `docs/scenarios.md`.
//!
//! - [`scenario`]: the file format, serde types and strict parsing with located errors;
//! - [`check`]: the runner that plays a scenario to a fixed point after every step and
//!   compares each `expect`, returning an [`check::Outcome`] with a readable diff;
//! - [`cluster`]: cluster files for `qm simulate` (the scenario format without steps);
//! - [`error`]: the one error type, for files that cannot be checked at all.
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
