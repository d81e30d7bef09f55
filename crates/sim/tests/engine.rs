//! The simulator against small cases computed by hand (see each test's comment), and its
//! determinism. The core's invariants are checked after every instant (debug build).

use std::collections::BTreeMap;

use qm_core::{ShareSpec, Strategy};
use qm_sim::*;

const HOUR: f64 = 3600.0;

fn share(name: &str, limit: u32, strategy: Strategy) -> ShareSpec {
    let mut s = ShareSpec::new(name);
    s.limits.insert("gpu".into(), limit);
    s.strategy = strategy;
    s
}

fn cluster(env: u32, shares: Vec<ShareSpec>) -> Cluster {
    Cluster {
        environment: [("gpu".to_string(), env)].into(),
        shares,
        tenants: BTreeMap::new(),
        ..Default::default()
    }
}

fn job(
    id: &str,
    tenant: &str,
    submit: u64,
    duration: u64,
    gpus: u32,
    priority: u32,
) -> WorkloadJob {
    WorkloadJob {
        job_id: id.into(),
        tenant: tenant.into(),
        submit_time_s: submit,
        duration_s: duration,
        gpus,
        status: "UNKNOWN".into(),
        priority: Some(priority),
        instance_type: None,
        checkpoint_interval_s: None,
        ..WorkloadJob::default()
    }
}

/// Checkpoints exactly every interval from the start of work, so cases can be computed by hand.
fn opts() -> SimOptions {
    SimOptions {
        seeded_phase: false,
        ..SimOptions::default()
    }
}

fn run(c: &Cluster, jobs: &[WorkloadJob]) -> VariantRun {
    run_variant("v", c, c, jobs, &opts(), &mut |_, _, _| {}).unwrap()
}

/// As `run`, with owners reclaiming at once (no reclaim patience): the checkpoint model
/// alone decides what a reclaim loses.
fn run_impatient(c: &Cluster, jobs: &[WorkloadJob]) -> VariantRun {
    let mut o = opts();
    o.core.reclaim_patience_ms = 0;
    run_variant("v", c, c, jobs, &o, &mut |_, _, _| {}).unwrap()
}

fn share_stats<'a>(r: &'a VariantRun, name: &str) -> &'a Stats {
    &r.metrics
        .shares
        .iter()
        .find(|s| s.name == name)
        .unwrap()
        .stats
}

#[test]
fn a_lone_job_runs_at_once_and_uses_half_of_a_two_instance_environment() {
    let c = cluster(2, vec![share("A", 2, Strategy::Lend)]);
    let r = run(&c, &[job("j", "A", 0, 100, 1, 0)]);
    let o = &r.metrics.overall;
    assert_eq!((o.jobs, o.completed, o.never_started), (1, 1, 0));
    assert_eq!(o.jct_s.mean, 100.0);
    assert_eq!(o.queue_delay_s.p99, 0.0);
    assert_eq!(o.utilization, 0.5);
    assert_eq!((o.preemptions, o.lost_gpu_hours), (0, 0.0));
}

#[test]
fn two_jobs_on_one_instance_queue_one_behind_the_other() {
    // JCTs 100 and 200, waits 0 and 100; the instance is busy the whole 200 s.
    let c = cluster(1, vec![share("A", 1, Strategy::Reserve)]);
    let r = run(
        &c,
        &[job("a", "A", 0, 100, 1, 0), job("b", "A", 0, 100, 1, 0)],
    );
    let o = &r.metrics.overall;
    assert_eq!(
        (o.jct_s.p50, o.jct_s.p99, o.jct_s.mean),
        (100.0, 200.0, 150.0)
    );
    assert_eq!((o.queue_delay_s.p50, o.queue_delay_s.p99), (0.0, 100.0));
    assert_eq!(o.utilization, 1.0);
    assert_eq!(r.queue_delays, vec![0.0, 100.0]);
}

