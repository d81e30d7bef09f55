//! The scheduling pass (DESIGN.md §2), one lane group — a queue's unit — at a time.
//!
//! 1. **View**: the accounts of every share on the unit, built once ([`View`]) and kept
//!    current as the pass decides. Besides what attempts hold, it counts two kinds of
//!    not-yet-started demand: a job that preempted for its capacity *claims* it (counted as
//!    its share's usage, so nobody else takes what it reclaimed), and a share's first waiting
//!    job that fits its idle entitlement *reserves* it (that idle capacity is not lent, and a
//!    borrower leaves environment room for it, since the owner would reclaim it at once; a
//!    share whose head is patient reserves all its idle entitlement). Separately, every aged
//!    head holds a [`Reservation`] (the starvation guard), known from the start of the pass.
//! 2. **Nominate**: each share offers one job at a time — a job ahead of or equal to a
//!    reclaiming job of the share, else its head until decided, else its first job fitting
//!    the idle entitlement, else its first job within the bound this pass has learnt. A share
//!    with in-share preemption offers its jobs strictly in order (a lower-priority job started
//!    first would only be preempted).
//! 3. **Order**: reclaimers first; then owners (fitting their idle entitlement, or sure to
//!    wait, or brought within it by in-share preemption) by priority; then jobs that would use
//!    some idle entitlement and borrow the rest, or preempt in their share, or heads past the
//!    starvation guard; then plain borrowers. The last two groups go one decision at a time in
//!    FIFO order of submission (`idleResourceAssignmentStrategy` FIFO).
//! 4. **Decide** each nominee against the view: start it (backfilled onto the reservation
//!    that covers it, if any), preempt a minimal complete victim set for it — or, when it is
//!    patient with those victims (`Scheduler::patience`), only the ones that checkpointed at
//!    this instant, or none yet —, wait for released capacity, or wait with a typed reason.
//!    A nominee covered by a draining reservation waits behind its head.
//! 5. **Bound**: a waiting job of count `c` means no later job of its share with count ≥ `c`
//!    can do better in this pass (it has the same or fewer victims: lower or equal priority),
//!    so the share's next nominee must need fewer instances (best-effort FIFO). A job that
//!    preempted, waits for released capacity or is patient with its victims closes its share
//!    for the pass.
//!
//! Capacity only shrinks within a pass (a start consumes it; a preemption frees it only when
//! the attempt exits), which is why the bounds are sound. The exceptions are claims and
//! reservations that shrink by more than a start uses (a job ahead of a reclaimer took the
//! capacity, a reclaimer can no longer use it, a start changed which owner waits next, a head
//! stopped being patient), and a start backfilled onto a head already decided (the head may
//! now take it): the group is then passed again, so that jobs decided against them get
//! another look. Cost per pass: O(nominations · (shares + log n)) plus the victim searches
//! (`victims`: a walk of the job's own lane below its priority, then candidates of other
//! lanes drawn in victim order about as far as the best set needs, decided in O(log)
//! admission checks per victim, each with a subset-sum over job sizes where a share's bound
//! binds; a decision is remembered while the view is unchanged, so a nominee classified by
//! it is not searched twice); none of it grows with the number of waiting jobs. Shares with thrash protection add a walk of the unit's running attempts per
//! pass while jobs wait (`set_wake`), and a head that starts walks the lanes holding jobs
//! backfilled onto it (`untag`).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};

use crate::fair::{Candidate, FairCtx};
use crate::ledger::{self, Account, Ceiling, Pressure, Route, Violation};
use crate::model::*;
use crate::reason::PendingReason;
use crate::scheduler::{Attempt, Hold, Job, Lane, Patience, PendKey, Scheduler, Share, UnitLanes};
use crate::view::View;

/// An hour, for `ShareSpec::max_preemptions_per_hour`.
const HOUR_MS: Millis = 3_600_000;

/// What the pass does with one nominee. Waiting carries only the constraint that blocked it;
/// the full [`PendingReason`] is built on demand by `explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Start,
    Preempt(Vec<AttemptId>),
    /// It fits once the stopping attempts (this many instances) have exited.
    Release(u32),
    Wait(Violation),
    /// A job patient with the victims it could preempt (backfilled jobs, or borrowers that
    /// checkpoint) waits; when its patience runs out is in `UnitLanes::patient`.
    Drain,
}

/// The kinds of nominee, decided in this order: a pass decides every nominee of the lowest
/// kind present, then nominates again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A job that preempted for its capacity: the capacity its victims release is its own,
    /// so it is decided before anything else can take it.
    Reclaim,
    /// Fits its share's idle entitlement: owners before borrowers, so that capacity freed
    /// for an owner is never re-borrowed under it.
    Own,
    /// A job that needs more than its share's idle entitlement but would use some of it,
    /// could preempt in its share, or is a head past the starvation guard: decided before the
    /// plain borrowers, FIFO.
    Head,
    /// Everything else — a share's head that needs more than its idle entitlement, then
    /// (best-effort backfill) jobs behind it — in FIFO order of submission across shares.
    Rest,
}

#[derive(Clone, Copy, Debug)]
struct Nominee {
    share: usize,
    count: u32,
    key: PendKey,
    kind: Kind,
    /// The share's head (first job in its order).
    head: bool,
    /// Nominated as the first job fitting the idle entitlement, past jobs ahead of it: a
    /// wait bounds only such candidates.
    by_own: bool,
}

impl Nominee {
    fn order(&self) -> (Kind, Reverse<u32>, u64) {
        match self.kind {
            Kind::Own => (self.kind, self.key.priority, self.key.seq),
            Kind::Reclaim | Kind::Head | Kind::Rest => (self.kind, Reverse(0), self.key.seq),
        }
    }
}

/// How many jobs a pass without preemptible backfill looks at behind an aged head for one
/// that ends before the head could start (Slurm's `bf_max_job_test` default).
const EASY_DEPTH: u32 = 100;

/// What one pass has learnt about a share: no job of the share needing `any` or more
/// instances can start (nor, among those that fit its idle entitlement, `own` or more); which
/// head it has decided; the last of its reclaiming jobs it has decided; the last job it held
/// behind an aged head for not ending before the head could start (only jobs after it are
/// nominated), and how many it held so.
#[derive(Clone, Copy, Debug)]
struct Bound {
    any: u32,
    own: u32,
    head_seen: Option<JobId>,
    reclaim_seen: Option<PendKey>,
    easy_after: Option<PendKey>,
    easy_held: u32,
    /// No job of the share that runs only within its own quota and needs more instances than
    /// this fits what the share's other such jobs leave of it this pass.
    own_only: u32,
}

impl Bound {
    /// The nominee waits: no job of its kind with as many instances can do better this pass.
    fn lower(&mut self, n: &Nominee) {
        if n.by_own {
            self.own = self.own.min(n.count - 1);
        } else {
            self.any = self.any.min(n.count - 1);
        }
    }

    const OPEN: Bound = Bound {
        any: u32::MAX,
        own: u32::MAX,
        head_seen: None,
        reclaim_seen: None,
        easy_after: None,
        easy_held: 0,
        own_only: u32::MAX,
    };

    fn close(&mut self) {
        self.any = 0;
        self.own = 0;
    }

    /// Step 5: what the nominee's decision teaches the pass about its share's later jobs.
    fn learn(&mut self, n: &Nominee, decision: &Decision) {
        match decision {
            Decision::Start => {}
            // Like a job waiting for its victims to exit, a patient one holds its share.
            Decision::Preempt(_) | Decision::Release(_) | Decision::Drain => self.close(),
            // Its share's own-only usage only grows in a pass: no such job as large fits
            // either, and the others are unaffected.
            Decision::Wait(Violation::Firm) => self.own_only = self.own_only.min(n.count - 1),
            Decision::Wait(_) => self.lower(n),
        }
    }
}

/// An aged head that the starvation guard holds capacity for on this unit. The jobs that may
/// not pass it — every other job of its share, and, when it competes with other owners,
/// every later start of other shares (`cross`) — still start, but backfilled: preemptible for
/// it whatever their share and priority. While the head lets them finish (`draining`),
/// nothing new is backfilled.
#[derive(Clone, Copy, Debug)]
struct Reservation {
    seq: u64,
    job: JobId,
    share: usize,
    cross: bool,
    draining: bool,
    /// Its head has been decided in this pass.
    decided: bool,
    /// Its head's shadow (`crate::easy`), once a pass has needed it; forgotten when a
    /// preemption or a lapsed claim may have made it earlier.
    shadow: Option<Option<Millis>>,
}

impl Reservation {
    /// Whether `n` may not pass this reservation's head.
    fn covers(&self, n: &Nominee) -> bool {
        if n.key.job == self.job {
            return false;
        }
        if n.share == self.share {
            return true;
        }
        self.cross && n.key.seq > self.seq
    }
}

/// What the reservations of a pass make of a nominee.
enum Cover {
    /// A covering reservation is draining: it waits behind that head.
    Held(JobId),
    /// It may start backfilled onto this head's reservation (and whether that head has been
    /// decided in this pass already).
    Backfill(JobId, bool),
    None,
}

/// Which reservation covers `n`: any that is draining holds it; else it is backfilled onto
/// its own share's reservation if one covers it (its own head is the one it passes), else
/// onto the oldest.
fn cover(reservations: &[Reservation], n: &Nominee) -> Cover {
    let covering = || reservations.iter().filter(|r| r.covers(n));
    if let Some(r) = covering().find(|r| r.draining) {
        return Cover::Held(r.job);
    }
    match covering()
        .find(|r| r.share == n.share)
        .or_else(|| covering().min_by_key(|r| r.seq))
    {
        Some(r) => Cover::Backfill(r.job, r.decided),
        None => Cover::None,
    }
}

/// One share's lane as `nominate` sees it.
struct ShareLane<'a> {
    s: usize,
    lane: &'a Lane,
    /// The share's head (first job in its order) and its count.
    head: Option<(u32, PendKey)>,
    /// What is left of the share's idle entitlement.
    own_room: u32,
    /// The share has in-share preemption: its jobs are offered strictly in order.
    strict: bool,
}

impl ShareLane<'_> {
    fn nominee(&self, count: u32, key: PendKey, kind: Kind, by_own: bool) -> Nominee {
        Nominee {
            share: self.s,
            count,
            key,
            kind,
            head: self.head.is_some_and(|(_, h)| h == key),
            by_own,
        }
    }
}

/// One pass over a lane group, carried through its steps (module docs).
struct UnitPass {
    now: Millis,
    q: QueueIx,
    u: UnitIx,
    view: View,
    reservations: Vec<Reservation>,
    /// The jobs patient with their victims after the last pass (this pass rebuilds the set).
    patient_before: BTreeMap<JobId, Patience>,
    bounds: Vec<Bound>,
    /// Borrowers ranked by more than FIFO (fair sharing, groups): the figures of the units
    /// (built on the first round that ranks two borrowers), and whether a decision of this
    /// pass moved a share's figure, which fair reclaim on the queue's other units reads.
    orders: bool,
    fair: Option<FairCtx>,
    cross_unit: bool,
    moved: bool,
    /// Under fair reclaim a borrower's start raises its figure and so can make its jobs
    /// fair victims for a borrower decided earlier in the pass: capacity no longer only
    /// shrinks within a pass, so such a pass is followed by another.
    borrow_started: bool,
    waited: bool,
    /// Decisions on the view as it is: `nominate` classifies its nominees by them, and the
    /// pass nominates every round until the view changes (a start, a preemption, a claim
    /// or reservation that moves), when they are forgotten.
    decided: RefCell<BTreeMap<JobId, Decision>>,
}

impl Scheduler {
    /// Runs the scheduling pass over every lane group whose inputs changed, or whose wake-up
    /// (`next_wakeup`) is due, and returns the decisions, in order. Groups where a job waits for capacity it reclaimed go first, so
    /// that physical instances released for it are not taken by another queue.
    pub fn schedule(&mut self, now: Millis) -> Vec<Effect> {
        self.clock = self.clock.max(now);
        let mut fx = Vec::new();
        // Wake-ups that are due: the unit is passed now (a wake-up whose job has started since
        // costs one pass that decides nothing).
        for (q, queue) in self.queues.iter_mut().enumerate() {
            for (&u, ul) in &mut queue.units {
                if ul.wake.is_some_and(|w| w <= now) {
                    ul.wake = None;
                    self.dirty.insert((QueueIx(q as u32), u));
                }
            }
        }
        // Drained: nothing starts or is preempted; the lanes stay dirty for the pass after
        // the drain ends.
        while self.drain.is_none() {
            let next = self
                .dirty
                .iter()
                .copied()
                .find(|&(q, u)| self.has_reclaimers(q, u));
            let Some((q, u)) = next.or_else(|| self.dirty.first().copied()) else {
                break;
            };
            self.dirty.remove(&(q, u));
            self.schedule_unit(now, q, u, &mut fx);
        }
        fx
    }

    /// The earliest instant at which time passing alone changes a decision (a job's patience
    /// with its victims runs out, `Policy::reclaim_patience_ms` and `backfill_patience_ms`, or,
    /// while jobs wait, a running job's thrash protection ends): the shell calls
    /// [`Scheduler::schedule`] then even if nothing else happens.
    pub fn next_wakeup(&self) -> Option<Millis> {
        if self.drain.is_some() {
            return None;
        }
        self.queues
            .iter()
            .flat_map(|q| q.units.values().filter_map(|ul| ul.wake))
            .min()
    }

    /// Whether a checkpoint of the attempt can change a decision, so that a shell that passes
    /// only units where something changed (the simulator) must pass its unit now. Only
    /// patience makes it so: a job patient with its victims takes each one at the instant it
    /// checkpoints — an attempt backfilled onto a patient head's reservation, one of a
    /// borrowing share while a job of the unit is patient, or a lower-priority one of a
    /// patient job's own share under in-share preemption. Otherwise a
    /// checkpoint only reorders the victims: whether a valid set exists does not depend on
    /// the order, and the victim search is exact, so no decision a pass would make changes.
    /// The server passes after every batch and needs no such test.
    pub fn checkpoint_matters(&self, attempt: AttemptId) -> bool {
        let Some(a) = self.attempts.get(&attempt) else {
            return false;
        };
        let queue = &self.queues[a.queue.0 as usize];
        let Some(ul) = queue.units.get(&a.unit) else {
            return false;
        };
        if ul.patient.is_empty() {
            return false;
        }
        if a.backfill_for.is_some_and(|h| ul.patient.contains_key(&h)) {
            return true;
        }
        let s = usize::from(a.share.0);
        let borrows = ul
            .lanes
            .get(s)
            .is_some_and(|own| own.usage > queue.shares[s].entitlement(a.unit));
        // A patient set may also hold lower-priority jobs of the patient job's own share.
        let own_victim = || {
            queue.shares[s].in_share_preemption()
                && ul.patient.keys().any(|j| {
                    self.jobs
                        .get(j)
                        .is_some_and(|job| job.share == a.share && job.spec.priority > a.priority)
                })
        };
        borrows || own_victim()
    }

    fn has_reclaimers(&self, q: QueueIx, u: UnitIx) -> bool {
        self.queues[q.0 as usize]
            .units
            .get(&u)
            .is_some_and(|ul| ul.lanes.iter().any(|l| !l.reclaimers.is_empty()))
    }

    /// Passes the lane group (module docs): builds its view, then nominates, orders and
    /// decides one round of nominees at a time until no share offers one.
    fn schedule_unit(&mut self, now: Millis, q: QueueIx, u: UnitIx, fx: &mut Vec<Effect>) {
        let Some(mut pass) = self.begin_unit_pass(now, q, u) else {
            return;
        };
        let mut nominees = Vec::new();
        loop {
            self.nominate(&pass, &mut nominees);
            if !self.order_round(&mut pass, &mut nominees) {
                break;
            }
            for &n in &nominees {
                if self.decide_nominee(&mut pass, n, fx) {
                    // A claim that was given up or lapsed freed capacity that the jobs decided
                    // so far (and the round's other nominees) were decided without: every
                    // share is offered again from its first job, so that a job that waited
                    // for the claimed capacity is decided before the jobs behind it take it.
                    // (A claim goes once, so this ends.)
                    pass.bounds.fill(Bound::OPEN);
                    break;
                }
            }
        }
        self.end_unit_pass(pass);
    }

    /// Step 1: the lane group's view and reservations, with the last pass's patient jobs and
    /// holds cleared for this pass to rebuild; `None` if the queue has no such lane group.
    fn begin_unit_pass(&mut self, now: Millis, q: QueueIx, u: UnitIx) -> Option<UnitPass> {
        let nshares = self.queues[q.0 as usize].shares.len();
        if !self.queues[q.0 as usize].units.contains_key(&u) {
            return None;
        }
        // The view is built while the last pass's patient jobs are still known: a share whose
        // head is patient keeps its idle capacity (see `fill_view`).
        let mut view = self.scratch.take().unwrap_or_default();
        self.fill_view(q, u, &mut view);
        let reservations = self.reservations(now, q, u, &view);
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("checked above");
        // Rebuilt by this pass: a job it does not decide is no longer patient.
        let patient_before = std::mem::take(&mut ul.patient);
        for lane in &mut ul.lanes {
            lane.held_for = None;
        }
        let queue = &self.queues[q.0 as usize];
        Some(UnitPass {
            now,
            q,
            u,
            view,
            reservations,
            patient_before,
            bounds: vec![Bound::OPEN; nshares],
            orders: queue.orders_borrowers(),
            fair: None,
            cross_unit: queue.fair_reclaim,
            moved: false,
            borrow_started: false,
            waited: false,
            decided: RefCell::new(BTreeMap::new()),
        })
    }

    /// Step 3: keeps the round's lowest kind of nominee, in the order they are decided (one
    /// at a time for heads and the rest); `false` when there is none and the pass is over.
    fn order_round(&self, p: &mut UnitPass, nominees: &mut Vec<Nominee>) -> bool {
        let Some(kind) = nominees.iter().map(|n| n.kind).min() else {
            return false;
        };
        nominees.retain(|n| n.kind == kind);
        // An aged head that other shares' later starts may not pass goes before the round's
        // other nominees: one decided first could preempt for capacity the head then holds
        // (its victim would restart at once, its claimant held behind the head).
        let reservations = &p.reservations;
        let crossing = |n: &Nominee| reservations.iter().any(|r| r.cross && r.job == n.key.job);
        nominees.sort_by_key(|n| (!crossing(n), n.order()));
        if matches!(kind, Kind::Head | Kind::Rest) {
            // One decision at a time: after each, the next share's nominee may be an older
            // job than the ones already nominated (FIFO), or rank otherwise (`fair`).
            if p.orders && nominees.len() > 1 && !crossing(&nominees[0]) {
                let (q, u) = (p.q, p.u);
                let ctx = p
                    .fair
                    .get_or_insert_with(|| FairCtx::new(self, &self.queues[q.0 as usize], u));
                let cands: Vec<Candidate> = nominees
                    .iter()
                    .map(|n| Candidate {
                        share: n.share,
                        count: n.count,
                        seq: n.key.seq,
                    })
                    .collect();
                if let Some(i) = ctx.first(&p.view.real, &cands) {
                    nominees.swap(0, i);
                }
            }
            nominees.truncate(1);
        }
        true
    }

    /// Step 4 for nominee `n`: decides it against the view and applies the decision, which
    /// bounds its share (step 5). Returns whether a claim was given up or lapsed.
    fn decide_nominee(&mut self, p: &mut UnitPass, n: Nominee, fx: &mut Vec<Effect>) -> bool {
        let (now, q, u, id) = (p.now, p.q, p.u, n.key.job);
        let b = &mut p.bounds[n.share];
        if n.head {
            b.head_seen = Some(id);
        }
        let reclaimer = self.jobs[&id].reclaiming;
        if reclaimer {
            b.reclaim_seen = Some(n.key);
        }
        let Some(backfill) = self.backfill_or_hold(p, &n) else {
            return false;
        };
        let was_patient = p.patient_before.contains_key(&id);
        let (decision, patient) = {
            let d = self.decide_once(id, &p.view, &p.decided);
            self.patience(now, q, u, id, d, &p.patient_before)
        };
        if let Some(r) = p.reservations.iter_mut().find(|r| r.job == id) {
            r.draining = patient;
            r.decided = true;
        }
        let (reserved_before, started) =
            (p.view.reserve[n.share], matches!(decision, Decision::Start));
        // Only starts and preemptions (and a reclaimer giving up its claim) change the
        // view; a job that waits, is patient or waits for release leaves it as it was.
        let changes_view = matches!(decision, Decision::Start | Decision::Preempt(_));
        p.bounds[n.share].learn(&n, &decision);
        let gave_up = match decision {
            Decision::Start => self.apply_start(p, n, reclaimer, backfill, fx),
            Decision::Preempt(victims) => {
                self.apply_preempt(p, n, reclaimer, &victims, fx);
                false
            }
            Decision::Release(_) => {
                self.hold(q, u, n.share, id, Hold::Release);
                false
            }
            Decision::Wait(_) => {
                p.waited = true;
                if reclaimer {
                    self.give_up_claim(p, n);
                }
                reclaimer
            }
            Decision::Drain => {
                // Like a job waiting for its victims to exit, it holds its share.
                self.hold(q, u, n.share, id, Hold::Starvation);
                false
            }
        };
        let is_patient = self.queues[q.0 as usize].units[&u]
            .patient
            .contains_key(&id);
        if changes_view || reclaimer || was_patient != is_patient {
            p.decided.borrow_mut().clear();
        }
        if !started && (changes_view || gave_up) {
            // Capacity may come free sooner than the shadows assumed.
            p.reservations.iter_mut().for_each(|r| r.shadow = None);
        }
        if started || was_patient != is_patient {
            let reserve = p
                .view
                .group_headroom(n.share, self.reserve_of(q, u, n.share));
            if reserve + if started { n.count } else { 0 } < reserved_before {
                // The share's reservation shrank by more than a start used (a start,
                // or a head no longer patient): borrowers decided against it get
                // another look.
                self.dirty.insert((q, u));
            }
            p.view.reserve[n.share] = reserve;
        }
        if started && p.view.ceiling.capped_group(n.share).is_some() {
            // A start uses its group's headroom: fellow members' owners may now keep
            // less from borrowers.
            self.shrink_group_reserves(q, u, n.share, &mut p.view);
        }
        gave_up
    }

