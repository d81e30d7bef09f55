//! The wire types of Quartermaster's own API (`/qm/v1/...`): what is not AWS Batch but is
//! read by `qm`, the dashboard and scripts, so the server and its clients share one
//! definition instead of a `json!` on one side and a copy on the other.

use serde::{Deserialize, Serialize};

/// The principal a server's first start creates, whose keys go to `<data-dir>/credentials`
/// (the client looks there for them when no other credentials are given).
pub const ADMIN: &str = "qm-admin";

/// The data directory `qm serve` uses unless told (`--data-dir`), where the client also looks
/// for the admin's credentials.
pub const DEFAULT_DATA_DIR: &str = "./qm-data";

/// One quota share's usage of one capacity unit, as `GET /qm/v1/usage` reports it
/// (instance counts; read as numbers, since the server may write `0.0`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareUsage {
    /// The share.
    pub quota_share_name: String,
    /// The instance type.
    pub capacity_unit: String,
    /// Its entitlement (the share's limit).
    #[serde(serialize_with = "whole_if_integral")]
    pub entitled: f64,
    /// Instances its attempts hold, own and borrowed.
    #[serde(serialize_with = "whole_if_integral")]
    pub used: f64,
    /// Of those, within its own entitlement.
    #[serde(serialize_with = "whole_if_integral")]
    pub own_use: f64,
    /// Of those, borrowed from other shares.
    #[serde(serialize_with = "whole_if_integral")]
    pub borrowed: f64,
    /// Its idle instances that other shares are using.
    #[serde(serialize_with = "whole_if_integral")]
    pub lent_out: f64,
    /// Instances held by attempts that are stopping.
    #[serde(default, serialize_with = "whole_if_integral")]
    pub stopping: f64,
    /// Its RUNNABLE jobs.
    #[serde(serialize_with = "whole_if_integral")]
    pub runnable: f64,
    /// Its thrash protection in words (`min-runtime 900s`, `max 2 preemptions/h`), from its
    /// `qm:` tags; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<String>,
    /// `RESERVE`, `LEND` or `LEND_AND_BORROW` (absent from servers before it was reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Its borrow limit in percent of its entitlement, `-1` unlimited (absent from older
    /// servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<i32>,
    /// Whether its higher-priority jobs preempt its lower-priority ones (absent from older
    /// servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_share_preemption: Option<bool>,
}

/// Instances one share lends another: the borrowed instances of each borrower split over
/// the lenders in proportion to what each lends (lending is pooled), so a lender's flows add
/// up to its `lentOut`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flow {
    /// The instance type.
    pub capacity_unit: String,
    /// The share whose idle entitlement is used.
    pub lender: String,
    /// The share using it.
    pub borrower: String,
    /// Instances (possibly fractional: see above).
    #[serde(serialize_with = "whole_if_integral")]
    pub instances: f64,
}

/// One instance type's pool as a queue sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// The instance type.
    pub capacity_unit: String,
    /// The service environment's limit for it (0 when it has none).
    pub environment_max: u32,
    /// Physical instances of the type, all queues together, when the executor reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical: Option<u32>,
    /// Instances the queue's attempts hold, stopping ones included.
    pub used: u32,
    /// Instances the queue could still start: the lower of the environment's limit and the
    /// physical instances other queues do not hold, less `used`.
    pub free: u32,
}

