//! Service environments: the pool of instances per type that a quota-management queue draws
//! from. Shapes of the four service-environment operations.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of the `CreateServiceEnvironment` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateServiceEnvironmentRequest {
    /// Service-environment name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub service_environment_name: String,
    /// The environment's type.
    pub service_environment_type: ServiceEnvironmentType,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ServiceEnvironmentState>,
    /// Per-unit ceilings.
    pub capacity_limits: Vec<CapacityLimit>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

wire_enum! {
    /// What a service environment runs; Quartermaster supports only SageMaker training.
    ServiceEnvironmentType {
        /// SageMaker training jobs.
        SagemakerTraining = "SAGEMAKER_TRAINING",
    }
}

wire_enum! {
    /// Whether a service environment takes new work (set by the user).
    ServiceEnvironmentState {
        /// Takes new work.
        Enabled = "ENABLED",
        /// Takes no new work; required before deletion.
        Disabled = "DISABLED",
    }
}

/// A service environment's ceiling for one capacity unit (for quota management: one
/// instance type). Both members are optional in the model; `validate::capacity_limits` requires them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CapacityLimit {
    /// Most instances of the unit in use at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_capacity: Option<i32>,
    /// The capacity unit: an instance type such as `ml.g5.xlarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_unit: Option<String>,
}

/// Body of the `CreateServiceEnvironment` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct CreateServiceEnvironmentResponse {
    /// Service-environment name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub service_environment_name: String,
    /// Service-environment ARN.
    pub service_environment_arn: String,
}

/// Body of the `UpdateServiceEnvironment` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateServiceEnvironmentRequest {
    /// Service environment name or ARN.
    pub service_environment: String,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ServiceEnvironmentState>,
    /// Per-unit ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_limits: Option<Vec<CapacityLimit>>,
}

/// Body of the `UpdateServiceEnvironment` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpdateServiceEnvironmentResponse {
    /// Service-environment name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub service_environment_name: String,
    /// Service-environment ARN.
    pub service_environment_arn: String,
}

/// Body of the `DescribeServiceEnvironments` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeServiceEnvironmentsRequest {
    /// Environment names or ARNs to describe; empty or absent means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environments: Option<Vec<String>>,
    /// Page size, 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<i32>,
    /// Opaque pagination token from the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// Body of the `DescribeServiceEnvironments` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DescribeServiceEnvironmentsResponse {
    /// The environments of this page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environments: Option<Vec<ServiceEnvironmentDetail>>,
    /// Pass this back to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One service environment as DescribeServiceEnvironments returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEnvironmentDetail {
    /// Service-environment name, 1..=128 characters of `[A-Za-z0-9_-]`.
    pub service_environment_name: String,
    /// Service-environment ARN.
    pub service_environment_arn: String,
    /// The environment's type.
    pub service_environment_type: ServiceEnvironmentType,
    /// ENABLED or DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ServiceEnvironmentState>,
    /// Lifecycle status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceEnvironmentStatus>,
    /// Per-unit ceilings.
    pub capacity_limits: Vec<CapacityLimit>,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

wire_enum! {
    /// Lifecycle of a service environment (set by the server).
    ServiceEnvironmentStatus {
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

/// Body of the `DeleteServiceEnvironment` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteServiceEnvironmentRequest {
    /// Service environment name or ARN.
    pub service_environment: String,
}

/// Body of the `DeleteServiceEnvironment` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeleteServiceEnvironmentResponse {}
