//! Checks on parsed requests, before anything reaches the store or the core. Parsing (see
//! [`crate::parse_request`]) guarantees shapes and types; these functions check ranges,
//! patterns, combinations, and what Quartermaster does not support, and each refusal names the
//! wire field (`capacityLimits[1].maxCapacity`) and says what to send instead.
//!
//! Checks that need stored state (does the queue exist, is the share DISABLED, does a policy
//! change its type, at most 20 shares per queue) belong to the server; name-or-ARN fields are
//! resolved with [`crate::Arns`].
//!
//! Scheduling policies: a `fairsharePolicy` is validated and may be stored (so that clients
//! that manage policies generically keep working), but Quartermaster schedules only queues whose
//! policy has a `quotaSharePolicy`; the server refuses to attach a fair-share policy to a queue.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{shown, ApiError};
use crate::types::*;

/// Most characters in a resource name (queue, share, environment, policy, job).
pub const MAX_NAME_CHARS: usize = 128;
/// Most capacity limits on a service environment or a quota share.
pub const MAX_CAPACITY_LIMITS: usize = 5;
/// Most tags on one resource.
pub const MAX_TAGS: usize = 50;
/// Highest job-queue priority.
pub const MAX_QUEUE_PRIORITY: i32 = 1000;
/// Highest service-job scheduling priority.
pub const MAX_SCHEDULING_PRIORITY: i32 = 9999;
/// Most jobs in one TerminateServiceJobs call.
pub const MAX_TERMINATE_JOBS: usize = 50;
/// Most entries in a page, and in a describe-by-names list.
pub const MAX_PAGE: usize = 100;
/// Most `retryStrategy.evaluateOnExit` rules.
pub const MAX_EXIT_RULES: usize = 5;
/// The `jobStateTimeLimitActions` reasons that a SageMaker training queue can act on.
pub const TIME_LIMIT_REASONS: [&str; 3] = [
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
    "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
    "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
];

fn fail(message: String) -> Result<(), ApiError> {
    Err(ApiError::client(message))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Whether `value` is 1..=128 characters of `[A-Za-z0-9_-]`.
pub fn is_resource_name(value: &str) -> bool {
    !value.is_empty() && value.len() <= MAX_NAME_CHARS && value.chars().all(is_name_char)
}

fn name_problem(field: &str, value: &str, what: &str) -> Result<(), ApiError> {
    if value.is_empty() {
        return fail(format!("{field} is empty: give {what}"));
    }
    let chars = value.chars().count();
    if chars > MAX_NAME_CHARS {
        return fail(format!(
            "{field} is {chars} characters long: shorten it to at most {MAX_NAME_CHARS}"
        ));
    }
    if let Some(bad) = value.chars().find(|c| !is_name_char(*c)) {
        return fail(format!(
            "{field} {} contains {}, which names may not: use only letters, digits, hyphens (-) \
             and underscores (_)",
            shown(value),
            shown(&bad.to_string())
        ));
    }
    Ok(())
}

/// A resource name: 1..=128 characters of `[A-Za-z0-9_-]`.
pub fn resource_name(field: &str, value: &str) -> Result<(), ApiError> {
    name_problem(
        field,
        value,
        "a name of letters, digits, hyphens and underscores",
    )
}

/// A job name: 1..=128 characters of `[A-Za-z0-9_-]`, the first a letter or digit.
pub fn job_name(field: &str, value: &str) -> Result<(), ApiError> {
    name_problem(
        field,
        value,
        "a job name of letters, digits, hyphens and underscores",
    )?;
    if !value.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return fail(format!(
            "{field} {} must start with a letter or a digit",
            shown(value)
        ));
    }
    Ok(())
}

/// A required string member that must not be empty (ids, reasons, ARNs).
pub fn not_empty(field: &str, value: &str, what: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        return fail(format!("{field} is empty: give {what}"));
    }
    Ok(())
}

/// A tag map: 1..=50 entries, keys 1..=128 characters not starting with `aws:`, values
/// 0..=256 characters.
pub fn tags(field: &str, tags: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if tags.is_empty() {
        return fail(format!(
            "{field} is empty: give at least one tag, or leave {field} out"
        ));
    }
    if tags.len() > MAX_TAGS {
        return fail(format!(
            "{field} has {} tags: a resource takes at most {MAX_TAGS}",
            tags.len()
        ));
    }
    for (key, value) in tags {
        tag_key(&format!("{field}.{key}"), key)?;
        let chars = value.chars().count();
        if chars > 256 {
            return fail(format!(
                "{field}.{key} has a value of {chars} characters: shorten it to at most 256"
            ));
        }
    }
    Ok(())
}

