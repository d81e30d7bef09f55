//! Cluster files for `qm simulate`: the `qm check` scenario format without `steps` — the same
//! `environment` and `shares` keys, parsed by the same types with the same checks — plus an
//! optional `tenants` map from workload tenants to shares. A scenario file is a valid cluster
//! file (its `name` and `steps` are read and ignored), so a policy tested with `qm check` can be
//! simulated as it is. `qm plan` and `qm apply` read the same files, plus the optional
//! top-level `service_environment`, `scheduling_policy` and `job_queue` names of the server's
//! resources and the server's `admins` list.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::Error;
use qm_core::IdleAssignment;

use crate::scenario::{
    admins, check_classes, check_groups, checked_seq, ClassDecl, GroupDecl, ShareDecl,
};

/// A cluster file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Optional title (scenario files have one).
    #[serde(default)]
    pub name: Option<String>,
    /// Instance type -> the service environment's maximum instances.
    pub environment: BTreeMap<String, u32>,
    /// The quota shares.
    #[serde(deserialize_with = "checked_seq")]
    pub shares: Vec<ShareDecl>,
    /// Workload tenant -> share; unlisted tenants go to the share of their own name, else to
    /// the share listed for `"*"`.
    #[serde(default)]
    pub tenants: BTreeMap<String, String>,
    /// A scenario's steps: accepted so that scenario files are cluster files, not used.
    #[serde(default)]
    pub steps: Option<serde_yaml_ng::Value>,
    /// The service environment's name on a server (`qm plan`/`qm apply`); default
    /// `<job_queue>-se`.
    #[serde(default)]
    pub service_environment: Option<String>,
    /// The scheduling policy's name on a server; default `<job_queue>-policy`.
    #[serde(default)]
    pub scheduling_policy: Option<String>,
    /// The job queue's name on a server; required by `qm plan` and `qm apply`.
    #[serde(default)]
    pub job_queue: Option<String>,
    /// Who is an admin on the server besides the principals created as admins: principal names
    /// and `group:NAME` entries (`GET`/`PUT /qm/v1/admins`). Absent = the server's list is not
    /// the file's business; `qm check` and `qm simulate` ignore it.
    #[serde(default, deserialize_with = "admins")]
    pub admins: Option<Vec<String>>,
    /// Job classes (interruption contracts); shares name theirs with `default_class` and
    /// `classes`. On a server, the job queue's `qm:class.<name>` tags.
    /// Absent = the queue's classes are not the file's business (as with `admins`).
    #[serde(default)]
    pub classes: Option<Vec<ClassDecl>>,
    /// How idle capacity goes to waiting borrowers: `FIFO` (default) or `FAIR_SHARE`. On a
    /// server, the scheduling policy's tag `qm:idle-assignment`. Absent = FIFO for `qm check`
    /// and `qm simulate`, and the server's setting left alone by `qm apply` (as with `admins`).
    #[serde(default)]
    pub idle_assignment: Option<IdleAssignment>,
    /// Whether a waiting borrower may preempt other shares' borrowed jobs for fairness (tag
    /// `qm:fair-reclaim`); absent = false, and left alone by `qm apply`.
    #[serde(default)]
    pub fair_reclaim: Option<bool>,
    /// Groups of shares (on a server, `PUT /qm/v1/queues/{queue}/groups` and the members'
    /// `qm:group` tags); absent = none, and left alone by `qm apply`.
    #[serde(default)]
    pub groups: Option<Vec<GroupDecl>>,
}

impl ClusterFile {
    /// The simulator's view.
    pub fn cluster(&self) -> qm_sim::Cluster {
        qm_sim::Cluster {
            environment: self.environment.clone(),
            shares: self.shares.iter().map(ShareDecl::spec).collect(),
            tenants: self.tenants.clone(),
            idle_assignment: self.idle_assignment.unwrap_or_default(),
            fair_reclaim: self.fair_reclaim.unwrap_or(false),
            groups: self.groups.iter().flatten().map(GroupDecl::spec).collect(),
        }
    }
}

/// Reads a cluster file (YAML or JSON; the first document).
pub fn load(path: &Path) -> Result<ClusterFile, Error> {
    let src = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&src, path)
}

