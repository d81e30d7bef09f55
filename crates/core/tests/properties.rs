//! Property tests: random sequences of every input, with the invariants and the rules'
//! guarantees checked after every step by code that recomputes them from the public views
//! (not from the core's own ledger).

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use qm_core::Strategy as Sharing;
use qm_core::{
    AttemptId, CoreError, Effect, Exit, GroupSpec, IdleAssignment, IdleCause, Input, JobId,
    JobSpec, JobStatus, Millis, PendingReason, Policy, QueueSpec, Scheduler, ShareSpec, StopCause,
};

const Q: &str = "q";
const UNITS: [&str; 2] = ["ml.g5.xlarge", "ml.p4d.24xlarge"];

#[derive(Clone, Debug)]
struct Config {
    env: [u32; 2],
    shares: Vec<ShareSpec>,
    /// Issue 21's rules for idle capacity (FIFO, no fair reclaim, no groups by default).
    idle: IdleAssignment,
    fair_reclaim: bool,
    groups: Vec<GroupSpec>,
}

#[derive(Clone, Debug)]
enum Op {
    Submit {
        share: usize,
        unit: usize,
        count: u32,
        priority: u32,
        retries: Option<u32>,
        /// Runtime bound, seconds (EASY backfill).
        bound: Option<u64>,
    },
    Finish(usize),
    Fail(usize),
    Checkpoint(usize),
    Priority(usize, u32),
    Terminate(usize),
    Advance(u64),
    Release,
    UpdateShare {
        share: usize,
        limits: [Option<u32>; 2],
        strategy: Sharing,
        borrow: i32,
        in_share: bool,
        enabled: bool,
    },
}

fn strategy() -> impl Strategy<Value = Sharing> {
    prop_oneof![
        Just(Sharing::Reserve),
        Just(Sharing::Lend),
        Just(Sharing::LendAndBorrow)
    ]
}

fn borrow_limit() -> impl Strategy<Value = i32> {
    prop_oneof![Just(-1), 0..300i32]
}

fn limits() -> impl Strategy<Value = [Option<u32>; 2]> {
    limits_up_to(4)
}

fn limits_up_to(n: u32) -> impl Strategy<Value = [Option<u32>; 2]> {
    [
        proptest::option::weighted(0.85, 0..n),
        proptest::option::weighted(0.6, 0..4u32),
    ]
}

fn share_spec(
    i: usize,
    limits: [Option<u32>; 2],
    s: Sharing,
    borrow: i32,
    in_share: bool,
    enabled: bool,
) -> ShareSpec {
    let mut spec = ShareSpec::new(format!("S{i}"));
    for (u, l) in limits.iter().enumerate() {
        if let Some(l) = l {
            spec.limits.insert(UNITS[u].to_string(), *l);
        }
    }
    spec.strategy = s;
    spec.borrow_limit_percent = if s == Sharing::LendAndBorrow {
        borrow
    } else {
        -1
    };
    spec.in_share_preemption = in_share;
    spec.enabled = enabled;
    // Thrash protection on two of the shares, so that every property also holds with it.
    if i == 1 {
        spec.min_runtime_ms = 300_000;
    }
    if i == 2 {
        spec.max_preemptions_per_hour = 1;
    }
    spec
}

fn config() -> impl Strategy<Value = Config> {
    sized_config(10, 4)
}

/// A larger environment and limits than `config`: more jobs run at once, so that victim
/// searches have many candidates.
fn wide_config() -> impl Strategy<Value = Config> {
    sized_config(16, 8)
}

fn sized_config(env: u32, limit: u32) -> impl Strategy<Value = Config> {
    (
        [1..env, 1..6u32],
        prop::collection::vec(
            (
                limits_up_to(limit),
                strategy(),
                borrow_limit(),
                any::<bool>(),
            ),
            2..5,
        ),
    )
        .prop_map(|(env, shares)| Config {
            env,
            shares: shares
                .into_iter()
                .enumerate()
                .map(|(i, (l, s, b, p))| share_spec(i, l, s, b, p, true))
                .collect(),
            idle: IdleAssignment::Fifo,
            fair_reclaim: false,
            groups: Vec::new(),
        })
}

/// Issue 21: FAIR_SHARE with weights 1 to 3, no in-share preemption (its jobs are decided
/// strictly in order, not ranked with the borrowers) and no groups (whose members borrow
/// their idle capacity first, whatever the figures): what the admission property is about.
fn fair_config() -> impl Strategy<Value = Config> {
    (config(), prop::collection::vec(1..4u32, 4)).prop_map(|(mut cfg, weights)| {
        cfg.idle = IdleAssignment::FairShare;
        for (spec, w) in cfg.shares.iter_mut().zip(weights) {
            spec.weight = w;
            spec.in_share_preemption = false;
        }
        cfg
    })
}

/// Issue 21's other rules: either assignment, fair reclaim or not, and up to two groups with
/// random members, weights and limits.
fn grouped_config() -> impl Strategy<Value = Config> {
    (
        config(),
        prop::collection::vec(1..4u32, 4),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(
            (
                prop::collection::vec(0..4usize, 1..3),
                1..3u32,
                proptest::option::weighted(0.7, 0..6u32),
            ),
            0..3,
        ),
    )
        .prop_map(|(mut cfg, weights, fair, reclaim, groups)| {
            if fair {
                cfg.idle = IdleAssignment::FairShare;
            }
            cfg.fair_reclaim = reclaim;
            for (spec, w) in cfg.shares.iter_mut().zip(weights) {
                spec.weight = w;
            }
            let mut taken = std::collections::BTreeSet::new();
            for (g, (members, weight, limit)) in groups.into_iter().enumerate() {
                let shares: Vec<String> = members
                    .into_iter()
                    .map(|m| m % cfg.shares.len())
                    .filter(|m| taken.insert(*m))
                    .map(|m| cfg.shares[m].name.clone())
                    .collect();
                if shares.is_empty() {
                    continue;
                }
                cfg.groups.push(GroupSpec {
                    name: format!("G{g}"),
                    shares,
                    limits: limit
                        .map(|l| (UNITS[0].to_string(), l))
                        .into_iter()
                        .collect(),
                    weight,
                });
            }
            cfg
        })
}

fn op(updates: bool) -> BoxedStrategy<Op> {
    let base = prop_oneof![
        6 => (0..4usize, prop::sample::select(vec![0usize, 0, 0, 1]), 1..4u32, 0..4u32, proptest::option::weighted(0.3, 0..3u32), proptest::option::weighted(0.3, 1..2400u64))
            .prop_map(|(share, unit, count, priority, retries, bound)| Op::Submit { share, unit, count, priority, retries, bound }),
        3 => any::<usize>().prop_map(Op::Finish),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::Checkpoint),
        2 => (any::<usize>(), 0..5u32).prop_map(|(j, p)| Op::Priority(j, p)),
        1 => any::<usize>().prop_map(Op::Terminate),
        1 => (0..1200u64).prop_map(Op::Advance),
        2 => Just(Op::Release),
    ];
    if !updates {
        return base.boxed();
    }
    prop_oneof![
        10 => base,
        1 => (0..4usize, limits(), strategy(), borrow_limit(), any::<bool>(), prop::bool::weighted(0.8))
            .prop_map(|(share, limits, strategy, borrow, in_share, enabled)| Op::UpdateShare { share, limits, strategy, borrow, in_share, enabled }),
    ]
    .boxed()
}

/// Ops that keep many small jobs running (few finish), for searches with many candidates.
fn dense_op() -> BoxedStrategy<Op> {
    prop_oneof![
        10 => (0..4usize, prop::sample::select(vec![0usize, 0, 0, 1]), 1..3u32, 0..4u32)
            .prop_map(|(share, unit, count, priority)| Op::Submit { share, unit, count, priority, retries: None, bound: None }),
        1 => any::<usize>().prop_map(Op::Finish),
        1 => any::<usize>().prop_map(Op::Checkpoint),
        3 => (any::<usize>(), 0..5u32).prop_map(|(j, p)| Op::Priority(j, p)),
        1 => (0..1200u64).prop_map(Op::Advance),
        2 => Just(Op::Release),
        1 => (0..4usize, limits_up_to(8), strategy(), borrow_limit(), any::<bool>(), Just(true))
            .prop_map(|(share, limits, strategy, borrow, in_share, enabled)| Op::UpdateShare { share, limits, strategy, borrow, in_share, enabled }),
    ]
    .boxed()
}

/// Runs the scheduler through the ops, checking every property after every step; returns the
/// effect log (for the determinism property).
#[derive(Clone)]
struct Run {
    s: Scheduler,
    cfg: Config,
    now: Millis,
    jobs: Vec<JobId>,
    stopping: Vec<AttemptId>,
    log: Vec<Effect>,
    /// No share was updated yet: the state must be admissible in the absolute sense.
    pristine: bool,
    /// Check every victim search against brute force (slow).
    brute: bool,
}

