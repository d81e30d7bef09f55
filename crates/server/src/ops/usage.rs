//! What usage accounting reads from the state: each share's entitlement history (recorded on
//! every change of a share) and the attempts of the jobs still in the state.

use qm_api::QuotaShareResourceSharingStrategy;

use crate::state::{AttemptRec, JobRec, ShareRec, State};
use crate::usage::{ShareEpoch, UsageAttempt, UsageJob};

impl State {
    /// Records that share `name` of `queue` is configured as `rec` from now on (`None`: it
    /// was deleted).
    pub(crate) fn record_share(&mut self, queue: &str, name: &str, rec: Option<&ShareRec>) {
        let epoch = ShareEpoch {
            from: self.now,
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
        let now = self.now;
        self.now = i64::MIN;
        for (queue, share) in missing {
            self.record_share(&queue, &share.name, Some(&share));
        }
        self.now = now;
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

fn usage_job(rec: &JobRec) -> UsageJob {
    let mut attempts: Vec<&AttemptRec> = rec
        .attempts
        .iter()
        .chain(rec.preempted.iter())
        .chain(rec.live.iter().filter(|l| !l.preempted))
        .collect();
    attempts.sort_by_key(|a| a.number);
    attempts.dedup_by_key(|a| a.number);
    UsageJob {
        id: rec.id.clone(),
        queue: rec.queue.clone(),
        share: rec.share.clone(),
        principal: rec.principal.clone(),
        created_at: rec.created_at,
        attempts: attempts.into_iter().map(usage_attempt).collect(),
    }
}

fn usage_attempt(a: &AttemptRec) -> UsageAttempt {
    UsageAttempt {
        instance_type: a.instance_type.clone(),
        count: a.count,
        started_at: a.started_at,
        running_at: a.running_at,
        stopped_at: a.stopped_at,
        stop_at: a.stop_at,
        checkpoint_at: a.checkpoint_at,
        preempted: a.preempted,
        preempted_for: a.preempted_for.clone(),
    }
}