/// A share's thrash protection in words, as `qm shares` shows it; `None` without any.
pub fn protection_words(min_runtime_ms: u64, max_preemptions_per_hour: u32) -> Option<String> {
    let mut parts = Vec::new();
    if min_runtime_ms > 0 {
        parts.push(format!("min-runtime {}s", min_runtime_ms / 1000));
    }
    if max_preemptions_per_hour > 0 {
        parts.push(format!("max {max_preemptions_per_hour} preemptions/h"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Writes an instance count as an integer when it is one, as the server does.
pub fn whole_if_integral<S: serde::Serializer>(n: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        serializer.serialize_i64(*n as i64)
    } else {
        serializer.serialize_f64(*n)
    }
}

/// The usage of one queue's shares.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueUsage {
    /// The queue.
    pub job_queue: String,
    /// One row per share and instance type.
    pub shares: Vec<ShareUsage>,
    /// Per instance type: the pool's size and what is free (absent from older servers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool: Vec<Pool>,
    /// Who lends to whom, per instance type; empty when nobody borrows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<Flow>,
    /// Per instance type: instances free while a job that fits them waits, and why; empty
    /// when nothing is both free and wanted (and from older servers).
    #[serde(
        default,
        rename = "idleWhileWaiting",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub idle_while_waiting: Vec<IdleWhileWaiting>,
    /// Its rules for idle capacity and each share's and group's standing (absent from older
    /// servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness: Option<QueueFairness>,
}

/// Free instances of one type that waiting jobs fit (`qm_core::Scheduler::idle_while_waiting`):
/// the figure that says a policy wastes the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdleWhileWaiting {
    /// The instance type.
    pub capacity_unit: String,
    /// Instances nobody holds.
    pub free: u32,
    /// Of those, instances waiting jobs that fit them want.
    pub idle: u32,
    /// The dominant cause: `reservation`, `reserve`, `borrow_limit`, `group_limit`, `no_borrowing`,
    /// `never_fits` or `other`.
    pub cause: String,
    /// A job that waits for that cause (its id), for `qm explain`.
    pub job_id: String,
    /// Its name.
    pub job_name: String,
}

/// A job queue's groups of shares: the body of `GET` and `PUT /qm/v1/queues/{queue}/groups`.
/// A group's members are the shares whose tag `qm:group` names it; a group a share names but
/// this list does not define has weight 1 and no limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueGroups {
    /// The definitions, in the order given (a PUT replaces them all).
    pub groups: Vec<GroupDef>,
}

/// One group's definition: its ceiling per instance type and its weight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDef {
    /// 1 to 64 letters, digits, `_` and `-`; what the members' `qm:group` tags name.
    pub name: String,
    /// Instance type -> the most instances the members may hold together; a type left out
    /// is not capped by the group. Signed on the wire so that a negative count is refused
    /// with a message naming it rather than as a bad body.
    #[serde(default)]
    pub limits: std::collections::BTreeMap<String, i64>,
    /// Weight between groups (and ungrouped shares) under `FAIR_SHARE`, 1 to 10000
    /// (default 1).
    #[serde(default)]
    pub weight: Option<i64>,
}

/// The most instances a group's limit may name (a sanity bound, far above any real pool).
pub const MAX_GROUP_LIMIT: i64 = 1_000_000;
/// The most instance types a group may limit (as a share's `capacityLimits`).
pub const MAX_GROUP_LIMITS: usize = 5;

impl QueueGroups {
    /// The definitions within their bounds, each with its weight filled in, or a
    /// ClientException naming the field that is not.
    pub fn checked(&self, max_groups: usize) -> Result<QueueGroups, crate::ApiError> {
        let fail = |m: String| Err(crate::ApiError::client(m));
        if self.groups.len() > max_groups {
            return fail(format!(
                "groups has {} entries: a job queue has at most {max_groups} groups",
                self.groups.len()
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::with_capacity(self.groups.len());
        for (i, g) in self.groups.iter().enumerate() {
            if !crate::validate::is_group_name(&g.name) {
                let shown: String = g
                    .name
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(64)
                    .collect();
                return fail(format!(
                    "groups[{i}].name '{shown}' is not a group name: give 1 to 64 letters, digits, _ and - (what the members' qm:group tags say)"
                ));
            }
            if !seen.insert(g.name.as_str()) {
                return fail(format!(
                    "groups[{i}].name '{}' is defined twice: give each group once",
                    g.name
                ));
            }
            if g.limits.len() > MAX_GROUP_LIMITS {
                return fail(format!(
                    "groups[{i}].limits has {} instance types: give at most {MAX_GROUP_LIMITS}",
                    g.limits.len()
                ));
            }
            for (unit, n) in &g.limits {
                let field = format!("groups[{i}].limits");
                let shown: String = unit.chars().filter(|c| !c.is_control()).take(64).collect();
                if unit.is_empty()
                    || unit.len() > 64
                    || unit.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return fail(format!(
                        "{field}: '{shown}' is not an instance type: give one such as ml.p4d.24xlarge"
                    ));
                }
                if !(0..=MAX_GROUP_LIMIT).contains(n) {
                    return fail(format!(
                        "{field}.{shown} is {n}: give the most instances the group's members may hold together, 0 to {MAX_GROUP_LIMIT}"
                    ));
                }
            }
            let weight = g.weight.unwrap_or(1);
            let max = i64::from(crate::validate::MAX_WEIGHT);
            if !(1..=max).contains(&weight) {
                return fail(format!(
                    "groups[{i}].weight is {weight}: give a whole number from 1 to {max}, the group's weight when idle capacity is shared fairly (default 1)"
                ));
            }
            out.push(GroupDef {
                name: g.name.clone(),
                limits: g.limits.clone(),
                weight: Some(weight),
            });
        }
        Ok(QueueGroups { groups: out })
    }
}

/// A queue's rules for idle capacity and where each share and group stands under them
/// (`qm_core::Scheduler::fairness`), in `GET /qm/v1/usage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueFairness {
    /// `FIFO` or `FAIR_SHARE` (the scheduling policy's tag `qm:idle-assignment`).
    pub idle_assignment: String,
    /// Whether borrowers preempt each other for fairness (`qm:fair-reclaim`).
    pub fair_reclaim: bool,
    /// One entry per share, in the order the shares were created.
    pub shares: Vec<ShareFairness>,
    /// The groups: those defined and those the shares' tags name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupFairness>,
}

/// One share's standing under fair sharing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareFairness {
    /// The share.
    pub quota_share_name: String,
    /// Its weight (`qm:weight`).
    pub weight: u32,
    /// Its group (`qm:group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Its weighted borrowed share: over the instance types it borrows, the largest
    /// `borrowed / (weight × lendable)`.
    pub weighted_share: f64,
    /// The instance type that figure comes from, while it borrows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dominant: Option<String>,
    /// Per instance type, the instances it would borrow if every borrower wanted all that
    /// can be lent, split by weight; empty for a share that does not borrow.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub fair_share: std::collections::BTreeMap<String, f64>,
}