    /// What the starvation guard makes of nominee `n`: `None` when it waits behind an aged
    /// head (held), else the head whose reservation it would start backfilled onto, if any,
    /// and whether that head has been decided in this pass.
    fn backfill_or_hold(&mut self, p: &mut UnitPass, n: &Nominee) -> Option<Option<(JobId, bool)>> {
        let (now, q, u, id) = (p.now, p.q, p.u, n.key.job);
        // A start the starvation guard would hold back goes ahead on the capacity it
        // holds, preemptibly: backfill, never idle capacity — except while the aged
        // head lets what is backfilled finish, when nothing new is backfilled.
        match cover(&p.reservations, n) {
            Cover::Held(holder) => {
                p.bounds[n.share].lower(n);
                self.hold_if_free(q, u, n.share, holder);
                None
            }
            Cover::Backfill(head, decided) => {
                let easy = self.jobs[&id].spec.runtime_limit_ms.is_some() && {
                    let r = p
                        .reservations
                        .iter_mut()
                        .find(|r| r.job == head)
                        .expect("the covering reservation");
                    let view = &p.view;
                    let shadow = *r
                        .shadow
                        .get_or_insert_with(|| self.shadow(q, u, head, view, now));
                    self.ends_before(id, now, shadow)
                };
                if easy {
                    // EASY: it is gone before the head could surely start.
                    Some(None)
                } else if self.policy.preemptible_backfill
                    && self.jobs[&id].spec.interruptible
                    && !(self.jobs[&id].spec.own_only() && self.jobs[&head].spec.own_only())
                {
                    Some(Some((head, decided)))
                } else {
                    // (A job that may not be interrupted is never backfilled: the
                    // head could not take its capacity back. Nor is one that runs only
                    // within its share's quota onto a head that does too: it would
                    // count against the quota before the head, which then could not
                    // start, nor take it back, and its claimants would churn.)
                    // Held; the jobs after it may still end in time.
                    let b = &mut p.bounds[n.share];
                    b.easy_after = b.easy_after.max(Some(n.key));
                    b.easy_held += 1;
                    if b.easy_held >= EASY_DEPTH {
                        b.close();
                    }
                    self.hold_if_free(q, u, n.share, head);
                    None
                }
            }
            Cover::None => Some(None),
        }
    }

    /// Starts nominee `n` (onto the reservation of `backfill`'s head, if any) and brings the
    /// view and the reservations up to date. Returns whether its share's claims lapsed.
    fn apply_start(
        &mut self,
        p: &mut UnitPass,
        n: Nominee,
        reclaimer: bool,
        backfill: Option<(JobId, bool)>,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let (now, q, u, id, s) = (p.now, p.q, p.u, n.key.job, n.share);
        let mut lapsed = false;
        self.start(now, id, backfill.map(|(head, _)| head), fx);
        if backfill.is_some_and(|(_, decided)| decided) {
            // Its head, already decided, may now preempt what was a claim or
            // free capacity it could not use: it gets another look.
            self.dirty.insert((q, u));
        }
        if let Some(i) = p.reservations.iter().position(|r| r.job == id) {
            // Its reservation ends: what was backfilled onto it is ordinary.
            p.reservations.remove(i);
            self.untag(q, u, id);
        }
        let view = &mut p.view;
        let borrowing = view.held(s).route(n.count) == Route::Borrow;
        p.moved |= borrowing;
        p.borrow_started |= borrowing;
        if reclaimer {
            // Its claim becomes usage.
            view.demand[s] -= n.count;
        } else if view.claims(s) {
            // A job ahead of the share's reclaimers took the capacity they
            // claimed: their claims lapse.
            self.lapse_claims(q, u, Some(s));
            view.demand[s] = 0;
            lapsed = true;
        }
        view.add(s, n.count);
        if n.head {
            // Its share has a new head, which holds capacity from now on if it
            // is aged: the pass's later decisions must see that reservation,
            // or a claimant would preempt for capacity the head then keeps.
            let ul = &self.queues[q.0 as usize].units[&u];
            let new = self.reservation(now, ul, s, &p.view, &p.patient_before);
            if let Some(r) = new.filter(|r| p.reservations.iter().all(|x| x.job != r.job)) {
                p.reservations.push(r);
            }
        }
        lapsed
    }

    /// Preempts `victims` for nominee `n`, which holds its share while they exit and, unless
    /// it already reclaims, claims what they release.
    fn apply_preempt(
        &mut self,
        p: &mut UnitPass,
        n: Nominee,
        reclaimer: bool,
        victims: &[AttemptId],
        fx: &mut Vec<Effect>,
    ) {
        let (q, u, id) = (p.q, p.u, n.key.job);
        p.moved = true;
        for a in victims {
            let att = &self.attempts[a];
            p.view.stopping(usize::from(att.share.0), att.count);
        }
        self.preempt(p.now, id, victims, fx);
        if !reclaimer {
            p.view.claim(n.share, i64::from(n.count));
            // Its claim now protects what it waits for: the share keeps for
            // its other waiting owners only what fits beside the claims
            // (`Scheduler::lane_reserve`), or the claim and the reservation
            // would keep the same instances from borrowers twice.
            p.view.reserve[n.share] = p
                .view
                .group_headroom(n.share, self.reserve_of(q, u, n.share));
        }
        self.hold(q, u, n.share, id, Hold::Release);
    }

    /// Reclaiming nominee `n` waits although its victims are gone and it still cannot start
    /// (the configuration changed): it no longer holds a claim, and jobs decided against the
    /// claim get another look in a new pass.
    fn give_up_claim(&mut self, p: &mut UnitPass, n: Nominee) {
        let (q, u) = (p.q, p.u);
        self.clear_reclaiming(n.key.job);
        p.view.claim(n.share, -i64::from(n.count));
        // Without reclaimers its share reserves its idle entitlement for
        // its next owner again (the claim protected it until now).
        p.view.reserve[n.share] = p
            .view
            .group_headroom(n.share, self.reserve_of(q, u, n.share));
        self.dirty.insert((q, u));
    }

    /// The pass is over: the queue's other units rank their borrowers anew if a share's figure
    /// moved, the unit's wake-up is set, and claims that protect nothing any more lapse.
    fn end_unit_pass(&mut self, p: UnitPass) {
        let (q, u) = (p.q, p.u);
        if p.cross_unit && p.borrow_started && p.waited {
            self.dirty.insert((q, u));
        }
        if p.moved && p.cross_unit {
            // A share's figure is its largest over the queue's units: the other units rank
            // their borrowers anew.
            let queue = &self.queues[q.0 as usize];
            let others: Vec<UnitIx> = queue
                .units
                .iter()
                .filter(|(&t, ul)| t != u && ul.lanes.iter().any(|l| l.pending.len() > 0))
                .map(|(&t, _)| t)
                .collect();
            self.dirty.extend(others.into_iter().map(|t| (q, t)));
        }
        self.set_wake(q, u, p.now);
        if p.view.releasing == 0 {
            // Every victim has exited and this pass has handed the capacity out: a claim that
            // is left (its job was held behind a job of its share that could not start)
            // protects nothing any more.
            self.lapse_claims(q, u, None);
        }
        self.scratch = Some(p.view);
    }

    /// After a start of share `s`, whose group caps the unit: every fellow member reserves at
    /// most the group's headroom, and a pass follows where that shrank a reservation (borrowers
    /// decided against it get another look).
    fn shrink_group_reserves(&mut self, q: QueueIx, u: UnitIx, s: usize, view: &mut View) {
        let g = view.ceiling.capped_group(s);
        for x in (0..view.reserve.len()).filter(|&x| x != s && view.ceiling.capped_group(x) == g) {
            let reserve = view.group_headroom(x, view.reserve[x]);
            if reserve < view.reserve[x] {
                view.reserve[x] = reserve;
                self.dirty.insert((q, u));
            }
        }
    }

    /// Patience before preempting (`Policy::reclaim_patience_ms`, `backfill_patience_ms`).
    /// A job that could start by reclaiming from borrowers that checkpoint regularly, or, as
    /// an aged head, by preempting jobs backfilled onto its reservation, does not preempt at
    /// once: from the first pass that found it a victim set, until its patience runs out, it
    /// takes only the victims that checkpointed at this very instant (they lose nothing) and
    /// lets capacity free up on its own, and nothing new is backfilled onto its reservation
    /// (the returned flag: it is patient). A set in which no victim checkpoints regularly,
    /// and in-share victims alone, are taken at once: waiting would save nothing.
    fn patience(
        &mut self,
        now: Millis,
        q: QueueIx,
        u: UnitIx,
        id: JobId,
        decision: Decision,
        before: &BTreeMap<JobId, Patience>,
    ) -> (Decision, bool) {
        let victims = match decision {
            Decision::Preempt(v) => v,
            // Waiting for the victims it took at their checkpoints: still patient.
            Decision::Release(_) if before.contains_key(&id) => {
                self.keep_patient(q, u, id, before[&id]);
                return (decision, true);
            }
            other => return (other, false),
        };
        let Some(backfill) = self.patience_kind(id, &victims, now) else {
            return (Decision::Preempt(victims), false);
        };
        let since = before
            .get(&id)
            .filter(|p| p.backfill == backfill)
            .map_or(now, |p| p.since);
        let patience = Patience { since, backfill };
        if now >= patience.until(&self.policy) {
            return (Decision::Preempt(victims), false);
        }
        self.keep_patient(q, u, id, patience);
        let fresh: Vec<AttemptId> = victims
            .into_iter()
            .filter(|a| {
                let att = &self.attempts[a];
                att.progress_at == now && att.started_at < now
            })
            .collect();
        if fresh.is_empty() {
            (Decision::Drain, true)
        } else {
            (Decision::Preempt(fresh), true)
        }
    }