fn tag_key(field: &str, key: &str) -> Result<(), ApiError> {
    if key.is_empty() {
        return fail(format!(
            "{field}: a tag key is empty: give keys of 1 to 128 characters"
        ));
    }
    let chars = key.chars().count();
    if chars > 128 {
        return fail(format!(
            "{field}: the tag key is {chars} characters long: shorten it to at most 128"
        ));
    }
    if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
        return fail(format!(
            "{field}: tag keys starting with 'aws:' are reserved for AWS: choose another key"
        ));
    }
    if key.eq_ignore_ascii_case(TAG_SUBMITTED_BY) {
        return fail(format!(
            "{field}: '{TAG_SUBMITTED_BY}' is set by the server (the principal that signed the submit): choose another key"
        ));
    }
    Ok(())
}

/// Job tag (a qm extension) that DescribeServiceJob adds: the principal that submitted the
/// job. Clients may not set it.
pub const TAG_SUBMITTED_BY: &str = "qm:submitted-by";

/// Quota-share tag (a qm extension): a job of the share that started less than this many
/// seconds ago is not preempted (thrash protection, docs/scheduling.md).
pub const TAG_MIN_RUNTIME: &str = "qm:min-runtime-seconds";
/// Quota-share tag (a qm extension): a job of the share preempted this many times in the last
/// hour is not preempted again until the oldest of those is an hour old.
pub const TAG_MAX_PREEMPTIONS: &str = "qm:max-preemptions-per-hour";
/// Quota-share tag (a qm extension): who may submit to the share, as principal names and
/// `group:<name>` entries separated by commas; absent = every authenticated principal.
pub const TAG_SUBMITTERS: &str = "qm:submitters";
/// Quota-share tag (a qm extension): who may change or terminate any job of the share, and
/// submit to it at any priority (same syntax).
pub const TAG_LEADS: &str = "qm:leads";
/// Quota-share tag (a qm extension): the highest priority submitters who are not leads may
/// submit with or raise a job to.
pub const TAG_MAX_PRIORITY: &str = "qm:max-priority";
/// Quota-share tag (a qm extension): the share's weight under `FAIR_SHARE` idle assignment,
/// a whole number from 1 to [`MAX_WEIGHT`] (default 1).
pub const TAG_WEIGHT: &str = "qm:weight";
/// The highest weight a share or group may have.
pub const MAX_WEIGHT: u32 = 10_000;

/// A share's weight from its tags: 1 when absent (validation refuses a bad value first).
pub fn weight(tags: &BTreeMap<String, String>) -> u32 {
    tags.get(TAG_WEIGHT)
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (1..=MAX_WEIGHT).contains(n))
        .unwrap_or(1)
}

/// Quota-share tag (a qm extension): the group of shares the share belongs to (its
/// department); the group's limits and weight come from `PUT /qm/v1/queues/{queue}/groups`.
pub const TAG_GROUP: &str = "qm:group";
/// Scheduling-policy tag (a qm extension): how idle capacity goes to waiting borrowers in
/// every job queue using the policy, `FIFO` (AWS's behaviour, the default) or `FAIR_SHARE`.
pub const TAG_IDLE_ASSIGNMENT: &str = "qm:idle-assignment";
/// Scheduling-policy tag (a qm extension): `true` lets a waiting borrower preempt jobs other
/// shares run on borrowed capacity for fairness (default `false`).
pub const TAG_FAIR_RECLAIM: &str = "qm:fair-reclaim";

/// Whether `name` is a group's name: 1 to 64 letters, digits, `_` and `-` (it is shown in
/// tables and status reasons, and is a tag value clients type).
pub fn is_group_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
}

/// A share's group from its tags (validation refuses a bad name first).
pub fn group(tags: &BTreeMap<String, String>) -> Option<&str> {
    tags.get(TAG_GROUP)
        .map(String::as_str)
        .filter(|g| is_group_name(g))
}

/// The qm tags of a scheduling policy, checked: `qm:idle-assignment` and `qm:fair-reclaim`.
pub fn policy_tags(field: &str, tags: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if let Some(v) = tags.get(TAG_IDLE_ASSIGNMENT) {
        if qm_core::IdleAssignment::parse(v).is_none() {
            return fail(format!(
                "{field}.{TAG_IDLE_ASSIGNMENT} is '{}': give FIFO (first come, first served, the default) or FAIR_SHARE (the borrower with the lowest weighted share goes first)",
                shown_value(v)
            ));
        }
    }
    if let Some(v) = tags.get(TAG_FAIR_RECLAIM) {
        if v != "true" && v != "false" {
            return fail(format!(
                "{field}.{TAG_FAIR_RECLAIM} is '{}': give true (a waiting borrower may preempt other shares' borrowed jobs for fairness) or false (the default)",
                shown_value(v)
            ));
        }
    }
    Ok(())
}

/// A scheduling policy's rules for idle capacity from its tags: (assignment, fair reclaim);
/// values `policy_tags` refuses count as the defaults (they never get stored).
pub fn idle_rules(tags: &BTreeMap<String, String>) -> (qm_core::IdleAssignment, bool) {
    let mode = tags
        .get(TAG_IDLE_ASSIGNMENT)
        .and_then(|v| qm_core::IdleAssignment::parse(v))
        .unwrap_or_default();
    (
        mode,
        tags.get(TAG_FAIR_RECLAIM).map(String::as_str) == Some("true"),
    )
}

