//! What a simulation measures, in the shape `metrics.json` has (stable keys, documented in the
//! README): per variant, `overall` and one entry per share, each with the same statistics.
//! Distributions are `{p50, p95, p99, mean}` in seconds (nearest-rank percentiles over the
//! jobs that have a value; all zero when none has), but for the slowdown, a ratio. The
//! fairness of idle capacity is [`FairnessStats`], with its index [`jain_index`].

use serde::Serialize;

/// The whole output of `qm simulate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metrics {
    /// The workload file as given.
    pub workload: String,
    /// Jobs in the workload.
    pub jobs: usize,
    /// The seed (checkpoint phases).
    pub seed: u64,
    /// The checkpoint model used.
    pub checkpoint: CheckpointSettings,
    /// One per policy, in the order given, baselines last.
    pub variants: Vec<VariantMetrics>,
}

/// The checkpoint model's parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckpointSettings {
    /// Seconds of work between checkpoints (a job's own `checkpoint_interval_s` wins).
    pub interval_s: u64,
    /// Seconds a restarted attempt spends before doing new work (loading the checkpoint).
    pub restart_overhead_s: u64,
    /// Seconds a preempted attempt keeps its instances (SIGTERM to exit).
    pub stop_grace_s: u64,
}

/// One policy's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariantMetrics {
    /// The policy's name (file stem, or `strict` / `pooled` for baselines).
    pub name: String,
    /// Every job.
    pub overall: Stats,
    /// Per share of the reference policy (the first `--policy`), in its order.
    pub shares: Vec<ShareStats>,
    /// Capacity left idle while jobs that fit it waited.
    pub idle_while_waiting: IdleStats,
    /// How evenly idle capacity went to the shares that wanted it.
    pub fairness: FairnessStats,
}

/// How evenly a policy gave idle capacity to the shares that waited for it: Jain's index of
/// the *weighted borrowed shares* (as `qm_core::Scheduler::fairness` defines them: over the
/// instance types, the largest `borrowed / (weight × what lending shares are entitled to)`)
/// of the shares that wait to borrow, integrated over simulated time.
///
/// A share *waits to borrow* at an instant when it may borrow (`LEND_AND_BORROW`) and one of
/// its RUNNABLE interruptible jobs needs more instances of its type than the share has left
/// of its entitlement (it could only start on others' capacity). Only those shares count:
/// a share that borrows a lot and wants nothing more is not treated unfairly by anyone. At
/// an instant when fewer than two shares wait to borrow, or none of them borrows anything,
/// the index is 1 (nobody is behind anybody).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FairnessStats {
    /// The index's time-weighted mean from the first submission to the last event, 0..1
    /// (1 at instants when fewer than two shares wait to borrow).
    pub jain: f64,
    /// Its time-weighted mean over the contended time only (at least two shares waiting to
    /// borrow); 1 when there was none.
    pub jain_contended: f64,
    /// Hours during which at least two shares waited to borrow.
    pub contended_hours: f64,
}

/// Jain's fairness index `(Σx)² / (n · Σx²)` of `xs`: 1 when all are equal, `1/n` when one
/// holds everything. 1 for fewer than two values or when all are zero (nobody is behind).
pub fn jain_index(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.len() < 2 || squares <= 0.0 {
        return 1.0;
    }
    // Rounding can put an index of equal values a hair above 1.
    (sum * sum / (xs.len() as f64 * squares)).min(1.0)
}

/// Instance-hours during which instances were free while a RUNNABLE job that fits them
/// waited (`qm_core::Scheduler::idle_while_waiting`, integrated over simulated time): the
/// capacity a policy wastes. Each instant's idle instances go to that instant's dominant cause.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IdleStats {
    /// Instance-hours idle while jobs that fit waited.
    pub instance_hours: f64,
    /// Of the capacity-hours of the units the workload uses, between the first submission
    /// and the last completion (the span `utilization` is over), 0..1.
    pub fraction: f64,
    /// The cause with the most instance-hours (`qm_core::IdleCause::code`), `null` when none.
    pub cause: Option<&'static str>,
    /// Instance-hours per cause code, every code present (zero when none).
    pub by_cause: std::collections::BTreeMap<&'static str, f64>,
    /// Instance-hours per instance type the workload uses.
    pub by_instance_type: std::collections::BTreeMap<String, f64>,
}

/// A share's results: its name plus the statistics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShareStats {
    /// Share name.
    pub name: String,
    /// Its jobs' statistics.
    #[serde(flatten)]
    pub stats: Stats,
}

