//! Which jobs are in which status, per queue and per quota share: what ListServiceJobs (and
//! with it `qm jobs` and the dashboard) walks instead of every job the server holds. Derived
//! from the job records (kept in step by the state's one status setter, submission and
//! retirement; rebuilt when a snapshot is loaded), so it is never logged or snapshotted.

use qm_core::JobId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use qm_api::ServiceJobStatus;

use crate::state::JobRec;

/// A queue as ListServiceJobs names it: its name and generation (a re-created queue of the
/// same name lists none of the old one's jobs).
type QueueKey = (Arc<str>, u64);

/// Core job ids by (queue, status) and by (queue, share, status).
#[derive(Clone, Debug, Default)]
pub struct StatusIndex {
    by_queue: BTreeMap<(QueueKey, ServiceJobStatus), BTreeSet<JobId>>,
    by_share: BTreeMap<(QueueKey, Arc<str>, ServiceJobStatus), BTreeSet<JobId>>,
}

impl StatusIndex {
    /// Records `rec` under its current status.
    pub fn insert(&mut self, rec: &JobRec) {
        let q = (rec.queue.clone(), rec.queue_generation);
        self.by_queue
            .entry((q.clone(), rec.status))
            .or_default()
            .insert(rec.core);
        self.by_share
            .entry((q, rec.share.clone(), rec.status))
            .or_default()
            .insert(rec.core);
    }

    /// Forgets `rec` under its current status.
    pub fn remove(&mut self, rec: &JobRec) {
        let q = (rec.queue.clone(), rec.queue_generation);
        let key = (q.clone(), rec.status);
        if let Some(set) = self.by_queue.get_mut(&key) {
            set.remove(&rec.core);
            if set.is_empty() {
                self.by_queue.remove(&key);
            }
        }
        let key = (q, rec.share.clone(), rec.status);
        if let Some(set) = self.by_share.get_mut(&key) {
            set.remove(&rec.core);
            if set.is_empty() {
                self.by_share.remove(&key);
            }
        }
    }

    /// The jobs of a queue (name, generation) in `status`, optionally of one share only.
    pub fn jobs(
        &self,
        queue: &(String, u64),
        share: Option<&str>,
        status: ServiceJobStatus,
    ) -> Option<&BTreeSet<JobId>> {
        let queue = (Arc::from(queue.0.as_str()), queue.1);
        match share {
            None => self.by_queue.get(&(queue, status)),
            Some(s) => self.by_share.get(&(queue, Arc::from(s), status)),
        }
    }
}
