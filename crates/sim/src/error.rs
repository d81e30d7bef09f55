//! The simulator's one error type: inputs it cannot use, each saying where and what to fix.

/// Why a simulation or a generation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A workload line is malformed.
    #[error("{path}:{line}: {message}")]
    Workload {
        /// The file.
        path: String,
        /// 1-based line (the header is line 1).
        line: usize,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The cluster (environment, shares, tenants) cannot run the workload.
    #[error("cluster: {0}")]
    Cluster(String),
    /// Options out of range.
    #[error("{0}")]
    Options(String),
    /// Writing output failed.
    #[error("writing output: {0}")]
    Write(String),
    /// The core refused the cluster (more than 20 shares, a share over 5 limits, ...); its
    /// message says what to change.
    #[error(transparent)]
    Core(#[from] qm_core::CoreError),
    /// An invariant of the core broke (debug builds check after every event).
    #[error("invariant violated at t={at_s}s: {message}")]
    Invariant {
        /// Simulated time.
        at_s: f64,
        /// The violation.
        message: String,
    },
}

impl SimError {
    pub(crate) fn workload(path: &str, line: usize, message: String) -> Self {
        SimError::Workload {
            path: path.to_string(),
            line,
            message,
        }
    }
}
