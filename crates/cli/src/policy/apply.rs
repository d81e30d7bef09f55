//! Carries a [`Plan`] out: policy, environment, queue, then shares, deletes last (a share is
//! disabled before it is deleted), so that every resource exists before another names it; the
//! admin list, when the file has one and it differs, is set after all of them (PUT
//! `/qm/v1/admins`), so that a list that drops the one applying cannot stop the rest.
//! Every call is a full "set to this value", so re-running a half-applied plan converges. A
//! share's controlled tags ([`super::tags`]) go with CreateQuotaShare; on a change, the keys the
//! file dropped are removed (UntagResource) and the new values set (TagResource), and its
//! other tags are not touched. The scheduling policy's fair-sharing tags go with
//! CreateSchedulingPolicy, or TagResource on a change; the group definitions are set after the
//! shares (`PUT /qm/v1/queues/{queue}/groups`), whose `qm:group` tags make the members.

use serde_json::{json, Value};

use qm_core::{ShareSpec, Strategy};

use super::audit::AUDIT_PATH;
use super::live::Live;
use super::plan::{setting_fields, Action, Change, Kind, Plan};
use super::tags::{ShareTags, TagChanges};
use super::{call, Desired, Error};
use crate::client::Client;

/// Capacity limits in the API's shape (also a what-if's environment).
pub(super) fn limits(map: &std::collections::BTreeMap<String, u32>) -> Value {
    Value::Array(
        map.iter()
            .map(|(unit, max)| json!({"capacityUnit": unit, "maxCapacity": max}))
            .collect(),
    )
}

fn sharing(s: &ShareSpec) -> Value {
    let mut v = json!({"strategy": s.strategy.as_str()});
    if s.strategy == Strategy::LendAndBorrow {
        v["borrowLimit"] = json!(s.borrow_limit_percent);
    }
    v
}

/// A CreateQuotaShare body for `s` in `job_queue` with `tags` (left out when there are none,
/// as the API wants); also the shape of a what-if's shares.
pub(super) fn create_share_body(s: &ShareSpec, job_queue: &str, tags: &ShareTags) -> Value {
    let mut body = json!({
        "quotaShareName": s.name,
        "jobQueue": job_queue,
        "capacityLimits": limits(&s.limits),
        "resourceSharingConfiguration": sharing(s),
        "preemptionConfiguration": {"inSharePreemption": on_off(s.in_share_preemption)},
        "state": on_off(s.enabled),
    });
    if !tags.is_empty() {
        body["tags"] = json!(tags);
    }
    body
}

fn on_off(b: bool) -> &'static str {
    if b {
        "ENABLED"
    } else {
        "DISABLED"
    }
}

/// Makes the server match `desired` by carrying out `plan` (computed from `live`).
pub fn apply(client: &Client, desired: &Desired, live: &Live, plan: &Plan) -> Result<(), Error> {
    let mut policy_arn = live.policy_arn.clone();
    for c in &plan.changes {
        match (c.kind, c.action) {
            (Kind::SchedulingPolicy, Action::Create) => {
                policy_arn = create_policy(client, desired)?;
            }
            // Only its fair-sharing tags change (the API's own settings are always FIFO).
            (Kind::SchedulingPolicy, _) => tag_policy(client, desired, policy_arn.as_deref(), c)?,
            (Kind::Groups, _) => set_groups(client, desired)?,
            (Kind::ServiceEnvironment, action) => environment(client, desired, action)?,
            (Kind::JobQueue, action) => {
                job_queue(client, desired, live, policy_arn.as_deref(), c, action)?;
            }
            (Kind::QuotaShare, action) => share(client, desired, live, c, action)?,
            (Kind::Admins, _) => set_admins(client, desired)?,
        }
    }
    Ok(())
}

/// Creates the scheduling policy with the file's tags; returns its ARN.
fn create_policy(client: &Client, desired: &Desired) -> Result<Option<String>, Error> {
    let mut body = json!({
        "name": desired.names.scheduling_policy,
        "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
    });
    if !desired.policy_tags.is_empty() {
        body["tags"] = json!(desired.policy_tags);
    }
    let r = call(client, "createschedulingpolicy", &body)?;
    Ok(r.get("arn").and_then(Value::as_str).map(str::to_string))
}

