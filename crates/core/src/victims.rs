//! The victim search (DESIGN.md §2 rules 4–7): which running attempts a waiting job preempts.
//!
//! **What a valid set is.** The candidates are the attempts the job may take at all: its
//! share's lower-priority jobs when the share has in-share preemption, the jobs of shares that
//! borrow on the unit, and, for a share's head, the jobs backfilled onto its reservation
//! (whatever their share and priority); attempts under thrash protection are not candidates.
//! A non-empty set of candidates is valid when, once its victims have exited,
//!
//! 1. the job passes the very admission check the pass will then make;
//! 2. if the set takes another share's jobs (a reclaim), the job runs within its share's
//!    entitlement (rules 4 and 6: reclaim serves owners, a borrower never preempts a borrower)
//!    — or its share's lower-priority candidates may stay beside it as borrowers of what the
//!    reclaim frees, when no set without a reclaim would do;
//! 3. it takes no more of a borrowing share's untagged jobs than that share borrows: all but
//!    one of them free less than the share's borrowed instances (the last may be larger);
//! 4. while other shares borrow on the unit, it takes the share's own untagged jobs only for
//!    the part of the demand above the share's idle entitlement, in the same sense (issue 18,
//!    item 1: lent capacity comes back by reclaim, not by preempting an own job that would
//!    then reclaim it itself and restart in the same pass). This bound is a first tier: only
//!    when no set within it is valid (the borrowers are protected, or reclaiming them cannot
//!    free enough) is a set without it considered. The tiers keep "a job that waits means no
//!    later, larger job of its share can do better" true, which the pass relies on.
//!
//! Condition 2's second arm: the own lower-priority candidates may stay on only where the
//! job would fit the entitlement were they all gone, so the set is a valid one with some of
//! them left out.
//!
//! **Which valid set.** The best one in victim order ([`VictimRank`]): the set whose worst
//! victim ranks earliest, then whose second-worst does, and so on (the sets compared by
//! their victims from the latest-ranked down). That is what "walk the candidates in order
//! until the set suffices, then drop every victim it does not need" means, made exact: the
//! walk can miss a valid set when taking a victim early closes off a set that needed a later
//! one instead (a borrowing share stops borrowing, the demand is no longer above the idle
//! entitlement). The best set is never superfluous: dropping any victim gives an earlier set.
//!
//! **How it is found.** Conditions 1 and 2 only get easier as more is freed from any share,
//! and 3 and 4 bound each share separately, so whether some valid set lies within given
//! candidates is decided share by share: the most each share can free within its bound (a
//! small subset-sum over its jobs' sizes), then one admission check. The best set follows by
//! the standard lexicographic descent: the shortest prefix of the order that holds a valid
//! set, then each earlier candidate dropped when a valid set remains without it. A property
//! test checks the result against brute force over every subset on small states.

use std::cell::RefCell;
use std::cmp::Reverse;

use smallvec::SmallVec;

use crate::ledger::{self, Account, Pressure};
use crate::model::*;
use crate::scheduler::{RunKey, Scheduler};
use crate::view::View;

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
/// The victim search (`crate::victims`) takes the valid set that is first in this order: the
/// one whose worst victim ranks earliest, then whose second-worst does, and so on.
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
    pub(crate) fn of(k: &RunKey, share_borrowed: u32) -> Self {
        VictimRank {
            priority: k.priority,
            progress_at: k.progress,
            borrowed: Reverse(k.count.0.min(share_borrowed)),
            count: k.count,
            attempt: k.attempt,
        }
    }
}

/// A value per share (a queue has at most 20 live shares): the victim search computes these
/// dozens of times per search, so they stay off the heap.
type PerShare = SmallVec<[u32; 24]>;

/// One candidate victim.
#[derive(Clone, Copy, Debug)]
struct Cand {
    attempt: AttemptId,
    count: u32,
    share: usize,
    /// Backfilled onto the job's reservation: no per-share bound.
    tagged: bool,
}

/// One lane's candidates, walked in victim order: the lane's running attempts (a B-tree in
/// that order) filtered by eligibility, with the next eligible one ranked and waiting.
#[derive(Clone)]
struct Stream<'a> {
    iter: std::collections::btree_set::Iter<'a, RunKey>,
    /// The lane's share.
    x: usize,
    /// Instances of the lane backfilled onto the job's reservation.
    tagged: u32,
    /// The share's borrowed instances.
    borrowed: u32,
    /// Walk only the attempts below the job's priority (an own lane without tagged jobs).
    below: bool,
    next: Option<(VictimRank, Cand)>,
}