/// One group's definition and standing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupFairness {
    /// The group.
    pub name: String,
    /// Its members (the shares tagged with it).
    pub shares: Vec<String>,
    /// Its ceiling per instance type (empty: none).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub limits: std::collections::BTreeMap<String, u32>,
    /// Its weight.
    pub weight: u32,
    /// Per instance type, what its members hold together.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub usage: std::collections::BTreeMap<String, u32>,
    /// What its members borrow from outside it, weighted as a share's is.
    pub weighted_share: f64,
}

/// The body of `GET /qm/v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// One entry per queue.
    pub queues: Vec<QueueUsage>,
}

/// The body of `GET /qm/v1/history?jobQueue=&window=`: a queue's recent past, sampled by the
/// server in memory (lost at a restart; `GET /qm/v1/usage/report` reads the durable record).
/// Series are aligned with `at`: value `i` of each is the period that starts at `at[i]` and
/// lasts `stepMs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// The queue.
    pub job_queue: String,
    /// Start of the window (epoch ms).
    pub since: i64,
    /// End of the window (epoch ms).
    pub until: i64,
    /// How often the server samples (ms).
    pub sample_interval_ms: u64,
    /// The length of one point (ms): the samples within it are averaged.
    pub step_ms: u64,
    /// Start of each point (epoch ms); only points with samples are listed.
    pub at: Vec<i64>,
    /// RUNNABLE jobs of the queue, averaged over the point.
    pub queue_depth: Vec<f64>,
    /// Attempts of the queue preempted within the point.
    pub preemptions: Vec<u64>,
    /// One series per share, in name order.
    pub shares: Vec<ShareHistory>,
}

/// One share's series in a [`History`] (instances, all instance types together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareHistory {
    /// The share.
    pub quota_share_name: String,
    /// Instances held within its entitlement, averaged over each point.
    pub own_use: Vec<f64>,
    /// Instances held above it (borrowed), averaged over each point.
    pub borrowed: Vec<f64>,
    /// Its attempts preempted within each point.
    pub preemptions: Vec<u64>,
}

/// How far back `GET /qm/v1/history` looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryWindow {
    /// The last hour.
    Hour,
    /// The last 24 hours (all the server keeps).
    Day,
}

impl HistoryWindow {
    /// Its length in ms.
    pub fn ms(self) -> i64 {
        match self {
            HistoryWindow::Hour => 3_600_000,
            HistoryWindow::Day => 86_400_000,
        }
    }

