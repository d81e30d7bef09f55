//! Service jobs: submission, description, listing, priority updates and termination. The
//! training request itself stays an opaque JSON string here; `payload` reads it.

use std::collections::BTreeMap;

use super::is_zero;
use serde::{Deserialize, Serialize};

/// Body of the `SubmitServiceJob` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitServiceJobRequest {
    /// Job name, 1..=128 characters of `[A-Za-z0-9_-]`, starting alphanumeric.
    pub job_name: String,
    /// Job queue name or ARN.
    pub job_queue: String,
    /// Retry settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_strategy: Option<ServiceJobRetryStrategy>,
    /// Priority within the share, 0..=9999; higher runs first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_priority: Option<i32>,
    /// The SageMaker `CreateTrainingJob` request as a JSON string.
    pub service_request_payload: String,
    /// The job's type.
    pub service_job_type: ServiceJobType,
    /// Fair-share identifier; only for fair-share queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_identifier: Option<String>,
    /// The share to run in; required for quota-share queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Preemption settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<ServiceJobPreemptionConfiguration>,
    /// Attempt time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_config: Option<ServiceJobTimeout>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// Idempotency token, 1..=64 characters; botocore sends a fresh UUID when the caller gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
}

/// How often a failed service job may go back to RUNNABLE, and on which status reasons.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobRetryStrategy {
    /// Total tries, 1..=10, the first included.
    pub attempts: i32,
    /// Up to 5 rules, first match wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluate_on_exit: Option<Vec<ServiceJobEvaluateOnExit>>,
}

/// A retry rule: a glob on the attempt's status reason and what to do when it matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobEvaluateOnExit {
    /// RETRY or EXIT when `onStatusReason` matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ServiceJobRetryAction>,
    /// Glob on the attempt's status reason, up to 512 printable characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status_reason: Option<String>,
}

wire_enum! {
    /// What a matching retry rule does. Accepted in any letter case on input (AWS's own example
    /// writes `Retry`); always written in upper case.
    ServiceJobRetryAction ignore_case {
        /// Retry the job while attempts remain.
        Retry = "RETRY",
        /// Fail the job.
        Exit = "EXIT",
    }
}

wire_enum! {
    /// The kind of service job; SageMaker training is the only one.
    ServiceJobType {
        /// SageMaker training jobs.
        SagemakerTraining = "SAGEMAKER_TRAINING",
    }
}

/// How many preemptions a job survives before it fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobPreemptionConfiguration {
    /// Preemptions that re-queue the job; the next one fails it. Absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_retries_before_termination: Option<i32>,
}

/// The time limit of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobTimeout {
    /// Seconds one attempt may run before it is terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_duration_seconds: Option<i32>,
}

/// Body of the `SubmitServiceJob` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SubmitServiceJobResponse {
    /// Service-job ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_arn: Option<String>,
    /// Job name, 1..=128 characters of `[A-Za-z0-9_-]`, starting alphanumeric.
    pub job_name: String,
    /// Service-job id (a UUID).
    pub job_id: String,
}

/// Body of the `DescribeServiceJob` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeServiceJobRequest {
    /// Service-job id (a UUID).
    pub job_id: String,
}

/// Body of the `DescribeServiceJob` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DescribeServiceJobResponse {
    /// Attempts so far, oldest first (preempted attempts are in `preemptionSummary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<ServiceJobAttemptDetail>>,
    /// Instances the job holds, per type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_usage: Option<Vec<ServiceJobCapacityUsageDetail>>,
    /// When the job was submitted, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<i64>,
    /// True once a termination was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_terminated: Option<bool>,
    /// Service-job ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_arn: Option<String>,
    /// Service-job id (a UUID).
    pub job_id: String,
    /// Job name, 1..=128 characters of `[A-Za-z0-9_-]`, starting alphanumeric.
    pub job_name: String,
    /// ARN of the job's queue.
    pub job_queue: String,
    /// The current or most recent attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_attempt: Option<LatestServiceJobAttempt>,
    /// Retry settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_strategy: Option<ServiceJobRetryStrategy>,
    /// When the current attempt was scheduled, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<i64>,
    /// Priority within the share, 0..=9999; higher runs first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_priority: Option<i32>,
    /// The SageMaker `CreateTrainingJob` request as a JSON string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_request_payload: Option<String>,
    /// The job's type.
    pub service_job_type: ServiceJobType,
    /// Fair-share identifier; only for fair-share queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_identifier: Option<String>,
    /// Quota-share name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Preemption settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<ServiceJobPreemptionConfiguration>,
    /// Preemption record; present once the job has been preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_summary: Option<ServiceJobPreemptionSummary>,
    /// When the current attempt started, epoch milliseconds; 0 (omitted on the wire) until then.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub started_at: i64,
    /// The job's status.
    pub status: ServiceJobStatus,
    /// Why the status is what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// When it stopped, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<i64>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// Attempt time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_config: Option<ServiceJobTimeout>,
}

/// One finished or running attempt of a service job (preemptions are listed apart, in
/// `preemptionSummary`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobAttemptDetail {
    /// The training job this attempt ran as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_resource_id: Option<ServiceResourceId>,
    /// When the attempt started, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// When it stopped, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<i64>,
    /// Why the status is what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
}

/// Which resource of the underlying service an attempt ran as (a training-job ARN).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceResourceId {
    /// The kind of id.
    pub name: ServiceResourceIdName,
    /// The id, e.g. a training-job ARN.
    pub value: String,
}

wire_enum! {
    /// The kind of id in a `ServiceResourceId`.
    ServiceResourceIdName {
        /// A SageMaker training-job ARN.
        TrainingJobArn = "TrainingJobArn",
    }
}

