//! Benchmarks of the scheduling core (divan; run with `cargo bench -p qm-core --bench core`).
//!
//! Every scenario uses one queue whose service environment has 5 instance types × 2,000
//! instances (10,000 instances), and 20 quota shares each entitled to 100 instances of every
//! type: shares 0–13 LEND_AND_BORROW (unlimited borrow limit), 14–16 LEND, 17–19 RESERVE.
//! Jobs are single-instance; job `i` goes to share `i % 20` and type `(i / 20) % 5`, with
//! priority `(i / 100) % 10`. No in-share preemption.
//!
//! * `submit_million`: applies `Submit` for 1,000,000 jobs to the configured, empty scheduler
//!   (no pass). Counter: submissions.
//! * `drain_million`: the 1,000,000 jobs are submitted untimed; the timed part runs the first
//!   pass (which fills the 10,000 instances), then finishes the oldest running attempt (FIFO),
//!   one at a time — `apply(AttemptExited { Succeeded })`, `forget(job)`, `schedule(now)` —
//!   until every job has succeeded. The clock advances 1 ms per exit. Counter: start
//!   decisions (1,000,000), so divan's throughput is start decisions per second.
//!   Target: ≥ 200,000 starts/s.
//! * `reclaim_decision`: 10,000 running jobs, the cluster full; shares 0–2 each borrow 100
//!   instances of every type from the idle LEND shares 14–16. Timed: one `step(Submit)` of a
//!   job of share 14, whose pass preempts exactly one borrower (a `Stop`). Each sample works
//!   on its own clone of the prepared scheduler (cloned untimed). Target: < 100 µs.
//! * `pass_100k_runnable::one_exit`: the cluster full (10,000 running, every share at its
//!   entitlement) and 100,000 jobs waiting across the shares. Timed: one event — the oldest
//!   attempt exits, `apply` + `schedule` — whose pass starts exactly one job. Untimed between
//!   events: one new job is submitted (and its lane passed) so the number waiting stays
//!   constant, and the finished job is forgotten.
//! * `pass_100k_runnable::put_share`: same state; timed: `apply(PutShare)` (toggling share
//!   0's borrow limit between unlimited and 200 %) + `schedule`. A configuration change
//!   re-examines every waiting job (O(waiting)); it starts nothing since the cluster is full.
//! * `single_event_scaling`: `one_exit` with 10,000 / 100,000 / 1,000,000 jobs waiting. The
//!   time per event should not grow with the number of jobs.
//! * `drain_million_fair`, `reclaim_decision_fair`: the same under `FAIR_SHARE` idle
//!   assignment (issue 21), share `s` weighing `1 + s % 3`.
//!
//! When run without `--bench` (e.g. `cargo test --all-targets`, divan's test mode, usually a
//! debug build) the job counts are divided by 100 so that the smoke run stays quick.

use std::cell::RefCell;
use std::collections::VecDeque;

use divan::counter::ItemsCount;
use divan::Bencher;
use qm_core::{
    AttemptId, Effect, Exit, IdleAssignment, Input, JobId, JobSpec, Millis, Policy, QueueSpec,
    Scheduler, ShareSpec, Strategy,
};

fn main() {
    divan::main();
}

const QUEUE: &str = "bench";
const UNITS: [&str; 5] = [
    "ml.g5.xlarge",
    "ml.g5.12xlarge",
    "ml.p4d.24xlarge",
    "ml.p5.48xlarge",
    "ml.trn1.32xlarge",
];
const SHARES: usize = 20;
const ENTITLEMENT: u32 = 100;
const ENVIRONMENT: u32 = ENTITLEMENT * SHARES as u32;
/// Instances in the environment: 5 × 2,000.
const INSTANCES: usize = ENVIRONMENT as usize * UNITS.len();
const MILLION: usize = 1_000_000;

/// Whether this is a real benchmark run (`cargo bench` passes `--bench`), not divan's test mode.
fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A job count, divided by 100 in test mode.
fn sized(n: usize) -> usize {
    if full_run() {
        n
    } else {
        n / 100
    }
}

