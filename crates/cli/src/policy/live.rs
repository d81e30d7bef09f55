//! What the server holds, read through the API into plain values that [`super::plan`] compares
//! with the cluster file. Only reads; bounded by [`MAX_JOBS_PER_STATUS`]. ListQuotaShares
//! leaves tags out, so each share's tags are read with DescribeQuotaShare. The admin list is
//! read only when the file manages it.

use std::collections::BTreeMap;

use qm_core::{ShareSpec, Strategy};
use serde_json::{json, Value};

use super::tags::{self, ShareTags};
use super::{call, Desired, Error};
use crate::client::Client;

/// Most jobs read per status (RUNNING, SCHEDULED, RUNNABLE); a plan over more says so.
pub const MAX_JOBS_PER_STATUS: usize = 5_000;

/// The service environment as the server has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveEnvironment {
    /// Instance type -> maximum instances.
    pub limits: BTreeMap<String, u32>,
    /// ENABLED or DISABLED.
    pub state: String,
}

/// The job queue as the server has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveQueue {
    /// ENABLED or DISABLED.
    pub state: String,
    /// The scheduling policy's name (from its ARN), if any.
    pub policy: Option<String>,
    /// The service environments' names (from their ARNs), in order.
    pub environments: Vec<String>,
    /// Its ARN (tags name it).
    pub arn: String,
    /// Its class tags (`qm:class.<name>`).
    pub classes: ShareTags,
}

/// A quota share as the server has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveShare {
    /// Its settings, in the core's terms (thrash protection read from its tags).
    pub spec: ShareSpec,
    /// Its ARN (updates, tags and deletes name it).
    pub arn: String,
    /// Its tags that a cluster file controls ([`tags::MANAGED`]); the others are not read.
    pub tags: ShareTags,
}

/// Whether a job holds capacity or waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// SCHEDULED or RUNNING: holds its instances.
    Running,
    /// RUNNABLE: waits.
    Runnable,
}

/// A job of the queue that holds or waits for capacity.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LiveJob {
    /// The job id.
    pub id: String,
    /// The job name.
    pub name: String,
    /// Its quota share.
    pub share: String,
    /// Whether it holds capacity.
    pub state: JobState,
    /// The instance type.
    pub unit: String,
    /// Instances it holds or needs.
    pub count: u32,
    /// Scheduling priority (higher goes first).
    pub priority: i64,
    /// Submission time, epoch milliseconds.
    pub created_at: i64,
    /// Whether a reclaim or a lowered limit may take it back: not when it may not be
    /// interrupted or may not borrow yet (its status reason says so).
    pub reclaimable: bool,
}

/// Everything a plan compares against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// The service environment, if it exists.
    pub environment: Option<LiveEnvironment>,
    /// The scheduling policy's ARN, if it exists.
    pub policy_arn: Option<String>,
    /// The job queue, if it exists.
    pub queue: Option<LiveQueue>,
    /// The queue's shares by name.
    pub shares: BTreeMap<String, LiveShare>,
    /// The queue's running and waiting jobs, sorted by id.
    pub jobs: Vec<LiveJob>,
    /// Whether a status had more than [`MAX_JOBS_PER_STATUS`] jobs (the rest were not read).
    pub jobs_truncated: bool,
    /// The server's admin list (`GET /qm/v1/admins`); `None` when the file has no `admins`
    /// (not read).
    pub admins: Option<Vec<String>>,
    /// The scheduling policy's fair-sharing tags ([`tags::POLICY_MANAGED`]).
    pub policy_tags: ShareTags,
    /// The job queue's group definitions (`GET /qm/v1/queues/{queue}/groups`); `None` when
    /// the file has no `groups` (not read) or the queue does not exist yet.
    pub groups: Option<Vec<qm_api::qm::GroupDef>>,
}

fn shape(operation: &str, message: impl Into<String>) -> Error {
    Error::Shape {
        operation: operation.into(),
        message: message.into(),
    }
}

/// The part of an ARN after its last `/`, or the value itself.
pub fn name_of(arn_or_name: &str) -> &str {
    arn_or_name.rsplit('/').next().unwrap_or(arn_or_name)
}

fn limits_of(v: Option<&Value>) -> BTreeMap<String, u32> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|l| {
            let unit = l.get("capacityUnit")?.as_str()?.to_string();
            let max = l.get("maxCapacity")?.as_f64()?;
            Some((unit, max.max(0.0) as u32))
        })
        .collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Reads the server's state for what `desired` manages.