    fn keep_patient(&mut self, q: QueueIx, u: UnitIx, id: JobId, p: Patience) {
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane group");
        ul.patient.insert(id, p);
    }

    /// Until when thrash protection keeps `att` from being preempted (its share's
    /// `min_runtime_ms` since its start, or `max_preemptions_per_hour` reached), if it does.
    pub(crate) fn protected_until(&self, att: &Attempt, now: Millis) -> Option<Millis> {
        let spec = &self.queues[att.queue.0 as usize].shares[usize::from(att.share.0)].spec;
        let mut until = None;
        if spec.min_runtime_ms > 0 {
            let t = att.started_at.saturating_add(spec.min_runtime_ms);
            if now < t {
                until = Some(t);
            }
        }
        let cap = spec.max_preemptions_per_hour as usize;
        if cap > 0 {
            // Oldest first: the preemptions within the hour are a suffix.
            let all = &self.jobs[&att.job].recent_preemptions;
            let recent = &all[all.partition_point(|&t| t.saturating_add(HOUR_MS) <= now)..];
            if recent.len() >= cap {
                // Free again once fewer than `cap` preemptions are within the hour.
                let t = recent[recent.len() - cap].saturating_add(HOUR_MS);
                until = Some(until.map_or(t, |u: Millis| u.max(t)));
            }
        }
        until
    }

    /// When the unit must be passed again although nothing happens: a patient job's patience
    /// runs out, or, while jobs wait, thrash protection of a running job ends (they may find
    /// victims then).
    pub(crate) fn set_wake(&mut self, q: QueueIx, u: UnitIx, now: Millis) {
        let queue = &self.queues[q.0 as usize];
        let Some(ul) = queue.units.get(&u) else {
            return;
        };
        let waiting = ul.lanes.iter().any(|l| l.pending.len() > 0);
        let protected = if waiting && queue.shares.iter().any(Share::protects) {
            self.protection_ends(q, u, now)
        } else {
            None
        };
        let policy = self.policy;
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("checked above");
        let patient = ul.patient.values().map(|p| p.until(&policy)).min();
        ul.wake = patient.into_iter().chain(protected).min();
    }

    /// The earliest instant a protected running attempt of the unit becomes preemptible.
    fn protection_ends(&self, q: QueueIx, u: UnitIx, now: Millis) -> Option<Millis> {
        let queue = &self.queues[q.0 as usize];
        let ul = queue.units.get(&u)?;
        ul.lanes
            .iter()
            .enumerate()
            .filter(|(s, _)| queue.shares[*s].protects())
            .flat_map(|(_, l)| l.running.iter())
            .filter_map(|k| self.protected_until(&self.attempts[&k.attempt.0], now))
            .min()
    }

    /// Whether job `id` is patient with `victims`, and if so whether with jobs backfilled
    /// onto its reservation (`Some(true)`, only its share's head finds those) or with
    /// borrowers that checkpoint regularly (`Some(false)`); `None` when a zero patience or
    /// the victims make waiting pointless.
    fn patience_kind(&self, id: JobId, victims: &[AttemptId], now: Millis) -> Option<bool> {
        let share = self.jobs[&id].share;
        let backfill = victims
            .iter()
            .any(|a| self.attempts[a].backfill_for == Some(id));
        if backfill {
            return (self.policy.backfill_patience_ms > 0).then_some(true);
        }
        let checkpointing = victims.iter().any(|a| {
            let att = &self.attempts[a];
            att.share != share && keeps_checkpointing(att, now)
        });
        (checkpointing && self.policy.reclaim_patience_ms > 0).then_some(false)
    }

    /// The reservations of the unit's aged heads, at the start of a pass. What one covers
    /// depends only on the head's size and the configuration, so that it cannot come and go
    /// between passes: the share's other jobs always; other shares' later starts only when the
    /// head is within its share's entitlement but competes with other owners (the shares'
    /// limits exceed the environment, or a physical limit is shared), and could start if
    /// those shares were empty. A head that must borrow reserves only its own share's
    /// capacity: others may always take their own, and what they lend goes to the oldest
    /// borrower first. A head patient with its victims is draining from the start.
    fn reservations(&self, now: Millis, q: QueueIx, u: UnitIx, view: &View) -> Vec<Reservation> {
        let Some(ul) = self.queues[q.0 as usize].units.get(&u) else {
            return Vec::new();
        };
        (0..ul.lanes.len())
            .filter_map(|s| self.reservation(now, ul, s, view, &ul.patient))
            .collect()
    }

    /// The reservation of share `s`'s head on the lane group `ul`, if it is aged; `patient`:
    /// the jobs patient with their victims after the last pass (its head then drains).
    fn reservation(
        &self,
        now: Millis,
        ul: &crate::scheduler::UnitLanes,
        s: usize,
        view: &View,
        patient: &BTreeMap<JobId, Patience>,
    ) -> Option<Reservation> {
        let lane = &ul.lanes[s];
        let (c, k) = lane.pending.first(u32::MAX)?;
        if !self.aged(now, k) {
            return None;
        }
        // A head that runs only within its share's own quota and does not fit what the
        // share's other such jobs leave waits for them alone: holding capacity for it would
        // idle what no one else may use meanwhile.
        if k.own_only && lane.own_only + c > view.held(s).entitlement {
            return None;
        }
        let owner_sized = c <= view.held(s).entitlement;
        Some(Reservation {
            seq: k.seq,
            job: k.job,
            share: s,
            cross: owner_sized && view.contested_for(s) && view.others_could_free(s, c),
            draining: patient.contains_key(&k.job),
            decided: false,
            shadow: None,
        })
    }

    /// Aged head `head` starts: its reservation ends, and the jobs backfilled onto it, in any
    /// pass, are ordinary jobs again. (Tags of a head that is terminated or stops being its
    /// share's head stay, but count for nobody: only the head they name, as its share's head,
    /// may take them.) Costs a walk of the running
    /// attempts of the lanes that hold such jobs, only when there are some.
    fn untag(&mut self, q: QueueIx, u: UnitIx, head: JobId) {
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane group");
        for lane in &mut ul.lanes {
            if lane.backfill.remove(&head).is_none() {
                continue;
            }
            for k in &lane.running {
                let att = self
                    .attempts
                    .get_mut(&k.attempt.0)
                    .expect("running attempt");
                if att.backfill_for == Some(head) {
                    att.backfill_for = None;
                }
            }
        }
    }

    /// Records that the lane of share `s` waits behind `holder` (unless the pass already
    /// recorded a hold there), for `explain`.
    fn hold_if_free(&mut self, q: QueueIx, u: UnitIx, s: usize, holder: JobId) {
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane group");
        let lane = ul.lane(ShareIx(s as u16));
        if lane.held_for.is_none() {
            lane.held_for = Some((holder, Hold::Starvation));
        }
    }