/// Who searches: what deciding a candidate's eligibility needs.
#[derive(Clone, Copy)]
struct Who<'a> {
    sched: &'a Scheduler,
    shares: &'a [crate::scheduler::Share],
    id: JobId,
    s: usize,
    /// The job's priority, and whether its share preempts within itself.
    p: u32,
    in_share: bool,
    /// Thrash protection applies (`explain` asks without it).
    protect: bool,
    now: Millis,
}

impl Stream<'_> {
    /// The lane's next eligible candidate, ranked; `None` when the lane has no more.
    fn advance(&mut self, who: &Who<'_>) -> Option<(VictimRank, Cand)> {
        for k in self.iter.by_ref() {
            if self.below && k.priority >= who.p {
                self.iter = Default::default();
                return None;
            }
            let attempt = &who.sched.attempts[&k.attempt.0];
            let is_tagged = self.tagged > 0 && attempt.backfill_for == Some(who.id);
            let eligible = is_tagged
                || if self.x == who.s {
                    who.in_share && k.priority < who.p
                } else {
                    // What a share borrows is held by its jobs that may borrow: one that runs
                    // only within its own quota is never taken back by a reclaim.
                    self.borrowed > 0 && attempt.borrows
                };
            let free = !who.protect
                || !who.shares[self.x].protects()
                || who.sched.protected_until(attempt, who.now).is_none();
            if eligible && free && attempt.interruptible {
                let cand = Cand {
                    attempt: k.attempt.0,
                    count: k.count.0,
                    share: self.x,
                    tagged: is_tagged,
                };
                return Some((VictimRank::of(k, self.borrowed), cand));
            }
        }
        None
    }
}

/// What a search allocates, kept by the scheduler between searches so that the simulator's
/// hundreds of thousands of searches do not each allocate afresh. Its contents never outlive
/// a search's meaning: every search clears what it takes.
#[derive(Default)]
pub(crate) struct SearchPool(RefCell<Spare>);

#[derive(Default)]
struct Spare {
    cands: Vec<Cand>,
    totals: Vec<Totals>,
    own_untagged: Vec<u32>,
    scratch: (Vec<Account>, Pressure),
}

impl Clone for SearchPool {
    /// A clone starts with nothing spare: the pool holds no state.
    fn clone(&self) -> Self {
        SearchPool::default()
    }
}

impl SearchPool {
    /// The spare buffers, emptied, with totals for `shares` shares.
    fn take(&self, shares: usize) -> Spare {
        let mut spare = std::mem::take(&mut *self.0.borrow_mut());
        spare.cands.clear();
        spare.own_untagged.clear();
        spare.totals.truncate(shares);
        spare.totals.iter_mut().for_each(Totals::reset);
        spare.totals.resize_with(shares, Totals::default);
        spare
    }
}

impl std::fmt::Debug for SearchPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SearchPool")
    }
}

/// A victim search for one job against one view. Candidates are drawn from the lanes in
/// victim order only as far as the search needs them: the best set usually lies in a short
/// prefix of the order.
pub(crate) struct Search<'a> {
    who: Who<'a>,
    view: &'a View,
    c: u32,
    entitlement: u32,
    /// Drawn so far, in victim order.
    cands: Vec<Cand>,
    /// What is left to draw, per lane with any candidate (in share order: the other shares
    /// free nothing).
    streams: SmallVec<[Stream<'a>; 8]>,
    /// Per share, the running totals of its drawn candidates.
    totals: Vec<Totals>,
    /// Every own candidate, drawn or not: tagged instances and untagged sizes (condition 2's
    /// second arm looks at all of them).
    own_tagged: u32,
    own_untagged: Vec<u32>,
    /// Per share: the bound on its untagged victims (condition 3 or 4), if any.
    caps: SmallVec<[Option<u32>; 24]>,
    /// Condition 4's bound while it applies (`caps[s]` in the first tier).
    own_cap: Option<u32>,
    /// Condition 2's second arm holds (own lower-priority jobs may stay as borrowers).
    relaxed: bool,
    /// Reused by every admission check of the search (it runs dozens).
    scratch: RefCell<(Vec<Account>, Pressure)>,
}

