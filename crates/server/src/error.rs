//! The server crate's error type: what can stop the server from starting or running. Errors
//! of single API requests are `qm_api::ApiError`, answered to the client, never this.

/// Why the server cannot start or must stop.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A bad config file or flag; the message names the key and the fix.
    #[error("configuration: {0}")]
    Config(String),
    /// Another server holds the data directory.
    #[error("data dir {0} is in use by another qm serve; stop it or pass another --data-dir")]
    DataDirInUse(String),
    /// The durable store failed.
    #[error(transparent)]
    Store(#[from] qm_store::StoreError),
    /// The executor could not be set up.
    #[error("executor: {0}")]
    Executor(String),
    /// Replaying the log gave a different state than when it was written.
    #[error("recovery: {0}")]
    Recovery(String),
    /// An attempt's credentials could not be issued (`credentials.rs`); the message names the
    /// role and what to change.
    #[error("credentials: {0}")]
    Credentials(String),
    /// Files, sockets.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}
