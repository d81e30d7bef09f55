//! The plan: what differs between a cluster file and the server, in the order `apply` carries
//! it out, and what the changes that lower a limit or make capacity reclaimable do to the
//! running jobs. Pure: it takes the [`Desired`] and [`Live`] values and returns data.
//!
//! # Which jobs a plan names
//!
//! Per instance type, with the share's usage `U` (instances its SCHEDULED and RUNNING jobs
//! hold) and its new entitlement `L`, the share's borrowed part is `max(0, U - L)`
//! ([`qm_core::ledger::Account::borrowed`]): borrowed instances are what an owner's return
//! reclaims. For every change that lowers an entitlement, lowers a borrow allowance
//! (LEND_AND_BORROW → LEND or RESERVE, a lower `borrow_limit`) or withdraws lent capacity
//! (LEND → RESERVE, a deleted share, a lower environment limit), the plan lists
//!
//! - **preemptible**: the jobs that make up the borrowed part after the change (of the changed
//!   share, and — when lent capacity is withdrawn — of the borrowers whose borrowing is no
//!   longer backed: `Σ borrowed - Σ lendable`, [`qm_core::ledger::pressure`]), in the order the
//!   scheduler ranks victims once the change is made (the what-if's `victimOrder`, worked out
//!   by the core: [`qm_core::Scheduler::victim_order`]), the order in which they are most
//!   likely to be picked;
//! - **preempted**: the jobs the server's scheduler would stop once the file is applied, and
//!   for which waiting jobs. These are not worked out here: the server runs its scheduler on
//!   a copy of its state with the file's configuration (`POST /qm/v1/what-if`, see
//!   [`super::whatif`]) and [`Plan::foresee`] lists what it would preempt — at once, or
//!   later within the scheduler's patience when the victims checkpoint — assuming nothing
//!   else happens meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use qm_core::ledger::{self, Account, Ceiling};
use qm_core::{ShareSpec, Strategy};
use serde::Serialize;

use super::live::{JobState, Live, LiveJob};
use super::tags::{self, ShareTags, MANAGED};
use super::{Desired, DesiredShare, Names};

/// The kind of server resource a change applies to, in the order `apply` creates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The scheduling policy (the queue names it).
    SchedulingPolicy,
    /// The service environment (the queue names it).
    ServiceEnvironment,
    /// The job queue.
    JobQueue,
    /// A quota share of the queue.
    QuotaShare,
    /// The job queue's group definitions (one list, `PUT /qm/v1/queues/{queue}/groups`; the
    /// change is named after the queue). After the shares, whose `qm:group` tags name them.
    Groups,
    /// The server's admin list (one field, `admins`; the change is named `admins` too). Set
    /// last, so that a list that no longer names the one applying takes effect after the rest.
    Admins,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::SchedulingPolicy => "scheduling policy",
            Kind::ServiceEnvironment => "service environment",
            Kind::JobQueue => "job queue",
            Kind::QuotaShare => "quota share",
            Kind::Groups => "groups of job queue",
            Kind::Admins => "admins",
        }
    }
}

/// What happens to a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// It is created.
    Create,
    /// Some of its fields change.
    Update,
    /// It is disabled (when enabled), then deleted.
    Delete,
}

/// One field's old and new value, as the API spells them (`None` = absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// The field (`capacityLimits.ml.g5.xlarge`, `strategy`, `tags.qm:submitters`, `admins`,
    /// ...); lists are joined with `,`.
    pub field: String,
    /// The server's value.
    pub from: Option<String>,
    /// The file's value.
    pub to: Option<String>,
}

/// One resource to create, update or delete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// What kind of resource.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// What happens to it.
    pub action: Action,
    /// The fields that differ (every field, for a create).
    pub fields: Vec<FieldChange>,
    /// For a delete: its unfinished jobs, which the server terminates.
    pub terminated_jobs: Vec<JobRef>,
}

/// A job as a plan names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobRef {
    /// Job id.
    pub id: String,
    /// Job name.
    pub name: String,
    /// Its share.
    pub share: String,
    /// Scheduling priority.
    pub priority: i64,
    /// Instance type.
    pub unit: String,
    /// Instances.
    pub count: u32,
}

impl From<&LiveJob> for JobRef {
    fn from(j: &LiveJob) -> Self {
        JobRef {
            id: j.id.clone(),
            name: j.name.clone(),
            share: j.share.clone(),
            priority: j.priority,
            unit: j.unit.clone(),
            count: j.count,
        }
    }
}

/// Running jobs that a change leaves above an entitlement or unbacked: reclaimable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Exposure {
    /// The instance type.
    pub unit: String,
    /// The change that causes it, in words.
    pub cause: String,
    /// Instances that become reclaimable.
    pub instances: u32,
    /// The jobs most likely to be picked, in that order.
    pub jobs: Vec<JobRef>,
    /// Running jobs that run only within their share's own quota (they may not be
    /// interrupted, or may not borrow yet) and hold more than the new limit: the scheduler
    /// does not preempt them; the limit applies to them as they end.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<JobRef>,
}

/// What the scheduler would preempt after the changes, per instance type and instant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reclaim {
    /// The instance type.
    pub unit: String,
    /// Seconds after the plan was made (0: at once; later: when the waiting jobs' patience
    /// with victims that checkpoint runs out).
    pub after_seconds: u64,
    /// Waiting jobs the victims are preempted for.
    pub claimants: Vec<JobRef>,
    /// Running jobs that would be preempted for them.
    pub victims: Vec<JobRef>,
}

/// The difference between a cluster file and the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The resources the file names.
    pub names: Names,
    /// The changes, in the order apply makes them.
    pub changes: Vec<Change>,
    /// Jobs that become preemptible (their jobs named by [`Plan::foresee`], in the
    /// scheduler's victim order).
    pub preemptible: Vec<Exposure>,
    /// Jobs the server's scheduler would preempt once the plan is applied (see
    /// [`Plan::foresee`]); empty until then.
    pub preempted: Vec<Reclaim>,
    /// Whether the server had more jobs than were read (the job lists may be incomplete).
    pub jobs_truncated: bool,
}

impl Plan {
    /// Lists what the server's what-if says the scheduler would preempt, and names the jobs
    /// the change makes preemptible in the scheduler's victim order.
    pub fn foresee(&mut self, what_if: &qm_api::qm::WhatIf, desired: &Desired, live: &Live) {
        self.preemptible = impact(desired, live, &VictimOrder::of(what_if));
        let job = |j: &qm_api::qm::WhatIfJob| JobRef {
            id: j.job_id.clone(),
            name: j.job_name.clone(),
            share: j.quota_share_name.clone(),
            priority: i64::from(j.priority),
            unit: j.capacity_unit.clone(),
            count: j.instances,
        };
        let mut groups: BTreeMap<(String, u64), Reclaim> = BTreeMap::new();
        for d in &what_if.decisions {
            if d.action != qm_api::qm::WhatIfAction::Preempt {
                continue;
            }
            let after_seconds = (d.at - what_if.now).max(0) as u64 / 1000;
            let unit = d.job.capacity_unit.clone();
            let r = groups
                .entry((unit.clone(), after_seconds))
                .or_insert_with(|| Reclaim {
                    unit,
                    after_seconds,
                    claimants: Vec::new(),
                    victims: Vec::new(),
                });
            r.victims.push(job(&d.job));
            if let Some(f) = &d.for_job {
                if !r.claimants.iter().any(|c| c.id == f.job_id) {
                    r.claimants.push(job(f));
                }
            }
        }
        self.preempted = groups.into_values().collect();
    }

