//! Policy as code: `qm plan`, `qm apply` and `qm audit` against a running server.
//!
//! A cluster file (the `qm check` / `qm simulate` format plus the top-level
//! `service_environment`, `scheduling_policy` and `job_queue` names and, optionally, the
//! server's `admins`) declares what the server should hold. The work is split so that only the edges do IO:
//!
//! - the server is reached through the one HTTP client, [`crate::client::Client`] (AWS Batch
//!   REST-JSON and the `/qm/v1/audit` log); [`call`] names the operation in its errors;
//! - [`live`]: reads what the server holds (environment, policy, queue, shares, jobs, and the
//!   admin list when the file has one) into plain values;
//! - [`tags`]: the share tags the file controls (permissions and thrash protection);
//! - [`plan`]: the pure part — the diff between the file and the server, and what each change
//!   that lowers a limit or makes capacity reclaimable does to running jobs — and its text and
//!   JSON renderings;
//! - [`whatif`]: asks the server what its scheduler would preempt once the file is applied
//!   (the core on a copy of the server's state), which the plan lists as "preempted";
//! - [`apply`]: carries a plan out in a safe order and records it in the audit log;
//! - [`audit`]: the audit log's entries and their rendering.

pub mod apply;
pub mod audit;
pub mod live;
pub mod plan;
pub mod tags;
pub mod whatif;

use std::collections::BTreeMap;
use std::path::Path;

use qm_core::ShareSpec;
use serde_json::Value;

use crate::client::{Client, ClientError};
use crate::cluster::ClusterFile;
use crate::scenario::{GroupDecl, ShareDecl};
use qm_api::validate::{TAG_FAIR_RECLAIM, TAG_GROUP, TAG_IDLE_ASSIGNMENT, TAG_WEIGHT};
use tags::ShareTags;

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
    /// A request to the server failed: not reachable, refused, or not the API.
    #[error("{}", describe_request_error(operation, error))]
    Request {
        /// The operation (as in the URL) or endpoint (`audit`) asked.
        operation: String,
        /// What the client saw.
        error: ClientError,
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

impl Error {
    /// A failed request to `operation`.
    pub fn request(operation: &str, error: ClientError) -> Error {
        Error::Request {
            operation: operation.to_string(),
            error,
        }
    }
}

/// The policy commands' wording of a failed request: which operation was refused, and what to do
/// when no server listens. (The client's messages are for one-shot commands; here the operation
/// is worth naming, since plan and apply make many calls.)
fn describe_request_error(operation: &str, error: &ClientError) -> String {
    match error {
        ClientError::Server { message, .. } => {
            format!("the server refused {operation}: {message}")
        }
        ClientError::NotRunning { endpoint } => format!(
            "{endpoint}: cannot reach the server; start it with `qm serve` or pass --endpoint"
        ),
        ClientError::AccessDenied { .. } | ClientError::Unauthenticated { .. } => {
            format!("the server refused {operation}: {error}")
        }
        // Says what to export; the operation adds nothing.
        ClientError::NoCredentials { .. } => error.to_string(),
        other => format!("{operation}: {other}"),
    }
}

/// Calls the AWS Batch `operation` (lower case, as in the URL) with a JSON body.
pub fn call(client: &Client, operation: &str, body: &Value) -> Result<Value, Error> {
    client
        .call_json(operation, body)
        .map_err(|e| Error::request(operation, e))
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
    pub shares: Vec<DesiredShare>,
    /// The server's admin list (`GET`/`PUT /qm/v1/admins`), in file order; `None`: the file
    /// leaves it alone.
    pub admins: Option<Vec<String>>,
    /// The job queue's class tags (`qm:class.<name>`); `None`: the file has no `classes` and
    /// leaves the queue's alone.
    pub classes: Option<ShareTags>,
    /// The scheduling policy's fair-sharing tags (`qm:idle-assignment`, `qm:fair-reclaim`),
    /// each only when the file has its key (`idle_assignment`, `fair_reclaim`).
    pub policy_tags: ShareTags,
    /// Which of the shares' fair-sharing tags the file controls.
    pub fair: tags::FairKeys,
    /// The job queue's group definitions (`PUT /qm/v1/queues/{queue}/groups`); `None`: the
    /// file has no `groups` and leaves the queue's alone.
    pub groups: Option<Vec<qm_api::qm::GroupDef>>,
}

/// A quota share as the file declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredShare {
    /// Its scheduling settings, in the core's terms.
    pub spec: ShareSpec,
    /// The tags the file controls ([`tags::MANAGED`]), as they should be on the server.
    pub tags: ShareTags,
}

