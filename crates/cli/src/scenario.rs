//! The scenario file format (see `docs/scenarios.md`): serde types and parsing.
//!
//! A scenario file holds one or more YAML documents (separated by `---`) or one JSON object;
//! each document is one [`Scenario`]. Parsing is strict: every struct denies unknown keys, and
//! whatever can be checked without running the scheduler is checked here, so that a typo is a
//! malformed file (with the key path and the line) rather than a puzzling scenario failure.
//!
//! Checks that need context run inside the deserializer, so that serde_yaml_ng attaches the
//! location of the offending node: a share's `borrow_limit` against its strategy
//! ([`ShareDecl`]), reason codes against [`PendingReason::CODES`] ([`ReasonCode`]), and every
//! job a step names against the jobs earlier steps submitted (the step list's own visitor).
//! The cross-references between `shares` and `steps` are checked after parsing, because the
//! two keys may come in either order; such an error is then located by reading the document
//! again up to the offending entry, so that it too carries the key path and the line.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use qm_core::{GroupSpec, IdleAssignment, PendingReason, QueueSpec, ShareSpec, Strategy};

use crate::error::Error;

/// One scenario: a service environment, its quota shares, and the steps to play.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What the scenario shows, in words; printed in the PASS / FAIL line.
    pub name: String,
    /// Instance type -> the service environment's maximum instances.
    pub environment: BTreeMap<String, u32>,
    /// The quota shares of the scenario's one queue, created in this order.
    #[serde(deserialize_with = "checked_seq")]
    pub shares: Vec<ShareDecl>,
    /// What happens, in order.
    #[serde(deserialize_with = "deserialize_steps")]
    pub steps: Vec<Step>,
    /// A cluster file's server admins (`qm plan`/`qm apply`): read and checked, so that a
    /// scenario may carry its cluster's, then ignored (the steps are not signed by anyone).
    #[serde(default, deserialize_with = "admins")]
    pub admins: Option<Vec<String>>,
    /// Job classes, as in a cluster file: a share's `default_class` decides whether its jobs
    /// that do not say `interruptible` may be interrupted.
    #[serde(default)]
    pub classes: Vec<ClassDecl>,
    /// How idle capacity goes to waiting borrowers: `FIFO` (default) or `FAIR_SHARE`.
    #[serde(default)]
    pub idle_assignment: IdleAssignment,
    /// Whether a waiting borrower may preempt other shares' borrowed jobs for fairness.
    #[serde(default)]
    pub fair_reclaim: bool,
    /// Groups of shares (departments).
    #[serde(default)]
    pub groups: Vec<GroupDecl>,
}

impl Scenario {
    /// The scenario's one queue, as the core takes it.
    pub fn queue_spec(&self, name: &str) -> QueueSpec {
        QueueSpec {
            name: name.into(),
            environment: self.environment.clone(),
            idle_assignment: self.idle_assignment,
            fair_reclaim: self.fair_reclaim,
            groups: self.groups.iter().map(GroupDecl::spec).collect(),
        }
    }
}

/// A group of shares under `groups` (a department): its members lend to each other first,
/// its `limits` cap what they hold together, its `weight` counts between groups under
/// `FAIR_SHARE`. On a server: `PUT /qm/v1/queues/{queue}/groups`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDecl {
    /// Unique among the groups.
    pub name: String,
    /// Member shares, by name; a share is in at most one group.
    pub shares: Vec<String>,
    /// Instance type -> the most instances the members may hold together.
    #[serde(default)]
    pub limits: BTreeMap<String, u32>,
    /// Weight between groups (and ungrouped shares) under `FAIR_SHARE`, 1 to 10000
    /// (default 1).
    #[serde(default)]
    pub weight: Option<u32>,
}

impl GroupDecl {
    /// The core's view of the group.
    pub fn spec(&self) -> GroupSpec {
        GroupSpec {
            name: self.name.clone(),
            shares: self.shares.clone(),
            limits: self.limits.clone(),
            weight: self.weight.unwrap_or(1),
        }
    }
}

/// Checks `groups` against the shares and the environment, and every share's `weight`:
/// unique group names, members that are declared shares in at most one group, limits on
/// instance types of the environment, weights from 1 to 10000.
pub fn check_groups(
    groups: &[GroupDecl],
    shares: &[ShareDecl],
    environment: &BTreeMap<String, u32>,
) -> Result<(), String> {
    for (i, s) in shares.iter().enumerate() {
        check_weight(&format!("shares[{i}]"), s.weight)?;
    }
    let mut names = BTreeSet::new();
    let mut member_of: BTreeMap<&str, &str> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        if !qm_api::class::is_class_name(&g.name) {
            return Err(format!(
                "groups[{i}].name: `{}` is not a group name: use 1 to 64 letters, digits, `_` and `-`",
                g.name
            ));
        }
        if !names.insert(g.name.as_str()) {
            return Err(format!(
                "groups[{i}].name: group `{}` is declared twice",
                g.name
            ));
        }
        check_group_members(i, g, shares, &mut member_of)?;
        if shares.iter().any(|s| s.name == g.name) {
            return Err(format!(
                "groups[{i}].name: `{}` is also a share's name: give the group another name",
                g.name
            ));
        }
        check_group_limits(i, g, environment)?;
        check_weight(&format!("groups[{i}]"), g.weight)?;
    }
    Ok(())
}

/// A share's or group's `weight` (at `path`), when given, is from 1 to
/// [`qm_api::validate::MAX_WEIGHT`].
fn check_weight(path: &str, weight: Option<u32>) -> Result<(), String> {
    let max = qm_api::validate::MAX_WEIGHT;
    if let Some(w) = weight.filter(|w| !(1..=max).contains(w)) {
        return Err(format!(
            "{path}.weight: {w} is out of range: give a whole number from 1 to {max} (default 1)"
        ));
    }
    Ok(())
}

/// Group `i` names some members, each a declared share not in an earlier group
/// (`member_of`, which gains them).
fn check_group_members<'a>(
    i: usize,
    g: &'a GroupDecl,
    shares: &[ShareDecl],
    member_of: &mut BTreeMap<&'a str, &'a str>,
) -> Result<(), String> {
    if g.shares.is_empty() {
        return Err(format!(
            "groups[{i}].shares: the list is empty: name the shares of group `{}`",
            g.name
        ));
    }
    for (j, m) in g.shares.iter().enumerate() {
        if !shares.iter().any(|s| &s.name == m) {
            let declared = shares
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(format!(
                "groups[{i}].shares[{j}]: `{m}` is not one of the shares ({declared})"
            ));
        }
        if let Some(other) = member_of.insert(m, &g.name) {
            return Err(format!(
                "groups[{i}].shares[{j}]: share `{m}` is already in group `{other}`; a share belongs to at most one group"
            ));
        }
    }
    Ok(())
}