fn share_name(s: usize) -> String {
    format!("team-{s:02}")
}

fn strategy(s: usize) -> Strategy {
    match s {
        0..=13 => Strategy::LendAndBorrow,
        14..=16 => Strategy::Lend,
        _ => Strategy::Reserve,
    }
}

fn share_spec(s: usize) -> ShareSpec {
    let mut spec = ShareSpec::new(share_name(s));
    spec.limits = UNITS.iter().map(|u| (u.to_string(), ENTITLEMENT)).collect();
    spec.strategy = strategy(s);
    spec.borrow_limit_percent = -1;
    spec
}

/// The queue and its 20 shares, no jobs.
fn configured() -> Scheduler {
    configured_in(IdleAssignment::Fifo)
}

/// [`configured`] with the given idle assignment; under `FAIR_SHARE` share `s` has weight
/// `1 + s % 3`.
fn configured_in(mode: IdleAssignment) -> Scheduler {
    let mut s = Scheduler::new(Policy::default());
    s.step(
        0,
        Input::PutQueue(QueueSpec {
            name: QUEUE.into(),
            environment: UNITS.iter().map(|u| (u.to_string(), ENVIRONMENT)).collect(),
            idle_assignment: mode,
            ..Default::default()
        }),
    )
    .expect("queue");
    for sh in 0..SHARES {
        s.step(
            0,
            Input::PutShare {
                queue: QUEUE.into(),
                share: ShareSpec {
                    weight: if mode == IdleAssignment::FairShare {
                        1 + (sh % 3) as u32
                    } else {
                        1
                    },
                    ..share_spec(sh)
                },
            },
        )
        .expect("share");
    }
    s
}

/// Job `i` of the standard distribution.
fn job(i: u64) -> JobSpec {
    let i_us = i as usize;
    job_at(i, i_us % SHARES, (i_us / SHARES) % UNITS.len(), prio(i))
}

fn prio(i: u64) -> u32 {
    ((i / 100) % 10) as u32
}

fn job_at(id: u64, share: usize, unit: usize, priority: u32) -> JobSpec {
    let mut spec = JobSpec::new(JobId(id), QUEUE, share_name(share), UNITS[unit]);
    spec.priority = priority;
    spec
}

fn submit(s: &mut Scheduler, now: Millis, spec: JobSpec) {
    s.apply(now, Input::Submit(spec)).expect("submit");
}

/// Appends the attempts that `fx` starts to `running`; returns how many.
fn record_starts(fx: &[Effect], running: &mut VecDeque<(AttemptId, JobId)>) -> usize {
    let before = running.len();
    for e in fx {
        if let Effect::Start { job, attempt, .. } = e {
            running.push_back((*attempt, *job));
        }
    }
    running.len() - before
}

fn succeeded(attempt: AttemptId) -> Input {
    Input::AttemptExited {
        attempt,
        exit: Exit::Succeeded,
    }
}

// ---------------------------------------------------------------------------------------------
// (a) one million jobs

#[divan::bench(sample_count = 1, sample_size = 1)]
fn submit_million(bencher: Bencher) {
    let n = sized(MILLION);
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| (configured(), (0..n as u64).map(job).collect::<Vec<_>>()))
        .bench_local_values(|(mut s, specs)| {
            for spec in specs {
                submit(&mut s, 0, spec);
            }
            s
        });
}

#[divan::bench(sample_count = 1, sample_size = 1)]
fn drain_million(bencher: Bencher) {
    drain_million_in(bencher, IdleAssignment::Fifo);
}

/// `drain_million` under `FAIR_SHARE` (issue 21): every borrower start ranks the borrowing
/// shares by weighted share.
#[divan::bench(sample_count = 1, sample_size = 1)]
fn drain_million_fair(bencher: Bencher) {
    drain_million_in(bencher, IdleAssignment::FairShare);
}