    /// Whether applying the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// How many resources are created, updated and deleted.
    pub fn counts(&self) -> (usize, usize, usize) {
        let n = |a: Action| self.changes.iter().filter(|c| c.action == a).count();
        (n(Action::Create), n(Action::Update), n(Action::Delete))
    }

    /// One line: `1 to create, 2 to change, 0 to delete`.
    pub fn summary(&self) -> String {
        let (c, u, d) = self.counts();
        let names: Vec<String> = self
            .changes
            .iter()
            .map(|c| {
                let sign = match c.action {
                    Action::Create => '+',
                    Action::Update => '~',
                    Action::Delete => '-',
                };
                match c.kind {
                    Kind::Admins => format!("{sign}{}", c.kind.label()),
                    _ => format!("{sign}{} {}", c.kind.label(), c.name),
                }
            })
            .collect();
        format!(
            "{c} to create, {u} to change, {d} to delete ({})",
            names.join(", ")
        )
    }
}

fn borrow_limit_str(spec: &ShareSpec) -> Option<String> {
    (spec.strategy == Strategy::LendAndBorrow).then(|| {
        if spec.borrow_limit_percent < 0 {
            "unlimited".to_string()
        } else {
            format!("{}%", spec.borrow_limit_percent)
        }
    })
}

fn on_off(b: bool) -> String {
    if b { "ENABLED" } else { "DISABLED" }.to_string()
}

fn limit_fields(
    from: &BTreeMap<String, u32>,
    to: &BTreeMap<String, u32>,
    out: &mut Vec<FieldChange>,
) {
    let units: BTreeSet<&String> = from.keys().chain(to.keys()).collect();
    for u in units {
        let (a, b) = (from.get(u), to.get(u));
        if a != b {
            out.push(FieldChange {
                field: format!("capacityLimits.{u}"),
                from: a.map(u32::to_string),
                to: b.map(u32::to_string),
            });
        }
    }
}

fn push(out: &mut Vec<FieldChange>, field: &str, from: Option<String>, to: Option<String>) {
    if from != to {
        out.push(FieldChange {
            field: field.into(),
            from,
            to,
        });
    }
}

/// The settings (all but tags) that differ between two shares (`before` = `None` for a
/// create): what UpdateQuotaShare sets.
pub(super) fn setting_fields(before: Option<&ShareSpec>, after: &ShareSpec) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let empty = BTreeMap::new();
    limit_fields(
        before.map_or(&empty, |b| &b.limits),
        &after.limits,
        &mut out,
    );
    push(
        &mut out,
        "strategy",
        before.map(|b| b.strategy.as_str().to_string()),
        Some(after.strategy.as_str().to_string()),
    );
    push(
        &mut out,
        "borrowLimit",
        before.and_then(borrow_limit_str),
        borrow_limit_str(after),
    );
    push(
        &mut out,
        "inSharePreemption",
        before.map(|b| on_off(b.in_share_preemption)),
        Some(on_off(after.in_share_preemption)),
    );
    push(
        &mut out,
        "state",
        before.map(|b| on_off(b.enabled)),
        Some(on_off(after.enabled)),
    );
    out
}

/// The controlled tags that differ, as `tags.<key>`, in [`MANAGED`] order: what TagResource
/// and UntagResource set.
fn tag_fields(before: &ShareTags, after: &ShareTags, out: &mut Vec<FieldChange>) {
    for key in MANAGED {
        push(
            out,
            &format!("tags.{key}"),
            before.get(key).cloned(),
            after.get(key).cloned(),
        );
    }
}

/// Everything that differs between a share on the server (`None`: none yet) and the file.
fn share_fields(
    before: Option<(&ShareSpec, &ShareTags)>,
    after: &DesiredShare,
) -> Vec<FieldChange> {
    let mut out = setting_fields(before.map(|(spec, _)| spec), &after.spec);
    let none = ShareTags::new();
    tag_fields(before.map_or(&none, |(_, t)| t), &after.tags, &mut out);
    out
}

/// Computes the plan that makes `live` match `desired`.
pub fn diff(desired: &Desired, live: &Live) -> Plan {
    let mut changes = Vec::new();
    changes.extend(policy_create(desired, live));
    // A change of the policy's fair-sharing tags that turns fair sharing or fair reclaim on
    // comes last, after the weights and groups it is to work with; one that turns them off
    // comes first, before the weights and groups change under it (each call is a scheduling
    // pass, and a preemption in between cannot be undone).
    let mut policy_last = None;
    if let Some(c) = policy_tag_update(desired, live) {
        if turns_fair_sharing_on(&c.fields) {
            policy_last = Some(c);
        } else {
            changes.push(c);
        }
    }
    changes.extend(environment_change(desired, live));
    changes.extend(queue_change(desired, live));
    // Group definitions before the shares join them by their tags: a defined group without
    // members decides nothing, a tag-only group has no ceiling yet.
    changes.extend(groups_change(desired, live));
    changes.extend(declared_share_changes(desired, live));
    changes.extend(dropped_share_changes(desired, live));
    changes.extend(policy_last);
    changes.extend(admins_change(
        desired.admins.as_deref(),
        live.admins.as_deref(),
    ));

    Plan {
        names: desired.names.clone(),
        changes,
        preemptible: impact(desired, live, &VictimOrder::default()),
        preempted: Vec::new(),
        jobs_truncated: live.jobs_truncated,
    }
}

impl Change {
    /// A change that terminates no jobs.
    fn new(kind: Kind, name: &str, action: Action, fields: Vec<FieldChange>) -> Change {
        Change {
            kind,
            name: name.to_string(),
            action,
            fields,
            terminated_jobs: Vec::new(),
        }
    }
}

/// The scheduling policy's creation, when the server has none.
fn policy_create(desired: &Desired, live: &Live) -> Option<Change> {
    if live.policy_arn.is_some() {
        return None;
    }
    let mut fields = vec![FieldChange {
        field: "idleResourceAssignmentStrategy".into(),
        from: None,
        to: Some("FIFO".into()),
    }];
    for (k, v) in &desired.policy_tags {
        push(&mut fields, &format!("tags.{k}"), None, Some(v.clone()));
    }
    Some(Change::new(
        Kind::SchedulingPolicy,
        &desired.names.scheduling_policy,
        Action::Create,
        fields,
    ))
}