/// A client's value, short and printable, for an error message.
fn shown_value(v: &str) -> String {
    v.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// The longest minimum run time a share may ask for: a week.
pub const MAX_MIN_RUNTIME_SECONDS: u64 = 7 * 24 * 3600;
/// The highest preemption cap a share may ask for.
pub const MAX_PREEMPTIONS_PER_HOUR: u32 = 1000;

/// The qm tags of a quota share, checked: thrash protection (whole numbers in range) and
/// permissions (principal lists, a priority).
pub fn protection_tags(field: &str, tags: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if let Some(v) = tags.get(TAG_MIN_RUNTIME) {
        if !v.parse::<u64>().is_ok_and(|n| n <= MAX_MIN_RUNTIME_SECONDS) {
            return fail(format!(
                "{field}.{TAG_MIN_RUNTIME} is '{v}': give a whole number of seconds from 0 to {MAX_MIN_RUNTIME_SECONDS} (0 turns the protection off)"
            ));
        }
    }
    if let Some(v) = tags.get(TAG_MAX_PREEMPTIONS) {
        if !v
            .parse::<u32>()
            .is_ok_and(|n| n <= MAX_PREEMPTIONS_PER_HOUR)
        {
            return fail(format!(
                "{field}.{TAG_MAX_PREEMPTIONS} is '{v}': give a whole number from 0 to {MAX_PREEMPTIONS_PER_HOUR} (0 means no cap)"
            ));
        }
    }
    for key in [TAG_SUBMITTERS, TAG_LEADS] {
        if let Some(v) = tags.get(key) {
            principal_list(&format!("{field}.{key}"), v)?;
        }
    }
    if let Some(v) = tags.get(TAG_WEIGHT) {
        if !v
            .parse::<u32>()
            .is_ok_and(|n| (1..=MAX_WEIGHT).contains(&n))
        {
            return fail(format!(
                "{field}.{TAG_WEIGHT} is '{v}': give a whole number from 1 to {MAX_WEIGHT}, the share's weight when idle capacity is shared fairly (default 1)"
            ));
        }
    }
    if let Some(v) = tags.get(TAG_GROUP) {
        if !is_group_name(v) {
            return fail(format!(
                "{field}.{TAG_GROUP} is '{}': give the name of the share's group, 1 to 64 letters, digits, _ and -",
                shown_value(v)
            ));
        }
    }
    if let Some(v) = tags.get(TAG_MAX_PRIORITY) {
        if !v.parse::<u32>().is_ok_and(|n| n <= 9999) {
            return fail(format!(
                "{field}.{TAG_MAX_PRIORITY} is '{v}': give a whole number from 0 to 9999, the highest schedulingPriority submitters may use"
            ));
        }
    }
    crate::class::share_class_tags(field, tags)
}

/// The shape of a principal's (or group's) name, wherever one is given: 1 to 64 letters,
/// digits and `_ . @ -` (plain, since audit entries and job owners show it).
pub fn is_principal_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.@-".contains(&b))
}

/// `alice,group:research`: principal names and `group:` entries, comma-separated.
fn principal_list(field: &str, value: &str) -> Result<(), ApiError> {
    for (i, entry) in value.split(',').map(str::trim).enumerate() {
        let name = entry.strip_prefix("group:").unwrap_or(entry);
        if !is_principal_name(name) {
            return fail(format!(
                "{field}: entry {i} ('{entry}') is not a principal name or group:<name>; use 1-64 letters, digits and _ . @ -, separated by commas"
            ));
        }
    }
    Ok(())
}

/// The protection the tags ask for, as the core's (min run time in ms, preemptions per hour);
/// values `protection_tags` refuses count as 0 (they never get stored).
pub fn protection(tags: &BTreeMap<String, String>) -> (u64, u32) {
    let min = tags
        .get(TAG_MIN_RUNTIME)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&n| n <= MAX_MIN_RUNTIME_SECONDS)
        .map_or(0, |n| n * 1000);
    let cap = tags
        .get(TAG_MAX_PREEMPTIONS)
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n <= MAX_PREEMPTIONS_PER_HOUR)
        .unwrap_or(0);
    (min, cap)
}

/// The `tagKeys` of UntagResource: 1..=50 keys, each a valid tag key.
pub fn tag_keys(field: &str, keys: &[String]) -> Result<(), ApiError> {
    if keys.is_empty() {
        return fail(format!(
            "{field} is empty: give the keys of the tags to remove"
        ));
    }
    if keys.len() > MAX_TAGS {
        return fail(format!(
            "{field} has {} keys: remove at most {MAX_TAGS} tags per call",
            keys.len()
        ));
    }
    for (i, key) in keys.iter().enumerate() {
        tag_key(&format!("{field}[{i}]"), key)?;
    }
    Ok(())
}

