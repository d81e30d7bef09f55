//! Fair sharing of idle capacity and groups of shares (issue 21; docs/scheduling.md "Fair
//! sharing and groups").
//!
//! A share's *weighted borrowed share* is, over the instance types of its queue, the largest
//! `borrowed(type) / (weight × pool(type))`, where `pool(type)` is what the queue's lending
//! shares are entitled to on the type: the most that could ever be lent. Dividing by the pool
//! lets shares that borrow different types compare (dominant-resource style); dividing by the
//! weight makes a share of weight 3 count its borrowed instances a third. A group has the same
//! figure for what its members borrow from outside it (their usage beyond their entitlements
//! together), with the group's weight.
//!
//! The pass asks this module two things, and only for a queue that orders borrowers by more
//! than FIFO ([`crate::scheduler::Queue::orders_borrowers`]):
//!
//! * **who goes first** among the nominees that borrow ([`FairCtx::first`]): a member of a
//!   group whose members have idle lendable capacity goes before the rest (a group lends to
//!   its own first); then, under `FAIR_SHARE`, the nominee whose weighted borrowed share would
//!   be lowest after its admission — compared between groups (and ungrouped shares) by the
//!   groups' figures, within a group by the shares' —; then submission order;
//! * **whom a borrower may preempt for fairness** ([`Scheduler::fair_victims`], with
//!   `fair_reclaim`): jobs another share runs on borrowed capacity, as long as, after the
//!   preemption, the borrower's figure is at most the victim share's (Kueue's
//!   `LessThanOrEqualToFinalShare`) and below the victim share's figure before it (without
//!   this, figures a preemption does not move — a group at 0, a figure another type sets —
//!   would let the two take the capacity back and forth), compared at the level where the
//!   two part (their groups when they are in different ones).
//!
//! Everything is computed from the state, in share order; figures are `f64` quotients of
//! integers, and equal quotients are equal doubles (division is correctly rounded), so ties
//! are exact and fall to submission order.

use std::cmp::Ordering;

use crate::ledger::{self, Account, Route};
use crate::model::*;
use crate::reason::PendingReason;
use crate::scheduler::{Queue, Scheduler};
use crate::victims::VictimRank;
use crate::view::View;

/// What the pass over one unit of a queue needs to rank borrowers fairly. The other units'
/// figures do not move during the pass, so they are computed once.
pub(crate) struct FairCtx {
    fair: bool,
    /// What lending shares are entitled to on this unit (at least 1, to divide by).
    pool: f64,
    /// Per share: weight, group, and the largest figure over the queue's other units.
    weight: Vec<f64>,
    group_of: Vec<Option<usize>>,
    other: Vec<f64>,
    /// Per group: weight, members, and the largest figure over the other units.
    group_weight: Vec<f64>,
    members: Vec<Vec<usize>>,
    group_other: Vec<f64>,
}

/// What a nominee brings to the ranking.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub(crate) share: usize,
    pub(crate) count: u32,
    pub(crate) seq: u64,
}

impl FairCtx {
    /// The context of a pass over unit `u` of queue `q`.
    pub(crate) fn new(sched: &Scheduler, queue: &Queue, u: UnitIx) -> FairCtx {
        let n = queue.shares.len();
        let weight: Vec<f64> = queue
            .shares
            .iter()
            .map(|s| f64::from(s.spec.weight.max(1)))
            .collect();
        let group_of: Vec<Option<usize>> = (0..n).map(|s| queue.group(s)).collect();
        let mut members = vec![Vec::new(); queue.groups.len()];
        for (s, g) in group_of.iter().enumerate() {
            if let Some(g) = g {
                members[*g].push(s);
            }
        }
        let group_weight = queue
            .groups
            .iter()
            .map(|g| f64::from(g.weight().max(1)))
            .collect();
        let mut ctx = FairCtx {
            fair: queue.idle_assignment == IdleAssignment::FairShare,
            pool: pool(queue, u),
            weight,
            group_of,
            other: vec![0.0; n],
            group_weight,
            members,
            group_other: vec![0.0; queue.groups.len()],
        };
        for &t in queue.units.keys().filter(|&&t| t != u) {
            let accounts = sched.accounts_of(queue, t);
            let p = pool(queue, t);
            for ((other, a), w) in ctx.other.iter_mut().zip(&accounts).zip(&ctx.weight) {
                *other = other.max(f64::from(a.borrowed()) / (w * p));
            }
            for g in 0..ctx.members.len() {
                let f = ctx.group_borrowed(&accounts, g, None, 0) / (ctx.group_weight[g] * p);
                ctx.group_other[g] = ctx.group_other[g].max(f);
            }
        }
        ctx
    }