/// The existing scheduling policy's update, when its fair-sharing tags differ.
fn policy_tag_update(desired: &Desired, live: &Live) -> Option<Change> {
    live.policy_arn.as_ref()?;
    let fields = policy_tag_fields(&desired.policy_tags, &live.policy_tags);
    (!fields.is_empty()).then(|| {
        Change::new(
            Kind::SchedulingPolicy,
            &desired.names.scheduling_policy,
            Action::Update,
            fields,
        )
    })
}

/// Whether policy tag changes turn fair sharing or fair reclaim on.
fn turns_fair_sharing_on(fields: &[FieldChange]) -> bool {
    fields.iter().any(|f| {
        matches!(
            (f.field.as_str(), f.to.as_deref()),
            ("tags.qm:idle-assignment", Some("FAIR_SHARE"))
                | ("tags.qm:fair-reclaim", Some("true"))
        )
    })
}

/// The service environment's creation, or its update when its limits or state differ.
fn environment_change(desired: &Desired, live: &Live) -> Option<Change> {
    let name = &desired.names.service_environment;
    let mut env_fields = Vec::new();
    let empty = BTreeMap::new();
    limit_fields(
        live.environment.as_ref().map_or(&empty, |e| &e.limits),
        &desired.environment,
        &mut env_fields,
    );
    match &live.environment {
        None => Some(Change::new(
            Kind::ServiceEnvironment,
            name,
            Action::Create,
            env_fields,
        )),
        Some(e) => {
            push(
                &mut env_fields,
                "state",
                Some(e.state.clone()),
                Some("ENABLED".into()),
            );
            (!env_fields.is_empty())
                .then(|| Change::new(Kind::ServiceEnvironment, name, Action::Update, env_fields))
        }
    }
}

/// The job queue's creation, or its update when its policy, environments, state or class
/// tags differ.
fn queue_change(desired: &Desired, live: &Live) -> Option<Change> {
    let names = &desired.names;
    let mut queue_fields = Vec::new();
    let q = live.queue.as_ref();
    push(
        &mut queue_fields,
        "schedulingPolicy",
        q.and_then(|q| q.policy.clone()),
        Some(names.scheduling_policy.clone()),
    );
    push(
        &mut queue_fields,
        "serviceEnvironmentOrder",
        q.map(|q| q.environments.join(", ")),
        Some(names.service_environment.clone()),
    );
    if let Some(q) = q {
        push(
            &mut queue_fields,
            "state",
            Some(q.state.clone()),
            Some("ENABLED".into()),
        );
    }
    if let Some(classes) = &desired.classes {
        let none = ShareTags::new();
        let before = q.map_or(&none, |q| &q.classes);
        for key in before.keys().chain(classes.keys()).collect::<BTreeSet<_>>() {
            push(
                &mut queue_fields,
                &format!("tags.{key}"),
                before.get(key).cloned(),
                classes.get(key).cloned(),
            );
        }
    }
    if q.is_some() && queue_fields.is_empty() {
        return None;
    }
    let action = if q.is_none() {
        Action::Create
    } else {
        Action::Update
    };
    Some(Change::new(
        Kind::JobQueue,
        &names.job_queue,
        action,
        queue_fields,
    ))
}

/// The queue's group definitions' update, when the file has them and they differ.
fn groups_change(desired: &Desired, live: &Live) -> Option<Change> {
    let groups = desired.groups.as_ref()?;
    let fields = group_fields(live.groups.as_deref().unwrap_or_default(), groups);
    (!fields.is_empty()).then(|| {
        Change::new(
            Kind::Groups,
            &desired.names.job_queue,
            Action::Update,
            fields,
        )
    })
}

/// The file's shares that are new or differ, in the file's order.
fn declared_share_changes(desired: &Desired, live: &Live) -> Vec<Change> {
    let mut changes = Vec::new();
    for s in &desired.shares {
        let name = &s.spec.name;
        let before = live.shares.get(name).map(|l| (&l.spec, &l.tags));
        let fields = share_fields(before, s);
        if before.is_none() {
            changes.push(Change::new(Kind::QuotaShare, name, Action::Create, fields));
        } else if !fields.is_empty() {
            changes.push(Change::new(Kind::QuotaShare, name, Action::Update, fields));
        }
    }
    changes
}

/// The server's shares that the file no longer names: disabled, then deleted, with their
/// unfinished jobs.
fn dropped_share_changes(desired: &Desired, live: &Live) -> Vec<Change> {
    let declared: BTreeSet<&str> = desired
        .shares
        .iter()
        .map(|s| s.spec.name.as_str())
        .collect();
    let mut changes = Vec::new();
    for (name, l) in &live.shares {
        if declared.contains(name.as_str()) {
            continue;
        }
        let mut fields = Vec::new();
        push(
            &mut fields,
            "state",
            Some(on_off(l.spec.enabled)),
            Some("DISABLED".into()),
        );
        let mut c = Change::new(Kind::QuotaShare, name, Action::Delete, fields);
        c.terminated_jobs = live
            .jobs
            .iter()
            .filter(|j| &j.share == name)
            .map(JobRef::from)
            .collect();
        changes.push(c);
    }
    changes
}

/// The scheduling policy's fair-sharing tags that differ, as `tags.<key>`: only the keys the
/// file has, compared by meaning (an absent tag is the server's default, so a file that says
/// `FIFO` changes nothing on a policy without the tag).
fn policy_tag_fields(desired: &ShareTags, live: &ShareTags) -> Vec<FieldChange> {
    let mut out = Vec::new();
    for key in tags::POLICY_MANAGED {
        let Some(want) = desired.get(key) else {
            continue;
        };
        let have = live.get(key);
        if have.map_or(tags::policy_default(key), String::as_str) != want {
            push(
                &mut out,
                &format!("tags.{key}"),
                have.cloned(),
                Some(want.clone()),
            );
        }
    }
    out
}

/// The group definitions that differ, as `groups.<name>.weight` and
/// `groups.<name>.limits.<type>` (a group the file drops: its weight goes to none).
fn group_fields(
    live: &[qm_api::qm::GroupDef],
    desired: &[qm_api::qm::GroupDef],
) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let find =
        |list: &[qm_api::qm::GroupDef], name: &str| list.iter().find(|g| g.name == name).cloned();
    let names: BTreeSet<&str> = live
        .iter()
        .chain(desired)
        .map(|g| g.name.as_str())
        .collect();
    for name in names {
        let (before, after) = (find(live, name), find(desired, name));
        let weight = |g: &Option<qm_api::qm::GroupDef>| {
            g.as_ref().map(|g| g.weight.unwrap_or(1).to_string())
        };
        push(
            &mut out,
            &format!("groups.{name}.weight"),
            weight(&before),
            weight(&after),
        );
        let empty = BTreeMap::new();
        let (lb, la) = (
            before.as_ref().map_or(&empty, |g| &g.limits),
            after.as_ref().map_or(&empty, |g| &g.limits),
        );
        for unit in lb.keys().chain(la.keys()).collect::<BTreeSet<_>>() {
            push(
                &mut out,
                &format!("groups.{name}.limits.{unit}"),
                lb.get(unit).map(i64::to_string),
                la.get(unit).map(i64::to_string),
            );
        }
    }
    out
}