/// Instances of one type that a job holds (DescribeServiceJob).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobCapacityUsageDetail {
    /// The capacity unit: an instance type such as `ml.g5.xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_unit: Option<String>,
    /// Instances (a double on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<f64>,
}

/// Pointer to the job's current or most recent attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LatestServiceJobAttempt {
    /// The training job this attempt ran as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_resource_id: Option<ServiceResourceId>,
}

/// Record of a job's preemptions; present once it has been preempted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobPreemptionSummary {
    /// How many times the job was preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_attempt_count: Option<i32>,
    /// Recent preempted attempts, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_preempted_attempts: Option<Vec<ServiceJobPreemptedAttempt>>,
}

/// One preempted attempt in the sliding window of recent preemptions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobPreemptedAttempt {
    /// The training job this attempt ran as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_resource_id: Option<ServiceResourceId>,
    /// When the attempt started, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// When it stopped, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<i64>,
    /// Why the status is what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
}

wire_enum! {
    /// Where a service job is in its life.
    ServiceJobStatus {
        /// Accepted, not yet seen by the scheduler.
        Submitted = "SUBMITTED",
        /// Waiting on something other than capacity.
        Pending = "PENDING",
        /// Waiting for capacity.
        Runnable = "RUNNABLE",
        /// Capacity granted, attempt being handed to the executor.
        Scheduled = "SCHEDULED",
        /// Attempt starting.
        Starting = "STARTING",
        /// Attempt running.
        Running = "RUNNING",
        /// Finished with success.
        Succeeded = "SUCCEEDED",
        /// Finished with failure.
        Failed = "FAILED",
    }
}

/// Body of the `ListServiceJobs` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListServiceJobsRequest {
    /// Job queue name or ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue: Option<String>,
    /// Only jobs in this status; absent means RUNNING.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_status: Option<ServiceJobStatus>,
    /// Page size, 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<i32>,
    /// Opaque pagination token from the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
    /// At most one filter (see `filter::parse_filters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filters: Option<Vec<KeyValuesPair>>,
}

/// One ListServiceJobs filter: a name and its values (`filter::parse_filters` reads it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct KeyValuesPair {
    /// Filter name (case-sensitive), e.g. `QUOTA_SHARE_NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Filter values (exactly one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// Body of the `ListServiceJobs` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListServiceJobsResponse {
    /// The jobs of this page.
    pub job_summary_list: Vec<ServiceJobSummary>,
    /// Pass this back to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One job in a ListServiceJobs page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobSummary {
    /// The current or most recent attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_attempt: Option<LatestServiceJobAttempt>,
    /// Instances the job holds, per type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_usage: Option<Vec<ServiceJobCapacityUsageSummary>>,
    /// When the job was submitted, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<i64>,
    /// Service-job ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_arn: Option<String>,
    /// Service-job id (a UUID).
    pub job_id: String,
    /// Job name, 1..=128 characters of `[A-Za-z0-9_-]`, starting alphanumeric.
    pub job_name: String,
    /// When the current attempt was scheduled, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<i64>,
    /// The job's type.
    pub service_job_type: ServiceJobType,
    /// Fair-share identifier; only for fair-share queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_identifier: Option<String>,
    /// Quota-share name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// The job's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceJobStatus>,
    /// Why the status is what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// When the current attempt started, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// When it stopped, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<i64>,
    /// True once a termination was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_terminated: Option<bool>,
    /// The job's `schedulingPriority`: a Quartermaster extension, not in the AWS model
    /// (botocore drops members its model lacks), so that a listing needs no
    /// DescribeServiceJob per job to show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_priority: Option<i32>,
    /// Who submitted the job (the signing principal; its `qm:submitted-by` tag): a
    /// Quartermaster extension, for the dashboard's submitter filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
}

/// Instances of one type that a job holds (ListServiceJobs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJobCapacityUsageSummary {
    /// The capacity unit: an instance type such as `ml.g5.xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_unit: Option<String>,
    /// Instances (a double on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<f64>,
}

/// Body of the `UpdateServiceJob` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateServiceJobRequest {
    /// Service-job id (a UUID).
    pub job_id: String,
    /// Priority within the share, 0..=9999; higher runs first.
    pub scheduling_priority: i32,
}

/// Body of the `UpdateServiceJob` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateServiceJobResponse {
    /// Service-job ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_arn: Option<String>,
    /// Job name, 1..=128 characters of `[A-Za-z0-9_-]`, starting alphanumeric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Service-job id (a UUID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// Body of the `TerminateServiceJob` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminateServiceJobRequest {
    /// Service-job id (a UUID).
    pub job_id: String,
    /// Why the job is terminated; shown as its status reason.
    pub reason: String,
}

/// Body of the `TerminateServiceJob` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminateServiceJobResponse {}

/// Body of the `TerminateServiceJobs` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminateServiceJobsRequest {
    /// Up to 50 job ids.
    pub jobs: Vec<String>,
    /// Why the jobs are terminated; shown as their status reason.
    pub reason: String,
}

/// Body of the `TerminateServiceJobs` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminateServiceJobsResponse {
    /// Job ids terminated, or unknown (which counts as success).
    pub successful: Vec<String>,
    /// Jobs that could not be terminated.
    pub errors: Vec<TerminateServiceJobsErrorDetail>,
}

/// A job that TerminateServiceJobs could not terminate, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TerminateServiceJobsErrorDetail {
    /// The job id that failed.
    pub job: String,
    /// Error code (`ClientException`, `ServerException`, ...).
    pub code: String,
    /// What went wrong.
    pub message: String,
}
