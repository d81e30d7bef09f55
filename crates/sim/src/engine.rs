//! The discrete-event loop. Simulated time is in milliseconds; events at the same instant are
//! applied in the order they were scheduled, then the core runs one scheduling pass (as the
//! server does once per batch), and its effects schedule new events.
//!
//! The checkpoint model: a job checkpoints every `interval` seconds of work (its first
//! checkpoint at a per-job phase drawn from the seed, so that jobs do not all checkpoint in
//! step). A preempted attempt keeps its instances for `stop_grace` (SIGTERM to exit) and rolls
//! the job back to its last checkpoint: the work since is lost. Every attempt after the first
//! spends `restart_overhead` before new work (loading the checkpoint). Attempts report their
//! checkpoints to the core, which prefers victims that lose the least.
//!
//! Accounting integrates piecewise-constant usage between events: per share usage (own and
//! borrowed), and per share the time spent at each level of idle entitlement while others
//! borrowed; a job's reclaim delay is the time it waited while its share's idle entitlement
//! was enough for it (it would fit in its own quota) and yet lent out.
//!
//! After every pass the core says what is idle while jobs that fit it wait
//! (`Scheduler::idle_while_waiting`); that holds until the next pass and is integrated like
//! usage, per cause and unit, along with each share's queue depth for the report.
//!
//! The fairness of idle capacity is measured at the same points: at the end of every instant
//! at which something changed, the Jain index of the weighted borrowed shares of the shares
//! that wait to borrow (`FairnessStats`), computed from this ledger with the core's formula
//! (`Scheduler::fairness` would allocate names and maps at every instant for the same
//! figures), holds until the next event and is integrated like usage.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use qm_core::{
    AttemptId, Effect, Exit, IdleCause, Input, JobId, JobSpec, QueueSpec, Scheduler, ShareSpec,
    StopCause,
};

use crate::error::SimError;
use crate::metrics::*;
use crate::workload::WorkloadJob;

/// The one queue every simulated job goes to.
const QUEUE: &str = "sim";

/// A cluster: the service environment and its shares (the `qm check` scenario format without
/// steps), plus which share each workload tenant submits to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cluster {
    /// Instance type -> the environment's maximum instances.
    pub environment: BTreeMap<String, u32>,
    /// The quota shares.
    pub shares: Vec<ShareSpec>,
    /// Tenant -> share; a tenant not listed goes to the share of the same name, else to the
    /// share listed for `*`.
    pub tenants: BTreeMap<String, String>,
    /// How idle capacity goes to borrowers (the scheduling policy's).
    pub idle_assignment: qm_core::IdleAssignment,
    /// Whether borrowers preempt each other for fairness.
    pub fair_reclaim: bool,
    /// Groups of shares.
    pub groups: Vec<qm_core::GroupSpec>,
}

impl Cluster {
    /// The share a tenant's jobs go to.
    pub fn share_of(&self, tenant: &str) -> Option<&str> {
        if let Some(s) = self.tenants.get(tenant) {
            return Some(s.as_str());
        }
        if let Some(s) = self.shares.iter().find(|s| s.name == tenant) {
            return Some(s.name.as_str());
        }
        self.tenants.get("*").map(|s| s.as_str())
    }

    /// The `strict` baseline: the same shares, every one RESERVE (no lending, no borrowing).
    pub fn strict(&self) -> Cluster {
        let mut c = self.clone();
        for s in &mut c.shares {
            s.strategy = qm_core::Strategy::Reserve;
            s.borrow_limit_percent = -1;
        }
        c
    }

    /// The `pooled` baseline: one share holding the whole environment, every tenant in it,
    /// first come first served (priorities are ignored by the caller).
    pub fn pooled(&self) -> Cluster {
        let mut pool = ShareSpec::new("pool");
        pool.limits = self.environment.clone();
        pool.strategy = qm_core::Strategy::Reserve;
        Cluster {
            environment: self.environment.clone(),
            shares: vec![pool],
            tenants: [("*".to_string(), "pool".to_string())].into(),
            ..Default::default()
        }
    }
}

/// How a variant is run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOptions {
    /// The capacity unit of jobs whose workload row names none.
    pub instance_type: String,
    /// The checkpoint model.
    pub checkpoint: CheckpointSettings,
    /// Drives the per-job checkpoint phase.
    pub seed: u64,
    /// Whether the first checkpoint comes at a seeded phase (else exactly one interval in).
    pub seeded_phase: bool,
    /// Timeline bins (about; the width doubles as the run grows).
    pub bins: usize,
    /// Ignore workload priorities (the pooled baseline is first come first served).
    pub ignore_priorities: bool,
    /// The core's policy knobs (the starvation guard), as the server would run them.
    pub core: qm_core::Policy,
    /// Give every job its trace duration plus the restart overhead as its runtime bound
    /// (what `MaxRuntimeInSeconds` is to the server), so that jobs that end before an aged
    /// head could start are EASY-backfilled instead of preemptible. Off by default: real
    /// users' bounds are far looser than the trace's exact durations.
    pub runtime_bounds: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            instance_type: "gpu".into(),
            checkpoint: CheckpointSettings {
                interval_s: 1800,
                restart_overhead_s: 60,
                stop_grace_s: 120,
            },
            seed: 0,
            seeded_phase: true,
            bins: 1000,
            ignore_priorities: false,
            core: qm_core::Policy::default(),
            runtime_bounds: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// An attempt's processes are gone (a preempted attempt after its grace).
    StopDone { job: u32, attempt: u64 },
    /// An attempt finished its work.
    Finish { job: u32, attempt: u64 },
    /// A running attempt reached a checkpoint.
    Checkpoint { job: u32, attempt: u64 },
    /// A job is submitted.
    Arrive { job: u32 },
    /// The core asked to be passed again at this instant (`Scheduler::next_wakeup`).
    Wake,
}

#[derive(Clone, Copy, Debug)]
struct Running {
    attempt: u64,
    /// When the attempt got its instances.
    start_ms: u64,
    /// Overhead before new work (0 for a first attempt).
    overhead_ms: u64,
    /// The job's checkpointed work when the attempt started.
    base_work_ms: u64,
    stopping: bool,
}

#[derive(Clone, Debug)]
struct JobState {
    submit_ms: u64,
    duration_ms: u64,
    interval_ms: u64,
    phase_ms: u64,
    count: u32,
    unit: usize,
    /// Share index in the variant's cluster.
    share: usize,
    /// Share index in the reference cluster (the reporting group).
    group: usize,
    /// Whether the job may run on borrowed capacity (non-interruptible jobs stay within
    /// their share's own quota).
    interruptible: bool,
    done_work_ms: u64,
    attempts: u32,
    completed_ms: Option<u64>,
    waiting_since: Option<u64>,
    lent_at_wait: f64,
    queue_delay_ms: u64,
    reclaim_delay_s: f64,
    current: Option<Running>,
    /// When the attempt last stopped by a preemption was gone (its instances free again).
    preempted_gone_ms: Option<u64>,
}

impl JobState {
    /// Work reached by the current attempt at `t` (never more than the job needs).
    fn work_at(&self, r: &Running, t: u64) -> u64 {
        let worked = t.saturating_sub(r.start_ms + r.overhead_ms);
        (r.base_work_ms + worked).min(self.duration_ms)
    }

    /// The last checkpoint at or below `work`: checkpoints are at `phase + k * interval`.
    fn checkpoint_below(&self, work: u64) -> u64 {
        if work < self.phase_ms {
            return 0;
        }
        let k = (work - self.phase_ms) / self.interval_ms;
        self.phase_ms + k * self.interval_ms
    }

    /// The next checkpoint strictly above `work`.
    fn checkpoint_above(&self, work: u64) -> u64 {
        if work < self.phase_ms {
            return self.phase_ms;
        }
        self.checkpoint_below(work) + self.interval_ms
    }
}

/// Per-group (reporting share) counters.
#[derive(Clone, Debug, Default)]
struct Group {
    preemptions: u64,
    /// Preemptions whose victim got its instances back the moment its stopped attempt was
    /// gone: they stopped work and bought nothing.
    needless_preemptions: u64,
    lost_ms_instances: f64,
    overhead_ms_instances: f64,
    usage_integral: f64,
    borrowed_integral: f64,
}

/// Usage accounting per (variant share, unit).
struct Ledger {
    /// entitlement[share][unit]
    entitlement: Vec<Vec<u32>>,
    lends: Vec<bool>,
    /// usage[share][unit], stopping attempts included.
    usage: Vec<Vec<u32>>,
    /// usage per reporting group and unit.
    group_usage: Vec<Vec<u32>>,
    /// usage[share][group][unit]: how a variant share's usage splits over reporting groups,
    /// so that a share's borrowing is attributed to the groups whose jobs hold it.
    split: Vec<Vec<Vec<u32>>>,
    /// Per share and unit, seconds spent at each headroom level (idle entitlement) while
    /// someone borrowed on the unit: a job needing `n` instances was kept from its own
    /// capacity by lending during `lent[s][u].at_least(n)`.
    lent: Vec<Vec<Fenwick>>,
    /// RUNNABLE jobs per reporting group.
    waiting: Vec<u32>,
    /// Since the last pass: (unit, cause index in `IdleCause::ALL`, instances) idle while
    /// jobs that fit them wait.
    idle_now: Vec<(usize, usize, u32)>,
    /// Integrals (instances × ms) of idle while waiting, per cause index and per unit.
    idle_by_cause: [f64; IdleCause::ALL.len()],
    idle_by_unit: Vec<f64>,
    /// What the fairness figure needs and integrates.
    fair: FairLedger,
    last_ms: u64,
}

/// The variant's shares as the fairness figure sees them, and its integrals.
struct FairLedger {
    /// Per share: weight (at least 1) and whether it may borrow.
    weight: Vec<f64>,
    borrows: Vec<bool>,
    /// Per unit: what lending shares are entitled to (at least 1), the figure's divisor.
    pool: Vec<f64>,
    /// `wanting[share][unit]`: instance counts of its RUNNABLE interruptible jobs -> how many
    /// jobs (kept for borrowing shares only): the largest says whether the share waits to
    /// borrow. A `BTreeMap` so that the largest is at hand and nothing depends on hash order.
    wanting: Vec<Vec<BTreeMap<u32, u32>>>,
    /// The figures of the shares waiting to borrow (scratch, reused every instant).
    xs: Vec<f64>,
    /// The index and whether at least two shares wait to borrow, since the last change.
    jain_now: f64,
    contended_now: bool,
    /// Integrals (ms): time, index × time, contended time, index × contended time.
    span_ms: f64,
    jain_ms: f64,
    contended_ms: f64,
    jain_contended_ms: f64,
}

/// Share `s`'s weighted borrowed share: over the units, the largest `borrowed / (weight ×
/// pool)` (the core's formula, on the simulator's usage).
fn weighted_share(
    fair: &FairLedger,
    usage: &[Vec<u32>],
    entitlement: &[Vec<u32>],
    s: usize,
) -> f64 {
    usage[s]
        .iter()
        .zip(&entitlement[s])
        .zip(&fair.pool)
        .map(|((&used, &entitled), pool)| {
            f64::from(used.saturating_sub(entitled)) / (fair.weight[s] * pool)
        })
        .fold(0.0, f64::max)
}

impl FairLedger {
    fn new(cluster: &Cluster, unit_names: &[String]) -> Self {
        let entitled = |u: &String, s: &ShareSpec| s.limits.get(u).copied().unwrap_or(0);
        FairLedger {
            weight: cluster
                .shares
                .iter()
                .map(|s| f64::from(s.weight.max(1)))
                .collect(),
            borrows: cluster
                .shares
                .iter()
                .map(|s| s.strategy.borrows())
                .collect(),
            // As the core's `pool`: the entitlements of the shares that lend.
            pool: unit_names
                .iter()
                .map(|u| {
                    let lent: u64 = cluster
                        .shares
                        .iter()
                        .filter(|s| s.strategy.lends())
                        .map(|s| u64::from(entitled(u, s)))
                        .sum();
                    lent.max(1) as f64
                })
                .collect(),
            wanting: vec![vec![BTreeMap::new(); unit_names.len()]; cluster.shares.len()],
            xs: Vec::with_capacity(cluster.shares.len()),
            jain_now: 1.0,
            contended_now: false,
            span_ms: 0.0,
            jain_ms: 0.0,
            contended_ms: 0.0,
            jain_contended_ms: 0.0,
        }
    }

    /// A job of `count` instances starts (`true`) or stops (`false`) waiting.
    fn wait(&mut self, st: &JobState, waiting: bool) {
        if !st.interruptible || !self.borrows[st.share] {
            return;
        }
        let jobs = &mut self.wanting[st.share][st.unit];
        if waiting {
            *jobs.entry(st.count).or_default() += 1;
        } else if let Some(n) = jobs.get_mut(&st.count) {
            *n -= 1;
            if *n == 0 {
                jobs.remove(&st.count);
            }
        }
    }
}

