//! The scheduling pass (DESIGN.md §2), one lane group — a queue's unit — at a time:
//!
//! 1. **Nominate**: each share offers the first pending job, in its order (priority, then
//!    submission), that is not bounded out by an earlier decision of this pass.
//! 2. **Order**: nominees that fit their share's own entitlement first (a job that already
//!    preempted for its capacity first among them, then priority, then submission), then the
//!    borrowers in FIFO order of submission (`idleResourceAssignmentStrategy` FIFO).
//! 3. **Decide** each nominee against the current state: start it, preempt a minimal complete
//!    victim set for it, or leave it waiting with a typed reason.
//! 4. **Bound**: a waiting job of count `c` means no later job of its share with count ≥ `c`
//!    can do better in this pass (it has the same or fewer victims: lower or equal priority),
//!    so the share's next nominee must need fewer instances (best-effort FIFO). A job that
//!    waits for released capacity, or has waited longer than the starvation guard, bounds its
//!    share to nothing, so that nothing passes it.
//!
//! Capacity only shrinks within a pass (a start consumes it; a preemption frees it only when
//! the attempt exits), which is why one pass reaches the fixed point and why the bounds are
//! sound. Cost per pass: O(nominations · (shares + log n)), independent of how many jobs wait.

use std::cmp::Reverse;

use crate::ledger::{self, Account, Ceiling, Pressure, Violation};
use crate::model::*;
use crate::reason::PendingReason;
use crate::scheduler::{Attempt, Hold, PendKey, RunKey, Scheduler};

/// The documented victim order (DESIGN.md §2 rule 7): a smaller rank is preempted first.
/// Fields compare in declaration order:
///
/// 1. lower priority;
/// 2. less work lost: the later the last checkpoint (else the attempt's start), the less a
///    preemption loses;
/// 3. more borrowed instances of the unit held (`min(count, borrowed of its share)`, computed
///    on the state at decision time);
/// 4. the larger job, then the newer attempt, so that the order is total.
///
/// The pass then walks candidates in this order until the set is sufficient and drops, from
/// the last chosen backwards, every victim the set does not need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VictimRank {
    /// The victim's priority.
    pub priority: u32,
    /// Last checkpoint or attempt start; later = ranked earlier.
    pub progress_at: Reverse<Millis>,
    /// Borrowed instances it holds; more = ranked earlier.
    pub borrowed: Reverse<u32>,
    /// Instances it holds; more = ranked earlier.
    pub count: Reverse<u32>,
    /// Newer attempts are ranked earlier.
    pub attempt: Reverse<AttemptId>,
}

impl VictimRank {
    fn of(k: &RunKey, share_borrowed: u32) -> Self {
        VictimRank {
            priority: k.priority,
            progress_at: k.progress,
            borrowed: Reverse(k.count.0.min(share_borrowed)),
            count: k.count,
            attempt: k.attempt,
        }
    }
}

/// What the pass does with one nominee.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Start,
    Preempt(Vec<AttemptId>),
    Wait(PendingReason),
}

#[derive(Clone, Copy, Debug)]
struct Nominee {
    share: usize,
    count: u32,
    key: PendKey,
    own_fit: bool,
    reclaiming: bool,
}

impl Nominee {
    fn order(&self) -> (u8, u8, Reverse<u32>, u64) {
        if self.own_fit {
            (
                0,
                u8::from(!self.reclaiming),
                self.key.priority,
                self.key.seq,
            )
        } else {
            (1, 0, Reverse(0), self.key.seq)
        }
    }
}

impl Scheduler {
    /// Runs the scheduling pass over every lane whose inputs changed and returns the
    /// decisions, in order.
    pub fn schedule(&mut self, now: Millis) -> Vec<Effect> {
        let mut fx = Vec::new();
        while let Some((q, u)) = self.dirty.pop_first() {
            self.schedule_unit(now, q, u, &mut fx);
        }
        fx
    }