/// One share's (entitlement, usage, strategy, allowance) on one unit.
type Row = (u32, u32, Sharing, Option<u32>);
/// Per unit, every share's row.
type Rows = [Vec<Row>];
/// Per (unit, share): its first waiting job, the job's count, and whether it may borrow.
type Heads = BTreeMap<(usize, usize), (JobId, u32, bool)>;

/// Per unit, per share: (entitlement, usage, strategy, allowance) recomputed from views.
fn accounts(s: &Scheduler, cfg: &Config, unit: usize) -> Vec<(u32, u32, Sharing, Option<u32>)> {
    let usage = s.usage(Q).unwrap();
    let firm = own_only_by_share(s);
    cfg.shares
        .iter()
        .map(|spec| {
            // A lowered limit applies to jobs that may not be interrupted only as they end.
            let held = firm.get(&(spec.name.clone(), UNITS[unit].to_string()));
            let ent = spec
                .limits
                .get(UNITS[unit])
                .copied()
                .unwrap_or(0)
                .max(held.copied().unwrap_or(0));
            let used = usage
                .iter()
                .find(|u| u.share == spec.name && u.instance_type == UNITS[unit])
                .map_or(0, |u| u.usage);
            (ent, used, spec.strategy, spec.borrow_allowance(ent))
        })
        .collect()
}

/// Instances each (share, unit) holds with attempts that run only within their share's own
/// quota — jobs that may not be interrupted, or may not borrow (stopping attempts included:
/// they hold their instances until they exit).
fn own_only_by_share(s: &Scheduler) -> BTreeMap<(String, String), u32> {
    let mut firm: BTreeMap<(String, String), u32> = BTreeMap::new();
    for id in s.job_ids() {
        let j = s.job(id).unwrap();
        for a in [j.attempt, j.stopping].into_iter().flatten() {
            let Some(a) = s.attempt(a).filter(|a| a.own_only()) else {
                continue;
            };
            *firm
                .entry((j.spec.share.clone(), j.spec.instance_type.clone()))
                .or_default() += a.count;
        }
    }
    firm
}

fn own_only_held(s: &Scheduler, share: &str, unit: &str) -> u32 {
    own_only_by_share(s)
        .get(&(share.to_string(), unit.to_string()))
        .copied()
        .unwrap_or(0)
}

/// How far a unit is over each constraint (> 0 means over), recomputed from the views.
#[derive(Clone, Debug)]
struct Pressure {
    environment: i64,
    /// `Σ borrowed - Σ lendable idle`: borrowed instances not backed by lenders' idle capacity.
    lending: i64,
    /// Per share: `borrowed - allowance`.
    borrowing: Vec<i64>,
}

fn pressure(env: u32, acc: &[(u32, u32, Sharing, Option<u32>)]) -> Pressure {
    let total: i64 = acc.iter().map(|a| a.1 as i64).sum();
    let borrowed: i64 = acc.iter().map(|a| a.1.saturating_sub(a.0) as i64).sum();
    let lendable: i64 = acc
        .iter()
        .filter(|a| a.2.lends())
        .map(|a| a.0.saturating_sub(a.1) as i64)
        .sum();
    Pressure {
        environment: total - env as i64,
        lending: borrowed - lendable,
        borrowing: acc
            .iter()
            .map(|a| match a.3 {
                Some(allow) => a.1.saturating_sub(a.0) as i64 - allow as i64,
                None => i64::MIN / 2,
            })
            .collect(),
    }
}

fn not_worse(before: &Pressure, after: &Pressure) -> Result<(), String> {
    let w = |b: i64, a: i64| a > b.max(0);
    if w(before.environment, after.environment) {
        return Err(format!(
            "environment pressure {} -> {}",
            before.environment, after.environment
        ));
    }
    if w(before.lending, after.lending) {
        return Err(format!(
            "lending pressure {} -> {} (borrowed instances on capacity that is not lendable)",
            before.lending, after.lending
        ));
    }
    for (i, (b, a)) in before.borrowing.iter().zip(&after.borrowing).enumerate() {
        if w(*b, *a) {
            return Err(format!("share S{i} borrow pressure {b} -> {a}"));
        }
    }
    Ok(())
}

impl Run {
    fn new(cfg: Config) -> Self {
        let mut s = Scheduler::new(Policy {
            reserve_after_ms: 900_000,
            ..Default::default()
        });
        let environment = UNITS
            .iter()
            .zip(cfg.env)
            .map(|(u, n)| (u.to_string(), n))
            .collect();
        s.step(
            0,
            Input::PutQueue(QueueSpec {
                name: Q.into(),
                environment,
                idle_assignment: cfg.idle,
                fair_reclaim: cfg.fair_reclaim,
                groups: cfg.groups.clone(),
            }),
        )
        .unwrap();
        for spec in &cfg.shares {
            s.step(
                0,
                Input::PutShare {
                    queue: Q.into(),
                    share: spec.clone(),
                },
            )
            .unwrap();
        }
        Run {
            s,
            cfg,
            now: 0,
            jobs: Vec::new(),
            stopping: Vec::new(),
            log: Vec::new(),
            brute: false,
            pristine: true,
        }
    }

    fn pick(&self, i: usize) -> Option<JobId> {
        if self.jobs.is_empty() {
            None
        } else {
            Some(self.jobs[i % self.jobs.len()])
        }
    }

    fn running_attempt(&self, i: usize) -> Option<AttemptId> {
        self.pick(i)
            .and_then(|j| self.s.job(j))
            .and_then(|j| j.attempt)
            .filter(|a| self.s.attempt(*a).is_some_and(|a| a.stopping.is_none()))
    }

