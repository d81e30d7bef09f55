//! Calibration: how far to trust the simulator. A period's real jobs, exported with what
//! really happened to them (`qm workload export`: the `real_*` columns), are replayed under
//! the policy that really ran, and the simulated figures are set beside the real ones:
//! completion time p50 and p95, utilization and preemptions.
//!
//! Both sides are measured over the same jobs and the same way as the simulator measures
//! (`metrics`): completion is submission to the end of the last attempt; utilization is
//! instance-time held (preempted attempts' grace included) over the capacity of the instance
//! types the jobs use, between the first submission and the last completion.

use std::fmt;

use crate::engine::{run_variant, Cluster, SimOptions};
use crate::error::SimError;
use crate::metrics::{round3, Dist};
use crate::workload::WorkloadJob;

/// The figures compared, for one side.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// Completion time (submission to the end of the last attempt), median, seconds.
    pub completion_p50_s: f64,
    /// Completion time, 95th percentile (nearest rank), seconds.
    pub completion_p95_s: f64,
    /// Instance-time used over capacity-time, 0..1.
    pub utilization: f64,
    /// Attempts preempted.
    pub preemptions: u64,
}

/// The simulated figures of a period beside the real ones. `Display` is the one-line
/// calibration that `qm workload calibrate` (and the review) prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Calibration {
    /// Jobs compared.
    pub jobs: usize,
    /// The simulator's figures for the jobs under the policy.
    pub simulated: Figures,
    /// What really happened to them.
    pub real: Figures,
}

/// Replays `jobs` (an export with its `real_*` columns) under `cluster` with `opts` and
/// returns the simulated figures beside the real ones. Errors: a job without the real
/// columns (not an export), no job at all, or anything the simulator refuses (an unmapped
/// tenant, an instance type the cluster lacks).
pub fn calibrate(
    jobs: &[WorkloadJob],
    cluster: &Cluster,
    opts: &SimOptions,
) -> Result<Calibration, SimError> {
    if jobs.is_empty() {
        return Err(SimError::Options(
            "calibration needs at least one job; widen --since/--until".into(),
        ));
    }
    let real = real_figures(jobs, cluster, opts)?;
    let run = run_variant(
        "calibration",
        cluster,
        cluster,
        jobs,
        opts,
        &mut |_, _, _| {},
    )?;
    let o = &run.metrics.overall;
    Ok(Calibration {
        jobs: jobs.len(),
        simulated: Figures {
            completion_p50_s: o.jct_s.p50,
            completion_p95_s: o.jct_s.p95,
            utilization: o.utilization,
            preemptions: o.preemptions,
        },
        real,
    })
}

/// What really happened to `jobs`, measured as the simulator measures.
pub fn real_figures(
    jobs: &[WorkloadJob],
    cluster: &Cluster,
    opts: &SimOptions,
) -> Result<Figures, SimError> {
    let mut completions = Vec::with_capacity(jobs.len());
    let (mut held_ms, mut preemptions) = (0.0, 0u64);
    let (mut first_ms, mut end_ms) = (u64::MAX, 0u64);
    for (i, j) in jobs.iter().enumerate() {
        let (Some(completion), Some(preempted), Some(held)) =
            (j.real_completion_ms, j.real_preemptions, j.real_instance_ms)
        else {
            return Err(SimError::Workload {
                path: "workload".into(),
                line: i + 2,
                message: format!(
                    "job {} has no real_completion_ms, real_preemptions and real_instance_ms; calibration needs a workload written by `qm workload export`",
                    j.job_id
                ),
            });
        };
        let submit_ms = j.submit_time_s * 1000;
        completions.push(completion as f64 / 1000.0);
        held_ms += held as f64;
        preemptions += u64::from(preempted);
        first_ms = first_ms.min(submit_ms);
        end_ms = end_ms.max(submit_ms + completion);
    }
    let unit = |j: &WorkloadJob| {
        j.instance_type
            .clone()
            .unwrap_or_else(|| opts.instance_type.clone())
    };
    let capacity: f64 = cluster
        .environment
        .iter()
        .filter(|(u, _)| jobs.iter().any(|j| unit(j) == **u))
        .map(|(_, &n)| f64::from(n))
        .sum();
    let span_ms = end_ms.saturating_sub(first_ms) as f64;
    let dist = Dist::of(&mut completions);
    Ok(Figures {
        completion_p50_s: dist.p50,
        completion_p95_s: dist.p95,
        utilization: if capacity > 0.0 && span_ms > 0.0 {
            round3(held_ms / (capacity * span_ms)).min(1.0)
        } else {
            0.0
        },
        preemptions,
    })
}