/// Group `i`'s limits are within what a server allows, on instance types of the environment.
fn check_group_limits(
    i: usize,
    g: &GroupDecl,
    environment: &BTreeMap<String, u32>,
) -> Result<(), String> {
    let most = qm_api::qm::MAX_GROUP_LIMIT;
    if let Some((unit, n)) = g.limits.iter().find(|(_, n)| i64::from(**n) > most) {
        return Err(format!(
            "groups[{i}].limits.{unit}: {n} is more than a server allows, {most}"
        ));
    }
    for unit in g.limits.keys() {
        if !environment.contains_key(unit) {
            return Err(format!(
                "groups[{i}].limits.{unit}: `{unit}` is not an instance type of the environment ({})",
                environment.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(())
}

/// A share's strategy, spelled as in AWS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ShareStrategy {
    /// Never lends, never borrows.
    Reserve,
    /// Lends idle capacity, never borrows.
    Lend,
    /// Lends idle capacity and borrows up to the borrow limit.
    LendAndBorrow,
}

impl From<ShareStrategy> for Strategy {
    fn from(s: ShareStrategy) -> Self {
        match s {
            ShareStrategy::Reserve => Strategy::Reserve,
            ShareStrategy::Lend => Strategy::Lend,
            ShareStrategy::LendAndBorrow => Strategy::LendAndBorrow,
        }
    }
}

impl fmt::Display for ShareStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Strategy::from(*self).as_str())
    }
}

/// A share's state, spelled as in AWS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ShareState {
    /// Accepts new jobs.
    Enabled,
    /// Accepts no new jobs; what it has still runs, and it still lends.
    Disabled,
}

impl fmt::Display for ShareState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShareState::Enabled => "ENABLED",
            ShareState::Disabled => "DISABLED",
        })
    }
}

/// A quota share as declared under `shares`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareDecl {
    /// Unique within the scenario.
    pub name: String,
    /// Instance type -> entitlement.
    pub limits: BTreeMap<String, u32>,
    /// What the share does with idle capacity.
    pub strategy: ShareStrategy,
    /// Percent of the entitlement that may be borrowed; absent = -1 (unlimited). Only allowed
    /// with LEND_AND_BORROW.
    #[serde(default)]
    pub borrow_limit: Option<i32>,
    /// Whether higher-priority jobs of the share preempt strictly lower-priority ones.
    #[serde(default)]
    pub in_share_preemption: bool,
    /// ENABLED (default) or DISABLED.
    #[serde(default = "enabled")]
    pub state: ShareState,
    /// Thrash protection: its jobs are not preempted before they have run this long (the
    /// server's share tag `qm:min-runtime-seconds`).
    #[serde(default)]
    pub min_runtime_seconds: Option<u64>,
    /// Thrash protection: a job preempted this many times in the last hour is not preempted
    /// again until the oldest of those is an hour old (tag `qm:max-preemptions-per-hour`).
    #[serde(default)]
    pub max_preemptions_per_hour: Option<u32>,
    /// Who may submit to the share: principal names and `group:<name>` entries (the server's
    /// share tag `qm:submitters`); absent = every authenticated principal. A permission, not a
    /// scheduling setting: `qm check` and `qm simulate` ignore it.
    #[serde(default, deserialize_with = "principals")]
    pub submitters: Vec<String>,
    /// Who may change the priority of or terminate any job of the share, and submit to it at
    /// any priority (tag `qm:leads`); same syntax. Ignored by `qm check` and `qm simulate`.
    #[serde(default, deserialize_with = "principals")]
    pub leads: Vec<String>,
    /// The highest scheduling priority, 0..=9999, that submitters who are not leads may use
    /// (tag `qm:max-priority`); absent = no cap. Ignored by `qm check` and `qm simulate`.
    #[serde(default, deserialize_with = "max_priority")]
    pub max_priority: Option<u32>,
    /// The class of its jobs that name none (tag `qm:default-class`): one of the file's
    /// `classes`. Absent = jobs without a class are interruptible.
    #[serde(default)]
    pub default_class: Option<String>,
    /// The classes its jobs may use (tag `qm:classes`); absent = every class of the file.
    #[serde(default)]
    pub classes: Option<Vec<String>>,
    /// Its weight under `FAIR_SHARE` idle assignment, 1 to 10000 (tag `qm:weight`; default 1).
    #[serde(default)]
    pub weight: Option<u32>,
}

/// A job class under the top-level `classes` (issue 19's interruption contracts; on a server
/// the job queue's tag `qm:class.<name>`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassDecl {
    /// 1 to 64 letters, digits, `_` and `-`.
    pub name: String,
    /// Whether its jobs may be preempted and borrow.
    pub interruptible: bool,
    /// The highest scheduling priority its jobs may have, 0..=9999.
    #[serde(default)]
    pub max_priority: Option<u32>,
    /// When its jobs may borrow: `always` (the default) or `after-verified-resume`.
    #[serde(default)]
    pub borrow: BorrowWhen,
    /// With `after-verified-resume`: how long a verified resume counts, 1..=3650 days
    /// (default 30).
    #[serde(default)]
    pub verify_days: Option<u32>,
}

/// A class's `borrow`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BorrowWhen {
    /// Whenever the share may borrow.
    #[default]
    Always,
    /// Only once one of the class's jobs was seen resuming from its checkpoint.
    AfterVerifiedResume,
}

impl ClassDecl {
    /// The value of its job-queue tag `qm:class.<name>`.
    pub fn tag_value(&self) -> String {
        let kind = if self.interruptible {
            "interruptible"
        } else {
            "non-interruptible"
        };
        let mut value = kind.to_string();
        if let Some(p) = self.max_priority {
            value.push_str(&format!(",max-priority={p}"));
        }
        if self.borrow == BorrowWhen::AfterVerifiedResume {
            value.push_str(",borrow=after-verified-resume");
        }
        if let Some(d) = self.verify_days {
            value.push_str(&format!(",verify-days={d}"));
        }
        value
    }
}

/// Checks the top-level `classes` and what the shares say of them: valid unique names,
/// priorities within 0..=9999, and every share's `default_class` and `classes` naming declared
/// classes (the default among the allowed ones).
pub fn check_classes(classes: &[ClassDecl], shares: &[ShareDecl]) -> Result<(), String> {
    let mut names = BTreeSet::new();
    for (i, c) in classes.iter().enumerate() {
        check_class(i, c, &mut names)?;
    }
    check_share_classes(&names, shares)
}

/// Class `i` has a valid name not in `names` (which gains it), and settings that fit
/// together.
fn check_class<'a>(
    i: usize,
    c: &'a ClassDecl,
    names: &mut BTreeSet<&'a str>,
) -> Result<(), String> {
    if !qm_api::class::is_class_name(&c.name) {
        return Err(format!(
            "classes[{i}].name: `{}` is not a class name: use 1 to 64 letters, digits, `_` and `-`",
            c.name
        ));
    }
    if !names.insert(c.name.as_str()) {
        return Err(format!(
            "classes[{i}].name: class `{}` is declared twice",
            c.name
        ));
    }
    if let Some(p) = c.max_priority.filter(|&p| p > 9999) {
        return Err(format!(
            "classes[{i}].max_priority: {p} is out of range: give 0 to 9999"
        ));
    }
    if c.borrow == BorrowWhen::AfterVerifiedResume && !c.interruptible {
        return Err(format!(
            "classes[{i}].borrow: class `{}` may not be interrupted, so it never borrows: leave `borrow` out",
            c.name
        ));
    }
    if let Some(d) = c.verify_days {
        if c.borrow != BorrowWhen::AfterVerifiedResume {
            return Err(format!(
                "classes[{i}].verify_days: only a class with `borrow: after-verified-resume` verifies resumes"
            ));
        }
        if !(1..=3650).contains(&d) {
            return Err(format!(
                "classes[{i}].verify_days: {d} is out of range: give 1 to 3650"
            ));
        }
    }
    Ok(())
}