    /// Translates an op into inputs (applied, not yet scheduled).
    fn apply(&mut self, op: &Op) -> Result<Vec<Effect>, TestCaseError> {
        let mut fx = Vec::new();
        let mut input = |s: &mut Scheduler, now, i: Input| -> Result<(), TestCaseError> {
            match s.apply(now, i) {
                Ok(mut f) => {
                    fx.append(&mut f);
                    Ok(())
                }
                Err(CoreError::ShareDisabled { .. }) => Ok(()),
                Err(e) => Err(TestCaseError::fail(format!("unexpected error {e}"))),
            }
        };
        match op {
            Op::Submit {
                share,
                unit,
                count,
                priority,
                retries,
                bound,
            } => {
                let share = &self.cfg.shares[share % self.cfg.shares.len()];
                let id = JobId(self.jobs.len() as u64 + 1);
                let mut spec = JobSpec::new(id, Q, share.name.clone(), UNITS[*unit]);
                spec.count = *count;
                spec.priority = *priority;
                spec.preemption_retries = *retries;
                spec.runtime_limit_ms = bound.map(|s| s * 1000);
                spec.attempts = 2;
                // Every fifth job may not be interrupted (issue 19's interruption contracts).
                spec.interruptible = !id.0.is_multiple_of(5);
                // And every seventh may not borrow (a class not yet verified).
                spec.borrows = !id.0.is_multiple_of(7);
                if share.enabled {
                    self.jobs.push(id);
                }
                input(&mut self.s, self.now, Input::Submit(spec))?;
            }
            Op::Finish(i) | Op::Fail(i) => {
                if let Some(a) = self.running_attempt(*i) {
                    let exit = if matches!(op, Op::Finish(_)) {
                        Exit::Succeeded
                    } else {
                        Exit::Failed {
                            reason: "AlgorithmError".into(),
                            retryable: true,
                        }
                    };
                    input(
                        &mut self.s,
                        self.now,
                        Input::AttemptExited { attempt: a, exit },
                    )?;
                }
            }
            Op::Checkpoint(i) => {
                if let Some(j) = self.pick(*i) {
                    input(&mut self.s, self.now, Input::Checkpoint { job: j })?;
                }
            }
            Op::Priority(i, p) => {
                if let Some(j) = self
                    .pick(*i)
                    .filter(|j| !self.s.job(*j).unwrap().status.is_final())
                {
                    input(
                        &mut self.s,
                        self.now,
                        Input::UpdatePriority {
                            job: j,
                            priority: *p,
                        },
                    )?;
                }
            }
            Op::Terminate(i) => {
                if let Some(j) = self.pick(*i) {
                    input(
                        &mut self.s,
                        self.now,
                        Input::Terminate {
                            job: j,
                            reason: "test".into(),
                        },
                    )?;
                }
            }
            Op::Advance(secs) => self.now += secs * 1000,
            Op::Release => {
                for a in std::mem::take(&mut self.stopping) {
                    let exit = Exit::Failed {
                        reason: "stopped".into(),
                        retryable: false,
                    };
                    input(
                        &mut self.s,
                        self.now,
                        Input::AttemptExited { attempt: a, exit },
                    )?;
                }
            }
            Op::UpdateShare {
                share,
                limits,
                strategy,
                borrow,
                in_share,
                enabled,
            } => {
                let i = share % self.cfg.shares.len();
                let spec = share_spec(i, *limits, *strategy, *borrow, *in_share, *enabled);
                self.cfg.shares[i] = spec.clone();
                self.pristine = false;
                input(
                    &mut self.s,
                    self.now,
                    Input::PutShare {
                        queue: Q.into(),
                        share: spec,
                    },
                )?;
            }
        }
        Ok(fx)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let mut fx = self.apply(op)?;
        self.s.check_invariants().map_err(TestCaseError::fail)?;
        if self.brute {
            // Before the pass, too: a new job or a changed share is when victim sets exist.
            self.check_victims_by_brute_force()?;
        }
        let before: Vec<_> = (0..2)
            .map(|u| pressure(self.cfg.env[u], &accounts(&self.s, &self.cfg, u)))
            .collect();
        let before_acc: Vec<_> = (0..2).map(|u| accounts(&self.s, &self.cfg, u)).collect();
        let fair_check = self.fair_admission_case();
        let stopping_before = self.stopping.clone();
        let decided = self.s.schedule(self.now);
        self.s.check_invariants().map_err(TestCaseError::fail)?;
        self.check_idle_while_waiting()?;
        if self.pristine {
            self.check_firm_within_entitlement()?;
        }
        self.check_flows()?;
        for (u, before) in before.iter().enumerate() {
            let acc = accounts(&self.s, &self.cfg, u);
            let after = pressure(self.cfg.env[u], &acc);
            // No admission breaks or worsens a constraint (lowered limits are reclaimed lazily).
            not_worse(before, &after).map_err(|e| TestCaseError::fail(format!("unit {u}: {e}")))?;
            if self.pristine {
                // Without configuration changes, the state is admissible outright: usage within
                // the environment, borrowed instances backed by lenders' idle capacity, every
                // share within its borrow limit.
                prop_assert!(
                    after.environment <= 0,
                    "usage exceeds the environment limit: {:?}",
                    acc
                );
                prop_assert!(
                    after.lending <= 0,
                    "borrowers use capacity that is not lendable: {:?}",
                    acc
                );
                prop_assert!(
                    after.borrowing.iter().all(|p| *p <= 0),
                    "a share exceeds its borrow limit: {:?}",
                    acc
                );
                // RESERVE shares' idle capacity is never used by others: whenever the shares'
                // limits fit the environment, it stays physically free.
                let entitled: u32 = acc.iter().map(|a| a.0).sum();
                if entitled <= self.cfg.env[u] {
                    let used: u32 = acc.iter().map(|a| a.1).sum();
                    let reserved_idle: u32 = acc
                        .iter()
                        .filter(|a| a.2 == Sharing::Reserve)
                        .map(|a| a.0.saturating_sub(a.1))
                        .sum();
                    prop_assert!(
                        used + reserved_idle <= self.cfg.env[u],
                        "a RESERVE share's idle instance is in use by another share: {:?}",
                        acc
                    );
                }
            }
        }
        // Shares that started a job in this pass: their borrowed count before the pass says
        // nothing about the moment a later decision of the same pass reclaimed from them.
        let started: Vec<String> = decided
            .iter()
            .filter_map(|e| match e {
                Effect::Start { job, .. } => Some(self.s.job(*job).unwrap().spec.share.clone()),
                _ => None,
            })
            .collect();
        for e in &decided {
            if let Effect::Stop {
                job,
                attempt,
                cause,
            } = e
            {
                let victim = self.s.job(*job).unwrap();
                prop_assert!(
                    victim.spec.interruptible || !cause.is_preemption(),
                    "a job that may not be interrupted was preempted: {:?}",
                    cause
                );
                let victim_priority = victim.spec.priority;
                // A job backfilled onto an aged head's reservation may be preempted for that
                // head whatever its share and priority (the starvation guard).
                let backfilled_for = |for_job: &JobId| {
                    self.s.attempt(*attempt).and_then(|a| a.backfill_for) == Some(*for_job)
                };
                match cause {
                    StopCause::InShare { for_job } => {
                        let p = self.s.job(*for_job).unwrap();
                        prop_assert_eq!(&p.spec.share, &victim.spec.share);
                        prop_assert!(
                            victim_priority < p.spec.priority || backfilled_for(for_job),
                            "in-share preemption of equal or higher priority"
                        );
                    }
                    StopCause::Reclaim { for_job, .. } => {
                        let p = self.s.job(*for_job).unwrap();
                        prop_assert_ne!(&p.spec.share, &victim.spec.share);
                        let (u, vs) = self.place(&victim.spec.instance_type, &victim.spec.share);
                        let (ent, used, ..) = before_acc[u][vs];
                        prop_assert!(
                            used > ent
                                || started.contains(&victim.spec.share)
                                || backfilled_for(for_job),
                            "reclaimed from share {} that was not borrowing",
                            victim.spec.share
                        );
                        let ps = self
                            .cfg
                            .shares
                            .iter()
                            .position(|s| s.name == p.spec.share)
                            .unwrap();
                        prop_assert!(
                            p.spec.count <= before_acc[u][ps].0 || self.cfg.fair_reclaim,
                            "a borrower reclaimed without fair reclaim"
                        );
                    }
                    // Drills come from `Input::Drill`, never from a pass.
                    StopCause::Terminated { .. }
                    | StopCause::Drill { .. }
                    | StopCause::Requeue { .. } => {}
                }
                if cause.is_preemption() {
                    let att = self.s.attempt(*attempt).unwrap();
                    let min = self
                        .cfg
                        .shares
                        .iter()
                        .find(|s| s.name == victim.spec.share)
                        .map_or(0, |s| s.min_runtime_ms);
                    prop_assert!(
                        att.started_at + min <= self.now,
                        "preempted attempt {attempt:?} before its share's minimum run time"
                    );
                }
                self.stopping.push(*attempt);
            }
        }
        self.check_groups_within_limits(&before_acc)?;
        if self.cfg.fair_reclaim {
            self.check_fair_reclaim(&before_acc, &stopping_before, &decided)?;
        }
        if let Some(waiting) = fair_check {
            self.check_fair_admission(&before_acc, waiting, &decided)?;
        }
        fx.extend(decided);
        for e in &fx {
            if let Effect::Stop {
                attempt,
                cause: StopCause::Terminated { .. },
                ..
            } = e
            {
                if !self.stopping.contains(attempt) {
                    self.stopping.push(*attempt);
                }
            }
        }
        self.log.extend(fx);
        if self.stopping.is_empty() {
            self.check_owner_liveness()?;
        }
        Ok(())
    }

    /// Issue 21: what each group's members hold on a unit it caps stays within the limit
    /// (pristine), or no further above it than before the pass (a limit lowered by an update).
    fn check_groups_within_limits(&self, before: &Rows) -> Result<(), TestCaseError> {
        for g in &self.cfg.groups {
            for (unit, &limit) in &g.limits {
                let u = UNITS.iter().position(|x| x == unit).unwrap();
                let acc = accounts(&self.s, &self.cfg, u);
                let held = |acc: &[(u32, u32, Sharing, Option<u32>)]| -> u32 {
                    self.cfg
                        .shares
                        .iter()
                        .enumerate()
                        .filter(|(_, sh)| g.shares.contains(&sh.name))
                        .map(|(x, _)| acc[x].1)
                        .sum()
                };
                let (was, is) = (held(&before[u]), held(&acc));
                prop_assert!(
                    is <= limit.max(was),
                    "group {} holds {is} {unit} over its limit {limit} (held {was} before the pass)",
                    g.name
                );
            }
        }
        Ok(())
    }

    /// The weighted borrowed share of share `x` (or, `top`, of its group if it has one) over
    /// both units, recomputed from usage rows: `borrowed / (weight × what lending shares are
    /// entitled to)`, the largest over the units.
    fn figure(&self, acc: &Rows, x: usize, top: bool) -> f64 {
        let group = self
            .cfg
            .groups
            .iter()
            .find(|g| g.shares.contains(&self.cfg.shares[x].name))
            .filter(|_| top);
        let mut f: f64 = 0.0;
        for a in acc {
            let pool: u32 = a.iter().filter(|r| r.2.lends()).map(|r| r.0).sum();
            let pool = f64::from(pool.max(1));
            let here = match group {
                None => {
                    f64::from(a[x].1.saturating_sub(a[x].0))
                        / (f64::from(self.cfg.shares[x].weight) * pool)
                }
                Some(g) => {
                    let (mut used, mut ent) = (0u32, 0u32);
                    for (m, sh) in self.cfg.shares.iter().enumerate() {
                        if g.shares.contains(&sh.name) {
                            used += a[m].1;
                            ent += a[m].0;
                        }
                    }
                    f64::from(used.saturating_sub(ent)) / (f64::from(g.weight) * pool)
                }
            };
            f = f.max(here);
        }
        f
    }

