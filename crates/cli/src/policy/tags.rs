//! The quota-share tags a cluster file controls: the `qm:` extensions that the server reads as
//! a share's permissions (`qm:submitters`, `qm:leads`, `qm:max-priority`) and thrash protection
//! (`qm:min-runtime-seconds`, `qm:max-preemptions-per-hour`), its job classes
//! (`qm:default-class`, `qm:classes`), and its place in fair sharing (`qm:weight`,
//! `qm:group`). A share field the file leaves out is the tag absent, so `qm apply` removes
//! it; every other tag of a share (anyone's own keys) is the server's business and is left
//! alone. `qm:weight` and `qm:group` are the exception: a file that says nothing about fair
//! sharing (no `idle_assignment`, `fair_reclaim`, `groups` nor share `weight`) leaves the
//! weights alone, and one without `groups` leaves the groups alone, as with `admins`.

use std::collections::BTreeMap;

use qm_api::class::{TAG_CLASSES, TAG_CLASS_PREFIX, TAG_DEFAULT_CLASS};
use qm_api::validate::{
    TAG_FAIR_RECLAIM, TAG_GROUP, TAG_IDLE_ASSIGNMENT, TAG_LEADS, TAG_MAX_PREEMPTIONS,
    TAG_MAX_PRIORITY, TAG_MIN_RUNTIME, TAG_SUBMITTERS, TAG_WEIGHT,
};

use crate::scenario::ClassDecl;

use crate::scenario::ShareDecl;

/// Tag key -> value; only [`MANAGED`] keys.
pub type ShareTags = BTreeMap<String, String>;

/// The keys the file controls, in the order a plan lists them.
pub const MANAGED: [&str; 9] = [
    TAG_SUBMITTERS,
    TAG_LEADS,
    TAG_MAX_PRIORITY,
    TAG_MIN_RUNTIME,
    TAG_MAX_PREEMPTIONS,
    TAG_DEFAULT_CLASS,
    TAG_CLASSES,
    TAG_WEIGHT,
    TAG_GROUP,
];

/// The scheduling policy's tags a file controls, each only when the file has its key
/// (`idle_assignment`, `fair_reclaim`), in the order a plan lists them.
pub const POLICY_MANAGED: [&str; 2] = [TAG_IDLE_ASSIGNMENT, TAG_FAIR_RECLAIM];

/// What a policy tag means when absent: the server's default.
pub fn policy_default(key: &str) -> &'static str {
    if key == TAG_FAIR_RECLAIM {
        "false"
    } else {
        "FIFO"
    }
}

