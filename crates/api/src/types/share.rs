//! Quota shares: a team's slice of a queue. These shapes carry the lend/borrow settings that
//! `convert::share_spec` turns into the core's `ShareSpec`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of the `CreateQuotaShare` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateQuotaShareRequest {
    /// Quota-share name.
    pub quota_share_name: String,
    /// Job queue name or ARN.
    pub job_queue: String,
    /// Per-unit ceilings.
    pub capacity_limits: Vec<QuotaShareCapacityLimit>,
    /// Reserve, lend, or lend and borrow.
    pub resource_sharing_configuration: QuotaShareResourceSharingConfiguration,
    /// Preemption settings.
    pub preemption_configuration: QuotaSharePreemptionConfiguration,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<QuotaShareState>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

/// A quota share's entitlement for one instance type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareCapacityLimit {
    /// Instances of the unit the share may use without borrowing.
    pub max_capacity: i32,
    /// The capacity unit: an instance type such as `ml.g5.xlarge`.
    pub capacity_unit: String,
}

/// Whether a share reserves, lends, or lends and borrows its idle capacity, and how much it
/// may borrow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareResourceSharingConfiguration {
    /// RESERVE, LEND or LEND_AND_BORROW.
    pub strategy: QuotaShareResourceSharingStrategy,
    /// Percent of each capacity limit the share may borrow on top of it; `-1` (default) is
    /// unlimited. LEND_AND_BORROW only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<i32>,
}

wire_enum! {
    /// What a quota share does with idle capacity.
    QuotaShareResourceSharingStrategy {
        /// Keeps idle capacity for itself; neither lends nor borrows.
        Reserve = "RESERVE",
        /// Lends idle capacity; never borrows.
        Lend = "LEND",
        /// Lends idle capacity and borrows others' up to `borrowLimit`.
        LendAndBorrow = "LEND_AND_BORROW",
    }
}

/// Whether jobs of a share may preempt lower-priority jobs of the same share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSharePreemptionConfiguration {
    /// Whether higher-priority jobs preempt lower-priority jobs of the same share.
    pub in_share_preemption: QuotaShareInSharePreemptionState,
}

wire_enum! {
    /// In-share preemption on or off.
    QuotaShareInSharePreemptionState {
        /// A higher-priority job may preempt strictly lower-priority jobs of the share.
        Enabled = "ENABLED",
        /// Higher-priority jobs wait for capacity to free up.
        Disabled = "DISABLED",
    }
}

wire_enum! {
    /// Whether a quota share accepts new jobs (set by the user).
    QuotaShareState {
        /// Accepts new jobs.
        Enabled = "ENABLED",
        /// Accepts no new jobs; submitted jobs still run and the share still lends.
        Disabled = "DISABLED",
    }
}

/// Body of the `CreateQuotaShare` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CreateQuotaShareResponse {
    /// Quota-share name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Quota-share ARN (`.../job-queue/QUEUE/quota-share/NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_arn: Option<String>,
}

/// Body of the `UpdateQuotaShare` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateQuotaShareRequest {
    /// Quota-share ARN (`.../job-queue/QUEUE/quota-share/NAME`).
    pub quota_share_arn: String,
    /// Per-unit ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_limits: Option<Vec<QuotaShareCapacityLimit>>,
    /// Reserve, lend, or lend and borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_sharing_configuration: Option<QuotaShareResourceSharingConfiguration>,
    /// Preemption settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<QuotaSharePreemptionConfiguration>,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<QuotaShareState>,
}

/// Body of the `UpdateQuotaShare` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateQuotaShareResponse {
    /// Quota-share name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Quota-share ARN (`.../job-queue/QUEUE/quota-share/NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_arn: Option<String>,
}

/// Body of the `DescribeQuotaShare` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeQuotaShareRequest {
    /// Quota-share ARN (`.../job-queue/QUEUE/quota-share/NAME`).
    pub quota_share_arn: String,
}

/// Body of the `DescribeQuotaShare` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeQuotaShareResponse {
    /// Quota-share name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Quota-share ARN (`.../job-queue/QUEUE/quota-share/NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_arn: Option<String>,
    /// Job-queue ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue_arn: Option<String>,
    /// Per-unit ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_limits: Option<Vec<QuotaShareCapacityLimit>>,
    /// Reserve, lend, or lend and borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_sharing_configuration: Option<QuotaShareResourceSharingConfiguration>,
    /// Preemption settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<QuotaSharePreemptionConfiguration>,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<QuotaShareState>,
    /// Lifecycle status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<QuotaShareStatus>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

wire_enum! {
    /// Lifecycle of a quota share (set by the server).
    QuotaShareStatus {
        /// Being created.
        Creating = "CREATING",
        /// Ready.
        Valid = "VALID",
        /// Broken; see the status reason.
        Invalid = "INVALID",
        /// Being updated.
        Updating = "UPDATING",
        /// Being deleted.
        Deleting = "DELETING",
    }
}

/// Body of the `ListQuotaShares` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListQuotaSharesRequest {
    /// Job queue name or ARN.
    pub job_queue: String,
    /// Page size, 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<i32>,
    /// Opaque pagination token from the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// Body of the `ListQuotaShares` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListQuotaSharesResponse {
    /// The shares of this page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_shares: Option<Vec<QuotaShareDetail>>,
    /// Pass this back to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One quota share as ListQuotaShares returns it (without tags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareDetail {
    /// Quota-share name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Quota-share ARN (`.../job-queue/QUEUE/quota-share/NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_arn: Option<String>,
    /// Job-queue ARN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue_arn: Option<String>,
    /// Per-unit ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_limits: Option<Vec<QuotaShareCapacityLimit>>,
    /// Reserve, lend, or lend and borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_sharing_configuration: Option<QuotaShareResourceSharingConfiguration>,
    /// Preemption settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<QuotaSharePreemptionConfiguration>,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<QuotaShareState>,
    /// Lifecycle status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<QuotaShareStatus>,
}

/// Body of the `DeleteQuotaShare` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteQuotaShareRequest {
    /// Quota-share ARN (`.../job-queue/QUEUE/quota-share/NAME`).
    pub quota_share_arn: String,
}

/// Body of the `DeleteQuotaShare` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteQuotaShareResponse {}