fn drain_million_in(bencher: Bencher, mode: IdleAssignment) {
    let n = sized(MILLION);
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| {
            let mut s = configured_in(mode);
            for i in 0..n as u64 {
                submit(&mut s, 0, job(i));
            }
            s
        })
        .bench_local_values(|mut s| {
            let starts = drain(&mut s);
            assert_eq!(starts, n, "every job started exactly once");
            assert_eq!(s.job_count(), 0, "every job finished and was forgotten");
            s
        });
}

/// Runs every submitted job to completion, finishing the oldest running attempt first, one
/// event at a time; returns the number of start decisions.
fn drain(s: &mut Scheduler) -> usize {
    let mut now: Millis = 0;
    let mut running = VecDeque::with_capacity(INSTANCES);
    let mut starts = record_starts(&s.schedule(now), &mut running);
    while let Some((attempt, job)) = running.pop_front() {
        now += 1;
        s.apply(now, succeeded(attempt)).expect("exit");
        s.forget(job);
        starts += record_starts(&s.schedule(now), &mut running);
    }
    starts
}

// ---------------------------------------------------------------------------------------------
// (b) one reclaim decision among 10,000 running jobs

#[divan::bench(sample_count = 200, sample_size = 1)]
fn reclaim_decision(bencher: Bencher) {
    reclaim_decision_in(bencher, IdleAssignment::Fifo);
}

/// `reclaim_decision` under `FAIR_SHARE` (issue 21).
#[divan::bench(sample_count = 200, sample_size = 1)]
fn reclaim_decision_fair(bencher: Bencher) {
    reclaim_decision_in(bencher, IdleAssignment::FairShare);
}

fn reclaim_decision_in(bencher: Bencher, mode: IdleAssignment) {
    let prepared = borrowed_cluster(mode);
    let now = 3_000;
    let owner_job = || job_at(u64::MAX, 14, 0, 0);
    // Check the scenario once, untimed: exactly one preemption, consistent state.
    {
        let mut s = prepared.clone();
        let fx = s.step(now, Input::Submit(owner_job())).expect("submit");
        let stops = fx
            .iter()
            .filter(|e| matches!(e, Effect::Stop { .. }))
            .count();
        assert_eq!(stops, 1, "the owner's job reclaims one instance: {fx:?}");
        s.check_invariants().expect("invariants after reclaim");
    }
    bencher
        .with_inputs(|| (prepared.clone(), owner_job()))
        .bench_local_values(|(mut s, spec)| {
            let fx = s.step(now, Input::Submit(spec)).expect("submit");
            (s, fx)
        });
}

/// 10,000 running jobs; shares 0–2 borrow 100 instances of every type each from the idle
/// LEND shares 14–16, every other non-LEND share runs at its entitlement.
fn borrowed_cluster(mode: IdleAssignment) -> Scheduler {
    let mut s = configured_in(mode);
    let mut id = 0u64;
    let mut running = VecDeque::new();
    // Own capacity first, then the borrowers' extra jobs (their starts are later, so they
    // differ in work lost).
    for (phase, now) in [(0usize, 0), (1, 1_000)] {
        for unit in 0..UNITS.len() {
            for k in 0..ENTITLEMENT as usize {
                for sh in 0..SHARES {
                    let submits = match phase {
                        0 => !strategy(sh).lends() || strategy(sh).borrows(),
                        _ => sh < 3,
                    };
                    if submits {
                        submit(&mut s, now, job_at(id, sh, unit, (k % 10) as u32));
                        id += 1;
                    }
                }
            }
        }
        record_starts(&s.schedule(now), &mut running);
    }
    assert_eq!(running.len(), INSTANCES, "the cluster is full");
    s.check_invariants()
        .expect("invariants of the borrowed cluster");
    s
}

// ---------------------------------------------------------------------------------------------
// (c), (d) one event among many waiting jobs