    fn schedule_unit(&mut self, now: Millis, q: QueueIx, u: UnitIx, fx: &mut Vec<Effect>) {
        let nshares = self.queues[q.0 as usize].shares.len();
        let Some(ul) = self.queues[q.0 as usize].units.get_mut(&u) else {
            return;
        };
        ul.borrow_barrier = None;
        for lane in &mut ul.lanes {
            lane.held_for = None;
        }
        let mut bound = vec![u32::MAX; nshares];
        let mut barrier: Option<(u64, JobId)> = None;
        let guard = self.policy.reserve_after_ms;
        loop {
            let mut nominees = self.nominate(q, u, &bound);
            if nominees.is_empty() {
                break;
            }
            nominees.sort_by_key(Nominee::order);
            for n in nominees {
                let id = n.key.job;
                let head = bound[n.share] == u32::MAX;
                let decision = self.decide(id);
                let behind_barrier = barrier.is_some_and(|(seq, _)| n.key.seq > seq);
                match decision {
                    Decision::Start if !(behind_barrier && self.would_borrow(id)) => {
                        self.start(now, id, fx);
                    }
                    Decision::Start => bound[n.share] = n.count - 1,
                    Decision::Preempt(victims) => {
                        self.preempt(now, id, &victims, fx);
                        bound[n.share] = 0;
                        self.hold(q, u, n.share, id, Hold::Release);
                    }
                    Decision::Wait(PendingReason::WaitingForRelease { .. }) => {
                        bound[n.share] = 0;
                        self.hold(q, u, n.share, id, Hold::Release);
                    }
                    Decision::Wait(_) => {
                        let aged = now.saturating_sub(self.jobs[&id].queued_at) >= guard;
                        if head && aged {
                            bound[n.share] = 0;
                            self.hold(q, u, n.share, id, Hold::Starvation);
                            if !n.own_fit && barrier.is_none() {
                                barrier = Some((n.key.seq, id));
                            }
                        } else {
                            bound[n.share] = n.count - 1;
                        }
                    }
                }
            }
        }
        if let Some(ul) = self.queues[q.0 as usize].units.get_mut(&u) {
            ul.borrow_barrier = barrier.map(|(_, id)| id);
        }
    }

    fn hold(&mut self, q: QueueIx, u: UnitIx, s: usize, id: JobId, why: Hold) {
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane group");
        ul.lane(ShareIx(s as u16)).held_for = Some((id, why));
    }

    fn nominate(&self, q: QueueIx, u: UnitIx, bound: &[u32]) -> Vec<Nominee> {
        let queue = &self.queues[q.0 as usize];
        let Some(ul) = queue.units.get(&u) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (s, lane) in ul.lanes.iter().enumerate() {
            if bound[s] == 0 || lane.pending.len() == 0 {
                continue;
            }
            if let Some((count, key)) = lane.pending.first(bound[s]) {
                let entitlement = queue.shares[s].entitlement(u);
                out.push(Nominee {
                    share: s,
                    count,
                    key,
                    own_fit: lane.usage + count <= entitlement,
                    reclaiming: self.jobs[&key.job].reclaiming,
                });
            }
        }
        out
    }

    /// Whether starting the job now would take its share beyond its entitlement.
    fn would_borrow(&self, id: JobId) -> bool {
        let job = &self.jobs[&id];
        let queue = &self.queues[job.queue.0 as usize];
        let usage = queue
            .units
            .get(&job.unit)
            .and_then(|ul| ul.lanes.get(usize::from(job.share.0)))
            .map_or(0, |l| l.usage);
        usage + job.spec.count > queue.shares[usize::from(job.share.0)].entitlement(job.unit)
    }

    /// The accounts of every share of the job's queue on its unit; `projected` leaves out
    /// what stopping attempts hold (it will come back).
    pub(crate) fn accounts(
        &self,
        q: QueueIx,
        u: UnitIx,
        projected: bool,
    ) -> (Ceiling, Vec<Account>) {
        let queue = &self.queues[q.0 as usize];
        let ul = queue.units.get(&u);
        let mut queue_usage = 0u32;
        let accounts: Vec<Account> = queue
            .shares
            .iter()
            .enumerate()
            .map(|(i, share)| {
                let lane = ul.and_then(|ul| ul.lanes.get(i));
                let (usage, stopping) = lane.map_or((0, 0), |l| (l.usage, l.stopping));
                queue_usage += usage;
                let entitlement = share.entitlement(u);
                Account {
                    entitlement,
                    usage: if projected { usage - stopping } else { usage },
                    strategy: share.strategy(),
                    allowance: if share.deleted {
                        Some(0)
                    } else {
                        share.spec.borrow_allowance(entitlement)
                    },
                }
            })
            .collect();
        let physical_for_queue = self.physical.get(&u).map(|p| {
            let others = self.physical_used[usize::from(u.0)] - queue_usage;
            p.saturating_sub(others)
        });
        let ceiling = Ceiling {
            environment: queue.environment.get(&u).copied().unwrap_or(0),
            physical_for_queue,
        };
        (ceiling, accounts)
    }

    /// Decides what to do with a pending job now. Pure: the pass applies the decision, and
    /// `explain` reads it.
    pub(crate) fn decide(&self, id: JobId) -> Decision {
        let job = &self.jobs[&id];
        let (q, u, s, c) = (
            job.queue,
            job.unit,
            usize::from(job.share.0),
            job.spec.count,
        );
        let (ceiling, real) = self.accounts(q, u, false);
        let before = ledger::pressure(ceiling, &real);
        if ledger::allowed(&before, &with_usage(ceiling, &real, s, c)).is_ok() {
            return Decision::Start;
        }
        let (_, projected) = self.accounts(q, u, true);
        let releasing: u32 = real
            .iter()
            .zip(&projected)
            .map(|(r, p)| r.usage - p.usage)
            .sum();
        let before_p = if releasing > 0 {
            ledger::pressure(ceiling, &projected)
        } else {
            before
        };
        let violation = match ledger::allowed(&before_p, &with_usage(ceiling, &projected, s, c)) {
            Ok(()) => {
                return Decision::Wait(PendingReason::WaitingForRelease {
                    instances: releasing,
                })
            }
            Err(v) => v,
        };
        if let Some(victims) = self.find_victims(id, ceiling, &projected, &before_p) {
            return Decision::Preempt(victims);
        }
        Decision::Wait(self.wait_reason(id, ceiling, &projected, violation))
    }

    /// The smallest sufficient set of victims for the job, in the documented order, or `None`
    /// when no set of allowed victims would let it start.
    fn find_victims(
        &self,
        id: JobId,
        ceiling: Ceiling,
        projected: &[Account],
        before: &Pressure,
    ) -> Option<Vec<AttemptId>> {
        let job = &self.jobs[&id];
        let (q, u, s, c, p) = (
            job.queue,
            job.unit,
            usize::from(job.share.0),
            job.spec.count,
            job.spec.priority,
        );
        let queue = &self.queues[q.0 as usize];
        let ul = queue.units.get(&u)?;
        let share = &queue.shares[s];
        let in_share = share.spec.in_share_preemption && !share.deleted;
        let entitlement = projected[s].entitlement;
        // Reclaim serves only a job that fits its share's entitlement (rule 4); a borrower
        // never preempts another borrower (rule 6).
        let may_reclaim = c <= entitlement;
        let sufficient = |acc: &[Account], reclaimed: bool| {
            ledger::allowed(before, &ledger::pressure(ceiling, acc)).is_ok()
                && (!reclaimed || acc[s].usage <= entitlement)
        };

        // Optimistic bound first, so that a hopeless job costs O(shares), not O(running).
        let mut best: Vec<Account> = projected.to_vec();
        best[s].usage += c;
        if in_share {
            let lower: u32 = ul.lanes.get(s).map_or(0, |l| {
                l.running_by_priority.range(..p).map(|(_, n)| *n).sum()
            });
            best[s].usage -= lower;
        }
        let in_share_enough = in_share && sufficient(&best, false);
        let borrowers: Vec<usize> = (0..projected.len())
            .filter(|&x| x != s && projected[x].borrowed() > 0)
            .collect();
        if !in_share_enough {
            if !may_reclaim || borrowers.is_empty() {
                return None;
            }
            for &x in &borrowers {
                best[x].usage = 0;
            }
            if !sufficient(&best, true) {
                return None;
            }
        }

        // Candidate streams, each already in victim order; merged by VictimRank.
        let mut streams: Vec<(usize, Candidates<'_>)> = Vec::new();
        if in_share {
            if let Some(lane) = ul.lanes.get(s) {
                let it: Box<dyn Iterator<Item = &RunKey>> =
                    Box::new(lane.running.iter().take_while(move |k| k.priority < p));
                streams.push((s, it.peekable()));
            }
        }
        if may_reclaim {
            for &x in &borrowers {
                let it: Box<dyn Iterator<Item = &RunKey>> = Box::new(ul.lanes[x].running.iter());
                streams.push((x, it.peekable()));
            }
        }
        let borrowed0: Vec<u32> = projected.iter().map(Account::borrowed).collect();
        let mut acc = projected.to_vec();
        acc[s].usage += c;
        let mut chosen: Vec<(usize, RunKey)> = Vec::new();
        let mut reclaimed = false;
        loop {
            // Drop streams of shares that no longer borrow: their jobs are not victims.
            streams
                .retain_mut(|(x, it)| it.peek().is_some() && (*x == s || acc[*x].borrowed() > 0));
            let (i, _) = streams
                .iter_mut()
                .enumerate()
                .map(|(i, (x, it))| {
                    (
                        i,
                        VictimRank::of(it.peek().expect("non-empty"), borrowed0[*x]),
                    )
                })
                .min_by_key(|(_, r)| *r)?;
            let (x, it) = &mut streams[i];
            let key = *it.next().expect("peeked");
            let x = *x;
            acc[x].usage -= key.count.0;
            reclaimed |= x != s;
            chosen.push((x, key));
            if sufficient(&acc, reclaimed) {
                break;
            }
        }
        // Minimize: from the last chosen back, drop every victim the set does not need.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let (x, key) = chosen[i];
            acc[x].usage += key.count.0;
            let still_reclaims = chosen
                .iter()
                .enumerate()
                .any(|(j, (y, _))| j != i && *y != s);
            if sufficient(&acc, still_reclaims) {
                chosen.remove(i);
            } else {
                acc[x].usage -= key.count.0;
            }
        }
        Some(chosen.into_iter().map(|(_, k)| k.attempt.0).collect())
    }

    fn wait_reason(
        &self,
        id: JobId,
        ceiling: Ceiling,
        projected: &[Account],
        violation: Violation,
    ) -> PendingReason {
        let job = &self.jobs[&id];
        let (s, c) = (usize::from(job.share.0), job.spec.count);
        let a = projected[s];
        match violation {
            Violation::Environment => {
                return PendingReason::EnvironmentFull {
                    limit: ceiling.environment,
                }
            }
            Violation::Physical => return PendingReason::InsufficientCapacity,
            Violation::Lending | Violation::BorrowLimit(_) => {}
        }
        let own_usage = a.usage;
        if own_usage + c <= a.entitlement || !a.strategy.borrows() {
            return PendingReason::OwnQuotaFull {
                needs: c,
                usage: own_usage,
                entitlement: a.entitlement,
            };
        }
        let would_borrow = own_usage + c - a.entitlement;
        match violation {
            Violation::BorrowLimit(i) if i == s => PendingReason::BorrowLimitReached {
                would_borrow,
                allowance: a.allowance.unwrap_or(u32::MAX),
            },
            _ => {
                let lendable: u32 = projected.iter().map(Account::lendable).sum();
                let borrowed: u32 = projected.iter().map(Account::borrowed).sum();
                PendingReason::NothingToBorrow {
                    needs: would_borrow - a.borrowed(),
                    lendable: lendable.saturating_sub(borrowed),
                }
            }
        }
    }

    fn start(&mut self, now: Millis, id: JobId, fx: &mut Vec<Effect>) {
        self.dequeue(id);
        let a = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        let job = self.jobs.get_mut(&id).expect("nominee exists");
        job.status = JobStatus::Dispatched;
        job.attempt = Some(a);
        job.reclaiming = false;
        job.status_reason.clear();
        let attempt = Attempt {
            id: a,
            job: id,
            queue: job.queue,
            share: job.share,
            unit: job.unit,
            count: job.spec.count,
            started_at: now,
            progress_at: now,
            priority: job.spec.priority,
            stopping: None,
        };
        let (q, u, s, count, priority) = (
            job.queue,
            job.unit,
            job.share,
            job.spec.count,
            job.spec.priority,
        );
        let lane = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane")
            .lane(s);
        lane.usage += count;
        lane.running.insert(attempt.run_key());
        *lane.running_by_priority.entry(priority).or_default() += count;
        self.physical_used[usize::from(u.0)] += count;
        self.attempts.insert(a, attempt);
        fx.push(Effect::Start {
            job: id,
            attempt: a,
            unit: self.unit_name(u).to_string(),
            count,
        });
    }

    fn preempt(
        &mut self,
        now: Millis,
        for_job: JobId,
        victims: &[AttemptId],
        fx: &mut Vec<Effect>,
    ) {
        let (share_ix, share_name) = {
            let j = &self.jobs[&for_job];
            (j.share, j.spec.share.clone())
        };
        self.jobs
            .get_mut(&for_job)
            .expect("preemptor exists")
            .reclaiming = true;
        for &a in victims {
            let att = &self.attempts[&a];
            let victim = att.job;
            let cause = if att.share == share_ix {
                StopCause::InShare { for_job }
            } else {
                StopCause::Reclaim {
                    for_job,
                    by_share: share_name.clone(),
                }
            };
            self.stop_attempt(a, cause.clone());
            let reason = cause.describe(|j| format!("{}", j.0));
            let job = self.jobs.get_mut(&victim).expect("victim's job exists");
            job.attempt = None;
            job.stopping = Some(a);
            job.preemptions += 1;
            fx.push(Effect::Stop {
                job: victim,
                attempt: a,
                cause,
            });
            let exhausted = job
                .spec
                .preemption_retries
                .is_some_and(|n| job.preemptions > n);
            if exhausted {
                job.status = JobStatus::Failed;
                job.status_reason = format!("{reason}; preemption retries exhausted");
                fx.push(Effect::Finished {
                    job: victim,
                    status: JobStatus::Failed,
                    reason: job.status_reason.clone(),
                });
            } else {
                job.status = JobStatus::Runnable;
                job.queued_at = now;
                job.status_reason = reason.clone();
                fx.push(Effect::Requeued {
                    job: victim,
                    reason,
                });
            }
        }
    }
}

/// One share's victim candidates, in victim order.
type Candidates<'a> = std::iter::Peekable<Box<dyn Iterator<Item = &'a RunKey> + 'a>>;

fn with_usage(ceiling: Ceiling, accounts: &[Account], s: usize, c: u32) -> Pressure {
    let mut acc = accounts.to_vec();
    acc[s].usage += c;
    ledger::pressure(ceiling, &acc)
}
