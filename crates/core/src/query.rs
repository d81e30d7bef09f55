//! Read-only views of the state for shells: jobs, attempts and per-share accounting.

use std::collections::BTreeSet;

use crate::model::*;
use crate::scheduler::{Attempt, Input, Job, Scheduler};
use crate::CoreError;

/// One share's position on one unit, as the CLI and dashboard show it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareUsage {
    /// Share name.
    pub share: String,
    /// Instance type.
    pub instance_type: String,
    /// Its limit for the type.
    pub entitlement: u32,
    /// Instances its attempts hold (stopping ones included).
    pub usage: u32,
    /// Of which still stopping.
    pub stopping: u32,
    /// Usage above the entitlement.
    pub borrowed: u32,
    /// Idle entitlement others may borrow.
    pub lendable: u32,
    /// What others borrow of it: the unit's borrowed total split over the lenders
    /// ([`crate::ledger::lent_out`]).
    pub lent_out: f64,
    /// RUNNABLE jobs of the share on the type (misconfigured ones excluded).
    pub pending: usize,
}

/// Instances one share lends another on one unit ([`crate::ledger::flows`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Flow {
    /// Instance type.
    pub instance_type: String,
    /// The share whose idle entitlement is used.
    pub lender: String,
    /// The share using it.
    pub borrower: String,
    /// Instances (a share of the pooled lending, so possibly fractional).
    pub instances: f64,
}

/// How much of a running attempt's capacity its share borrows, and from whom.
#[derive(Clone, Debug, PartialEq)]
pub struct Borrowing {
    /// Instances of the attempt on borrowed capacity (0: all within its share's own limit).
    pub borrowed: u32,
    /// Instances the attempt holds.
    pub count: u32,
    /// The shares whose idle capacity its share uses on the unit, most lent first.
    pub lenders: Vec<String>,
    /// Whether the attempt may be interrupted (one that may not never borrows).
    pub interruptible: bool,
    /// Whether the attempt was started as one that may borrow ([`crate::JobSpec::borrows`]).
    pub borrows: bool,
}

/// A queue's view of one unit's pool: what it could hold and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolUsage {
    /// Instance type.
    pub instance_type: String,
    /// The service environment's limit (0 when it has none for the type).
    pub environment: u32,
    /// Physical instances of the type, all queues together, when the executor reports them.
    pub physical: Option<u32>,
    /// Instances this queue's attempts hold (stopping ones included).
    pub used: u32,
    /// Instances the queue could still start on: the lower of the environment's limit and the
    /// physical instances not held by other queues, less what it holds.
    pub free: u32,
}