/// The admin list's change, when the file has one (`desired`) and the server's (`live`, read
/// because the file has one) differs. The lists are compared as written, in order, so that the
/// server keeps exactly the file's; an empty list on the server shows as `(none)`.
fn admins_change(desired: Option<&[String]>, live: Option<&[String]>) -> Option<Change> {
    let desired = desired?;
    let live = live.unwrap_or_default();
    if desired == live {
        return None;
    }
    let joined = |l: &[String]| (!l.is_empty()).then(|| l.join(","));
    Some(Change {
        kind: Kind::Admins,
        name: "admins".into(),
        action: Action::Update,
        fields: vec![FieldChange {
            field: "admins".into(),
            from: joined(live),
            to: joined(desired),
        }],
        terminated_jobs: Vec::new(),
    })
}

/// One share on one instance type, before and after the plan.
struct Position<'a> {
    name: &'a str,
    before: Option<&'a ShareSpec>,
    after: Option<&'a ShareSpec>,
    usage: u32,
}

fn account(spec: &ShareSpec, unit: &str, usage: u32) -> Account {
    let entitlement = spec.limits.get(unit).copied().unwrap_or(0);
    Account {
        entitlement,
        usage,
        strategy: spec.strategy,
        allowance: spec.borrow_allowance(entitlement),
    }
}

/// `a < b` where `None` is unlimited.
fn lower(a: Option<u32>, b: Option<u32>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The scheduler's victim order: each running job's place in the what-if's `victimOrder`
/// (the core's ranking once the change is made). Empty until the server was asked: a plan
/// names no job the core would not rank.
#[derive(Clone, Debug, Default)]
pub struct VictimOrder(BTreeMap<String, usize>);

impl VictimOrder {
    /// The order of `what_if`.
    pub fn of(what_if: &qm_api::qm::WhatIf) -> Self {
        VictimOrder(
            what_if
                .victim_order
                .iter()
                .enumerate()
                .map(|(i, j)| (j.job_id.clone(), i))
                .collect(),
        )
    }

    fn place(&self, j: &LiveJob) -> Option<usize> {
        self.0.get(&j.id).copied()
    }
}

/// A share's (or every share's) running jobs on `unit` that a reclaim may take, in the
/// scheduler's victim order.
fn likely_victims<'a>(
    jobs: &'a [LiveJob],
    share: Option<&str>,
    unit: &str,
    order: &VictimOrder,
) -> Vec<&'a LiveJob> {
    let mut v: Vec<(usize, &LiveJob)> = jobs
        .iter()
        .filter(|j| j.state == JobState::Running && j.unit == unit && j.reclaimable)
        .filter(|j| share.is_none_or(|s| j.share == s))
        .filter_map(|j| Some((order.place(j)?, j)))
        .collect();
    v.sort_by_key(|&(place, _)| place);
    v.into_iter().map(|(_, j)| j).collect()
}

/// A share's running jobs on `unit` that run only within its own quota (they may not be
/// interrupted, or may not borrow yet), when together they hold more than `limit`: a lowered
/// limit leaves them running.
fn kept_above(jobs: &[LiveJob], share: &str, unit: &str, limit: u32) -> Vec<JobRef> {
    let firm: Vec<&LiveJob> = jobs
        .iter()
        .filter(|j| j.state == JobState::Running && j.unit == unit && j.share == share)
        .filter(|j| !j.reclaimable)
        .collect();
    if firm.iter().map(|j| j.count).sum::<u32>() <= limit {
        return Vec::new();
    }
    firm.into_iter().map(JobRef::from).collect()
}

/// The first of `candidates` (in victim order) that make up `amount` instances: those most
/// likely picked. The what-if's decisions, not this list, say which the scheduler takes.
fn covering(candidates: Vec<&LiveJob>, amount: u32) -> Vec<JobRef> {
    let mut out = Vec::new();
    let mut covered = 0;
    for j in candidates {
        if covered >= amount {
            break;
        }
        covered += j.count;
        out.push(JobRef::from(j));
    }
    out
}

/// Why a share's change makes capacity reclaimable on `unit`; `None` when it does not.
fn lowering_cause(p: &Position<'_>, unit: &str) -> Option<(String, bool)> {
    let before = p.before?;
    let Some(after) = p.after else {
        let lends = before.strategy.lends() && before.limits.get(unit).copied().unwrap_or(0) > 0;
        return lends.then(|| (format!("quota share {} is deleted", p.name), true));
    };
    let (a, b) = (account(after, unit, 0), account(before, unit, 0));
    let mut causes = Vec::new();
    if a.entitlement < b.entitlement {
        causes.push(format!(
            "capacityLimits {} -> {}",
            b.entitlement, a.entitlement
        ));
    }
    if before.strategy != after.strategy
        && (lower(a.allowance, b.allowance) || !after.strategy.lends())
    {
        causes.push(format!(
            "strategy {} -> {}",
            before.strategy.as_str(),
            after.strategy.as_str()
        ));
    } else if lower(a.allowance, b.allowance)
        && before.borrow_limit_percent != after.borrow_limit_percent
    {
        causes.push(format!(
            "borrowLimit {} -> {}",
            borrow_limit_str(before).unwrap_or_default(),
            borrow_limit_str(after).unwrap_or_default()
        ));
    }
    let withdraws = before.strategy.lends() && !after.strategy.lends();
    (!causes.is_empty()).then(|| {
        (
            format!("quota share {}: {}", p.name, causes.join(", ")),
            withdraws,
        )
    })
}