/// Sets the scheduling policy's fair-sharing tags that the change names.
fn tag_policy(
    client: &Client,
    desired: &Desired,
    policy_arn: Option<&str>,
    c: &Change,
) -> Result<(), Error> {
    let arn = policy_arn.ok_or_else(|| Error::Shape {
        operation: "listschedulingpolicies".into(),
        message: format!(
            "no ARN for scheduling policy {}",
            desired.names.scheduling_policy
        ),
    })?;
    let set: ShareTags = c
        .fields
        .iter()
        .filter_map(|f| Some((f.field.strip_prefix("tags.")?.to_string(), f.to.clone()?)))
        .collect();
    client
        .tag_resource(arn, &set)
        .map_err(|e| Error::request("tagresource", e))
}

/// Sets the job queue's group definitions to the file's, when it has them.
fn set_groups(client: &Client, desired: &Desired) -> Result<(), Error> {
    if let Some(groups) = &desired.groups {
        let body = qm_api::qm::QueueGroups {
            groups: groups.clone(),
        };
        client
            .set_queue_groups(&desired.names.job_queue, &body)
            .map_err(|e| Error::request("groups", e))?;
    }
    Ok(())
}

/// Creates the service environment, or enables it and sets its limits.
fn environment(client: &Client, desired: &Desired, action: Action) -> Result<(), Error> {
    let names = &desired.names;
    if action == Action::Create {
        call(
            client,
            "createserviceenvironment",
            &json!({
                "serviceEnvironmentName": names.service_environment,
                "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                "capacityLimits": limits(&desired.environment),
            }),
        )?;
    } else {
        call(
            client,
            "updateserviceenvironment",
            &json!({
                "serviceEnvironment": names.service_environment,
                "state": "ENABLED",
                "capacityLimits": limits(&desired.environment),
            }),
        )?;
    }
    Ok(())
}

/// Creates the job queue, or enables it and sets its policy and environment when more than
/// its class tags change; then sets its class tags.
fn job_queue(
    client: &Client,
    desired: &Desired,
    live: &Live,
    policy_arn: Option<&str>,
    c: &Change,
    action: Action,
) -> Result<(), Error> {
    let names = &desired.names;
    let arn = policy_arn.ok_or_else(|| Error::Shape {
        operation: "createschedulingpolicy".into(),
        message: format!("no ARN for scheduling policy {}", names.scheduling_policy),
    })?;
    let order = json!([{"order": 1, "serviceEnvironment": names.service_environment}]);
    let queue_arn = if action == Action::Create {
        let r = call(
            client,
            "createjobqueue",
            &json!({
                "jobQueueName": names.job_queue,
                "jobQueueType": "SAGEMAKER_TRAINING",
                "priority": 1,
                "schedulingPolicyArn": arn,
                "serviceEnvironmentOrder": order,
            }),
        )?;
        r.get("jobQueueArn")
            .and_then(Value::as_str)
            .map(str::to_string)
    } else {
        if c.fields.iter().any(|f| !f.field.starts_with("tags.")) {
            call(
                client,
                "updatejobqueue",
                &json!({
                    "jobQueue": names.job_queue,
                    "state": "ENABLED",
                    "schedulingPolicyArn": arn,
                    "serviceEnvironmentOrder": order,
                }),
            )?;
        }
        live.queue.as_ref().map(|q| q.arn.clone())
    };
    queue_classes(client, desired, live, queue_arn)
}

/// Sets the server's admin list to the file's, when it has one.
fn set_admins(client: &Client, desired: &Desired) -> Result<(), Error> {
    if let Some(admins) = &desired.admins {
        client
            .set_admins(admins)
            .map_err(|e| Error::request("admins", e))?;
    }
    Ok(())
}