impl Scheduler {
    /// A job by id.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id).map(|j| &**j)
    }

    /// An attempt that has not exited yet.
    pub fn attempt(&self, id: AttemptId) -> Option<&Attempt> {
        self.attempts.get(&id)
    }

    /// Every job id, ascending.
    pub fn job_ids(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.jobs.keys().copied().collect();
        ids.sort();
        ids
    }

    /// Number of jobs the core remembers.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Forgets a finished job (the shell keeps its history); returns whether it did.
    pub fn forget(&mut self, id: JobId) -> bool {
        match self.jobs.get(&id) {
            Some(j) if j.status.is_final() && j.stopping.is_none() && j.attempt.is_none() => {
                self.jobs.remove(&id);
                true
            }
            _ => false,
        }
    }

    /// What the scheduler would decide if `inputs` were applied at `now`, worked out on a copy
    /// (this one is untouched): the effects of the pass at `now`, and of the passes that its
    /// wake-ups bring within `horizon_ms` (a job patient with its victims preempts when its
    /// patience runs out), each with its instant, assuming nothing else happens meanwhile (no
    /// job ends or checkpoints, no victim exits). The one model of the rules for a what-if:
    /// `qm plan` asks the server for this rather than re-deriving the victim choice.
    pub fn what_if(
        &self,
        now: Millis,
        inputs: impl IntoIterator<Item = Input>,
        horizon_ms: Millis,
    ) -> Result<Vec<(Millis, Effect)>, CoreError> {
        self.foresee(now, inputs, horizon_ms, |_| ())
            .map(|(effects, ())| effects)
    }

    /// [`Scheduler::what_if`], and `look` at the copy once the inputs are applied and before
    /// any pass acts on them (`qm plan` reads the [`Scheduler::victim_order`] there): one copy
    /// of the state for both.
    pub fn foresee<T>(
        &self,
        now: Millis,
        inputs: impl IntoIterator<Item = Input>,
        horizon_ms: Millis,
        look: impl FnOnce(&Scheduler) -> T,
    ) -> Result<(Vec<(Millis, Effect)>, T), CoreError> {
        let mut copy = self.clone();
        let mut out = Vec::new();
        for input in inputs {
            out.extend(copy.apply(now, input)?.into_iter().map(|e| (now, e)));
        }
        let seen = look(&copy);
        let mut at = now.max(copy.clock);
        let until = at.saturating_add(horizon_ms);
        loop {
            out.extend(copy.schedule(at).into_iter().map(|e| (at, e)));
            match copy.next_wakeup() {
                Some(w) if w > at && w <= until => at = w,
                _ => break,
            }
        }
        Ok((out, seen))
    }

    /// A queue's running attempts per instance type (types in name order), each type's in
    /// the order the victim search ranks them ([`crate::VictimRank`], with each share's
    /// borrowed instances as the pass projects them). Among the sets of victims that free
    /// enough, the search takes the one whose worst victim ranks earliest, so with equal sizes
    /// it takes a prefix of this order; a larger victim further down may replace several
    /// smaller ones ahead of it. `qm plan` lists a change's preemptible jobs in this order
    /// (through the server's what-if), as the ones most likely picked; the what-if's own
    /// decisions say which are.
    pub fn victim_order(&self, queue: &str) -> Option<Vec<(String, JobId)>> {
        let (q, units) = self.units_of(queue)?;
        let qu = &self.queues[q.0 as usize];
        let mut out = Vec::new();
        for u in units {
            let Some(ul) = qu.units.get(&u) else {
                continue;
            };
            let view = self.view(q, u);
            let mut ranked: Vec<(crate::VictimRank, JobId)> = Vec::new();
            for (x, lane) in ul.lanes.iter().enumerate() {
                let borrowed = view
                    .projected
                    .get(x)
                    .map_or(0, crate::ledger::Account::borrowed);
                for k in &lane.running {
                    let job = self.attempts[&k.attempt.0].job;
                    ranked.push((crate::VictimRank::of(k, borrowed), job));
                }
            }
            ranked.sort();
            let name = self.unit_name(u);
            out.extend(ranked.into_iter().map(|(_, j)| (name.to_string(), j)));
        }
        Some(out)
    }

    /// Per share and unit accounting of a queue, shares in name order: every share on every
    /// unit that a share has a limit for or a job has used, so that a share with no job yet
    /// still shows its entitlement (and what it could lend).
    pub fn usage(&self, queue: &str) -> Option<Vec<ShareUsage>> {
        let (q, units) = self.units_of(queue)?;
        let qu = &self.queues[q.0 as usize];
        let mut out = Vec::new();
        for u in units {
            let view = self.view(q, u);
            let lent = crate::ledger::lent_out(view.accounts());
            for (name, &s) in &qu.share_ix {
                let i = usize::from(s.0);
                // What attempts hold, without the claims of jobs waiting for their victims.
                let a = view.held(i);
                let lane = qu.units.get(&u).and_then(|ul| ul.lanes.get(i));
                out.push(ShareUsage {
                    share: name.clone(),
                    instance_type: self.unit_name(u).to_string(),
                    entitlement: a.entitlement,
                    usage: a.usage,
                    stopping: lane.map_or(0, |l| l.stopping),
                    borrowed: a.borrowed(),
                    lendable: a.lendable(),
                    lent_out: (lent[i] * 100.0).round() / 100.0,
                    pending: lane.map_or(0, |l| l.pending.len()),
                });
            }
        }
        out.sort_by(|a, b| (&a.share, &a.instance_type).cmp(&(&b.share, &b.instance_type)));
        Some(out)
    }

    /// Whether a running attempt of job `id` runs on borrowed capacity; `None` when the job
    /// holds no attempt or its attempt is stopping. A share's borrowed instances are those a
    /// reclaim would take back first: its interruptible attempts in victim order (DESIGN.md §2
    /// rule 7) cover what it holds beyond its limit; jobs that may not be interrupted count
    /// first against the limit and never borrow. O(attempts walked to cover the borrowing).
    pub fn borrowing(&self, id: JobId) -> Option<Borrowing> {
        let job = self.jobs.get(&id)?;
        let attempt = self.attempts.get(&job.attempt?)?;
        if attempt.stopping.is_some() {
            return None;
        }
        let (q, u, s) = (attempt.queue, attempt.unit, usize::from(attempt.share.0));
        let view = self.view(q, u);
        let lane = self.queues[q.0 as usize].units.get(&u)?.lanes.get(s)?;
        // What the share borrows once its stopping attempts are gone: those are not walked.
        let held = view.held(s);
        let mut left = (held.usage - lane.stopping).saturating_sub(held.entitlement);
        let mut borrowed = 0;
        for k in &lane.running {
            if left == 0 {
                break;
            }
            let a = &self.attempts[&k.attempt.0];
            if a.own_only() {
                continue;
            }
            let take = a.count.min(left);
            left -= take;
            if a.id == attempt.id {
                borrowed = take;
                break;
            }
        }
        Some(Borrowing {
            borrowed,
            count: attempt.count,
            interruptible: attempt.interruptible,
            borrows: attempt.borrows,
            lenders: if borrowed > 0 {
                self.lenders_to(q, s, &view)
            } else {
                Vec::new()
            },
        })
    }

    /// The shares whose idle capacity share `s` uses on the view's unit, most lent first.
    fn lenders_to(&self, q: QueueIx, s: usize, view: &crate::view::View) -> Vec<String> {
        let names = self.share_names(q);
        let mut lenders: Vec<(f64, &String)> = crate::ledger::flows(view.accounts())
            .into_iter()
            .filter(|&(_, b, n)| b == s && n > 0.0)
            .filter_map(|(l, _, n)| names.get(l).map(|name| (n, *name)))
            .collect();
        lenders.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        lenders.into_iter().map(|(_, n)| n.clone()).collect()
    }

    /// A queue's share names by share index.
    fn share_names(&self, q: QueueIx) -> Vec<&String> {
        let mut by_ix: Vec<(usize, &String)> = self.queues[q.0 as usize]
            .share_ix
            .iter()
            .map(|(name, s)| (usize::from(s.0), name))
            .collect();
        by_ix.sort();
        by_ix.into_iter().map(|(_, n)| n).collect()
    }

    /// Who lends to whom in a queue, per unit ([`crate::ledger::flows`]), units then lenders
    /// then borrowers in order; a lender's flows add up to its [`ShareUsage::lent_out`].
    pub fn flows(&self, queue: &str) -> Option<Vec<Flow>> {
        let (q, units) = self.units_of(queue)?;
        let names = self.share_names(q);
        let mut out = Vec::new();
        for u in units {
            let view = self.view(q, u);
            for (l, b, n) in crate::ledger::flows(view.accounts()) {
                let (Some(lender), Some(borrower)) = (names.get(l), names.get(b)) else {
                    continue;
                };
                out.push(Flow {
                    instance_type: self.unit_name(u).to_string(),
                    lender: (*lender).clone(),
                    borrower: (*borrower).clone(),
                    instances: (n * 100.0).round() / 100.0,
                });
            }
        }
        Some(out)
    }

    /// The pool of each unit a queue knows: its ceiling and what is left of it.
    pub fn pool(&self, queue: &str) -> Option<Vec<PoolUsage>> {
        let (q, units) = self.units_of(queue)?;
        let mut out = Vec::new();
        for u in units {
            let view = self.view(q, u);
            let used: u32 = view.accounts().iter().map(|a| a.usage).sum();
            let ceiling = &view.ceiling;
            let cap = ceiling
                .physical_for_queue
                .map_or(ceiling.environment, |p| p.min(ceiling.environment));
            out.push(PoolUsage {
                instance_type: self.unit_name(u).to_string(),
                environment: ceiling.environment,
                physical: self.physical.get(&u).copied(),
                used,
                free: cap.saturating_sub(used),
            });
        }
        out.sort_by(|a, b| a.instance_type.cmp(&b.instance_type));
        Some(out)
    }

    /// A queue and every unit that it has a limit for or a share has a limit for.
    fn units_of(&self, queue: &str) -> Option<(QueueIx, BTreeSet<UnitIx>)> {
        let q = *self.queue_ix.get(queue)?;
        let qu = &self.queues[q.0 as usize];
        let units = qu
            .units
            .keys()
            .copied()
            .chain(qu.shares.iter().flat_map(|s| s.limits.keys().copied()))
            .collect();
        Some((q, units))
    }
}
