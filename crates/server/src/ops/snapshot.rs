//! GetJobQueueSnapshot: the front of the queue and of each share, in dispatch order, and what
//! dispatched jobs use. Computed on demand, so `lastUpdatedAt` is the time of the request.

use std::collections::BTreeMap;

use qm_api::*;

use crate::reply::{reply, Reply};
use crate::state::State;

/// Most jobs `frontOfQueue` lists (AWS limit).
const FRONT_OF_QUEUE_MAX: usize = 100;

impl State {
    pub(crate) fn get_job_queue_snapshot(
        &self,
        r: &GetJobQueueSnapshotRequest,
        now: i64,
    ) -> Result<Reply, ApiError> {
        let queue = self.queue_name("jobQueue", &r.job_queue)?;
        let (front, per_share) = self.fronts(&queue);
        reply(GetJobQueueSnapshotResponse {
            front_of_queue: Some(FrontOfQueueDetail {
                jobs: Some(front),
                last_updated_at: Some(now),
            }),
            front_of_quota_shares: Some(FrontOfQuotaSharesDetail {
                quota_shares: Some(per_share),
                last_updated_at: Some(now),
            }),
            queue_utilization: Some(self.utilization(&queue, now)),
        })
    }

    /// The first jobs of `queue` in dispatch order, and the first of each of its shares.
    fn fronts(
        &self,
        queue: &str,
    ) -> (
        Vec<FrontOfQueueJobSummary>,
        BTreeMap<String, Vec<FrontOfQuotaShareJobSummary>>,
    ) {
        let q = &self.queues[queue];
        let mut front = Vec::new();
        let mut per_share: BTreeMap<String, Vec<FrontOfQuotaShareJobSummary>> = BTreeMap::new();
        for &(_, core) in &q.runnable {
            let rec = &self.jobs[&core];
            let at = self
                .core
                .job(core)
                .map_or(rec.created_at, |j| j.queued_at as i64);
            let arn = self.arns.service_job(&rec.id);
            if front.len() < FRONT_OF_QUEUE_MAX {
                front.push(FrontOfQueueJobSummary {
                    job_arn: Some(arn.clone()),
                    earliest_time_at_position: Some(at),
                });
            }
            per_share.entry(rec.share.to_string()).or_insert_with(|| {
                vec![FrontOfQuotaShareJobSummary {
                    job_arn: Some(arn),
                    earliest_time_at_position: Some(at),
                }]
            });
            if front.len() >= FRONT_OF_QUEUE_MAX && per_share.len() >= q.shares.len() {
                break;
            }
        }
        (front, per_share)
    }

    /// What the dispatched jobs of `queue` use: in all, and the 20 shares that use most.
    fn utilization(&self, queue: &str, now: i64) -> QueueSnapshotUtilizationDetail {
        let usage = self.core.usage(queue).unwrap_or_default();
        let mut total: BTreeMap<String, u32> = BTreeMap::new();
        let mut shares: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
        for u in &usage {
            if u.usage == 0 {
                continue;
            }
            *total.entry(u.instance_type.clone()).or_default() += u.usage;
            *shares
                .entry(u.share.clone())
                .or_default()
                .entry(u.instance_type.clone())
                .or_default() += u.usage;
        }
        let mut top: Vec<(u32, String, BTreeMap<String, u32>)> = shares
            .into_iter()
            .map(|(s, m)| (m.values().sum(), s, m))
            .collect();
        // Highest usage first, then by name for a stable order.
        top.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        top.truncate(20);
        QueueSnapshotUtilizationDetail {
            total_capacity_usage: Some(
                total
                    .into_iter()
                    .map(|(unit, n)| QueueSnapshotCapacityUsage {
                        capacity_unit: Some(unit),
                        quantity: Some(f64::from(n)),
                    })
                    .collect(),
            ),
            fairshare_utilization: None,
            quota_share_utilization: Some(QuotaShareUtilizationDetail {
                top_capacity_utilization: Some(
                    top.into_iter()
                        .map(|(_, name, m)| QuotaShareCapacityUtilization {
                            quota_share_name: Some(name),
                            capacity_usage: Some(
                                m.into_iter()
                                    .map(|(unit, n)| QuotaShareCapacityUsage {
                                        capacity_unit: Some(unit),
                                        quantity: Some(f64::from(n)),
                                    })
                                    .collect(),
                            ),
                        })
                        .collect(),
                ),
            }),
            last_updated_at: Some(now),
        }
    }
}