    /// Whether shares `a` and `b` are compared by their groups' figures (they part at the top).
    fn compared_at_top(&self, a: usize, b: usize) -> bool {
        let group = |x: usize| {
            self.cfg
                .groups
                .iter()
                .position(|g| g.shares.contains(&self.cfg.shares[x].name))
        };
        group(a).is_none() || group(a) != group(b)
    }

    /// Issue 21, fair reclaim: a borrower that preempts other shares' jobs takes only what
    /// they borrow (never a job on its share's own capacity), and afterwards its figure is at
    /// most each victim share's (`LessThanOrEqualToFinalShare`), on the usage the decision
    /// saw: attempts already stopping excluded, the pass's earlier starts included.
    fn check_fair_reclaim(
        &self,
        before: &Rows,
        stopping: &[AttemptId],
        decided: &[Effect],
    ) -> Result<(), TestCaseError> {
        let mut acc = before.to_vec();
        for a in stopping {
            if let Some(att) = self.s.attempt(*a) {
                let j = self.s.job(att.job).unwrap();
                let (u, x) = self.place(&j.spec.instance_type, &j.spec.share);
                acc[u][x].1 -= att.count;
            }
        }
        let mut i = 0;
        while i < decided.len() {
            match &decided[i] {
                Effect::Start { job, count, .. } => {
                    let j = self.s.job(*job).unwrap();
                    let (u, x) = self.place(&j.spec.instance_type, &j.spec.share);
                    acc[u][x].1 += count;
                    i += 1;
                }
                Effect::Stop {
                    cause: StopCause::Reclaim { for_job, .. },
                    ..
                } => {
                    let p = self.s.job(*for_job).unwrap();
                    let (u, ps) = self.place(&p.spec.instance_type, &p.spec.share);
                    let mut freed: BTreeMap<usize, u32> = BTreeMap::new();
                    let mut backfill_victim = false;
                    while let Some(Effect::Stop {
                        job,
                        attempt,
                        cause: StopCause::Reclaim { for_job: f, .. },
                    }) = decided.get(i)
                    {
                        if f != for_job {
                            break;
                        }
                        let v = self.s.job(*job).unwrap();
                        let (_, vs) = self.place(&v.spec.instance_type, &v.spec.share);
                        let att = self.s.attempt(*attempt).unwrap();
                        backfill_victim |= att.backfill_for == Some(*for_job);
                        *freed.entry(vs).or_default() += att.count;
                        i += 1;
                        while matches!(decided.get(i), Some(Effect::Requeued { .. })) {
                            i += 1;
                        }
                    }
                    // A borrower's reclaim is a fair one (an owner's reclaim may leave its
                    // share's lower-priority jobs above the entitlement under in-share
                    // preemption, and an aged head may take what was backfilled onto it).
                    let spec = &self.cfg.shares[ps];
                    let borrower = acc[u][ps].1 + p.spec.count > acc[u][ps].0
                        && spec.strategy.borrows()
                        && !spec.in_share_preemption
                        && !backfill_victim;
                    if borrower {
                        let mut after = acc.clone();
                        after[u][ps].1 += p.spec.count;
                        for (&vs, &n) in &freed {
                            let (ent, used, ..) = acc[u][vs];
                            prop_assert!(
                                used >= ent + n,
                                "fair reclaim took {n} from {} which borrows {}: a job on its own capacity",
                                self.cfg.shares[vs].name,
                                used.saturating_sub(ent)
                            );
                            after[u][vs].1 -= n;
                        }
                        for &vs in freed.keys() {
                            let top = self.compared_at_top(ps, vs);
                            let (mine, theirs) =
                                (self.figure(&after, ps, top), self.figure(&after, vs, top));
                            prop_assert!(
                                mine <= theirs + 1e-9,
                                "fair reclaim left {} at {mine} above its victim {} at {theirs}",
                                p.spec.share,
                                self.cfg.shares[vs].name
                            );
                            // Strictly below the victim's figure before: no flip back.
                            let was = self.figure(&acc, vs, top);
                            prop_assert!(
                                mine < was,
                                "fair reclaim took {} to {mine}, not below its victim {}'s {was}",
                                p.spec.share,
                                self.cfg.shares[vs].name
                            );
                        }
                    }
                    for (&vs, &n) in &freed {
                        acc[u][vs].1 -= n;
                    }
                }
                _ => i += 1,
            }
        }
        Ok(())
    }

    /// The waiting jobs a fair admission check compares against, when this step qualifies:
    /// FAIR_SHARE without groups, nothing stopping (no claims in play) and no head past the
    /// starvation guard (its reservation decides before fairness does). Per share, its first
    /// waiting job in share order on each unit, with its count and whether it may borrow.
    fn fair_admission_case(&self) -> Option<Heads> {
        if self.cfg.idle != IdleAssignment::FairShare || !self.cfg.groups.is_empty() {
            return None;
        }
        if !self.stopping.is_empty() {
            return None;
        }
        let mut heads: BTreeMap<(usize, usize), (std::cmp::Reverse<u32>, u64, JobId)> =
            BTreeMap::new();
        for id in self.s.job_ids() {
            let j = self.s.job(id).unwrap();
            if j.status != JobStatus::Runnable || j.stopping.is_some() {
                continue;
            }
            if self.now >= j.queued_at + 900_000 {
                return None;
            }
            if j.misconfigured.is_some() {
                continue;
            }
            let key = self.place(&j.spec.instance_type, &j.spec.share);
            let rank = (std::cmp::Reverse(j.spec.priority), j.seq, id);
            heads
                .entry(key)
                .and_modify(|r| *r = (*r).min(rank))
                .or_insert(rank);
        }
        Some(
            heads
                .into_iter()
                .map(|(k, (_, _, id))| {
                    let j = self.s.job(id).unwrap();
                    (
                        k,
                        (id, j.spec.count, j.spec.interruptible && j.spec.borrows),
                    )
                })
                .collect(),
        )
    }

    /// Issue 21, admission under FAIR_SHARE: when a share with no idle entitlement left
    /// starts a job by borrowing, no other such share's first waiting job that could have
    /// started instead (it may borrow, and the admission check would let it in on the same
    /// state) would have left that share's figure below the admitted share's. Figures are
    /// after the admission in question; "one job's worth" is the waiting job's.
    fn check_fair_admission(
        &self,
        before: &Rows,
        mut waiting: Heads,
        decided: &[Effect],
    ) -> Result<(), TestCaseError> {
        let mut acc = before.to_vec();
        for e in decided {
            let Effect::Start { job, count, .. } = e else {
                if matches!(e, Effect::Stop { .. }) {
                    return Ok(());
                }
                continue;
            };
            let j = self.s.job(*job).unwrap();
            let (u, a) = self.place(&j.spec.instance_type, &j.spec.share);
            let plain_borrow = acc[u][a].1 >= acc[u][a].0;
            if plain_borrow {
                // Other shares' waiting owners keep idle capacity from borrowers: skip.
                let owners_wait = waiting
                    .iter()
                    .any(|(&(wu, x), &(_, c, _))| wu == u && acc[u][x].1 + c <= acc[u][x].0);
                let mut after = acc.clone();
                after[u][a].1 += count;
                let mine = self.figure(&after, a, false);
                for (&(wu, b), &(other, c, may)) in &waiting {
                    if wu != u || b == a || !may || owners_wait {
                        continue;
                    }
                    let (ent, used, strategy, _) = acc[u][b];
                    if used < ent || !strategy.borrows() {
                        continue;
                    }
                    let mut alt = acc[u].clone();
                    let p0 = pressure(self.cfg.env[u], &alt);
                    alt[b].1 += c;
                    if not_worse(&p0, &pressure(self.cfg.env[u], &alt)).is_err() {
                        continue;
                    }
                    let mut theirs_acc = acc.clone();
                    theirs_acc[u][b].1 += c;
                    let theirs = self.figure(&theirs_acc, b, false);
                    prop_assert!(
                        mine <= theirs + 1e-9,
                        "{} borrowed for job {:?} to {mine} while {}'s job {:?} could have started at {theirs}",
                        j.spec.share,
                        job,
                        self.cfg.shares[b].name,
                        other
                    );
                }
            }
            acc[u][a].1 += count;
            waiting.retain(|_, w| w.0 != *job);
            // The share's next job is not known here: stop comparing against it.
            waiting.retain(|&(wu, x), _| !(wu == u && x == a));
        }
        Ok(())
    }