impl Drop for Search<'_> {
    fn drop(&mut self) {
        let mut spare = self.who.sched.search_pool.0.borrow_mut();
        spare.cands = std::mem::take(&mut self.cands);
        spare.totals = std::mem::take(&mut self.totals);
        spare.own_untagged = std::mem::take(&mut self.own_untagged);
        spare.scratch = std::mem::take(self.scratch.get_mut());
    }
}

impl Scheduler {
    /// The best valid victim set for the job (module docs), or `None` when there is none;
    /// `protect` false ignores thrash protection (`explain` asks whether protection is what
    /// keeps a job waiting).
    pub(crate) fn find_victims_among(
        &self,
        id: JobId,
        view: &View,
        protect: bool,
    ) -> Option<Vec<AttemptId>> {
        let mut search = self.search(id, view, protect, true)?;
        search.tier(true);
        if let Some(set) = search.best() {
            return Some(set);
        }
        search.own_cap?;
        search.tier(false);
        search.best()
    }

    /// Builds the search; with `exits`, returns `None` early when a cheap bound shows that no
    /// set can be valid, so that a hopeless job costs O(shares), not O(running).
    pub(crate) fn search<'a>(
        &'a self,
        id: JobId,
        view: &'a View,
        protect: bool,
        exits: bool,
    ) -> Option<Search<'a>> {
        let projected = &view.projected[..];
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
        let in_share = queue.shares[s].in_share_preemption();
        let entitlement = projected[s].entitlement;
        let is_head = ul
            .lanes
            .get(s)
            .and_then(|l| l.pending.first(u32::MAX))
            .is_some_and(|(_, k)| k.job == id);
        // Instances backfilled onto the job's reservation, per share.
        let tagged: PerShare = (0..projected.len())
            .map(|x| {
                ul.lanes
                    .get(x)
                    .filter(|_| is_head)
                    .and_then(|l| l.backfill.get(&id))
                    .copied()
                    .unwrap_or(0)
            })
            .collect();
        let lower: u32 = if in_share {
            ul.lanes.get(s).map_or(0, |l| {
                l.running_by_priority.range(..p).map(|(_, n)| *n).sum()
            })
        } else {
            0
        };
        if exits && !hopeful(view, s, c, lower, &tagged) {
            return None;
        }

        let spare = self.search_pool.take(projected.len());
        let lent = (0..projected.len()).any(|x| x != s && projected[x].borrowed() > 0);
        let own_needed = (projected[s].usage + c).saturating_sub(entitlement);
        let mut search = Search {
            who: Who {
                sched: self,
                shares: &queue.shares,
                id,
                s,
                p,
                in_share,
                protect,
                now: view.now,
            },
            view,
            c,
            entitlement,
            cands: spare.cands,
            streams: SmallVec::new(),
            totals: spare.totals,
            own_tagged: 0,
            own_untagged: spare.own_untagged,
            caps: (0..projected.len())
                .map(|x| (x != s).then(|| projected[x].borrowed()))
                .collect(),
            own_cap: lent.then_some(own_needed),
            relaxed: false,
            scratch: RefCell::new(spare.scratch),
        };
        search.add_lanes(&ul.lanes, &tagged);
        Some(search)
    }

    /// The victim candidates of a waiting job, in victim order, on the current state (what a
    /// pass now would consider; `protect` false ignores thrash protection). For tests and
    /// diagnostics.
    pub fn victim_candidates(&self, id: JobId, protect: bool) -> Vec<AttemptId> {
        self.with_search(id, protect, |sr| {
            sr.draw(usize::MAX);
            sr.cands.iter().map(|c| c.attempt).collect()
        })
        .unwrap_or_default()
    }

    /// In which tier `set` (of [`Scheduler::victim_candidates`]) is a valid victim set for
    /// the job on the current state, by the definition in this module's docs: 1 within
    /// condition 4's bound, 2 without it, `None` if in neither. (Tier 2 counts only where no
    /// tier-1 set exists; a caller comparing sets takes the lowest tier first.)
    pub fn victim_set_tier(&self, id: JobId, set: &[AttemptId], protect: bool) -> Option<u8> {
        self.with_search(id, protect, |sr| {
            sr.draw(usize::MAX);
            if !set.iter().all(|a| sr.cands.iter().any(|c| c.attempt == *a)) {
                return None;
            }
            let chosen: Vec<bool> = sr.cands.iter().map(|c| set.contains(&c.attempt)).collect();
            sr.tier(true);
            if sr.valid(&chosen) {
                return Some(1);
            }
            sr.tier(false);
            (sr.own_cap.is_some() && sr.valid(&chosen)).then_some(2)
        })
        .flatten()
    }

    /// The victim set a pass now would choose for the job, in victim order.
    pub fn victims_for(&self, id: JobId, protect: bool) -> Option<Vec<AttemptId>> {
        let job = self.jobs.get(&id)?;
        let mut view = self.view(job.queue, job.unit);
        view.now = self.clock;
        self.find_victims_among(id, &view.for_share(usize::from(job.share.0)), protect)
    }

    fn with_search<T>(
        &self,
        id: JobId,
        protect: bool,
        f: impl FnOnce(&mut Search<'_>) -> T,
    ) -> Option<T> {
        let job = self.jobs.get(&id)?;
        let mut view = self.view(job.queue, job.unit);
        view.now = self.clock;
        let view = view.for_share(usize::from(job.share.0));
        self.search(id, &view, protect, false)
            .map(|mut sr| f(&mut sr))
    }
}