/// The jobs the plan's lowering changes make preemptible.
#[expect(
    clippy::too_many_lines,
    reason = "the exposure rules per unit read as one walk over the shares"
)]
fn impact(desired: &Desired, live: &Live, order: &VictimOrder) -> Vec<Exposure> {
    let mut units: BTreeSet<&str> = desired.environment.keys().map(String::as_str).collect();
    if let Some(e) = &live.environment {
        units.extend(e.limits.keys().map(String::as_str));
    }
    let names: BTreeSet<&str> = desired
        .shares
        .iter()
        .map(|s| s.spec.name.as_str())
        .chain(live.shares.keys().map(String::as_str))
        .collect();
    let mut exposures = Vec::new();
    for unit in units {
        let positions: Vec<Position<'_>> = names
            .iter()
            .map(|&name| Position {
                name,
                before: live.shares.get(name).map(|l| &l.spec),
                after: desired
                    .shares
                    .iter()
                    .map(|s| &s.spec)
                    .find(|s| s.name == name),
                usage: live
                    .jobs
                    .iter()
                    .filter(|j| j.share == name && j.unit == unit && j.state == JobState::Running)
                    .map(|j| j.count)
                    .sum(),
            })
            .collect();
        let env_before = live
            .environment
            .as_ref()
            .and_then(|e| e.limits.get(unit).copied());
        let env_after = desired.environment.get(unit).copied().unwrap_or(0);
        let mut withdrawn: Vec<String> = Vec::new();
        if env_before.is_some_and(|b| env_after < b) {
            withdrawn.push(format!(
                "service environment {}: capacityLimits {} -> {env_after}",
                desired.names.service_environment,
                env_before.unwrap_or(0)
            ));
        }
        for p in &positions {
            let Some((cause, withdraws)) = lowering_cause(p, unit) else {
                continue;
            };
            if withdraws {
                withdrawn.push(cause.clone());
            }
            if let Some(after) = p.after {
                let a = account(after, unit, p.usage);
                let kept = kept_above(&live.jobs, p.name, unit, a.entitlement);
                // What the kept jobs hold above the limit counts as the share's own.
                let firm: u32 = kept.iter().map(|j| j.count).sum();
                let borrowed = p.usage.saturating_sub(a.entitlement.max(firm));
                if borrowed > 0 || !kept.is_empty() {
                    exposures.push(Exposure {
                        unit: unit.to_string(),
                        cause,
                        instances: borrowed,
                        jobs: covering(
                            likely_victims(&live.jobs, Some(p.name), unit, order),
                            borrowed,
                        ),
                        kept,
                    });
                }
            }
        }
        // Shares that stay, with their new settings and today's usage.
        let after: Vec<(&Position<'_>, Account)> = positions
            .iter()
            .filter_map(|p| p.after.map(|s| (p, account(s, unit, p.usage))))
            .collect();
        if !withdrawn.is_empty() {
            let accounts: Vec<Account> = after.iter().map(|(_, a)| *a).collect();
            let pressure = ledger::pressure(&Ceiling::new(env_after, None), &accounts);
            let unbacked = pressure.lending.max(pressure.environment).max(0) as u32;
            if unbacked > 0 {
                let mut candidates = Vec::new();
                for (p, a) in &after {
                    let mine = likely_victims(&live.jobs, Some(p.name), unit, order);
                    let ids: BTreeSet<String> = covering(mine.clone(), a.borrowed())
                        .into_iter()
                        .map(|j| j.id)
                        .collect();
                    candidates.extend(mine.into_iter().filter(|j| ids.contains(&j.id)));
                }
                candidates.sort_by_key(|j| order.place(j));
                exposures.push(Exposure {
                    unit: unit.to_string(),
                    cause: format!(
                        "{}: borrowed capacity no longer backed",
                        withdrawn.join("; ")
                    ),
                    instances: unbacked,
                    jobs: covering(candidates, unbacked),
                    kept: Vec::new(),
                });
            }
        }
    }
    exposures
}

fn job_line(out: &mut String, j: &JobRef) {
    let _ = writeln!(
        out,
        "      {}  {}  share {}  priority {}  {} x {}",
        j.id, j.name, j.share, j.priority, j.count, j.unit
    );
}

fn value(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("(none)")
}

/// The plan as text; `source` names the file.
pub fn render(plan: &Plan, source: &str) -> String {
    let mut out = String::new();
    if plan.is_empty() {
        let _ = writeln!(
            out,
            "No changes: job queue {} on the server matches {source}.",
            plan.names.job_queue
        );
        return out;
    }
    let _ = writeln!(
        out,
        "Plan for job queue {} from {source} (+ create, ~ change, - delete):",
        plan.names.job_queue
    );
    for c in &plan.changes {
        let _ = writeln!(out);
        render_change(&mut out, c);
    }
    if !plan.preemptible.is_empty() || !plan.preempted.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Running jobs affected:");
    }
    for e in &plan.preemptible {
        let _ = writeln!(out);
        render_exposure(&mut out, e);
    }
    for r in &plan.preempted {
        let _ = writeln!(out);
        render_reclaim(&mut out, r);
    }
    if plan.jobs_truncated {
        let _ = writeln!(
            out,
            "\nNote: the queue has more jobs than a plan reads; the job lists may be incomplete."
        );
    }
    let _ = writeln!(out);
    let (c, u, d) = plan.counts();
    let _ = writeln!(out, "Plan: {c} to create, {u} to change, {d} to delete.");
    out
}

/// One change: its resource and fields, or for a delete the jobs it terminates.
fn render_change(out: &mut String, c: &Change) {
    match c.action {
        Action::Create => {
            let _ = writeln!(out, "  + {} {}", c.kind.label(), c.name);
            for f in &c.fields {
                let _ = writeln!(out, "      {}: {}", f.field, value(&f.to));
            }
        }
        // One list, no resource name: the field is the line.
        Action::Update if c.kind == Kind::Admins => {
            for f in &c.fields {
                let _ = writeln!(
                    out,
                    "  ~ {}: {} -> {}",
                    f.field,
                    value(&f.from),
                    value(&f.to)
                );
            }
        }
        Action::Update => {
            let _ = writeln!(out, "  ~ {} {}", c.kind.label(), c.name);
            for f in &c.fields {
                let _ = writeln!(
                    out,
                    "      {}: {} -> {}",
                    f.field,
                    value(&f.from),
                    value(&f.to)
                );
            }
        }
        Action::Delete => {
            let how = if c.fields.is_empty() {
                "delete"
            } else {
                "disable, then delete"
            };
            let _ = writeln!(out, "  - {} {} ({how})", c.kind.label(), c.name);
            if !c.terminated_jobs.is_empty() {
                let _ = writeln!(out, "      its unfinished jobs are terminated:");
                for j in &c.terminated_jobs {
                    job_line(out, j);
                }
            }
        }
    }
}

/// One exposure: the jobs that become preemptible, and those kept above the new limit.
fn render_exposure(out: &mut String, e: &Exposure) {
    if e.instances > 0 {
        let _ = writeln!(
            out,
            "  {} ({}): {} instance(s) become preemptible; most likely picked first:",
            e.cause, e.unit, e.instances
        );
        for j in &e.jobs {
            job_line(out, j);
        }
    }
    if !e.kept.is_empty() {
        let _ = writeln!(
            out,
            "  warning: {} ({}): these jobs run only within their share's own quota (they may not be interrupted, or may not borrow yet) and stay above the new limit until they end:",
            e.cause, e.unit
        );
        for j in &e.kept {
            job_line(out, j);
        }
    }
}