    /// Jobs that may not be interrupted never hold borrowed capacity: per share and unit, what
    /// they hold is within the entitlement (a lowered limit aside: not in pristine runs).
    fn check_firm_within_entitlement(&self) -> Result<(), TestCaseError> {
        for ((share, unit), held) in own_only_by_share(&self.s) {
            let spec = self.cfg.shares.iter().find(|s| s.name == share).unwrap();
            let ent = spec.limits.get(unit.as_str()).copied().unwrap_or(0);
            prop_assert!(
                held <= ent,
                "{share} holds {held} {unit} with firm jobs, entitled {ent}"
            );
        }
        Ok(())
    }

    /// Idle while waiting is bounded by what is free, and what is free by the environment
    /// less what the shares hold; the job it names waits for the cause it reports.
    fn check_idle_while_waiting(&self) -> Result<(), TestCaseError> {
        for e in self.s.idle_while_waiting() {
            let u = UNITS.iter().position(|x| *x == e.instance_type).unwrap();
            let held: u32 = accounts(&self.s, &self.cfg, u).iter().map(|a| a.1).sum();
            prop_assert!(e.wasted >= 1 && e.wasted <= e.free, "{e:?}");
            prop_assert!(e.free + held <= self.cfg.env[u], "{e:?} with {held} held");
            let reason = self.s.explain(e.job);
            prop_assert_eq!(reason.as_ref().map(IdleCause::of), Some(e.cause), "{:?}", e);
            prop_assert!(self.s.job(e.job).unwrap().spec.count <= e.free, "{e:?}");
        }
        Ok(())
    }

    /// Who lends to whom agrees with the usage rows: per unit, a lender's flows add up to its
    /// lent-out instances and a borrower's to at most what it borrows (all of it when lending
    /// backs the borrowing), and nobody lends to itself.
    fn check_flows(&self) -> Result<(), TestCaseError> {
        let usage = self.s.usage(Q).unwrap();
        let flows = self.s.flows(Q).unwrap();
        for f in &flows {
            prop_assert!(f.lender != f.borrower && f.instances > 0.0, "{f:?}");
        }
        let total = |unit: &str, pick: &dyn Fn(&qm_core::Flow) -> bool| -> f64 {
            flows
                .iter()
                .filter(|f| f.instance_type == unit && pick(f))
                .map(|f| f.instances)
                .sum()
        };
        for u in &usage {
            let unit = u.instance_type.as_str();
            let lent = total(unit, &|f| f.lender == u.share);
            let got = total(unit, &|f| f.borrower == u.share);
            // Flows are rounded to hundredths, as lent_out is.
            let slack = 0.01 * usage.len() as f64;
            prop_assert!(
                (lent - u.lent_out).abs() <= slack,
                "{} lends {lent}, lent_out {}",
                u.share,
                u.lent_out
            );
            prop_assert!(
                got <= f64::from(u.borrowed) + slack,
                "{} gets {got}, borrows {}",
                u.share,
                u.borrowed
            );
            let of_unit = || usage.iter().filter(|x| x.instance_type == unit);
            let backed = of_unit().map(|x| x.borrowed).sum::<u32>()
                <= of_unit().map(|x| x.lendable).sum::<u32>();
            prop_assert!(
                !backed || (got - f64::from(u.borrowed)).abs() <= slack,
                "{} gets {got} of the {} it borrows",
                u.share,
                u.borrowed
            );
        }
        Ok(())
    }

    /// For every waiting job with few candidates, with and without thrash protection: the
    /// victim search finds a set exactly when some subset of the candidates is a valid set,
    /// and the same one brute force finds, the first in victim order (the earliest worst
    /// victim, then the earliest second-worst...; as a bitmask over the candidates in victim
    /// order, the smallest), within condition 4's bound if any set is (tier 1).
    fn check_victims_by_brute_force(&self) -> Result<(), TestCaseError> {
        for id in self.s.job_ids() {
            let j = self.s.job(id).unwrap();
            if j.status != JobStatus::Runnable || j.stopping.is_some() {
                continue;
            }
            for protect in [true, false] {
                let cands = self.s.victim_candidates(id, protect);
                if cands.len() > 10 {
                    continue;
                }
                let mut best: Option<(u8, u32)> = None;
                for mask in 1u32..(1 << cands.len()) {
                    let set: Vec<AttemptId> = (0..cands.len())
                        .filter(|i| mask >> i & 1 == 1)
                        .map(|i| cands[i])
                        .collect();
                    if let Some(tier) = self.s.victim_set_tier(id, &set, protect) {
                        if best.is_none_or(|b| (tier, mask) < b) {
                            best = Some((tier, mask));
                        }
                    }
                }
                let expected: Option<Vec<AttemptId>> = best.map(|(_, mask)| {
                    (0..cands.len())
                        .filter(|i| mask >> i & 1 == 1)
                        .map(|i| cands[i])
                        .collect()
                });
                let found = self.s.victims_for(id, protect);
                prop_assert_eq!(
                    &found,
                    &expected,
                    "job {:?} (protect {}): search vs brute force over {:?}",
                    id,
                    protect,
                    cands
                );
            }
        }
        Ok(())
    }

    /// Where a job runs or waits: its unit's and its share's index in the configuration.
    fn place(&self, unit: &str, share: &str) -> (usize, usize) {
        let u = UNITS.iter().position(|x| *x == unit).unwrap();
        let s = self
            .cfg
            .shares
            .iter()
            .position(|x| x.name == share)
            .unwrap();
        (u, s)
    }

    /// No instance stays idle while a job that fits it waits, other than for a documented
    /// reason: a waiting job within its share's entitlement, with as many instances idle in
    /// the environment, is held behind another job (`HELD_FOR_OLDER_JOB`: an aged head letting
    /// its backfill finish, a job patient with its victims), waits for capacity being
    /// released for another (`WAITING_FOR_RELEASE`), or is owed an instance a borrower holds
    /// (capacity no share is entitled to is not lendable, AWS's accounting, so the idle ones
    /// are not its) and waits for that borrower: protected (`VICTIMS_PROTECTED`), or given
    /// its patience (`WAITING_FOR_CHECKPOINT`, `BACKFILL_FINISHING`). Called once every
    /// stopped attempt has exited.
    fn check_no_idle_instance(&self, id: JobId) -> Result<(), TestCaseError> {
        let j = self.s.job(id).unwrap();
        let (u, s) = self.place(&j.spec.instance_type, &j.spec.share);
        let acc = accounts(&self.s, &self.cfg, u);
        let used: u32 = acc.iter().map(|a| a.1).sum();
        let idle = self.cfg.env[u].saturating_sub(used);
        let c = j.spec.count;
        if acc[s].1 + c > acc[s].0 || c > idle {
            return Ok(());
        }
        let reason = match self.s.explain(id) {
            Some(PendingReason::Reserved { reason, .. }) => Some(*reason),
            other => other,
        };
        prop_assert!(
            matches!(
                reason,
                Some(
                    PendingReason::HeldForOlderJob { .. }
                        | PendingReason::GroupLimitReached { .. }
                        | PendingReason::WaitingForRelease { .. }
                        | PendingReason::VictimsProtected { .. }
                        | PendingReason::WaitingForCheckpoint { .. }
                        | PendingReason::BackfillFinishing { .. }
                )
            ),
            "job {id:?} fits its share's entitlement and {idle} instances are idle, but it waits: {reason:?}; accounts {acc:?}"
        );
        Ok(())
    }