/// Capacity limits of a service environment (`min_capacity` 1) or a quota share
/// (`min_capacity` 0): 1..=5 entries, each with a distinct instance type as `capacityUnit` and
/// a `maxCapacity` of at least `min_capacity`.
pub fn capacity_limits<L: CapacityLimitEntry>(
    field: &str,
    limits: &[L],
    min_capacity: i32,
) -> Result<(), ApiError> {
    if limits.is_empty() {
        return fail(format!(
            "{field} is empty: give 1 to {MAX_CAPACITY_LIMITS} limits of the form \
             {{capacityUnit: INSTANCE_TYPE, maxCapacity: INSTANCES}}"
        ));
    }
    if limits.len() > MAX_CAPACITY_LIMITS {
        return fail(format!(
            "{field} has {} limits: give at most {MAX_CAPACITY_LIMITS}, one per instance type",
            limits.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, limit) in limits.iter().enumerate() {
        let unit_field = format!("{field}[{i}].capacityUnit");
        let Some(unit) = limit.capacity_unit() else {
            return fail(format!(
                "{unit_field} is missing: give the instance type the limit counts, e.g. \
                 ml.g5.xlarge"
            ));
        };
        capacity_unit(&unit_field, unit)?;
        if !seen.insert(unit) {
            return fail(format!(
                "{unit_field} {} appears twice in {field}: give one limit per instance type",
                shown(unit)
            ));
        }
        let max_field = format!("{field}[{i}].maxCapacity");
        let Some(max) = limit.max_capacity() else {
            return fail(format!(
                "{max_field} is missing: give the most instances of {unit} that may be in use at \
                 once"
            ));
        };
        if max < min_capacity {
            return fail(format!(
                "{max_field} is {max}: it counts instances of {unit} and must be at least \
                 {min_capacity}"
            ));
        }
    }
    Ok(())
}

fn capacity_unit(field: &str, unit: &str) -> Result<(), ApiError> {
    if unit.trim().is_empty() {
        return fail(format!(
            "{field} is empty: give the instance type the limit counts, e.g. ml.g5.xlarge"
        ));
    }
    if unit == "NUM_INSTANCES" {
        return fail(format!(
            "{field} NUM_INSTANCES counts instances of any type, which only FIFO and fair-share \
             environments use: Quartermaster does quota management, so give an instance type \
             such as ml.g5.xlarge"
        ));
    }
    if unit.len() > 64 || unit.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return fail(format!(
            "{field} {} is not an instance type: give one such as ml.g5.xlarge",
            shown(unit)
        ));
    }
    Ok(())
}

/// `maxResults`: absent gives `default`; otherwise 1..=100.
pub fn max_results(field: &str, value: Option<i32>, default: usize) -> Result<usize, ApiError> {
    match value {
        None => Ok(default),
        Some(n) if (1..=MAX_PAGE as i32).contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::client(format!(
            "{field} is {n}: give a page size from 1 to {MAX_PAGE}, or leave it out"
        ))),
    }
}

fn names_list(field: &str, names: Option<&[String]>, what: &str) -> Result<(), ApiError> {
    let names = names.unwrap_or_default();
    if names.len() > MAX_PAGE {
        return fail(format!(
            "{field} has {} entries: describe at most {MAX_PAGE} per call",
            names.len()
        ));
    }
    for (i, name) in names.iter().enumerate() {
        not_empty(&format!("{field}[{i}]"), name, what)?;
    }
    Ok(())
}

fn page(max: Option<i32>) -> Result<(), ApiError> {
    max_results("maxResults", max, MAX_PAGE).map(|_| ())
}

// ---- service environments ----------------------------------------------------------------

/// CreateServiceEnvironment.
pub fn validate_create_service_environment(
    req: &CreateServiceEnvironmentRequest,
) -> Result<(), ApiError> {
    resource_name("serviceEnvironmentName", &req.service_environment_name)?;
    match req.service_environment_type {
        // The model has no other value today; a new one fails parsing with the list of known
        // values, and this match makes the next model update a compile error here.
        ServiceEnvironmentType::SagemakerTraining => {}
    }
    capacity_limits("capacityLimits", &req.capacity_limits, 1)?;
    if let Some(t) = &req.tags {
        tags("tags", t)?;
    }
    Ok(())
}

/// UpdateServiceEnvironment.
pub fn validate_update_service_environment(
    req: &UpdateServiceEnvironmentRequest,
) -> Result<(), ApiError> {
    not_empty(
        "serviceEnvironment",
        &req.service_environment,
        "the service environment's name or ARN",
    )?;
    if let Some(limits) = &req.capacity_limits {
        capacity_limits("capacityLimits", limits, 1)?;
    }
    Ok(())
}

/// DescribeServiceEnvironments.
pub fn validate_describe_service_environments(
    req: &DescribeServiceEnvironmentsRequest,
) -> Result<(), ApiError> {
    names_list(
        "serviceEnvironments",
        req.service_environments.as_deref(),
        "a service environment name or ARN",
    )?;
    page(req.max_results)
}

