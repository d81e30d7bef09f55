//! Interruption contracts (issue 19, item 1), qm extensions carried by tags so that the AWS
//! shapes stay as the model has them:
//!
//! * a job queue defines its classes: `qm:class.<name>` = `interruptible` or
//!   `non-interruptible`, optionally followed by `,max-priority=<0..9999>`;
//! * a quota share names its default class (`qm:default-class`) and may restrict its jobs to
//!   some classes (`qm:classes`, comma-separated; absent = every class of the queue);
//! * a job picks its class with `qm:class`, else gets its share's default, else has none
//!   (interruptible, as every job before classes).
//!
//! A job of a non-interruptible class runs only within its share's own quota and is never
//! preempted (the core's rules, docs/scheduling.md).

use std::collections::BTreeMap;

use crate::ApiError;

/// Job-queue tag prefix: `qm:class.<name>` defines the class `<name>`.
pub const TAG_CLASS_PREFIX: &str = "qm:class.";
/// Job tag: the job's class.
pub const TAG_CLASS: &str = "qm:class";
/// How a running job's `statusReason` ends when it may not be interrupted (`qm plan` reads
/// it to tell which running jobs a lowered limit cannot preempt).
pub const FIRM_NOTE: &str = "its class may not be interrupted";
/// How a running job's `statusReason` ends when its class may not borrow yet (no verified
/// resume): like [`FIRM_NOTE`], such a job is not taken back by a reclaim or a lowered limit.
pub const UNVERIFIED_NOTE: &str = "its class borrows only after a verified resume";
/// Quota-share tag: the class of the share's jobs that name none.
pub const TAG_DEFAULT_CLASS: &str = "qm:default-class";
/// Quota-share tag: the classes the share's jobs may use, comma-separated.
pub const TAG_CLASSES: &str = "qm:classes";

/// A class as its queue defines it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassDef {
    /// Whether its jobs may be preempted (and borrow).
    pub interruptible: bool,
    /// The highest scheduling priority its jobs may have.
    pub max_priority: Option<u32>,
    /// When its (interruptible) jobs may borrow.
    pub borrow: BorrowRule,
}

/// When the jobs of an interruptible class may run on borrowed capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BorrowRule {
    /// Whenever their share may borrow.
    Always,
    /// Only once one of the class's jobs was seen `resumed` after a preemption (a reclaim or
    /// a drill) in the last `verify_days` days.
    AfterVerifiedResume {
        /// How long a verified resume counts, in days.
        verify_days: u32,
    },
}

/// How long a verified resume counts when a class does not say (`verify-days`).
pub const DEFAULT_VERIFY_DAYS: u32 = 30;

impl BorrowRule {
    /// How long a verified resume counts, in milliseconds; `None` for [`BorrowRule::Always`].
    pub fn verify_ms(self) -> Option<i64> {
        match self {
            BorrowRule::Always => None,
            BorrowRule::AfterVerifiedResume { verify_days } => {
                Some(i64::from(verify_days) * 86_400_000)
            }
        }
    }
}

/// The class a submitted job gets: its name and definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobClass {
    /// The class's name.
    pub name: String,
    /// Its definition.
    pub def: ClassDef,
}

fn fail(message: String) -> ApiError {
    ApiError::client(message)
}