/// Two durations in one unit, chosen by the larger so that they read side by side: seconds
/// under two minutes, minutes under two hours, else hours.
fn pair(a_s: f64, b_s: f64) -> String {
    let (div, unit) = match a_s.max(b_s) {
        m if m < 120.0 => (1.0, "s"),
        m if m < 7200.0 => (60.0, "min"),
        _ => (3600.0, "h"),
    };
    format!("{:.1} {unit} vs {:.1} {unit}", a_s / div, b_s / div)
}

impl fmt::Display for Calibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, r) = (&self.simulated, &self.real);
        write!(
            f,
            "calibration (simulated vs real, {} jobs): completion p50 {}, p95 {}, utilization {:.0} % vs {:.0} %, preemptions {} vs {}",
            self.jobs,
            pair(s.completion_p50_s, r.completion_p50_s),
            pair(s.completion_p95_s, r.completion_p95_s),
            s.utilization * 100.0,
            r.utilization * 100.0,
            s.preemptions,
            r.preemptions
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_core::{ShareSpec, Strategy};

    fn cluster() -> Cluster {
        let mut a = ShareSpec::new("A");
        a.limits.insert("gpu".into(), 2);
        a.strategy = Strategy::Reserve;
        Cluster {
            environment: [("gpu".to_string(), 2)].into(),
            shares: vec![a],
            tenants: Default::default(),
            ..Default::default()
        }
    }

    /// Exported job: `work` seconds of work on one instance, really completed after
    /// `completion` seconds holding `held` instance-seconds, preempted `preempted` times.
    fn exported(id: &str, submit: u64, work: u64, real: (u64, u32, u64)) -> WorkloadJob {
        WorkloadJob {
            job_id: id.into(),
            tenant: "A".into(),
            submit_time_s: submit,
            duration_s: work,
            gpus: 1,
            status: "SUCCEEDED".into(),
            real_completion_ms: Some(real.0 * 1000),
            real_preemptions: Some(real.1),
            real_instance_ms: Some(real.2 * 1000),
            ..WorkloadJob::default()
        }
    }

    #[test]
    fn the_real_side_is_measured_from_the_export_and_the_simulated_side_from_a_replay() {
        // Real: a ran 0..100 (held 100 s), b waited behind a preemption and ended at 300
        // (held 250 s): completions 100 and 300, 350 of 2 × 300 instance-seconds used.
        // Simulated: both start at once on the 2 instances and end at 100: 200 of 2 × 100
        // instance-seconds used.
        let jobs = [
            exported("a", 0, 100, (100, 0, 100)),
            exported("b", 0, 100, (300, 1, 250)),
        ];
        let c = calibrate(&jobs, &cluster(), &SimOptions::default()).unwrap();
        assert_eq!(c.jobs, 2);
        assert_eq!(
            c.real,
            Figures {
                completion_p50_s: 100.0,
                completion_p95_s: 300.0,
                utilization: round3(350.0 / 600.0),
                preemptions: 1,
            }
        );
        assert_eq!(
            c.simulated,
            Figures {
                completion_p50_s: 100.0,
                completion_p95_s: 100.0,
                utilization: 1.0,
                preemptions: 0,
            }
        );
        assert_eq!(
            c.to_string(),
            "calibration (simulated vs real, 2 jobs): completion p50 100.0 s vs 100.0 s, p95 1.7 min vs 5.0 min, utilization 100 % vs 58 %, preemptions 0 vs 1"
        );
    }

    #[test]
    fn a_workload_without_the_real_columns_is_refused_by_its_line() {
        let mut j = exported("a", 0, 100, (100, 0, 100));
        j.real_instance_ms = None;
        let e = calibrate(&[j], &cluster(), &SimOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(":2:") && e.contains("qm workload export"), "{e}");
    }
}
