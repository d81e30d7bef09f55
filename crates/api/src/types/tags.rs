//! Tag operations. Their `resourceArn` (and UntagResource's `tagKeys`) travel in the URI, not
//! the body, so those members default to empty when a body is parsed and the server fills them
//! in from the path and query string.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of the `TagResource` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TagResourceRequest {
    /// ARN of the tagged resource; taken from the URI path, not the body.
    #[serde(default)]
    pub resource_arn: String,
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    pub tags: BTreeMap<String, String>,
}

/// Body of the `TagResource` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TagResourceResponse {}

/// Body of the `UntagResource` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UntagResourceRequest {
    /// ARN of the tagged resource; taken from the URI path, not the body.
    #[serde(default)]
    pub resource_arn: String,
    /// Keys to remove; taken from the query string, not the body.
    #[serde(default)]
    pub tag_keys: Vec<String>,
}

/// Body of the `UntagResource` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct UntagResourceResponse {}

/// Body of the `ListTagsForResource` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListTagsForResourceRequest {
    /// ARN of the tagged resource; taken from the URI path, not the body.
    #[serde(default)]
    pub resource_arn: String,
}

/// Body of the `ListTagsForResource` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListTagsForResourceResponse {
    /// Tags: 1..=50 entries, key 1..=128, value 0..=256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}