    /// A share's first waiting job that fits its entitlement, and that reclaiming every other
    /// share's borrowed instances would let start, must not be left waiting.
    fn check_owner_liveness(&self) -> Result<(), TestCaseError> {
        let mut heads: BTreeMap<(String, String), (std::cmp::Reverse<u32>, u64, JobId)> =
            BTreeMap::new();
        for id in self.s.job_ids() {
            let j = self.s.job(id).unwrap();
            if j.status != JobStatus::Runnable || j.misconfigured.is_some() || j.stopping.is_some()
            {
                continue;
            }
            // After a pass every waiting job has a real reason: AWAITING_PASS would mean the
            // pass left it although it could start.
            let reason = self.s.explain(id);
            prop_assert!(
                !matches!(reason, Some(PendingReason::AwaitingPass)),
                "job {:?} could start but the pass left it waiting",
                id
            );
            self.check_no_idle_instance(id)?;
            let key = (j.spec.share.clone(), j.spec.instance_type.clone());
            let rank = (std::cmp::Reverse(j.spec.priority), j.seq, id);
            heads
                .entry(key)
                .and_modify(|r| *r = (*r).min(rank))
                .or_insert(rank);
        }
        for ((share, unit), (_, _, id)) in heads {
            let (u, s) = self.place(&unit, &share);
            let acc = accounts(&self.s, &self.cfg, u);
            let c = self.s.job(id).unwrap().spec.count;
            if acc[s].1 + c > acc[s].0 {
                continue;
            }
            let mut reclaimed = acc.clone();
            for (x, a) in reclaimed.iter_mut().enumerate() {
                if x != s {
                    // Reclaim takes what a share borrows, but never a job that may not be
                    // interrupted (a lowered limit can leave those above the entitlement).
                    let firm = own_only_held(&self.s, &self.cfg.shares[x].name, &unit);
                    a.1 = a.1.min(a.0.max(firm));
                }
            }
            let before = pressure(self.cfg.env[u], &reclaimed);
            reclaimed[s].1 += c;
            let after = pressure(self.cfg.env[u], &reclaimed);
            let reason = match self.s.explain(id) {
                Some(PendingReason::Reserved { reason, .. }) => Some(*reason),
                other => other,
            };
            // A group's ceiling binds owners too (a department's budget).
            let held = matches!(
                reason,
                Some(
                    PendingReason::HeldForOlderJob { .. } | PendingReason::GroupLimitReached { .. }
                )
            );
            // Patience with its victims is a reason to wait only until a wake-up the core has
            // asked for: it must come back to the job by then.
            let patient = match reason {
                Some(
                    PendingReason::WaitingForCheckpoint { until, .. }
                    | PendingReason::BackfillFinishing { until, .. }
                    | PendingReason::VictimsProtected { until },
                ) => {
                    prop_assert!(
                        until > self.now && self.s.next_wakeup().is_some_and(|w| w <= until),
                        "job {id:?} is patient until {until} at {} without a wake-up by then ({:?})",
                        self.now,
                        self.s.next_wakeup()
                    );
                    true
                }
                _ => false,
            };
            if not_worse(&before, &after).is_ok() && !held && !patient {
                return Err(TestCaseError::fail(format!(
                    "job {id:?} of {share} fits its entitlement and reclaim would make room, but waits: {:?}; accounts {acc:?}; job {:?}",
                    self.s.explain(id),
                    self.s.job(id)
                )));
            }
        }
        Ok(())
    }
}