/// Every share's `classes` and `default_class` name declared classes (`names`), the default
/// among the allowed ones.
fn check_share_classes(names: &BTreeSet<&str>, shares: &[ShareDecl]) -> Result<(), String> {
    let declared = || names.iter().copied().collect::<Vec<_>>().join(", ");
    let unknown = |path: String, name: &str| {
        if names.is_empty() {
            format!("{path}: `{name}` is not a class: declare it under a top-level `classes:` list")
        } else {
            format!(
                "{path}: `{name}` is not one of the classes ({})",
                declared()
            )
        }
    };
    for (i, s) in shares.iter().enumerate() {
        if s.classes.as_ref().is_some_and(Vec::is_empty) {
            return Err(format!(
                "shares[{i}].classes: the list is empty: leave the key out to allow every class"
            ));
        }
        for (j, c) in s.classes.iter().flatten().enumerate() {
            if !names.contains(c.as_str()) {
                return Err(unknown(format!("shares[{i}].classes[{j}]"), c));
            }
        }
        if let Some(d) = &s.default_class {
            if !names.contains(d.as_str()) {
                return Err(unknown(format!("shares[{i}].default_class"), d));
            }
            if s.classes
                .as_ref()
                .is_some_and(|allowed| !allowed.contains(d))
            {
                return Err(format!(
                    "shares[{i}].default_class: `{d}` is not among the share's classes; add it to `classes` or pick one of them"
                ));
            }
        }
    }
    Ok(())
}

fn enabled() -> ShareState {
    ShareState::Enabled
}

impl ShareDecl {
    /// The core's view of the declared share.
    pub fn spec(&self) -> ShareSpec {
        ShareSpec {
            name: self.name.clone(),
            limits: self.limits.clone(),
            strategy: self.strategy.into(),
            borrow_limit_percent: self.borrow_limit.unwrap_or(-1),
            in_share_preemption: self.in_share_preemption,
            enabled: self.state == ShareState::Enabled,
            min_runtime_ms: self.min_runtime_seconds.unwrap_or(0).saturating_mul(1000),
            max_preemptions_per_hour: self.max_preemptions_per_hour.unwrap_or(0),
            weight: self.weight.unwrap_or(1),
        }
    }
}

/// The longest principal name (the part after `group:` for a group).
pub const MAX_PRINCIPAL_CHARS: usize = 64;

/// The highest scheduling priority (`max_priority` at most this).
pub const MAX_PRIORITY: u32 = qm_api::validate::MAX_SCHEDULING_PRIORITY as u32;

/// The longest tag value: a `submitters` or `leads` list joined with commas must fit.
const MAX_TAG_VALUE_CHARS: usize = 256;

/// Checks one `submitters` / `leads` entry: a principal name of 1 to 64 letters, digits and
/// `_ . @ -`, or `group:` and such a name.
pub fn check_principal(entry: &str) -> Result<(), String> {
    let name = entry.strip_prefix("group:").unwrap_or(entry);
    if qm_api::validate::is_principal_name(name) {
        Ok(())
    } else {
        Err(format!(
            "`{entry}` is not a principal: give a name of 1 to {MAX_PRINCIPAL_CHARS} letters, digits and `_ . @ -`, or `group:` and such a name"
        ))
    }
}

/// How a list of principals is refused beyond its entries: what an empty one should be
/// instead, and the most characters it may take joined with commas (a share tag's bound).
struct ListRules {
    empty: &'static str,
    max_joined_chars: Option<usize>,
}

/// `submitters` and `leads`: they become share tags.
const SHARE_LIST: ListRules = ListRules {
    empty: "the list is empty: leave the key out to let every authenticated principal in, or name at least one principal",
    max_joined_chars: Some(MAX_TAG_VALUE_CHARS),
};

/// A cluster file's `admins`: the server's list, which an absent key leaves alone.
const ADMIN_LIST: ListRules = ListRules {
    empty: "the list is empty: leave the key out to leave the server's admins as they are, or name at least one admin",
    max_joined_chars: None,
};

/// A `submitters` or `leads` list: each entry checked where it stands (so that the error names
/// `shares[i].submitters[j]`), no entry twice, not empty (leave the key out for "anyone"), and
/// short enough for the tag it becomes.
fn principals<'de, D: de::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(PrincipalList(&SHARE_LIST))
}

/// A cluster file's `admins`: principal names and `group:` entries checked as `submitters`
/// (the error names `admins[i]`), no entry twice, not empty (leave the key out to leave the
/// server's list alone).
pub(crate) fn admins<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    d.deserialize_seq(PrincipalList(&ADMIN_LIST)).map(Some)
}

/// One entry of a principal list, checked against those before it.
struct PrincipalEntry<'s>(&'s [String]);

impl<'de> DeserializeSeed<'de> for PrincipalEntry<'_> {
    type Value = String;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for PrincipalEntry<'_> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a principal name or `group:NAME`")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
        check_principal(s).map_err(E::custom)?;
        if self.0.iter().any(|e| e == s) {
            return Err(E::custom(format!(
                "`{s}` is listed twice: list each principal once"
            )));
        }
        Ok(s.to_string())
    }
}

/// A list of principals under `rules`.
struct PrincipalList(&'static ListRules);

impl<'de> Visitor<'de> for PrincipalList {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of principal names and `group:NAME` entries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut out: Vec<String> = Vec::new();
        while let Some(entry) = seq.next_element_seed(PrincipalEntry(&out))? {
            out.push(entry);
        }
        if out.is_empty() {
            return Err(de::Error::custom(self.0.empty));
        }
        let joined = out.iter().map(|e| e.len() + 1).sum::<usize>() - 1;
        if let Some(max) = self.0.max_joined_chars.filter(|&max| joined > max) {
            return Err(de::Error::custom(format!(
                "the list is {joined} characters long joined with commas, and the share tag it becomes holds at most {max}: name a group instead of its members"
            )));
        }
        Ok(out)
    }
}

/// `max_priority`: 0..=9999, checked inside the visitor so that the error has its location.
fn max_priority<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = u32;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a priority from 0 to {MAX_PRIORITY}")
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<u32, E> {
            u32::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_PRIORITY)
                .ok_or_else(|| {
                    E::custom(format!(
                        "{n} is above the highest priority, {MAX_PRIORITY}: give 0 to {MAX_PRIORITY}"
                    ))
                })
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<u32, E> {
            match u64::try_from(n) {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::custom(format!(
                    "{n} is below the lowest priority, 0: give 0 to {MAX_PRIORITY}"
                ))),
            }
        }
    }
    // `deserialize_any`: asked for a u32, the parser refuses a negative number itself, with a
    // less helpful message.
    d.deserialize_any(V).map(Some)
}