    /// Parses the wire spelling; the error says what is accepted.
    pub fn parse(field: &str, s: &str) -> Result<Self, crate::ApiError> {
        match s {
            "hour" => Ok(HistoryWindow::Hour),
            "day" => Ok(HistoryWindow::Day),
            other => Err(crate::ApiError::client(format!(
                "{field}: '{other}' is not a window; use hour or day"
            ))),
        }
    }
}

/// One entry of the audit log (`GET`/`POST /qm/v1/audit`); `at` is set by the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When it was recorded (epoch ms); ignored on input.
    #[serde(default)]
    pub at: i64,
    /// Who: the principal that signed the request that recorded it (on input, whatever a
    /// client sends here is replaced by that).
    #[serde(default)]
    pub actor: String,
    /// What kind of change (`apply`).
    pub action: String,
    /// One line.
    pub summary: String,
    /// The full plan that was applied.
    #[serde(default)]
    pub details: String,
    /// For a change of a resource's tags (where permissions, classes, weights, groups and
    /// thrash settings live): the tags before and after it. Set by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<TagChange>,
}

/// A resource's tags before and after a change ([`AuditEntry::tags`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagChange {
    /// The resource's ARN.
    pub resource: String,
    /// Its tags before.
    pub before: std::collections::BTreeMap<String, String>,
    /// Its tags after.
    pub after: std::collections::BTreeMap<String, String>,
}

/// The body of `GET /qm/v1/audit?maxResults=&nextToken=`: a page of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditLog {
    /// Oldest first.
    pub entries: Vec<AuditEntry>,
    /// Where the next page starts (pass it as `nextToken`); absent on the last page.
    #[serde(rename = "nextToken", default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
    /// How many older entries left the log for `<data-dir>/archive/audit-YYYY-MM.jsonl`
    /// (`[retention] audit_entries`).
    #[serde(rename = "archivedEntries", default, skip_serializing_if = "is_zero")]
    pub archived: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Most audit entries one `GET /qm/v1/audit` returns (and its default page size).
pub const MAX_AUDIT_PAGE: usize = 1000;
/// Longest audit `action`, in characters.
pub const MAX_AUDIT_ACTION_CHARS: usize = 64;
/// Longest audit `summary`, in characters.
pub const MAX_AUDIT_SUMMARY_CHARS: usize = 1024;
/// Longest audit `details` (a plan), in bytes.
pub const MAX_AUDIT_DETAILS_BYTES: usize = 256 * 1024;

impl AuditEntry {
    /// The entry's fields within their bounds, or a ClientException naming the one that is
    /// not.
    pub fn check(&self) -> Result<(), crate::ApiError> {
        let fail = |m: String| Err(crate::ApiError::client(m));
        let chars = |s: &str| s.chars().count();
        if self.action.is_empty() {
            return fail("action is required: say what changed (e.g. action \"apply\")".into());
        }
        if chars(&self.action) > MAX_AUDIT_ACTION_CHARS {
            return fail(format!(
                "action is {} characters long: give at most {MAX_AUDIT_ACTION_CHARS}",
                chars(&self.action)
            ));
        }
        if chars(&self.summary) > MAX_AUDIT_SUMMARY_CHARS {
            return fail(format!(
                "summary is {} characters long: give one line of at most {MAX_AUDIT_SUMMARY_CHARS}",
                chars(&self.summary)
            ));
        }
        if self.details.len() > MAX_AUDIT_DETAILS_BYTES {
            return fail(format!(
                "details is {} bytes long: give at most {MAX_AUDIT_DETAILS_BYTES} (256 KiB)",
                self.details.len()
            ));
        }
        Ok(())
    }
}

/// The body of `POST /qm/v1/what-if`: a queue's configuration as a change would leave it.
/// The server answers with what its scheduler would decide on a copy of its state
/// ([`WhatIf`]); nothing is changed. `qm plan` sends the cluster file's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfRequest {
    /// The job queue (name or ARN).
    pub job_queue: String,
    /// Its service environment's capacity limits after the change; unchanged when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_limits: Option<Vec<crate::CapacityLimit>>,
    /// Every quota share the queue is to have, in the shape of CreateQuotaShare (each
    /// `jobQueue` names this queue); a share of the queue not listed is deleted. A listed
    /// share without `tags` keeps its current ones, as UpdateQuotaShare does.
    pub quota_shares: Vec<crate::CreateQuotaShareRequest>,
    /// The scheduling policy's fair-sharing tags after the change (`qm:idle-assignment`,
    /// `qm:fair-reclaim`), over its current ones: a key left out stays as it is.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub policy_tags: std::collections::BTreeMap<String, String>,
    /// The queue's group definitions after the change; absent = as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<GroupDef>>,
    /// Tag keys whose current value a listed share with `tags` keeps when its `tags` leave
    /// the key out (`qm plan` sends `qm:weight` and `qm:group` when its file is silent on
    /// them, as `qm apply` then leaves them alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_tags: Vec<String>,
}