/// Runs the ops with every stopped attempt exiting at once: after each op, passes and exits
/// alternate until nothing happens. A preemption whose victims have exited must let its job
/// start, so this settles within a few rounds; churn (start, preempt, restart...) does not.
///
/// Nor is a job stopped and restarted in one pass (issue 18, item 1): a victim's attempt holds
/// its instances until it exits, so "one pass" here is the op's pass and the passes that its
/// victims' exits bring at the same instant, with nothing else happening. A victim started
/// again in them was preempted for nothing: there was room for it and its claimant.
fn run_settling(cfg: Config, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut run = Run::new(cfg);
    for op in ops {
        let from = run.log.len();
        run.step(op)?;
        // Where in the log each round of exits begins.
        let mut exits: Vec<usize> = Vec::new();
        let mut rounds = 0;
        while !run.stopping.is_empty() {
            rounds += 1;
            prop_assert!(
                rounds <= 32,
                "no fixed point after {} rounds of exits and passes",
                rounds
            );
            exits.push(run.log.len());
            run.step(&Op::Release)?;
        }
        // Issue 18, item 1: a job preempted in its share for a newcomer must not take the
        // share's lent capacity back itself and restart — the newcomer should have reclaimed it.
        // Each in-share victim is kept with whether a preemption for another claimant came
        // after it: room that a later decision freed for someone else may fall to it (several
        // owners reclaiming one after the other), which is not a preemption its own claimant
        // wasted. A reclaimed victim that restarts by preempting lower-priority jobs of its own
        // share is not this rule's case: reclaim takes borrowers by least work lost, whatever
        // their priority (DESIGN §2 rule 7), and the victim's priority then counts in its share.
        //
        // Nor is a restart counted when the claimant started before its victims had exited:
        // it started on other room, which a later decision of the pass freed (the known gap
        // of docs/scheduling.md, "Order of a pass").
        let mut preempted: Vec<(JobId, bool, JobId, usize)> = Vec::new();
        for (i, e) in run.log.iter().enumerate().skip(from) {
            match e {
                Effect::Stop { job, cause, .. } if cause.is_preemption() => {
                    let claimant = match cause {
                        StopCause::InShare { for_job } | StopCause::Reclaim { for_job, .. } => {
                            Some(*for_job)
                        }
                        StopCause::Terminated { .. }
                        | StopCause::Drill { .. }
                        | StopCause::Requeue { .. } => None,
                    };
                    for p in &mut preempted {
                        p.1 |= claimant != Some(p.0);
                    }
                    if let StopCause::InShare { for_job } = cause {
                        preempted.push((*job, false, *for_job, i));
                    }
                }
                // Under a fixed configuration: after a change (a limit lowered below what a
                // share runs, in-share preemption turned on under an aged head's backfill) the
                // jobs are re-sorted over several decisions, and one of them may come back.
                Effect::Start { job, .. } if run.pristine => {
                    for p in preempted.iter_mut().filter(|p| p.2 == *job) {
                        p.1 |= !exits.iter().any(|&x| p.3 < x && x <= i);
                    }
                    let wasted = preempted.iter().find(|p| p.0 == *job && !p.1);
                    prop_assert!(
                        wasted.is_none(),
                        "job {:?} was preempted in its share for {:?} and restarted in one pass",
                        job,
                        wasted.map(|p| p.2)
                    );
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn run_all(cfg: Config, ops: &[Op]) -> Result<Vec<Effect>, TestCaseError> {
    let mut run = Run::new(cfg);
    for op in ops {
        run.step(op)?;
    }
    Ok(run.log)
}

/// Runs the ops up to `cut`, rebuilds the scheduler from its image, and runs the rest on both:
/// the image survives a round trip and the two decide alike.
fn rebuilt_decides_alike(
    cfg: Config,
    ops: &[Op],
    cut: prop::sample::Index,
) -> Result<(), TestCaseError> {
    let cut = cut.index(ops.len());
    let mut original = Run::new(cfg);
    for op in &ops[..cut] {
        original.step(op)?;
    }
    let image = original.s.image();
    let mut rebuilt = original.clone();
    rebuilt.s = Scheduler::from_image(original.s.policy(), image.clone())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(rebuilt.s.image(), image, "the image survives a round trip");
    for op in &ops[cut..] {
        original.step(op)?;
        rebuilt.step(op)?;
    }
    prop_assert_eq!(&original.log, &rebuilt.log);
    prop_assert_eq!(original.s.image(), rebuilt.s.image());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn fixed_policies_keep_every_rule_after_every_step(cfg in config(), ops in prop::collection::vec(op(false), 1..80)) {
        run_all(cfg, &ops)?;
    }

    #[test]
    fn under_fixed_policies_no_job_is_preempted_and_restarted_in_one_pass(cfg in config(), ops in prop::collection::vec(op(false), 1..80)) {
        run_settling(cfg, &ops)?;
    }

    #[test]
    fn changing_policies_never_make_an_admission_worse(cfg in config(), ops in prop::collection::vec(op(true), 1..80)) {
        run_all(cfg, &ops)?;
    }

    #[test]
    fn preemptions_settle_once_their_victims_have_exited_and_none_is_restarted_in_its_pass(cfg in config(), ops in prop::collection::vec(op(true), 1..80)) {
        run_settling(cfg, &ops)?;
    }

    #[test]
    fn a_scheduler_rebuilt_from_its_image_decides_the_rest_exactly_as_the_original(
        cfg in config(), ops in prop::collection::vec(op(true), 2..60), cut in any::<prop::sample::Index>()
    ) {
        rebuilt_decides_alike(cfg, &ops, cut)?;
    }

    #[test]
    fn the_victim_search_finds_a_set_whenever_brute_force_does_and_the_same_one(
        cfg in wide_config(), ops in prop::collection::vec(dense_op(), 1..80)
    ) {
        let mut run = Run::new(cfg);
        run.brute = true;
        for op in &ops {
            run.step(op)?;
            run.check_victims_by_brute_force()?;
        }
    }

    #[test]
    fn fair_sharing_admits_the_lowest_weighted_share_first_and_keeps_every_rule(cfg in fair_config(), ops in prop::collection::vec(op(false), 1..80)) {
        run_all(cfg, &ops)?;
    }

    #[test]
    fn fair_reclaim_and_groups_keep_their_rules_and_every_other(cfg in grouped_config(), ops in prop::collection::vec(op(false), 1..80)) {
        run_all(cfg, &ops)?;
    }

    #[test]
    fn fair_reclaim_and_groups_settle(cfg in grouped_config(), ops in prop::collection::vec(op(false), 1..80)) {
        run_settling(cfg, &ops)?;
    }

    #[test]
    fn a_fair_scheduler_rebuilt_from_its_image_decides_the_rest_exactly_as_the_original(
        cfg in grouped_config(), ops in prop::collection::vec(op(false), 2..60), cut in any::<prop::sample::Index>()
    ) {
        rebuilt_decides_alike(cfg, &ops, cut)?;
    }

    #[test]
    fn the_same_inputs_always_give_the_same_decisions(cfg in config(), ops in prop::collection::vec(op(true), 1..60)) {
        let a = run_all(cfg.clone(), &ops)?;
        let b = run_all(cfg, &ops)?;
        prop_assert_eq!(a, b);
    }
}

/// Found by `fair_reclaim_and_groups_settle` (2000 cases): a borrower's start late in a pass
/// raised its share's figure enough to make its older job a fair victim for a job decided,
/// and left waiting, earlier in the same pass; the pass must be followed by another.
#[test]
fn a_start_that_creates_a_fair_victim_gets_the_waiting_borrower_another_pass() {
    let mk = |i: usize, l: Option<u32>, s: Sharing| share_spec(i, [l, None], s, -1, false, true);
    let mut shares = vec![
        mk(0, None, Sharing::Reserve),
        mk(1, Some(0), Sharing::LendAndBorrow),
        mk(2, Some(3), Sharing::Lend),
        mk(3, Some(1), Sharing::LendAndBorrow),
    ];
    shares[0].limits.clear();
    let cfg = Config {
        env: [4, 1],
        shares,
        idle: IdleAssignment::Fifo,
        fair_reclaim: true,
        groups: Vec::new(),
    };
    let sub = |share: usize, count: u32, priority: u32| Op::Submit {
        share,
        unit: 0,
        count,
        priority,
        retries: None,
        bound: None,
    };
    let ops = vec![
        sub(0, 1, 0),
        sub(1, 3, 0),
        sub(1, 2, 1),
        Op::Fail(12756673733115358882),
        sub(0, 1, 0),
        sub(0, 1, 0),
        Op::Finish(2790109751325652932),
        sub(0, 1, 0),
        sub(0, 1, 0),
        sub(0, 1, 0),
        Op::Finish(3921236993228423842),
        sub(3, 2, 0),
        sub(0, 1, 0),
        Op::Advance(300),
        sub(1, 1, 0),
    ];
    run_settling(cfg, &ops).unwrap();
}

// Issue 42, "no wasted preemption": each scenario below was found by
// `under_fixed_policies_no_job_is_preempted_and_restarted_in_one_pass` (20,000 cases a run)
// and fails without the change its doc names. In all of them S1 protects its jobs for 5
// minutes and S2 allows one preemption an hour, as the random configuration had it; job ids
// are submission order, every fifth job may not be interrupted and every seventh may not
// borrow (see `Run::apply`).

/// A scenario's configuration: `env` instances of the first unit, the shares as given.
fn scenario(env: u32, mut shares: Vec<ShareSpec>) -> Config {
    if let Some(s1) = shares.get_mut(1) {
        s1.min_runtime_ms = 300_000;
    }
    if let Some(s2) = shares.get_mut(2) {
        s2.max_preemptions_per_hour = 1;
    }
    Config {
        env: [env, 1],
        shares,
        idle: IdleAssignment::Fifo,
        fair_reclaim: false,
        groups: Vec::new(),
    }
}

/// Share `i` with `limit` instances of the first unit (none: no limit there).
fn share(i: usize, limit: Option<u32>, strategy: Sharing, in_share: bool) -> ShareSpec {
    share_spec(i, [limit, None], strategy, -1, in_share, true)
}

/// A submission of `count` instances of unit `unit` at `priority` to share `share` (modulo
/// the shares), with runtime bound `bound` seconds.
fn submit(share: usize, unit: usize, count: u32, priority: u32, bound: Option<u64>) -> Op {
    Op::Submit {
        share,
        unit,
        count,
        priority,
        retries: None,
        bound,
    }
}

/// Submissions `(share, count, priority)` on the first unit, without bounds.
fn submits(jobs: &[(usize, u32, u32)]) -> Vec<Op> {
    jobs.iter()
        .map(|&(s, c, p)| submit(s, 0, c, p, None))
        .collect()
}

/// A start makes a waiting job its share's head, past the starvation guard: its reservation
/// holds from that decision on. Before, it held only from the next pass, so a claimant of
/// another share decided later in the same pass preempted for capacity that the head then
/// kept, and its victim (job 8) restarted. (Was the "known gap" of "Order of a pass".)
#[test]
fn a_head_that_a_start_brings_forward_holds_its_reservation_in_the_same_pass() {
    let cfg = scenario(
        5,
        vec![
            share(0, Some(3), Sharing::Reserve, false),
            share(1, None, Sharing::Reserve, false),
            share(2, Some(3), Sharing::LendAndBorrow, true),
            share(3, Some(2), Sharing::Lend, true),
        ],
    );
    let mut ops = submits(&[(2, 1, 0), (0, 1, 0), (0, 3, 0), (0, 1, 0)]);
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[(2, 1, 2), (2, 2, 2), (3, 2, 0)]));
    ops.extend([
        Op::Finish(4724955089276066227),
        Op::Finish(2183999107983329465),
    ]);
    ops.extend(submits(&[(2, 2, 1)]));
    ops.extend([Op::Advance(680), Op::Advance(567), Op::Advance(820)]);
    ops.extend(submits(&[(3, 1, 0), (1, 1, 0)]));
    ops.push(Op::Advance(503));
    ops.extend(submits(&[(0, 2, 0), (1, 1, 0), (2, 1, 3)]));
    ops.push(Op::Finish(402803824891751989));
    ops.extend(submits(&[(1, 1, 0)]));
    ops.extend([Op::Priority(13663796072232544524, 1), Op::Advance(907)]);
    ops.extend(submits(&[(0, 1, 0)]));
    ops.extend([Op::Finish(9600496957936083381), Op::Advance(123)]);
    run_settling(cfg, &ops).unwrap();
}

/// A running job backfilled onto an aged head's reservation whose priority is raised above
/// the head's is no longer its backfill: taken back for the head, it was requeued ahead of
/// it and restarted on its own room.
#[test]
fn a_backfilled_job_raised_above_its_head_is_no_longer_its_backfill() {
    let cfg = scenario(
        4,
        vec![
            share(0, Some(1), Sharing::LendAndBorrow, true),
            share(1, Some(3), Sharing::Lend, false),
            share(2, None, Sharing::Reserve, false),
            share(3, None, Sharing::Reserve, false),
        ],
    );
    let mut ops = submits(&[(0, 1, 0)]);
    ops.push(Op::Terminate(0));
    ops.extend(submits(&[(1, 3, 0), (0, 2, 1), (0, 2, 0), (0, 2, 0)]));
    ops.push(Op::Advance(900));
    ops.extend(submits(&[
        (1, 2, 0),
        (0, 2, 0),
        (0, 1, 1),
        (0, 1, 0),
        (0, 1, 0),
        (2, 1, 0),
    ]));
    ops.extend([Op::Priority(11367837663644739922, 2), Op::Advance(1)]);
    ops.extend(submits(&[(2, 1, 0), (1, 2, 1)]));
    ops.extend([
        Op::Checkpoint(2408763533813007807),
        Op::Fail(8612357640273669101),
    ]);
    run_settling(cfg, &ops).unwrap();
}

/// In a share with in-share preemption, a job that preempted for its room is decided before
/// the jobs ahead of it by submission only (same priority): those could not preempt it once
/// it runs, so taking its room left it waiting and its victim (job 8) restarting.
#[test]
fn a_reclaimer_goes_before_the_jobs_ahead_of_it_by_submission_only() {
    let cfg = scenario(
        3,
        vec![
            share(0, Some(3), Sharing::Reserve, true),
            share(1, None, Sharing::Reserve, false),
            share(2, None, Sharing::Reserve, false),
        ],
    );
    let mut ops = submits(&[
        (1, 1, 0),
        (0, 1, 0),
        (0, 1, 0),
        (0, 1, 0),
        (1, 1, 0),
        (0, 1, 0),
    ]);
    ops.extend(submits(&[
        (0, 2, 0),
        (3, 1, 2),
        (0, 1, 0),
        (0, 3, 0),
        (0, 1, 0),
        (0, 1, 0),
    ]));
    ops.push(Op::Finish(1260013923140603228));
    ops.push(submit(0, 1, 1, 0, None));
    ops.push(Op::Finish(2307274614867503));
    ops.extend(submits(&[(0, 2, 1), (0, 2, 3), (0, 3, 3)]));
    run_settling(cfg, &ops).unwrap();
}

/// A job's preemption makes its claim protect its share's capacity, and the share's
/// reservation for waiting owners shrinks by as much in the same pass: counted twice, the
/// lendable capacity was too small for a borrower decided later, which preempted a job of
/// its own share (job 1) for it and then found the room after all.
#[test]
fn a_claim_and_its_shares_reservation_keep_the_same_instances_once() {
    let cfg = scenario(
        5,
        vec![
            share(0, Some(2), Sharing::Lend, false),
            share(1, Some(0), Sharing::LendAndBorrow, true),
            share(2, Some(3), Sharing::Lend, false),
        ],
    );
    let mut ops = submits(&[(1, 2, 1), (1, 3, 0), (1, 1, 2), (2, 2, 0)]);
    ops.push(Op::Advance(300));
    run_settling(cfg, &ops).unwrap();
}

/// A share whose owner reclaims keeps the rest of its idle entitlement for its other
/// waiting owners: before, a reclaimer made it keep nothing, a borrower of another share
/// preempted a job of its own share (job 12) to borrow it, and the owners took it first.
#[test]
fn a_share_with_a_reclaimer_keeps_its_idle_capacity_for_its_other_owners() {
    let cfg = scenario(
        4,
        vec![
            share(0, Some(2), Sharing::Lend, true),
            share(1, Some(2), Sharing::LendAndBorrow, true),
        ],
    );
    let mut ops = submits(&[(0, 3, 0), (0, 1, 0)]);
    ops.push(Op::Finish(4689400525184047423));
    ops.extend(submits(&[(0, 1, 0)]));
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[(0, 1, 0), (0, 3, 0)]));
    ops.push(Op::Finish(2762309662320627994));
    ops.extend(submits(&[(0, 3, 0)]));
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[(1, 1, 3)]));
    ops.push(Op::Finish(13695213528295892795));
    ops.extend(submits(&[(0, 1, 0)]));
    ops.push(Op::Finish(1129350523486821919));
    ops.extend(submits(&[
        (1, 2, 0),
        (1, 1, 0),
        (2, 1, 0),
        (1, 2, 0),
        (0, 3, 0),
        (0, 1, 0),
    ]));
    ops.extend(submits(&[(0, 1, 0), (0, 3, 0), (0, 3, 0), (1, 2, 1)]));
    ops.push(Op::Advance(300));
    run_settling(cfg, &ops).unwrap();
}