/// One thing that happens in a scenario. In the file a step is a mapping with exactly one key,
/// the step's kind: `- submit: {...}`, `- advance: 60`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Submit a new job.
    Submit(Submit),
    /// Change a job's priority.
    UpdatePriority(UpdatePriority),
    /// The job's running attempt exits 0.
    Finish(JobRef),
    /// The job's running attempt exits non-zero.
    Fail(JobRef),
    /// The job reports a checkpoint at the current time.
    Checkpoint(JobRef),
    /// Terminate the job (TerminateServiceJob).
    Terminate(JobRef),
    /// This many seconds of scenario time pass.
    Advance(u64),
    /// Change some fields of a declared share.
    UpdateShare(ShareUpdate),
    /// Set a declared share's state to DISABLED.
    DisableShare(ShareRef),
    /// Change the queue's rules for idle capacity or its groups.
    UpdateQueue(QueueUpdate),
    /// Compare the state with what the scenario expects.
    Expect(Expect),
}

/// The `submit` step.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submit {
    /// A new job name; later steps refer to the job by it.
    pub job: String,
    /// A declared share.
    pub share: String,
    /// 0..=9999; default 0.
    #[serde(default)]
    pub priority: u32,
    /// The capacity unit.
    pub instance_type: String,
    /// Instances needed at once; default 1.
    #[serde(default = "one")]
    pub count: u32,
    /// Re-queues allowed after preemptions; absent = unlimited.
    #[serde(default)]
    pub preemption_retries: Option<u32>,
    /// Seconds an attempt may run at most (`MaxRuntimeInSeconds`); absent = unbounded.
    #[serde(default)]
    pub runtime_limit: Option<u64>,
    /// Whether the job may be interrupted; absent = as its share's `default_class` says, else
    /// true. A job that may not runs only within its share's own quota and is never preempted.
    #[serde(default)]
    pub interruptible: Option<bool>,
    /// Whether the job may borrow; absent = false when its share's `default_class` borrows
    /// only after a verified resume (`qm check` never sees one), else true.
    #[serde(default)]
    pub borrows: Option<bool>,
}

fn one() -> u32 {
    1
}

/// The `update_priority` step.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdatePriority {
    /// A submitted job.
    pub job: String,
    /// The new priority, 0..=9999.
    pub priority: u32,
}

/// A step that names one submitted job (`finish`, `fail`, `checkpoint`, `terminate`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRef {
    /// A submitted job.
    pub job: String,
}

/// A step that names one declared share (`disable_share`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareRef {
    /// A declared share.
    pub name: String,
}

/// The `update_queue` step: the fields given replace the queue's current ones (`groups`
/// replaces the whole list; a lowered group limit is reclaimed lazily, as a share's is).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueUpdate {
    /// New idle assignment.
    #[serde(default)]
    pub idle_assignment: Option<IdleAssignment>,
    /// New fair-reclaim setting.
    #[serde(default)]
    pub fair_reclaim: Option<bool>,
    /// New groups, replacing all the old ones.
    #[serde(default)]
    pub groups: Option<Vec<GroupDecl>>,
}

impl QueueUpdate {
    /// The queue's configuration after this update.
    pub fn apply(&self, spec: &QueueSpec) -> QueueSpec {
        let mut spec = spec.clone();
        if let Some(a) = self.idle_assignment {
            spec.idle_assignment = a;
        }
        if let Some(r) = self.fair_reclaim {
            spec.fair_reclaim = r;
        }
        if let Some(groups) = &self.groups {
            spec.groups = groups.iter().map(GroupDecl::spec).collect();
        }
        spec
    }
}

/// The `update_share` step: the fields given replace the share's current ones.
///
/// Like AWS's `resourceSharingConfiguration`, strategy and borrow limit go together: giving a
/// `strategy` without a `borrow_limit` resets the borrow limit to -1; giving only a
/// `borrow_limit` keeps the strategy, which must then be LEND_AND_BORROW.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareUpdate {
    /// A declared share.
    pub name: String,
    /// New limits, replacing all the old ones.
    #[serde(default)]
    pub limits: Option<BTreeMap<String, u32>>,
    /// New strategy.
    #[serde(default)]
    pub strategy: Option<ShareStrategy>,
    /// New borrow limit, percent or -1.
    #[serde(default)]
    pub borrow_limit: Option<i32>,
    /// New in-share preemption setting.
    #[serde(default)]
    pub in_share_preemption: Option<bool>,
    /// New state.
    #[serde(default)]
    pub state: Option<ShareState>,
}

impl Expect {
    /// Every job the expectation names, with the key naming it.
    fn job_refs(&self) -> Vec<(String, &str)> {
        let mut refs: Vec<(String, &str)> = Vec::new();
        for (key, set) in [
            ("running", &self.running),
            ("runnable", &self.runnable),
            ("preempted", &self.preempted),
            ("succeeded", &self.succeeded),
            ("failed", &self.failed),
        ] {
            for job in set.iter().flatten() {
                refs.push((format!("expect.{key}"), job.as_str()));
            }
        }
        for job in self.reason.iter().flat_map(|r| r.keys()) {
            refs.push(("expect.reason".into(), job.as_str()));
        }
        refs
    }
}

impl ShareUpdate {
    /// The share's configuration after this update.
    pub fn apply(&self, spec: &ShareSpec) -> ShareSpec {
        let mut spec = spec.clone();
        if let Some(limits) = &self.limits {
            spec.limits = limits.clone();
        }
        if let Some(strategy) = self.strategy {
            spec.strategy = strategy.into();
            spec.borrow_limit_percent = -1;
        }
        if let Some(b) = self.borrow_limit {
            spec.borrow_limit_percent = b;
        }
        if let Some(p) = self.in_share_preemption {
            spec.in_share_preemption = p;
        }
        if let Some(state) = self.state {
            spec.enabled = state == ShareState::Enabled;
        }
        spec
    }
}

/// The `expect` step. Every key is optional; an absent key is not checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Exactly the jobs holding capacity.
    #[serde(default)]
    pub running: Option<BTreeSet<String>>,
    /// Exactly the jobs waiting (RUNNABLE).
    #[serde(default)]
    pub runnable: Option<BTreeSet<String>>,
    /// Exactly the jobs preempted since the previous `expect` (or the start).
    #[serde(default)]
    pub preempted: Option<BTreeSet<String>>,
    /// Exactly the jobs that SUCCEEDED.
    #[serde(default)]
    pub succeeded: Option<BTreeSet<String>>,
    /// Exactly the jobs that FAILED.
    #[serde(default)]
    pub failed: Option<BTreeSet<String>>,
    /// Job -> the code of the reason it waits.
    #[serde(default)]
    pub reason: Option<BTreeMap<String, ReasonCode>>,
}

/// A pending-reason code, one of [`PendingReason::CODES`]; checked when the file is parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReasonCode(&'static str);

impl ReasonCode {
    /// The code, as [`PendingReason::code`] spells it.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::str::FromStr for ReasonCode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        PendingReason::CODES
            .iter()
            .find(|c| **c == s)
            .map(|c| ReasonCode(c))
            .ok_or_else(|| {
                format!(
                    "unknown reason code `{s}`, expected one of {}",
                    PendingReason::CODES.join(", ")
                )
            })
    }
}