/// A full cluster with jobs waiting, driven one event at a time.
struct Live {
    s: Scheduler,
    /// Running attempts, oldest first.
    running: VecDeque<(AttemptId, JobId)>,
    /// Finished jobs to forget before the next event.
    finished: Vec<JobId>,
    next_id: u64,
}

const NOW: Millis = 1_000;

/// The cluster full (every share at its entitlement on every type) and `waiting` jobs queued.
fn full_cluster(waiting: usize) -> Live {
    let mut s = configured();
    let total = (INSTANCES + waiting) as u64;
    for i in 0..total {
        submit(&mut s, 0, job(i));
    }
    let mut running = VecDeque::with_capacity(INSTANCES);
    let started = record_starts(&s.schedule(0), &mut running);
    assert_eq!(started, INSTANCES, "the first pass fills the cluster");
    if waiting <= 100_000 {
        s.check_invariants()
            .expect("invariants of the full cluster");
    }
    Live {
        s,
        running,
        finished: Vec::new(),
        next_id: total,
    }
}

/// Times one event (the oldest attempt exits; `apply` + `schedule`) that starts one job.
fn one_exit_per_event(bencher: Bencher, waiting: usize) {
    let live = RefCell::new(full_cluster(waiting));
    bencher
        .with_inputs(|| {
            let mut l = live.borrow_mut();
            let l = &mut *l;
            for j in l.finished.drain(..) {
                l.s.forget(j);
            }
            // Keep the number of waiting jobs constant: one new job per event, its lane passed
            // here so that the timed pass sees only the exit.
            let id = l.next_id;
            l.next_id += 1;
            submit(&mut l.s, NOW, job(id));
            let fx = l.s.schedule(NOW);
            assert!(fx.is_empty(), "the cluster is full: {fx:?}");
            l.running.pop_front().expect("a running attempt")
        })
        .bench_local_values(|(attempt, job)| {
            let mut l = live.borrow_mut();
            let l = &mut *l;
            let exited = l.s.apply(NOW, succeeded(attempt)).expect("exit");
            let fx = l.s.schedule(NOW);
            let started = record_starts(&fx, &mut l.running);
            assert_eq!(started, 1, "the exit lets exactly one job start: {fx:?}");
            l.finished.push(job);
            (exited, fx)
        });
    let l = live.into_inner();
    if waiting <= 100_000 {
        l.s.check_invariants().expect("invariants after the events");
    }
}

mod pass_100k_runnable {
    use super::*;

    /// One attempt exits with 100,000 jobs waiting; the pass starts exactly one.
    #[divan::bench(sample_count = 100, sample_size = 20)]
    fn one_exit(bencher: Bencher) {
        one_exit_per_event(bencher, sized(100_000));
    }

    /// A configuration change (PutShare) with 100,000 jobs waiting: re-examines all of them.
    #[divan::bench(sample_count = 20, sample_size = 1)]
    fn put_share(bencher: Bencher) {
        let live = RefCell::new(full_cluster(sized(100_000)));
        let toggle = RefCell::new(false);
        bencher
            .with_inputs(|| {
                let mut t = toggle.borrow_mut();
                *t = !*t;
                let mut spec = share_spec(0);
                spec.borrow_limit_percent = if *t { 200 } else { -1 };
                Input::PutShare {
                    queue: QUEUE.into(),
                    share: spec,
                }
            })
            .bench_local_values(|input| {
                let mut l = live.borrow_mut();
                let mut fx = l.s.apply(NOW, input).expect("put share");
                fx.extend(l.s.schedule(NOW));
                assert!(fx.is_empty(), "the cluster is full: {fx:?}");
                fx
            });
    }
}

/// One attempt exits with 10,000 / 100,000 / 1,000,000 jobs waiting: should stay flat.
#[divan::bench(args = [10_000, 100_000, 1_000_000], sample_count = 100, sample_size = 20)]
fn single_event_scaling(bencher: Bencher, waiting: usize) {
    one_exit_per_event(bencher, sized(waiting));
}
