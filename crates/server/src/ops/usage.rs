//! What usage accounting reads from the state: each share's entitlement history (recorded on
//! every change of a share) and the attempts of the jobs still in the state.

use qm_api::QuotaShareResourceSharingStrategy;

use crate::archive::{ArchivedAttempt, ArchivedJob};
use crate::facts::{ShareEpoch, UsageJob};
use crate::state::{JobRec, ShareRec, State};

impl State {
    /// Records that share `name` of `queue` is configured as `rec` from now on (`None`: it
    /// was deleted).
    pub(crate) fn record_share(&mut self, queue: &str, name: &str, rec: Option<&ShareRec>) {
        self.push_epoch(queue, name, rec, self.now);
    }

    /// Records `rec` as share `name`'s configuration from `from` on.
    fn push_epoch(&mut self, queue: &str, name: &str, rec: Option<&ShareRec>, from: i64) {
        let epoch = ShareEpoch {
            from,
            limits: rec
                .map(|r| {
                    r.limits
                        .iter()
                        .map(|l| (l.capacity_unit.clone(), l.max_capacity.max(0) as u32))
                        .collect()
                })
                .unwrap_or_default(),
            lends: rec.is_some_and(|r| {
                !matches!(
                    r.sharing.strategy,
                    QuotaShareResourceSharingStrategy::Reserve
                )
            }),
        };
        let epochs = self
            .share_history
            .entry((queue.to_string(), name.to_string()))
            .or_default();
        // Several changes in one batch: the last one is what held.
        if epochs.last().is_some_and(|e| e.from == epoch.from) {
            epochs.pop();
        }
        if epochs.last().map(|e| (&e.limits, e.lends)) != Some((&epoch.limits, epoch.lends)) {
            epochs.push(epoch);
        }
    }

    /// Gives every share without a history (a snapshot of a build before usage accounting)
    /// its current configuration since the beginning of time: the best that is known.
    pub(crate) fn seed_share_history(&mut self) {
        let missing: Vec<(String, ShareRec)> = self
            .queues
            .values()
            .flat_map(|q| q.shares.values().map(|s| (q.name.clone(), s.clone())))
            .filter(|(q, s)| {
                !self
                    .share_history
                    .contains_key(&(q.clone(), s.name.clone()))
            })
            .collect();
        for (queue, share) in missing {
            self.push_epoch(&queue, &share.name, Some(&share), i64::MIN);
        }
    }

    /// The jobs in the state that may have held capacity at or after `since`.
    pub fn usage_jobs(&self, since: i64) -> Vec<UsageJob> {
        self.jobs
            .values()
            .filter(|r| r.stopped_at.is_none_or(|t| t >= since))
            .filter(|r| r.attempt_counter > 0)
            .map(|r| usage_job(r))
            .collect()
    }
}

/// A job's usage facts: the archive's record of it (its ended attempts) plus the attempt
/// that holds capacity now, if any.
fn usage_job(rec: &JobRec) -> UsageJob {
    let mut record = ArchivedJob::of(rec);
    if let Some(live) = rec.live.as_ref().filter(|l| !l.preempted) {
        record.attempts.push(ArchivedAttempt::of(live));
    }
    record.usage()
}