// ---- job queues ----------------------------------------------------------------------------

fn queue_priority(priority: i32) -> Result<(), ApiError> {
    if !(0..=MAX_QUEUE_PRIORITY).contains(&priority) {
        return fail(format!(
            "priority is {priority}: give a queue priority from 0 to {MAX_QUEUE_PRIORITY}"
        ));
    }
    Ok(())
}

fn no_compute_environments(order: Option<&[ComputeEnvironmentOrder]>) -> Result<(), ApiError> {
    if order.is_some_and(|o| !o.is_empty()) {
        return fail(
            "computeEnvironmentOrder is for container job queues: Quartermaster runs only \
             SAGEMAKER_TRAINING queues, so give serviceEnvironmentOrder instead and leave \
             computeEnvironmentOrder out"
                .to_string(),
        );
    }
    Ok(())
}

fn service_environment_order(order: &[ServiceEnvironmentOrder]) -> Result<(), ApiError> {
    if order.len() != 1 {
        return fail(format!(
            "serviceEnvironmentOrder has {} entries: a quota-management queue takes exactly one \
             service environment, as [{{order: 1, serviceEnvironment: NAME_OR_ARN}}]",
            order.len()
        ));
    }
    let entry = &order[0];
    if entry.order < 0 {
        return fail(format!(
            "serviceEnvironmentOrder[0].order is {}: give 0 or more (1 is usual)",
            entry.order
        ));
    }
    not_empty(
        "serviceEnvironmentOrder[0].serviceEnvironment",
        &entry.service_environment,
        "the service environment's name or ARN",
    )
}

/// The `jobStateTimeLimitActions` of a SageMaker training queue: state RUNNABLE, action
/// TERMINATE, 600..=86400 seconds, one of [`TIME_LIMIT_REASONS`], each reason at most once.
pub fn job_state_time_limit_actions(
    field: &str,
    actions: &[JobStateTimeLimitAction],
) -> Result<(), ApiError> {
    let mut seen = BTreeSet::new();
    for (i, action) in actions.iter().enumerate() {
        let at = format!("{field}[{i}]");
        match action.state {
            JobStateTimeLimitActionsState::Runnable => {}
        }
        if action.action != JobStateTimeLimitActionsAction::Terminate {
            return fail(format!(
                "{at}.action is {}: SAGEMAKER_TRAINING queues support only TERMINATE",
                action.action
            ));
        }
        if !(600..=86_400).contains(&action.max_time_seconds) {
            return fail(format!(
                "{at}.maxTimeSeconds is {}: give 600 (10 minutes) to 86400 (24 hours)",
                action.max_time_seconds
            ));
        }
        if !TIME_LIMIT_REASONS.contains(&action.reason.as_str()) {
            return fail(format!(
                "{at}.reason {} is not a reason a SageMaker training queue can act on: use one \
                 of {}",
                shown(&action.reason),
                TIME_LIMIT_REASONS.join(", ")
            ));
        }
        if !seen.insert(action.reason.as_str()) {
            return fail(format!(
                "{at}.reason {} appears twice: give one action per reason",
                action.reason
            ));
        }
    }
    Ok(())
}

/// CreateJobQueue.
pub fn validate_create_job_queue(req: &CreateJobQueueRequest) -> Result<(), ApiError> {
    resource_name("jobQueueName", &req.job_queue_name)?;
    match req.job_queue_type {
        Some(JobQueueType::SagemakerTraining) => {}
        None => {
            return fail(
                "jobQueueType is missing: set it to SAGEMAKER_TRAINING (Quartermaster runs only \
                 SageMaker training queues)"
                    .to_string(),
            )
        }
        Some(other) => {
            return fail(format!(
                "jobQueueType {other} is not supported: Quartermaster runs only \
                 SAGEMAKER_TRAINING queues"
            ))
        }
    }
    if let Some(t) = &req.tags {
        crate::class::queue_class_tags("tags", t)?;
    }
    queue_priority(req.priority)?;
    no_compute_environments(req.compute_environment_order.as_deref())?;
    match &req.service_environment_order {
        Some(order) => service_environment_order(order)?,
        None => {
            return fail(
                "serviceEnvironmentOrder is missing: give exactly one SAGEMAKER_TRAINING service \
                 environment, as [{order: 1, serviceEnvironment: NAME_OR_ARN}]"
                    .to_string(),
            )
        }
    }
    match &req.scheduling_policy_arn {
        Some(arn) => not_empty("schedulingPolicyArn", arn, "a scheduling policy ARN")?,
        None => {
            return fail(
                "schedulingPolicyArn is missing: quota management needs a scheduling policy with \
                 a quotaSharePolicy; create one with CreateSchedulingPolicy and pass its ARN"
                    .to_string(),
            )
        }
    }
    if let Some(actions) = &req.job_state_time_limit_actions {
        job_state_time_limit_actions("jobStateTimeLimitActions", actions)?;
    }
    if let Some(t) = &req.tags {
        tags("tags", t)?;
    }
    Ok(())
}