impl<'de> Deserialize<'de> for ReasonCode {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ReasonCode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reason code such as OWN_QUOTA_FULL")
            }
            // Validating inside `visit_str` (not after `String::deserialize`) is what gets the
            // error the scalar's own location.
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ReasonCode, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl Step {
    /// The step's key in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Submit(_) => "submit",
            Step::UpdatePriority(_) => "update_priority",
            Step::Finish(_) => "finish",
            Step::Fail(_) => "fail",
            Step::Checkpoint(_) => "checkpoint",
            Step::Terminate(_) => "terminate",
            Step::Advance(_) => "advance",
            Step::UpdateShare(_) => "update_share",
            Step::DisableShare(_) => "disable_share",
            Step::UpdateQueue(_) => "update_queue",
            Step::Expect(_) => "expect",
        }
    }

    /// Every job the step refers to (a submit's new job excluded), with the key naming it.
    fn job_refs(&self) -> Vec<(String, &str)> {
        match self {
            Step::Submit(_)
            | Step::Advance(_)
            | Step::UpdateShare(_)
            | Step::DisableShare(_)
            | Step::UpdateQueue(_) => Vec::new(),
            Step::UpdatePriority(u) => vec![("update_priority.job".into(), u.job.as_str())],
            Step::Finish(j) | Step::Fail(j) | Step::Checkpoint(j) | Step::Terminate(j) => {
                vec![(format!("{}.job", self.kind()), j.job.as_str())]
            }
            Step::Expect(e) => e.job_refs(),
        }
    }

    /// Checks step `number` against the jobs submitted before it, and records a submission.
    fn check(&self, number: usize, submitted: &mut BTreeSet<String>) -> Result<(), String> {
        for (key, job) in self.job_refs() {
            if !submitted.contains(job) {
                return Err(format!(
                    "step {number}: {key} names job `{job}`, which no earlier step submits"
                ));
            }
        }
        match self {
            Step::Submit(s) => {
                let new = submitted.insert(s.job.clone());
                if !new {
                    return Err(format!(
                        "step {number}: submit.job `{}` was already submitted by an earlier step; every submit needs a new job name",
                        s.job
                    ));
                }
            }
            Step::UpdateShare(ShareUpdate {
                borrow_limit: Some(b),
                strategy,
                ..
            }) => {
                check_borrow_limit(*b, *strategy)
                    .map_err(|e| format!("step {number}: update_share.{e}"))?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// `borrow_limit` must be -1 or a percentage, and only goes with LEND_AND_BORROW (AWS rejects
/// it otherwise). `strategy` is `None` when the strategy is not known here.
fn check_borrow_limit(b: i32, strategy: Option<ShareStrategy>) -> Result<(), String> {
    if b < -1 {
        return Err(format!(
            "borrow_limit {b} is invalid: use -1 for unlimited or a percentage of at least 0"
        ));
    }
    match strategy {
        Some(s) if s != ShareStrategy::LendAndBorrow => Err(format!(
            "borrow_limit is only allowed with strategy LEND_AND_BORROW, and the strategy is {s}: remove borrow_limit or change the strategy"
        )),
        _ => Ok(()),
    }
}

/// A mapping that is checked as a whole once it is parsed. The check runs inside the
/// deserializer's `visit_map`, so that its error gets the mapping's key path and line.
pub(crate) trait CheckedMap {
    fn check(&self) -> Result<(), String>;
}

impl CheckedMap for ShareDecl {
    fn check(&self) -> Result<(), String> {
        match self.borrow_limit {
            Some(b) => check_borrow_limit(b, Some(self.strategy)),
            None => Ok(()),
        }
    }
}

struct CheckedSeed<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + CheckedMap> DeserializeSeed<'de> for CheckedSeed<T> {
    type Value = T;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: Deserialize<'de> + CheckedMap> Visitor<'de> for CheckedSeed<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let value = T::deserialize(MapAccessDeserializer::new(map))?;
        value.check().map_err(de::Error::custom)?;
        Ok(value)
    }
}

pub(crate) fn checked_seq<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: de::Deserializer<'de>,
    T: Deserialize<'de> + CheckedMap,
{
    struct V<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de> + CheckedMap> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of mappings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(v) = seq.next_element_seed(CheckedSeed(PhantomData))? {
                out.push(v);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(V(PhantomData))
}

/// The step list, checked step by step against the jobs submitted so far.
fn deserialize_steps<'de, D: de::Deserializer<'de>>(d: D) -> Result<Vec<Step>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<Step>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of steps")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Step>, A::Error> {
            let mut submitted = BTreeSet::new();
            let mut steps = Vec::new();
            while let Some(step) = seq.next_element_seed(StepSeed {
                number: steps.len() + 1,
                submitted: &mut submitted,
            })? {
                steps.push(step);
            }
            Ok(steps)
        }
    }
    d.deserialize_seq(V)
}

struct StepSeed<'s> {
    number: usize,
    submitted: &'s mut BTreeSet<String>,
}

impl<'de> DeserializeSeed<'de> for StepSeed<'_> {
    type Value = Step;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Step, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for StepSeed<'_> {
    type Value = Step;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a step: a mapping with one key such as `submit: {...}` or `advance: 60`")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Step, A::Error> {
        let mut map = Watched { map, empty: false };
        let step = match Step::deserialize(MapAccessDeserializer::new(&mut map)) {
            Ok(step) => step,
            // serde's own message for this case is "invalid type: map, expected enum".
            Err(_) if map.empty => {
                return Err(de::Error::custom(format!(
                    "step {}: a step needs one key, the step's kind, such as `submit: {{...}}` or `advance: 60`",
                    self.number
                )))
            }
            Err(e) => return Err(e),
        };
        if let Some(extra) = map.next_key::<String>()? {
            return Err(de::Error::custom(format!(
                "step {}: a step has exactly one key, found `{}` and `{extra}`: put each in its own list item",
                self.number,
                step.kind()
            )));
        }
        step.check(self.number, self.submitted)
            .map_err(de::Error::custom)?;
        Ok(step)
    }
}

