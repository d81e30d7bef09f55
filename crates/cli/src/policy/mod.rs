//! Policy as code: `qm plan`, `qm apply` and `qm audit` against a running server.
//!
//! A cluster file (the `qm check` / `qm simulate` format plus the top-level
//! `service_environment`, `scheduling_policy` and `job_queue` names) declares what the server
//! should hold. The work is split so that only the edges do IO:
//!
//! - [`client`]: the server's HTTP API (AWS Batch REST-JSON and the `/qm/v1/audit` log), with
//!   errors mapped in one place;
//! - [`live`]: reads what the server holds (environment, policy, queue, shares, jobs) into plain
//!   values;
//! - [`plan`]: the pure part — the diff between the file and the server, and what each change
//!   that lowers a limit or makes capacity reclaimable does to running jobs — and its text and
//!   JSON renderings;
//! - [`apply`]: carries a plan out in a safe order and records it in the audit log;
//! - [`audit`]: the audit log's entries and their rendering.

pub mod apply;
pub mod audit;
pub mod client;
pub mod live;
pub mod plan;

use std::collections::BTreeMap;
use std::path::Path;

use qm_core::ShareSpec;

use crate::cluster::ClusterFile;

/// What can go wrong in a policy command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster file cannot be used.
    #[error(transparent)]
    File(#[from] crate::Error),
    /// The cluster file is valid but lacks what plan and apply need.
    #[error("{path}: {message}")]
    Incomplete {
        /// The file.
        path: std::path::PathBuf,
        /// What to add.
        message: String,
    },
    /// The server could not be reached or answered something that is not the API.
    #[error("{endpoint}: {message}")]
    Transport {
        /// The server's base URL.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
    /// The server refused a request.
    #[error("the server refused {operation}: {message}")]
    Api {
        /// The operation, as in the URL.
        operation: String,
        /// The AWS error type (`ClientException`, ...).
        kind: String,
        /// The server's message.
        message: String,
    },
    /// The server answered a shape this client does not understand.
    #[error("unexpected answer to {operation}: {message}")]
    Shape {
        /// The operation.
        operation: String,
        /// What is missing or malformed.
        message: String,
    },
}

/// The names of the server resources a cluster file manages.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Names {
    /// The service environment.
    pub service_environment: String,
    /// The scheduling policy.
    pub scheduling_policy: String,
    /// The job queue; the shares live in it.
    pub job_queue: String,
}

/// What a cluster file asks the server to hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Resource names.
    pub names: Names,
    /// Instance type -> the service environment's maximum instances.
    pub environment: BTreeMap<String, u32>,
    /// The quota shares, in file order.
    pub shares: Vec<ShareSpec>,
}

impl Desired {
    /// The desired state of a parsed cluster file; `path` only names it in errors.
    pub fn from_file(file: &ClusterFile, path: &Path) -> Result<Desired, Error> {
        let Some(queue) = file.job_queue.clone() else {
            return Err(Error::Incomplete {
                path: path.to_path_buf(),
                message: "job_queue: plan and apply need the job queue's name; add a top-level \
                          `job_queue: NAME` (service_environment and scheduling_policy default \
                          to NAME-se and NAME-policy)"
                    .into(),
            });
        };
        Ok(Desired {
            names: Names {
                service_environment: file
                    .service_environment
                    .clone()
                    .unwrap_or_else(|| format!("{queue}-se")),
                scheduling_policy: file
                    .scheduling_policy
                    .clone()
                    .unwrap_or_else(|| format!("{queue}-policy")),
                job_queue: queue,
            },
            environment: file.environment.clone(),
            shares: file.shares.iter().map(|s| s.spec()).collect(),
        })
    }

    /// Reads and checks a cluster file.
    pub fn load(path: &Path) -> Result<Desired, Error> {
        let file = crate::cluster::load(path)?;
        Desired::from_file(&file, path)
    }
}
