//! Snapshots of the state: what lets a restart replay only the batches after the latest one,
//! and what carries a data dir across an upgrade that changes a rule (the snapshot holds
//! facts, so the new build goes on from what the old one decided instead of re-deciding the
//! history).
//!
//! A snapshot is the server's records plus the core's [`qm_core::Image`], as JSON. What can
//! be derived is not stored: parsed payloads (from the requests), the job-id index and the
//! live-attempt index (from the records and the core's attempts). The encoding is a persisted
//! format ([`SNAPSHOT_FORMAT`]): add fields with `#[serde(default)]`, never rename one.

use std::collections::BTreeMap;

use qm_api::Arns;
use serde::{Deserialize, Serialize};

use crate::command::AuditEntry;
use crate::error::ServerError;
use crate::state::{EnvRec, JobRec, PolicyRec, QueueRec, State};

/// The encoding of [`StateImage`], stored with each snapshot.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// The state, by value.
#[derive(Serialize, Deserialize)]
pub struct StateImage {
    /// Service environments.
    pub environments: BTreeMap<String, EnvRec>,
    /// Scheduling policies.
    pub policies: BTreeMap<String, PolicyRec>,
    /// Queues with their shares.
    pub queues: BTreeMap<String, QueueRec>,
    /// Every job record, by core id (shared with the state: see [`State::jobs`]).
    pub jobs: Vec<std::sync::Arc<JobRec>>,
    /// clientToken, core id, canonical request: filled by builds before the map was rebuilt
    /// from the jobs' own requests at load, and no longer read. Written empty, so that the
    /// build before this one still loads a snapshot of this one (without its tokens).
    #[serde(default)]
    pub tokens: Vec<(String, qm_core::JobId, String)>,
    /// Next core job id.
    pub next_job: u64,
    /// Next queue generation.
    pub next_queue_generation: u64,
    /// Physical capacity last logged.
    pub capacity: BTreeMap<String, u32>,
    /// The time of the last batch.
    pub now: i64,
    /// The audit log.
    pub audit: Vec<AuditEntry>,
    /// The number of the audit log's first entry (absent from snapshots of builds before
    /// audit retention: none retired).
    #[serde(default)]
    pub audit_first: u64,
    /// Preemptions per (queue, share).
    pub preemptions: Vec<(String, String, u64)>,
    /// The scheduling core.
    pub core: qm_core::Image,
    /// Entitlements over time (absent from snapshots of builds before usage accounting).
    #[serde(default)]
    pub share_history: Vec<((String, String), Vec<crate::facts::ShareEpoch>)>,
}

impl State {
    /// The state as data, deterministic for a given state (every collection in a fixed order).
    pub fn image(&self) -> StateImage {
        StateImage {
            environments: self.environments.clone(),
            policies: self.policies.clone(),
            queues: self.queues.clone(),
            jobs: self.jobs.values().cloned().collect(),
            tokens: Vec::new(),
            next_job: self.next_job,
            next_queue_generation: self.next_queue_generation,
            capacity: self.capacity.clone(),
            now: self.now,
            audit: self.audit.clone(),
            audit_first: self.audit_first,
            preemptions: self
                .preemptions
                .iter()
                .map(|((q, s), n)| (q.clone(), s.clone(), *n))
                .collect(),
            core: self.core.image(),
            share_history: self
                .share_history
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// The state of `image`, with the data dir's pinned `arns` and `policy`.
    pub fn from_image(
        arns: Arns,
        policy: qm_core::Policy,
        image: StateImage,
    ) -> Result<State, ServerError> {
        let bad = |e: String| ServerError::Recovery(format!("the snapshot cannot be loaded: {e}"));
        let mut state = State::new(arns, policy);
        for (a, job) in image.core.attempts.iter().map(|a| (a.id, a.job)) {
            state.attempt_job.insert(a, job);
        }
        state.core =
            qm_core::Scheduler::from_image(policy, image.core).map_err(|e| bad(e.to_string()))?;
        for mut shared in image.jobs {
            let rec = std::sync::Arc::make_mut(&mut shared);
            state.intern_names(rec);
            state.by_id.insert(rec.id.clone(), rec.core);
            if matches!(
                rec.status,
                qm_api::ServiceJobStatus::Succeeded | qm_api::ServiceJobStatus::Failed
            ) {
                let stopped = rec.stopped_at.unwrap_or(rec.created_at);
                state.finished.insert((stopped, rec.core));
            }
            state.by_status.insert(rec);
            if let Some(token) = &rec.request.client_token {
                state.tokens.insert(token.clone(), rec.core);
            }
            state.jobs.insert(rec.core, shared);
        }
        state.environments = image.environments;
        state.policies = image.policies;
        state.queues = image.queues;
        state.next_job = image.next_job;
        state.next_queue_generation = image.next_queue_generation;
        state.capacity = image.capacity;
        state.now = image.now;
        state.audit = image.audit;
        state.audit_first = image.audit_first;
        state.preemptions = image
            .preemptions
            .into_iter()
            .map(|(q, s, n)| ((q, s), n))
            .collect();
        state.share_history = image.share_history.into_iter().collect();
        state.seed_share_history();
        Ok(state)
    }

    /// The snapshot text of this state.
    pub fn encode_image(&self) -> Result<String, ServerError> {
        encode_image(&self.image())
    }
}

/// The snapshot text of `image`.
pub fn encode_image(image: &StateImage) -> Result<String, ServerError> {
    serde_json::to_string(image)
        .map_err(|e| ServerError::Recovery(format!("encoding a snapshot: {e}")))
}

/// Decodes a snapshot written in `format` (by the build `version`).
pub fn decode_image(format: u32, version: &str, text: &str) -> Result<StateImage, ServerError> {
    if format != SNAPSHOT_FORMAT {
        return Err(ServerError::Recovery(format!(
            "the latest snapshot is in format {format} (written by qm {version}); this qm reads format {SNAPSHOT_FORMAT}: run a qm at least as new as the one that wrote the data dir"
        )));
    }
    serde_json::from_str(text).map_err(|e| {
        ServerError::Recovery(format!(
            "the latest snapshot (written by qm {version}) cannot be decoded: {e}; keep the data dir and report it"
        ))
    })
}
