//! The AWS Batch face of Quartermaster: wire types, request parsing and validation, ARNs,
//! errors, pagination tokens, ListServiceJobs filters, the training payload, and the mapping
//! to the core's specs.
//!
//! Everything that knows an AWS wire name lives here, so the core stays in its own vocabulary
//! and the server only routes: parse ([`parse_request`]), validate ([`validate`]), resolve
//! names ([`Arns`]), convert ([`convert`]), and answer with a wire type or an [`ApiError`].
//!
//! Layout:
//! * [`types`]: one Rust type per botocore shape, named as the shape;
//! * [`parse`], [`validate`], [`payload`]: from bytes to a checked request;
//! * [`arn`], [`page`], [`filter`]: identifiers, tokens and filters;
//! * [`convert`]: wire shapes to `qm_core` specs;
//! * [`error`]: `ClientException` / `ServerException`;
//! * [`qm`]: Quartermaster's own `/qm/v1` wire types (usage reports);
//! * [`review`]: the policy review's wire types (`/qm/v1/review`);
//! * [`sigv4`]: signing requests and verifying their signatures.
//! * [`workload`]: the workload CSV schema, which the server's export writes and the
//!   simulator reads and writes.

pub mod arn;
pub mod channel;
pub mod class;
pub mod convert;
pub mod error;
pub mod filter;
pub mod page;
pub mod parse;
pub mod payload;
pub mod qm;
pub mod review;
pub mod sigv4;
pub mod types;
pub mod validate;
pub mod workload;

pub use arn::{decode_uri_label, Arns, Resource, ResourceKind};
pub use channel::Channel;
pub use convert::{
    environment_limits, exit_rules, job_spec, runtime_limit_seconds, share_spec, strategy,
};
pub use error::ApiError;
pub use filter::{parse_filters, JobFilter, FILTER_NAMES};
pub use page::{decode_token, encode_token};
pub use parse::parse_request;
pub use payload::TrainingPayload;
pub use types::*;
pub use validate::*;