    /// Share `s`'s weighted borrowed share once it holds `c` more instances of this unit.
    pub(crate) fn share_after(&self, accounts: &[Account], s: usize, c: u32) -> f64 {
        let grown = Account {
            usage: accounts[s].usage + c,
            ..accounts[s]
        };
        let here = f64::from(grown.borrowed()) / (self.weight[s] * self.pool);
        self.other[s].max(here)
    }

    /// Group `g`'s weighted borrowed share once member `s` holds `c` more instances.
    pub(crate) fn group_after(&self, accounts: &[Account], g: usize, s: usize, c: u32) -> f64 {
        let here =
            self.group_borrowed(accounts, g, Some(s), c) / (self.group_weight[g] * self.pool);
        self.group_other[g].max(here)
    }

    /// What group `g`'s members borrow from outside it, with `c` more for member `s`.
    fn group_borrowed(&self, accounts: &[Account], g: usize, s: Option<usize>, c: u32) -> f64 {
        let (mut usage, mut entitled) = (0u64, 0u64);
        for &m in &self.members[g] {
            usage += u64::from(accounts[m].usage) + if Some(m) == s { u64::from(c) } else { 0 };
            entitled += u64::from(accounts[m].entitlement);
        }
        usage.saturating_sub(entitled) as f64
    }

    /// Whether group `g`'s members have idle capacity they could lend each other: what they
    /// could lend exceeds what they borrow.
    fn group_has_idle(&self, accounts: &[Account], g: usize) -> bool {
        let (mut lendable, mut borrowed) = (0u32, 0u32);
        for &m in &self.members[g] {
            lendable += accounts[m].lendable();
            borrowed += accounts[m].borrowed();
        }
        lendable > borrowed
    }

    /// The figure share `s` is compared by against a share of another group (or ungrouped):
    /// its group's, else its own.
    fn top_after(&self, accounts: &[Account], s: usize, c: u32) -> f64 {
        match self.group_of[s] {
            Some(g) => self.group_after(accounts, g, s, c),
            None => self.share_after(accounts, s, c),
        }
    }

    /// Whether `a` goes before `b` (module docs): group-first lending, then (under
    /// `FAIR_SHARE`) the figures after admission at the level where the two part, then
    /// submission order.
    fn cmp(&self, accounts: &[Account], a: &Candidate, b: &Candidate) -> Ordering {
        let inside = |x: &Candidate| {
            self.group_of[x.share].is_some_and(|g| self.group_has_idle(accounts, g))
        };
        let by_group = inside(b).cmp(&inside(a));
        if by_group != Ordering::Equal || !self.fair {
            return by_group.then(a.seq.cmp(&b.seq));
        }
        let same_group =
            self.group_of[a.share].is_some() && self.group_of[a.share] == self.group_of[b.share];
        let (fa, fb) = if same_group {
            (
                self.share_after(accounts, a.share, a.count),
                self.share_after(accounts, b.share, b.count),
            )
        } else {
            (
                self.top_after(accounts, a.share, a.count),
                self.top_after(accounts, b.share, b.count),
            )
        };
        fa.total_cmp(&fb).then(a.seq.cmp(&b.seq))
    }

    /// The index of the candidate that goes first. Groups are ranked by their best member
    /// (which is ranked within the group first), so that the choice is well defined however
    /// figures compare across levels.
    pub(crate) fn first(&self, accounts: &[Account], cands: &[Candidate]) -> Option<usize> {
        // The best member of each group (or each ungrouped share on its own).
        let mut best: Vec<usize> = Vec::new();
        for (i, c) in cands.iter().enumerate() {
            let group = self.group_of[c.share];
            let slot = best
                .iter()
                .position(|&j| group.is_some() && self.group_of[cands[j].share] == group);
            match slot {
                Some(k) => {
                    if self.cmp(accounts, c, &cands[best[k]]) == Ordering::Less {
                        best[k] = i;
                    }
                }
                None => best.push(i),
            }
        }
        best.into_iter()
            .min_by(|&i, &j| self.cmp(accounts, &cands[i], &cands[j]))
    }

