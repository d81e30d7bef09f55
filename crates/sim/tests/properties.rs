//! Properties of any simulation: every job ends completed or never started, the shares add up
//! to the whole, nothing is negative, utilization stays within 0..1, the fairness index within
//! (0, 1], and a run is a function of its inputs. The core's invariants are checked after every instant (debug build).

use std::collections::BTreeMap;

use proptest::prelude::*;
use qm_core::{ShareSpec, Strategy as Sharing};
use qm_sim::*;

fn strategy_of(i: u8) -> Sharing {
    match i % 3 {
        0 => Sharing::Reserve,
        1 => Sharing::Lend,
        _ => Sharing::LendAndBorrow,
    }
}

prop_compose! {
    fn cluster()(limits in prop::collection::vec((1u32..6, 0u8..3, any::<bool>(), -1i32..150), 1..4))
        -> Cluster
    {
        let shares: Vec<ShareSpec> = limits
            .iter()
            .enumerate()
            .map(|(i, &(limit, strategy, isp, borrow))| {
                let mut s = ShareSpec::new(format!("s{i}"));
                s.limits.insert("gpu".into(), limit);
                s.strategy = strategy_of(strategy);
                s.in_share_preemption = isp;
                if s.strategy == Sharing::LendAndBorrow {
                    s.borrow_limit_percent = borrow;
                }
                s
            })
            .collect();
        let total: u32 = limits.iter().map(|l| l.0).sum();
        Cluster {
            environment: [("gpu".to_string(), total)].into(),
            shares,
            tenants: BTreeMap::new(),
            ..Default::default()
        }
    }
}

fn workload(shares: usize) -> impl Strategy<Value = Vec<WorkloadJob>> {
    prop::collection::vec(
        (0u64..3000, 1u64..4000, 1u32..5, 0u32..4, 0..shares, 0u64..3),
        1..40,
    )
    .prop_map(|rows| {
        let mut jobs: Vec<WorkloadJob> = rows
            .into_iter()
            .enumerate()
            .map(
                |(i, (submit, duration, gpus, priority, share, ck))| WorkloadJob {
                    job_id: format!("j{i}"),
                    tenant: format!("s{share}"),
                    submit_time_s: submit,
                    duration_s: duration,
                    gpus,
                    status: "UNKNOWN".into(),
                    priority: Some(priority),
                    instance_type: None,
                    checkpoint_interval_s: [None, Some(300), Some(1000)][ck as usize],
                    ..WorkloadJob::default()
                },
            )
            .collect();
        jobs.sort_by_key(|j| j.submit_time_s);
        jobs
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_run_accounts_for_every_job_and_adds_up(
        (c, jobs) in cluster().prop_flat_map(|c| { let n = c.shares.len(); (Just(c), workload(n)) }),
        seed in any::<u64>(),
    ) {
        let opts = SimOptions {
            seed,
            checkpoint: CheckpointSettings { interval_s: 600, restart_overhead_s: 30, stop_grace_s: 45 },
            ..SimOptions::default()
        };
        for (variant, fifo) in [(c.clone(), false), (c.strict(), false), (c.pooled(), true)] {
            let o = SimOptions { ignore_priorities: fifo, ..opts.clone() };
            let run = run_variant("v", &variant, &c, &jobs, &o, &mut |_, _, _| {}).unwrap();
            let m = &run.metrics;
            prop_assert_eq!(m.overall.jobs as usize, jobs.len());
            prop_assert_eq!(m.overall.completed + m.overall.never_started, m.overall.jobs,
                "a job started but never completed");
            prop_assert_eq!(m.shares.iter().map(|s| s.stats.jobs).sum::<u64>(), m.overall.jobs);
            prop_assert_eq!(m.shares.iter().map(|s| s.stats.preemptions).sum::<u64>(), m.overall.preemptions);
            prop_assert!((0.0..=1.0).contains(&m.overall.utilization));
            let share_util: f64 = m.shares.iter().map(|s| s.stats.utilization).sum();
            prop_assert!((share_util - m.overall.utilization).abs() < 0.01, "{share_util} vs {}", m.overall.utilization);
            for s in std::iter::once(&m.overall).chain(m.shares.iter().map(|s| &s.stats)) {
                prop_assert!(s.lost_gpu_hours >= 0.0 && s.restart_overhead_gpu_hours >= 0.0);
                prop_assert!(s.queue_delay_s.p50 >= 0.0 && s.reclaim_delay_s.p50 >= 0.0);
                // Each job's completion time includes its waits, so every order statistic does.
                prop_assert!(s.jct_s.p50 >= s.queue_delay_s.p50 && s.jct_s.p99 >= s.queue_delay_s.p99);
            }
            // The fairness index is Jain's: within (0, 1], and 1 where nobody borrows.
            let f = &m.fairness;
            prop_assert!(f.jain > 0.0 && f.jain <= 1.0 && f.jain_contended > 0.0 && f.jain_contended <= 1.0, "{f:?}");
            prop_assert!(f.contended_hours >= 0.0);
            if !variant.shares.iter().any(|s| s.strategy == Sharing::LendAndBorrow) {
                prop_assert_eq!((f.jain, f.contended_hours), (1.0, 0.0));
            }
            if variant.shares.iter().all(|s| s.strategy == Sharing::Reserve) && !variant.shares.iter().any(|s| s.in_share_preemption) {
                prop_assert_eq!(m.overall.borrowed_gpu_hours, 0.0);
                // Only the starvation guard preempts here (jobs backfilled onto an aged head's
                // reservation); without it nothing does.
                let mut unguarded = o.clone();
                unguarded.core.reserve_after_ms = u64::MAX;
                let r = run_variant("v", &variant, &c, &jobs, &unguarded, &mut |_, _, _| {}).unwrap();
                prop_assert_eq!(r.metrics.overall.preemptions, 0, "nothing to preempt for");
            }
            let again = run_variant("v", &variant, &c, &jobs, &o, &mut |_, _, _| {}).unwrap();
            prop_assert_eq!(&run, &again);
        }
    }
}
