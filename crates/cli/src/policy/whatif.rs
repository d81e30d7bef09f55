//! What the server's scheduler would decide once a cluster file is applied: `qm plan` asks
//! `POST /qm/v1/what-if` (the core run on a copy of the server's state) instead of working
//! out victims itself, so that the jobs it names are the ones the scheduler would pick. Each
//! share goes with the file's thrash protection as tags ([`tags::for_what_if`]), so that a
//! `min_runtime_seconds` the file adds, changes or drops counts too; so do its fair-sharing
//! rules (the policy's tags, the shares' weights and groups, the group definitions).

use qm_api::qm::WhatIf;
use serde_json::json;

use super::apply::{create_share_body, limits};
use super::tags;
use super::{Desired, Error};
use crate::client::Client;

/// The what-if endpoint.
pub const WHAT_IF_PATH: &str = "/qm/v1/what-if";

/// What the server's scheduler would decide if the queue were configured as `desired` says.
pub fn read(client: &Client, desired: &Desired) -> Result<WhatIf, Error> {
    let queue = &desired.names.job_queue;
    // The fair-sharing keys the file is silent on stay as the server has them, as `qm apply`
    // leaves them.
    let mut keep = Vec::new();
    if !desired.fair.weight {
        keep.push(qm_api::validate::TAG_WEIGHT);
    }
    if !desired.fair.group {
        keep.push(qm_api::validate::TAG_GROUP);
    }
    let mut request = json!({
        "jobQueue": queue,
        "capacityLimits": limits(&desired.environment),
        "quotaShares": desired
            .shares
            .iter()
            .map(|s| create_share_body(&s.spec, queue, &tags::for_what_if(&s.tags)))
            .collect::<Vec<_>>(),
        "policyTags": desired.policy_tags,
        "keepTags": keep,
    });
    if let Some(groups) = &desired.groups {
        request["groups"] = json!(groups);
    }
    let v = client
        .post_json(WHAT_IF_PATH, &request)
        .map_err(|e| Error::request("what-if", e))?;
    serde_json::from_value(v).map_err(|e| Error::Shape {
        operation: "what-if".into(),
        message: e.to_string(),
    })
}