    /// Whether `s` taking `c` more (its figure `mine`, compared at the level where it and the
    /// victim share `v` part) stays at most `v`'s figure once `v` holds `freed` fewer, and
    /// below `v`'s figure now.
    fn fair_to_take(&self, accounts: &[Account], s: usize, c: u32, v: usize, freed: u32) -> bool {
        let mut after = accounts.to_vec();
        after[v].usage -= freed.min(after[v].usage);
        let same_group = self.group_of[s].is_some() && self.group_of[s] == self.group_of[v];
        let (mine, theirs_after, theirs_before) = if same_group {
            (
                self.share_after(&after, s, c),
                self.share_after(&after, v, 0),
                self.share_after(accounts, v, 0),
            )
        } else {
            (
                self.top_after(&after, s, c),
                self.top_after(&after, v, 0),
                self.top_after(accounts, v, 0),
            )
        };
        mine <= theirs_after && mine < theirs_before
    }

    /// The figure two shares are compared by: their own when in the same group, else their
    /// groups' (or own, ungrouped).
    pub(crate) fn compared(&self, accounts: &[Account], s: usize, other: usize) -> f64 {
        let same_group = self.group_of[s].is_some() && self.group_of[s] == self.group_of[other];
        if same_group {
            self.share_after(accounts, s, 0)
        } else {
            self.top_after(accounts, s, 0)
        }
    }

    /// Share `s`'s group, if any.
    pub(crate) fn group(&self, s: usize) -> Option<usize> {
        self.group_of[s]
    }
}

/// What the queue's lending shares are entitled to on unit `u` (at least 1).
fn pool(queue: &Queue, u: UnitIx) -> f64 {
    let entitled: u64 = queue
        .shares
        .iter()
        .filter(|s| s.strategy().lends())
        .map(|s| u64::from(s.entitlement(u)))
        .sum();
    entitled.max(1) as f64
}

impl Scheduler {
    /// Every share's account on unit `u` of a queue, as its attempts hold it.
    pub(crate) fn accounts_of(&self, queue: &Queue, u: UnitIx) -> Vec<Account> {
        let ul = queue.units.get(&u);
        queue
            .shares
            .iter()
            .enumerate()
            .map(|(i, share)| share.account(u, ul.and_then(|ul| ul.lanes.get(i))))
            .collect()
    }

    /// A victim set that lets a waiting borrower start by preempting jobs other shares run
    /// on borrowed capacity, fairly (`fair_reclaim`, module docs), or `None`. Candidates are
    /// walked in the documented victim order; one is taken when it runs wholly on borrowed
    /// capacity (what its share still borrows after the set covers it: a job on its share's
    /// own capacity is never preempted for fairness), may be interrupted and is not protected
    /// from preemption, and when the borrower's figure after its admission stays at most the
    /// victim share's after the set and below it before; the walk stops once the borrower fits, and victims it
    /// does not need are dropped again, the latest in victim order first.
    pub(crate) fn fair_victims(
        &self,
        id: JobId,
        view: &View,
        protect: bool,
    ) -> Option<Vec<AttemptId>> {
        let job = &self.jobs[&id];
        let queue = &self.queues[job.queue.0 as usize];
        if !queue.fair_reclaim || !job.spec.interruptible || !job.spec.borrows {
            return None;
        }
        let (s, c, u) = (usize::from(job.share.0), job.spec.count, job.unit);
        let accounts = &view.projected;
        if accounts[s].route(c) != Route::Borrow || !queue.shares[s].strategy().borrows() {
            return None;
        }
        let ctx = FairCtx::new(self, queue, u);
        let ul = queue.units.get(&u)?;
        // Candidates of every other share that borrows, in victim order.
        let mut cands: Vec<(VictimRank, AttemptId, usize, u32)> = Vec::new();
        for (x, lane) in ul.lanes.iter().enumerate() {
            let borrowed = accounts.get(x).map_or(0, Account::borrowed);
            if x == s || borrowed == 0 {
                continue;
            }
            for k in &lane.running {
                let att = &self.attempts[&k.attempt.0];
                let free = !protect || self.protected_until(att, view.now).is_none();
                if att.borrows && att.interruptible && free && k.count.0 <= borrowed {
                    cands.push((VictimRank::of(k, borrowed), k.attempt.0, x, k.count.0));
                }
            }
        }
        cands.sort_by_key(|c| c.0);
        let fits = |freed: &[u32]| {
            let acc: Vec<Account> = accounts
                .iter()
                .zip(freed)
                .map(|(a, f)| Account {
                    usage: a.usage - f.min(&a.usage),
                    ..*a
                })
                .collect();
            let p = ledger::pressure(&view.ceiling, &acc);
            ledger::allowed_add(&p, &acc[s], s, c).is_ok() && view.borrow_gate(&acc, s, c)
        };
        let mut freed = vec![0u32; accounts.len()];
        let mut taken: Vec<usize> = Vec::new();
        for (i, &(_, _, x, n)) in cands.iter().enumerate() {
            if freed[x] + n > accounts[x].borrowed() {
                continue;
            }
            if !ctx.fair_to_take(accounts, s, c, x, freed[x] + n) {
                continue;
            }
            freed[x] += n;
            taken.push(i);
            if fits(&freed) {
                // Drop what is not needed, the latest in victim order first.
                for j in (0..taken.len()).rev() {
                    let (_, _, y, m) = cands[taken[j]];
                    freed[y] -= m;
                    if fits(&freed) {
                        taken.remove(j);
                    } else {
                        freed[y] += m;
                    }
                }
                return Some(taken.iter().map(|&i| cands[i].1).collect());
            }
        }
        None
    }
}

/// One share's standing under fair sharing ([`Scheduler::fairness`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ShareFairness {
    /// The share.
    pub share: String,
    /// Its weight.
    pub weight: u32,
    /// Its group, if any.
    pub group: Option<String>,
    /// Its weighted borrowed share: the largest over the queue's instance types of
    /// `borrowed / (weight × what lending shares are entitled to)`.
    pub weighted_share: f64,
    /// The instance type that figure comes from (`None` while it borrows nothing).
    pub dominant: Option<String>,
    /// Per instance type, its fair share of what could be lent: the instances it would borrow
    /// if every share that may borrow wanted all of it, split by weight (between groups and
    /// ungrouped shares by theirs, then within a group by the members'). Empty for a share
    /// that does not borrow.
    pub fair_share: std::collections::BTreeMap<String, f64>,
}

/// A group's standing ([`Scheduler::fairness`]).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupStanding {
    /// The group as configured.
    pub spec: GroupSpec,
    /// Per instance type its members hold, what they hold together.
    pub usage: std::collections::BTreeMap<String, u32>,
    /// What its members borrow from outside it, weighted as a share's is.
    pub weighted_share: f64,
}

/// A queue's rules for idle capacity and every share's and group's standing under them.
#[derive(Clone, Debug, PartialEq)]
pub struct Fairness {
    /// How idle capacity goes to borrowers.
    pub idle_assignment: IdleAssignment,
    /// Whether borrowers preempt each other for fairness.
    pub fair_reclaim: bool,
    /// Live shares, in share order.
    pub shares: Vec<ShareFairness>,
    /// Groups, as configured.
    pub groups: Vec<GroupStanding>,
}