    /// Drops the claims of the reclaiming jobs of share `only` (else of every share) of a lane
    /// group, and passes the group again so that jobs decided against them get another look.
    fn lapse_claims(&mut self, q: QueueIx, u: UnitIx, only: Option<usize>) {
        let lapsed: Vec<JobId> = self.queues[q.0 as usize].units[&u]
            .lanes
            .iter()
            .enumerate()
            .filter(|(s, _)| only.is_none_or(|o| o == *s))
            .flat_map(|(_, l)| l.reclaimers.iter().map(|k| k.job))
            .collect();
        if !lapsed.is_empty() {
            self.dirty.insert((q, u));
        }
        for r in lapsed {
            self.clear_reclaiming(r);
        }
    }

    /// What share `s` of the unit reserves against borrowers now (see `pending_own_demand`).
    fn reserve_of(&self, q: QueueIx, u: UnitIx, s: usize) -> u32 {
        let queue = &self.queues[q.0 as usize];
        let share = &queue.shares[s];
        let ul = &queue.units[&u];
        ul.lanes.get(s).map_or(0, |l| {
            self.lane_reserve(l, share, share.entitlement(u), &ul.patient)
        })
    }

    /// `patient`: the unit's patient jobs (see `Patience`).
    fn lane_reserve(
        &self,
        lane: &Lane,
        share: &Share,
        entitlement: u32,
        patient: &BTreeMap<JobId, Patience>,
    ) -> u32 {
        let patient_head = !patient.is_empty()
            && lane
                .pending
                .first(u32::MAX)
                .is_some_and(|(_, h)| patient.contains_key(&h.job));
        if patient_head {
            // Its idle capacity is about to be its head's: lending it now would only mean
            // preempting the borrower in a moment.
            entitlement.saturating_sub(lane.usage)
        } else {
            // Allocates only for a share with reclaimers (rare: while victims exit).
            let claims: Vec<u32> = lane
                .reclaimers
                .iter()
                .map(|k| self.jobs[&k.job].spec.count)
                .collect();
            pending_own_demand(lane, entitlement, share.in_share_preemption(), &claims)
        }
    }

    /// Whether the job has waited past the starvation guard.
    fn aged(&self, now: Millis, key: PendKey) -> bool {
        now.saturating_sub(key.queued_at) >= self.policy.reserve_after_ms
    }

    fn hold(&mut self, q: QueueIx, u: UnitIx, s: usize, id: JobId, why: Hold) {
        let ul = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane group");
        ul.lane(ShareIx(s as u16)).held_for = Some((id, why));
    }

    /// Step 2: each share's nominee: a job of it that preempted for its capacity, until the
    /// pass has decided each; then its head until decided; then the first job that fits its
    /// idle entitlement; else the first job within its bound.
    fn nominate(&self, p: &UnitPass, out: &mut Vec<Nominee>) {
        out.clear();
        let queue = &self.queues[p.q.0 as usize];
        let Some(ul) = queue.units.get(&p.u) else {
            return;
        };
        let pressure = &p.view.projected_pressure;
        // With fair reclaim a borrower may act on a full unit: it may preempt borrowers.
        let borrow_open =
            (pressure.lending < 0 && pressure.environment < 0 && pressure.physical < 0)
                || (queue.fair_reclaim && p.view.projected.iter().any(|a| a.borrowed() > 0));
        for (s, lane) in ul.lanes.iter().enumerate() {
            let b = p.bounds[s];
            if lane.pending.len() == 0 || (b.any == 0 && b.own == 0) {
                continue;
            }
            let sl = ShareLane {
                s,
                lane,
                head: lane.pending.first(u32::MAX),
                own_room: p.view.real[s].entitlement.saturating_sub(lane.usage),
                strict: queue.shares[s].in_share_preemption(),
            };
            let can_borrow = queue.shares[s].strategy().borrows() && borrow_open;
            if let Some(n) = self.nominate_share(p, ul, &sl, can_borrow) {
                out.push(n);
            }
        }
    }

    /// The nominee of one share, within its bound, if it offers one this round.
    fn nominate_share(
        &self,
        p: &UnitPass,
        ul: &UnitLanes,
        sl: &ShareLane,
        can_borrow: bool,
    ) -> Option<Nominee> {
        let (lane, b) = (sl.lane, p.bounds[sl.s]);
        let kind_of = |count: u32, key: PendKey| self.nominee_kind(p, sl, count, key);
        let next_reclaimer = match b.reclaim_seen {
            None => lane.reclaimers.first(),
            Some(k) => lane.reclaimers.range((Excluded(k), Unbounded)).next(),
        };
        if let Some(&r) = next_reclaimer.filter(|r| self.jobs[&r.job].spec.count <= b.any) {
            // The capacity its victims release is the share's: the reclaimer is decided
            // before other shares can take it — after the jobs of higher priority, in a
            // share where those could preempt it. (A job ahead of it by submission only
            // could not: taking the room would leave the reclaimer waiting and its
            // victims to restart on what is left, a preemption for nothing.)
            if sl.strict {
                let first = lane.pending.first_after(b.any, b.own_only, None);
                if let Some((c, k)) = first.filter(|(_, k)| k.priority < r.priority) {
                    return Some(sl.nominee(c, k, kind_of(c, k), false));
                }
            }
            let c = self.jobs[&r.job].spec.count;
            let kind = if c <= sl.own_room {
                Kind::Reclaim
            } else {
                kind_of(c, r)
            };
            return Some(sl.nominee(c, r, kind, false));
        }
        // A share with no idle entitlement, no in-share preemption and nothing it could
        // borrow can start nothing and preempt nobody in this pass (capacity only shrinks
        // within a pass): skip it without looking at its jobs. This keeps a full cluster's
        // pass O(shares).
        // ... unless jobs were backfilled onto its head's reservation: it may preempt them.
        let can_act = sl.own_room > 0 || sl.strict || can_borrow;
        let backfilled = |h: PendKey| ul.lanes.iter().any(|l| l.backfill.contains_key(&h.job));
        if !can_act && !sl.head.is_some_and(|(_, h)| backfilled(h)) {
            return None;
        }
        if sl.strict {
            let next = lane.pending.first_after(b.any, b.own_only, b.easy_after);
            return next
                .filter(|_| b.any > 0)
                .map(|(c, k)| sl.nominee(c, k, kind_of(c, k), false));
        }
        // The head is decided before anything else of its share: a job behind it may
        // only use capacity the head could not (best-effort FIFO).
        if let Some((c, k)) = sl
            .head
            .filter(|(c, k)| b.head_seen != Some(k.job) && *c <= b.any)
        {
            return Some(sl.nominee(c, k, kind_of(c, k), false));
        }
        let own_cap = sl.own_room.min(b.own);
        let first = |max: u32| lane.pending.first_after(max, b.own_only, b.easy_after);
        if let Some((c, k)) = first(own_cap).filter(|_| own_cap > 0) {
            Some(sl.nominee(c, k, Kind::Own, true))
        } else {
            first(b.any)
                .filter(|_| b.any > 0)
                .map(|(c, k)| sl.nominee(c, k, Kind::Rest, false))
        }
    }

    /// The kind of a share's job that needs `count` instances.
    // In a share with in-share preemption a job may preempt any lower-priority job of
    // its share, so its jobs are decided strictly in order (a lower-priority job
    // started first would only be preempted); the first of them that needs to borrow
    // goes after every owner but before other borrowers, so that its share's own
    // jobs behind it are still decided before those borrowers take its idle capacity.
    // A job that needs more than the idle entitlement is decided among the owners when
    // it can do nothing now (it only waits, and the share's own jobs behind it are then
    // still decided before other shares borrow the share's idle capacity); before the
    // other borrowers when it would use some of that idle capacity, could preempt in
    // its share, or is a head past the starvation guard; else with the borrowers, FIFO.
    fn nominee_kind(&self, p: &UnitPass, sl: &ShareLane, count: u32, key: PendKey) -> Kind {
        if count <= sl.own_room {
            return Kind::Own;
        }
        let aged_head = sl.head.is_some_and(|(_, h)| h == key) && self.aged(p.now, key);
        if sl.own_room == 0 && !sl.strict && !aged_head {
            return Kind::Rest;
        }
        let decision = self.decide_once(key.job, &p.view, &p.decided);
        match &decision {
            // It only waits: decide it among the owners.
            Decision::Wait(_) | Decision::Release(_) | Decision::Drain => Kind::Own,
            // In-share preemption that brings it within its entitlement: an owner.
            Decision::Preempt(victims) => {
                let freed: u32 = victims
                    .iter()
                    .map(|a| &self.attempts[a])
                    .filter(|a| usize::from(a.share.0) == sl.s)
                    .map(|a| a.count)
                    .sum();
                if sl.lane.usage - freed + count <= p.view.held(sl.s).entitlement {
                    Kind::Own
                } else {
                    Kind::Head
                }
            }
            Decision::Start => Kind::Head,
        }
    }

