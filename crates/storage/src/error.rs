//! The crate's one error type. Its messages end up in a job's status reason, so each names the
//! location and says what to fix.

use std::path::PathBuf;

/// Why a transfer, or a location, was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The URI is neither `s3://bucket/...` nor `file:///...`.
    #[error("'{0}' is not a storage location: use s3://bucket/prefix or file:///absolute/path")]
    BadUri(String),
    /// A `file://` URI outside every `[storage] file_roots` entry.
    #[error("'{uri}' is not under any of [storage] file_roots ({roots}): ask the operator to allow its directory, or use s3://")]
    NotAllowed {
        /// The URI.
        uri: String,
        /// The allowed roots, comma-separated (or "none").
        roots: String,
    },
    /// A component of a local path, or of an object's key, cannot be used safely.
    #[error("'{path}': {why}")]
    UnsafePath {
        /// The path or key.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// Nothing is stored under the location a channel names.
    #[error("no objects found under '{0}': check the URI and that the data was uploaded")]
    Empty(String),
    /// The S3 client failed (no such bucket, access denied, unreachable, ...).
    #[error("S3 error for '{uri}': {source}: check that the bucket and key exist and that the server's credentials and region ([storage], AWS_*) may reach them")]
    S3 {
        /// The location.
        uri: String,
        /// The client's error, with S3's code and message.
        #[source]
        source: object_store::Error,
    },
    /// An upload to S3 failed.
    #[error("upload to '{uri}' failed: {source}")]
    Upload {
        /// The target.
        uri: String,
        /// The client's error.
        #[source]
        source: std::io::Error,
    },
    /// A local file could not be read or written.
    #[error("'{}': {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A manifest file is not SageMaker's manifest format.
    #[error("manifest '{uri}': {why}")]
    Manifest {
        /// The manifest's location.
        uri: String,
        /// What is wrong with it.
        why: String,
    },
    /// The S3 client could not be built from the configuration.
    #[error("S3 client for bucket '{bucket}': {source}: check [storage] and the AWS environment of the server")]
    Client {
        /// The bucket.
        bucket: String,
        /// The builder's error.
        #[source]
        source: object_store::Error,
    },
}

impl StorageError {
    /// Whether trying again cannot help: the location is malformed, not allowed, names
    /// nothing, or holds an unusable key or manifest (S3 and I/O errors may be passing).
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            StorageError::BadUri(_)
                | StorageError::NotAllowed { .. }
                | StorageError::UnsafePath { .. }
                | StorageError::Empty(_)
                | StorageError::Manifest { .. }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }
}