impl Ledger {
    /// Recomputes the fairness index from the current usage and waiting jobs; it holds until
    /// the next change.
    fn measure_fairness(&mut self) {
        let fair = &mut self.fair;
        fair.xs.clear();
        for (s, wanting) in fair.wanting.iter().enumerate() {
            if !fair.borrows[s] {
                continue;
            }
            let waits = wanting.iter().enumerate().any(|(u, jobs)| {
                let headroom = self.entitlement[s][u].saturating_sub(self.usage[s][u]);
                jobs.last_key_value().is_some_and(|(&n, _)| n > headroom)
            });
            if waits {
                fair.xs
                    .push(weighted_share(fair, &self.usage, &self.entitlement, s));
            }
        }
        fair.jain_now = jain_index(&fair.xs);
        fair.contended_now = fair.xs.len() >= 2;
    }

    /// Debug builds: every share's weighted borrowed share as computed here is the core's
    /// (`Scheduler::fairness`), so that the index measures what the scheduler ranks by.
    #[cfg(debug_assertions)]
    fn check_fairness(&self, core: &Scheduler) -> Result<(), String> {
        let Some(standing) = core.fairness(QUEUE) else {
            return Err(format!("the core has no queue {QUEUE}"));
        };
        for (s, share) in standing.shares.iter().enumerate() {
            let here = weighted_share(&self.fair, &self.usage, &self.entitlement, s);
            if (here - share.weighted_share).abs() > 1e-12 {
                return Err(format!(
                    "share {}: weighted borrowed share {here} in the simulator, {} in the core",
                    share.share, share.weighted_share
                ));
            }
        }
        Ok(())
    }

    fn borrowed(&self, s: usize, u: usize) -> u32 {
        self.usage[s][u].saturating_sub(self.entitlement[s][u])
    }

    /// Integrates everything from the last event to `t`.
    fn advance(&mut self, t: u64, groups: &mut [Group], timeline: &mut Bins) {
        if t <= self.last_ms {
            return;
        }
        let dt_ms = (t - self.last_ms) as f64;
        let units = self.entitlement.first().map_or(0, Vec::len);
        for u in 0..units {
            let borrowed: u32 = (0..self.usage.len()).map(|s| self.borrowed(s, u)).sum();
            if borrowed == 0 {
                continue;
            }
            for s in 0..self.usage.len() {
                let headroom = self.entitlement[s][u].saturating_sub(self.usage[s][u]);
                if self.lends[s] && headroom > 0 {
                    self.lent[s][u].add(headroom as usize, dt_ms / 1000.0);
                }
            }
        }
        // Borrowing is the variant's own (usage above its shares' entitlements), split over
        // the reporting groups in proportion to what their jobs hold in each share.
        let mut borrowed_by_group = vec![0.0; groups.len()];
        for s in 0..self.usage.len() {
            for u in 0..units {
                let b = self.borrowed(s, u);
                if b == 0 {
                    continue;
                }
                let used = f64::from(self.usage[s][u]);
                for (g, by_group) in borrowed_by_group.iter_mut().enumerate() {
                    let part = f64::from(self.split[s][g][u]);
                    if part > 0.0 {
                        *by_group += f64::from(b) * part / used;
                    }
                }
            }
        }
        for (g, group) in groups.iter_mut().enumerate() {
            let used: f64 = self.group_usage[g].iter().map(|&x| f64::from(x)).sum();
            let borrowed = borrowed_by_group[g].min(used);
            group.usage_integral += used * dt_ms;
            group.borrowed_integral += borrowed * dt_ms;
            timeline.add(Series::Own(g), self.last_ms, t, used - borrowed);
            timeline.add(Series::Borrowed(g), self.last_ms, t, borrowed);
            let queued = f64::from(self.waiting[g]);
            timeline.add(Series::Queued(g), self.last_ms, t, queued);
        }
        let mut idle = 0.0;
        for &(u, cause, wasted) in &self.idle_now {
            let v = f64::from(wasted) * dt_ms;
            self.idle_by_cause[cause] += v;
            self.idle_by_unit[u] += v;
            idle += f64::from(wasted);
        }
        timeline.add(Series::IdleWaiting, self.last_ms, t, idle);
        let fair = &mut self.fair;
        fair.span_ms += dt_ms;
        fair.jain_ms += fair.jain_now * dt_ms;
        if fair.contended_now {
            fair.contended_ms += dt_ms;
            fair.jain_contended_ms += fair.jain_now * dt_ms;
        }
        timeline.add(Series::Jain, self.last_ms, t, fair.jain_now);
        self.last_ms = t;
    }
}

/// A Fenwick tree of seconds by headroom level (1-based), for suffix sums.
#[derive(Clone, Debug)]
struct Fenwick {
    tree: Vec<f64>,
    total: f64,
}

impl Fenwick {
    fn new(levels: u32) -> Self {
        Fenwick {
            tree: vec![0.0; levels as usize + 1],
            total: 0.0,
        }
    }

    fn add(&mut self, level: usize, v: f64) {
        self.total += v;
        let mut i = level.min(self.tree.len() - 1);
        while i > 0 && i < self.tree.len() {
            self.tree[i] += v;
            i += i & i.wrapping_neg();
        }
    }

    /// Seconds spent at a headroom of at least `n`.
    fn at_least(&self, n: u32) -> f64 {
        let mut below = 0.0;
        let mut i = (n as usize).saturating_sub(1).min(self.tree.len() - 1);
        while i > 0 {
            below += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        self.total - below
    }
}

/// Time bins for the report; the width doubles whenever the run outgrows them. Each series
/// holds, per bin, the integral of a piecewise-constant value (value × ms).
struct Bins {
    start_ms: u64,
    width_ms: u64,
    max_bins: usize,
    series: Vec<Vec<f64>>,
}

/// The series of a run's bins, for `groups` reporting shares: own, borrowed and queued per
/// group, then the instances idle while jobs wait, then the fairness index.
#[derive(Clone, Copy)]
enum Series {
    Own(usize),
    Borrowed(usize),
    Queued(usize),
    IdleWaiting,
    Jain,
}

impl Series {
    fn index(self, groups: usize) -> usize {
        match self {
            Series::Own(g) => g,
            Series::Borrowed(g) => groups + g,
            Series::Queued(g) => 2 * groups + g,
            Series::IdleWaiting => 3 * groups,
            Series::Jain => 3 * groups + 1,
        }
    }
}

impl Bins {
    fn new(groups: usize, start_ms: u64, max_bins: usize) -> Self {
        Bins {
            start_ms,
            width_ms: 60_000,
            max_bins: max_bins.max(2),
            series: vec![Vec::new(); 3 * groups + 2],
        }
    }