/// A mapping that remembers whether it turned out to be empty.
struct Watched<A> {
    map: A,
    empty: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Watched<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let key = self.map.next_key_seed(seed)?;
        self.empty = key.is_none();
        Ok(key)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A problem found after parsing, in one entry of `shares` or `steps`.
struct Misplaced {
    /// `"shares"` or `"steps"`.
    list: &'static str,
    /// 0-based index into the list.
    index: usize,
    message: String,
}

impl Scenario {
    /// Cross-references between `shares` and `steps`, which may come in either order in the
    /// file: unique share names, steps that name declared shares, and `update_share`'s
    /// borrow limit against the strategy the share has at that step.
    fn check_shares(&self) -> Result<(), Misplaced> {
        let mut strategy: BTreeMap<&str, ShareStrategy> = BTreeMap::new();
        for (index, share) in self.shares.iter().enumerate() {
            if strategy.insert(&share.name, share.strategy).is_some() {
                return Err(Misplaced {
                    list: "shares",
                    index,
                    message: format!(
                        "quota share `{}` is declared twice; share names must be unique",
                        share.name
                    ),
                });
            }
        }
        let declared = || {
            let names: Vec<&str> = self.shares.iter().map(|s| s.name.as_str()).collect();
            names.join(", ")
        };
        for (index, step) in self.steps.iter().enumerate() {
            let n = index + 1;
            let misplaced = |message| Misplaced {
                list: "steps",
                index,
                message,
            };
            let (key, name) = match step {
                Step::Submit(s) => ("submit.share", &s.share),
                Step::UpdateShare(u) => ("update_share.name", &u.name),
                Step::DisableShare(r) => ("disable_share.name", &r.name),
                _ => continue,
            };
            let Some(current) = strategy.get_mut(name.as_str()) else {
                return Err(misplaced(format!(
                    "step {n}: {key} names quota share `{name}`, which `shares` does not declare (declared: {})",
                    declared()
                )));
            };
            if let Step::UpdateShare(u) = step {
                let after = u.strategy.unwrap_or(*current);
                if let Some(b) = u.borrow_limit {
                    check_borrow_limit(b, Some(after))
                        .map_err(|e| misplaced(format!("step {n}: update_share.{e}")))?;
                }
                *current = after;
            }
        }
        Ok(())
    }
}

/// Turns a problem found after parsing into a parser error with the entry's key path and
/// line, by reading the document again and failing on purpose at that entry. Only runs on
/// the error path.
fn locate(src: &str, document: usize, m: Misplaced) -> serde_yaml_ng::Error {
    let doc = serde_yaml_ng::Deserializer::from_str(src)
        .nth(document - 1)
        .expect("the document was read once already");
    match Locate(&m).deserialize(doc) {
        Err(located) => located,
        // Unreachable unless the document changed; keep the message anyway.
        Ok(()) => de::Error::custom(format!("{}[{}]: {}", m.list, m.index, m.message)),
    }
}

/// Walks a document to `list[index]` and fails there with the message.
struct Locate<'m>(&'m Misplaced);

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scenario")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0.list {
                map.next_value_seed(LocateIn(self.0))?;
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// Walks a list to the entry at `index` and fails there.
struct LocateIn<'m>(&'m Misplaced);

impl<'de> DeserializeSeed<'de> for LocateIn<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for LocateIn<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for _ in 0..self.0.index {
            seq.next_element::<de::IgnoredAny>()?;
        }
        seq.next_element_seed(FailHere(&self.0.message))?;
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// Fails with its message inside the node's own `deserialize_*` call, which is where
/// serde_yaml_ng attaches the node's key path and location.
struct FailHere<'m>(&'m str);

impl<'de> DeserializeSeed<'de> for FailHere<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FailHere<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }
}

/// Parses every scenario in `src`; `path` only names the source in errors.
pub fn parse(src: &str, path: &Path) -> Result<Vec<Scenario>, Error> {
    let malformed = |document, source| Error::Malformed {
        path: path.to_path_buf(),
        document,
        source,
    };
    let mut scenarios = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(src).enumerate() {
        let document = i + 1;
        // An empty document (a trailing `---`) is allowed and skipped.
        let scenario = Option::<Scenario>::deserialize(doc).map_err(|e| malformed(document, e))?;
        let Some(scenario) = scenario else { continue };
        scenario
            .check_shares()
            .map_err(|m| malformed(document, locate(src, document, m)))?;
        check_classes(&scenario.classes, &scenario.shares)
            .and_then(|()| check_groups(&scenario.groups, &scenario.shares, &scenario.environment))
            .and_then(|()| {
                for (i, step) in scenario.steps.iter().enumerate() {
                    if let Step::UpdateQueue(QueueUpdate {
                        groups: Some(groups),
                        ..
                    }) = step
                    {
                        check_groups(groups, &scenario.shares, &scenario.environment)
                            .map_err(|e| format!("steps[{i}]: step {}: update_queue.{e}", i + 1))?;
                    }
                }
                Ok(())
            })
            .map_err(|message| Error::Invalid {
                path: path.to_path_buf(),
                message: format!("document {document}: {message}"),
            })?;
        scenarios.push(scenario);
    }
    if scenarios.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(scenarios)
}

/// Reads and parses a scenario file (YAML or JSON).
pub fn load(path: &Path) -> Result<Vec<Scenario>, Error> {
    let src = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&src, path)
}

/// Whether a file name looks like a scenario file (`.yaml`, `.yml` or `.json`).
pub fn is_scenario_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// The scenario files directly inside a folder, in name order.
pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = |source| Error::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        if path.is_file() && is_scenario_file(&path) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Submit(s) => {
                write!(
                    f,
                    "submit {} to {} (priority {}, {} x {}",
                    s.job, s.share, s.priority, s.count, s.instance_type
                )?;
                if let Some(n) = s.preemption_retries {
                    write!(f, ", preemption_retries {n}")?;
                }
                f.write_str(")")
            }
            Step::UpdatePriority(u) => write!(f, "update_priority {} to {}", u.job, u.priority),
            Step::Finish(j) | Step::Fail(j) | Step::Checkpoint(j) | Step::Terminate(j) => {
                write!(f, "{} {}", self.kind(), j.job)
            }
            Step::Advance(s) => write!(f, "advance {s} s"),
            Step::UpdateQueue(u) => {
                f.write_str("update_queue")?;
                let mut fields = Vec::new();
                if let Some(a) = u.idle_assignment {
                    fields.push(format!("idle_assignment {}", a.as_str()));
                }
                if let Some(r) = u.fair_reclaim {
                    fields.push(format!("fair_reclaim {r}"));
                }
                for g in u.groups.iter().flatten() {
                    fields.push(format!(
                        "group {} [{}] {}",
                        g.name,
                        g.shares.join(", "),
                        limits(&g.limits)
                    ));
                }
                if !fields.is_empty() {
                    write!(f, " ({})", fields.join(", "))?;
                }
                Ok(())
            }
            Step::UpdateShare(u) => {
                write!(f, "update_share {}", u.name)?;
                let mut fields = Vec::new();
                if let Some(l) = &u.limits {
                    fields.push(format!("limits {}", limits(l)));
                }
                if let Some(s) = u.strategy {
                    fields.push(format!("strategy {s}"));
                }
                if let Some(b) = u.borrow_limit {
                    fields.push(format!("borrow_limit {b}"));
                }
                if let Some(p) = u.in_share_preemption {
                    fields.push(format!("in_share_preemption {p}"));
                }
                if let Some(s) = u.state {
                    fields.push(format!("state {s}"));
                }
                if !fields.is_empty() {
                    write!(f, ": {}", fields.join(", "))?;
                }
                Ok(())
            }
            Step::DisableShare(r) => write!(f, "disable_share {}", r.name),
            Step::Expect(_) => f.write_str("expect"),
        }
    }
}

