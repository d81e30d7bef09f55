//! EASY backfill: when a job that may not pass an aged head has a runtime bound
//! ([`crate::JobSpec::runtime_limit_ms`]) that ends before the head could surely start, it
//! delays nothing the head was promised, so it runs without being preemptible for the head.
//!
//! The instant the head could surely start (its *shadow*, as Slurm's backfill calls it) is
//! worked out as if every running attempt with a bound held its instances until the bound
//! ran out and every attempt without one held them for ever, while everything the head could
//! preempt — the jobs backfilled onto it, what other shares borrow when the head is within
//! its share's entitlement, its share's lower-priority jobs under in-share preemption — were
//! gone at once, and ignoring the other waiting jobs (the reservation holds them) but for
//! reclaiming jobs, which hold what they claimed as if they had just started. Each
//! simplification can only make the shadow earlier, so fewer jobs qualify: an EASY start
//! never delays the head past its shadow. A head whose start depends on an attempt without a
//! bound has no shadow, and nothing is EASY-backfilled onto it.

use crate::ledger::{self, Account};
use crate::model::*;
use crate::scheduler::Scheduler;
use crate::view::View;

impl Scheduler {
    /// The head's shadow on this unit (see the module doc), or `None` when there is none.
    pub(crate) fn shadow(
        &self,
        q: QueueIx,
        u: UnitIx,
        head: JobId,
        view: &View,
        now: Millis,
    ) -> Option<Millis> {
        let queue = &self.queues[q.0 as usize];
        let ul = queue.units.get(&u)?;
        let job = self.jobs.get(&head)?;
        let (s, c) = (usize::from(job.share.0), job.spec.count);
        let mut accounts: Vec<Account> = view.held_projected().to_vec();
        let owner_sized = accounts[s].usage + c <= accounts[s].entitlement;
        for (x, lane) in ul.lanes.iter().enumerate() {
            let mut gone = lane.backfill.get(&head).copied().unwrap_or(0);
            if x != s && owner_sized {
                gone += accounts[x].borrowed();
            }
            if x == s && queue.shares[s].in_share_preemption() {
                gone += lane
                    .running_by_priority
                    .range(..job.spec.priority)
                    .map(|(_, n)| n)
                    .sum::<u32>();
            }
            accounts[x].usage = accounts[x].usage.saturating_sub(gone);
        }
        // A reclaiming job holds what it claimed as if it had started now: to the end of its
        // bound, or for ever. So the shadow is the same in the pass where a job preempts
        // EASY-backfilled and in the pass where it starts once its victims have exited (were
        // it held then, its claim would lapse, its victims restart, and it preempt again).
        let mut ends: Vec<(Millis, usize, u32)> = Vec::new();
        for (x, lane) in ul.lanes.iter().enumerate() {
            for k in lane.reclaimers.iter().filter(|k| k.job != head) {
                let claimant = &self.jobs[&k.job].spec;
                accounts[x].usage += claimant.count;
                if let Some(bound) = claimant.runtime_limit_ms {
                    ends.push((now.saturating_add(bound), x, claimant.count));
                }
            }
        }
        let fits = |a: &[Account]| {
            ledger::allowed_add(&ledger::pressure(&view.ceiling, a), &a[s], s, c).is_ok()
        };
        if fits(&accounts) {
            return Some(now);
        }
        ends.extend(
            ul.lanes
                .iter()
                .flat_map(|lane| lane.running.iter())
                .filter_map(|k| {
                    let att = self.attempts.get(&k.attempt.0)?;
                    let bound = self.jobs.get(&att.job)?.spec.runtime_limit_ms?;
                    let end = att.started_at.saturating_add(bound).max(now);
                    Some((end, usize::from(att.share.0), att.count))
                }),
        );
        ends.sort_unstable();
        for (end, x, count) in ends {
            accounts[x].usage = accounts[x].usage.saturating_sub(count);
            if fits(&accounts) {
                return Some(end);
            }
        }
        None
    }

    /// Whether job `id` may start EASY-backfilled in front of a head whose shadow is `shadow`:
    /// its bound runs out by then.
    pub(crate) fn ends_before(&self, id: JobId, now: Millis, shadow: Option<Millis>) -> bool {
        let bound = self.jobs.get(&id).and_then(|j| j.spec.runtime_limit_ms);
        matches!((bound, shadow), (Some(b), Some(t)) if now.saturating_add(b) <= t)
    }
}