/// A class name: 1 to 64 letters, digits, `_` and `-`.
pub fn is_class_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses a `qm:class.<name>` value: `interruptible` or `non-interruptible`, then optional
/// `,max-priority=N`, `,borrow=always|after-verified-resume` and `,verify-days=N`.
pub fn class_def(field: &str, value: &str) -> Result<ClassDef, ApiError> {
    let bad = |why: &str| {
        fail(format!(
            "{field} is '{value}': {why}; give interruptible or non-interruptible, optionally followed by ,max-priority=N (0 to 9999), ,borrow=always or ,borrow=after-verified-resume, and ,verify-days=N (1 to 3650)"
        ))
    };
    let mut parts = value.split(',').map(str::trim);
    let interruptible = match parts.next() {
        Some("interruptible") => true,
        Some("non-interruptible") => false,
        _ => return Err(bad("it must start with the class's kind")),
    };
    let (mut max_priority, mut after_resume, mut verify_days) = (None, None, None);
    for part in parts {
        let number = |n: &str, max: u32| n.parse::<u32>().ok().filter(|n| *n <= max);
        match part.split_once('=') {
            Some(("max-priority", n)) if max_priority.is_none() => {
                max_priority = Some(number(n, 9999).ok_or_else(|| bad("bad max-priority"))?);
            }
            Some(("borrow", b)) if after_resume.is_none() => {
                after_resume = Some(match b {
                    "always" => false,
                    "after-verified-resume" => true,
                    _ => return Err(bad("bad borrow")),
                });
            }
            Some(("verify-days", n)) if verify_days.is_none() => {
                let days = number(n, 3650).filter(|d| *d >= 1);
                verify_days = Some(days.ok_or_else(|| bad("bad verify-days"))?);
            }
            _ => return Err(bad(&format!("'{part}' is not understood (or given twice)"))),
        }
    }
    let borrow = match (after_resume, verify_days) {
        (Some(true), days) => BorrowRule::AfterVerifiedResume {
            verify_days: days.unwrap_or(DEFAULT_VERIFY_DAYS),
        },
        (_, Some(_)) => return Err(bad("verify-days needs borrow=after-verified-resume")),
        _ => BorrowRule::Always,
    };
    if !interruptible && borrow != BorrowRule::Always {
        return Err(bad("a non-interruptible class never borrows"));
    }
    Ok(ClassDef {
        interruptible,
        max_priority,
        borrow,
    })
}

/// Checks a job queue's class definitions among its tags.
pub fn queue_class_tags(field: &str, tags: &BTreeMap<String, String>) -> Result<(), ApiError> {
    for (key, value) in tags {
        if let Some(name) = key.strip_prefix(TAG_CLASS_PREFIX) {
            if !is_class_name(name) {
                return Err(fail(format!(
                    "{field}.{key}: '{name}' is not a class name; use 1-64 letters, digits, _ and -"
                )));
            }
            class_def(&format!("{field}.{key}"), value)?;
        }
    }
    Ok(())
}

/// Checks a quota share's class tags: a class name, and a list of them.
pub fn share_class_tags(field: &str, tags: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if let Some(v) = tags.get(TAG_DEFAULT_CLASS) {
        if !is_class_name(v) {
            return Err(fail(format!(
                "{field}.{TAG_DEFAULT_CLASS} is '{v}': give a class name (1-64 letters, digits, _ and -) that the job queue defines"
            )));
        }
    }
    if let Some(v) = tags.get(TAG_CLASSES) {
        if let Some(bad) = v.split(',').map(str::trim).find(|c| !is_class_name(c)) {
            return Err(fail(format!(
                "{field}.{TAG_CLASSES}: '{bad}' is not a class name; list class names separated by commas"
            )));
        }
    }
    Ok(())
}

/// The classes a queue's tags define, by name.
pub fn defined(queue_tags: &BTreeMap<String, String>) -> BTreeMap<String, ClassDef> {
    queue_tags
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix(TAG_CLASS_PREFIX)?;
            Some((name.to_string(), class_def("", v).ok()?))
        })
        .collect()
}

