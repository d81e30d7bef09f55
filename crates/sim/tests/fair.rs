//! Fair sharing of idle capacity in the simulator (issue 21): on a small workload computed by
//! hand, FAIR_SHARE gives idle capacity to the share that borrows least where FIFO gives it
//! to the share that came first, and the fairness figure (the time-weighted Jain index of the
//! weighted borrowed shares of the shares waiting to borrow) says so. Variants that differ
//! only in the mode, the weights or the groups run side by side against one reference.

use std::collections::BTreeMap;

use qm_core::{GroupSpec, IdleAssignment, ShareSpec, Strategy};
use qm_sim::*;

fn share(name: &str, limit: u32, strategy: Strategy) -> ShareSpec {
    let mut s = ShareSpec::new(name);
    s.limits.insert("gpu".into(), limit);
    s.strategy = strategy;
    s
}

/// Eight GPUs: `L` owns six and lends them (it submits nothing), `A` and `B` own one each and
/// borrow. Lending shares are entitled to 8 GPUs in all (every share lends), the pool a
/// weighted borrowed share divides by.
fn cluster(mode: IdleAssignment) -> Cluster {
    Cluster {
        environment: [("gpu".to_string(), 8)].into(),
        shares: vec![
            share("L", 6, Strategy::Lend),
            share("A", 1, Strategy::LendAndBorrow),
            share("B", 1, Strategy::LendAndBorrow),
        ],
        tenants: BTreeMap::new(),
        idle_assignment: mode,
        ..Default::default()
    }
}

/// A and B submit 28 one-GPU jobs of 1,000 s each at t = 0, A's first.
fn workload() -> Vec<WorkloadJob> {
    let mut jobs = Vec::new();
    for tenant in ["A", "B"] {
        for i in 0..28 {
            jobs.push(WorkloadJob {
                job_id: format!("{tenant}{i}"),
                tenant: tenant.into(),
                submit_time_s: 0,
                duration_s: 1000,
                gpus: 1,
                status: "UNKNOWN".into(),
                ..WorkloadJob::default()
            });
        }
    }
    jobs
}

fn run(c: &Cluster, reference: &Cluster) -> VariantRun {
    let opts = SimOptions {
        seeded_phase: false,
        ..SimOptions::default()
    };
    run_variant("v", c, reference, &workload(), &opts, &mut |_, _, _| {}).unwrap()
}

fn stats<'a>(r: &'a VariantRun, name: &str) -> &'a Stats {
    &r.metrics
        .shares
        .iter()
        .find(|s| s.name == name)
        .unwrap()
        .stats
}

#[test]
fn fair_share_gives_idle_capacity_to_the_share_that_borrows_least_and_the_jain_index_says_so() {
    let fifo_cluster = cluster(IdleAssignment::Fifo);
    let fair_cluster = cluster(IdleAssignment::FairShare);
    let fifo = run(&fifo_cluster, &fifo_cluster);
    let fair = run(&fair_cluster, &fifo_cluster);

    // FIFO: A came first and takes L's six idle GPUs for its four waves of seven (one own,
    // six borrowed) while B runs one job a wave on its own GPU; B borrows only once A is done
    // (three waves of eight). B's jobs end at 1..4 × 1,000 s (one each) and 5..7 × 1,000 s
    // (eight each): mean 5,500 s; A's at 1..4 × 1,000 s, seven each: 2,500 s.
    assert_eq!(stats(&fifo, "B").jct_s.mean, 5500.0);
    assert_eq!(stats(&fifo, "A").jct_s.mean, 2500.0);
    // FAIR_SHARE: the six idle GPUs alternate between A and B (the one whose weighted
    // borrowed share after admission is lower; A on ties, by submission), so each runs four
    // jobs a wave for seven waves: mean 4,000 s for both.
    assert_eq!(stats(&fair, "B").jct_s.mean, 4000.0);
    assert_eq!(stats(&fair, "A").jct_s.mean, 4000.0);
    // When each borrows changes: under FIFO, A borrows six GPUs for 4,000 s and B borrows
    // seven (L's six and A's own, idle once A is done) for 3,000 s; under FAIR_SHARE each
    // borrows three for 7,000 s.
    let borrowed = |r: &VariantRun, s: &str| stats(r, s).borrowed_gpu_hours;
    assert_eq!(borrowed(&fifo, "A"), 6.667);
    assert_eq!(borrowed(&fifo, "B"), 5.833);
    assert_eq!(borrowed(&fair, "A"), 5.833);
    assert_eq!(borrowed(&fair, "B"), 5.833);
    assert_eq!(fifo.metrics.overall.utilization, 1.0);
    assert_eq!(fair.metrics.overall.utilization, 1.0);

    // Jain: under FIFO both wait to borrow for the first 3,000 s (A's last wave of seven
    // starts at 3,000 s, and A then waits for nothing) with weighted borrowed shares 6/8 and
    // 0, J = 0.5; then only B waits (J = 1 by definition, not contended). Under FAIR_SHARE
    // both wait for 6,000 s at 3/8 each: J = 1.
    let (f, g) = (&fifo.metrics.fairness, &fair.metrics.fairness);
    assert_eq!(f.jain_contended, 0.5);
    assert_eq!(f.contended_hours, 0.833);
    assert_eq!(f.jain, 0.786); // (3,000 × 0.5 + 4,000 × 1) / 7,000
    assert_eq!(g.jain_contended, 1.0);
    assert_eq!(g.contended_hours, 1.667);
    assert_eq!(g.jain, 1.0);
    assert!(g.jain > f.jain);

    // Slowdown (completion time over run time): B's falls from 5.5 to 4, A's rises from 2.5.
    assert_eq!(stats(&fifo, "B").slowdown.mean, 5.5);
    assert_eq!(stats(&fair, "B").slowdown.mean, 4.0);
    assert_eq!(stats(&fifo, "A").slowdown.mean, 2.5);

    // The timeline has the index per bin: 0.5 over FIFO's first minute.
    assert_eq!(fifo.timeline.jain.first(), Some(&0.5));
    assert_eq!(fair.timeline.jain.first(), Some(&1.0));
}