pub fn read(client: &Client, desired: &Desired) -> Result<Live, Error> {
    let names = &desired.names;
    let mut live = Live::default();
    if desired.admins.is_some() {
        live.admins = Some(client.admins().map_err(|e| Error::request("admins", e))?);
    }
    live.environment = read_environment(client, &names.service_environment)?;
    live.policy_arn = find_policy(client, &names.scheduling_policy)?;
    if let (Some(arn), false) = (&live.policy_arn, desired.policy_tags.is_empty()) {
        live.policy_tags = read_policy_tags(client, arn)?;
    }
    live.queue = read_queue(client, &names.job_queue)?;
    if live.queue.is_some() {
        if desired.groups.is_some() {
            live.groups = Some(
                client
                    .queue_groups(&names.job_queue)
                    .map_err(|e| Error::request("groups", e))?
                    .groups,
            );
        }
        live.shares = read_shares(client, &names.job_queue, desired.fair)?;
        let (jobs, truncated) = read_jobs(client, &names.job_queue)?;
        live.jobs = jobs;
        live.jobs_truncated = truncated;
    }
    Ok(live)
}

/// The service environment called `name`, when there is one.
fn read_environment(client: &Client, name: &str) -> Result<Option<LiveEnvironment>, Error> {
    let op = "describeserviceenvironments";
    let envs = call(client, op, &json!({"serviceEnvironments": [name]}))?;
    Ok(envs
        .get("serviceEnvironments")
        .and_then(Value::as_array)
        .and_then(|l| {
            l.iter()
                .find(|e| str_of(e, "serviceEnvironmentName") == Some(name))
        })
        .map(|e| LiveEnvironment {
            limits: limits_of(e.get("capacityLimits")),
            state: str_of(e, "state").unwrap_or("ENABLED").to_string(),
        }))
}

/// The job queue called `name`, when there is one.
fn read_queue(client: &Client, name: &str) -> Result<Option<LiveQueue>, Error> {
    let op = "describejobqueues";
    let queues = call(client, op, &json!({"jobQueues": [name]}))?;
    Ok(queues
        .get("jobQueues")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|q| str_of(q, "jobQueueName") == Some(name)))
        .map(|q| LiveQueue {
            arn: str_of(q, "jobQueueArn").unwrap_or_default().to_string(),
            classes: q
                .get("tags")
                .and_then(|t| serde_json::from_value(t.clone()).ok())
                .map(|t| tags::queue_classes(&t))
                .unwrap_or_default(),
            state: str_of(q, "state").unwrap_or("ENABLED").to_string(),
            policy: str_of(q, "schedulingPolicyArn").map(|a| name_of(a).to_string()),
            environments: environment_order(q),
        }))
}

/// The names of a queue's service environments, in their order.
fn environment_order(q: &Value) -> Vec<String> {
    let mut order: Vec<(i64, String)> = q
        .get("serviceEnvironmentOrder")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o.get("order")?.as_i64()?,
                name_of(o.get("serviceEnvironment")?.as_str()?).to_string(),
            ))
        })
        .collect();
    order.sort();
    order.into_iter().map(|(_, n)| n).collect()
}

fn find_policy(client: &Client, name: &str) -> Result<Option<String>, Error> {
    let op = "listschedulingpolicies";
    let mut token: Option<String> = None;
    // Pages are bounded by the server; this bounds how many we follow.
    for _ in 0..1_000 {
        let mut body = json!({"maxResults": 100});
        if let Some(t) = &token {
            body["nextToken"] = json!(t);
        }
        let page = call(client, op, &body)?;
        for p in page
            .get("schedulingPolicies")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(arn) = str_of(p, "arn") {
                if name_of(arn) == name {
                    return Ok(Some(arn.to_string()));
                }
            }
        }
        token = str_of(&page, "nextToken").map(str::to_string);
        if token.is_none() {
            return Ok(None);
        }
    }
    Err(shape(op, "more than 1,000 pages of scheduling policies"))
}

/// The strategy whose wire spelling ([`Strategy::as_str`]) is `s`.
fn strategy_of(s: &str) -> Option<Strategy> {
    [Strategy::Reserve, Strategy::Lend, Strategy::LendAndBorrow]
        .into_iter()
        .find(|st| st.as_str() == s)
}

/// The fair-sharing tags of the scheduling policy `arn`.
fn read_policy_tags(client: &Client, arn: &str) -> Result<ShareTags, Error> {
    let op = "describeschedulingpolicies";
    let r = call(client, op, &json!({"arns": [arn]}))?;
    let all: BTreeMap<String, String> = r
        .get("schedulingPolicies")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|p| str_of(p, "arn") == Some(arn)))
        .and_then(|p| p.get("tags"))
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default();
    Ok(tags::policy_managed(&all))
}