impl Scheduler {
    /// The queue's fair-sharing standing (`qm shares`, the dashboard); `None` for an unknown
    /// queue.
    #[expect(
        clippy::too_many_lines,
        reason = "one pass over the lanes gathering every fairness figure"
    )]
    pub fn fairness(&self, queue: &str) -> Option<Fairness> {
        let queue = &self.queues[self.queue_ix.get(queue)?.0 as usize];
        let units: std::collections::BTreeSet<UnitIx> = queue
            .units
            .keys()
            .chain(queue.environment.keys())
            .copied()
            .collect();
        let live: Vec<usize> = (0..queue.shares.len())
            .filter(|&s| !queue.shares[s].deleted)
            .collect();
        let borrows = |s: usize| queue.shares[s].strategy().borrows();
        let mut shares: Vec<ShareFairness> = live
            .iter()
            .map(|&s| ShareFairness {
                share: queue.shares[s].spec.name.clone(),
                weight: queue.shares[s].spec.weight,
                group: queue.group(s).map(|g| queue.groups[g].name().to_string()),
                weighted_share: 0.0,
                dominant: None,
                fair_share: Default::default(),
            })
            .collect();
        let mut groups: Vec<GroupStanding> = queue
            .groups
            .iter()
            .map(|g| GroupStanding {
                spec: g.spec.clone(),
                usage: Default::default(),
                weighted_share: 0.0,
            })
            .collect();
        // Weights of the borrowing entities (groups with a borrowing member, ungrouped
        // borrowing shares), and of each group's borrowing members.
        let mut top = 0.0;
        let mut inner = vec![0.0; queue.groups.len()];
        for &s in live.iter().filter(|&&s| borrows(s)) {
            let w = f64::from(queue.shares[s].spec.weight);
            match queue.group(s) {
                Some(g) => {
                    if inner[g] == 0.0 {
                        top += f64::from(queue.groups[g].weight());
                    }
                    inner[g] += w;
                }
                None => top += w,
            }
        }
        for u in units {
            let accounts = self.accounts_of(queue, u);
            let ctx = FairCtx::new(self, queue, u);
            let name = self.unit_name(u).to_string();
            let lendable = ctx.pool;
            for (out, &s) in shares.iter_mut().zip(&live) {
                let f = f64::from(accounts[s].borrowed()) / (ctx.weight[s] * ctx.pool);
                if f > out.weighted_share {
                    out.weighted_share = f;
                    out.dominant = Some(name.clone());
                }
                if borrows(s) && top > 0.0 {
                    let w = f64::from(queue.shares[s].spec.weight);
                    let part = match queue.group(s) {
                        Some(g) => f64::from(queue.groups[g].weight()) / top * w / inner[g],
                        None => w / top,
                    };
                    out.fair_share.insert(name.clone(), lendable * part);
                }
            }
            for (g, out) in groups.iter_mut().enumerate() {
                let used: u32 = ctx.members[g].iter().map(|&m| accounts[m].usage).sum();
                if used > 0 {
                    out.usage.insert(name.clone(), used);
                }
                let f =
                    ctx.group_borrowed(&accounts, g, None, 0) / (ctx.group_weight[g] * ctx.pool);
                out.weighted_share = out.weighted_share.max(f);
            }
        }
        Some(Fairness {
            idle_assignment: queue.idle_assignment,
            fair_reclaim: queue.fair_reclaim,
            shares,
            groups,
        })
    }

    /// Under `FAIR_SHARE`, a borrower that waits while a share ranked before it (a lower
    /// figure, compared where the two part) also waits to borrow on the unit says so, with the
    /// reason it cannot start now inside.
    pub(crate) fn behind_fair_share(&self, id: JobId, reason: PendingReason) -> PendingReason {
        let job = &self.jobs[&id];
        let queue = &self.queues[job.queue.0 as usize];
        let waits_to_borrow = matches!(
            reason,
            PendingReason::NothingToBorrow { .. }
                | PendingReason::ReservedForOthers
                | PendingReason::EnvironmentFull { .. }
        );
        if queue.idle_assignment != IdleAssignment::FairShare || !waits_to_borrow {
            return reason;
        }
        let Some(ul) = queue.units.get(&job.unit) else {
            return reason;
        };
        let (s, u) = (usize::from(job.share.0), job.unit);
        let accounts = self.accounts_of(queue, u);
        let ctx = FairCtx::new(self, queue, u);
        // Each other share's first waiting job, if it would borrow, as the pass ranks it.
        let head_of = |x: usize| {
            let (c, k) = ul.lanes.get(x)?.pending.first(u32::MAX)?;
            let borrows =
                queue.shares[x].strategy().borrows() && accounts[x].route(c) == Route::Borrow;
            borrows.then_some(Candidate {
                share: x,
                count: c,
                seq: k.seq,
            })
        };
        let me = Candidate {
            share: s,
            count: job.spec.count,
            seq: job.seq,
        };
        // Ranked before this job, and by a lower figure (not by group-first lending, which the
        // message would misstate).
        let ahead = (0..accounts.len())
            .filter(|&x| x != s)
            .filter_map(head_of)
            .filter(|x| ctx.cmp(&accounts, x, &me) == Ordering::Less)
            .filter(|x| ctx.compared(&accounts, x.share, s) < ctx.compared(&accounts, s, x.share))
            .min_by(|a, b| ctx.cmp(&accounts, a, b));
        let Some(x) = ahead.map(|c| c.share) else {
            return reason;
        };
        let ahead_f = ctx.compared(&accounts, x, s);
        let same_group = ctx.group(s).is_some() && ctx.group(s) == ctx.group(x);
        let name = |y: usize| match ctx.group(y).filter(|_| !same_group) {
            Some(g) => format!("group {}", queue.groups[g].name()),
            None => queue.shares[y].spec.name.clone(),
        };
        let milli = |f: f64| (f * 1000.0).round().min(f64::from(u32::MAX)) as u32;
        PendingReason::BehindFairShare {
            reason: Box::new(reason),
            share: name(s),
            weighted: milli(ctx.compared(&accounts, s, x)),
            ahead: name(x),
            ahead_weighted: milli(ahead_f),
        }
    }
}