    fn groups(&self) -> usize {
        (self.series.len() - 2) / 3
    }

    fn ensure(&mut self, t: u64) {
        while t > self.start_ms + self.width_ms * self.max_bins as u64 {
            // Merge pairs of bins: integrals add.
            for series in self.series.iter_mut() {
                let merged: Vec<f64> = series.chunks(2).map(|c| c.iter().sum()).collect();
                *series = merged;
            }
            self.width_ms *= 2;
        }
    }

    /// Adds `value` held over [from, to) to the integrals of the bins it covers.
    fn add(&mut self, which: Series, from: u64, to: u64, value: f64) {
        if value == 0.0 || to <= from {
            return;
        }
        self.ensure(to);
        let ix = which.index(self.groups());
        let series = &mut self.series[ix];
        let mut a = from.max(self.start_ms);
        while a < to {
            let bin = ((a - self.start_ms) / self.width_ms) as usize;
            let bin_end = self.start_ms + (bin as u64 + 1) * self.width_ms;
            let b = to.min(bin_end);
            if series.len() <= bin {
                series.resize(bin + 1, 0.0);
            }
            series[bin] += value * (b - a) as f64;
            a = b;
        }
    }

    /// The bins' start and width in seconds, and every series as means over its bins.
    fn finish(mut self, end_ms: u64) -> (f64, f64, Vec<Vec<f64>>) {
        self.ensure(end_ms);
        let bins = ((end_ms.saturating_sub(self.start_ms)).div_ceil(self.width_ms)) as usize;
        let width = self.width_ms as f64;
        for series in self.series.iter_mut() {
            series.resize(bins.max(1), 0.0);
            for v in series.iter_mut() {
                *v = round3(*v / width);
            }
        }
        (self.start_ms as f64 / 1000.0, width / 1000.0, self.series)
    }
}

/// What is idle while jobs wait right after a pass, as (unit, cause index, instances); it
/// holds until the next pass (no capacity or queue changes without one).
fn idle_now(core: &Scheduler, unit_names: &[String]) -> Vec<(usize, usize, u32)> {
    core.idle_while_waiting()
        .into_iter()
        .filter_map(|e| {
            let u = unit_names.iter().position(|n| *n == e.instance_type)?;
            let c = IdleCause::ALL.iter().position(|c| *c == e.cause)?;
            Some((u, c, e.wasted))
        })
        .collect()
}

/// SplitMix64: a tiny, well-known mixing function; the same seed and job give the same phase
/// on every platform.
fn splitmix64(x: u64) -> u64 {
    crate::generate::mix64(x.wrapping_add(0x9E37_79B9_7F4A_7C15))
}

/// Checks that a variant can run the workload before any time is spent on it: options in
/// range, every tenant mapped to a share (in the variant and in the reference), every job's
/// instance type in the environment, and a configuration the core accepts. Returns the core
/// with the queue and shares set up.
pub fn validate(
    cluster: &Cluster,
    reference: &Cluster,
    jobs: &[WorkloadJob],
    opts: &SimOptions,
) -> Result<Scheduler, SimError> {
    if opts.checkpoint.interval_s == 0 {
        return Err(SimError::Options(
            "--checkpoint-interval must be at least 1 second".into(),
        ));
    }
    let mut tenants: BTreeMap<&str, usize> = BTreeMap::new();
    let mut units: BTreeMap<&str, usize> = BTreeMap::new();
    for j in jobs {
        *tenants.entry(j.tenant.as_str()).or_default() += 1;
        *units
            .entry(j.instance_type.as_deref().unwrap_or(&opts.instance_type))
            .or_default() += 1;
    }
    for (unit, n) in &units {
        if !cluster.environment.contains_key(*unit) {
            return Err(SimError::Cluster(format!(
                "{n} job(s) need instance type '{unit}', which the environment does not list ({}); \
                 name the workload's unit with --instance-type, or add '{unit}' to `environment`",
                cluster.environment.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    for c in [cluster, reference] {
        for (tenant, n) in &tenants {
            let s = c.share_of(tenant).ok_or_else(|| {
                SimError::Cluster(format!(
                    "tenant '{tenant}' ({n} job(s)) has no quota share: add a share named '{tenant}', map it under `tenants` (`{tenant}: SHARE`), or map every other tenant with `\"*\": SHARE`"
                ))
            })?;
            let Some(share) = c.shares.iter().find(|x| x.name == s) else {
                return Err(SimError::Cluster(format!(
                    "`tenants` maps '{tenant}' to '{s}', which is not one of the shares"
                )));
            };
            if std::ptr::eq(c, cluster) && !share.enabled {
                return Err(SimError::Cluster(format!(
                    "quota share '{s}' is DISABLED, so the {n} job(s) of tenant '{tenant}' could not be submitted; set its state to ENABLED or map the tenant elsewhere"
                )));
            }
        }
    }
    let mut core = Scheduler::new(opts.core);
    core.apply(
        0,
        Input::PutQueue(QueueSpec {
            name: QUEUE.into(),
            environment: cluster.environment.clone(),
            idle_assignment: cluster.idle_assignment,
            fair_reclaim: cluster.fair_reclaim,
            groups: cluster.groups.clone(),
        }),
    )?;
    for s in &cluster.shares {
        core.apply(
            0,
            Input::PutShare {
                queue: QUEUE.into(),
                share: s.clone(),
            },
        )?;
    }
    Ok(core)
}

/// Progress callback: (events processed, jobs finished or given up, jobs).
pub type Progress<'a> = &'a mut dyn FnMut(u64, usize, usize);

/// Runs one variant: `cluster` is the policy simulated, `reference` the cluster whose shares
/// the per-share statistics are grouped by (so that variants compare share by share).
pub fn run_variant(
    name: &str,
    cluster: &Cluster,
    reference: &Cluster,
    jobs: &[WorkloadJob],
    opts: &SimOptions,
    progress: Progress<'_>,
) -> Result<VariantRun, SimError> {
    let core = validate(cluster, reference, jobs, opts)?;
    let mut sim = Sim::new(cluster, reference, jobs, opts, core);
    let mut next_report = 0u64;
    while let Some(t) = sim.queue.next_time() {
        sim.run_instant(t)?;
        if sim.events >= next_report {
            progress(sim.events, sim.finished, jobs.len());
            next_report = sim.events + 65_536;
        }
    }
    progress(sim.events, sim.finished, jobs.len());
    Ok(sim.finish(name))
}

/// Every instance type the environment or a job names, in name order.
fn collect_units(cluster: &Cluster, jobs: &[WorkloadJob], opts: &SimOptions) -> Vec<String> {
    let mut unit_names: Vec<String> = cluster.environment.keys().cloned().collect();
    for j in jobs {
        let u = j.instance_type.as_deref().unwrap_or(&opts.instance_type);
        if !unit_names.iter().any(|n| n == u) {
            unit_names.push(u.to_string());
        }
    }
    unit_names.sort();
    unit_names
}

/// The instances of the units the workload uses.
fn used_capacity(cluster: &Cluster, jobs: &[WorkloadJob], opts: &SimOptions) -> f64 {
    // Utilization is over the units the workload uses: an environment that also lists other
    // instance types is not idle on them for this workload's sake.
    cluster
        .environment
        .iter()
        .filter(|(u, _)| {
            jobs.iter()
                .any(|j| j.instance_type.as_deref().unwrap_or(&opts.instance_type) == u.as_str())
        })
        .map(|(_, &n)| f64::from(n))
        .sum()
}

/// The index in `c` of the share `tenant`'s jobs go to.
fn share_index(c: &Cluster, tenant: &str) -> usize {
    let s = c.share_of(tenant).expect("validated");
    c.shares
        .iter()
        .position(|x| x.name == s)
        .expect("validated")
}

impl JobState {
    /// Job `i`'s state before it arrives.
    fn new(
        i: usize,
        j: &WorkloadJob,
        cluster: &Cluster,
        reference: &Cluster,
        unit_names: &[String],
        opts: &SimOptions,
    ) -> Self {
        let interval_ms = j
            .checkpoint_interval_s
            .unwrap_or(opts.checkpoint.interval_s)
            * 1000;
        let phase_ms = if opts.seeded_phase {
            splitmix64(opts.seed ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)) % interval_ms
        } else {
            interval_ms
        };
        let unit = j.instance_type.as_deref().unwrap_or(&opts.instance_type);
        JobState {
            submit_ms: j.submit_time_s * 1000,
            duration_ms: j.duration_s * 1000,
            interval_ms,
            phase_ms: phase_ms.max(1),
            count: j.gpus,
            unit: unit_names
                .iter()
                .position(|n| n == unit)
                .expect("collected"),
            share: share_index(cluster, &j.tenant),
            group: share_index(reference, &j.tenant),
            interruptible: j.interruptible(),
            done_work_ms: 0,
            attempts: 0,
            completed_ms: None,
            waiting_since: None,
            lent_at_wait: 0.0,
            queue_delay_ms: 0,
            reclaim_delay_s: 0.0,
            current: None,
            preempted_gone_ms: None,
        }
    }
}

impl Ledger {
    /// Nothing used yet: `cluster`'s shares over `unit_names`, grouped by `reference`'s
    /// shares, integrating from `start_ms`.
    fn new(cluster: &Cluster, reference: &Cluster, unit_names: &[String], start_ms: u64) -> Self {
        let units = unit_names.len();
        let limit = |s: &ShareSpec, u: &String| s.limits.get(u).copied().unwrap_or(0);
        Ledger {
            entitlement: cluster
                .shares
                .iter()
                .map(|s| unit_names.iter().map(|u| limit(s, u)).collect())
                .collect(),
            lends: cluster.shares.iter().map(|s| s.strategy.lends()).collect(),
            usage: vec![vec![0; units]; cluster.shares.len()],
            group_usage: vec![vec![0; units]; reference.shares.len()],
            split: vec![vec![vec![0; units]; reference.shares.len()]; cluster.shares.len()],
            lent: cluster
                .shares
                .iter()
                .map(|s| {
                    unit_names
                        .iter()
                        .map(|u| Fenwick::new(limit(s, u)))
                        .collect()
                })
                .collect(),
            waiting: vec![0; reference.shares.len()],
            idle_now: Vec::new(),
            idle_by_cause: [0.0; IdleCause::ALL.len()],
            idle_by_unit: vec![0.0; units],
            fair: FairLedger::new(cluster, unit_names),
            last_ms: start_ms,
        }
    }
}

/// The pending events, earliest first; those at the same instant in the order scheduled.
struct EventQueue {
    heap: BinaryHeap<Reverse<(u64, u64, EventKind)>>,
    seq: u64,
}

impl EventQueue {
    fn push(&mut self, t: u64, e: EventKind) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, e)));
    }

    /// The instant of the earliest pending event.
    fn next_time(&self) -> Option<u64> {
        self.heap.peek().map(|&Reverse((t, _, _))| t)
    }

    /// Takes the earliest pending event if it is at `t`.
    fn pop_at(&mut self, t: u64) -> Option<EventKind> {
        match self.heap.peek() {
            Some(&Reverse((te, _, _))) if te == t => self.heap.pop().map(|Reverse((_, _, e))| e),
            _ => None,
        }
    }
}

/// One variant's run in progress: the core, the jobs, the pending events and the accounting.
struct Sim<'a> {
    cluster: &'a Cluster,
    reference: &'a Cluster,
    jobs: &'a [WorkloadJob],
    opts: &'a SimOptions,
    core: Scheduler,
    unit_names: Vec<String>,
    ledger: Ledger,
    groups: Vec<Group>,
    state: Vec<JobState>,
    queue: EventQueue,
    timeline: Bins,
    stop_grace_ms: u64,
    overhead_ms: u64,
    first_submit_ms: u64,
    /// Events processed.
    events: u64,
    /// Jobs finished or given up.
    finished: usize,
    end_ms: u64,
    /// The last wake-up pushed: one event per instant the core asks for.
    woken: Option<u64>,
}