/// A necessary condition for any valid set, in O(shares): taking every candidate at once
/// (which only overestimates what a valid set frees) would let the job in.
fn hopeful(view: &View, s: usize, c: u32, lower: u32, tagged: &[u32]) -> bool {
    let projected = &view.projected[..];
    let entitlement = projected[s].entitlement;
    let borrower = |x: usize| x != s && projected[x].borrowed() > 0;
    let others = (0..projected.len()).any(|x| borrower(x) || (x != s && tagged[x] > 0));
    if lower == 0 && tagged[s] == 0 && !others {
        return false;
    }
    let mut best: Vec<Account> = projected.to_vec();
    best[s].usage -= (lower + tagged[s]).min(best[s].usage);
    let own_only = (lower > 0 || tagged[s] > 0) && admits(view, &best, s, c);
    if own_only {
        return true;
    }
    // Condition 2 needs the job within its entitlement once the share's lower jobs go.
    if !others || best[s].usage + c > entitlement {
        return false;
    }
    for (x, a) in best.iter_mut().enumerate() {
        if borrower(x) {
            a.usage = 0;
        } else if x != s {
            a.usage -= tagged[x].min(a.usage);
        }
    }
    admits(view, &best, s, c)
}

/// Condition 1: the job passes the admission check on `acc`.
fn admits(view: &View, acc: &[Account], s: usize, c: u32) -> bool {
    ledger::allowed_add(&ledger::pressure(&view.ceiling, acc), &acc[s], s, c).is_ok()
        && view.borrow_gate(acc, s, c)
}

impl<'a> Search<'a> {
    /// One stream per lane with any candidate, and every own candidate's size (condition 2's
    /// second arm looks at all of them, drawn or not).
    fn add_lanes(&mut self, lanes: &'a [crate::scheduler::Lane], tagged: &[u32]) {
        let (s, in_share) = (self.who.s, self.who.in_share);
        for (x, lane) in lanes.iter().enumerate().take(self.caps.len()) {
            let borrowed = self.view.projected[x].borrowed();
            // Lanes with nothing eligible are skipped whole; an own lane without tagged jobs
            // is walked only below the job's priority (it is in priority order).
            let untagged_eligible = if x == s { in_share } else { borrowed > 0 };
            let tx = tagged[x];
            if tx == 0 && !untagged_eligible {
                continue;
            }
            let mut stream = Stream {
                iter: lane.running.iter(),
                x,
                tagged: tx,
                borrowed,
                below: x == s && tx == 0,
                next: None,
            };
            if x == s {
                let mut walk = stream.clone();
                while let Some((_, cand)) = walk.advance(&self.who) {
                    if cand.tagged {
                        self.own_tagged += cand.count;
                    } else {
                        self.own_untagged.push(cand.count);
                    }
                }
            }
            stream.next = stream.advance(&self.who);
            if stream.next.is_some() {
                self.streams.push(stream);
            }
        }
        self.own_untagged.sort_unstable();
    }

    /// Selects the tier: condition 4's bound on (the first tier) or off (the second, searched
    /// only when the first has no valid set). Condition 2's second arm depends on it.
    fn tier(&mut self, bounded: bool) {
        self.caps[self.who.s] = if bounded { self.own_cap } else { None };
        let could_go: u32 = self.own_untagged.iter().sum();
        self.relaxed = self.view.projected[self.who.s].usage - could_go + self.c
            <= self.entitlement
            && !self.exists_without_reclaim();
    }

