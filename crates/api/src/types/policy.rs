//! Scheduling policies. Quartermaster schedules only `quotaSharePolicy` queues, but the
//! fair-share shapes are here in full so a policy round-trips exactly as the client sent it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of the `CreateSchedulingPolicy` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CreateSchedulingPolicyRequest {
    /// Policy name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Quota-share settings; exclusive with `fairsharePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_policy: Option<QuotaSharePolicy>,
    /// Fair-share settings; exclusive with `quotaSharePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairshare_policy: Option<FairsharePolicy>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

/// The quota-share flavour of a scheduling policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSharePolicy {
    /// How idle capacity goes to borrowers; FIFO is the only value.
    pub idle_resource_assignment_strategy: QuotaShareIdleResourceAssignmentStrategy,
}

wire_enum! {
    /// How idle lendable capacity is handed to borrowing shares.
    QuotaShareIdleResourceAssignmentStrategy {
        /// In the order the borrowing jobs became RUNNABLE.
        Fifo = "FIFO",
    }
}

/// The fair-share flavour of a scheduling policy (stored, not scheduled, by Quartermaster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FairsharePolicy {
    /// Fair-share usage window in seconds, 0..=604800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_decay_seconds: Option<i32>,
    /// Percent of capacity reserved for inactive share identifiers, 0..=99.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_reservation: Option<i32>,
    /// Weights per share identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_distribution: Option<Vec<ShareAttributes>>,
}

/// A fair-share weight for one share identifier or identifier prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShareAttributes {
    /// Fair-share identifier; only for fair-share queues.
    pub share_identifier: String,
    /// Weight, 0.0001..=999.9999; lower gets more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_factor: Option<f64>,
}

/// Body of the `CreateSchedulingPolicy` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CreateSchedulingPolicyResponse {
    /// Policy name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Scheduling-policy ARN.
    pub arn: String,
}

/// Body of the `UpdateSchedulingPolicy` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSchedulingPolicyRequest {
    /// Scheduling-policy ARN.
    pub arn: String,
    /// Quota-share settings; exclusive with `fairsharePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_policy: Option<QuotaSharePolicy>,
    /// Fair-share settings; exclusive with `quotaSharePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairshare_policy: Option<FairsharePolicy>,
}

/// Body of the `UpdateSchedulingPolicy` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSchedulingPolicyResponse {}

/// Body of the `DescribeSchedulingPolicies` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeSchedulingPoliciesRequest {
    /// Scheduling-policy ARNs to describe.
    pub arns: Vec<String>,
}

/// Body of the `DescribeSchedulingPolicies` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeSchedulingPoliciesResponse {
    /// The policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policies: Option<Vec<SchedulingPolicyDetail>>,
}

/// One scheduling policy as DescribeSchedulingPolicies returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicyDetail {
    /// Policy name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Scheduling-policy ARN.
    pub arn: String,
    /// Quota-share settings; exclusive with `fairsharePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_policy: Option<QuotaSharePolicy>,
    /// Fair-share settings; exclusive with `quotaSharePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairshare_policy: Option<FairsharePolicy>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

/// Body of the `ListSchedulingPolicies` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListSchedulingPoliciesRequest {
    /// Page size, 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<i32>,
    /// Opaque pagination token from the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// Body of the `ListSchedulingPolicies` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListSchedulingPoliciesResponse {
    /// The policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policies: Option<Vec<SchedulingPolicyListingDetail>>,
    /// Pass this back to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One entry of ListSchedulingPolicies: just the ARN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicyListingDetail {
    /// Scheduling-policy ARN.
    pub arn: String,
}

/// Body of the `DeleteSchedulingPolicy` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteSchedulingPolicyRequest {
    /// Scheduling-policy ARN.
    pub arn: String,
}

/// Body of the `DeleteSchedulingPolicy` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteSchedulingPolicyResponse {}
