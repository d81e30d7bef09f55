//! The scheduling pass (DESIGN.md §2), one lane group — a queue's unit — at a time:
//!
//! 1. **Nominate**: each share offers one job: its head (first in priority, then submission
//!    order) when the head is special — it waited past the starvation guard, or in-share
//!    preemption could serve it; else its first job that fits the share's idle entitlement;
//!    else its first job within the bound this pass has learnt (step 4).
//! 2. **Order**: owners first (jobs that fit their idle entitlement; among them a job that
//!    already preempted for its capacity, then priority, then submission), then special heads,
//!    then the rest — mostly borrowers — in FIFO order of submission
//!    (`idleResourceAssignmentStrategy` FIFO). Only the first of these three kinds present is
//!    decided before nominating again, so capacity freed for an owner is never re-borrowed
//!    under it.
//! 3. **Decide** each nominee against the current state: start it, preempt a minimal complete
//!    victim set for it, or leave it waiting with a typed reason.
//! 4. **Bound**: a waiting job of count `c` means no later job of its share with count ≥ `c`
//!    can do better in this pass (it has the same or fewer victims: lower or equal priority),
//!    so the share's next nominee must need fewer instances (best-effort FIFO). A job that
//!    waits for released capacity, or a head that waited past the starvation guard, closes its
//!    share for the rest of the pass, so that nothing passes it; an aged borrower also stops
//!    later borrowers of every share from borrowing the unit.
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

/// What the pass does with one nominee. Waiting carries only the constraint that blocked it;
/// the full [`PendingReason`] is built on demand by `explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Start,
    Preempt(Vec<AttemptId>),
    /// It fits once the stopping attempts (this many instances) have exited.
    Release(u32),
    Wait(Violation),
}

/// The accounts of one lane group (a queue's unit), built once per pass and kept current as
/// the pass starts jobs and preempts, so that each decision costs O(1) unless it looks for
/// victims. `real` counts what stopping attempts still hold; `projected` leaves it out (it
/// will come back).
#[derive(Clone, Debug)]
pub(crate) struct View {
    pub(crate) ceiling: Ceiling,
    pub(crate) real: Vec<Account>,
    pub(crate) projected: Vec<Account>,
    real_pressure: Pressure,
    projected_pressure: Pressure,
    /// Instances held by stopping attempts.
    pub(crate) releasing: u32,
}

impl View {
    fn started(&mut self, s: usize, c: u32) {
        self.real[s].usage += c;
        self.projected[s].usage += c;
        self.real_pressure = ledger::pressure(self.ceiling, &self.real);
        self.projected_pressure = ledger::pressure(self.ceiling, &self.projected);
    }

    fn stopping(&mut self, s: usize, c: u32) {
        self.projected[s].usage -= c;
        self.releasing += c;
        self.projected_pressure = ledger::pressure(self.ceiling, &self.projected);
    }
}

/// The three kinds of nominee, decided in this order: a pass decides every nominee of the
/// lowest kind present, then nominates again. Owners go first so that capacity freed for an
/// owner (by a finish or a reclaim) is never re-borrowed under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Fits its share's idle entitlement.
    Own,
    /// A share's head that does not fit its idle entitlement (it needs to borrow, or in-share
    /// preemption): decided before any other job of its share, in FIFO order of submission.
    Head,
    /// A job behind its share's head that needs more than the idle entitlement (best-effort
    /// backfill), in FIFO order of submission.
    Other,
}

#[derive(Clone, Copy, Debug)]
struct Nominee {
    share: usize,
    count: u32,
    key: PendKey,
    kind: Kind,
    /// The share's head, nominated because it is special (see [`Kind::Head`]).
    head: bool,
    reclaiming: bool,
}

impl Nominee {
    fn order(&self) -> (Kind, u8, Reverse<u32>, u64) {
        match self.kind {
            Kind::Own => (
                self.kind,
                u8::from(!self.reclaiming),
                self.key.priority,
                self.key.seq,
            ),
            Kind::Head | Kind::Other => (self.kind, 0, Reverse(0), self.key.seq),
        }
    }
}

/// What one pass has learnt about a share: no job of the share needing `any` or more
/// instances can start (nor, among those that fit its idle entitlement, `own` or more); and
/// which head it has already decided.
#[derive(Clone, Copy, Debug)]
struct Bound {
    any: u32,
    own: u32,
    head_seen: Option<JobId>,
}

impl Bound {
    fn close(&mut self) {
        self.any = 0;
        self.own = 0;
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
        let mut bounds = vec![
            Bound {
                any: u32::MAX,
                own: u32::MAX,
                head_seen: None
            };
            nshares
        ];
        let mut barrier: Option<(u64, JobId)> = None;
        let mut view = self.view(q, u);
        loop {
            let mut nominees = self.nominate(q, u, &bounds, &view);
            let Some(kind) = nominees.iter().map(|n| n.kind).min() else {
                break;
            };
            nominees.retain(|n| n.kind == kind);
            nominees.sort_by_key(Nominee::order);
            for n in nominees {
                let id = n.key.job;
                let b = &mut bounds[n.share];
                if n.head {
                    b.head_seen = Some(id);
                }
                match self.decide(id, &view) {
                    Decision::Start
                        if barrier.is_some_and(|(seq, _)| n.key.seq > seq)
                            && self.would_borrow(id) =>
                    {
                        b.any = n.count - 1;
                    }
                    Decision::Start => {
                        self.start(now, id, fx);
                        view.started(n.share, n.count);
                    }
                    Decision::Preempt(victims) => {
                        b.close();
                        for a in &victims {
                            let att = &self.attempts[a];
                            view.stopping(usize::from(att.share.0), att.count);
                        }
                        self.preempt(now, id, &victims, fx);
                        self.hold(q, u, n.share, id, Hold::Release);
                    }
                    Decision::Release(_) => {
                        b.close();
                        self.hold(q, u, n.share, id, Hold::Release);
                    }
                    Decision::Wait(_) if n.head && self.aged(now, id) => {
                        b.close();
                        if barrier.is_none() && self.would_borrow(id) {
                            barrier = Some((n.key.seq, id));
                        }
                        self.hold(q, u, n.share, id, Hold::Starvation);
                    }
                    Decision::Wait(_) => match n.kind {
                        Kind::Own if !n.head => b.own = n.count - 1,
                        _ => b.any = n.count - 1,
                    },
                }
            }
        }
        if let Some(ul) = self.queues[q.0 as usize].units.get_mut(&u) {
            ul.borrow_barrier = barrier.map(|(_, id)| id);
        }
    }

    /// Whether the job has waited past the starvation guard.
    fn aged(&self, now: Millis, id: JobId) -> bool {
        now.saturating_sub(self.jobs[&id].queued_at) >= self.policy.reserve_after_ms
    }

    fn hold(&mut self, q: QueueIx, u: UnitIx, s: usize, id: JobId, why: Hold) {
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane group");
        ul.lane(ShareIx(s as u16)).held_for = Some((id, why));
    }

    /// Each share's nominee: its head until the pass has decided it, then the first job that
    /// fits its idle entitlement, else the first job within its bound.
    fn nominate(&self, q: QueueIx, u: UnitIx, bounds: &[Bound], view: &View) -> Vec<Nominee> {
        let queue = &self.queues[q.0 as usize];
        let Some(ul) = queue.units.get(&u) else {
            return Vec::new();
        };
        let p = &view.projected_pressure;
        let borrow_open = p.lending < 0 && p.environment < 0 && p.physical < 0;
        let mut out = Vec::new();
        for (s, lane) in ul.lanes.iter().enumerate() {
            let b = bounds[s];
            if lane.pending.len() == 0 || (b.any == 0 && b.own == 0) {
                continue;
            }
            let share = &queue.shares[s];
            let own_room = view.real[s].entitlement.saturating_sub(lane.usage);
            // A share with no idle entitlement, no in-share preemption and nothing it could
            // borrow can start nothing and preempt nobody in this pass (capacity only shrinks
            // within a pass): skip it without looking at its jobs. This keeps a full cluster's
            // pass O(shares).
            if own_room == 0
                && !share.spec.in_share_preemption
                && !(share.strategy().borrows() && borrow_open)
            {
                continue;
            }
            let nominee = |count: u32, key: PendKey, kind: Kind, head: bool| Nominee {
                share: s,
                count,
                key,
                kind,
                head,
                reclaiming: self.jobs[&key.job].reclaiming,
            };
            // The head is always decided before anything else of its share: a job behind it
            // may only use capacity the head could not (best-effort FIFO).
            if let Some((count, key)) = lane.pending.first(u32::MAX) {
                if b.head_seen != Some(key.job) && count <= b.any {
                    let kind = if count <= own_room {
                        Kind::Own
                    } else {
                        Kind::Head
                    };
                    out.push(nominee(count, key, kind, true));
                    continue;
                }
            }
            let own_cap = own_room.min(b.own);
            if let Some((count, key)) = lane.pending.first(own_cap).filter(|_| own_cap > 0) {
                out.push(nominee(count, key, Kind::Own, false));
            } else if let Some((count, key)) = lane.pending.first(b.any).filter(|_| b.any > 0) {
                out.push(nominee(count, key, Kind::Other, false));
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

    /// The accounts of every share of a queue on one unit.
    pub(crate) fn view(&self, q: QueueIx, u: UnitIx) -> View {
        let queue = &self.queues[q.0 as usize];
        let ul = queue.units.get(&u);
        let mut queue_usage = 0u32;
        let mut releasing = 0u32;
        let mut real = Vec::with_capacity(queue.shares.len());
        let mut projected = Vec::with_capacity(queue.shares.len());
        for (i, share) in queue.shares.iter().enumerate() {
            let lane = ul.and_then(|ul| ul.lanes.get(i));
            let (usage, stopping) = lane.map_or((0, 0), |l| (l.usage, l.stopping));
            queue_usage += usage;
            releasing += stopping;
            let entitlement = share.entitlement(u);
            let account = Account {
                entitlement,
                usage,
                strategy: share.strategy(),
                allowance: if share.deleted {
                    Some(0)
                } else {
                    share.spec.borrow_allowance(entitlement)
                },
            };
            real.push(account);
            projected.push(Account {
                usage: usage - stopping,
                ..account
            });
        }
        let physical_for_queue = self.physical.get(&u).map(|p| {
            let others = self.physical_used[usize::from(u.0)] - queue_usage;
            p.saturating_sub(others)
        });
        let ceiling = Ceiling {
            environment: queue.environment.get(&u).copied().unwrap_or(0),
            physical_for_queue,
        };
        View {
            ceiling,
            real_pressure: ledger::pressure(ceiling, &real),
            projected_pressure: ledger::pressure(ceiling, &projected),
            real,
            projected,
            releasing,
        }
    }

    /// Decides what to do with a pending job now, against `view` (the current accounts of
    /// its lane group). Pure: the pass applies the decision, and `explain` reads it.
    pub(crate) fn decide(&self, id: JobId, view: &View) -> Decision {
        let job = &self.jobs[&id];
        let (s, c) = (usize::from(job.share.0), job.spec.count);
        let violation = match ledger::allowed_add(&view.real_pressure, &view.real[s], s, c) {
            Ok(()) => return Decision::Start,
            Err(v) => v,
        };
        let violation = if view.releasing > 0 {
            match ledger::allowed_add(&view.projected_pressure, &view.projected[s], s, c) {
                Ok(()) => return Decision::Release(view.releasing),
                Err(v) => v,
            }
        } else {
            violation
        };
        match self.find_victims(id, view) {
            Some(victims) => Decision::Preempt(victims),
            None => Decision::Wait(violation),
        }
    }

    /// The smallest sufficient set of victims for the job, in the documented order, or `None`
    /// when no set of allowed victims would let it start.
    fn find_victims(&self, id: JobId, view: &View) -> Option<Vec<AttemptId>> {
        let (ceiling, projected, before) =
            (view.ceiling, &view.projected[..], &view.projected_pressure);
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

        // Cheap exits first, without allocating: the common "cluster full, nothing to take"
        // case costs O(shares).
        let lower: u32 = if in_share {
            ul.lanes.get(s).map_or(0, |l| {
                l.running_by_priority.range(..p).map(|(_, n)| *n).sum()
            })
        } else {
            0
        };
        let any_borrower = projected
            .iter()
            .enumerate()
            .any(|(x, a)| x != s && a.borrowed() > 0);
        let reclaim_helps =
            may_reclaim && any_borrower && projected[s].usage - lower + c <= entitlement;
        if lower == 0 && !reclaim_helps {
            return None;
        }

        // Optimistic bound next, so that a hopeless job costs O(shares), not O(running).
        let mut best: Vec<Account> = projected.to_vec();
        best[s].usage += c;
        best[s].usage -= lower;
        let in_share_enough = in_share && sufficient(&best, false);
        let borrowers: Vec<usize> = (0..projected.len())
            .filter(|&x| x != s && projected[x].borrowed() > 0)
            .collect();
        if !in_share_enough {
            if !reclaim_helps {
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
        if reclaim_helps {
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

    /// Classifies why a job with no victim set must wait: first what its share may do (own
    /// quota, borrow limit, what is lendable), then what the unit allows (environment,
    /// physical instances).
    pub(crate) fn wait_reason(
        &self,
        id: JobId,
        view: &View,
        violation: Violation,
    ) -> PendingReason {
        let (ceiling, projected, before) =
            (view.ceiling, &view.projected[..], &view.projected_pressure);
        let job = &self.jobs[&id];
        let (s, c) = (usize::from(job.share.0), job.spec.count);
        let a = projected[s];
        let unit_full = |v: Violation| match v {
            Violation::Physical => PendingReason::InsufficientCapacity,
            _ => PendingReason::EnvironmentFull {
                limit: ceiling.environment,
            },
        };
        if a.usage + c <= a.entitlement {
            return unit_full(violation);
        }
        if !a.strategy.borrows() {
            return PendingReason::OwnQuotaFull {
                needs: c,
                usage: a.usage,
                entitlement: a.entitlement,
            };
        }
        let would_borrow = a.usage + c - a.entitlement;
        if let Some(allowance) = a.allowance {
            if would_borrow > allowance {
                return PendingReason::BorrowLimitReached {
                    would_borrow,
                    allowance,
                };
            }
        }
        let after = with_usage(ceiling, projected, s, c);
        if after.lending > before.lending.max(0) {
            let lendable: u32 = projected.iter().map(Account::lendable).sum();
            let borrowed: u32 = projected.iter().map(Account::borrowed).sum();
            return PendingReason::NothingToBorrow {
                needs: would_borrow - a.borrowed(),
                lendable: lendable.saturating_sub(borrowed),
            };
        }
        unit_full(violation)
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