/// A job that may not be interrupted, with a runtime bound that ends before an aged head's
/// shadow, preempts EASY-backfilled; once its victim has exited it must still qualify. The
/// shadow counted its claim as held for ever, so it was held, its claim lapsed, the victim
/// (job 4) restarted and it preempted again, without end.
#[test]
fn an_easy_backfilled_reclaimer_starts_once_its_victims_exit() {
    let cfg = scenario(
        3,
        vec![
            share(0, Some(3), Sharing::Reserve, true),
            share(1, None, Sharing::Reserve, false),
            share(2, None, Sharing::Reserve, false),
        ],
    );
    let mut ops = submits(&[(3, 2, 1)]);
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[
        (1, 1, 0),
        (0, 1, 0),
        (0, 2, 0),
        (0, 1, 0),
        (0, 1, 0),
    ]));
    ops.push(submit(3, 0, 2, 2, Some(1335)));
    ops.extend(submits(&[(0, 1, 0), (0, 1, 0), (0, 1, 0), (0, 1, 0)]));
    ops.push(Op::Finish(7647752671417744856));
    ops.extend(submits(&[(0, 1, 0)]));
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[
        (0, 1, 0),
        (1, 1, 0),
        (0, 1, 0),
        (0, 3, 2),
        (1, 1, 0),
        (1, 1, 0),
    ]));
    ops.push(Op::Advance(900));
    ops.extend(submits(&[(0, 1, 0)]));
    ops.push(Op::Fail(16442793967842429061));
    ops.extend(submits(&[(0, 2, 0), (0, 2, 0), (0, 1, 0)]));
    ops.push(submit(3, 0, 1, 1, Some(1)));
    run_settling(cfg, &ops).unwrap();
}

/// The same, where the head is another share's: the claimant was held once its victim (job
/// 9) had exited because the shadow, without the claim, came to "now".
#[test]
fn an_easy_reclaimer_is_not_held_by_the_reservation_it_preempted_under() {
    let cfg = scenario(
        3,
        vec![
            share(0, Some(3), Sharing::Reserve, true),
            share(1, Some(3), Sharing::Reserve, false),
            share(2, None, Sharing::Reserve, false),
            share(3, None, Sharing::Reserve, false),
        ],
    );
    let mut ops = submits(&[(0, 1, 2), (0, 1, 0), (2, 1, 0)]);
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[(2, 1, 0), (1, 2, 0)]));
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[(0, 1, 0)]));
    ops.push(submit(0, 0, 3, 0, Some(479)));
    ops.extend(submits(&[(1, 2, 1)]));
    ops.push(Op::Finish(45563743971535440));
    ops.extend(submits(&[(0, 1, 0)]));
    ops.push(Op::Advance(900));
    ops.extend(submits(&[(2, 1, 0), (2, 1, 0), (0, 1, 0)]));
    ops.push(Op::Priority(5939606413313862808, 1));
    ops.push(submit(0, 0, 2, 2, Some(1)));
    run_settling(cfg, &ops).unwrap();
}

/// A job that runs only within its share's quota is not backfilled onto an aged head that
/// does too: it counted against the quota before the head, which then could neither start
/// nor take it back; the head's reservation came and went with it, and a claimant behind
/// the head preempted it (job 14) again and again.
#[test]
fn a_job_within_its_quota_only_is_not_backfilled_onto_a_head_that_is_too() {
    let cfg = scenario(
        3,
        vec![
            share(0, Some(3), Sharing::Reserve, true),
            share(1, None, Sharing::Reserve, false),
        ],
    );
    let mut ops = submits(&[
        (1, 1, 0),
        (0, 3, 0),
        (0, 3, 0),
        (0, 3, 0),
        (1, 1, 0),
        (1, 1, 0),
    ]);
    ops.push(submit(0, 1, 1, 0, None));
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[(1, 1, 0), (1, 1, 0), (0, 3, 0)]));
    ops.push(submit(0, 1, 1, 0, None));
    ops.extend(submits(&[(2, 1, 2), (2, 1, 0), (0, 3, 2)]));
    ops.push(Op::Advance(75));
    ops.extend(submits(&[(0, 3, 0), (1, 1, 0), (0, 3, 0)]));
    ops.push(Op::Advance(825));
    ops.extend(submits(&[(0, 3, 0), (2, 2, 1)]));
    run_settling(cfg, &ops).unwrap();
}

/// A job kept out by the own-only jobs of its share (`NOT_INTERRUPTIBLE`) preempts the
/// lower-priority ones itself. Before, it only waited; a job behind it preempted them for
/// a larger start, and it took their room first, so those victims (job 4) restarted.
#[test]
fn a_job_kept_out_by_its_shares_own_only_jobs_preempts_them_itself() {
    let cfg = scenario(
        5,
        vec![
            share(0, Some(1), Sharing::LendAndBorrow, true),
            share(1, Some(1), Sharing::Lend, false),
            share(2, Some(3), Sharing::LendAndBorrow, false),
        ],
    );
    let mut ops = submits(&[
        (2, 3, 2),
        (0, 1, 0),
        (2, 1, 2),
        (3, 1, 1),
        (0, 1, 0),
        (0, 1, 0),
    ]);
    ops.push(Op::Finish(1712629489884099988));
    ops.extend(submits(&[
        (0, 1, 1),
        (1, 1, 0),
        (1, 1, 0),
        (0, 1, 3),
        (3, 3, 2),
    ]));
    run_settling(cfg, &ops).unwrap();
}

/// A share keeps for its waiting owners what its stopping jobs will free: a borrower of
/// another share preempted a job of its own share (job 1) to borrow that room, found it
/// reserved for those owners once the stopping jobs had exited, and its victim restarted.
#[test]
fn a_share_keeps_for_its_owners_what_its_stopping_jobs_will_free() {
    let cfg = scenario(
        3,
        vec![
            share(0, Some(1), Sharing::LendAndBorrow, true),
            share(1, Some(2), Sharing::Lend, true),
        ],
    );
    let mut ops = submits(&[
        (0, 1, 0),
        (1, 2, 1),
        (0, 1, 0),
        (2, 2, 1),
        (2, 2, 0),
        (1, 1, 0),
        (1, 1, 0),
        (0, 2, 0),
    ]);
    ops.push(Op::Advance(300));
    ops.extend(submits(&[(1, 1, 0)]));
    ops.push(Op::Priority(12632078496888114458, 2));
    run_settling(cfg, &ops).unwrap();
}