/// One foreseen preemption: when, its victims, and the waiting jobs they make room for.
fn render_reclaim(out: &mut String, r: &Reclaim) {
    let when = match r.after_seconds {
        0 => "at once".to_string(),
        s => format!(
            "in {} (when its patience with victims that checkpoint runs out), unless they end first",
            crate::client::time::duration(0, s as i64 * 1000)
        ),
    };
    let _ = writeln!(out, "  {}: the scheduler would preempt {when}:", r.unit);
    for j in &r.victims {
        job_line(out, j);
    }
    let _ = writeln!(out, "    for:");
    for j in &r.claimants {
        job_line(out, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::live::{LiveEnvironment, LiveQueue, LiveShare};

    fn share(name: &str, limit: u32, strategy: Strategy, borrow_limit: i32) -> ShareSpec {
        ShareSpec {
            limits: [("gpu".to_string(), limit)].into(),
            strategy,
            borrow_limit_percent: borrow_limit,
            ..ShareSpec::new(name)
        }
    }

    fn desired(shares: Vec<ShareSpec>) -> Desired {
        Desired {
            names: Names {
                service_environment: "q-se".into(),
                scheduling_policy: "q-policy".into(),
                job_queue: "q".into(),
            },
            environment: [("gpu".to_string(), 4)].into(),
            shares: shares
                .into_iter()
                .map(|spec| DesiredShare {
                    spec,
                    tags: ShareTags::new(),
                })
                .collect(),
            admins: None,
            classes: None,
            policy_tags: ShareTags::new(),
            fair: Default::default(),
            groups: None,
        }
    }

    /// A server that holds exactly `d`, with `jobs` (share, name, priority, running).
    fn live(d: &Desired, jobs: &[(&str, &str, i64, bool)]) -> Live {
        Live {
            environment: Some(LiveEnvironment {
                limits: d.environment.clone(),
                state: "ENABLED".into(),
            }),
            policy_arn: Some("arn:aws:batch:r:1:scheduling-policy/q-policy".into()),
            queue: Some(LiveQueue {
                state: "ENABLED".into(),
                policy: Some("q-policy".into()),
                environments: vec!["q-se".into()],
                arn: "arn/q".into(),
                classes: d.classes.clone().unwrap_or_default(),
            }),
            shares: d
                .shares
                .iter()
                .map(|s| {
                    let arn = format!("arn/{}", s.spec.name);
                    (
                        s.spec.name.clone(),
                        LiveShare {
                            spec: s.spec.clone(),
                            arn,
                            tags: s.tags.clone(),
                        },
                    )
                })
                .collect(),
            jobs: jobs
                .iter()
                .enumerate()
                .map(|(i, &(share, name, priority, running))| LiveJob {
                    id: format!("id-{name}"),
                    name: name.into(),
                    share: share.into(),
                    state: if running {
                        JobState::Running
                    } else {
                        JobState::Runnable
                    },
                    unit: "gpu".into(),
                    count: 1,
                    priority,
                    created_at: i as i64,
                    reclaimable: true,
                })
                .collect(),
            jobs_truncated: false,
            admins: d.admins.clone(),
            policy_tags: d.policy_tags.clone(),
            groups: d.groups.clone(),
        }
    }

    fn names(jobs: &[JobRef]) -> Vec<&str> {
        jobs.iter().map(|j| j.name.as_str()).collect()
    }

    /// The plan once the server's what-if ranked the running jobs `order` (job names, victims
    /// first), as the core would: the plan names jobs in that order, whatever their priority.
    fn planned(desired: &Desired, server: &Live, order: &[&str]) -> Plan {
        let mut plan = diff(desired, server);
        let victim_order = order
            .iter()
            .map(|name| qm_api::qm::WhatIfJob {
                job_id: format!("id-{name}"),
                job_name: name.to_string(),
                quota_share_name: String::new(),
                capacity_unit: "gpu".into(),
                instances: 1,
                priority: 0,
            })
            .collect();
        let what_if = qm_api::qm::WhatIf {
            now: 0,
            decisions: Vec::new(),
            horizon_ms: 0,
            victim_order,
        };
        plan.foresee(&what_if, desired, server);
        plan
    }

    #[test]
    fn a_server_that_matches_the_file_needs_no_changes() {
        let d = desired(vec![share("a", 2, Strategy::Lend, -1)]);
        let plan = diff(&d, &live(&d, &[("a", "j", 0, true)]));
        assert!(plan.is_empty(), "{plan:?}");
        assert!(plan.preemptible.is_empty() && plan.preempted.is_empty());
    }

    #[test]
    fn a_lower_borrow_limit_exposes_the_borrowed_jobs_in_the_scheduler_s_victim_order() {
        let before = desired(vec![
            share("a", 1, Strategy::LendAndBorrow, -1),
            share("b", 3, Strategy::Lend, -1),
        ]);
        let server = live(
            &before,
            &[
                ("a", "own", 9, true),
                ("a", "old", 1, true),
                ("a", "new", 1, true),
            ],
        );
        let after = desired(vec![
            share("a", 1, Strategy::LendAndBorrow, 100),
            share("b", 3, Strategy::Lend, -1),
        ]);
        // Before the server ranked them, no job is named: the amount and the cause are.
        let plan = diff(&after, &server);
        assert_eq!(plan.preemptible.len(), 1, "{plan:?}");
        assert_eq!(plan.preemptible[0].instances, 2);
        assert!(plan.preemptible[0]
            .cause
            .contains("borrowLimit unlimited -> 100%"));
        assert!(plan.preemptible[0].jobs.is_empty(), "{plan:?}");
        // The core's order decides, not the priorities (`old` checkpointed later, say).
        let plan = planned(&after, &server, &["old", "new", "own"]);
        assert_eq!(names(&plan.preemptible[0].jobs), ["old", "new"]);
    }

    #[test]
    fn a_lowered_limit_warns_about_jobs_that_may_not_be_interrupted_instead_of_exposing_them() {
        let before = desired(vec![
            share("a", 3, Strategy::LendAndBorrow, -1),
            share("b", 3, Strategy::Lend, -1),
        ]);
        let mut server = live(
            &before,
            &[
                ("a", "firm-1", 5, true),
                ("a", "firm-2", 5, true),
                ("a", "loose", 0, true),
            ],
        );
        for j in &mut server.jobs {
            j.reclaimable = j.name == "loose";
        }
        let after = desired(vec![
            share("a", 1, Strategy::LendAndBorrow, -1),
            share("b", 3, Strategy::Lend, -1),
        ]);
        let plan = planned(&after, &server, &["loose", "firm-1", "firm-2"]);
        assert_eq!(plan.preemptible.len(), 1, "{plan:?}");
        let e = &plan.preemptible[0];
        // The firm jobs hold 2 of a's new limit of 1: they stay, and only loose is exposed.
        assert_eq!((e.instances, names(&e.jobs)), (1, vec!["loose"]));
        assert_eq!(names(&e.kept), ["firm-1", "firm-2"]);
        let text = render(&plan, "c.yaml");
        assert!(
            text.contains("warning: quota share a: capacityLimits 3 -> 1 (gpu): these jobs run only within their share's own quota"),
            "{text}"
        );
    }

    #[test]
    fn the_file_s_classes_become_the_job_queue_s_class_tags() {
        let mut d = desired(vec![share("a", 1, Strategy::Lend, -1)]);
        let mut server = live(&d, &[]);
        server.queue.as_mut().unwrap().classes =
            [("qm:class.old".to_string(), "interruptible".to_string())].into();
        d.classes = Some(
            [(
                "qm:class.release".to_string(),
                "non-interruptible,max-priority=500".to_string(),
            )]
            .into(),
        );
        let plan = diff(&d, &server);
        assert_eq!(plan.changes.len(), 1, "{plan:?}");
        assert_eq!(plan.changes[0].kind, Kind::JobQueue);
        assert_eq!(
            fields(&plan.changes[0]),
            [
                ("tags.qm:class.old", Some("interruptible"), None),
                (
                    "tags.qm:class.release",
                    None,
                    Some("non-interruptible,max-priority=500")
                )
            ]
        );
        // A file without `classes` leaves the queue's alone.
        d.classes = None;
        assert!(diff(&d, &server).is_empty());
    }

    #[test]
    fn lend_to_reserve_exposes_the_borrowers_it_backed() {
        let before = desired(vec![
            share("a", 1, Strategy::LendAndBorrow, -1),
            share("b", 3, Strategy::Lend, -1),
        ]);
        let server = live(
            &before,
            &[
                ("a", "a1", 5, true),
                ("a", "a2", 2, true),
                ("a", "a3", 1, true),
                ("b", "b1", 0, true),
                ("b", "b-wait", 0, false),
            ],
        );
        let after = desired(vec![
            share("a", 1, Strategy::LendAndBorrow, -1),
            share("b", 3, Strategy::Reserve, -1),
        ]);
        let plan = planned(&after, &server, &["b1", "a3", "a2", "a1"]);
        let unbacked: Vec<&Exposure> = plan
            .preemptible
            .iter()
            .filter(|e| e.cause.contains("no longer backed"))
            .collect();
        assert_eq!(unbacked.len(), 1, "{plan:?}");
        assert_eq!(names(&unbacked[0].jobs), ["a3", "a2"]);
    }

    #[test]
    fn the_server_s_what_if_is_listed_by_unit_and_instant_with_the_jobs_preempted_for() {
        use qm_api::qm::{WhatIf, WhatIfAction, WhatIfDecision, WhatIfJob};
        let job = |id: &str, unit: &str| WhatIfJob {
            job_id: id.into(),
            job_name: id.into(),
            quota_share_name: "s".into(),
            capacity_unit: unit.into(),
            instances: 1,
            priority: 0,
        };
        let d = |at, action, id: &str, unit: &str, for_job: Option<&str>| WhatIfDecision {
            at,
            action,
            job: job(id, unit),
            for_job: for_job.map(|f| job(f, unit)),
        };
        let what_if = WhatIf {
            now: 1_000,
            decisions: vec![
                d(1_000, WhatIfAction::Preempt, "v1", "gpu", Some("w1")),
                d(1_000, WhatIfAction::Start, "w0", "gpu", None),
                d(1_000, WhatIfAction::Preempt, "v2", "gpu", Some("w1")),
                d(301_000, WhatIfAction::Preempt, "v3", "gpu", Some("w2")),
                d(1_000, WhatIfAction::Terminate, "t", "cpu", None),
            ],
            horizon_ms: 1_800_000,
            victim_order: Vec::new(),
        };
        let d0 = desired(vec![share("s", 1, Strategy::Lend, -1)]);
        let server = live(&d0, &[]);
        let mut plan = diff(&d0, &server);
        plan.foresee(&what_if, &d0, &server);
        let groups: Vec<(u64, Vec<&str>, Vec<&str>)> = plan
            .preempted
            .iter()
            .map(|r| (r.after_seconds, names(&r.victims), names(&r.claimants)))
            .collect();
        assert_eq!(
            groups,
            [
                (0, vec!["v1", "v2"], vec!["w1"]),
                (300, vec!["v3"], vec!["w2"])
            ]
        );
    }

    #[test]
    fn a_removed_share_is_disabled_then_deleted_and_its_jobs_are_named() {
        let before = desired(vec![
            share("a", 2, Strategy::Lend, -1),
            share("gone", 2, Strategy::Lend, -1),
        ]);
        let server = live(&before, &[("gone", "g1", 0, true)]);
        let plan = diff(&desired(vec![share("a", 2, Strategy::Lend, -1)]), &server);
        assert_eq!(plan.changes.len(), 1);
        let c = &plan.changes[0];
        assert_eq!((c.action, c.name.as_str()), (Action::Delete, "gone"));
        assert_eq!(names(&c.terminated_jobs), ["g1"]);
    }

    /// `d` with share `name`'s controlled tags set to `pairs`.
    fn tagged(mut d: Desired, name: &str, pairs: &[(&str, &str)]) -> Desired {
        let s = d.shares.iter_mut().find(|s| s.spec.name == name).unwrap();
        s.tags = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        d
    }

    fn fields(c: &Change) -> Vec<(&str, Option<&str>, Option<&str>)> {
        c.fields
            .iter()
            .map(|f| (f.field.as_str(), f.from.as_deref(), f.to.as_deref()))
            .collect()
    }

    #[test]
    fn a_changed_permission_is_a_share_update_of_that_tag_alone() {
        let shares = || vec![share("a", 2, Strategy::Lend, -1)];
        let server = live(
            &tagged(
                desired(shares()),
                "a",
                &[("qm:submitters", "group:research"), ("other", "kept")],
            ),
            &[],
        );
        let file = tagged(
            desired(shares()),
            "a",
            &[("qm:submitters", "group:research,alice"), ("other", "kept")],
        );
        let plan = diff(&file, &server);
        assert_eq!(plan.changes.len(), 1, "{plan:?}");
        let c = &plan.changes[0];
        assert_eq!((c.kind, c.action), (Kind::QuotaShare, Action::Update));
        assert_eq!(
            fields(c),
            [(
                "tags.qm:submitters",
                Some("group:research"),
                Some("group:research,alice")
            )]
        );
        assert!(plan.preemptible.is_empty());
        assert!(render(&plan, "c.yaml")
            .contains("      tags.qm:submitters: group:research -> group:research,alice\n"));
    }

    #[test]
    fn a_field_left_out_of_the_file_is_a_tag_to_remove() {
        let shares = || vec![share("a", 2, Strategy::Lend, -1)];
        let server = live(
            &tagged(
                desired(shares()),
                "a",
                &[("qm:leads", "bob"), ("qm:min-runtime-seconds", "600")],
            ),
            &[],
        );
        let file = tagged(desired(shares()), "a", &[("qm:min-runtime-seconds", "600")]);
        let plan = diff(&file, &server);
        assert_eq!(
            fields(&plan.changes[0]),
            [("tags.qm:leads", Some("bob"), None)]
        );
        assert!(render(&plan, "c.yaml").contains("      tags.qm:leads: bob -> (none)\n"));
        assert!(diff(&file, &live(&file, &[])).is_empty());
    }

    #[test]
    fn a_new_share_is_created_with_its_tags_in_a_fixed_order() {
        let file = tagged(
            desired(vec![share("a", 2, Strategy::Lend, -1)]),
            "a",
            &[
                ("qm:max-preemptions-per-hour", "3"),
                ("qm:max-priority", "100"),
                ("qm:submitters", "alice"),
                ("qm:leads", "bob"),
                ("qm:min-runtime-seconds", "60"),
            ],
        );
        let plan = diff(&file, &Live::default());
        let c = plan.changes.last().unwrap();
        assert_eq!((c.kind, c.action), (Kind::QuotaShare, Action::Create));
        let tags: Vec<_> = fields(c)
            .into_iter()
            .filter(|(f, _, _)| f.starts_with("tags."))
            .collect();
        assert_eq!(
            tags,
            [
                ("tags.qm:submitters", None, Some("alice")),
                ("tags.qm:leads", None, Some("bob")),
                ("tags.qm:max-priority", None, Some("100")),
                ("tags.qm:min-runtime-seconds", None, Some("60")),
                ("tags.qm:max-preemptions-per-hour", None, Some("3")),
            ]
        );
    }

    fn list(entries: &[&str]) -> Option<Vec<String>> {
        Some(entries.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn fair_sharing_turned_on_is_applied_last_and_turned_off_first() {
        let d = desired(vec![share("a", 1, Strategy::LendAndBorrow, -1)]);
        let mut file = d.clone();
        file.fair.weight = true;
        file.shares[0].tags.insert("qm:weight".into(), "3".into());
        let on = [
            ("qm:idle-assignment".to_string(), "FAIR_SHARE".to_string()),
            ("qm:fair-reclaim".to_string(), "true".to_string()),
        ];
        file.policy_tags = on.clone().into();
        let kinds = |p: &Plan| p.changes.iter().map(|c| c.kind).collect::<Vec<_>>();
        // On: the weights first, then the rules that use them.
        let plan = diff(&file, &live(&d, &[]));
        assert_eq!(kinds(&plan), [Kind::QuotaShare, Kind::SchedulingPolicy]);
        // Off: the rules first, then the weights they no longer read.
        let mut server = live(&file, &[]);
        server.policy_tags = on.into();
        let mut off = d.clone();
        off.fair.weight = true;
        off.policy_tags = [("qm:fair-reclaim".to_string(), "false".to_string())].into();
        let plan = diff(&off, &server);
        assert_eq!(kinds(&plan), [Kind::SchedulingPolicy, Kind::QuotaShare]);
    }

    #[test]
    fn fair_sharing_is_planned_as_policy_tags_and_groups_and_left_alone_when_absent() {
        let d = desired(vec![share("a", 1, Strategy::LendAndBorrow, -1)]);
        let mut server = live(&d, &[]);
        // A server with fair sharing on, and a file that says nothing of it: no change.
        server.policy_tags = [("qm:idle-assignment".to_string(), "FAIR_SHARE".to_string())].into();
        assert!(diff(&d, &server).is_empty());
        // A file that says FIFO of a policy without the tag: FIFO is the default.
        let mut file = d.clone();
        file.policy_tags = [("qm:idle-assignment".to_string(), "FIFO".to_string())].into();
        assert!(diff(&file, &live(&d, &[])).is_empty());
        // ... and of a FAIR_SHARE policy: the tag changes.
        let plan = diff(&file, &server);
        assert_eq!(plan.changes.len(), 1);
        assert_eq!(
            (plan.changes[0].kind, plan.changes[0].action),
            (Kind::SchedulingPolicy, Action::Update)
        );
        assert_eq!(
            fields(&plan.changes[0]),
            [("tags.qm:idle-assignment", Some("FAIR_SHARE"), Some("FIFO"))]
        );
        // Groups: a new one, and one the file drops.
        let group = |name: &str, limit: i64, weight: i64| qm_api::qm::GroupDef {
            name: name.into(),
            limits: [("gpu".to_string(), limit)].into(),
            weight: Some(weight),
        };
        let mut file = d.clone();
        file.groups = Some(vec![group("research", 3, 2)]);
        let mut server = live(&d, &[]);
        server.groups = Some(vec![group("old", 1, 1)]);
        let plan = diff(&file, &server);
        let c = &plan.changes[0];
        assert_eq!((c.kind, c.action), (Kind::Groups, Action::Update));
        assert_eq!(
            fields(c),
            [
                ("groups.old.weight", Some("1"), None),
                ("groups.old.limits.gpu", Some("1"), None),
                ("groups.research.weight", None, Some("2")),
                ("groups.research.limits.gpu", None, Some("3")),
            ]
        );
        let text = render(&plan, "c.yaml");
        assert!(
            text.contains("  ~ groups of job queue q\n      groups.old.weight: 1 -> (none)\n"),
            "{text}"
        );
        server.groups = file.groups.clone();
        assert!(diff(&file, &server).is_empty());
    }

    #[test]
    fn a_changed_admin_list_is_one_line_set_after_everything_else() {
        let shares = || vec![share("a", 2, Strategy::Lend, -1)];
        let mut server = live(&desired(shares()), &[]);
        server.admins = list(&["ops"]);
        let mut file = desired(vec![share("a", 3, Strategy::Lend, -1)]);
        file.admins = list(&["ops", "group:platform"]);
        let plan = diff(&file, &server);
        let c = plan.changes.last().unwrap();
        assert_eq!((c.kind, c.action), (Kind::Admins, Action::Update));
        assert_eq!(
            fields(c),
            [("admins", Some("ops"), Some("ops,group:platform"))]
        );
        assert_eq!(plan.changes.len(), 2, "{plan:?}");
        let text = render(&plan, "c.yaml");
        assert!(
            text.contains("\n  ~ admins: ops -> ops,group:platform\n"),
            "{text}"
        );
        assert!(
            text.contains("Plan: 0 to create, 2 to change, 0 to delete."),
            "{text}"
        );
        assert!(
            plan.summary().ends_with("(~quota share a, ~admins)"),
            "{}",
            plan.summary()
        );
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["changes"][1]["kind"], "admins");
        assert_eq!(json["changes"][1]["fields"][0]["to"], "ops,group:platform");
    }

    #[test]
    fn an_admin_list_left_out_of_the_file_is_not_managed() {
        let d = desired(vec![share("a", 2, Strategy::Lend, -1)]);
        let mut server = live(&d, &[]);
        server.admins = list(&["ops"]);
        assert!(diff(&d, &server).is_empty());
    }

    #[test]
    fn the_same_admins_are_no_change_and_a_server_without_any_shows_none() {
        let mut d = desired(vec![share("a", 2, Strategy::Lend, -1)]);
        d.admins = list(&["ops"]);
        assert!(diff(&d, &live(&d, &[])).is_empty());
        let mut server = live(&d, &[]);
        server.admins = list(&[]);
        let plan = diff(&d, &server);
        assert_eq!(fields(&plan.changes[0]), [("admins", None, Some("ops"))]);
        assert!(render(&plan, "c.yaml").contains("  ~ admins: (none) -> ops\n"));
        // The server keeps the file's order, so a reordered list is set again.
        server.admins = list(&["group:platform", "ops"]);
        d.admins = list(&["ops", "group:platform"]);
        assert!(!diff(&d, &server).is_empty());
    }

    #[test]
    fn an_empty_server_gets_everything_created_policy_first() {
        let d = desired(vec![share("a", 2, Strategy::Lend, -1)]);
        let plan = diff(&d, &Live::default());
        let kinds: Vec<Kind> = plan.changes.iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::SchedulingPolicy,
                Kind::ServiceEnvironment,
                Kind::JobQueue,
                Kind::QuotaShare
            ]
        );
        assert!(plan.changes.iter().all(|c| c.action == Action::Create));
    }
}