/// The class of a job submitted with `job_tags` to a share with `share_tags` of a queue with
/// `queue_tags` at `priority`: refused, naming what the share and queue allow, when the class
/// is unknown, not allowed in the share, or the priority is above the class's maximum.
pub fn resolve(
    queue: &str,
    share: &str,
    queue_tags: &BTreeMap<String, String>,
    share_tags: &BTreeMap<String, String>,
    job_tags: Option<&BTreeMap<String, String>>,
    priority: i32,
) -> Result<Option<JobClass>, ApiError> {
    let named = job_tags.and_then(|t| t.get(TAG_CLASS));
    let Some(name) = named.or_else(|| share_tags.get(TAG_DEFAULT_CLASS)) else {
        return Ok(None);
    };
    let field = if named.is_some() {
        format!("tags.{TAG_CLASS}")
    } else {
        format!("quota share {share}'s {TAG_DEFAULT_CLASS}")
    };
    let classes = defined(queue_tags);
    let allowed: Vec<&str> = match share_tags.get(TAG_CLASSES) {
        Some(list) => list.split(',').map(str::trim).collect(),
        None => classes.keys().map(String::as_str).collect(),
    };
    let Some(def) = classes.get(name.as_str()) else {
        return Err(fail(format!(
            "{field}: job queue '{queue}' defines no class '{name}'; quota share '{share}' may use: {}",
            list_or_none(&allowed)
        )));
    };
    if !allowed.contains(&name.as_str()) {
        return Err(fail(format!(
            "{field}: quota share '{share}' does not allow class '{name}'; it may use: {} ({TAG_CLASSES})",
            list_or_none(&allowed)
        )));
    }
    if let Some(max) = def.max_priority {
        if priority > max as i32 {
            return Err(fail(format!(
                "schedulingPriority: {priority} is above the maximum of class '{name}' ({max}); submit at {max} or lower"
            )));
        }
    }
    Ok(Some(JobClass {
        name: name.clone(),
        def: def.clone(),
    }))
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none (the queue defines no classes: tags qm:class.<name>)".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_class_definition_is_interruptible_or_not_with_an_optional_maximum_priority() {
        let def = |v| class_def("f", v);
        assert!(def("interruptible").unwrap().interruptible);
        let release = def("non-interruptible, max-priority=500").unwrap();
        assert_eq!(
            (release.interruptible, release.max_priority),
            (false, Some(500))
        );
        for bad in [
            "",
            "yes",
            "interruptible,max-priority=10000",
            "interruptible,x=1",
            "interruptible,max-priority=1,z",
        ] {
            assert!(def(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_class_may_borrow_only_after_a_verified_resume_for_so_many_days() {
        let def = |v| class_def("f", v);
        assert_eq!(def("interruptible").unwrap().borrow, BorrowRule::Always);
        assert_eq!(
            def("interruptible,borrow=after-verified-resume")
                .unwrap()
                .borrow,
            BorrowRule::AfterVerifiedResume { verify_days: 30 }
        );
        let seven = def("interruptible,borrow=after-verified-resume,verify-days=7").unwrap();
        assert_eq!(seven.borrow.verify_ms(), Some(7 * 86_400_000));
        for (bad, why) in [
            (
                "interruptible,verify-days=7",
                "verify-days needs borrow=after-verified-resume",
            ),
            (
                "non-interruptible,borrow=after-verified-resume",
                "never borrows",
            ),
            ("interruptible,borrow=sometimes", "bad borrow"),
            ("interruptible,borrow=always,borrow=always", "given twice"),
            (
                "interruptible,borrow=after-verified-resume,verify-days=0",
                "bad verify-days",
            ),
        ] {
            let e = def(bad).unwrap_err();
            assert!(e.message().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_job_gets_its_named_class_or_its_shares_default_within_what_the_share_allows() {
        let queue = tags(&[
            ("qm:class.exploratory", "interruptible"),
            ("qm:class.release", "non-interruptible,max-priority=500"),
        ]);
        let share = tags(&[
            ("qm:default-class", "exploratory"),
            ("qm:classes", "exploratory,release"),
        ]);
        let job = tags(&[("qm:class", "release")]);
        let got = resolve("q", "s", &queue, &share, Some(&job), 10)
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.name.as_str(), got.def.interruptible),
            ("release", false)
        );
        let default = resolve("q", "s", &queue, &share, None, 10)
            .unwrap()
            .unwrap();
        assert_eq!(default.name, "exploratory");
        assert_eq!(
            resolve("q", "s", &queue, &tags(&[]), None, 10).unwrap(),
            None
        );

        let err = resolve(
            "q",
            "s",
            &queue,
            &share,
            Some(&tags(&[("qm:class", "nightly")])),
            0,
        )
        .unwrap_err();
        assert!(
            err.message().contains("defines no class 'nightly'"),
            "{err}"
        );
        assert!(
            err.message().contains("may use: exploratory, release"),
            "{err}"
        );
        let narrow = tags(&[("qm:classes", "exploratory")]);
        let err = resolve("q", "s", &queue, &narrow, Some(&job), 0).unwrap_err();
        assert!(
            err.message().contains("does not allow class 'release'"),
            "{err}"
        );
        let err = resolve("q", "s", &queue, &share, Some(&job), 501).unwrap_err();
        assert!(
            err.message()
                .starts_with("schedulingPriority: 501 is above"),
            "{err}"
        );
    }
}