impl<'a> Sim<'a> {
    /// Sets the run up: every job's state, and its arrival scheduled.
    fn new(
        cluster: &'a Cluster,
        reference: &'a Cluster,
        jobs: &'a [WorkloadJob],
        opts: &'a SimOptions,
        core: Scheduler,
    ) -> Self {
        let unit_names = collect_units(cluster, jobs, opts);
        let first_submit_ms = jobs.iter().map(|j| j.submit_time_s).min().unwrap_or(0) * 1000;
        let mut queue = EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        };
        let mut state = Vec::with_capacity(jobs.len());
        for (i, j) in jobs.iter().enumerate() {
            state.push(JobState::new(i, j, cluster, reference, &unit_names, opts));
            queue.push(j.submit_time_s * 1000, EventKind::Arrive { job: i as u32 });
        }
        Sim {
            cluster,
            reference,
            jobs,
            opts,
            core,
            ledger: Ledger::new(cluster, reference, &unit_names, first_submit_ms),
            unit_names,
            groups: vec![Group::default(); reference.shares.len()],
            state,
            queue,
            timeline: Bins::new(reference.shares.len(), first_submit_ms, opts.bins),
            stop_grace_ms: opts.checkpoint.stop_grace_s * 1000,
            overhead_ms: opts.checkpoint.restart_overhead_s * 1000,
            first_submit_ms,
            events: 0,
            finished: 0,
            end_ms: first_submit_ms,
            woken: None,
        }
    }

    /// Applies the events at `t`, runs a pass if they need one, and applies its effects.
    fn run_instant(&mut self, t: u64) -> Result<(), SimError> {
        self.ledger.advance(t, &mut self.groups, &mut self.timeline);
        let mut effects = Vec::new();
        // Whether this instant needs a pass: capacity or the queue changed, or a checkpoint
        // may have made a preemption findable. An instant with only checkpoints and nothing
        // waiting (or nothing preemptible) needs none: the next pass sees them.
        let mut changed = false;
        while let Some(e) = self.queue.pop_at(t) {
            self.events += 1;
            changed |= self.on_event(t, e, &mut effects)?;
        }
        if changed {
            self.schedule(t, &mut effects);
        }
        // Usage or the queue may have changed: the fairness figure is measured again.
        let touched = changed || !effects.is_empty();
        for effect in effects {
            self.on_effect(t, effect);
        }
        if touched {
            self.ledger.measure_fairness();
        }
        #[cfg(debug_assertions)]
        self.check(t, touched)?;
        Ok(())
    }

    /// Applies one event; says whether the instant needs a pass.
    fn on_event(
        &mut self,
        t: u64,
        e: EventKind,
        effects: &mut Vec<Effect>,
    ) -> Result<bool, SimError> {
        match e {
            EventKind::Arrive { job } => self.on_arrive(t, job, effects),
            EventKind::Finish { job, attempt } => self.on_finish(t, job, attempt, effects),
            EventKind::StopDone { job, attempt } => self.on_stop_done(t, job, attempt, effects),
            EventKind::Wake => Ok(true),
            EventKind::Checkpoint { job, attempt } => self.on_checkpoint(t, job, attempt, effects),
        }
    }

    /// A job is submitted: it waits from now, and the core gets its spec.
    fn on_arrive(&mut self, t: u64, job: u32, effects: &mut Vec<Effect>) -> Result<bool, SimError> {
        let j = &self.jobs[job as usize];
        let st = &mut self.state[job as usize];
        st.waiting_since = Some(t);
        self.ledger.waiting[st.group] += 1;
        self.ledger.fair.wait(st, true);
        st.lent_at_wait = self.ledger.lent[st.share][st.unit].at_least(st.count);
        let spec = JobSpec {
            id: JobId(u64::from(job)),
            queue: QUEUE.into(),
            share: self.cluster.shares[st.share].name.clone(),
            priority: if self.opts.ignore_priorities {
                0
            } else {
                j.priority.unwrap_or(0)
            },
            instance_type: self.unit_names[st.unit].clone(),
            count: j.gpus,
            preemption_retries: None,
            attempts: 1,
            evaluate_on_exit: Vec::new(),
            runtime_limit_ms: self
                .opts
                .runtime_bounds
                .then(|| st.duration_ms + self.overhead_ms),
            interruptible: j.interruptible(),
            borrows: true,
        };
        effects.extend(self.core.apply(t, Input::Submit(spec))?);
        Ok(true)
    }

    /// An attempt finished its work, unless it was preempted since (a stale event).
    fn on_finish(
        &mut self,
        t: u64,
        job: u32,
        attempt: u64,
        effects: &mut Vec<Effect>,
    ) -> Result<bool, SimError> {
        let st = &mut self.state[job as usize];
        let Some(r) = st.current else {
            return Ok(false);
        };
        if r.attempt != attempt || r.stopping {
            return Ok(false); // a stale event of an attempt that was preempted
        }
        st.done_work_ms = st.duration_ms;
        self.attempt_gone(t, job, attempt, Exit::Succeeded, effects)?;
        Ok(true)
    }

    /// A stopped attempt's processes are gone after their grace.
    fn on_stop_done(
        &mut self,
        t: u64,
        job: u32,
        attempt: u64,
        effects: &mut Vec<Effect>,
    ) -> Result<bool, SimError> {
        let Some(r) = self.state[job as usize].current else {
            return Ok(false);
        };
        if r.attempt != attempt {
            return Ok(false);
        }
        let exit = Exit::Failed {
            reason: "preempted".into(),
            retryable: true,
        };
        self.attempt_gone(t, job, attempt, exit, effects)?;
        Ok(true)
    }

    /// The attempt's instances are free again, and the core hears how it exited.
    fn attempt_gone(
        &mut self,
        t: u64,
        job: u32,
        attempt: u64,
        exit: Exit,
        effects: &mut Vec<Effect>,
    ) -> Result<(), SimError> {
        let st = &mut self.state[job as usize];
        st.current = None;
        st.preempted_gone_ms = (!matches!(exit, Exit::Succeeded)).then_some(t);
        self.ledger.usage[st.share][st.unit] -= st.count;
        self.ledger.group_usage[st.group][st.unit] -= st.count;
        self.ledger.split[st.share][st.group][st.unit] -= st.count;
        let exited = Input::AttemptExited {
            attempt: AttemptId(attempt),
            exit,
        };
        effects.extend(self.core.apply(t, exited)?);
        Ok(())
    }

    /// A running attempt reached a checkpoint: the core hears of it, and the next one is
    /// scheduled. Says whether the checkpoint can change a decision.
    fn on_checkpoint(
        &mut self,
        t: u64,
        job: u32,
        attempt: u64,
        effects: &mut Vec<Effect>,
    ) -> Result<bool, SimError> {
        let st = &self.state[job as usize];
        let Some(r) = st.current else {
            return Ok(false);
        };
        if r.attempt != attempt || r.stopping {
            return Ok(false);
        }
        let checkpoint = Input::Checkpoint {
            job: JobId(u64::from(job)),
        };
        effects.extend(self.core.apply(t, checkpoint)?);
        // The server runs a pass for every batch, checkpoints included; here a
        // checkpoint-only instant runs one when the core says the checkpoint can
        // change a decision (`Scheduler::checkpoint_matters`).
        let changed = self.core.checkpoint_matters(AttemptId(attempt));
        let next = st.checkpoint_above(st.work_at(&r, t));
        if next < st.duration_ms {
            let at = r.start_ms + r.overhead_ms + (next - r.base_work_ms);
            self.queue.push(at, EventKind::Checkpoint { job, attempt });
        }
        Ok(changed)
    }

    /// Runs the core's pass, notes what it leaves idle while jobs wait, and schedules the
    /// wake-up it asks for.
    fn schedule(&mut self, t: u64, effects: &mut Vec<Effect>) {
        effects.extend(self.core.schedule(t));
        self.ledger.idle_now = idle_now(&self.core, &self.unit_names);
        let woken = self.woken;
        if let Some(w) = self
            .core
            .next_wakeup()
            .filter(|&w| w > t && woken != Some(w))
        {
            self.woken = Some(w);
            self.queue.push(w, EventKind::Wake);
        }
    }

    /// Carries out one of the core's effects.
    fn on_effect(&mut self, t: u64, effect: Effect) {
        match effect {
            Effect::Start {
                job,
                attempt,
                count,
                ..
            } => self.on_start(t, job, attempt, count),
            Effect::Stop {
                job,
                attempt,
                cause,
            } => self.on_stop(t, job, attempt, cause),
            Effect::Requeued { job, .. } => self.on_requeued(t, job),
            Effect::Finished { job, status, .. } => self.on_finished(t, job, status),
        }
    }

    /// A new attempt gets its instances: the job stops waiting, and its finish and next
    /// checkpoint are scheduled.
    fn on_start(&mut self, t: u64, job: JobId, attempt: AttemptId, count: u32) {
        let i = job.0 as u32;
        let st = &mut self.state[job.0 as usize];
        if let Some(since) = st.waiting_since.take() {
            self.ledger.waiting[st.group] -= 1;
            self.ledger.fair.wait(st, false);
            st.queue_delay_ms += t - since;
            st.reclaim_delay_s +=
                self.ledger.lent[st.share][st.unit].at_least(st.count) - st.lent_at_wait;
        }
        if st.preempted_gone_ms.take() == Some(t) {
            self.groups[st.group].needless_preemptions += 1;
        }
        let overhead = if st.attempts > 0 { self.overhead_ms } else { 0 };
        st.attempts += 1;
        st.current = Some(Running {
            attempt: attempt.0,
            start_ms: t,
            overhead_ms: overhead,
            base_work_ms: st.done_work_ms,
            stopping: false,
        });
        self.ledger.usage[st.share][st.unit] += count;
        self.ledger.group_usage[st.group][st.unit] += count;
        self.ledger.split[st.share][st.group][st.unit] += count;
        let finish = t + overhead + (st.duration_ms - st.done_work_ms);
        let attempt = attempt.0;
        self.queue
            .push(finish, EventKind::Finish { job: i, attempt });
        let next = st.checkpoint_above(st.done_work_ms);
        if next < st.duration_ms {
            let at = t + overhead + (next - st.done_work_ms);
            self.queue
                .push(at, EventKind::Checkpoint { job: i, attempt });
        }
    }

    /// The core stops an attempt: the job rolls back to its last checkpoint, and the
    /// attempt's processes are gone after the grace.
    fn on_stop(&mut self, t: u64, job: JobId, attempt: AttemptId, cause: StopCause) {
        let st = &mut self.state[job.0 as usize];
        let Some(mut r) = st.current else { return };
        if r.attempt != attempt.0 || r.stopping {
            return;
        }
        let reached = st.work_at(&r, t);
        let kept = st.checkpoint_below(reached).max(r.base_work_ms);
        let g = &mut self.groups[st.group];
        if cause.is_preemption() {
            g.preemptions += 1;
        }
        g.lost_ms_instances += (reached - kept) as f64 * f64::from(st.count);
        g.overhead_ms_instances += (t - r.start_ms).min(r.overhead_ms) as f64 * f64::from(st.count);
        st.done_work_ms = kept;
        r.stopping = true;
        st.current = Some(r);
        let stop_done = EventKind::StopDone {
            job: job.0 as u32,
            attempt: attempt.0,
        };
        self.queue.push(t + self.stop_grace_ms, stop_done);
    }

    /// A job waits again.
    fn on_requeued(&mut self, t: u64, job: JobId) {
        let st = &mut self.state[job.0 as usize];
        if st.waiting_since.replace(t).is_none() {
            self.ledger.waiting[st.group] += 1;
            self.ledger.fair.wait(st, true);
        }
        st.lent_at_wait = self.ledger.lent[st.share][st.unit].at_least(st.count);
    }

    /// A job reached its final status.
    fn on_finished(&mut self, t: u64, job: JobId, status: qm_core::JobStatus) {
        let st = &mut self.state[job.0 as usize];
        if status == qm_core::JobStatus::Succeeded {
            st.completed_ms = Some(t);
            let g = &mut self.groups[st.group];
            if st.attempts > 1 {
                // Every attempt after the first paid the overhead in full unless
                // it was preempted during it (counted at the preemption).
                g.overhead_ms_instances += self.overhead_ms as f64 * f64::from(st.count);
            }
        }
        self.finished += 1;
        self.end_ms = self.end_ms.max(t);
    }

    /// Debug builds: the core's invariants hold after every instant, and the fairness
    /// figures after every one that touched them.
    #[cfg(debug_assertions)]
    fn check(&self, t: u64, touched: bool) -> Result<(), SimError> {
        self.core
            .check_invariants()
            .and_then(|()| match touched {
                true => self.ledger.check_fairness(&self.core),
                false => Ok(()),
            })
            .map_err(|message| SimError::Invariant {
                at_s: t as f64 / 1000.0,
                message,
            })
    }

    /// The run's figures, once every event is processed.
    fn finish(self, name: &str) -> VariantRun {
        let used_capacity = used_capacity(self.cluster, self.jobs, self.opts);
        let mut run = collect(
            name,
            self.reference,
            &self.state,
            &self.groups,
            self.timeline,
            (self.first_submit_ms, self.end_ms),
            used_capacity,
        );
        let used_units: Vec<bool> = (0..self.unit_names.len())
            .map(|u| self.state.iter().any(|st| st.unit == u))
            .collect();
        let capacity_ms = used_capacity * self.end_ms.saturating_sub(self.first_submit_ms) as f64;
        run.metrics.idle_while_waiting =
            idle_stats(&self.ledger, &self.unit_names, &used_units, capacity_ms);
        run.metrics.fairness = fairness_stats(&self.ledger.fair);
        run
    }
}