fn limits(l: &BTreeMap<String, u32>) -> String {
    let parts: Vec<String> = l.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_one(src: &str) -> Result<Scenario, String> {
        parse(src, Path::new("t.yaml"))
            .map(|mut v| v.remove(0))
            .map_err(|e| e.to_string())
    }

    const HEAD: &str = "name: t
environment: {ml.g5.xlarge: 2}
shares:
  - {name: A, limits: {ml.g5.xlarge: 1}, strategy: LEND_AND_BORROW, borrow_limit: 100}
  - {name: B, limits: {ml.g5.xlarge: 1}, strategy: LEND}
";

    #[test]
    fn a_well_formed_scenario_parses_with_its_defaults() {
        let s = parse_one(&format!(
            "{HEAD}steps:
  - submit: {{job: a, share: A, instance_type: ml.g5.xlarge}}
  - advance: 60
  - expect: {{running: [a], reason: {{a: OWN_QUOTA_FULL}}}}
"
        ))
        .unwrap();
        assert_eq!(s.shares[0].spec().borrow_limit_percent, 100);
        assert_eq!(s.shares[1].spec().borrow_limit_percent, -1);
        let Step::Submit(sub) = &s.steps[0] else {
            panic!("not a submit: {:?}", s.steps[0])
        };
        assert_eq!(
            (sub.priority, sub.count, sub.preemption_retries),
            (0, 1, None)
        );
        assert_eq!(s.steps[1], Step::Advance(60));
        let Step::Expect(e) = &s.steps[2] else {
            panic!("not an expect")
        };
        assert_eq!(e.reason.as_ref().unwrap()["a"].as_str(), "OWN_QUOTA_FULL");
        assert_eq!(e.runnable, None);
    }

    #[test]
    fn an_unknown_key_is_named_with_its_path_and_line() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - submit: {{job: a, shre: A, instance_type: ml.g5.xlarge}}
"
        ))
        .unwrap_err();
        assert!(err.contains("t.yaml: "), "{err}");
        assert!(err.contains("steps[0].submit"), "{err}");
        assert!(err.contains("unknown field `shre`"), "{err}");
        assert!(err.contains("line 7"), "{err}");
    }

    #[test]
    fn an_unknown_step_kind_lists_the_valid_ones() {
        let err = parse_one(&format!("{HEAD}steps:\n  - sleep: 5\n")).unwrap_err();
        assert!(err.contains("unknown variant `sleep`"), "{err}");
        assert!(err.contains("`advance`"), "{err}");
        assert!(err.contains("line 7"), "{err}");
    }

    #[test]
    fn an_unknown_top_level_key_is_rejected() {
        let err = parse_one(&format!("{HEAD}steps: []\nqueue: q\n")).unwrap_err();
        assert!(err.contains("unknown field `queue`"), "{err}");
    }

    #[test]
    fn a_bad_strategy_lists_the_valid_ones() {
        let err = parse_one(
            "name: t
environment: {ml.g5.xlarge: 2}
shares:
  - name: A
    limits: {ml.g5.xlarge: 1}
    strategy: BORROW
steps: []
",
        )
        .unwrap_err();
        assert!(err.contains("shares[0].strategy"), "{err}");
        assert!(err.contains("unknown variant `BORROW`"), "{err}");
        assert!(err.contains("LEND_AND_BORROW"), "{err}");
        assert!(err.contains("line 6"), "{err}");
    }

    #[test]
    fn a_borrow_limit_on_a_lend_share_is_rejected() {
        let err = parse_one(
            "name: t
environment: {ml.g5.xlarge: 2}
shares:
  - {name: A, limits: {ml.g5.xlarge: 1}, strategy: LEND_AND_BORROW}
  - name: B
    limits: {ml.g5.xlarge: 1}
    strategy: LEND
    borrow_limit: 50
steps: []
",
        )
        .unwrap_err();
        assert!(err.contains("shares[1]"), "{err}");
        assert!(
            err.contains("borrow_limit is only allowed with strategy LEND_AND_BORROW"),
            "{err}"
        );
        assert!(err.contains("line 5"), "{err}");
    }

    #[test]
    fn a_borrow_limit_below_minus_one_is_rejected() {
        let err = parse_one(
            "name: t
environment: {ml.g5.xlarge: 2}
shares:
  - {name: A, limits: {ml.g5.xlarge: 1}, strategy: LEND_AND_BORROW, borrow_limit: -5}
steps: []
",
        )
        .unwrap_err();
        assert!(err.contains("borrow_limit -5 is invalid"), "{err}");
    }

    #[test]
    fn an_update_share_borrow_limit_is_checked_against_the_strategy_at_that_step() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - update_share: {{name: A, strategy: LEND}}
  - update_share: {{name: A, borrow_limit: 50}}
"
        ))
        .unwrap_err();
        assert!(
            err.contains("steps[1]: step 2: update_share.borrow_limit"),
            "{err}"
        );
        assert!(err.contains("line 8"), "{err}");
        assert!(err.contains("step 2"), "{err}");
        assert!(err.contains("the strategy is LEND"), "{err}");
        // The same update on a LEND_AND_BORROW share is fine.
        parse_one(&format!(
            "{HEAD}steps:\n  - update_share: {{name: A, borrow_limit: 50}}\n"
        ))
        .unwrap();
    }

    #[test]
    fn an_unknown_reason_code_lists_the_valid_ones() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - submit: {{job: a, share: A, instance_type: ml.g5.xlarge}}
  - expect:
      reason: {{a: QUOTA_FULL}}
"
        ))
        .unwrap_err();
        assert!(err.contains("steps[1].expect.reason.a"), "{err}");
        assert!(err.contains("unknown reason code `QUOTA_FULL`"), "{err}");
        assert!(
            err.contains(
                "OWN_QUOTA_FULL, NOT_INTERRUPTIBLE, RESUME_UNVERIFIED, BORROW_LIMIT_REACHED"
            ),
            "{err}"
        );
        assert!(err.contains("line 9"), "{err}");
    }

    #[test]
    fn a_step_naming_a_job_never_submitted_is_rejected_with_its_step_number() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - submit: {{job: a, share: A, instance_type: ml.g5.xlarge}}
  - finish: {{job: b}}
"
        ))
        .unwrap_err();
        assert!(err.contains("steps[1]"), "{err}");
        assert!(err.contains("step 2: finish.job names job `b`"), "{err}");
        assert!(err.contains("line 8"), "{err}");
    }

    #[test]
    fn an_expect_naming_a_job_submitted_later_is_rejected() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - expect: {{runnable: [a]}}
  - submit: {{job: a, share: A, instance_type: ml.g5.xlarge}}
"
        ))
        .unwrap_err();
        assert!(
            err.contains("step 1: expect.runnable names job `a`"),
            "{err}"
        );
    }

    #[test]
    fn submitting_the_same_job_name_twice_is_rejected() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - submit: {{job: a, share: A, instance_type: ml.g5.xlarge}}
  - submit: {{job: a, share: B, instance_type: ml.g5.xlarge}}
"
        ))
        .unwrap_err();
        assert!(
            err.contains("step 2: submit.job `a` was already submitted"),
            "{err}"
        );
    }

    #[test]
    fn a_step_with_two_keys_is_rejected() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - advance: 5
    finish: {{job: a}}