/// Share A (LEND_AND_BORROW, 1 instance) runs x (priority 5) on its own instance and y
/// (priority 1) on B's idle one from t=0, both 10,000 s long, checkpointing every 1,800 s of
/// work. At t=4,000 B's job z (100 s) arrives: B reclaims, y is the victim (lower priority).
/// y reached 4,000 s of work, its last checkpoint was at 3,600: 400 s are lost. y keeps the
/// instance for the 120 s grace; z runs 4,120..4,220 (JCT 220, waited 120 s, all of it while
/// B's instance was lent). y restarts at 4,220, pays 60 s overhead, redoes 6,400 s and ends at
/// 10,680. A borrowed 0..4,120 and again 4,220..10,000 (x ends at 10,000): 9,900 s.
#[test]
fn a_reclaim_rolls_the_borrower_back_to_its_last_checkpoint() {
    let c = cluster(
        2,
        vec![
            share("A", 1, Strategy::LendAndBorrow),
            share("B", 1, Strategy::Lend),
        ],
    );
    let r = run_impatient(
        &c,
        &[
            job("x", "A", 0, 10_000, 1, 5),
            job("y", "A", 0, 10_000, 1, 1),
            job("z", "B", 4_000, 100, 1, 0),
        ],
    );
    let a = share_stats(&r, "A");
    let b = share_stats(&r, "B");
    assert_eq!(a.preemptions, 1);
    assert_eq!(a.lost_gpu_hours, (400.0 / HOUR * 1000.0).round() / 1000.0);
    assert_eq!(
        a.restart_overhead_gpu_hours,
        (60.0 / HOUR * 1000.0).round() / 1000.0
    );
    assert_eq!(
        a.borrowed_gpu_hours,
        9_900.0 / HOUR * 1000.0_f64.round() / 1000.0
    );
    assert_eq!((a.jct_s.p50, a.jct_s.p99), (10_000.0, 10_680.0));
    assert_eq!(a.queue_delay_s.p99, 220.0, "y waited 4,000..4,220");
    assert_eq!(b.jct_s.mean, 220.0);
    assert_eq!(b.queue_delay_s.mean, 120.0);
    assert_eq!(
        b.reclaim_delay_s.mean, 120.0,
        "z waited while B's instance was lent"
    );
    assert_eq!(b.preemptions, 0);
    assert_eq!(r.metrics.overall.preemptions, 1);
}

/// The reclaim case above with y 8,000 s long. Interruptible, y borrows B's instance and is
/// the victim at 4,000 (priority 1 < 5): 400 s since its checkpoint at 3,600 are lost, it
/// restarts at 4,220 with 60 s overhead and ends at 8,680; x ends at 10,000. Of the
/// non-interruptible class (the workload's `class` column) y runs only within A's quota,
/// counted first: it holds A's own instance 0..8,000 untouched, and x borrows B's instead and
/// is the one reclaimed at 4,000, ending at 4,220 + 60 + 6,400 = 10,680.
#[test]
fn a_non_interruptible_job_is_counted_first_and_never_preempted() {
    let c = cluster(
        2,
        vec![
            share("A", 1, Strategy::LendAndBorrow),
            share("B", 1, Strategy::Lend),
        ],
    );
    let a_jcts = |class: Option<&str>| {
        let mut y = job("y", "A", 0, 8_000, 1, 1);
        y.class = class.map(str::to_string);
        let jobs = [
            job("x", "A", 0, 10_000, 1, 5),
            y,
            job("z", "B", 4_000, 100, 1, 0),
        ];
        let r = run_impatient(&c, &jobs);
        assert_eq!(r.metrics.overall.preemptions, 1);
        let a = share_stats(&r, "A");
        (a.jct_s.p50, a.jct_s.p99)
    };
    assert_eq!(a_jcts(None), (8_680.0, 10_000.0));
    assert_eq!(a_jcts(Some("non-interruptible")), (8_000.0, 10_680.0));
}

#[test]
fn lost_work_follows_the_checkpoint_interval_of_the_job() {
    // As above, but y checkpoints every 1,000 s: at t=4,000 it just checkpointed, nothing is
    // lost (the checkpoint at exactly 4,000 s of work is taken before the preemption).
    let c = cluster(
        2,
        vec![
            share("A", 1, Strategy::LendAndBorrow),
            share("B", 1, Strategy::Lend),
        ],
    );
    let mut y = job("y", "A", 0, 10_000, 1, 1);
    y.checkpoint_interval_s = Some(1_000);
    let mut y2 = y.clone();
    y2.checkpoint_interval_s = Some(3_000);
    let base = [
        job("x", "A", 0, 10_000, 1, 5),
        job("z", "B", 4_000, 100, 1, 0),
    ];
    let r = run_impatient(&c, &[base[0].clone(), y, base[1].clone()]);
    assert_eq!(share_stats(&r, "A").lost_gpu_hours, 0.0);
    // Every 3,000 s: last checkpoint at 3,000, 1,000 s lost.
    let r = run_impatient(&c, &[base[0].clone(), y2, base[1].clone()]);
    assert_eq!(
        share_stats(&r, "A").lost_gpu_hours,
        (1_000.0 / HOUR * 1000.0).round() / 1000.0
    );
}