    /// The best valid set (module docs), in victim order: the lexicographic descent. The
    /// latest victim is the last candidate of the shortest prefix holding a valid set; with
    /// it chosen, the next is the last of the shortest prefix that completes a valid set, and
    /// so on until the chosen ones alone are valid. Each step is a binary search, since
    /// whether a prefix completes a valid set only grows with the prefix.
    fn best(&mut self) -> Option<Vec<AttemptId>> {
        // The first prefix holding a valid set, drawing candidates in doubling batches.
        let (mut known_short, mut want) = (0, 8);
        let mut end = loop {
            self.draw(want);
            let n = self.cands.len();
            if n > known_short && self.exists(n, &[]) {
                break n;
            }
            if n < want {
                return None;
            }
            known_short = n;
            want = want.saturating_mul(2);
        };
        let mut chosen: Vec<usize> = Vec::new();
        let mut first = true;
        loop {
            if !chosen.is_empty() && self.exists(0, &chosen) {
                break;
            }
            if !self.exists(end, &chosen) {
                debug_assert!(
                    chosen.is_empty(),
                    "a completion exists below the last choice"
                );
                return None;
            }
            let (mut lo, mut hi) = (if first { known_short + 1 } else { 1 }, end);
            first = false;
            while lo < hi {
                let mid = (lo + hi) / 2;
                if self.exists(mid, &chosen) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            chosen.push(lo - 1);
            end = lo - 1;
        }
        chosen.reverse();
        debug_assert!(self.valid(&self.mask(&chosen)));
        Some(chosen.iter().map(|&i| self.cands[i].attempt).collect())
    }

    /// Draws candidates from the lanes, in victim order, until `upto` are drawn or none is
    /// left.
    fn draw(&mut self, upto: usize) {
        while self.cands.len() < upto {
            let next = self
                .streams
                .iter()
                .enumerate()
                .filter_map(|(i, st)| st.next.map(|(r, _)| (r, i)))
                .min();
            let Some((_, i)) = next else {
                return;
            };
            let stream = &mut self.streams[i];
            let (_, cand) = stream.next.take().expect("ranked");
            stream.next = stream.advance(&self.who);
            self.totals[cand.share].push(self.cands.len(), &cand);
            self.cands.push(cand);
        }
    }

    fn mask(&self, chosen: &[usize]) -> Vec<bool> {
        let mut m = vec![false; self.cands.len()];
        for &i in chosen {
            m[i] = true;
        }
        m
    }

    /// Whether a valid set holds every `chosen` candidate (all at or after `prefix`) and
    /// otherwise only candidates before `prefix`.
    fn exists(&self, prefix: usize, chosen: &[usize]) -> bool {
        // Without the bounds first (O(shares · log n)): the conditions only get easier with
        // more freed, so failing this settles it.
        let mut loose: PerShare = smallvec::smallvec![0; self.caps.len()];
        for x in self.streams.iter().map(|st| st.x) {
            loose[x] = self.totals[x].all(x, prefix, chosen, &self.cands, self.caps[x]);
        }
        let loose = &loose[..];
        let s = self.who.s;
        let forced_other = chosen.iter().any(|&i| self.cands[i].share != s);
        let might = (!forced_other && loose[s] > 0 && self.fits(&self.only_own(loose), false))
            || (loose.iter().enumerate().any(|(x, &f)| x != s && f > 0) && self.fits(loose, true));
        if !might {
            return false;
        }
        let Some(freed) = self.most_freed(prefix, chosen) else {
            return false;
        };
        (!forced_other && freed[s] > 0 && self.fits(&self.only_own(&freed), false))
            || (freed.iter().enumerate().any(|(x, &f)| x != s && f > 0) && self.fits(&freed, true))
    }

    /// Whether some valid set takes no other share's jobs (condition 2's second arm), among
    /// every own candidate, drawn or not.
    fn exists_without_reclaim(&self) -> bool {
        let untagged = &self.own_untagged;
        let (sum, max) = (
            untagged.iter().sum::<u32>(),
            untagged.last().copied().unwrap_or(0),
        );
        let most = match self.caps[self.who.s] {
            None => Some(sum),
            Some(cap) => bounded_most(&[], sum, max, || multiset(untagged), cap),
        };
        let mut freed: PerShare = smallvec::smallvec![0; self.caps.len()];
        freed[self.who.s] = self.own_tagged + most.unwrap_or(0);
        freed[self.who.s] > 0 && self.fits(&freed, false)
    }

    fn only_own(&self, freed: &[u32]) -> PerShare {
        let mut own: PerShare = smallvec::smallvec![0; freed.len()];
        own[self.who.s] = freed[self.who.s];
        own
    }

    /// Per share, the most a valid set's victims of it can free: every `chosen` candidate,
    /// any before `prefix`, within the share's bound; `None` if the chosen ones break a bound.
    fn most_freed(&self, prefix: usize, chosen: &[usize]) -> Option<PerShare> {
        let mut freed: PerShare = smallvec::smallvec![0; self.caps.len()];
        for x in self.streams.iter().map(|st| st.x) {
            freed[x] = self.most_of(x, prefix, chosen)?;
        }
        Some(freed)
    }

    /// [`Search::most_freed`] for share `x`: O(log n) from the running totals, unless its
    /// bound binds, when a subset-sum over its candidates' sizes decides.
    fn most_of(&self, x: usize, prefix: usize, chosen: &[usize]) -> Option<u32> {
        let pre = &self.totals[x];
        let k = pre.count_before(prefix);
        let at = k;
        let mut tagged = pre.tagged[at];
        let mut forced: PerShare = SmallVec::new();
        for cand in chosen
            .iter()
            .map(|&i| &self.cands[i])
            .filter(|c| c.share == x)
        {
            if cand.tagged {
                tagged += cand.count;
            } else {
                forced.push(cand.count);
            }
        }
        let Some(cap) = self.caps[x] else {
            return Some(tagged + forced.iter().sum::<u32>() + pre.sum[at]);
        };
        let (opt_sum, opt_max) = (pre.sum[at], pre.max[at]);
        let untagged = || pre.items(k);
        bounded_most(&forced, opt_sum, opt_max, untagged, cap).map(|b| b + tagged)
    }

    /// Conditions 1 and 2 with `freed` instances gone from each share.
    fn fits(&self, freed: &[u32], reclaims: bool) -> bool {
        let s = self.who.s;
        let own_after = self.view.projected[s].usage - freed[s].min(self.view.projected[s].usage);
        if reclaims && !self.relaxed && own_after + self.c > self.entitlement {
            return false;
        }
        let mut scratch = self.scratch.borrow_mut();
        let (acc, pressure) = &mut *scratch;
        acc.clear();
        acc.extend(self.view.projected.iter().zip(freed).map(|(a, f)| Account {
            usage: a.usage - (*f).min(a.usage),
            ..*a
        }));
        ledger::pressure_into(&self.view.ceiling, acc, pressure);
        ledger::allowed_add(pressure, &acc[s], s, self.c).is_ok()
            && self.view.borrow_gate(acc, s, self.c)
    }

    /// The definition itself, for a given set (brute force in tests checks `best` with it).
    fn valid(&self, chosen: &[bool]) -> bool {
        let shares = self.caps.len();
        let mut freed = vec![0u32; shares];
        let mut untagged: Vec<Vec<u32>> = vec![Vec::new(); shares];
        for (cand, _) in self.cands.iter().zip(chosen).filter(|(_, &c)| c) {
            freed[cand.share] += cand.count;
            if !cand.tagged {
                untagged[cand.share].push(cand.count);
            }
        }
        let within = |x: usize| match self.caps[x] {
            None => true,
            Some(cap) => {
                let (sum, max) = (
                    untagged[x].iter().sum::<u32>(),
                    untagged[x].iter().copied().max().unwrap_or(0),
                );
                untagged[x].is_empty() || sum - max < cap
            }
        };
        let reclaims = freed
            .iter()
            .enumerate()
            .any(|(x, &f)| x != self.who.s && f > 0);
        chosen.iter().any(|&c| c) && (0..shares).all(within) && self.fits(&freed, reclaims)
    }
}

/// One share's drawn candidates with running totals: after its first `k`, `tagged[k]`
/// instances of tagged ones, and `sum[k]` and `max[k]` of the untagged ones' sizes; `index[j]`
/// is its `j`-th candidate's place in the search's order, and `sizes` lists each untagged
/// size with the (per share) places of the candidates of that size.
#[derive(Clone, Debug)]
struct Totals {
    index: Vec<usize>,
    tagged: Vec<u32>,
    sum: Vec<u32>,
    max: Vec<u32>,
    sizes: Vec<(u32, Vec<usize>)>,
    /// Emptied lists of `sizes`, kept for reuse.
    spare: Vec<Vec<usize>>,
}

impl Default for Totals {
    fn default() -> Self {
        Totals {
            index: Vec::new(),
            tagged: vec![0],
            sum: vec![0],
            max: vec![0],
            sizes: Vec::new(),
            spare: Vec::new(),
        }
    }
}

impl Totals {
    /// Empty again, keeping the allocations.
    fn reset(&mut self) {
        self.index.clear();
        for v in [&mut self.tagged, &mut self.sum, &mut self.max] {
            v.clear();
            v.push(0);
        }
        for (_, mut at) in self.sizes.drain(..) {
            at.clear();
            self.spare.push(at);
        }
    }