/// The statistics of a set of jobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Jobs submitted.
    pub jobs: u64,
    /// Jobs that finished their work.
    pub completed: u64,
    /// Jobs that never got an instance (they can never fit, or the run ended first).
    pub never_started: u64,
    /// Completion time: submission to the end of the last attempt, completed jobs.
    pub jct_s: Dist,
    /// Time spent RUNNABLE (every wait, re-queues after preemption included), completed jobs.
    pub queue_delay_s: Dist,
    /// Slowdown of completed jobs: completion time over run time (the job's work,
    /// `duration_s`, counted as at least [`SLOWDOWN_MIN_RUN_S`]); 1 for a job that never
    /// waited nor lost work. A ratio, not seconds.
    pub slowdown: Dist,
    /// Time spent RUNNABLE while the job's own share had enough idle entitlement for it, and
    /// some shares borrowed (its capacity was lent out), started jobs.
    pub reclaim_delay_s: Dist,
    /// Attempts preempted (reclaim, in-share, or taken back for the aged head they were
    /// backfilled onto).
    pub preemptions: u64,
    /// Of those, preemptions whose victim started again at the instant its stopped attempt
    /// was gone (it got its instances straight back): work stopped for nothing.
    pub needless_preemptions: u64,
    /// Work rolled back by preemptions (since the last checkpoint), in GPU-hours.
    pub lost_gpu_hours: f64,
    /// Time restarted attempts spent loading their checkpoint, in GPU-hours.
    pub restart_overhead_gpu_hours: f64,
    /// Instance-hours used above the share's entitlement.
    pub borrowed_gpu_hours: f64,
    /// Instance-hours used over the capacity-hours of the environment, between the first
    /// submission and the last completion (0..1; a share's values add up to the overall one).
    pub utilization: f64,
}

/// The shortest run time a slowdown divides by (Feitelson's *bounded* slowdown): a job of a
/// few seconds that waits a minute would otherwise weigh as much as thousands of long ones.
pub const SLOWDOWN_MIN_RUN_S: f64 = 10.0;

/// A distribution summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Dist {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

impl Dist {
    /// Summarizes `values` (sorted in place); nearest-rank percentiles, values rounded to
    /// milliseconds so that the JSON is stable.
    pub fn of(values: &mut [f64]) -> Dist {
        if values.is_empty() {
            return Dist::default();
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let n = values.len();
            let k = ((p / 100.0) * n as f64).ceil() as usize;
            values[k.clamp(1, n) - 1]
        };
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Dist {
            p50: round3(rank(50.0)),
            p95: round3(rank(95.0)),
            p99: round3(rank(99.0)),
            mean: round3(mean),
        }
    }
}

/// Rounds to three decimals (milliseconds, or thousandths of a GPU-hour).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// What the report plots for one variant beyond its metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Simulated second of the first bin's start.
    pub start_s: f64,
    /// Width of a bin in seconds.
    pub bin_s: f64,
    /// The environment's capacity (instances, all types).
    pub capacity: f64,
    /// Share names, as in `VariantMetrics::shares`.
    pub shares: Vec<String>,
    /// `own[share][bin]`: mean instances the share used within its entitlement in the bin.
    pub own: Vec<Vec<f64>>,
    /// `borrowed[share][bin]`: mean instances it used above its entitlement in the bin.
    pub borrowed: Vec<Vec<f64>>,
    /// `queued[share][bin]`: mean RUNNABLE jobs of the share in the bin (queue depth).
    pub queued: Vec<Vec<f64>>,
    /// `idle_waiting[bin]`: mean instances idle while jobs that fit them waited.
    pub idle_waiting: Vec<f64>,
    /// `jain[bin]`: mean Jain index of the weighted borrowed shares of the shares waiting to
    /// borrow (1 when fewer than two wait; see [`FairnessStats`]).
    pub jain: Vec<f64>,
}

/// One variant's full result: metrics, timeline and the raw queueing delays (for CDFs).
#[derive(Clone, Debug, PartialEq)]
pub struct VariantRun {
    /// The metrics.
    pub metrics: VariantMetrics,
    /// Usage over time.
    pub timeline: Timeline,
    /// Queueing delay of every completed job, seconds, sorted ascending.
    pub queue_delays: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let d = Dist::of(&mut v);
        assert_eq!((d.p50, d.p95, d.p99, d.mean), (50.0, 95.0, 99.0, 50.5));
        let mut one = vec![7.0];
        assert_eq!(Dist::of(&mut one).p99, 7.0);
        assert_eq!(Dist::of(&mut []), Dist::default());
    }
}