/// What a what-if decision does to a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WhatIfAction {
    /// The waiting job would start.
    Start,
    /// The running job would be preempted (`forJobId` says for which job).
    Preempt,
    /// The running job would be terminated (its share is deleted).
    Terminate,
}

/// A job a what-if decision names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfJob {
    /// Its id.
    pub job_id: String,
    /// Its name.
    pub job_name: String,
    /// Its quota share.
    pub quota_share_name: String,
    /// Its instance type.
    pub capacity_unit: String,
    /// Its instances.
    pub instances: u32,
    /// Its scheduling priority.
    pub priority: u32,
}

/// One decision of a what-if.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfDecision {
    /// When (epoch ms): the request's instant, or later when a job would first wait out its
    /// patience with its victims.
    pub at: i64,
    /// What happens.
    pub action: WhatIfAction,
    /// The job it happens to.
    pub job: WhatIfJob,
    /// For a preemption: the job it is preempted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_job: Option<WhatIfJob>,
}

/// The answer to `POST /qm/v1/what-if`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIf {
    /// The instant it was worked out for (epoch ms): decisions at it happen at once.
    pub now: i64,
    /// In the order the scheduler would make them.
    pub decisions: Vec<WhatIfDecision>,
    /// How far ahead it looked (ms): passes that patience brings within it are included.
    pub horizon_ms: u64,
    /// The queue's running jobs once the change is made, per instance type, in the order the
    /// scheduler ranks victims (the core's victim order): a preemption takes the first ones
    /// its rules allow. `qm plan` names a change's preemptible jobs in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub victim_order: Vec<WhatIfJob>,
}

/// The body of `POST /qm/v1/jobs/{job}/preempt`: a drill (`qm preempt`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreemptRequest {
    /// Why, for the attempt's status reason and the audit log (at most 1,024 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to `POST /qm/v1/jobs/{job}/preempt`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptResponse {
    /// The job's id.
    pub job_id: String,
    /// Its name.
    pub job_name: String,
}

/// The body of `POST /qm/v1/drain` (`qm drain`, admins): drain this server's executor, or
/// end the drain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainRequest {
    /// Also stop the running attempts as a preemption would (SIGTERM, the grace period) and
    /// queue their jobs again, using neither a retry nor a preemption.
    #[serde(default)]
    pub requeue: bool,
    /// End the drain instead (`qm drain --cancel`); `requeue` must then be false.
    #[serde(default)]
    pub cancel: bool,
    /// Why, for the waiting jobs' status reason and the audit log (at most 1,024 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to `GET` and `POST /qm/v1/drain`: whether the executor is drained now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainStatus {
    /// Whether nothing starts until an admin ends the drain.
    pub drained: bool,
    /// Who drained it, and why; absent when it is not drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The jobs this request stopped and queued again (`requeue`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requeued: Vec<PreemptResponse>,
    /// Attempts still holding capacity: running, or stopping after a requeue.
    #[serde(default)]
    pub attempts_holding: u32,
}

/// The answer to `POST /qm/v1/reload` (`qm reload`, admins): the config file was read again
/// and applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadResponse {
    /// The file read; absent when the server runs on its embedded defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// The keys whose change was applied (empty: the file says what was in force).
    pub changed: Vec<String>,
    /// The executor's instances per type now.
    pub capacity: std::collections::BTreeMap<String, u32>,
}

/// The body of `GET /qm/v1/jobs/{job}/attempt`: the attempt that holds capacity now, if any
/// (DescribeServiceJob's `attempts` lists ended attempts only).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobAttemptNow {
    /// The live attempt; absent while the job waits or once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningAttempt>,
    /// How each attempt that followed a preemption resumed, oldest first; absent when the job
    /// was never preempted (or from a server older than the field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumes: Vec<ResumeRecord>,
    /// What each ended attempt used, oldest first, where the executor counted it (the local
    /// executor's: from the attempt's control groups, else its reaped processes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<AttemptUsage>,
}