"
        ))
        .unwrap_err();
        assert!(err.contains("a step has exactly one key"), "{err}");
    }

    #[test]
    fn an_empty_step_says_what_a_step_looks_like() {
        let err = parse_one(&format!("{HEAD}steps:\n  - advance: 1\n  - {{}}\n")).unwrap_err();
        assert!(
            err.contains("steps[1]: step 2: a step needs one key"),
            "{err}"
        );
        assert!(err.contains("line 8"), "{err}");
    }

    #[test]
    fn a_step_naming_an_undeclared_share_is_rejected() {
        let err = parse_one(&format!(
            "{HEAD}steps:
  - submit: {{job: a, share: C, instance_type: ml.g5.xlarge}}
"
        ))
        .unwrap_err();
        assert!(err.contains("steps[0]: step 1: submit.share"), "{err}");
        assert!(err.contains("line 7 column 5"), "{err}");
        assert!(err.contains("quota share `C`"), "{err}");
        assert!(err.contains("declared: A, B"), "{err}");
    }

    #[test]
    fn a_share_declared_twice_is_rejected() {
        let err = parse_one(
            "name: t
environment: {ml.g5.xlarge: 2}
shares:
  - {name: A, limits: {ml.g5.xlarge: 1}, strategy: LEND}
  - {name: A, limits: {ml.g5.xlarge: 1}, strategy: LEND}
steps: []
",
        )
        .unwrap_err();
        assert!(err.contains("shares[1]: quota share `A`"), "{err}");
        assert!(err.contains("line 5"), "{err}");
        assert!(err.contains("declared twice"), "{err}");
    }

    #[test]
    fn several_documents_and_json_are_accepted() {
        let two = format!("{HEAD}steps: []\n---\n{HEAD}steps: []\n---\n");
        assert_eq!(parse(&two, Path::new("t.yaml")).unwrap().len(), 2);
        let json = r#"{"name": "j", "environment": {"ml.g5.xlarge": 1},
            "shares": [{"name": "A", "limits": {"ml.g5.xlarge": 1}, "strategy": "RESERVE"}],
            "steps": [{"submit": {"job": "a", "share": "A", "instance_type": "ml.g5.xlarge"}},
                      {"expect": {"running": ["a"]}}]}"#;
        let s = parse(json, Path::new("t.json")).unwrap();
        assert_eq!(s[0].steps.len(), 2);
    }

    #[test]
    fn an_error_in_a_later_document_names_the_document() {
        let src = format!("{HEAD}steps: []\n---\n{HEAD}steps: [{{advance: -1}}]\n");
        let err = parse(&src, Path::new("t.yaml")).unwrap_err().to_string();
        assert!(err.contains("document 2: steps[0].advance"), "{err}");
        assert!(err.contains("line 13"), "{err}");
    }

    /// A scenario whose one share carries `extra` (flow-style keys).
    fn with_share_keys(extra: &str) -> Result<Scenario, String> {
        parse_one(&format!(
            "name: t
environment: {{ml.g5.xlarge: 2}}
shares:
  - {{name: A, limits: {{ml.g5.xlarge: 1}}, strategy: LEND}}
  - {{name: B, limits: {{ml.g5.xlarge: 1}}, strategy: LEND, {extra}}}
steps: []
"
        ))
    }

    #[test]
    fn permissions_are_read_and_do_not_change_the_share_s_scheduling() {
        let s = with_share_keys(
            "submitters: [group:research, alice.b@example.org], leads: [bob_2], max_priority: 100",
        )
        .unwrap();
        let b = &s.shares[1];
        assert_eq!(b.submitters, ["group:research", "alice.b@example.org"]);
        assert_eq!(b.leads, ["bob_2"]);
        assert_eq!(b.max_priority, Some(100));
        let plain = with_share_keys("in_share_preemption: false").unwrap();
        assert_eq!(b.spec(), plain.shares[1].spec());
        assert!(plain.shares[1].submitters.is_empty() && plain.shares[1].max_priority.is_none());
    }

    #[test]
    fn a_bad_principal_is_named_by_its_place_in_the_list() {
        for (keys, path) in [
            ("submitters: [alice, al ice]", "shares[1].submitters[1]"),
            ("leads: [\"group:\"]", "shares[1].leads[0]"),
            ("leads: [group:a/b]", "shares[1].leads[0]"),
        ] {
            let err = with_share_keys(keys).unwrap_err();
            assert!(err.contains(&format!("{path}: `")), "{keys}: {err}");
            assert!(err.contains("is not a principal"), "{keys}: {err}");
            assert!(err.contains("line 5"), "{keys}: {err}");
        }
        let long = "x".repeat(65);
        let err = with_share_keys(&format!("submitters: [{long}]")).unwrap_err();
        assert!(err.contains("shares[1].submitters[0]"), "{err}");
        with_share_keys(&format!("submitters: [group:{}]", &long[1..])).unwrap();
    }

    #[test]
    fn a_principal_listed_twice_or_an_empty_list_is_rejected() {
        let err = with_share_keys("leads: [a, b, a]").unwrap_err();
        assert!(
            err.contains("shares[1].leads[2]: `a` is listed twice"),
            "{err}"
        );
        let err = with_share_keys("submitters: []").unwrap_err();
        assert!(
            err.contains("shares[1].submitters: the list is empty"),
            "{err}"
        );
    }

    #[test]
    fn a_list_too_long_for_its_tag_is_rejected() {
        let names: Vec<String> = (0..9).map(|i| format!("{i}{}", "n".repeat(29))).collect();
        let err = with_share_keys(&format!("submitters: [{}]", names.join(", "))).unwrap_err();
        assert!(
            err.contains("shares[1].submitters: the list is 278 characters"),
            "{err}"
        );
        with_share_keys(&format!("submitters: [{}]", names[..8].join(", "))).unwrap();
    }

    #[test]
    fn a_scenario_may_carry_its_cluster_s_admins_which_are_checked_and_not_played() {
        let s = parse_one(&format!("{HEAD}admins: [ops, group:platform]\nsteps: []\n")).unwrap();
        assert_eq!(s.admins.unwrap(), ["ops", "group:platform"]);
        assert!(parse_one(&format!("{HEAD}steps: []\n"))
            .unwrap()
            .admins
            .is_none());
        let err =
            parse_one(&format!("{HEAD}admins: [ops, \"group:a b\"]\nsteps: []\n")).unwrap_err();
        assert!(
            err.contains("admins[1]: `group:a b` is not a principal"),
            "{err}"
        );
    }

    #[test]
    fn max_priority_is_a_priority() {
        for (value, words) in [("10000", "above the highest"), ("-1", "below the lowest")] {
            let err = with_share_keys(&format!("max_priority: {value}")).unwrap_err();
            assert!(err.contains("shares[1].max_priority: "), "{err}");
            assert!(err.contains(words), "{err}");
        }
        let err = with_share_keys("max_priority: high").unwrap_err();
        assert!(err.contains("shares[1].max_priority"), "{err}");
        let s = with_share_keys("max_priority: 9999").unwrap();
        assert_eq!(s.shares[1].max_priority, Some(9999));
    }

    #[test]
    fn a_file_without_a_scenario_is_rejected() {
        let err = parse("", Path::new("t.yaml")).unwrap_err().to_string();
        assert!(err.contains("holds no scenario"), "{err}");
    }
}