/// The fairness integrals as means (1 over no time: nobody was behind anybody).
fn fairness_stats(fair: &FairLedger) -> FairnessStats {
    let mean = |integral: f64, ms: f64| if ms > 0.0 { round3(integral / ms) } else { 1.0 };
    FairnessStats {
        jain: mean(fair.jain_ms, fair.span_ms),
        jain_contended: mean(fair.jain_contended_ms, fair.contended_ms),
        contended_hours: round3(fair.contended_ms / 3_600_000.0),
    }
}

/// The idle-while-waiting integrals in hours, against `capacity_ms` (instances × ms of the
/// span utilization is over).
fn idle_stats(
    ledger: &Ledger,
    unit_names: &[String],
    used_units: &[bool],
    capacity_ms: f64,
) -> IdleStats {
    let hours = |ms_instances: f64| round3(ms_instances / 3_600_000.0);
    let total: f64 = ledger.idle_by_cause.iter().sum();
    let by_cause: std::collections::BTreeMap<&'static str, f64> = IdleCause::ALL
        .iter()
        .zip(ledger.idle_by_cause)
        .map(|(c, v)| (c.code(), hours(v)))
        .collect();
    // The first maximum in `IdleCause::ALL` order wins a tie.
    let cause = IdleCause::ALL
        .iter()
        .zip(ledger.idle_by_cause)
        .rev()
        .filter(|(_, v)| *v > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c.code());
    IdleStats {
        instance_hours: hours(total),
        fraction: if capacity_ms > 0.0 {
            round3(total / capacity_ms).min(1.0)
        } else {
            0.0
        },
        cause,
        by_cause,
        by_instance_type: unit_names
            .iter()
            .zip(&ledger.idle_by_unit)
            .zip(used_units)
            .filter(|(_, used)| **used)
            .map(|((u, v), _)| (u.clone(), hours(*v)))
            .collect(),
    }
}

