//! Job queues: the binding of one service environment to a quota-share scheduling policy.
//! Container-queue members (`computeEnvironmentOrder`) are kept so the server can refuse them
//! with a message instead of silently dropping them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of the `CreateJobQueue` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CreateJobQueueRequest {
    /// Job-queue name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub job_queue_name: String,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JQState>,
    /// ARN of the queue's scheduling policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy_arn: Option<String>,
    /// Queue priority; higher is evaluated first.
    pub priority: i32,
    /// Compute environments of a container queue; must be absent for SageMaker queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_environment_order: Option<Vec<ComputeEnvironmentOrder>>,
    /// The queue's service environments (exactly one here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment_order: Option<Vec<ServiceEnvironmentOrder>>,
    /// The queue's type; `SAGEMAKER_TRAINING` here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue_type: Option<JobQueueType>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// Actions on jobs stuck at the head of the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_state_time_limit_actions: Option<Vec<JobStateTimeLimitAction>>,
}

wire_enum! {
    /// Whether a job queue accepts new jobs (set by the user).
    JQState {
        /// Accepts new jobs.
        Enabled = "ENABLED",
        /// Accepts no new jobs; queued jobs still finish.
        Disabled = "DISABLED",
    }
}

/// A compute environment attached to a container queue; not supported here, kept so it can be
/// refused by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComputeEnvironmentOrder {
    /// Position among the attached environments; lower is tried first.
    pub order: i32,
    /// Compute environment name or ARN.
    pub compute_environment: String,
}

/// A service environment attached to a queue, with its order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEnvironmentOrder {
    /// Position among the attached environments; lower is tried first.
    pub order: i32,
    /// Service environment name or ARN.
    pub service_environment: String,
}

wire_enum! {
    /// The kind of work a queue carries; Quartermaster supports only `SAGEMAKER_TRAINING`.
    JobQueueType {
        /// Container jobs on EKS (not supported).
        Eks = "EKS",
        /// Container jobs on ECS (not supported).
        Ecs = "ECS",
        /// Container jobs on Fargate (not supported).
        EcsFargate = "ECS_FARGATE",
        /// SageMaker training jobs.
        SagemakerTraining = "SAGEMAKER_TRAINING",
        /// Container jobs on ECS managed instances (not supported).
        EcsManagedInstances = "ECS_MANAGED_INSTANCES",
    }
}

/// What to do with a job stuck at the head of the queue for too long with a given reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStateTimeLimitAction {
    /// The blocked reason that triggers the action, e.g.
    /// `MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED`.
    pub reason: String,
    /// ENABLED or DISABLED.
    pub state: JobStateTimeLimitActionsState,
    /// Seconds at the head of the queue before the action, 600..=86400.
    pub max_time_seconds: i32,
    /// What to do when the time is up (TERMINATE for SageMaker queues).
    pub action: JobStateTimeLimitActionsAction,
}

wire_enum! {
    /// The state a time-limit action watches; RUNNABLE is the only value.
    JobStateTimeLimitActionsState {
        /// Waiting for capacity.
        Runnable = "RUNNABLE",
    }
}

wire_enum! {
    /// What a time-limit action does; SageMaker queues allow only TERMINATE.
    JobStateTimeLimitActionsAction {
        /// Cancel the job (container queues only).
        Cancel = "CANCEL",
        /// Terminate the job.
        Terminate = "TERMINATE",
    }
}

/// Body of the `CreateJobQueue` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CreateJobQueueResponse {
    /// Job-queue name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub job_queue_name: String,
    /// Job-queue ARN.
    pub job_queue_arn: String,
}

/// Body of the `UpdateJobQueue` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateJobQueueRequest {
    /// Job queue name or ARN.
    pub job_queue: String,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JQState>,
    /// ARN of the queue's scheduling policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy_arn: Option<String>,
    /// Queue priority; higher is evaluated first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Compute environments of a container queue; must be absent for SageMaker queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_environment_order: Option<Vec<ComputeEnvironmentOrder>>,
    /// The queue's service environments (exactly one here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment_order: Option<Vec<ServiceEnvironmentOrder>>,
    /// Actions on jobs stuck at the head of the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_state_time_limit_actions: Option<Vec<JobStateTimeLimitAction>>,
}

/// Body of the `UpdateJobQueue` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateJobQueueResponse {
    /// Job-queue name, 1..=128 characters of `[A-Za-z0-9_-]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue_name: Option<String>,
    /// Job-queue ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue_arn: Option<String>,
}

/// Body of the `DescribeJobQueues` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeJobQueuesRequest {
    /// Queue names or ARNs to describe; empty or absent means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queues: Option<Vec<String>>,
    /// Page size, 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<i32>,
    /// Opaque pagination token from the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// Body of the `DescribeJobQueues` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeJobQueuesResponse {
    /// The queues of this page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queues: Option<Vec<JobQueueDetail>>,
    /// Pass this back to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One job queue as DescribeJobQueues returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobQueueDetail {
    /// Job-queue name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub job_queue_name: String,
    /// Job-queue ARN.
    pub job_queue_arn: String,
    /// ENABLED or DISABLED.
    pub state: JQState,
    /// ARN of the queue's scheduling policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy_arn: Option<String>,
    /// Lifecycle status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<JQStatus>,
    /// Why the status is what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// Queue priority; higher is evaluated first.
    pub priority: i32,
    /// Compute environments of a container queue; always empty here.
    pub compute_environment_order: Vec<ComputeEnvironmentOrder>,
    /// The queue's service environments (exactly one here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment_order: Option<Vec<ServiceEnvironmentOrder>>,
    /// The queue's type; `SAGEMAKER_TRAINING` here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue_type: Option<JobQueueType>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// Actions on jobs stuck at the head of the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_state_time_limit_actions: Option<Vec<JobStateTimeLimitAction>>,
}

wire_enum! {
    /// Lifecycle of a job queue (set by the server).
    JQStatus {
        /// Being created.
        Creating = "CREATING",
        /// Being updated.
        Updating = "UPDATING",
        /// Being deleted.
        Deleting = "DELETING",
        /// Deleted.
        Deleted = "DELETED",
        /// Ready.
        Valid = "VALID",
        /// Broken; see the status reason.
        Invalid = "INVALID",
    }
}

/// Body of the `DeleteJobQueue` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteJobQueueRequest {
    /// Job queue name or ARN.
    pub job_queue: String,
}

/// Body of the `DeleteJobQueue` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteJobQueueResponse {}