/// The case of `a_reclaim_rolls_the_borrower_back_to_its_last_checkpoint` with the default
/// reclaim patience (300 s): z does not preempt y at 4,000 (400 s of work since y's last
/// checkpoint would be lost) but waits for y; y checkpoints every 250 s here, the next one at
/// 4,250, and z takes it then: nothing is lost, z waits 250 s more.
#[test]
fn with_reclaim_patience_the_owner_takes_the_borrower_at_its_next_checkpoint() {
    let c = cluster(
        2,
        vec![
            share("A", 1, Strategy::LendAndBorrow),
            share("B", 1, Strategy::Lend),
        ],
    );
    let mut y = job("y", "A", 0, 10_000, 1, 1);
    y.checkpoint_interval_s = Some(250);
    let r = run(
        &c,
        &[
            job("x", "A", 0, 10_000, 1, 5),
            y,
            job("z", "B", 4_100, 100, 1, 0),
        ],
    );
    let (a, b) = (share_stats(&r, "A"), share_stats(&r, "B"));
    assert_eq!(a.preemptions, 1);
    assert_eq!(a.lost_gpu_hours, 0.0, "taken at its checkpoint");
    assert_eq!(
        b.queue_delay_s.mean,
        150.0 + 120.0,
        "4,100..4,250, then the stop grace"
    );
}

#[test]
fn the_strict_baseline_never_lends_and_the_pooled_one_never_preempts() {
    let c = cluster(
        2,
        vec![
            share("A", 1, Strategy::LendAndBorrow),
            share("B", 1, Strategy::Lend),
        ],
    );
    let jobs = [
        job("x", "A", 0, 10_000, 1, 5),
        job("y", "A", 0, 10_000, 1, 1),
        job("z", "B", 4_000, 100, 1, 0),
    ];
    let strict = run_variant("strict", &c.strict(), &c, &jobs, &opts(), &mut |_, _, _| {}).unwrap();
    assert_eq!(strict.metrics.overall.preemptions, 0);
    assert_eq!(strict.metrics.overall.borrowed_gpu_hours, 0.0);
    // y waits for x: JCT 20,000.
    assert_eq!(share_stats(&strict, "A").jct_s.p99, 20_000.0);
    let pooled = run_variant("pooled", &c.pooled(), &c, &jobs, &opts(), &mut |_, _, _| {}).unwrap();
    assert_eq!(pooled.metrics.overall.preemptions, 0);
    // z waits for the first job to end (10,000) then runs: JCT 6,100.
    assert_eq!(share_stats(&pooled, "B").jct_s.p99, 6_100.0);
    assert_eq!(
        pooled.metrics.shares.len(),
        2,
        "grouped by the reference shares"
    );
}

#[test]
fn a_job_that_can_never_fit_is_counted_as_never_started() {
    let c = cluster(2, vec![share("A", 1, Strategy::Reserve)]);
    let r = run(
        &c,
        &[job("big", "A", 0, 10, 2, 0), job("ok", "A", 0, 10, 1, 0)],
    );
    let o = &r.metrics.overall;
    assert_eq!((o.jobs, o.completed, o.never_started), (2, 1, 1));
}

#[test]
fn an_unmapped_tenant_is_an_error_that_says_how_to_map_it() {
    let c = cluster(2, vec![share("A", 1, Strategy::Reserve)]);
    let e = run_variant(
        "v",
        &c,
        &c,
        &[job("j", "nobody", 0, 10, 1, 0)],
        &opts(),
        &mut |_, _, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("'nobody'") && e.contains("tenants"), "{e}");
    let mut mapped = c.clone();
    mapped.tenants.insert("*".into(), "A".into());
    run_variant(
        "v",
        &mapped,
        &mapped,
        &[job("j", "nobody", 0, 10, 1, 0)],
        &opts(),
        &mut |_, _, _| {},
    )
    .unwrap();
}