impl DesiredShare {
    /// The share `decl` declares; `index` (its place under `shares`) names it in errors.
    fn of_decl(decl: &ShareDecl, index: usize) -> Result<DesiredShare, String> {
        use qm_api::validate::{MAX_MIN_RUNTIME_SECONDS, MAX_PREEMPTIONS_PER_HOUR};
        // `qm check` plays any value; the server takes these as tags only within its bounds,
        // and saying so now beats an apply refused half way.
        if let Some(s) = decl
            .min_runtime_seconds
            .filter(|&s| s > MAX_MIN_RUNTIME_SECONDS)
        {
            return Err(format!(
                "shares[{index}].min_runtime_seconds: {s} is more than the server allows, \
                 {MAX_MIN_RUNTIME_SECONDS} (a week)"
            ));
        }
        if let Some(n) = decl
            .max_preemptions_per_hour
            .filter(|&n| n > MAX_PREEMPTIONS_PER_HOUR)
        {
            return Err(format!(
                "shares[{index}].max_preemptions_per_hour: {n} is more than the server allows, \
                 {MAX_PREEMPTIONS_PER_HOUR}"
            ));
        }
        Ok(DesiredShare {
            spec: decl.spec(),
            tags: tags::of_decl(decl),
        })
    }

    /// Adds the fair-sharing tags the file controls: the share's weight, and the group whose
    /// `shares` list it.
    fn with_fair_tags(
        mut self,
        decl: &ShareDecl,
        fair: tags::FairKeys,
        groups: &[GroupDecl],
    ) -> DesiredShare {
        if let Some(w) = decl.weight.filter(|_| fair.weight) {
            self.tags.insert(TAG_WEIGHT.to_string(), w.to_string());
        }
        if fair.group {
            if let Some(g) = groups.iter().find(|g| g.shares.contains(&decl.name)) {
                self.tags.insert(TAG_GROUP.to_string(), g.name.clone());
            }
        }
        self
    }
}

