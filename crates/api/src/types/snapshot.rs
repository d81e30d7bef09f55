//! GetJobQueueSnapshot: what is at the front of the queue and of each share, and who uses
//! what. All parts are optional on the wire, so every shape here is all-`Option`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of the `GetJobQueueSnapshot` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct GetJobQueueSnapshotRequest {
    /// Job queue name or ARN.
    pub job_queue: String,
}

/// Body of the `GetJobQueueSnapshot` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct GetJobQueueSnapshotResponse {
    /// The first RUNNABLE jobs of the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_of_queue: Option<FrontOfQueueDetail>,
    /// The first RUNNABLE job of each share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_of_quota_shares: Option<FrontOfQuotaSharesDetail>,
    /// Capacity held by the queue's dispatched jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_utilization: Option<QueueSnapshotUtilizationDetail>,
}

/// The RUNNABLE jobs at the front of the queue, in dispatch order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontOfQueueDetail {
    /// Up to 100 RUNNABLE jobs in dispatch order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<FrontOfQueueJobSummary>>,
    /// When this part of the snapshot was computed, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated_at: Option<i64>,
}

/// A job at the front of the queue and since when it holds its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontOfQueueJobSummary {
    /// Service-job ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_arn: Option<String>,
    /// Since when the job holds its position, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest_time_at_position: Option<i64>,
}

/// The first RUNNABLE job of each quota share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontOfQuotaSharesDetail {
    /// Share name -> its first RUNNABLE job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_shares: Option<BTreeMap<String, Vec<FrontOfQuotaShareJobSummary>>>,
    /// When this part of the snapshot was computed, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated_at: Option<i64>,
}

/// The job at the front of one quota share and since when it holds its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrontOfQuotaShareJobSummary {
    /// Service-job ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_arn: Option<String>,
    /// Since when the job holds its position, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest_time_at_position: Option<i64>,
}

/// What the dispatched jobs of the queue hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QueueSnapshotUtilizationDetail {
    /// Instances held per type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_capacity_usage: Option<Vec<QueueSnapshotCapacityUsage>>,
    /// Fair-share usage; absent for quota-share queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairshare_utilization: Option<FairshareUtilizationDetail>,
    /// Usage per quota share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_utilization: Option<QuotaShareUtilizationDetail>,
    /// When this part of the snapshot was computed, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated_at: Option<i64>,
}

/// Instances of one type held by the queue's dispatched jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QueueSnapshotCapacityUsage {
    /// The capacity unit: an instance type such as `ml.g5.xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_unit: Option<String>,
    /// Instances (a double on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<f64>,
}

/// Usage per fair-share identifier (absent for quota-share queues).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FairshareUtilizationDetail {
    /// How many share identifiers are active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_share_count: Option<i64>,
    /// Busiest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_capacity_utilization: Option<Vec<FairshareCapacityUtilization>>,
}

/// What one fair-share identifier holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FairshareCapacityUtilization {
    /// Fair-share identifier; only for fair-share queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_identifier: Option<String>,
    /// Instances the identifier holds, per type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_usage: Option<Vec<FairshareCapacityUsage>>,
}

/// Instances of one type held by one fair-share identifier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FairshareCapacityUsage {
    /// The capacity unit: an instance type such as `ml.g5.xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_unit: Option<String>,
    /// Instances (a double on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<f64>,
}

/// Usage per quota share, busiest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareUtilizationDetail {
    /// Busiest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_capacity_utilization: Option<Vec<QuotaShareCapacityUtilization>>,
}

/// What one quota share holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareCapacityUtilization {
    /// Quota-share name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Instances the share holds, per type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_usage: Option<Vec<QuotaShareCapacityUsage>>,
}

/// Instances of one type held by one quota share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareCapacityUsage {
    /// The capacity unit: an instance type such as `ml.g5.xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_unit: Option<String>,
    /// Instances (a double on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<f64>,
}