#[test]
fn the_same_inputs_give_the_same_results() {
    let c = cluster(
        8,
        vec![
            share("A", 4, Strategy::LendAndBorrow),
            share("B", 4, Strategy::Lend),
        ],
    );
    let jobs: Vec<WorkloadJob> = (0..300)
        .map(|i| {
            job(
                &format!("j{i}"),
                if i % 3 == 0 { "B" } else { "A" },
                i * 37 % 5000,
                200 + (i * 7919) % 9000,
                1 + (i % 4) as u32,
                (i % 5) as u32,
            )
        })
        .collect();
    let mut sorted = jobs.clone();
    sorted.sort_by_key(|j| j.submit_time_s);
    let seeded = SimOptions {
        seed: 7,
        ..SimOptions::default()
    };
    let a = run_variant("v", &c, &c, &sorted, &seeded, &mut |_, _, _| {}).unwrap();
    let b = run_variant("v", &c, &c, &sorted, &seeded, &mut |_, _, _| {}).unwrap();
    assert_eq!(a, b);
    assert!(
        a.metrics.overall.preemptions > 0,
        "the case exercises preemption"
    );
    let other = SimOptions {
        seed: 8,
        ..SimOptions::default()
    };
    let c2 = run_variant("v", &c, &c, &sorted, &other, &mut |_, _, _| {}).unwrap();
    assert_ne!(
        a.metrics.overall.lost_gpu_hours,
        c2.metrics.overall.lost_gpu_hours
    );
}

/// X (LEND_AND_BORROW, 2 of an environment of 3) runs xb (2 GPUs) from t=0 and xa (1 GPU)
/// from t=10, borrowing one instance. A (LEND, 2) submits a 2-GPU job at t=100. The first
/// victim in order is xa (least work since its start), which alone frees too little, and once
/// it is gone X no longer borrows: walking the order finds nothing (the greedy search waited
/// until xb's checkpoint at t=1,800 reordered them). The exact search takes xb at once: A's
/// job waits only the 120 s grace, and xb loses the 100 s it ran on 2 GPUs.
#[test]
fn a_reclaim_the_walk_in_victim_order_would_miss_is_found_at_once() {
    let c = cluster(
        3,
        vec![
            share("A", 2, Strategy::Lend),
            share("X", 2, Strategy::LendAndBorrow),
        ],
    );
    let r = run(
        &c,
        &[
            job("xb", "X", 0, 10_000, 2, 0),
            job("xa", "X", 10, 10_000, 1, 0),
            job("a", "A", 100, 100, 2, 0),
        ],
    );
    let a = share_stats(&r, "A");
    assert_eq!(a.queue_delay_s.mean, 120.0);
    assert_eq!(share_stats(&r, "X").preemptions, 1);
    // 2 GPUs × 100 s, as metrics round it (three decimals).
    assert_eq!(share_stats(&r, "X").lost_gpu_hours, 0.056);
}

#[test]
fn borrowing_is_the_variants_own_even_when_its_shares_have_other_names() {
    // One 4-GPU job of tenant a for an hour; shares of 2: it borrows 2 GPU-hours, whatever
    // the shares are called.
    let reference = cluster(
        4,
        vec![
            share("a", 2, Strategy::LendAndBorrow),
            share("b", 2, Strategy::Lend),
        ],
    );
    let mut renamed = cluster(
        4,
        vec![
            share("x", 2, Strategy::LendAndBorrow),
            share("y", 2, Strategy::Lend),
        ],
    );
    renamed.tenants = [("a".into(), "x".into()), ("b".into(), "y".into())].into();
    let jobs = [job("j", "a", 0, 3600, 4, 0)];
    let same = run_variant(
        "same",
        &reference,
        &reference,
        &jobs,
        &opts(),
        &mut |_, _, _| {},
    )
    .unwrap();
    let other = run_variant(
        "renamed",
        &renamed,
        &reference,
        &jobs,
        &opts(),
        &mut |_, _, _| {},
    )
    .unwrap();
    for r in [&same, &other] {
        assert_eq!(
            r.metrics.overall.borrowed_gpu_hours, 2.0,
            "{}",
            r.metrics.name
        );
        assert_eq!(share_stats(r, "a").borrowed_gpu_hours, 2.0);
        assert_eq!(share_stats(r, "b").borrowed_gpu_hours, 0.0);
    }
}

#[test]
fn a_workload_unit_missing_from_the_environment_is_an_error_naming_the_option() {
    let c = cluster(2, vec![share("A", 2, Strategy::Lend)]);
    let o = SimOptions {
        instance_type: "GPU".into(),
        ..opts()
    };
    let e = run_variant(
        "v",
        &c,
        &c,
        &[job("j", "A", 0, 10, 1, 0)],
        &o,
        &mut |_, _, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("'GPU'") && e.contains("--instance-type"), "{e}");
}

#[test]
fn utilization_counts_only_the_instance_types_the_workload_uses() {
    let mut c = cluster(2, vec![share("A", 2, Strategy::Lend)]);
    c.environment.insert("cpu".into(), 98);
    let r = run(&c, &[job("j", "A", 0, 100, 2, 0)]);
    assert_eq!(r.metrics.overall.utilization, 1.0);
}