#[test]
fn variants_that_differ_only_in_weights_groups_or_fair_reclaim_run_side_by_side() {
    let reference = cluster(IdleAssignment::Fifo);
    // Weight 3 for A: its borrowed GPUs count a third, so it takes five of the six idle ones
    // (after admission: A 1/24, 2/24, 3/24 (a tie with B's 3/24, A first by submission),
    // B 3/24, A 4/24, 5/24).
    let mut weighted = cluster(IdleAssignment::FairShare);
    weighted.shares[1].weight = 3;
    let w = run(&weighted, &reference);
    assert!(
        stats(&w, "A").borrowed_gpu_hours > stats(&w, "B").borrowed_gpu_hours,
        "{:?}",
        w.metrics.shares
    );
    // Unequal figures for A (5/24) and B (3/24) while both wait: J = 64/68.
    assert_eq!(w.metrics.fairness.jain_contended, 0.941);

    // A group of L and B: L lends to its own group first, so B borrows before A does.
    let mut grouped = cluster(IdleAssignment::Fifo);
    grouped.groups = vec![GroupSpec {
        name: "g".into(),
        shares: vec!["L".into(), "B".into()],
        limits: BTreeMap::new(),
        weight: 1,
    }];
    let g = run(&grouped, &reference);
    assert!(stats(&g, "B").jct_s.mean < 5500.0, "{:?}", g.metrics.shares);

    // fair_reclaim on this workload preempts nothing: idle capacity is split at the first pass.
    let mut reclaim = cluster(IdleAssignment::FairShare);
    reclaim.fair_reclaim = true;
    let r = run(&reclaim, &reference);
    assert_eq!(r.metrics.overall.preemptions, 0);
    assert_eq!(r.metrics.fairness.jain, 1.0);

    // Every variant reports by the reference's shares.
    for v in [&w, &g, &r] {
        let names: Vec<&str> = v.metrics.shares.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["L", "A", "B"]);
    }
}

#[test]
fn jain_index_of_known_values() {
    assert_eq!(jain_index(&[]), 1.0);
    assert_eq!(jain_index(&[0.7]), 1.0);
    assert_eq!(jain_index(&[0.0, 0.0, 0.0]), 1.0);
    assert_eq!(jain_index(&[0.25, 0.25, 0.25, 0.25]), 1.0);
    // One of n holds everything: 1/n.
    assert_eq!(jain_index(&[1.0, 0.0]), 0.5);
    assert_eq!(jain_index(&[0.0, 3.0, 0.0, 0.0]), 0.25);
    // (1 + 2 + 3)² / (3 × (1 + 4 + 9)) = 36 / 42.
    assert!((jain_index(&[1.0, 2.0, 3.0]) - 36.0 / 42.0).abs() < 1e-12);
    // Scale-free.
    assert!((jain_index(&[10.0, 20.0, 30.0]) - 36.0 / 42.0).abs() < 1e-12);
}

proptest::proptest! {
    /// Jain's index lies between 1/n (one holds everything) and 1 (all equal), and does not
    /// depend on the scale of the figures.
    #[test]
    fn jain_index_is_between_one_over_n_and_one(
        xs in proptest::collection::vec(0.0f64..10.0, 0..20),
        scale in 0.01f64..100.0,
    ) {
        let j = jain_index(&xs);
        let n = xs.len().max(1) as f64;
        proptest::prop_assert!(j >= 1.0 / n - 1e-12 && j <= 1.0, "{j}");
        let scaled: Vec<f64> = xs.iter().map(|x| x * scale).collect();
        proptest::prop_assert!((jain_index(&scaled) - j).abs() < 1e-9);
    }
}
