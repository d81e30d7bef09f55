//! Object storage for Quartermaster's jobs: what SageMaker does with S3 around a training
//! container (docs/sagemaker.md). Before an attempt, an input channel is downloaded into its
//! directory and the checkpoints are restored; while and after it runs, the checkpoints are
//! uploaded; after a successful exit `model.tar.gz` and `output.tar.gz` are uploaded.
//!
//! Two kinds of location, one interface ([`Storage`]):
//!
//! - `s3://bucket/key`: through `object_store`'s S3 client (its SigV4 signing, retries and
//!   multipart uploads), with the endpoint, region and credentials of the standard AWS chain
//!   that the server process sees ([`StorageConfig`], [`settings`]);
//! - `file:///path`: on this machine, only under the roots the operator allowed
//!   (`[storage] file_roots`). The server may be root, and a job names these paths, so no link
//!   is followed on either side ([`local`]).
//!
//! Every transfer writes only into a directory the caller made for it, creating files that do
//! not exist yet (`O_EXCL`, `O_NOFOLLOW`) and handing each to the job's uid as it is made.

mod error;
pub mod local;
mod s3;
pub mod settings;
mod transfer;
mod uri;

pub use error::StorageError;
pub use settings::{ContainerCredentials, Keys, Settings, StorageConfig};
pub use transfer::{
    Opener, Progress, Storage, SyncState, Transfer, MAX_MANIFEST_BYTES, MAX_OBJECTS,
};
pub use uri::{Location, StorageUri};