/// The statistics of `members`, jobs whose usage the groups `gs` hold, over a run of
/// `span_ms` on `capacity` instances.
fn stats_of(members: &[&JobState], gs: &[&Group], span_ms: f64, capacity: f64) -> Stats {
    let hours = |ms_instances: f64| round3(ms_instances / 3_600_000.0);
    let mut jct = Vec::new();
    let mut queue = Vec::new();
    let mut slowdown = Vec::new();
    let mut reclaim = Vec::new();
    let mut never = 0;
    for st in members {
        if st.attempts == 0 {
            never += 1;
        } else {
            reclaim.push(st.reclaim_delay_s);
        }
        if let Some(c) = st.completed_ms {
            let jct_s = (c - st.submit_ms) as f64 / 1000.0;
            jct.push(jct_s);
            queue.push(st.queue_delay_ms as f64 / 1000.0);
            let run_s = (st.duration_ms as f64 / 1000.0).max(SLOWDOWN_MIN_RUN_S);
            slowdown.push(jct_s / run_s);
        }
    }
    let usage: f64 = gs.iter().map(|g| g.usage_integral).sum();
    Stats {
        jobs: members.len() as u64,
        completed: jct.len() as u64,
        never_started: never,
        jct_s: Dist::of(&mut jct),
        queue_delay_s: Dist::of(&mut queue),
        slowdown: Dist::of(&mut slowdown),
        reclaim_delay_s: Dist::of(&mut reclaim),
        preemptions: gs.iter().map(|g| g.preemptions).sum(),
        needless_preemptions: gs.iter().map(|g| g.needless_preemptions).sum(),
        lost_gpu_hours: hours(gs.iter().map(|g| g.lost_ms_instances).sum()),
        restart_overhead_gpu_hours: hours(gs.iter().map(|g| g.overhead_ms_instances).sum()),
        borrowed_gpu_hours: hours(gs.iter().map(|g| g.borrowed_integral).sum()),
        utilization: if capacity > 0.0 && span_ms > 0.0 {
            round3(usage / (capacity * span_ms)).min(1.0)
        } else {
            0.0
        },
    }
}