/// Parses a cluster file; `path` only names the source in errors.
pub fn parse(src: &str, path: &Path) -> Result<ClusterFile, Error> {
    let doc = serde_yaml_ng::Deserializer::from_str(src)
        .next()
        .ok_or_else(|| Error::Empty {
            path: path.to_path_buf(),
        })?;
    let file = ClusterFile::deserialize(doc).map_err(|source| Error::Malformed {
        path: path.to_path_buf(),
        document: 1,
        source,
    })?;
    let invalid = |message: String| Error::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let mut seen = std::collections::BTreeSet::new();
    for s in &file.shares {
        if !seen.insert(s.name.as_str()) {
            return Err(invalid(format!(
                "shares: quota share `{}` is declared twice; share names must be unique",
                s.name
            )));
        }
    }
    if file.shares.is_empty() {
        return Err(invalid(
            "shares: a cluster needs at least one quota share".into(),
        ));
    }
    check_classes(file.classes.as_deref().unwrap_or_default(), &file.shares).map_err(invalid)?;
    check_groups(
        file.groups.as_deref().unwrap_or_default(),
        &file.shares,
        &file.environment,
    )
    .map_err(invalid)?;
    for (tenant, share) in &file.tenants {
        if !seen.contains(share.as_str()) {
            return Err(invalid(format!(
                "tenants.{tenant}: `{share}` is not one of the shares ({})",
                file.shares
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_file_is_a_cluster_file() {
        let src = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/aws-demo.yaml"),
        )
        .unwrap();
        let c = parse(&src, Path::new("aws-demo.yaml")).unwrap();
        assert_eq!(c.shares.len(), 3);
        assert_eq!(c.cluster().environment["ml.g5.xlarge"], 3);
    }

    #[test]
    fn tenants_must_map_to_declared_shares() {
        let src = "environment: {gpu: 2}\nshares:\n  - {name: a, limits: {gpu: 2}, strategy: LEND}\ntenants: {vc1: b}\n";
        let e = parse(src, Path::new("c.yaml")).unwrap_err().to_string();
        assert!(e.contains("tenants.vc1") && e.contains("`b`"), "{e}");
    }

    const SHARES: &str =
        "environment: {gpu: 2}\nshares:\n  - {name: a, limits: {gpu: 2}, strategy: LEND}\n";

    #[test]
    fn admins_are_read_in_file_order_and_absent_is_none() {
        let c = parse(
            &format!("{SHARES}admins: [ops, group:platform]\n"),
            Path::new("c.yaml"),
        )
        .unwrap();
        assert_eq!(c.admins.unwrap(), ["ops", "group:platform"]);
        assert!(parse(SHARES, Path::new("c.yaml")).unwrap().admins.is_none());
    }

    #[test]
    fn a_bad_admin_is_named_by_its_place_in_the_list() {
        for (list, words) in [
            (
                "[ops, \"al ice\"]",
                "admins[1]: `al ice` is not a principal",
            ),
            ("[\"group:\"]", "admins[0]: `group:` is not a principal"),
            (
                "[ops, group:platform, ops]",
                "admins[2]: `ops` is listed twice",
            ),
            ("[]", "admins: the list is empty: leave the key out"),
            ("ops", "admins: invalid type"),
        ] {
            let e = parse(&format!("{SHARES}admins: {list}\n"), Path::new("c.yaml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(words), "{list}: {e}");
            assert!(e.contains("line 4"), "{list}: {e}");
        }
    }

    #[test]
    fn classes_are_checked_against_what_the_shares_name() {
        let classes = "classes:\n  - {name: exploratory, interruptible: true}\n  - {name: release, interruptible: false, max_priority: 500}\n";
        let ok = format!("{classes}environment: {{gpu: 2}}\nshares:\n  - {{name: a, limits: {{gpu: 2}}, strategy: LEND, default_class: exploratory, classes: [exploratory, release]}}\n");
        let c = parse(&ok, Path::new("c.yaml")).unwrap();
        assert_eq!(
            c.classes.unwrap()[1].tag_value(),
            "non-interruptible,max-priority=500"
        );
        for (share_keys, words) in [
            ("default_class: nightly", "shares[0].default_class: `nightly` is not one of the classes (exploratory, release)"),
            ("classes: [release, nightly]", "shares[0].classes[1]: `nightly`"),
            ("default_class: exploratory, classes: [release]", "is not among the share's classes"),
            ("classes: []", "shares[0].classes: the list is empty"),
        ] {
            let src = format!("{classes}environment: {{gpu: 2}}\nshares:\n  - {{name: a, limits: {{gpu: 2}}, strategy: LEND, {share_keys}}}\n");
            let e = parse(&src, Path::new("c.yaml")).unwrap_err().to_string();
            assert!(e.contains(words), "{share_keys}: {e}");
        }
        let twice = format!("classes:\n  - {{name: x, interruptible: true}}\n  - {{name: x, interruptible: false}}\n{SHARES}");
        let e = parse(&twice, Path::new("c.yaml")).unwrap_err().to_string();
        assert!(
            e.contains("classes[1].name: class `x` is declared twice"),
            "{e}"
        );
    }

    #[test]
    fn fair_sharing_and_groups_reach_the_simulator_and_are_checked() {
        let shares = "environment: {gpu: 4}\nshares:\n  - {name: a, limits: {gpu: 2}, strategy: LEND_AND_BORROW, weight: 3}\n  - {name: b, limits: {gpu: 2}, strategy: LEND}\n";
        let ok = format!("{shares}idle_assignment: FAIR_SHARE\nfair_reclaim: true\ngroups:\n  - {{name: org, shares: [a, b], limits: {{gpu: 3}}, weight: 2}}\n");
        let c = parse(&ok, Path::new("c.yaml")).unwrap().cluster();
        assert_eq!(c.idle_assignment, IdleAssignment::FairShare);
        assert!(c.fair_reclaim);
        assert_eq!(c.shares[0].weight, 3);
        assert_eq!(c.groups[0].weight, 2);
        assert_eq!(c.groups[0].limits["gpu"], 3);
        let absent = parse(shares, Path::new("c.yaml")).unwrap().cluster();
        assert_eq!(absent.idle_assignment, IdleAssignment::Fifo);
        assert!(!absent.fair_reclaim && absent.groups.is_empty());
        for (keys, words) in [
            ("idle_assignment: FAIR", "unknown variant `FAIR`"),
            (
                "groups:\n  - {name: g, shares: [a, zz]}",
                "groups[0].shares[1]: `zz` is not one of the shares (a, b)",
            ),
            (
                "groups:\n  - {name: g, shares: [a]}\n  - {name: h, shares: [a]}",
                "groups[1].shares[0]: share `a` is already in group `g`",
            ),
            (
                "groups:\n  - {name: g, shares: [a]}\n  - {name: g, shares: [b]}",
                "groups[1].name: group `g` is declared twice",
            ),
            (
                "groups:\n  - {name: g, shares: []}",
                "groups[0].shares: the list is empty",
            ),
            (
                "groups:\n  - {name: g, shares: [a], limits: {tpu: 1}}",
                "groups[0].limits.tpu: `tpu` is not an instance type of the environment (gpu)",
            ),
            (
                "groups:\n  - {name: g, shares: [a], weight: 0}",
                "groups[0].weight: 0 is out of range",
            ),
            (
                "groups:\n  - {name: a, shares: [b]}",
                "groups[0].name: `a` is also a share's name",
            ),
            (
                "groups:\n  - {name: g, shares: [a], limits: {gpu: 2000000}}",
                "groups[0].limits.gpu: 2000000 is more than a server allows, 1000000",
            ),
            (
                "groups:\n  - {name: \"a b\", shares: [a]}",
                "groups[0].name: `a b` is not a group name",
            ),
        ] {
            let e = parse(&format!("{shares}{keys}\n"), Path::new("c.yaml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(words), "{keys}: {e}");
        }
        let zero = shares.replace("weight: 3", "weight: 0");
        let e = parse(&zero, Path::new("c.yaml")).unwrap_err().to_string();
        assert!(
            e.contains("shares[0].weight: 0 is out of range: give a whole number from 1 to 10000"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_location() {
        let src = "environment: {gpu: 2}\nshares:\n  - {name: a, limits: {gpu: 2}, strategy: LEND, borow_limit: 3}\n";
        let e = parse(src, Path::new("c.yaml")).unwrap_err().to_string();
        assert!(e.contains("borow_limit"), "{e}");
    }
}