    fn push(&mut self, i: usize, c: &Cand) {
        let k = self.index.len();
        let (t, s, m) = (self.tagged[k], self.sum[k], self.max[k]);
        self.index.push(i);
        if c.tagged {
            self.tagged.push(t + c.count);
            self.sum.push(s);
            self.max.push(m);
        } else {
            self.tagged.push(t);
            self.sum.push(s + c.count);
            self.max.push(m.max(c.count));
            match self.sizes.binary_search_by_key(&c.count, |(v, _)| *v) {
                Ok(z) => self.sizes[z].1.push(k),
                Err(z) => {
                    let mut at = self.spare.pop().unwrap_or_default();
                    at.push(k);
                    self.sizes.insert(z, (c.count, at));
                }
            }
        }
    }

    /// How many of the share's candidates come before place `prefix`.
    fn count_before(&self, prefix: usize) -> usize {
        self.index.partition_point(|&i| i < prefix)
    }

    /// A bound on what share `x`'s victims can free: every chosen candidate and every one
    /// before `prefix` together, and the untagged ones no more than their largest plus
    /// `cap - 1`.
    fn all(
        &self,
        x: usize,
        prefix: usize,
        chosen: &[usize],
        cands: &[Cand],
        cap: Option<u32>,
    ) -> u32 {
        let at = self.count_before(prefix);
        let (mut forced, mut forced_tagged, mut largest) = (0, 0, self.max[at]);
        for c in chosen.iter().map(|&i| &cands[i]).filter(|c| c.share == x) {
            if c.tagged {
                forced_tagged += c.count;
            } else {
                forced += c.count;
                largest = largest.max(c.count);
            }
        }
        let untagged = forced + self.sum[at];
        let untagged = match cap {
            Some(cap) if untagged > 0 => untagged.min(largest + cap.saturating_sub(1)),
            _ => untagged,
        };
        self.tagged[at] + forced_tagged + untagged
    }