/// The report's timeline from the run's bins, up to `end_ms`.
fn timeline_of(reference: &Cluster, timeline: Bins, end_ms: u64, capacity: f64) -> Timeline {
    let groups_n = timeline.groups();
    let (start_s, bin_s, mut series) = timeline.finish(end_ms);
    let jain = series.pop().unwrap_or_default();
    let idle_waiting = series.pop().unwrap_or_default();
    let queued = series.split_off(2 * groups_n);
    let borrowed = series.split_off(groups_n);
    let own = series;
    Timeline {
        start_s,
        bin_s,
        capacity,
        shares: reference.shares.iter().map(|s| s.name.clone()).collect(),
        own,
        borrowed,
        queued,
        idle_waiting,
        jain,
    }
}

fn collect(
    name: &str,
    reference: &Cluster,
    state: &[JobState],
    groups: &[Group],
    timeline: Bins,
    (first_ms, end_ms): (u64, u64),
    capacity: f64,
) -> VariantRun {
    let span_ms = end_ms.saturating_sub(first_ms) as f64;
    let all: Vec<&JobState> = state.iter().collect();
    let all_groups: Vec<&Group> = groups.iter().collect();
    let overall = stats_of(&all, &all_groups, span_ms, capacity);
    let shares = reference
        .shares
        .iter()
        .enumerate()
        .map(|(g, s)| {
            let members: Vec<&JobState> = state.iter().filter(|st| st.group == g).collect();
            ShareStats {
                name: s.name.clone(),
                stats: stats_of(&members, &[&groups[g]], span_ms, capacity),
            }
        })
        .collect();
    let mut queue_delays: Vec<f64> = state
        .iter()
        .filter(|st| st.completed_ms.is_some())
        .map(|st| st.queue_delay_ms as f64 / 1000.0)
        .collect();
    queue_delays.sort_by(f64::total_cmp);
    VariantRun {
        metrics: VariantMetrics {
            name: name.to_string(),
            overall,
            shares,
            idle_while_waiting: IdleStats::default(),
            fairness: FairnessStats::default(),
        },
        timeline: timeline_of(reference, timeline, end_ms, capacity),
        queue_delays,
    }
}