/// The policy's controlled tags as the server has them.
pub fn policy_managed(all: &BTreeMap<String, String>) -> ShareTags {
    all.iter()
        .filter(|(k, _)| POLICY_MANAGED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Which of a share's fair-sharing tags the file controls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FairKeys {
    /// `qm:weight`: the file says something about fair sharing.
    pub weight: bool,
    /// `qm:group`: the file has `groups`.
    pub group: bool,
}

/// The thrash-protection keys: the only ones the scheduler reads.
const PROTECTION: [&str; 2] = [TAG_MIN_RUNTIME, TAG_MAX_PREEMPTIONS];

/// The tags a declared share asks for: lists joined with `,` in file order, numbers in decimal,
/// an absent field no tag.
pub fn of_decl(share: &ShareDecl) -> ShareTags {
    let none = Vec::new();
    let lists = [
        (TAG_SUBMITTERS, &share.submitters),
        (TAG_LEADS, &share.leads),
        (TAG_CLASSES, share.classes.as_ref().unwrap_or(&none)),
    ];
    let numbers = [
        (TAG_MAX_PRIORITY, share.max_priority.map(u64::from)),
        (TAG_MIN_RUNTIME, share.min_runtime_seconds),
        (
            TAG_MAX_PREEMPTIONS,
            share.max_preemptions_per_hour.map(u64::from),
        ),
    ];
    let lists = lists
        .into_iter()
        .filter(|(_, l)| !l.is_empty())
        .map(|(k, l)| (k, l.join(",")));
    let numbers = numbers
        .into_iter()
        .filter_map(|(k, n)| n.map(|n| (k, n.to_string())));
    let default = share
        .default_class
        .as_ref()
        .map(|c| (TAG_DEFAULT_CLASS, c.clone()));
    lists
        .chain(numbers)
        .chain(default)
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// The job queue's class tags a file's `classes` ask for: `qm:class.<name>` -> its definition.
pub fn of_classes(classes: &[ClassDecl]) -> ShareTags {
    classes
        .iter()
        .map(|c| (format!("{TAG_CLASS_PREFIX}{}", c.name), c.tag_value()))
        .collect()
}

/// The class tags among a job queue's tags.
pub fn queue_classes(all: &BTreeMap<String, String>) -> ShareTags {
    all.iter()
        .filter(|(k, _)| k.starts_with(TAG_CLASS_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The controlled part of a share's tags as the server has them; the fair-sharing keys only
/// where the file controls them (`fair`), so that a file silent on them changes none.
pub fn managed(all: &BTreeMap<String, String>, fair: FairKeys) -> ShareTags {
    all.iter()
        .filter(|(k, _)| MANAGED.contains(&k.as_str()))
        .filter(|(k, _)| k.as_str() != TAG_WEIGHT || fair.weight)
        .filter(|(k, _)| k.as_str() != TAG_GROUP || fair.group)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What turns the server's controlled tags into the file's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagChanges {
    /// Keys to add or give a new value (TagResource).
    pub set: ShareTags,
    /// Keys to remove (UntagResource).
    pub remove: Vec<String>,
}

impl TagChanges {
    /// From the server's controlled tags to the file's.
    pub fn between(live: &ShareTags, desired: &ShareTags) -> TagChanges {
        TagChanges {
            set: desired
                .iter()
                .filter(|(k, v)| live.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            remove: live
                .keys()
                .filter(|k| !desired.contains_key(*k))
                .cloned()
                .collect(),
        }
    }

    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

/// The tags a what-if gets for a share: its protection with every key present (`0` = off),
/// since a what-if share without tags would keep the server's own, and its weight and group
/// when the file gives them (the request's `keepTags` keeps the server's where it is silent).
pub fn for_what_if(desired: &ShareTags) -> ShareTags {
    PROTECTION
        .iter()
        .map(|&k| {
            let v = desired.get(k).cloned().unwrap_or_else(|| "0".into());
            (k.to_string(), v)
        })
        .chain(
            [TAG_WEIGHT, TAG_GROUP]
                .into_iter()
                .filter_map(|k| desired.get(k).map(|v| (k.to_string(), v.clone()))),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> ShareTags {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn absent_fields_are_absent_tags_and_lists_keep_the_file_s_order() {
        let src = "environment: {gpu: 1}
shares:
  - {name: a, limits: {gpu: 1}, strategy: LEND, submitters: [group:research, alice], max_priority: 0, min_runtime_seconds: 600}
";
        let file = crate::cluster::parse(src, std::path::Path::new("c.yaml")).unwrap();
        assert_eq!(
            of_decl(&file.shares[0]),
            tags(&[
                ("qm:submitters", "group:research,alice"),
                ("qm:max-priority", "0"),
                ("qm:min-runtime-seconds", "600"),
            ])
        );
    }

    #[test]
    fn only_the_controlled_keys_are_compared_and_changed() {
        let server = managed(
            &tags(&[
                ("team", "ml"),
                ("qm:leads", "bob"),
                ("qm:max-priority", "50"),
                ("qm:weight", "3"),
                ("qm:group", "research"),
            ]),
            FairKeys::default(),
        );
        assert_eq!(
            server,
            tags(&[("qm:leads", "bob"), ("qm:max-priority", "50")])
        );
        let file = tags(&[
            ("qm:leads", "bob"),
            ("qm:max-priority", "60"),
            ("qm:submitters", "x"),
        ]);
        let c = TagChanges::between(&server, &file);
        assert_eq!(
            c.set,
            tags(&[("qm:max-priority", "60"), ("qm:submitters", "x")])
        );
        assert!(c.remove.is_empty());
        let c = TagChanges::between(&server, &ShareTags::new());
        assert_eq!(c.remove, ["qm:leads", "qm:max-priority"]);
        assert!(TagChanges::between(&server, &server).is_empty());
    }

    #[test]
    fn a_what_if_names_every_protection_so_that_a_removed_one_is_off() {
        let file = tags(&[("qm:leads", "bob"), ("qm:min-runtime-seconds", "60")]);
        assert_eq!(
            for_what_if(&file),
            tags(&[
                ("qm:min-runtime-seconds", "60"),
                ("qm:max-preemptions-per-hour", "0")
            ])
        );
    }
}