/// What one ended attempt used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptUsage {
    /// The attempt's 1-based number.
    pub attempt: u32,
    /// CPU time of its processes, user and system, summed over its hosts (seconds).
    pub cpu_seconds: f64,
    /// The most memory one of its hosts held at once (bytes), where the kernel says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The mean utilisation of its GPUs (percent) over the samples the server took
    /// (`nvidia-smi`, every `[executor] gpu_sample_seconds`); absent where none was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_percent: Option<u32>,
    /// The most memory its GPUs held together in one sample (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_gpu_memory_bytes: Option<u64>,
}

/// Whether the attempt after a preemption went on from the checkpoint it was told of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResumeOutcome {
    /// Its first step was at or past the preempted attempt's last checkpoint step.
    Resumed,
    /// Its first step was below that checkpoint step (it started over, e.g. at 0).
    Restarted,
    /// One of the two attempts reported no step or no checkpoint step (or the new one has not
    /// reported yet); the lost work is estimated from checkpoint-file times.
    Unknown,
}

impl ResumeOutcome {
    /// The wire name: `resumed`, `restarted` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumeOutcome::Resumed => "resumed",
            ResumeOutcome::Restarted => "restarted",
            ResumeOutcome::Unknown => "unknown",
        }
    }
}

/// One attempt that followed a preemption, against the attempt that was preempted (from the
/// steps both wrote to their progress files, `QM_PROGRESS_FILE`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeRecord {
    /// The 1-based number of the attempt that followed the preemption (the preempted one is
    /// the number before it).
    pub attempt: u32,
    /// How it resumed.
    pub outcome: ResumeOutcome,
    /// The last checkpoint step the preempted attempt reported: where it should resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_step: Option<u64>,
    /// The last step the preempted attempt reported: where it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_last_step: Option<u64>,
    /// The first step this attempt reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step: Option<u64>,
    /// Steps computed again: how far below the preempted attempt's last step this one started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recomputed_steps: Option<u64>,
    /// Instance-hours spent again: the recomputed steps at the preempted attempt's rate, or,
    /// when the steps are unknown, its instances times the time from its last checkpoint (or
    /// its start) to its stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recomputed_instance_hours: Option<f64>,
}

/// An attempt that holds capacity: running, starting, or stopping after a preemption or a
/// termination.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningAttempt {
    /// 1-based number within the job (what `qm logs --attempt` takes).
    pub number: u32,
    /// The SageMaker-style training job this attempt runs as.
    pub training_job_name: String,
    /// The instance type it holds.
    pub instance_type: String,
    /// Instances it holds.
    pub count: u32,
    /// Its hosts in SageMaker order (`algo-1`, ...), each with its process id once running.
    pub hosts: Vec<AttemptHost>,
    /// When capacity was granted (epoch ms).
    pub granted_at: i64,
    /// When the executor reported its processes running (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at: Option<i64>,
    /// When it last reported a checkpoint (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_at: Option<i64>,
    /// When it was told to stop, if it is stopping (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping_since: Option<i64>,
    /// Why it is stopping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The last step it reported in its progress file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step: Option<u64>,
    /// The last checkpoint step it reported in its progress file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_step: Option<u64>,
}

/// One host of a running attempt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptHost {
    /// The SageMaker host name (`algo-N`).
    pub name: String,
    /// Its process (group) id, once the executor reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// How `GET /qm/v1/usage/report` groups its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UsageBy {
    /// One row per (queue, quota share).
    Share,
    /// One row per principal (who submitted the jobs).
    Principal,
    /// One row per instance type.
    InstanceType,
}

impl UsageBy {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageBy::Share => "share",
            UsageBy::Principal => "principal",
            UsageBy::InstanceType => "instance-type",
        }
    }

    /// Parses the wire spelling; the error says what is accepted.
    pub fn parse(field: &str, s: &str) -> Result<Self, crate::ApiError> {
        match s {
            "share" => Ok(UsageBy::Share),
            "principal" => Ok(UsageBy::Principal),
            "instance-type" => Ok(UsageBy::InstanceType),
            other => Err(crate::ApiError::client(format!(
                "{field}: '{other}' is not a grouping; use share, principal or instance-type"
            ))),
        }
    }
}

