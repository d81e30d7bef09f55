//! Quartermaster's policy simulator: replays a workload through the production scheduling
//! core (`qm-core`, the same code the server runs) on a simulated clock, for several policies,
//! and measures what each would do to completion times, waiting, preemptions and lost work.
//!
//! - [`workload`]: workload files (the schema is `qm_api::workload`'s, which the server's
//!   export writes).
//! - `engine`: the discrete-event loop: arrivals, attempt ends, preempted attempts' exits,
//!   checkpoints; one scheduling pass per instant.
//! - [`metrics`]: what is measured, in the shape of `metrics.json`.
//! - [`report`]: the self-contained HTML report.
//! - [`generate`]: synthetic workloads calibrated to published trace statistics.
//! - [`mod@calibrate`]: a real period's exported jobs replayed under the policy that ran, the
//!   simulated figures beside the real ones.

pub mod calibrate;
mod engine;
pub mod error;
pub mod generate;
pub mod metrics;
pub mod report;
pub mod workload;

pub use calibrate::{calibrate, Calibration, Figures};
pub use engine::{run_variant, validate, Cluster, Progress, SimOptions};
pub use error::SimError;
pub use metrics::*;
pub use report::render_html;
pub use workload::{parse_workload, read_workload, write_workload, WorkloadJob};