/// The file's groups as the server takes them; a name the server would refuse is refused
/// now, naming the field, rather than half way through an apply.
fn group_defs(groups: &[GroupDecl]) -> Result<Vec<qm_api::qm::GroupDef>, String> {
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            if !qm_api::validate::is_group_name(&g.name) {
                return Err(format!(
                    "groups[{i}].name: '{}' is not a name the server takes; use 1 to 64 letters, digits, _ and -",
                    g.name
                ));
            }
            Ok(qm_api::qm::GroupDef {
                name: g.name.clone(),
                limits: g
                    .limits
                    .iter()
                    .map(|(u, n)| (u.clone(), i64::from(*n)))
                    .collect(),
                weight: Some(i64::from(g.weight.unwrap_or(1))),
            })
        })
        .collect()
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
        let invalid = |message: String| {
            Error::File(crate::Error::Invalid {
                path: path.to_path_buf(),
                message,
            })
        };
        // A file that says nothing about fair sharing leaves the server's as it is.
        let fair = tags::FairKeys {
            weight: file.idle_assignment.is_some()
                || file.fair_reclaim.is_some()
                || file.groups.is_some()
                || file.shares.iter().any(|s| s.weight.is_some()),
            group: file.groups.is_some(),
        };
        let groups = file.groups.as_deref().unwrap_or_default();
        let mut policy_tags = ShareTags::new();
        if let Some(mode) = file.idle_assignment {
            policy_tags.insert(TAG_IDLE_ASSIGNMENT.into(), mode.as_str().into());
        }
        if let Some(on) = file.fair_reclaim {
            policy_tags.insert(TAG_FAIR_RECLAIM.into(), on.to_string());
        }
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
            shares: file
                .shares
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    DesiredShare::of_decl(s, i).map(|d| d.with_fair_tags(s, fair, groups))
                })
                .collect::<Result<_, _>>()
                .map_err(invalid)?,
            admins: file.admins.clone(),
            classes: file.classes.as_deref().map(tags::of_classes),
            policy_tags,
            fair,
            groups: file
                .groups
                .as_deref()
                .map(group_defs)
                .transpose()
                .map_err(invalid)?,
        })
    }

    /// Reads and checks a cluster file.
    pub fn load(path: &Path) -> Result<Desired, Error> {
        let file = crate::cluster::load(path)?;
        Desired::from_file(&file, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired(share_keys: &str) -> Result<Desired, Error> {
        let path = Path::new("c.yaml");
        let src = format!(
            "job_queue: q\nenvironment: {{gpu: 1}}\nshares:\n  - {{name: a, limits: {{gpu: 1}}, strategy: LEND}}\n  - {{name: b, limits: {{gpu: 1}}, strategy: LEND, {share_keys}}}\n"
        );
        Desired::from_file(&crate::cluster::parse(&src, path)?, path)
    }

    #[test]
    fn each_share_carries_the_tags_its_fields_ask_for() {
        let d = desired("leads: [alice], max_preemptions_per_hour: 2").unwrap();
        assert!(d.shares[0].tags.is_empty());
        assert_eq!(d.shares[1].tags["qm:leads"], "alice");
        assert_eq!(d.shares[1].tags["qm:max-preemptions-per-hour"], "2");
        assert_eq!(d.shares[1].spec.max_preemptions_per_hour, 2);
    }

    #[test]
    fn fair_sharing_keys_become_policy_and_share_tags_only_when_the_file_has_them() {
        let d = desired("leads: [alice]").unwrap();
        assert!(d.policy_tags.is_empty() && d.groups.is_none(), "{d:?}");
        assert_eq!(d.fair, tags::FairKeys::default());
        let path = Path::new("c.yaml");
        let src = "job_queue: q\nidle_assignment: FAIR_SHARE\nfair_reclaim: true\nenvironment: {gpu: 4}\ngroups:\n  - {name: research, shares: [a], limits: {gpu: 3}, weight: 2}\nshares:\n  - {name: a, limits: {gpu: 1}, strategy: LEND_AND_BORROW, weight: 3}\n  - {name: b, limits: {gpu: 1}, strategy: LEND}\n";
        let d = Desired::from_file(&crate::cluster::parse(src, path).unwrap(), path).unwrap();
        assert_eq!(d.policy_tags["qm:idle-assignment"], "FAIR_SHARE");
        assert_eq!(d.policy_tags["qm:fair-reclaim"], "true");
        assert_eq!(d.shares[0].tags["qm:weight"], "3");
        assert_eq!(d.shares[0].tags["qm:group"], "research");
        assert!(d.shares[1].tags.is_empty(), "{:?}", d.shares[1].tags);
        let g = &d.groups.as_ref().unwrap()[0];
        assert_eq!(
            (g.name.as_str(), g.weight, g.limits["gpu"]),
            ("research", Some(2), 3)
        );
        // A name the server would refuse is refused with the file.
        let bad = src.replace("name: research", "name: 'research org'");
        let e = crate::cluster::parse(&bad, path).unwrap_err().to_string();
        assert!(e.contains("groups[0].name"), "{e}");
    }

    #[test]
    fn protection_beyond_the_server_s_bounds_is_refused_before_planning() {
        for (keys, field) in [
            (
                "min_runtime_seconds: 604801",
                "shares[1].min_runtime_seconds: 604801",
            ),
            (
                "max_preemptions_per_hour: 1001",
                "shares[1].max_preemptions_per_hour: 1001",
            ),
        ] {
            let e = desired(keys).unwrap_err().to_string();
            assert!(e.starts_with("c.yaml: ") && e.contains(field), "{e}");
        }
        desired("min_runtime_seconds: 604800, max_preemptions_per_hour: 1000").unwrap();
    }
}