/// How long each period of a usage report is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UsageEvery {
    /// UTC hours (the dashboard's day view).
    Hour,
    /// UTC days.
    Day,
    /// ISO weeks: Monday 00:00 UTC to the next Monday.
    Week,
}

impl UsageEvery {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageEvery::Hour => "hour",
            UsageEvery::Day => "day",
            UsageEvery::Week => "week",
        }
    }

    /// Parses the wire spelling; the error says what is accepted.
    pub fn parse(field: &str, s: &str) -> Result<Self, crate::ApiError> {
        match s {
            "hour" => Ok(UsageEvery::Hour),
            "day" => Ok(UsageEvery::Day),
            "week" => Ok(UsageEvery::Week),
            other => Err(crate::ApiError::client(format!(
                "{field}: '{other}' is not a period; use hour, day or week"
            ))),
        }
    }
}

/// A usage report: what each share (principal, instance type) used, borrowed and lent in
/// `[since, until)`, period by period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    /// Start of the window (epoch ms, inclusive).
    pub since: i64,
    /// End of the window (epoch ms, exclusive).
    pub until: i64,
    /// The grouping.
    pub by: UsageBy,
    /// The period length, if the window is split.
    pub every: Option<UsageEvery>,
    /// One row per period and key, periods in order, keys sorted.
    pub rows: Vec<UsageRow>,
    /// What the reader should know about the figures (e.g. an instance type without a GPU
    /// count, so its GPU-hours are 0).
    pub notes: Vec<String>,
}

/// One row of a [`UsageReport`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// Start of the period (epoch ms).
    pub period_start: i64,
    /// End of the period (epoch ms, exclusive).
    pub period_end: i64,
    /// The job queue (by share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue: Option<String>,
    /// The quota share (by share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Who submitted (by principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The instance type (by instance type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Instance-hours.
    pub instance_hours: UsageHours,
    /// GPU-hours: instance-hours times the type's GPUs per instance.
    pub gpu_hours: UsageHours,
    /// Attempts of these jobs preempted (capacity reclaimed or in-share).
    pub preemptions_suffered: u64,
    /// Attempts of other jobs preempted for these jobs.
    pub preemptions_caused: u64,
    /// Instance-hours of work lost to those preemptions: from the attempt's last checkpoint
    /// (else its start running) to its end.
    pub lost_instance_hours: f64,
    /// The same in GPU-hours.
    pub lost_gpu_hours: f64,
    /// Attempts started in the period.
    pub starts: u64,
    /// Seconds from RUNNABLE to capacity granted, over the starts in the period.
    pub queue_delay_seconds: Option<Percentiles>,
    /// CPU-hours the attempts that ended in the period used (their processes' user and system
    /// time), where the executor counted it; absent from servers older than the field.
    #[serde(default)]
    pub cpu_hours: f64,
    /// The most memory one host of those attempts held at once (bytes), where counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The mean sampled utilisation of those attempts' GPUs (percent), each attempt weighted
    /// by its GPU-hours; absent where none was sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_percent: Option<f64>,
}

/// Hours split by whose capacity they were.
///
/// `used = withinEntitlement + borrowed`. By share, `withinEntitlement + idleEntitlement +
/// lentOut` is the share's entitlement over time. By principal, `lentOut` and
/// `idleEntitlement` are 0 (they belong to shares, not people).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageHours {
    /// All hours used.
    pub used: f64,
    /// Hours used within the share's own entitlement.
    pub within_entitlement: f64,
    /// Hours used above it, on capacity lent by other shares.
    pub borrowed: f64,
    /// The share's idle entitlement that other shares borrowed.
    pub lent_out: f64,
    /// Entitlement no one used.
    pub idle_entitlement: f64,
}

/// Nearest-rank percentiles of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// Of `values` (sorted here); `None` when empty.
    pub fn of(values: &mut [f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let i = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
            values[i - 1]
        };
        Some(Percentiles {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: values[values.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let mut v: Vec<f64> = (1..=10).map(f64::from).collect();
        let p = Percentiles::of(&mut v).unwrap();
        assert_eq!((p.p50, p.p90, p.p99, p.max), (5.0, 9.0, 10.0, 10.0));
        assert_eq!(Percentiles::of(&mut []), None);
    }
}