    /// The accounts of every share of a queue on one unit.
    pub(crate) fn view(&self, q: QueueIx, u: UnitIx) -> View {
        let mut view = View::default();
        self.fill_view(q, u, &mut view);
        view
    }

    /// [`Scheduler::view`] into an existing view, reusing its allocations (a pass per event).
    pub(crate) fn fill_view(&self, q: QueueIx, u: UnitIx, view: &mut View) {
        let queue = &self.queues[q.0 as usize];
        let ul = queue.units.get(&u);
        let mut queue_usage = 0u32;
        view.releasing = 0;
        view.held.clear();
        view.held_projected.clear();
        view.demand.clear();
        view.reserve.clear();
        for (i, share) in queue.shares.iter().enumerate() {
            let lane = ul.and_then(|ul| ul.lanes.get(i));
            let account = share.account(u, lane);
            let (usage, entitlement) = (account.usage, account.entitlement);
            let stopping = lane.map_or(0, |l| l.stopping);
            queue_usage += usage;
            view.releasing += stopping;
            view.held.push(account);
            view.held_projected.push(Account {
                usage: usage - stopping,
                ..account
            });
            view.demand.push(lane.map_or(0, |l| {
                l.reclaimers
                    .iter()
                    .map(|k| self.jobs[&k.job].spec.count)
                    .sum()
            }));
            view.reserve.push(lane.map_or(0, |l| {
                self.lane_reserve(l, share, entitlement, &ul.expect("lane of a unit").patient)
            }));
        }
        let queue_demand: u32 = view.demand.iter().sum();
        let physical_for_queue = self.physical.get(&u).map(|p| {
            let others = self.physical_used[usize::from(u.0)] - queue_usage;
            let claimed_by_others = self.reclaim_demand[usize::from(u.0)] - queue_demand;
            p.saturating_sub(others + claimed_by_others)
        });
        view.now = self.clock;
        view.ceiling.environment = queue.environment.get(&u).copied().unwrap_or(0);
        view.ceiling.physical_for_queue = physical_for_queue;
        view.ceiling.groups.clear();
        view.ceiling.group_of.clear();
        if queue.groups.iter().any(|g| g.limits.contains_key(&u)) {
            view.ceiling
                .groups
                .extend(queue.groups.iter().map(|g| g.limits.get(&u).copied()));
            view.ceiling.group_of.extend_from_slice(&queue.group_of);
            for s in 0..view.reserve.len() {
                view.reserve[s] = view.group_headroom(s, view.reserve[s]);
            }
        }
        view.finish();
    }

    /// Instances the job's share holds on its unit with jobs that run only within its own
    /// quota (they may not be interrupted, or may not borrow).
    pub(crate) fn own_only_usage(&self, job: &crate::Job) -> u32 {
        self.queues[job.queue.0 as usize]
            .units
            .get(&job.unit)
            .and_then(|ul| ul.lanes.get(usize::from(job.share.0)))
            .map_or(0, |l| l.own_only)
    }

    /// [`Scheduler::decide`], remembered in `memo` while the view stays as it is.
    fn decide_once(
        &self,
        id: JobId,
        view: &View,
        memo: &RefCell<BTreeMap<JobId, Decision>>,
    ) -> Decision {
        if let Some(d) = memo.borrow().get(&id) {
            return d.clone();
        }
        let d = self.decide(id, view);
        memo.borrow_mut().insert(id, d.clone());
        d
    }

    /// Decides what to do with a pending job now, against `view` (the current accounts of
    /// its lane group). Pure: the pass applies the decision, and `explain` reads it.
    pub(crate) fn decide(&self, id: JobId, view: &View) -> Decision {
        let s = usize::from(self.jobs[&id].share.0);
        self.decide_in(id, &view.for_share(s))
    }

    fn decide_in(&self, id: JobId, view: &View) -> Decision {
        let job = &self.jobs[&id];
        let (s, c) = (usize::from(job.share.0), job.spec.count);
        let admits = |view: &View, accounts: &[Account], pressure: &Pressure| {
            ledger::allowed_add(pressure, &accounts[s], s, c)?;
            if view.borrow_gate(accounts, s, c) {
                Ok(())
            } else {
                Err(Violation::Reserved)
            }
        };
        // A job that may not be interrupted (or may not borrow) runs within its share's own
        // quota, counted before the share's other jobs (which then hold what the share
        // borrows). When the share's own-only jobs leave it no room, only taking some of
        // them back changes that: when the ones it may take are enough for it to start once
        // they exit, it preempts them (were it to wait, a job behind it could take them, and
        // it would start on their room instead).
        if job.spec.own_only() && self.own_only_usage(job) + c > view.held(s).entitlement {
            let firm = self.firm_victims(id, view).filter(|victims| {
                let mut freed = view.clone();
                for a in victims {
                    freed.stopping(s, self.attempts[a].count);
                }
                admits(&freed, &freed.projected, &freed.projected_pressure).is_ok()
            });
            return firm.map_or(Decision::Wait(Violation::Firm), Decision::Preempt);
        }
        let admit = |accounts: &[Account], pressure: &Pressure| admits(view, accounts, pressure);
        let violation = match admit(&view.real, &view.real_pressure) {
            Ok(()) => return Decision::Start,
            Err(v) => v,
        };
        let violation = if view.releasing > 0 {
            match admit(&view.projected, &view.projected_pressure) {
                Ok(()) => return Decision::Release(view.releasing),
                Err(v) => v,
            }
        } else {
            violation
        };
        match self
            .find_victims(id, view)
            .or_else(|| self.fair_victims(id, view, true))
        {
            Some(victims) => Decision::Preempt(victims),
            None => Decision::Wait(violation),
        }
    }

    /// For a job that the own-only usage of its share keeps out (`Violation::Firm`): the first
    /// jobs in victim order that it may take and that run only within the share's quota, as
    /// many as bring it within the quota, or `None` when those it may take are not enough.
    /// It may take the share's lower-priority jobs under in-share preemption, unless
    /// thrash protection keeps them.
    fn firm_victims(&self, id: JobId, view: &View) -> Option<Vec<AttemptId>> {
        let job = &self.jobs[&id];
        let s = usize::from(job.share.0);
        let queue = &self.queues[job.queue.0 as usize];
        let share = &queue.shares[s];
        if !share.in_share_preemption() {
            return None;
        }
        let lane = queue.units.get(&job.unit)?.lanes.get(s)?;
        let mut need =
            (self.own_only_usage(job) + job.spec.count).saturating_sub(view.held(s).entitlement);
        let mut victims = Vec::new();
        for k in lane
            .running
            .iter()
            .take_while(|k| k.priority < job.spec.priority)
        {
            let att = &self.attempts[&k.attempt.0];
            let protected = share.protects() && self.protected_until(att, view.now).is_some();
            if att.own_only() && att.interruptible && !protected {
                victims.push(k.attempt.0);
                need = need.saturating_sub(att.count);
                if need == 0 {
                    return Some(victims);
                }
            }
        }
        None
    }