/// UpdateJobQueue.
pub fn validate_update_job_queue(req: &UpdateJobQueueRequest) -> Result<(), ApiError> {
    not_empty("jobQueue", &req.job_queue, "the job queue's name or ARN")?;
    if let Some(priority) = req.priority {
        queue_priority(priority)?;
    }
    no_compute_environments(req.compute_environment_order.as_deref())?;
    if let Some(order) = &req.service_environment_order {
        service_environment_order(order)?;
    }
    if let Some(arn) = &req.scheduling_policy_arn {
        if arn.trim().is_empty() {
            return fail(
                "schedulingPolicyArn is empty: a queue's scheduling policy can be replaced but \
                 not removed; give the ARN of a quota-share policy or leave the field out"
                    .to_string(),
            );
        }
    }
    if let Some(actions) = &req.job_state_time_limit_actions {
        job_state_time_limit_actions("jobStateTimeLimitActions", actions)?;
    }
    Ok(())
}

/// DescribeJobQueues.
pub fn validate_describe_job_queues(req: &DescribeJobQueuesRequest) -> Result<(), ApiError> {
    names_list(
        "jobQueues",
        req.job_queues.as_deref(),
        "a job queue name or ARN",
    )?;
    page(req.max_results)
}

// ---- scheduling policies -------------------------------------------------------------------