fn read_shares(
    client: &Client,
    queue: &str,
    fair: tags::FairKeys,
) -> Result<BTreeMap<String, LiveShare>, Error> {
    let op = "listquotashares";
    let mut out = BTreeMap::new();
    let mut token: Option<String> = None;
    for _ in 0..1_000 {
        let mut body = json!({"jobQueue": queue, "maxResults": 100});
        if let Some(t) = &token {
            body["nextToken"] = json!(t);
        }
        let page = call(client, op, &body)?;
        for s in page
            .get("quotaShares")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = str_of(s, "quotaShareName")
                .ok_or_else(|| shape(op, "a share without quotaShareName"))?;
            let sharing = s.get("resourceSharingConfiguration");
            let strategy = sharing
                .and_then(|c| str_of(c, "strategy"))
                .and_then(strategy_of)
                .ok_or_else(|| shape(op, format!("share {name}: no known strategy")))?;
            let arn = str_of(s, "quotaShareArn")
                .ok_or_else(|| shape(op, format!("share {name}: no quotaShareArn")))?;
            let all_tags = read_share_tags(client, arn)?;
            let (min_runtime_ms, max_preemptions_per_hour) =
                qm_api::validate::protection(&all_tags);
            let spec = ShareSpec {
                name: name.to_string(),
                limits: limits_of(s.get("capacityLimits")),
                strategy,
                borrow_limit_percent: sharing
                    .and_then(|c| c.get("borrowLimit"))
                    .and_then(Value::as_i64)
                    .map_or(-1, |b| b as i32),
                in_share_preemption: s
                    .get("preemptionConfiguration")
                    .and_then(|p| str_of(p, "inSharePreemption"))
                    == Some("ENABLED"),
                enabled: str_of(s, "state") != Some("DISABLED"),
                weight: qm_api::validate::weight(&all_tags),
                min_runtime_ms,
                max_preemptions_per_hour,
            };
            out.insert(
                name.to_string(),
                LiveShare {
                    spec,
                    arn: arn.to_string(),
                    tags: tags::managed(&all_tags, fair),
                },
            );
        }
        token = str_of(&page, "nextToken").map(str::to_string);
        if token.is_none() {
            return Ok(out);
        }
    }
    Err(shape(op, "more than 1,000 pages of quota shares"))
}

/// Every tag of the share `arn`.
fn read_share_tags(client: &Client, arn: &str) -> Result<BTreeMap<String, String>, Error> {
    let op = "describequotashare";
    let d = call(client, op, &json!({"quotaShareArn": arn}))?;
    let Some(tags) = d.get("tags").filter(|t| !t.is_null()) else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_value(tags.clone()).map_err(|e| {
        shape(
            op,
            format!("share {arn}: tags are not a map of strings: {e}"),
        )
    })
}

fn read_jobs(client: &Client, queue: &str) -> Result<(Vec<LiveJob>, bool), Error> {
    let op = "listservicejobs";
    let mut jobs = Vec::new();
    let mut truncated = false;
    for (status, state) in [
        ("RUNNING", JobState::Running),
        ("SCHEDULED", JobState::Running),
        ("RUNNABLE", JobState::Runnable),
    ] {
        let mut token: Option<String> = None;
        let mut read = 0usize;
        loop {
            let mut body = json!({"jobQueue": queue, "jobStatus": status, "maxResults": 100});
            if let Some(t) = &token {
                body["nextToken"] = json!(t);
            }
            let page = call(client, op, &body)?;
            for j in page
                .get("jobSummaryList")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                read += 1;
                let id = str_of(j, "jobId").ok_or_else(|| shape(op, "a job without jobId"))?;
                let usage = j
                    .get("capacityUsage")
                    .and_then(Value::as_array)
                    .and_then(|u| u.first());
                let Some(usage) = usage else { continue };
                // A preempted job whose old attempt has not exited yet is RUNNABLE but still
                // holds its instances until the grace period ends: count it as holding them.
                let stopping = str_of(j, "statusReason")
                    .is_some_and(|r| r.starts_with("PREVIOUS_ATTEMPT_STOPPING"));
                let state = if stopping { JobState::Running } else { state };
                jobs.push(LiveJob {
                    id: id.to_string(),
                    name: str_of(j, "jobName").unwrap_or_default().to_string(),
                    share: str_of(j, "quotaShareName").unwrap_or_default().to_string(),
                    state,
                    unit: str_of(usage, "capacityUnit")
                        .unwrap_or_default()
                        .to_string(),
                    count: usage
                        .get("quantity")
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0)
                        .max(0.0) as u32,
                    priority: 0,
                    created_at: j.get("createdAt").and_then(Value::as_i64).unwrap_or(0),
                    reclaimable: !str_of(j, "statusReason").is_some_and(|r| {
                        r.ends_with(qm_api::class::FIRM_NOTE)
                            || r.ends_with(qm_api::class::UNVERIFIED_NOTE)
                    }),
                });
            }
            token = str_of(&page, "nextToken").map(str::to_string);
            if token.is_none() {
                break;
            }
            if read >= MAX_JOBS_PER_STATUS {
                truncated = true;
                break;
            }
        }
    }
    read_priorities(client, &mut jobs)?;
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    jobs.dedup_by(|a, b| a.id == b.id);
    Ok((jobs, truncated))
}

/// Fills in each job's scheduling priority: summaries carry none; DescribeServiceJob does.
fn read_priorities(client: &Client, jobs: &mut [LiveJob]) -> Result<(), Error> {
    for job in jobs {
        let d = call(client, "describeservicejob", &json!({"jobId": job.id}))?;
        job.priority = d
            .get("schedulingPriority")
            .and_then(Value::as_i64)
            .unwrap_or(0);
    }
    Ok(())
}