    /// The first valid victim set for the job in the documented order (`crate::victims`), or
    /// `None` when no set of allowed victims would let it start.
    fn find_victims(&self, id: JobId, view: &View) -> Option<Vec<AttemptId>> {
        self.find_victims_among(id, view, true)
    }

    /// The job's group's ceiling, if the job's share is in a group whose limit on the unit
    /// it would pass (`projected`: the shares' accounts) or that `violation` names.
    fn group_limit_reached(
        &self,
        job: &Job,
        projected: &[Account],
        violation: Violation,
    ) -> Option<PendingReason> {
        let (s, c) = (usize::from(job.share.0), job.spec.count);
        let queue = &self.queues[job.queue.0 as usize];
        let g = queue.group(s)?;
        let limit = queue.groups[g].limits.get(&job.unit).copied();
        let members = (0..projected.len()).filter(|&x| queue.group(x) == Some(g));
        let usage: u32 = members.map(|x| projected[x].usage).sum();
        (limit.is_some_and(|l| usage + c > l) || violation == Violation::Group(g)).then(|| {
            PendingReason::GroupLimitReached {
                group: queue.groups[g].name().to_string(),
                needs: c,
                usage,
                limit: limit.unwrap_or(0),
            }
        })
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
            (&view.ceiling, &view.projected[..], &view.projected_pressure);
        let job = &self.jobs[&id];
        let (s, c) = (usize::from(job.share.0), job.spec.count);
        let a = projected[s];
        if violation == Violation::Reserved {
            return PendingReason::ReservedForOthers;
        }
        // A group's ceiling is named whenever it binds, even when another constraint was
        // found first: no reclaim from outside the group can lift it.
        if let Some(reason) = self.group_limit_reached(job, projected, violation) {
            return reason;
        }
        if violation == Violation::Firm {
            let (needs, held, entitlement) = (c, self.own_only_usage(job), a.entitlement);
            return if job.spec.interruptible {
                PendingReason::ResumeUnverified {
                    needs,
                    held,
                    entitlement,
                }
            } else {
                PendingReason::NotInterruptible {
                    needs,
                    firm: held,
                    entitlement,
                }
            };
        }
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

    pub(crate) fn start(
        &mut self,
        now: Millis,
        id: JobId,
        backfill_for: Option<JobId>,
        fx: &mut Vec<Effect>,
    ) {
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
            backfill_for,
            checkpoint_gap: None,
            interruptible: job.spec.interruptible,
            borrows: job.spec.borrows,
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
        if attempt.own_only() {
            lane.own_only += count;
        }
        lane.running.insert(attempt.run_key());
        *lane.running_by_priority.entry(priority).or_default() += count;
        if let Some(h) = backfill_for {
            *lane.backfill.entry(h).or_default() += count;
        }
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
        self.set_reclaiming(for_job);
        for &a in victims {
            let cause = if self.attempts[&a].share == share_ix {
                StopCause::InShare { for_job }
            } else {
                StopCause::Reclaim {
                    for_job,
                    by_share: share_name.clone(),
                }
            };
            self.preempt_attempt(now, a, cause, fx);
        }
    }

    /// Stops attempt `a` as a preemption for `cause`: its job goes back to the queue (or
    /// fails once it exits, when its preemption retries are exhausted).
    pub(crate) fn preempt_attempt(
        &mut self,
        now: Millis,
        a: AttemptId,
        cause: StopCause,
        fx: &mut Vec<Effect>,
    ) {
        let victim = self.attempts[&a].job;
        // Replaying another build's batch: whether the job was queued again or is to fail is
        // what that build logged (a Requeued right after the stop), not this build's rule.
        let logged_requeue = self
            .replaying
            .as_ref()
            .map(|l| l.requeues_after_stop(victim, a));
        self.stop_attempt(a, cause.clone());
        let reason = cause.describe(|j| format!("{}", j.0));
        let counted = cause.counts_as_preemption();
        let drill = matches!(cause, StopCause::Drill { .. });
        let job = self.jobs.get_mut(&victim).expect("victim's job exists");
        if counted {
            job.preemptions += 1;
        }
        // Kept oldest first (a shell's clock could step back), only the last hour's. A drill
        // counts against the retries but not against thrash protection: it must not shield
        // the job from the reclaims `max_preemptions_per_hour` bounds. A drain's requeue
        // counts against neither.
        if counted && !drill {
            let recent = &mut job.recent_preemptions;
            recent.retain(|&t| t.saturating_add(HOUR_MS) > now);
            recent.insert(recent.partition_point(|&t| t <= now), now);
        }
        fx.push(Effect::Stop {
            job: victim,
            attempt: a,
            cause,
        });
        let exhausted = match logged_requeue {
            Some(requeued) => !requeued,
            None => {
                counted
                    && job
                        .spec
                        .preemption_retries
                        .is_some_and(|n| job.preemptions > n)
            }
        };
        if exhausted {
            // FAILED once the attempt has exited (its instances are held until then).
            job.status_reason = format!("{reason}; preemption retries exhausted");
            job.fail_on_exit = Some(job.status_reason.clone());
        } else {
            job.attempt = None;
            job.stopping = Some(a);
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

/// Instances of a share's idle entitlement that its waiting owners need: what the jobs that
/// fit the idle entitlement ask for together (up to it), or its head's count when taking the
/// share's lower-priority jobs (with in-share preemption) and the jobs backfilled onto its
/// reservation would make it fit (an optimistic count: a job may be both, or protected).
/// Capacity an owner waits for is not lent (nor, when the shares' limits add up to more than
/// the environment, taken by a borrower), since the owner would reclaim it at once.
///
/// `claims`: the counts of the share's reclaimers. Their claims protect what they wait for
/// already (a claim counts as usage, `View::with_claim`), so the other waiting owners keep
/// only what fits the idle entitlement left beside them.
fn pending_own_demand(lane: &Lane, entitlement: u32, in_share: bool, claims: &[u32]) -> u32 {
    // Once the stopping attempts have exited: what they hold comes back to the share's
    // owners, so lending it would only mean reclaiming it from the borrower in a moment.
    let usage = lane.usage - lane.stopping;
    let own_room = entitlement.saturating_sub(usage);
    if !claims.is_empty() {
        let room = own_room.saturating_sub(claims.iter().sum());
        let fitting: u32 = claims.iter().filter(|&&c| c <= room).sum();
        return lane.pending.demand_within_besides(room, fitting);
    }
    if let Some((c, head)) = lane.pending.first(u32::MAX) {
        // The head may take its share's lower-priority jobs (in-share preemption) and the
        // jobs backfilled onto its reservation: what they hold counts as room it has.
        let lower: u32 = if in_share {
            lane.running_by_priority
                .range(..head.priority.0)
                .map(|(_, n)| *n)
                .sum()
        } else {
            0
        };
        let backfilled = lane.backfill.get(&head.job).copied().unwrap_or(0);
        let freeable = (lower + backfilled).min(usage);
        if (in_share || backfilled > 0) && usage - freeable + c <= entitlement {
            return c.min(own_room);
        }
    }
    // Every waiting job that fits the idle entitlement, not only the first: a borrower given
    // the room of the second would be reclaimed by it later in the same pass.
    lane.pending.demand_within(own_room)
}

/// Whether an attempt checkpoints regularly and is on time: it checkpointed twice or more and
/// its next checkpoint is not overdue. Only such a victim is worth waiting for; one that
/// stopped checkpointing (it waits on something, or never did) is taken at once.
fn keeps_checkpointing(att: &Attempt, now: Millis) -> bool {
    att.checkpoint_gap
        .is_some_and(|g| g > 0 && now <= att.progress_at.saturating_add(2 * g))
}

/// The pressure once share `s` holds `c` more instances.
fn with_usage(ceiling: &Ceiling, accounts: &[Account], s: usize, c: u32) -> Pressure {
    let mut acc = accounts.to_vec();
    acc[s].usage += c;
    ledger::pressure(ceiling, &acc)
}