fn share(
    client: &Client,
    desired: &Desired,
    live: &Live,
    c: &Change,
    action: Action,
) -> Result<(), Error> {
    let arn = || {
        live.shares
            .get(&c.name)
            .map(|l| l.arn.clone())
            .ok_or_else(|| Error::Shape {
                operation: "listquotashares".into(),
                message: format!("no ARN for quota share {}", c.name),
            })
    };
    let declared = desired.shares.iter().find(|s| s.spec.name == c.name);
    match (action, declared) {
        (Action::Create, Some(d)) => {
            call(
                client,
                "createquotashare",
                &create_share_body(&d.spec, &desired.names.job_queue, &d.tags),
            )?;
        }
        (Action::Update, Some(d)) => {
            let arn = arn()?;
            let before = live.shares.get(&c.name);
            let s = &d.spec;
            // Only tags changed: an UpdateQuotaShare would be a no-op in the server's audit log.
            if !setting_fields(before.map(|l| &l.spec), s).is_empty() {
                call(
                    client,
                    "updatequotashare",
                    &json!({
                        "quotaShareArn": arn,
                        "capacityLimits": limits(&s.limits),
                        "resourceSharingConfiguration": sharing(s),
                        "preemptionConfiguration": {"inSharePreemption": on_off(s.in_share_preemption)},
                        "state": on_off(s.enabled),
                    }),
                )?;
            }
            let none = ShareTags::new();
            let tags = TagChanges::between(before.map_or(&none, |l| &l.tags), &d.tags);
            // Removals first: a share holds at most 50 tags, counted after each call.
            if !tags.remove.is_empty() {
                client
                    .untag_resource(&arn, &tags.remove)
                    .map_err(|e| Error::request("untagresource", e))?;
            }
            if !tags.set.is_empty() {
                client
                    .tag_resource(&arn, &tags.set)
                    .map_err(|e| Error::request("tagresource", e))?;
            }
        }
        _ => {
            let arn = arn()?;
            if live.shares.get(&c.name).is_some_and(|l| l.spec.enabled) {
                call(
                    client,
                    "updatequotashare",
                    &json!({"quotaShareArn": arn, "state": "DISABLED"}),
                )?;
            }
            call(client, "deletequotashare", &json!({"quotaShareArn": arn}))?;
        }
    }
    Ok(())
}

/// Who applies: `$QM_ACTOR`, else `$USER@hostname`.
pub fn actor() -> String {
    if let Ok(a) = std::env::var("QM_ACTOR") {
        if !a.trim().is_empty() {
            return a;
        }
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    if host.is_empty() {
        user
    } else {
        format!("{user}@{host}")
    }
}

/// Records an applied plan in the server's audit log.
pub fn record(client: &Client, actor: &str, plan: &Plan, text: &str) -> Result<(), Error> {
    let entry = json!({
        "actor": actor,
        "action": "apply",
        "summary": plan.summary(),
        "details": text,
    });
    client
        .post_json(AUDIT_PATH, &entry)
        .map(|_| ())
        .map_err(|e| Error::request("audit", e))
}

/// Makes the job queue's class tags (`qm:class.<name>`) the file's, when it has `classes`.
fn queue_classes(
    client: &Client,
    desired: &Desired,
    live: &Live,
    arn: Option<String>,
) -> Result<(), Error> {
    let Some(classes) = &desired.classes else {
        return Ok(());
    };
    let none = ShareTags::new();
    let before = live.queue.as_ref().map_or(&none, |q| &q.classes);
    let changes = TagChanges::between(before, classes);
    if changes.is_empty() {
        return Ok(());
    }
    let arn = arn.ok_or_else(|| Error::Shape {
        operation: "describejobqueues".into(),
        message: format!("no ARN for job queue {}", desired.names.job_queue),
    })?;
    if !changes.remove.is_empty() {
        client
            .untag_resource(&arn, &changes.remove)
            .map_err(|e| Error::request("untagresource", e))?;
    }
    if !changes.set.is_empty() {
        client
            .tag_resource(&arn, &changes.set)
            .map_err(|e| Error::request("tagresource", e))?;
    }
    Ok(())
}