fn fairshare_policy(policy: &FairsharePolicy) -> Result<(), ApiError> {
    if let Some(decay) = policy.share_decay_seconds {
        if !(0..=604_800).contains(&decay) {
            return fail(format!(
                "fairsharePolicy.shareDecaySeconds is {decay}: give 0 to 604800 seconds"
            ));
        }
    }
    if let Some(reservation) = policy.compute_reservation {
        if !(0..=99).contains(&reservation) {
            return fail(format!(
                "fairsharePolicy.computeReservation is {reservation}: give 0 to 99 (percent)"
            ));
        }
    }
    let distribution = policy.share_distribution.as_deref().unwrap_or_default();
    if distribution.len() > 500 {
        return fail(format!(
            "fairsharePolicy.shareDistribution has {} entries: give at most 500",
            distribution.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, share) in distribution.iter().enumerate() {
        let at = format!("fairsharePolicy.shareDistribution[{i}]");
        let id = &share.share_identifier;
        let stem = id.strip_suffix('*').unwrap_or(id);
        if stem.is_empty() || stem.len() > 255 || !stem.chars().all(|c| c.is_ascii_alphanumeric()) {
            return fail(format!(
                "{at}.shareIdentifier {} must be 1 to 255 letters and digits, optionally followed \
                 by '*'",
                shown(id)
            ));
        }
        if !seen.insert(id.as_str()) {
            return fail(format!(
                "{at}.shareIdentifier {} appears twice: give each identifier once",
                shown(id)
            ));
        }
        if let Some(weight) = share.weight_factor {
            if !(0.0001..=999.9999).contains(&weight) {
                return fail(format!(
                    "{at}.weightFactor is {weight}: give 0.0001 to 999.9999"
                ));
            }
        }
    }
    Ok(())
}

/// CreateSchedulingPolicy: exactly one of `quotaSharePolicy` and `fairsharePolicy`.
pub fn validate_create_scheduling_policy(
    req: &CreateSchedulingPolicyRequest,
) -> Result<(), ApiError> {
    resource_name("name", &req.name)?;
    match (&req.quota_share_policy, &req.fairshare_policy) {
        (Some(_), Some(_)) => {
            return fail(
                "quotaSharePolicy and fairsharePolicy are both set: a policy has exactly one; \
                 for quota management keep quotaSharePolicy and drop fairsharePolicy"
                    .to_string(),
            )
        }
        (None, None) => {
            return fail(
                "quotaSharePolicy is missing: give quotaSharePolicy \
                 {idleResourceAssignmentStrategy: FIFO} (Quartermaster schedules quota-share \
                 queues)"
                    .to_string(),
            )
        }
        (Some(_), None) => {}
        (None, Some(fairshare)) => fairshare_policy(fairshare)?,
    }
    if let Some(t) = &req.tags {
        tags("tags", t)?;
        policy_tags("tags", t)?;
    }
    Ok(())
}

/// UpdateSchedulingPolicy: at most one of the two policy kinds (whether it matches the stored
/// kind is the server's check).
pub fn validate_update_scheduling_policy(
    req: &UpdateSchedulingPolicyRequest,
) -> Result<(), ApiError> {
    not_empty("arn", &req.arn, "the scheduling policy's ARN")?;
    match (&req.quota_share_policy, &req.fairshare_policy) {
        (Some(_), Some(_)) => fail(
            "quotaSharePolicy and fairsharePolicy are both set: a policy has exactly one kind \
             and it cannot change; send only the kind the policy has"
                .to_string(),
        ),
        (None, Some(fairshare)) => fairshare_policy(fairshare),
        _ => Ok(()),
    }
}

/// DescribeSchedulingPolicies.
pub fn validate_describe_scheduling_policies(
    req: &DescribeSchedulingPoliciesRequest,
) -> Result<(), ApiError> {
    names_list("arns", Some(&req.arns), "a scheduling policy ARN")
}

// ---- quota shares --------------------------------------------------------------------------

fn sharing(config: &QuotaShareResourceSharingConfiguration) -> Result<(), ApiError> {
    let Some(limit) = config.borrow_limit else {
        return Ok(());
    };
    if limit < -1 {
        return fail(format!(
            "resourceSharingConfiguration.borrowLimit is {limit}: give -1 (unlimited) or a \
             percentage of 0 or more"
        ));
    }
    // -1 is the documented default, so echoing it back for any strategy is harmless.
    if limit != -1 && config.strategy != QuotaShareResourceSharingStrategy::LendAndBorrow {
        return fail(format!(
            "resourceSharingConfiguration.borrowLimit applies only to LEND_AND_BORROW shares, \
             but the strategy is {}: leave borrowLimit out or use LEND_AND_BORROW",
            config.strategy
        ));
    }
    Ok(())
}

/// CreateQuotaShare.
pub fn validate_create_quota_share(req: &CreateQuotaShareRequest) -> Result<(), ApiError> {
    resource_name("quotaShareName", &req.quota_share_name)?;
    not_empty("jobQueue", &req.job_queue, "the job queue's name or ARN")?;
    capacity_limits("capacityLimits", &req.capacity_limits, 0)?;
    sharing(&req.resource_sharing_configuration)?;
    // preemptionConfiguration.inSharePreemption is required by the model, so parsing already
    // refused a request without it.
    if let Some(t) = &req.tags {
        tags("tags", t)?;
        protection_tags("tags", t)?;
    }
    Ok(())
}

/// UpdateQuotaShare.
pub fn validate_update_quota_share(req: &UpdateQuotaShareRequest) -> Result<(), ApiError> {
    not_empty(
        "quotaShareArn",
        &req.quota_share_arn,
        "the quota share's ARN",
    )?;
    if let Some(limits) = &req.capacity_limits {
        capacity_limits("capacityLimits", limits, 0)?;
    }
    if let Some(config) = &req.resource_sharing_configuration {
        sharing(config)?;
    }
    Ok(())
}

/// ListQuotaShares.
pub fn validate_list_quota_shares(req: &ListQuotaSharesRequest) -> Result<(), ApiError> {
    not_empty("jobQueue", &req.job_queue, "the job queue's name or ARN")?;
    page(req.max_results)
}

// ---- service jobs --------------------------------------------------------------------------

fn scheduling_priority(priority: i32) -> Result<(), ApiError> {
    if !(0..=MAX_SCHEDULING_PRIORITY).contains(&priority) {
        return fail(format!(
            "schedulingPriority is {priority}: give 0 to {MAX_SCHEDULING_PRIORITY} (higher runs \
             first within the quota share)"
        ));
    }
    Ok(())
}

/// A `retryStrategy`: 1..=10 attempts, at most 5 `evaluateOnExit` rules, each with an action
/// and a glob of 1..=512 printable characters.
pub fn retry_strategy(field: &str, retry: &ServiceJobRetryStrategy) -> Result<(), ApiError> {
    if !(1..=10).contains(&retry.attempts) {
        return fail(format!(
            "{field}.attempts is {}: give 1 to 10 (tries in total, the first included)",
            retry.attempts
        ));
    }
    let rules = retry.evaluate_on_exit.as_deref().unwrap_or_default();
    if rules.len() > MAX_EXIT_RULES {
        return fail(format!(
            "{field}.evaluateOnExit has {} rules: give at most {MAX_EXIT_RULES}",
            rules.len()
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{field}.evaluateOnExit[{i}]");
        if rule.action.is_none() {
            return fail(format!("{at}.action is missing: set RETRY or EXIT"));
        }
        let Some(glob) = &rule.on_status_reason else {
            return fail(format!(
                "{at}.onStatusReason is missing: give a glob to match the status reason, e.g. \
                 'Received status from SageMaker: InternalServerError*' or '*'"
            ));
        };
        let chars = glob.chars().count();
        if chars == 0 || chars > 512 {
            return fail(format!(
                "{at}.onStatusReason is {chars} characters long: give 1 to 512"
            ));
        }
        if glob.chars().any(char::is_control) {
            return fail(format!(
                "{at}.onStatusReason {} contains a control character: use printable characters \
                 only",
                shown(glob)
            ));
        }
    }
    Ok(())
}

/// SubmitServiceJob. The training payload is read separately by
/// [`crate::TrainingPayload::parse`].
pub fn validate_submit_service_job(req: &SubmitServiceJobRequest) -> Result<(), ApiError> {
    job_name("jobName", &req.job_name)?;
    not_empty("jobQueue", &req.job_queue, "the job queue's name or ARN")?;
    match req.service_job_type {
        ServiceJobType::SagemakerTraining => {}
    }
    not_empty(
        "serviceRequestPayload",
        &req.service_request_payload,
        "the SageMaker CreateTrainingJob request as a JSON string",
    )?;
    if let Some(token) = &req.client_token {
        let chars = token.chars().count();
        if !(1..=64).contains(&chars) {
            return fail(format!(
                "clientToken is {chars} characters long: give 1 to 64 (or leave it out)"
            ));
        }
    }
    if let Some(priority) = req.scheduling_priority {
        scheduling_priority(priority)?;
    }
    if req.share_identifier.is_some() {
        return fail(
            "shareIdentifier is for fair-share queues: Quartermaster queues use quota shares, so \
             leave shareIdentifier out and give quotaShareName"
                .to_string(),
        );
    }
    match &req.quota_share_name {
        Some(share) => resource_name("quotaShareName", share)?,
        None => {
            return fail(
                "quotaShareName is missing: every job of a quota-management queue runs in a \
                 quota share; name one (ListQuotaShares lists them)"
                    .to_string(),
            )
        }
    }
    if let Some(retry) = &req.retry_strategy {
        retry_strategy("retryStrategy", retry)?;
    }
    if let Some(seconds) = req
        .timeout_config
        .as_ref()
        .and_then(|t| t.attempt_duration_seconds)
    {
        if seconds < 1 {
            return fail(format!(
                "timeoutConfig.attemptDurationSeconds is {seconds}: give at least 1 second, or \
                 leave timeoutConfig out"
            ));
        }
    }
    if let Some(retries) = req
        .preemption_configuration
        .as_ref()
        .and_then(|p| p.preemption_retries_before_termination)
    {
        if retries < 0 {
            return fail(format!(
                "preemptionConfiguration.preemptionRetriesBeforeTermination is {retries}: give 0 \
                 or more (0 fails the job at its first preemption), or leave it out for unlimited"
            ));
        }
    }
    if let Some(t) = &req.tags {
        tags("tags", t)?;
    }
    Ok(())
}

/// UpdateServiceJob.
pub fn validate_update_service_job(req: &UpdateServiceJobRequest) -> Result<(), ApiError> {
    not_empty("jobId", &req.job_id, "the job's id")?;
    scheduling_priority(req.scheduling_priority)
}

/// TerminateServiceJob.
pub fn validate_terminate_service_job(req: &TerminateServiceJobRequest) -> Result<(), ApiError> {
    not_empty("jobId", &req.job_id, "the job's id")?;
    not_empty(
        "reason",
        &req.reason,
        "a reason; it becomes the job's status reason",
    )
}

/// Longest termination reason, in characters (it becomes the job's status reason, which every
/// DescribeServiceJob and ListServiceJobs answer carries).
pub const MAX_REASON_CHARS: usize = 1024;

/// A termination reason's length (checked when a request arrives, not on replay).
pub fn validate_reason(reason: &str) -> Result<(), ApiError> {
    let chars = reason.chars().count();
    if chars > MAX_REASON_CHARS {
        return fail(format!(
            "reason is {chars} characters long: shorten it to at most {MAX_REASON_CHARS}"
        ));
    }
    Ok(())
}

/// TerminateServiceJobs: 1..=50 job ids and a reason.
pub fn validate_terminate_service_jobs(req: &TerminateServiceJobsRequest) -> Result<(), ApiError> {
    if req.jobs.is_empty() {
        return fail("jobs is empty: give 1 to 50 job ids".to_string());
    }
    if req.jobs.len() > MAX_TERMINATE_JOBS {
        return fail(format!(
            "jobs has {} ids: terminate at most {MAX_TERMINATE_JOBS} per call",
            req.jobs.len()
        ));
    }
    for (i, id) in req.jobs.iter().enumerate() {
        not_empty(&format!("jobs[{i}]"), id, "a job id")?;
    }
    not_empty(
        "reason",
        &req.reason,
        "a reason; it becomes the jobs' status reason",
    )
}

/// ListServiceJobs: the page size (filters are read by [`crate::parse_filters`]).
pub fn validate_list_service_jobs(req: &ListServiceJobsRequest) -> Result<(), ApiError> {
    if let Some(queue) = &req.job_queue {
        not_empty("jobQueue", queue, "the job queue's name or ARN")?;
    }
    page(req.max_results)
}

// ---- tags ----------------------------------------------------------------------------------

/// TagResource (after the server filled in `resourceArn` from the path).
pub fn validate_tag_resource(req: &TagResourceRequest) -> Result<(), ApiError> {
    not_empty("resourceArn", &req.resource_arn, "the resource's ARN")?;
    tags("tags", &req.tags)
}

/// UntagResource (after the server filled in `resourceArn` and `tagKeys`).
pub fn validate_untag_resource(req: &UntagResourceRequest) -> Result<(), ApiError> {
    not_empty("resourceArn", &req.resource_arn, "the resource's ARN")?;
    tag_keys("tagKeys", &req.tag_keys)
}