    /// The untagged sizes among the first `k`, as (size, how many), ascending.
    fn items(&self, k: usize) -> Vec<(u32, u32)> {
        self.sizes
            .iter()
            .map(|(v, at)| (*v, at.partition_point(|&j| j < k) as u32))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

/// Sorted sizes as (size, how many).
fn multiset(sorted: &[u32]) -> Vec<(u32, u32)> {
    let mut items: Vec<(u32, u32)> = Vec::new();
    for &v in sorted {
        match items.last_mut() {
            Some((w, n)) if *w == v => *n += 1,
            _ => items.push((v, 1)),
        }
    }
    items
}

/// The most a subset `T` of one share's untagged candidates can sum to, with every `forced`
/// size in it and any of the optional ones (`opt_sum` and `opt_max` of them; `optional()`
/// lists them as (size, how many), sizes ascending, and is called only when the bound
/// binds), when `T` is empty or all of it but its largest item sums below `cap`; `None` when
/// the forced items alone break that.
fn bounded_most(
    forced: &[u32],
    opt_sum: u32,
    opt_max: u32,
    optional: impl FnOnce() -> Vec<(u32, u32)>,
    cap: u32,
) -> Option<u32> {
    let forced_sum: u32 = forced.iter().sum();
    let all = forced_sum + opt_sum;
    let largest = forced.iter().copied().max().unwrap_or(0).max(opt_max);
    if all == 0 || all - largest < cap {
        return Some(all);
    }
    let mut best = forced.is_empty().then_some(0);
    if cap == 0 {
        return best;
    }
    // Some item of the set is the one left out of the bound. Exchanging items shows that the
    // largest item overall, or the largest forced one, can always be that item.
    let opt = optional();
    let mut designated = vec![largest];
    if let Some(f) = forced.iter().copied().max().filter(|&f| f != largest) {
        designated.push(f);
    }
    for v in designated {
        let mut items = opt.clone();
        let fs = if let Some(i) = forced.iter().position(|&x| x == v) {
            forced_sum - forced[i]
        } else {
            let i = items.iter().position(|&(x, _)| x == v).expect("a size");
            items[i].1 -= 1;
            forced_sum
        };
        if fs >= cap {
            continue;
        }
        let total = v + fs + subset_sum_at_most(&items, cap - 1 - fs);
        best = Some(best.map_or(total, |b| b.max(total)));
    }
    best
}

/// The largest sum of a sub-multiset of `items` ((size, how many)) that is at most `limit`
/// (a bitset of reachable sums).
fn subset_sum_at_most(items: &[(u32, u32)], limit: u32) -> u32 {
    let total = items.iter().map(|&(v, k)| v * k).sum::<u32>();
    if total <= limit {
        return total;
    }
    let bits = limit as usize + 1;
    let mut reach = vec![0u64; bits.div_ceil(64)];
    reach[0] = 1;
    // Each size's copies in binary-split bundles (1, 2, 4, ..., rest): every count up to
    // how many there are is a sum of distinct bundles.
    let mut bundles = Vec::new();
    for &(v, mut k) in items {
        let mut b = 1;
        while k > 0 {
            let take = b.min(k);
            bundles.push(v * take);
            k -= take;
            b *= 2;
        }
    }
    for item in bundles {
        let shift = item as usize;
        if shift >= bits {
            continue;
        }
        // reach |= reach << shift, high words first so that each item is used once.
        let (words, offset) = (shift / 64, shift % 64);
        for w in (words..reach.len()).rev() {
            let mut v = reach[w - words] << offset;
            if offset > 0 && w > words {
                v |= reach[w - words - 1] >> (64 - offset);
            }
            reach[w] |= v;
        }
        if !bits.is_multiple_of(64) {
            let last = reach.len() - 1;
            reach[last] &= (1u64 << (bits % 64)) - 1;
        }
    }
    (0..bits)
        .rev()
        .find(|&b| reach[b / 64] >> (b % 64) & 1 == 1)
        .map_or(0, |b| b as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_sums_respect_the_limit() {
        assert_eq!(subset_sum_at_most(&[(3, 2), (5, 1)], 7), 6);
        assert_eq!(subset_sum_at_most(&[(3, 2), (5, 1)], 8), 8);
        assert_eq!(subset_sum_at_most(&[(70, 2)], 139), 70);
        assert_eq!(subset_sum_at_most(&[(1, 1), (63, 1), (64, 1)], 127), 127);
        assert_eq!(subset_sum_at_most(&[(9, 1)], 3), 0);
        assert_eq!(subset_sum_at_most(&[(2, 7)], 11), 10);
    }

    fn most(forced: &[u32], optional: &[u32], cap: u32) -> Option<u32> {
        let mut items: Vec<(u32, u32)> = Vec::new();
        let mut sorted = optional.to_vec();
        sorted.sort_unstable();
        for v in sorted {
            match items.last_mut() {
                Some((w, n)) if *w == v => *n += 1,
                _ => items.push((v, 1)),
            }
        }
        let (sum, max) = (
            optional.iter().sum(),
            optional.iter().copied().max().unwrap_or(0),
        );
        bounded_most(forced, sum, max, || items, cap)
    }

    #[test]
    fn a_bound_leaves_the_largest_item_out() {
        // Borrowing 2: one job beyond what it borrows may go, and it may be the large one.
        assert_eq!(most(&[], &[1, 1, 8], 2), Some(9));
        assert_eq!(most(&[1, 1], &[8], 2), Some(2));
        assert_eq!(most(&[1, 1, 1], &[], 2), None);
        assert_eq!(most(&[], &[4], 0), Some(0));
        assert_eq!(most(&[4], &[], 0), None);
        assert_eq!(most(&[2], &[3, 3], 3), Some(5));
        assert_eq!(most(&[], &[2, 2, 2, 3], 5), Some(7));
    }
}
