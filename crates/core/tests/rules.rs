//! One named scenario per scheduling rule of DESIGN.md §2 (and its corner cases), each a short
//! story told through the test world. Names are sentences.

mod support;

use qm_core::Strategy::*;
use qm_core::*;
use support::*;

/// The AWS demo's three shares: QS1 LEND_AND_BORROW 200 % with in-share preemption, QS2 LEND,
/// QS3 RESERVE, one ml.g5.xlarge each, in an environment of three.
fn aws_demo() -> World {
    let mut w = World::new(&[(G5, 3)]);
    w.share_with("QS1", LendAndBorrow, &[(G5, 1)], |s| {
        s.borrow_limit_percent = 200;
        s.in_share_preemption = true;
    });
    w.share_with("QS2", Lend, &[(G5, 1)], |_| {});
    w.share_with("QS3", Reserve, &[(G5, 1)], |_| {});
    w
}

// ---- The AWS demo (spec §8), step by step -------------------------------------------------

#[test]
fn aws_demo_borrows_then_reclaims_then_preempts_in_share() {
    let mut w = aws_demo();
    w.submit("high", "QS1", 3, 1);
    w.submit("med", "QS1", 2, 1);
    w.submit("low", "QS1", 1, 1);
    assert_eq!(w.running(), set(&["high", "med"]));
    assert_eq!(w.runnable(), set(&["low"]));
    assert_eq!(w.reason("low"), "NOTHING_TO_BORROW");
    assert!(w.preempted().is_empty());

    w.submit("qs2", "QS2", 1, 1);
    assert_eq!(w.preempted(), set(&["med"]));
    assert_eq!(w.running(), set(&["high", "qs2"]));
    assert_eq!(w.runnable(), set(&["low", "med"]));
    assert!(w
        .job("med")
        .status_reason
        .contains("reclaimed by quota share QS2"));

    w.priority("low", 4);
    assert_eq!(w.preempted(), set(&["high"]));
    assert_eq!(w.running(), set(&["low", "qs2"]));
    assert_eq!(w.runnable(), set(&["high", "med"]));
    assert_eq!(w.reason("high"), "NOTHING_TO_BORROW");
}

// ---- Rule 1: hard ceiling ------------------------------------------------------------------

#[test]
fn usage_never_exceeds_the_environment_even_when_share_limits_add_up_to_more() {
    let mut w = World::new(&[(G5, 2)])
        .share("A", Reserve, &[(G5, 2)])
        .share("B", Reserve, &[(G5, 2)]);
    w.submit("a1", "A", 0, 1);
    w.submit("b1", "B", 0, 1);
    w.submit("b2", "B", 0, 1);
    assert_eq!(w.running(), set(&["a1", "b1"]));
    assert_eq!(w.reason("b2"), "ENVIRONMENT_FULL");
}

#[test]
fn physical_capacity_shared_by_two_queues_binds_both() {
    let mut w = World::new(&[(G5, 4)]).share("A", Reserve, &[(G5, 4)]);
    w.input(Input::SetPhysicalCapacity {
        instance_type: G5.into(),
        instances: Some(3),
    })
    .unwrap();
    w.input(Input::PutQueue(QueueSpec {
        name: "other".into(),
        environment: [(G5.to_string(), 4)].into(),
        ..Default::default()
    }))
    .unwrap();
    let mut other = ShareSpec::new("O");
    other.limits.insert(G5.into(), 4);
    w.input(Input::PutShare {
        queue: "other".into(),
        share: other,
    })
    .unwrap();
    w.input(Input::Submit(JobSpec {
        count: 2,
        ..JobSpec::new(JobId(100), "other", "O", G5)
    }))
    .unwrap();
    w.submit("a", "A", 0, 2);
    assert_eq!(w.reason("a"), "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY");
    // The other queue's job finishing frees the physical instances.
    let a = w.s.job(JobId(100)).unwrap().attempt.unwrap();
    w.input(Input::AttemptExited {
        attempt: a,
        exit: Exit::Succeeded,
    })
    .unwrap();
    assert_eq!(w.running(), set(&["a"]));
}

// ---- Rule 2: own capacity -------------------------------------------------------------------

#[test]
fn a_job_starts_at_once_on_its_share_s_idle_entitlement() {
    let mut w = World::new(&[(G5, 4)]).share("A", Reserve, &[(G5, 2)]);
    w.submit("a1", "A", 0, 2);
    assert_eq!(w.running(), set(&["a1"]));
    w.submit("a2", "A", 0, 1);
    assert_eq!(w.reason("a2"), "OWN_QUOTA_FULL");
    assert_eq!(w.reason_text("a2"), "OWN_QUOTA_FULL - needs 1 instance(s); the share uses 2 of its 2 and cannot borrow or preempt");
}

// ---- Rule 3: borrowing ----------------------------------------------------------------------

#[test]
fn only_lend_and_borrow_shares_borrow() {
    let mut w = World::new(&[(G5, 2)])
        .share("L", Lend, &[(G5, 1)])
        .share("Idle", Lend, &[(G5, 1)]);
    w.submit("l1", "L", 0, 1);
    w.submit("l2", "L", 0, 1);
    assert_eq!(w.running(), set(&["l1"]));
    assert_eq!(w.reason("l2"), "OWN_QUOTA_FULL");
}

#[test]
fn borrowing_never_uses_reserve_capacity() {
    let mut w = World::new(&[(G5, 2)])
        .share("B", LendAndBorrow, &[(G5, 1)])
        .share("R", Reserve, &[(G5, 1)]);
    w.submit("b1", "B", 0, 1);
    w.submit("b2", "B", 0, 1);
    assert_eq!(w.running(), set(&["b1"]));
    assert_eq!(w.reason("b2"), "NOTHING_TO_BORROW");
}

#[test]
fn the_borrow_limit_is_a_percentage_of_the_entitlement_rounded_down() {
    let mut w = World::new(&[(G5, 10)]);
    w.share_with("B", LendAndBorrow, &[(G5, 3)], |s| {
        s.borrow_limit_percent = 50
    });
    w.share_with("L", Lend, &[(G5, 7)], |_| {});
    for i in 0..5 {
        w.submit(&format!("b{i}"), "B", 0, 1);
    }
    // 3 own + floor(50% of 3) = 1 borrowed.
    assert_eq!(w.running().len(), 4);
    assert_eq!(w.reason("b4"), "BORROW_LIMIT_REACHED");
    assert_eq!(
        w.reason_text("b4"),
        "BORROW_LIMIT_REACHED - would borrow 2 instance(s); the borrow limit allows 1"
    );
}

#[test]
fn an_unlimited_borrower_may_borrow_a_type_it_lists_with_limit_zero() {
    let mut w = World::new(&[(G5, 2)])
        .share("B", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 2)]);
    w.submit("b", "B", 0, 2);
    assert_eq!(w.running(), set(&["b"]));
}

#[test]
fn capacity_no_share_is_entitled_to_is_not_lendable() {
    let mut w = World::new(&[(G5, 10)])
        .share("B", LendAndBorrow, &[(G5, 1)])
        .share("L", Lend, &[(G5, 1)]);
    w.submit("b1", "B", 0, 1);
    w.submit("b2", "B", 0, 1);
    w.submit("b3", "B", 0, 1);
    assert_eq!(w.running(), set(&["b1", "b2"]));
    assert_eq!(w.reason("b3"), "NOTHING_TO_BORROW");
}

// ---- Rule 4: reclaim ------------------------------------------------------------------------

#[test]
fn an_owner_reclaims_lent_capacity_whatever_the_priorities() {
    let mut w = World::new(&[(G5, 2)])
        .share("B", LendAndBorrow, &[(G5, 1)])
        .share("L", Lend, &[(G5, 1)]);
    w.submit("b-own", "B", 9999, 1);
    w.submit("b-borrow", "B", 9999, 1);
    assert_eq!(w.running(), set(&["b-borrow", "b-own"]));
    w.submit("owner", "L", 0, 1);
    assert_eq!(w.preempted().len(), 1);
    assert_eq!(w.usage("B"), 1);
    assert!(w.running().contains(&"owner".to_string()));
}

#[test]
fn reclaim_is_lazy_nothing_is_preempted_until_the_owner_needs_it() {
    let mut w = World::new(&[(G5, 2)])
        .share("B", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 2)]);
    w.submit("b1", "B", 0, 1);
    w.submit("b2", "B", 0, 1);
    w.advance(3600);
    w.update_share("L", |s| s.strategy = Reserve);
    assert!(
        w.preempted().is_empty(),
        "switching to RESERVE must not preempt by itself"
    );
    w.submit("owner", "L", 0, 1);
    assert_eq!(w.preempted().len(), 1);
    assert_eq!(w.running().len(), 2);
}

#[test]
fn a_lowered_limit_makes_the_excess_reclaimable_but_only_when_an_owner_needs_it() {
    let mut w = World::new(&[(G5, 3)])
        .share("A", Reserve, &[(G5, 3)])
        .share("C", Reserve, &[(G5, 0)]);
    for i in 0..3 {
        w.submit(&format!("a{i}"), "A", 0, 1);
    }
    w.update_share("A", |s| {
        s.limits.insert(G5.into(), 1).map(|_| ()).unwrap_or(())
    });
    w.update_share("C", |s| {
        s.limits.insert(G5.into(), 2);
    });
    assert!(w.preempted().is_empty());
    assert_eq!(w.running().len(), 3);
    w.submit("c", "C", 0, 1);
    assert_eq!(
        w.preempted().len(),
        1,
        "exactly one instance of A's excess is reclaimed"
    );
    assert_eq!(w.usage("A"), 2);
    assert_eq!(w.usage("C"), 1);
}

// ---- Rule 5: in-share preemption --------------------------------------------------------------

fn in_share(enabled: bool) -> World {
    let mut w = World::new(&[(G5, 1)]);
    w.share_with("S", Reserve, &[(G5, 1)], |s| {
        s.in_share_preemption = enabled
    });
    w
}

#[test]
fn a_higher_priority_job_preempts_a_strictly_lower_one_in_its_share() {
    let mut w = in_share(true);
    w.submit("low", "S", 1, 1);
    w.submit("high", "S", 2, 1);
    assert_eq!(w.preempted(), set(&["low"]));
    assert_eq!(w.running(), set(&["high"]));
    assert!(w
        .job("low")
        .status_reason
        .starts_with("Preempted by higher priority job"));
}

#[test]
fn equal_priority_never_preempts() {
    let mut w = in_share(true);
    w.submit("first", "S", 5, 1);
    w.submit("second", "S", 5, 1);
    assert!(w.preempted().is_empty());
    assert_eq!(w.reason("second"), "OWN_QUOTA_FULL");
}

#[test]
fn with_in_share_preemption_disabled_a_higher_priority_job_waits() {
    let mut w = in_share(false);
    w.submit("low", "S", 1, 1);
    w.submit("high", "S", 9, 1);
    assert!(w.preempted().is_empty());
    assert_eq!(w.running(), set(&["low"]));
    assert_eq!(w.reason("high"), "OWN_QUOTA_FULL");
}

#[test]
fn raising_a_waiting_job_s_priority_triggers_in_share_preemption() {
    let mut w = in_share(true);
    w.submit("a", "S", 3, 1);
    w.submit("b", "S", 1, 1);
    assert!(w.preempted().is_empty());
    w.priority("b", 4);
    assert_eq!(w.preempted(), set(&["a"]));
    assert_eq!(w.running(), set(&["b"]));
}

#[test]
fn lowering_a_running_job_s_priority_lets_a_waiting_one_preempt_it() {
    let mut w = in_share(true);
    w.submit("a", "S", 5, 1);
    w.submit("b", "S", 5, 1);
    w.priority("a", 1);
    assert_eq!(w.preempted(), set(&["a"]));
    assert_eq!(w.running(), set(&["b"]));
}

// ---- Rule 6: never --------------------------------------------------------------------------

#[test]
fn a_borrower_never_preempts_another_borrower_to_borrow() {
    let mut w = World::new(&[(G5, 3)])
        .share("B1", LendAndBorrow, &[(G5, 1)])
        .share("B2", LendAndBorrow, &[(G5, 1)])
        .share("L", Lend, &[(G5, 1)]);
    w.submit("b1-own", "B1", 0, 1);
    w.submit("b1-borrow", "B1", 0, 1);
    w.submit("b2-own", "B2", 9, 1);
    w.submit("b2-borrow", "B2", 9, 1);
    assert!(w.preempted().is_empty());
    assert_eq!(w.reason("b2-borrow"), "NOTHING_TO_BORROW");
}

#[test]
fn nothing_is_preempted_for_a_job_that_still_could_not_start() {
    // B borrows 1 of L's 2; A (RESERVE, 1) holds its own; an L job of 3 can never fit L's 2,
    // and an L job of 2 fits only if B's borrowed instance comes back, which it does.
    let mut w = World::new(&[(G5, 3)])
        .share("B", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 2)]);
    w.submit("b", "B", 0, 1);
    w.submit("l-small", "L", 0, 1);
    assert!(w.preempted().is_empty());
    // L holds 1 of 2, B borrows 1; an L job of 2 would need 3 of L's 2: in-share is off, so no
    // victim set helps and B must not be preempted.
    w.submit("l-big", "L", 0, 2);
    assert!(w.preempted().is_empty());
    assert_eq!(w.reason("l-big"), "OWN_QUOTA_FULL");
}

#[test]
fn one_preemption_combines_in_share_and_reclaim_victims() {
    // S (2) runs a low-priority job; B borrows S's other instance. A 2-instance high-priority
    // S job needs both: one from its own low job, one reclaimed from B.
    let mut w = World::new(&[(G5, 3)]).share("B", LendAndBorrow, &[(G5, 1)]);
    w.share_with("S", Lend, &[(G5, 2)], |s| s.in_share_preemption = true);
    w.submit("s-low", "S", 1, 1);
    w.submit("b-own", "B", 0, 1);
    w.submit("b-borrow", "B", 0, 1);
    assert_eq!(w.running().len(), 3);
    w.submit("s-high", "S", 5, 2);
    assert_eq!(w.preempted(), set(&["b-borrow", "s-low"]));
    assert_eq!(w.running(), set(&["b-own", "s-high"]));
}

// ---- Rule 7: victims ------------------------------------------------------------------------

fn two_borrowers() -> World {
    // B borrows 2 of L's 2; then L needs 1 back: exactly one of B's borrowers is preempted.
    World::new(&[(G5, 3)])
        .share("B", LendAndBorrow, &[(G5, 1)])
        .share("L", Lend, &[(G5, 2)])
}

#[test]
fn the_lowest_priority_victim_goes_first() {
    let mut w = two_borrowers();
    w.submit("b5", "B", 5, 1);
    w.submit("b1", "B", 1, 1);
    w.submit("b3", "B", 3, 1);
    w.submit("owner", "L", 0, 1);
    assert_eq!(w.preempted(), set(&["b1"]));
}

#[test]
fn the_victim_order_shells_show_is_the_order_a_reclaim_takes() {
    // `qm plan` names preemptible jobs in `Scheduler::victim_order`; a reclaim must take them
    // in that order, with priorities, progress and age in play (equal sizes: with mixed sizes
    // the search may take a larger victim instead of several ahead of it, `victims.rs`).
    let mut w = World::with_policy(
        &[(G5, 5)],
        Policy {
            reclaim_patience_ms: 0,
            ..Default::default()
        },
    )
    .share("B", LendAndBorrow, &[(G5, 1)])
    .share("L", Lend, &[(G5, 4)]);
    w.submit("b-high", "B", 9, 1);
    w.submit("b-old", "B", 1, 1);
    w.advance(60);
    w.submit("b-young", "B", 1, 1);
    w.submit("b-mid", "B", 4, 1);
    w.advance(600);
    w.checkpoint("b-old");
    w.submit("b-low", "B", 0, 1);
    w.advance(60);
    let order: Vec<&str> =
        w.s.victim_order(Q)
            .expect("the queue exists")
            .iter()
            .map(|(unit, job)| {
                assert_eq!(unit, G5);
                w.name(*job)
            })
            .collect();
    assert_eq!(order, ["b-low", "b-old", "b-young", "b-mid", "b-high"]);
    let order: Vec<String> = order.into_iter().map(String::from).collect();
    // The owner takes back 1, then 2 more: each time the next ones in the order.
    w.submit("owner-1", "L", 0, 1);
    assert_eq!(w.preempted(), set(&["b-low"]));
    w.submit("owner-2", "L", 0, 2);
    let mut taken = w.preempted();
    taken.sort();
    let mut expected = order[1..3].to_vec();
    expected.sort();
    assert_eq!(taken, expected);
}

#[test]
fn among_equal_priorities_the_victim_that_loses_least_work_goes_first() {
    // At once (no reclaim patience), so that the order alone decides.
    let mut w = World::with_policy(
        &[(G5, 3)],
        Policy {
            reclaim_patience_ms: 0,
            ..Default::default()
        },
    )
    .share("B", LendAndBorrow, &[(G5, 1)])
    .share("L", Lend, &[(G5, 2)]);
    w.submit("old", "B", 1, 1);
    w.submit("young", "B", 1, 1);
    w.advance(60);
    w.submit("checkpointed", "B", 1, 1);
    w.advance(3600);
    w.checkpoint("old");
    w.advance(60);
    // old: checkpoint 60 s ago; young: started 3720 s ago; checkpointed: started 3660 s ago.
    w.submit("owner", "L", 0, 1);
    assert_eq!(w.preempted(), set(&["old"]));
}

#[test]
fn the_victim_order_prefers_more_borrowed_instances_when_priority_and_work_tie() {
    let rank = |borrowed| VictimRank {
        priority: 1,
        progress_at: std::cmp::Reverse(0),
        borrowed: std::cmp::Reverse(borrowed),
        count: std::cmp::Reverse(2),
        attempt: std::cmp::Reverse(AttemptId(0)),
    };
    assert!(rank(2) < rank(1));
    let lower_priority = VictimRank {
        priority: 0,
        ..rank(0)
    };
    assert!(
        lower_priority < rank(2),
        "priority outranks borrowed instances"
    );
}

#[test]
fn a_share_borrowing_more_instances_is_the_victim_when_all_else_ties() {
    // Two borrowers started at the same time with the same priority; B2 borrows 2 instances
    // with one job, B1 one. L needs 1 back: the bigger borrower is the victim.
    let mut w = World::new(&[(G5, 4)])
        .share("B1", LendAndBorrow, &[(G5, 0)])
        .share("B2", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 4)]);
    w.submit("small", "B1", 1, 1);
    w.submit("big", "B2", 1, 2);
    w.submit("l1", "L", 0, 1);
    w.submit("l2", "L", 0, 1);
    assert_eq!(w.preempted(), set(&["big"]));
    assert_eq!(w.running(), set(&["l1", "l2", "small"]));
}

#[test]
fn the_victim_set_is_minimal() {
    // Four 1-instance borrowers hold all of L's capacity; an owner job of 2 preempts exactly
    // two of them, the two lowest-priority ones.
    let mut w = World::new(&[(G5, 4)])
        .share("B", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 4)]);
    w.submit("b3", "B", 3, 1);
    w.submit("b0", "B", 0, 1);
    w.submit("b2", "B", 2, 1);
    w.submit("b1", "B", 1, 1);
    w.submit("owner", "L", 0, 2);
    assert_eq!(w.preempted(), set(&["b0", "b1"]));
    assert_eq!(w.running(), set(&["b2", "b3", "owner"]));
}

#[test]
fn a_victim_the_set_does_not_need_is_dropped() {
    // Victim order is b-low (1 instance) then b-high (2 instances); the owner needs 2, so
    // greedy takes both, and b-low is dropped because b-high alone is enough.
    let mut w = World::new(&[(G5, 3)])
        .share("B", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 3)]);
    w.submit("b-low", "B", 0, 1);
    w.submit("b-high", "B", 1, 2);
    w.submit("owner", "L", 0, 2);
    assert_eq!(w.preempted(), set(&["b-high"]));
    assert_eq!(w.running(), set(&["b-low", "owner"]));
}

// ---- Rule 8: order --------------------------------------------------------------------------

#[test]
fn within_a_share_priority_comes_first_then_submission_order() {
    let mut w = World::new(&[(G5, 1)]).share("S", Reserve, &[(G5, 1)]);
    w.submit("blocker", "S", 0, 1);
    w.submit("p1-first", "S", 1, 1);
    w.submit("p5", "S", 5, 1);
    w.submit("p1-second", "S", 1, 1);
    w.finish("blocker");
    assert_eq!(w.running(), set(&["p5"]));
    w.finish("p5");
    assert_eq!(w.running(), set(&["p1-first"]));
    w.finish("p1-first");
    assert_eq!(w.running(), set(&["p1-second"]));
}

#[test]
fn idle_capacity_goes_to_borrowers_across_shares_in_submission_order() {
    let mut w = World::new(&[(G5, 3)])
        .share("B1", LendAndBorrow, &[(G5, 1)])
        .share("B2", LendAndBorrow, &[(G5, 1)])
        .share("L", Lend, &[(G5, 1)]);
    w.submit("l", "L", 0, 1);
    w.submit("b1", "B1", 0, 1);
    w.submit("b2", "B2", 0, 1);
    w.submit("b2-borrow", "B2", 0, 1);
    w.submit("b1-borrow", "B1", 9, 1);
    w.finish("l");
    // b2-borrow was submitted first: FIFO across shares, whatever the priorities.
    assert_eq!(w.running(), set(&["b1", "b2", "b2-borrow"]));
}

#[test]
fn a_big_job_that_cannot_fit_does_not_block_smaller_ones_behind_it() {
    let mut w = World::new(&[(G5, 4)]).share("S", Reserve, &[(G5, 4)]);
    w.submit("running", "S", 0, 2);
    w.submit("big", "S", 5, 4);
    w.submit("small", "S", 0, 1);
    assert_eq!(w.running(), set(&["running", "small"]));
    assert_eq!(w.reason("big"), "OWN_QUOTA_FULL");
}

#[test]
fn the_starvation_guard_reserves_capacity_for_a_big_job_and_backfills_it_preemptibly() {
    let policy = Policy {
        reserve_after_ms: 600_000,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 4)], policy).share("S", Reserve, &[(G5, 4)]);
    w.submit("r1", "S", 0, 2);
    w.submit("r2", "S", 0, 2);
    w.submit("big", "S", 5, 4);
    w.submit("s1", "S", 0, 2);
    w.finish("r1");
    assert_eq!(
        w.running(),
        set(&["r2", "s1"]),
        "before the guard, a smaller job passes"
    );
    w.advance(600);
    w.submit("s2", "S", 0, 2);
    w.finish("r2");
    assert_eq!(
        w.running(),
        set(&["s1", "s2"]),
        "after the guard, a smaller job still starts, backfilled onto big's reservation"
    );
    assert_eq!(w.reason("big"), "OWN_QUOTA_FULL", "s1 is not backfilled");
    w.finish("s1");
    assert_eq!(w.reason("big"), "BACKFILL_FINISHING");
    w.submit("s3", "S", 0, 2);
    assert_eq!(
        w.reason("s3"),
        "HELD_FOR_OLDER_JOB",
        "nothing new is backfilled"
    );
    w.wait(30 * 60);
    assert_eq!(w.preempted(), set(&["s2"]), "the patience ran out");
    w.release_stopped();
    assert_eq!(w.running(), set(&["big"]));
}

/// S (RESERVE 4) runs r (2); big (4) has waited past the guard; s (2) is backfilled onto
/// big's reservation; r finishes and a minute passes: big could start by preempting s.
fn backfilled_behind_a_draining_head() -> World {
    let policy = Policy {
        reserve_after_ms: 600_000,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 4)], policy).share("S", Reserve, &[(G5, 4)]);
    w.submit("r", "S", 0, 2);
    w.submit("big", "S", 5, 4);
    w.advance(600);
    w.submit("s", "S", 0, 2);
    assert_eq!(w.running(), set(&["r", "s"]));
    w.finish("r");
    w.wait(60);
    w
}

#[test]
fn a_backfilled_job_that_finishes_within_the_patience_is_never_preempted() {
    let mut w = backfilled_behind_a_draining_head();
    w.finish("s");
    assert!(w.preempted().is_empty());
    assert_eq!(w.running(), set(&["big"]));
}

#[test]
fn a_backfilled_job_is_taken_as_it_checkpoints() {
    let mut w = backfilled_behind_a_draining_head();
    assert!(w.preempted().is_empty());
    w.checkpoint("s");
    assert_eq!(w.preempted(), set(&["s"]), "it loses nothing now");
}

#[test]
fn an_aged_head_that_must_borrow_reserves_only_its_own_share_s_capacity() {
    let policy = Policy {
        reserve_after_ms: 600_000,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 4)], policy)
        .share("B1", LendAndBorrow, &[(G5, 0)])
        .share("B2", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 4)]);
    w.submit("l1", "L", 0, 1);
    w.submit("l2", "L", 0, 1);
    w.submit("l3", "L", 0, 1);
    w.submit("big", "B1", 0, 3);
    w.advance(600);
    w.submit("late", "B2", 0, 1);
    assert_eq!(
        w.running(),
        set(&["l1", "l2", "l3", "late"]),
        "L's lendable instance is not held idle for big"
    );
    w.finish("l1");
    w.finish("l2");
    assert_eq!(w.reason("big"), "NOTHING_TO_BORROW");
    w.finish("late");
    assert_eq!(
        w.running(),
        set(&["big", "l3"]),
        "the oldest borrower goes first"
    );
}

// ---- Rule 9: after preemption ----------------------------------------------------------------

#[test]
fn a_preempted_job_requeues_and_keeps_its_place_in_line() {
    let mut w = World::new(&[(G5, 2)])
        .share("B", LendAndBorrow, &[(G5, 1)])
        .share("L", Lend, &[(G5, 1)]);
    w.submit("b-own", "B", 0, 1);
    w.submit("first", "B", 0, 1);
    w.submit("second", "B", 0, 1);
    w.submit("owner", "L", 0, 1);
    assert_eq!(w.preempted(), set(&["first"]));
    assert_eq!(w.job("first").preemptions, 1);
    w.finish("b-own");
    assert_eq!(
        w.running(),
        set(&["first", "owner"]),
        "the preempted job kept its place ahead of 'second'"
    );
}

#[test]
fn preemption_retries_zero_fails_the_job_at_its_first_preemption() {
    let mut w = in_share(true);
    w.submit_with("victim", "S", |j| j.preemption_retries = Some(0));
    w.submit("high", "S", 5, 1);
    assert_eq!(w.failed(), set(&["victim"]));
    assert!(w
        .job("victim")
        .status_reason
        .contains("preemption retries exhausted"));
}

#[test]
fn preemption_retries_one_requeues_once_then_fails() {
    let mut w = in_share(true);
    w.submit_with("victim", "S", |j| j.preemption_retries = Some(1));
    w.submit("h1", "S", 5, 1);
    assert_eq!(w.runnable(), set(&["victim"]));
    w.finish("h1");
    assert_eq!(w.running(), set(&["victim"]));
    w.submit("h2", "S", 5, 1);
    assert_eq!(w.failed(), set(&["victim"]));
}

#[test]
fn preemptions_do_not_consume_retry_attempts() {
    let mut w = in_share(true);
    w.submit_with("victim", "S", |j| j.attempts = 2);
    for i in 0..3 {
        w.submit(&format!("h{i}"), "S", 5, 1);
        w.finish(&format!("h{i}"));
    }
    assert_eq!(w.job("victim").preemptions, 3);
    w.fail("victim", "AlgorithmError: exit 1");
    assert_eq!(
        w.running(),
        set(&["victim"]),
        "one failure of two attempts: retried"
    );
    w.fail("victim", "AlgorithmError: exit 1");
    assert_eq!(w.failed(), set(&["victim"]));
}

#[test]
fn evaluate_on_exit_exit_rule_stops_retries() {
    let mut w = in_share(false);
    w.submit_with("j", "S", |j| {
        j.attempts = 5;
        j.evaluate_on_exit = vec![
            ExitRule {
                retry: true,
                on_status_reason: "*CapacityError*".into(),
            },
            ExitRule {
                retry: false,
                on_status_reason: "*".into(),
            },
        ];
    });
    w.fail("j", "Received status from SageMaker: CapacityError: none");
    assert_eq!(w.running(), set(&["j"]));
    w.fail("j", "AlgorithmError: bad input");
    assert_eq!(w.failed(), set(&["j"]));
}

#[test]
fn a_timeout_is_not_retried() {
    let mut w = in_share(false);
    w.submit_with("j", "S", |j| j.attempts = 3);
    let a = w.job("j").attempt.unwrap();
    let exit = Exit::Failed {
        reason: "Job attempt duration exceeded timeout".into(),
        retryable: false,
    };
    w.input(Input::AttemptExited { attempt: a, exit }).unwrap();
    assert_eq!(w.failed(), set(&["j"]));
}

#[test]
fn a_lost_attempt_requeues_without_using_a_retry() {
    let mut w = in_share(false);
    w.submit("j", "S", 0, 1);
    let a = w.job("j").attempt.unwrap();
    w.input(Input::AttemptExited {
        attempt: a,
        exit: Exit::Lost {
            reason: "server restarted".into(),
            max_in_a_row: Some(3),
        },
    })
    .unwrap();
    assert_eq!(w.running(), set(&["j"]));
    assert_eq!(w.job("j").failures, 0);
}

/// Issue 13, item 2: a job whose attempts keep being lost (it kills its server) is queued
/// again for free `max_in_a_row` times in a row; the next lost attempt fails it. An attempt
/// that ends any other way starts the count again; a log without the limit has none.
#[test]
fn a_job_lost_more_times_in_a_row_than_the_limit_fails() {
    let mut w = in_share(false);
    w.submit_with("j", "S", |j| j.attempts = 2);
    let lose = |w: &mut World, max: Option<u32>| {
        let a = w.job("j").attempt.expect("running");
        w.input(Input::AttemptExited {
            attempt: a,
            exit: Exit::Lost {
                reason: "Attempt lost: the server restarted".into(),
                max_in_a_row: max,
            },
        })
        .unwrap();
    };
    for _ in 0..2 {
        lose(&mut w, Some(2));
    }
    assert_eq!(
        w.job("j").status,
        JobStatus::Dispatched,
        "lost twice: runs again"
    );
    // A failure (an ordinary exit, retried) in between: the count starts again.
    w.fail("j", "AlgorithmError: exit 1");
    assert_eq!(w.job("j").status, JobStatus::Dispatched, "retried");
    assert_eq!(w.job("j").lost_in_a_row, 0);
    for _ in 0..2 {
        lose(&mut w, Some(2));
    }
    assert_eq!(w.job("j").status, JobStatus::Dispatched);
    lose(&mut w, Some(2));
    let j = w.job("j");
    assert_eq!(j.status, JobStatus::Failed, "{}", j.status_reason);
    assert!(
        j.status_reason.contains("lost 3 times in a row"),
        "{}",
        j.status_reason
    );
    assert!(
        j.status_reason.contains("max_lost_attempts (2)"),
        "{}",
        j.status_reason
    );

    // Without a limit (a log written before it existed) it never fails for being lost.
    let mut w = in_share(false);
    w.submit("j", "S", 0, 1);
    for _ in 0..10 {
        lose(&mut w, None);
    }
    assert_eq!(w.job("j").status, JobStatus::Dispatched);
}

#[test]
fn a_preempted_attempt_holds_its_capacity_until_it_exits() {
    let mut w = aws_demo();
    w.exit_stops_at_once = false;
    w.submit("high", "QS1", 3, 1);
    w.submit("med", "QS1", 2, 1);
    w.submit("qs2", "QS2", 1, 1);
    assert_eq!(w.preempted(), set(&["med"]));
    assert_eq!(w.running(), set(&["high"]));
    assert_eq!(w.reason("qs2"), "WAITING_FOR_RELEASE");
    assert_eq!(w.reason("med"), "PREVIOUS_ATTEMPT_STOPPING");
    // A second pass while the victim still stops preempts nothing more.
    w.advance(30);
    w.submit("qs1-more", "QS1", 0, 1);
    assert!(w.preempted().is_empty());
    w.release_stopped();
    assert_eq!(w.running(), set(&["high", "qs2"]));
}

// ---- Rule 10: never fits ---------------------------------------------------------------------

#[test]
fn a_job_larger_than_the_environment_never_fits() {
    let mut w = World::new(&[(G5, 2)]).share("S", LendAndBorrow, &[(G5, 2)]);
    w.submit("j", "S", 0, 3);
    assert_eq!(
        w.reason("j"),
        "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
    );
}

#[test]
fn a_reserve_or_lend_job_larger_than_its_share_never_fits() {
    let mut w = World::new(&[(G5, 10)]).share("S", Lend, &[(G5, 4)]);
    w.submit("j", "S", 0, 5);
    assert_eq!(
        w.reason("j"),
        "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
    );
    assert!(w
        .reason_text("j")
        .ends_with("Job requirements exceed quota share capacity limits."));
}

#[test]
fn a_borrower_beyond_its_limit_plus_borrow_limit_never_fits() {
    let mut w = World::new(&[(G5, 10)]);
    w.share_with("S", LendAndBorrow, &[(G5, 2)], |s| {
        s.borrow_limit_percent = 100
    });
    w.share_with("L", Lend, &[(G5, 8)], |_| {});
    w.submit("j", "S", 0, 5);
    assert!(w
        .reason_text("j")
        .ends_with("Job requirements exceed quota share capacity limits and borrow limits."));
}

#[test]
fn a_borrower_beyond_all_borrowable_capacity_never_fits() {
    // Spec §1.4: A and B LEND_AND_BORROW 4 each, 200 %: a job of 10 in A exceeds 4 + 4.
    let mut w = World::new(&[(G5, 20)]);
    w.share_with("A", LendAndBorrow, &[(G5, 4)], |s| {
        s.borrow_limit_percent = 200
    });
    w.share_with("B", LendAndBorrow, &[(G5, 4)], |s| {
        s.borrow_limit_percent = 200
    });
    w.submit("j", "A", 0, 10);
    assert!(w
        .reason_text("j")
        .ends_with("Job requires borrowing that exceeds all configured borrowable capacity."));
}

#[test]
fn a_type_missing_from_the_share_s_limits_never_fits() {
    let mut w = World::new(&[(G5, 2), (P4, 2)])
        .share("S", LendAndBorrow, &[(G5, 2)])
        .share("L", Lend, &[(P4, 2)]);
    w.submit_with("j", "S", |j| j.instance_type = P4.into());
    assert_eq!(
        w.reason("j"),
        "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
    );
}

#[test]
fn a_misconfigured_job_fits_again_once_the_limit_is_raised() {
    let mut w = World::new(&[(G5, 10)]).share("S", Reserve, &[(G5, 1)]);
    w.submit("j", "S", 0, 3);
    assert!(w.reason("j").starts_with("MISCONFIGURATION"));
    w.update_share("S", |s| {
        s.limits.insert(G5.into(), 3);
    });
    assert_eq!(w.running(), set(&["j"]));
}

#[test]
fn a_misconfigured_job_does_not_block_the_jobs_behind_it() {
    let policy = Policy {
        reserve_after_ms: 0,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 2)], policy).share("S", Reserve, &[(G5, 2)]);
    w.submit("huge", "S", 9, 5);
    w.submit("small", "S", 0, 1);
    assert_eq!(w.running(), set(&["small"]));
}

// ---- Rule 11: explain -------------------------------------------------------------------------

#[test]
fn every_waiting_job_has_a_reason_with_numbers() {
    let mut w = aws_demo();
    w.submit("high", "QS1", 3, 1);
    w.submit("med", "QS1", 2, 1);
    w.submit("low", "QS1", 1, 1);
    assert_eq!(
        w.reason_text("low"),
        "NOTHING_TO_BORROW - needs to borrow 1 instance(s); 0 idle instance(s) can be lent"
    );
    assert_eq!(w.reason("high"), "-", "a running job has no pending reason");
}

// ---- Rule 12: share lifecycle ---------------------------------------------------------------

#[test]
fn a_disabled_share_refuses_new_jobs_but_runs_and_lends() {
    let mut w = World::new(&[(G5, 2)])
        .share("B", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 2)]);
    w.submit("l", "L", 0, 1);
    w.update_share("L", |s| s.enabled = false);
    assert!(matches!(
        w.try_submit("x", "L"),
        Err(CoreError::ShareDisabled { .. })
    ));
    assert_eq!(w.running(), set(&["l"]));
    w.submit("b", "B", 0, 1);
    assert_eq!(
        w.running(),
        set(&["b", "l"]),
        "a disabled share still lends"
    );
}

#[test]
fn deleting_a_share_requires_disabled_and_terminates_its_jobs() {
    let mut w = World::new(&[(G5, 2)]).share("S", Reserve, &[(G5, 1)]);
    w.submit("run", "S", 0, 1);
    w.submit("wait", "S", 0, 1);
    let del = Input::DeleteShare {
        queue: Q.into(),
        share: "S".into(),
    };
    assert!(matches!(
        w.input(del.clone()),
        Err(CoreError::ShareNotDisabled { .. })
    ));
    w.update_share("S", |s| s.enabled = false);
    w.input(del).unwrap();
    assert_eq!(w.failed(), set(&["run", "wait"]));
    assert!(w.job("run").status_reason.contains("was deleted"));
    // The name is free again.
    w.share_with("S", Reserve, &[(G5, 1)], |_| {});
    w.submit("again", "S", 0, 1);
    assert_eq!(w.running(), set(&["again"]));
}

#[test]
fn terminating_a_running_job_frees_its_capacity_when_it_exits() {
    let mut w = World::new(&[(G5, 1)]).share("S", Reserve, &[(G5, 1)]);
    w.exit_stops_at_once = false;
    w.submit("a", "S", 0, 1);
    w.submit("b", "S", 0, 1);
    w.terminate("a");
    assert!(w.job("a").terminated);
    assert_eq!(
        w.running(),
        set(&["a"]),
        "FAILED only once the attempt has stopped"
    );
    w.release_stopped();
    assert_eq!(w.failed(), set(&["a"]));
    assert_eq!(w.running(), set(&["b"]));
}

// ---- Reclaim claims, ordering and completeness (regressions from review) ----------------------

#[test]
fn an_owner_behind_its_share_s_head_keeps_the_capacity_it_reclaimed() {
    // S's head needs 2 and waits for s-run; p behind it fits S's idle instance, which b1
    // borrows. p reclaims it, and b1 must not borrow it again before p starts.
    let mut w =
        World::new(&[(G5, 2)])
            .share("S", Lend, &[(G5, 2)])
            .share("B", LendAndBorrow, &[(G5, 0)]);
    w.exit_stops_at_once = false;
    w.submit("s-run", "S", 0, 1);
    w.submit("b1", "B", 0, 1);
    w.submit("h", "S", 5, 2);
    w.submit("p", "S", 0, 1);
    assert_eq!(w.preempted(), set(&["b1"]));
    for _ in 0..3 {
        w.release_stopped();
    }
    assert_eq!(w.running(), set(&["p", "s-run"]));
    assert_eq!(
        w.job("b1").preemptions,
        1,
        "b1 re-borrowed the reclaimed instance"
    );
}

#[test]
fn in_share_preemption_for_a_borrowing_job_settles() {
    let mut w =
        World::new(&[(G5, 10)])
            .share("L", Lend, &[(G5, 2)])
            .share("B1", LendAndBorrow, &[(G5, 0)]);
    w.share_with("S2", LendAndBorrow, &[(G5, 1)], |s| {
        s.in_share_preemption = true
    });
    w.submit("low", "S2", 0, 1);
    w.submit("big", "B1", 0, 3);
    w.submit("high", "S2", 5, 3);
    assert_eq!(w.running(), set(&["high"]));
    assert_eq!(w.job("low").preemptions, 1);
}

#[test]
fn an_owner_reclaims_a_lowered_lender_s_excess_in_one_complete_decision() {
    // L lowered from 3 to 1 while B borrowed 3. L's owner needs its instance: the state must be
    // admissible again once it runs (B's 3 borrowed instances are backed by nothing), so all
    // three are preempted in one decision, never one per pass.
    let mut w =
        World::new(&[(G5, 10)])
            .share("L", Lend, &[(G5, 3)])
            .share("B", LendAndBorrow, &[(G5, 0)]);
    w.submit("b1", "B", 0, 1);
    w.submit("b2", "B", 1, 1);
    w.submit("b3", "B", 2, 1);
    w.update_share("L", |s| {
        s.limits.insert(G5.into(), 1);
    });
    assert!(
        w.preempted().is_empty(),
        "lazy: the lowered limit alone preempts nothing"
    );
    w.exit_stops_at_once = false;
    w.submit("owner", "L", 0, 1);
    assert_eq!(w.preempted(), set(&["b1", "b2", "b3"]));
    w.submit("unrelated", "B", 0, 1);
    assert!(
        w.preempted().is_empty(),
        "no further victims while the first ones stop"
    );
    w.release_stopped();
    assert_eq!(w.running(), set(&["owner"]));
    assert!(w.preempted().is_empty());
}

#[test]
fn the_starvation_guard_reserves_an_oversubscribed_environment_for_an_old_owner() {
    // A and B are each entitled to the whole environment of 2. big (A, 2) has waited past the
    // guard: B's later jobs still start, but backfilled, and big takes them back.
    let policy = Policy {
        reserve_after_ms: 60_000,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 2)], policy)
        .share("A", Reserve, &[(G5, 2)])
        .share("B", Reserve, &[(G5, 2)]);
    w.submit("a-small", "A", 0, 2);
    w.submit("b0", "B", 0, 1);
    w.submit("big", "A", 0, 2);
    w.advance(120);
    w.finish("a-small");
    w.submit("b1", "B", 0, 1);
    assert_eq!(w.running(), set(&["b0", "b1"]));
    assert_eq!(w.reason("big"), "ENVIRONMENT_FULL", "b0 is not backfilled");
    w.finish("b0");
    assert_eq!(w.reason("big"), "BACKFILL_FINISHING");
    w.wait(30 * 60);
    assert_eq!(w.preempted(), set(&["b1"]));
    w.release_stopped();
    assert_eq!(w.running(), set(&["big"]));
}

#[test]
fn idle_capacity_goes_to_the_oldest_borrower_even_behind_another_share_s_head() {
    let mut w = World::new(&[(G5, 10)])
        .share("X", LendAndBorrow, &[(G5, 0)])
        .share("Y", LendAndBorrow, &[(G5, 0)])
        .share("L", Lend, &[(G5, 2)]);
    w.submit("l1", "L", 0, 1);
    w.submit("l2", "L", 0, 1);
    w.submit("x-big", "X", 0, 2);
    w.submit("x-small", "X", 0, 1);
    w.submit("y", "Y", 0, 1);
    w.finish("l1");
    assert_eq!(w.running(), set(&["l2", "x-small"]));
}

/// Queue "q" (Y borrows, Z lends 2) and queue "other" (O owns 1, OB borrows) share two
/// physical instances.
fn two_queues_on_two_physical_instances() -> World {
    let mut w = World::new(&[(G5, 2)])
        .share("Y", LendAndBorrow, &[(G5, 0)])
        .share("Z", Lend, &[(G5, 2)]);
    w.input(Input::SetPhysicalCapacity {
        instance_type: G5.into(),
        instances: Some(2),
    })
    .unwrap();
    w.input(Input::PutQueue(QueueSpec {
        name: "other".into(),
        environment: [(G5.to_string(), 2)].into(),
        ..Default::default()
    }))
    .unwrap();
    let mut o = ShareSpec::new("O");
    o.limits.insert(G5.into(), 1);
    w.input(Input::PutShare {
        queue: "other".into(),
        share: o,
    })
    .unwrap();
    let mut ob = ShareSpec::new("OB");
    ob.strategy = LendAndBorrow;
    ob.limits.insert(G5.into(), 0);
    w.input(Input::PutShare {
        queue: "other".into(),
        share: ob,
    })
    .unwrap();
    w
}

#[test]
fn physical_instances_released_for_an_owner_in_one_queue_are_not_taken_by_another_queue() {
    let mut w = two_queues_on_two_physical_instances();
    w.input(Input::Submit(JobSpec::new(JobId(100), "other", "OB", G5)))
        .unwrap();
    w.submit("y1", "Y", 0, 1);
    w.submit("y2", "Y", 0, 1);
    w.input(Input::Submit(JobSpec::new(JobId(101), "other", "O", G5)))
        .unwrap();
    assert_eq!(w.s.job(JobId(101)).unwrap().status, JobStatus::Dispatched);
    assert_eq!(w.s.job(JobId(100)).unwrap().preemptions, 1);
    assert_eq!(w.running(), set(&["y1"]));
}

#[test]
fn a_combined_decision_takes_no_superfluous_in_share_victim() {
    // p needs 2: one in-share victim plus borrowing L's idle instance is enough; the borrower
    // x1 (ranked first: it started last) and the second in-share victim are not needed.
    let mut w = World::new(&[(G5, 10)]);
    w.share_with("S", LendAndBorrow, &[(G5, 2)], |s| {
        s.in_share_preemption = true
    });
    w.share_with("L", Lend, &[(G5, 2)], |_| {});
    w.share_with("X", LendAndBorrow, &[(G5, 0)], |_| {});
    w.submit("lo1", "S", 0, 1);
    w.advance(10);
    w.submit("lo2", "S", 0, 1);
    w.advance(10);
    w.submit("x1", "X", 0, 1);
    w.advance(10);
    w.submit("p", "S", 5, 2);
    assert_eq!(w.preempted(), set(&["lo2"]));
    assert_eq!(w.running(), set(&["lo1", "p", "x1"]));
}

#[test]
fn reclaim_victims_follow_priority_even_when_the_victim_runs_mostly_on_its_own_quota() {
    // The documented order puts priority before borrowed instances: to give L one instance
    // back, X's priority-0 job of 4 goes before its priority-5 job of 1, though that leaves X
    // below its entitlement. (A trade-off of DESIGN.md §2 rule 7, kept on purpose.)
    let mut w = World::new(&[(G5, 6)])
        .share("X", LendAndBorrow, &[(G5, 4)])
        .share("L", Lend, &[(G5, 2)]);
    w.submit("x-own4", "X", 0, 4);
    w.submit("x-borrow1", "X", 5, 1);
    w.submit("l1", "L", 0, 1);
    w.submit("l2", "L", 0, 1);
    assert_eq!(w.preempted(), set(&["x-own4"]));
}

#[test]
fn a_job_out_of_preemption_retries_fails_only_once_its_attempt_has_stopped() {
    let mut w = in_share(true);
    w.exit_stops_at_once = false;
    w.submit_with("victim", "S", |j| j.preemption_retries = Some(0));
    w.submit("high", "S", 5, 1);
    assert_eq!(w.preempted(), set(&["victim"]));
    assert!(w.failed().is_empty(), "still holding its instance");
    assert_eq!(w.usage("S"), 1);
    w.release_stopped();
    assert_eq!(w.failed(), set(&["victim"]));
    assert_eq!(w.running(), set(&["high"]));
}

#[test]
fn an_aged_borrower_does_not_hold_back_another_share_s_in_share_preemption() {
    // big (B1, must borrow 4) reserves only B1's own capacity, which is none: high may still
    // preempt its share's lower-priority job to run, borrowing the rest.
    let policy = Policy {
        reserve_after_ms: 60_000,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 10)], policy)
        .share("L", Lend, &[(G5, 2)])
        .share("M", Lend, &[(G5, 1)])
        .share("B1", LendAndBorrow, &[(G5, 0)]);
    w.share_with("S2", LendAndBorrow, &[(G5, 1)], |s| {
        s.in_share_preemption = true
    });
    w.submit("m1", "M", 0, 1);
    w.submit("low", "S2", 0, 1);
    w.submit("big", "B1", 0, 4);
    w.advance(120);
    w.submit("high", "S2", 5, 3);
    assert_eq!(w.preempted(), set(&["low"]));
    w.release_stopped();
    assert_eq!(w.running(), set(&["high", "m1"]));
    assert_eq!(w.reason("big"), "NOTHING_TO_BORROW");
}

// ---- Regressions from the second review ------------------------------------------------------

#[test]
fn a_reclaimer_s_claim_is_not_also_counted_as_a_reservation() {
    let mut w = World::new(&[(G5, 7)]);
    w.share_with("S0", LendAndBorrow, &[(G5, 3)], |s| {
        s.in_share_preemption = true
    });
    w.share_with("S1", LendAndBorrow, &[(G5, 3)], |s| {
        s.in_share_preemption = true
    });
    w.submit("s0", "S0", 3, 3);
    w.submit("a", "S1", 3, 1);
    w.submit("m", "S1", 1, 2);
    w.submit("big", "S1", 2, 3);
    w.submit("x", "S0", 2, 1);
    assert_eq!(w.running(), set(&["a", "m", "s0"]));
    w.submit("n", "S1", 2, 1);
    assert_eq!(w.preempted(), set(&["m"]));
    assert_eq!(w.running(), set(&["a", "n", "s0", "x"]));
}

#[test]
fn physical_instances_reclaimed_in_one_queue_stay_with_it_while_victims_exit_one_by_one() {
    let mut w = two_queues_on_two_physical_instances();
    w.submit("y1", "Y", 0, 1);
    w.submit("y2", "Y", 0, 1);
    w.input(Input::Submit(JobSpec::new(JobId(100), "other", "OB", G5)))
        .unwrap();
    w.exit_stops_at_once = false;
    w.submit("z", "Z", 0, 2);
    assert_eq!(w.preempted(), set(&["y1", "y2"]));
    let a1 = w.job("y1").stopping.unwrap();
    w.input(Input::AttemptExited {
        attempt: a1,
        exit: Exit::Succeeded,
    })
    .unwrap();
    assert_eq!(
        w.s.job(JobId(100)).unwrap().status,
        JobStatus::Runnable,
        "the other queue waits"
    );
    let a2 = w.job("y2").stopping.unwrap();
    w.input(Input::AttemptExited {
        attempt: a2,
        exit: Exit::Succeeded,
    })
    .unwrap();
    assert_eq!(w.job("z").status, JobStatus::Dispatched);
}

#[test]
fn a_borrower_kept_from_a_waiting_owner_s_capacity_says_so() {
    // p fits L's idle entitlement but waits for the environment (C's reserve fills it): L's
    // idle capacity is kept for p, not lent to b.
    let mut w = World::new(&[(G5, 6)])
        .share("L", Lend, &[(G5, 4)])
        .share("B", LendAndBorrow, &[(G5, 0)])
        .share("C", Reserve, &[(G5, 4)]);
    w.submit("l-run", "L", 0, 1);
    w.submit("c-run", "C", 0, 4);
    w.submit("p", "L", 0, 2);
    w.submit("b", "B", 0, 1);
    assert_eq!(w.reason("p"), "ENVIRONMENT_FULL");
    assert_eq!(w.reason("b"), "RESERVED_FOR_OTHERS");
}

/// L (LEND, 4 of 10) runs l-run (3); its head h (priority 5, 4 instances) waits for its own
/// share and has waited past a one-minute starvation guard; B borrows.
fn aged_owner_head() -> World {
    let mut w = World::with_policy(
        &[(G5, 10)],
        Policy {
            reserve_after_ms: 60_000,
            ..Default::default()
        },
    )
    .share("L", Lend, &[(G5, 4)])
    .share("B", LendAndBorrow, &[(G5, 0)]);
    w.submit("l-run", "L", 0, 3);
    w.submit("h", "L", 5, 4);
    w.advance(120);
    w
}

#[test]
fn an_aged_head_s_share_runs_its_smaller_jobs_on_its_idle_capacity_instead_of_lending_it() {
    // h (aged, 4) waits for l-run; p behind it takes L's idle instance, backfilled (owners get
    // their capacity back at once, whatever the guard), and b finds nothing to borrow.
    let mut w = aged_owner_head();
    w.submit("p", "L", 0, 1);
    w.submit("b", "B", 0, 1);
    assert_eq!(w.running(), set(&["l-run", "p"]));
    assert_eq!(w.reason("b"), "NOTHING_TO_BORROW");
    w.finish("l-run");
    assert_eq!(w.reason("h"), "BACKFILL_FINISHING");
    w.finish("p");
    assert_eq!(w.running(), set(&["h"]));
}

#[test]
fn an_old_owner_waiting_for_its_own_share_does_not_hold_back_borrowers() {
    let mut w = aged_owner_head();
    w.submit("b", "B", 0, 1);
    assert_eq!(w.running(), set(&["b", "l-run"]));
    w.finish("l-run");
    assert_eq!(w.preempted(), set(&["b"]), "h reclaims what it needs");
    assert_eq!(w.running(), set(&["h"]));
}

// ---- What-if (one source of rules for `qm plan`) -------------------------------------------

#[test]
fn a_what_if_names_the_reclaim_a_raised_limit_would_cause_and_changes_nothing() {
    // B borrows L's idle instance (b4 finds nothing more to borrow); L's 2-instance job cannot
    // fit its 1-instance quota (LEND never borrows). Raised to 2, L would take the free
    // instance and reclaim one of B's jobs, the lowest priority running.
    let mut w = World::new(&[(G5, 4)]).share("L", Lend, &[(G5, 1)]);
    w.share_with("B", LendAndBorrow, &[(G5, 2)], |s| {
        s.borrow_limit_percent = 100
    });
    for (name, p) in [("b1", 4), ("b2", 3), ("b3", 2), ("b4", 1)] {
        w.submit(name, "B", p, 1);
    }
    w.submit("l", "L", 0, 2);
    assert_eq!(w.running(), set(&["b1", "b2", "b3"]));
    let mut raised = ShareSpec::new("L");
    raised.limits = [(G5.to_string(), 2)].into();
    let put = Input::PutShare {
        queue: Q.into(),
        share: raised,
    };
    let foreseen = w.s.what_if(w.now, [put], 0).unwrap();
    let stopped: Vec<(String, Option<JobId>)> = foreseen
        .iter()
        .filter_map(|(at, e)| match e {
            Effect::Stop { job, cause, .. } if *at == w.now => Some((
                w.name(*job).to_string(),
                match cause {
                    StopCause::Reclaim { for_job, .. } => Some(*for_job),
                    _ => None,
                },
            )),
            _ => None,
        })
        .collect();
    let l = Some(w.id("l"));
    assert_eq!(stopped, [("b3".to_string(), l)]);
    // The real scheduler did not move.
    assert_eq!(w.running(), set(&["b1", "b2", "b3"]));
    assert_eq!(w.runnable(), set(&["b4", "l"]));
    assert_eq!(
        w.s.usage(Q)
            .unwrap()
            .iter()
            .find(|u| u.share == "L")
            .unwrap()
            .entitlement,
        1
    );
}

#[test]
fn a_what_if_runs_out_a_reclaimer_s_patience_within_its_horizon() {
    // b borrows L's idle instance and checkpoints, which makes an owner patient with it
    // (`reclaim_patience_ms`): raised to 2, L's job would preempt nothing at once, and b when
    // its patience runs out.
    let policy = Policy {
        reclaim_patience_ms: 60_000,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 2)], policy).share("L", Lend, &[(G5, 1)]);
    w.share_with("B", LendAndBorrow, &[(G5, 0)], |s| {
        s.borrow_limit_percent = -1
    });
    w.submit("b", "B", 0, 1);
    w.advance(10);
    w.checkpoint("b");
    w.advance(10);
    w.checkpoint("b");
    w.submit("l", "L", 0, 2);
    // A victim that checkpoints at this very instant would be taken at once (it loses nothing).
    w.advance(1);
    assert_eq!(w.running(), set(&["b"]));
    let mut raised = ShareSpec::new("L");
    raised.limits = [(G5.to_string(), 2)].into();
    let put = || Input::PutShare {
        queue: Q.into(),
        share: raised.clone(),
    };
    let stops = |fx: &[(Millis, Effect)]| -> Vec<Millis> {
        fx.iter()
            .filter(|(_, e)| matches!(e, Effect::Stop { .. }))
            .map(|(at, _)| *at)
            .collect()
    };
    let now = w.now;
    assert!(stops(&w.s.what_if(now, [put()], 0).unwrap()).is_empty());
    assert_eq!(
        stops(&w.s.what_if(now, [put()], 120_000).unwrap()),
        [now + 60_000]
    );
}

#[test]
fn usage_lists_a_share_s_entitlement_before_it_has_run_a_job() {
    let w = World::new(&[(G5, 4), (P4, 2)])
        .share("L", Lend, &[(G5, 1), (P4, 2)])
        .share("R", Reserve, &[(P4, 0)]);
    let rows: Vec<(String, String, u32, u32)> =
        w.s.usage(Q)
            .unwrap()
            .into_iter()
            .map(|u| (u.share, u.instance_type, u.entitlement, u.lendable))
            .collect();
    let row = |s: &str, t: &str, e, l| (s.to_string(), t.to_string(), e, l);
    assert_eq!(
        rows,
        [
            row("L", G5, 1, 1),
            row("L", P4, 2, 2),
            row("R", G5, 0, 0),
            row("R", P4, 0, 0)
        ]
    );
}

// ---- EASY backfill without preemptible backfill (the pooled-backfill baseline) -------------

#[test]
fn without_preemptible_backfill_only_jobs_that_end_before_the_head_could_start_pass_it() {
    // As Slurm's backfill does: the head reserves at once, and only a job whose bound runs out
    // before the head's shadow (r's bound, t=3600) passes it; nothing is ever preempted.
    let policy = Policy {
        reserve_after_ms: 0,
        preemptible_backfill: false,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 4)], policy).share("A", Reserve, &[(G5, 4)]);
    let bounded = |w: &mut World, name: &str, count: u32, secs: Option<u64>| {
        w.submit_with(name, "A", |j| {
            j.count = count;
            j.runtime_limit_ms = secs.map(|s| s * 1000);
        })
    };
    bounded(&mut w, "r", 2, Some(3600));
    bounded(&mut w, "big", 4, None);
    w.advance(60);
    bounded(&mut w, "e", 1, Some(600));
    bounded(&mut w, "p", 1, None);
    bounded(&mut w, "l", 1, Some(7200));
    assert_eq!(w.running(), set(&["e", "r"]));
    assert_eq!(w.reason("p"), "HELD_FOR_OLDER_JOB");
    assert_eq!(w.reason("l"), "HELD_FOR_OLDER_JOB");
    w.finish("r");
    w.finish("e");
    assert_eq!(w.running(), set(&["big"]));
    assert!(w.preempted().is_empty());
}

// ---- Drills (issue 19, item 3): `qm preempt` ----------------------------------------------

fn drill(w: &mut World, name: &str) -> Result<(), CoreError> {
    let job = w.id(name);
    w.input(Input::Drill {
        job,
        reason: "by admin: resume check".into(),
    })
}

#[test]
fn a_drill_stops_a_running_job_as_a_preemption_and_it_runs_again() {
    let mut w = World::new(&[(G5, 1)]).share("S", Reserve, &[(G5, 1)]);
    w.submit("job", "S", 1, 1);
    drill(&mut w, "job").unwrap();
    assert_eq!(w.preempted(), set(&["job"]));
    assert_eq!(w.job("job").preemptions, 1);
    // Its attempt exited at once (the test world's executor), and the capacity is its again.
    assert_eq!(w.running(), set(&["job"]));
    let stopped = w.effects.iter().find_map(|e| match e {
        Effect::Stop { cause, .. } => Some(cause.describe(|j| j.0.to_string())),
        _ => None,
    });
    assert_eq!(
        stopped.as_deref(),
        Some("Preempted: drill (by admin: resume check)")
    );
}

#[test]
fn a_drill_counts_against_the_preemption_retries() {
    let mut w = World::new(&[(G5, 1)]).share("S", Reserve, &[(G5, 1)]);
    w.submit_with("job", "S", |j| j.preemption_retries = Some(0));
    drill(&mut w, "job").unwrap();
    assert_eq!(w.failed(), set(&["job"]));
    assert!(w
        .job("job")
        .status_reason
        .contains("preemption retries exhausted"));
}

#[test]
fn only_a_running_job_can_be_drilled() {
    let mut w = World::new(&[(G5, 1)]).share("S", Reserve, &[(G5, 1)]);
    w.submit("running", "S", 1, 1);
    w.submit("waiting", "S", 1, 1);
    assert!(matches!(
        drill(&mut w, "waiting"),
        Err(CoreError::NotRunning(_))
    ));
    w.finish("running");
    w.finish("waiting");
    assert!(matches!(
        drill(&mut w, "waiting"),
        Err(CoreError::NotRunning(_))
    ));
}

#[test]
fn a_drill_does_not_count_against_thrash_protection_so_an_owner_still_reclaims() {
    // B borrows A's idle instance under a cap of one preemption an hour; a drill of B's job
    // must not use up that one, or the drill would shield it from A's reclaim for an hour.
    let mut w = World::new(&[(G5, 2)]).share("A", Lend, &[(G5, 1)]);
    w.share_with("B", LendAndBorrow, &[(G5, 1)], |s| {
        s.borrow_limit_percent = -1;
        s.max_preemptions_per_hour = 1;
    });
    w.submit("own", "B", 1, 1);
    w.submit("borrower", "B", 0, 1);
    assert_eq!(w.running(), set(&["borrower", "own"]));
    drill(&mut w, "borrower").unwrap();
    assert_eq!(
        w.running(),
        set(&["borrower", "own"]),
        "it runs again on what it had"
    );
    w.submit("owner", "A", 1, 1);
    assert_eq!(
        w.running(),
        set(&["owner", "own"]),
        "the owner reclaims at once"
    );
    assert_eq!(w.job("borrower").preemptions, 2);
}

// ---- Drains (issue 38, item 4): `qm drain` ------------------------------------------------

fn drain(w: &mut World, requeue: bool) {
    w.input(Input::Drain {
        reason: "qm drain by admin: kernel upgrade".into(),
        requeue,
    })
    .unwrap();
}

#[test]
fn a_drained_executor_starts_nothing_and_says_why_jobs_wait() {
    let mut w = World::new(&[(G5, 2)]).share("S", Reserve, &[(G5, 2)]);
    w.submit("running", "S", 1, 1);
    drain(&mut w, false);
    w.submit("waiting", "S", 1, 1);
    assert_eq!(w.running(), set(&["running"]), "the running job goes on");
    assert_eq!(w.runnable(), set(&["waiting"]));
    assert_eq!(w.reason("waiting"), "DRAINED");
    assert!(w.reason_text("waiting").contains("kernel upgrade"));
    w.input(Input::EndDrain).unwrap();
    assert_eq!(w.running(), set(&["running", "waiting"]));
}

#[test]
fn a_drained_executor_preempts_nothing() {
    // An owner returning while the executor is drained does not reclaim: nothing it would
    // reclaim for could start.
    let mut w = World::new(&[(G5, 1)]).share("A", Lend, &[(G5, 1)]);
    w.share_with("B", LendAndBorrow, &[(G5, 0)], |s| {
        s.borrow_limit_percent = -1
    });
    w.submit("borrower", "B", 1, 1);
    drain(&mut w, false);
    w.submit("owner", "A", 1, 1);
    assert_eq!(w.running(), set(&["borrower"]));
    assert!(w.preempted().is_empty());
    w.input(Input::EndDrain).unwrap();
    assert_eq!(w.running(), set(&["owner"]));
}

#[test]
fn a_drain_with_requeue_stops_every_running_job_without_counting_a_preemption() {
    let mut w = World::new(&[(G5, 2)]).share("S", Reserve, &[(G5, 2)]);
    // No preemption retries left and not interruptible: a drain's requeue neither fails the
    // one nor spares the other.
    w.submit_with("last-chance", "S", |j| j.preemption_retries = Some(0));
    w.submit_with("firm", "S", |j| j.interruptible = false);
    drain(&mut w, true);
    assert_eq!(w.preempted(), set(&["firm", "last-chance"]));
    assert_eq!(w.runnable(), set(&["firm", "last-chance"]));
    assert!(w.failed().is_empty());
    assert_eq!(w.job("last-chance").preemptions, 0);
    assert!(w
        .job("firm")
        .status_reason
        .starts_with("Requeued: qm drain by admin"));
    w.input(Input::EndDrain).unwrap();
    assert_eq!(w.running(), set(&["firm", "last-chance"]));
}

// ---- Interruption contracts (issue 19, item 1): jobs that may not be interrupted --------------

fn firm(j: &mut JobSpec) {
    j.interruptible = false;
}

/// A borrows B's idle capacity; B lends. Each owns 1 of the 2 instances.
fn borrower_and_lender() -> World {
    let mut w = World::new(&[(G5, 2)]).share("B", Lend, &[(G5, 1)]);
    w.share_with("A", LendAndBorrow, &[(G5, 1)], |s| {
        s.borrow_limit_percent = -1
    });
    w
}

#[test]
fn a_job_that_may_not_be_interrupted_never_starts_on_borrowed_capacity() {
    let mut w = borrower_and_lender();
    w.submit_with("firm-1", "A", firm);
    w.submit_with("firm-2", "A", firm);
    w.submit("loose", "A", 0, 1);
    // firm-1 takes A's own instance; firm-2 would have to borrow B's idle one and waits,
    // while an interruptible job of the same share borrows it.
    assert_eq!(w.running(), set(&["firm-1", "loose"]));
    assert_eq!(w.reason("firm-2"), "NOT_INTERRUPTIBLE");
    assert_eq!(w.usage("A"), 2);
}

#[test]
fn a_job_that_may_not_be_interrupted_counts_first_against_its_shares_own_quota() {
    // An interruptible job holds A's own instance; a firm job still starts, and the
    // interruptible one is then what A borrows: B's owner reclaims it, not the firm job.
    let mut w = borrower_and_lender();
    w.submit("loose", "A", 5, 1);
    w.submit_with("firm", "A", firm);
    assert_eq!(w.running(), set(&["firm", "loose"]));
    w.submit("owner", "B", 0, 1);
    assert_eq!(w.preempted(), set(&["loose"]));
    assert_eq!(w.running(), set(&["firm", "owner"]));
}

#[test]
fn a_job_that_may_not_be_interrupted_is_never_an_in_share_victim() {
    let mut w = World::new(&[(G5, 1)]);
    w.share_with("S", Reserve, &[(G5, 1)], |s| s.in_share_preemption = true);
    w.submit_with("firm", "S", firm);
    w.submit("urgent", "S", 9, 1);
    assert!(w.preempted().is_empty());
    assert_eq!(w.running(), set(&["firm"]));
    assert_eq!(w.runnable(), set(&["urgent"]));
}

#[test]
fn a_lowered_limit_does_not_preempt_a_job_that_may_not_be_interrupted() {
    let mut w = borrower_and_lender();
    w.submit_with("firm", "A", firm);
    w.update_share("A", |s| {
        s.limits.insert(G5.into(), 0);
    });
    w.update_share("B", |s| {
        s.limits.insert(G5.into(), 2);
    });
    w.submit("owner-1", "B", 0, 1);
    w.submit("owner-2", "B", 0, 1);
    assert!(w.preempted().is_empty(), "the firm job keeps its instance");
    assert_eq!(w.running(), set(&["firm", "owner-1"]));
}

#[test]
fn a_job_that_may_not_be_interrupted_and_needs_more_than_its_quota_never_fits() {
    let mut w = borrower_and_lender();
    w.submit_with("big", "A", |j| {
        firm(j);
        j.count = 2;
    });
    assert_eq!(
        w.reason("big"),
        "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
    );
}

#[test]
fn a_job_that_may_not_be_interrupted_is_not_drilled() {
    let mut w = borrower_and_lender();
    w.submit_with("firm", "A", firm);
    assert!(matches!(
        drill(&mut w, "firm"),
        Err(CoreError::NotInterruptible(_))
    ));
}

#[test]
fn a_job_that_may_not_be_interrupted_waiting_ahead_of_a_reclaimer_lets_the_reclaimer_start() {
    // In a share with in-share preemption jobs are decided in order: big (firm, first by
    // priority) waits for A's own quota, and r, which reclaimed A's lent instance from b, is
    // decided after it and starts on what b released.
    let mut w = World::new(&[(G5, 3)]);
    w.share_with("A", LendAndBorrow, &[(G5, 2)], |s| {
        s.in_share_preemption = true
    });
    w = w.share("B", LendAndBorrow, &[(G5, 1)]);
    w.submit_with("held", "A", firm);
    w.submit("b1", "B", 0, 1);
    w.submit("b2", "B", 0, 1);
    assert_eq!(w.running(), set(&["b1", "b2", "held"]));
    w.exit_stops_at_once = false;
    w.submit_with("big", "A", |j| {
        firm(j);
        j.priority = 9;
        j.count = 2;
    });
    w.submit("r", "A", 0, 1);
    assert_eq!(w.preempted().len(), 1, "r reclaims A's lent instance");
    w.release_stopped();
    assert!(w.running().contains(&"r".to_string()));
    assert_eq!(w.reason("big"), "NOT_INTERRUPTIBLE");
}

#[test]
fn an_aged_head_other_shares_may_not_pass_is_decided_before_their_in_share_preemption() {
    // x (X, aged) holds a reservation that later starts of other shares may not pass; y-high
    // (Y, priority 2, aged too) could preempt y-low in its share only to be held behind x,
    // and y-low would restart at once. x is decided first and starts; nothing is preempted.
    let policy = Policy {
        reserve_after_ms: 60_000,
        ..Default::default()
    };
    let mut w = World::with_policy(&[(G5, 4)], policy)
        .share("O", Reserve, &[(G5, 2)])
        .share("P", Reserve, &[(G5, 1)])
        .share("X", Reserve, &[(G5, 2)]);
    w.share_with("Y", Reserve, &[(G5, 2)], |s| s.in_share_preemption = true);
    w.submit("o", "O", 0, 2);
    w.submit("p", "P", 0, 1);
    w.submit("y-low", "Y", 0, 1);
    w.submit("x", "X", 0, 2);
    w.submit("y-high", "Y", 2, 2);
    w.advance(120);
    w.finish("o");
    assert!(w.preempted().is_empty(), "{:?}", w.preempted());
    assert_eq!(w.running(), set(&["p", "x", "y-low"]));
}

#[test]
fn a_running_job_shows_whether_it_runs_on_borrowed_capacity_and_from_whom() {
    // loose is what A holds beyond its limit (firm counts first against it): borrowed from B.
    let mut w = borrower_and_lender();
    w.submit("loose", "A", 5, 1);
    w.submit_with("firm", "A", firm);
    assert_eq!(w.running(), set(&["firm", "loose"]));
    let loose = w.s.borrowing(w.id("loose")).unwrap();
    assert_eq!((loose.borrowed, loose.count), (1, 1));
    assert_eq!(loose.lenders, vec!["B".to_string()]);
    let own = w.s.borrowing(w.id("firm")).unwrap();
    assert_eq!((own.borrowed, own.lenders.len()), (0, 0));
    // B's owner takes its instance back: nothing is borrowed any more.
    w.submit("owner", "B", 0, 1);
    assert_eq!(w.s.borrowing(w.id("firm")).unwrap().borrowed, 0);
    assert!(
        w.s.borrowing(w.id("loose")).is_none(),
        "preempted: no attempt"
    );
}

// ---- borrow: after-verified-resume (issue 19, item 2): jobs that may not borrow yet ----------

fn unverified(j: &mut JobSpec) {
    j.borrows = false;
}

#[test]
fn a_job_that_may_not_borrow_yet_waits_for_its_share_s_own_quota_and_stays_preemptible() {
    let mut w = borrower_and_lender();
    w.submit_with("first", "A", unverified);
    w.submit_with("second", "A", unverified);
    assert_eq!(w.running(), set(&["first"]));
    assert_eq!(w.reason("second"), "RESUME_UNVERIFIED");
    // Once its class is verified it borrows B's idle instance.
    let id = w.id("second");
    w.input(Input::SetBorrows {
        job: id,
        borrows: true,
    })
    .unwrap();
    assert_eq!(w.running(), set(&["first", "second"]));
    // What it borrows is B's: B's owner reclaims it.
    w.submit("owner", "B", 0, 1);
    assert_eq!(w.preempted(), set(&["second"]));
}

#[test]
fn a_job_that_may_not_borrow_counts_first_against_its_share_s_quota_and_others_borrow() {
    // loose holds A's own instance; unverified still starts within A's quota and loose is then
    // what A borrows — the one B's owner reclaims.
    let mut w = borrower_and_lender();
    w.submit("loose", "A", 5, 1);
    w.submit_with("checked", "A", unverified);
    assert_eq!(w.running(), set(&["checked", "loose"]));
    assert_eq!(w.s.borrowing(w.id("loose")).unwrap().borrowed, 1);
    assert_eq!(w.s.borrowing(w.id("checked")).unwrap().borrowed, 0);
    w.submit("owner", "B", 0, 1);
    assert_eq!(w.preempted(), set(&["loose"]));
}

#[test]
fn an_in_share_claim_within_its_share_s_quota_is_not_counted_as_borrowing() {
    // urgent preempts big in its share S for one instance of S's own quota; while big stops,
    // S's usage still shows full, but what urgent waits for is S's own: S still lends the
    // other two, and b3 borrows them (with L's) without preempting b1 in its own share.
    let mut w = World::new(&[(G5, 6)]);
    w.share_with("B", LendAndBorrow, &[(G5, 0)], |s| {
        s.in_share_preemption = true
    });
    w = w.share("L", LendAndBorrow, &[(G5, 2)]);
    w.share_with("S", Lend, &[(G5, 3)], |s| s.in_share_preemption = true);
    w = w.share("R", Reserve, &[(G5, 1)]);
    w.submit("big", "S", 2, 3);
    w.submit("r", "R", 0, 1);
    w.submit("b1", "B", 0, 1);
    assert_eq!(w.running(), set(&["b1", "big", "r"]));
    w.exit_stops_at_once = false;
    w.submit("b3", "B", 2, 3);
    w.submit_with("urgent", "S", |j| {
        j.priority = 3;
        j.interruptible = false;
    });
    assert_eq!(w.preempted(), set(&["big"]), "b1 is not preempted for b3");
    w.release_stopped();
    assert_eq!(w.running(), set(&["b1", "b3", "r", "urgent"]));
}

#[test]
fn a_job_that_may_not_be_interrupted_is_never_backfilled_onto_an_aged_head_s_reservation() {
    // h (aged, 4) waits for l-run; an interruptible job behind it would start backfilled,
    // preemptible for h; one that may not be interrupted could never give the capacity back,
    // so it is held behind h instead.
    let mut w = aged_owner_head();
    w.submit_with("firm", "L", firm);
    assert!(!w.running().contains(&"firm".to_string()));
    assert_eq!(w.reason("firm"), "HELD_FOR_OLDER_JOB");
    w.submit("loose", "L", 0, 1);
    assert!(
        w.running().contains(&"loose".to_string()),
        "{:?}",
        w.running()
    );
}

// ---- Issue 21: idle capacity by weight, groups of shares -----------------------------------

/// A lender with four idle instances and two borrowers entitled to one each, under
/// `FAIR_SHARE`; `f` sets the borrowers' weights.
fn fair_world(weight_a: u32, weight_b: u32) -> World {
    let mut w = World::new(&[(G5, 6)]);
    w.update_queue(|q| q.idle_assignment = IdleAssignment::FairShare);
    w.share_with("L", Lend, &[(G5, 4)], |_| {});
    w.share_with("A", LendAndBorrow, &[(G5, 1)], |s| s.weight = weight_a);
    w.share_with("B", LendAndBorrow, &[(G5, 1)], |s| s.weight = weight_b);
    w
}

/// L holds its four instances; A and B run one job each on their own quota, and A has three
/// more jobs waiting, submitted before B's.
fn fair_world_busy(weight_a: u32, weight_b: u32) -> World {
    let mut w = fair_world(weight_a, weight_b);
    w.submit("l1", "L", 0, 4);
    w.submit("a0", "A", 0, 1);
    w.submit("b0", "B", 0, 1);
    w
}

/// `fair_world_busy` with A borrowing all four of L's instances, then A's a5 and B's b1
/// waiting (`b_first`: b1 submitted first), and a1 ending: one instance to assign.
fn one_instance_for_two(weight_a: u32, weight_b: u32, fifo: bool, b_first: bool) -> World {
    let mut w = fair_world_busy(weight_a, weight_b);
    if fifo {
        w.update_queue(|q| q.idle_assignment = IdleAssignment::Fifo);
    }
    for a in ["a1", "a2", "a3", "a4"] {
        w.submit(a, "A", 0, 1);
    }
    w.finish("l1");
    assert_eq!(w.running(), set(&["a0", "a1", "a2", "a3", "a4", "b0"]));
    if b_first {
        w.submit("b1", "B", 0, 1);
        w.submit("a5", "A", 0, 1);
    } else {
        w.submit("a5", "A", 0, 1);
        w.submit("b1", "B", 0, 1);
    }
    w.finish("a1");
    w
}

#[test]
fn under_fair_share_the_borrower_with_the_lowest_weighted_share_after_admission_goes_first() {
    // A borrows 3 of a pool of 6 after a1 ends (a5 would take it to 4/6); B's b1 to 1/6.
    let w = one_instance_for_two(1, 1, false, false);
    assert_eq!(w.running(), set(&["a0", "a2", "a3", "a4", "b0", "b1"]));
    assert_eq!(w.runnable(), set(&["a5"]));
    assert_eq!(
        w.reason("a5"),
        "NOTHING_TO_BORROW",
        "nobody ranked first waits now"
    );
}

#[test]
fn the_same_story_under_fifo_gives_the_idle_instance_to_the_first_submitted() {
    let w = one_instance_for_two(1, 1, true, false);
    assert_eq!(w.running(), set(&["a0", "a2", "a3", "a4", "a5", "b0"]));
    assert_eq!(w.runnable(), set(&["b1"]));
}

#[test]
fn a_weight_divides_what_a_share_borrows() {
    // At weight 5, a5 would leave A at 4/30 = 0.13; b1 at weight 1 leaves B at 1/6 = 0.17:
    // A goes first although it borrows more, and although b1 was submitted first.
    let w = one_instance_for_two(5, 1, false, true);
    assert_eq!(w.running(), set(&["a0", "a2", "a3", "a4", "a5", "b0"]));
    assert_eq!(w.runnable(), set(&["b1"]));
}

#[test]
fn equal_weighted_shares_go_in_submission_order() {
    let mut w = fair_world_busy(1, 1);
    w.submit("b1", "B", 0, 1);
    w.submit("a1", "A", 0, 1);
    // Both would borrow 1 of 6 after admission: a tie, broken by submission order.
    w.submit("l2", "L", 0, 1);
    w.finish("l1");
    // L's l2 keeps one of its four; three are lent: b1, then a1, then nothing.
    assert_eq!(w.running(), set(&["a0", "a1", "b0", "b1", "l2"]));
    let b1 = w.job("b1").attempt.unwrap();
    let a1 = w.job("a1").attempt.unwrap();
    assert!(b1 < a1, "b1 was submitted first and started first");
}

#[test]
fn the_weighted_share_is_dominant_over_instance_types() {
    // A borrows two P4s of a pool of three (0.67) and nothing on G5. When two G5s free up,
    // A's job of two would leave it at 2/5 on G5 but 0.67 over both types; B's job of one at
    // 2/5 = 0.4: B goes first although A asked first, and A's job no longer fits.
    let mut w = World::new(&[(G5, 5), (P4, 3)]);
    w.update_queue(|q| q.idle_assignment = IdleAssignment::FairShare);
    w.share_with("L", Lend, &[(G5, 3), (P4, 2)], |_| {});
    w.share_with("A", LendAndBorrow, &[(G5, 1), (P4, 1)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 1), (P4, 0)], |_| {});
    w.submit_with("ap", "A", |j| {
        j.instance_type = P4.into();
        j.count = 3;
    });
    w.submit("l1", "L", 0, 2);
    w.submit("b0", "B", 0, 2);
    w.submit("a0", "A", 0, 1);
    assert_eq!(w.running(), set(&["a0", "ap", "b0", "l1"]));
    w.submit("a1", "A", 0, 2);
    w.submit("b1", "B", 0, 1);
    w.finish("l1");
    assert_eq!(w.running(), set(&["a0", "ap", "b0", "b1"]));
    assert_eq!(w.runnable(), set(&["a1"]));
    let fair = w.s.fairness(Q).unwrap();
    let a = fair.shares.iter().find(|s| s.share == "A").unwrap();
    assert_eq!(a.dominant.as_deref(), Some(P4));
    assert!((a.weighted_share - 2.0 / 3.0).abs() < 1e-9, "{a:?}");
}

#[test]
fn a_waiting_borrower_says_which_share_goes_first() {
    let mut w = fair_world_busy(1, 1);
    for a in ["a1", "a2", "a3", "a4"] {
        w.submit(a, "A", 0, 1);
    }
    w.finish("l1");
    w.submit("a5", "A", 0, 1);
    w.submit("b1", "B", 0, 1);
    w.submit("b2", "B", 0, 1);
    w.finish("a1");
    assert_eq!(w.runnable(), set(&["a5", "b2"]));
    assert_eq!(w.reason("a5"), "BEHIND_FAIR_SHARE");
    assert!(
        w.reason_text("a5")
            .contains("A's weighted share 0.5 is above B's 0.17, which goes first"),
        "{}",
        w.reason_text("a5")
    );
}

/// A borrows all of L's four idle instances before B wants any, under fair reclaim.
fn fair_reclaim_world() -> World {
    let mut w = fair_world(1, 1);
    w.update_queue(|q| q.fair_reclaim = true);
    w.submit("a0", "A", 0, 1);
    for a in ["a1", "a2", "a3", "a4"] {
        w.submit(a, "A", 0, 1);
    }
    assert_eq!(w.running(), set(&["a0", "a1", "a2", "a3", "a4"]));
    w
}

#[test]
fn fair_reclaim_preempts_borrowed_jobs_until_the_shares_are_level_and_stops_there() {
    let mut w = fair_reclaim_world();
    w.submit("b0", "B", 0, 1);
    assert!(w.preempted().is_empty(), "B's own instance was idle");
    for b in ["b1", "b2", "b3"] {
        w.submit(b, "B", 0, 1);
    }
    // A borrows 4 of a pool of 6. b1 (B at 1/6) takes one of A's (A at 3/6), b2 (2/6) another
    // (2/6, level); b3 would leave B at 3/6 above A's 1/6: it waits.
    assert_eq!(w.preempted().len(), 2);
    assert_eq!((w.usage("A"), w.usage("B")), (3, 3));
    assert_eq!(w.runnable().len(), 3, "{:?}", w.runnable());
    assert!(w.runnable().contains(&"b3".to_string()));
    // No ping-pong: A's preempted jobs do not take it back, whatever passes the unit.
    for (i, j) in ["a3", "a4", "b3"].iter().enumerate() {
        w.priority(j, i as u32 + 1);
        assert!(w.preempted().is_empty());
    }
}

#[test]
fn fair_reclaim_never_takes_what_a_share_owns() {
    // A runs one job on its own quota and borrows four in two jobs; B, at weight 10, counts
    // what it borrows a tenth: taking one of A's borrowed jobs leaves A at 2/6 above B's 2/60,
    // but taking the second would leave A borrowing nothing (0), below B: fair reclaim stops
    // before any share falls to its own quota.
    let mut w = fair_world(1, 10);
    w.update_queue(|q| q.fair_reclaim = true);
    w.submit("a0", "A", 0, 1);
    w.submit("a1", "A", 0, 2);
    w.submit("a2", "A", 0, 2);
    w.submit("b0", "B", 0, 1);
    assert_eq!(w.running(), set(&["a0", "a1", "a2", "b0"]));
    w.submit("b1", "B", 0, 2);
    w.submit("b2", "B", 0, 2);
    let preempted = w.preempted();
    assert_eq!(preempted, set(&["a2"]), "the newest borrowed job only");
    assert!(w.running().contains(&"a0".to_string()));
    assert_eq!(w.runnable(), set(&["a2", "b2"]));
}

#[test]
fn without_fair_reclaim_a_borrower_never_preempts_a_borrower() {
    let mut w = fair_world(1, 1);
    w.submit("a0", "A", 0, 1);
    for a in ["a1", "a2", "a3", "a4"] {
        w.submit(a, "A", 0, 1);
    }
    w.submit("b0", "B", 0, 1);
    w.submit("b1", "B", 0, 1);
    assert!(w.preempted().is_empty());
    assert_eq!(w.reason("b1"), "NOTHING_TO_BORROW");
}

/// L lends four instances; A and B are a department (group D), C is not in it.
fn grouped_world(limit: Option<u32>) -> World {
    let mut w = World::new(&[(G5, 7)]);
    w.share_with("A", LendAndBorrow, &[(G5, 3)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 1)], |_| {});
    w.share_with("C", LendAndBorrow, &[(G5, 1)], |_| {});
    w.share_with("L", Lend, &[(G5, 3)], |_| {});
    w.update_queue(|q| {
        q.groups = vec![GroupSpec {
            name: "D".into(),
            shares: vec!["A".into(), "B".into()],
            limits: limit.map(|l| (G5.to_string(), l)).into_iter().collect(),
            weight: 1,
        }]
    });
    w
}

#[test]
fn a_group_lends_its_idle_capacity_to_its_own_members_first() {
    let mut w = grouped_world(None);
    w.submit("l", "L", 0, 3);
    w.submit("a1", "A", 0, 1);
    w.submit("b0", "B", 0, 1);
    w.submit("c0", "C", 0, 1);
    // C asks to borrow before B does; A has two idle instances.
    w.submit("c1", "C", 0, 1);
    assert_eq!(w.running(), set(&["a1", "b0", "c0", "c1", "l"]));
    w.submit("c2", "C", 0, 1);
    w.submit("b1", "B", 0, 1);
    w.finish("c1");
    // One instance came free (c1's, of A's idle two): B, A's fellow member, gets it although
    // C asked first.
    assert!(w.running().contains(&"b1".to_string()), "{:?}", w.running());
    assert_eq!(w.runnable(), set(&["c2"]));
}

#[test]
fn a_group_at_its_ceiling_borrows_no_more() {
    let mut w = grouped_world(Some(4));
    w.submit("a0", "A", 0, 3);
    w.submit("b0", "B", 0, 1);
    w.submit("b1", "B", 0, 1);
    assert_eq!(w.running(), set(&["a0", "b0"]));
    assert_eq!(w.reason("b1"), "GROUP_LIMIT_REACHED");
    assert!(w
        .reason_text("b1")
        .contains("group D hold 4 of its limit of 4"));
    // C, outside the group, still borrows.
    w.submit("c0", "C", 0, 1);
    w.submit("c1", "C", 0, 2);
    assert!(w.running().contains(&"c1".to_string()));
}

#[test]
fn a_lowered_group_ceiling_is_reclaimed_lazily() {
    let mut w = grouped_world(Some(6));
    w.submit("a0", "A", 0, 3);
    w.submit("b0", "B", 0, 1);
    w.submit("b1", "B", 0, 2);
    assert_eq!(w.running(), set(&["a0", "b0", "b1"]));
    w.update_queue(|q| {
        q.groups[0].limits.insert(G5.into(), 4);
    });
    // Nothing is preempted for the lower ceiling ...
    assert!(w.preempted().is_empty());
    // ... and no member starts while the group is above it ...
    w.submit("b2", "B", 0, 1);
    assert_eq!(w.reason("b2"), "GROUP_LIMIT_REACHED");
    w.terminate("b2");
    w.submit("a1", "A", 0, 2);
    assert_eq!(w.reason("a1"), "GROUP_LIMIT_REACHED");
    // ... until an owner needs its own capacity: then what a member borrows is reclaimed.
    w.finish("a0");
    assert_eq!(w.preempted(), set(&["b1"]));
    assert_eq!(w.running(), set(&["a1", "b0"]));
    assert_eq!(w.reason("b1"), "GROUP_LIMIT_REACHED");
}

#[test]
fn an_owner_reclaims_from_a_fellow_member_that_borrows_when_the_ceiling_binds() {
    let mut w = grouped_world(Some(4));
    w.submit("b0", "B", 0, 1);
    w.submit("b1", "B", 0, 3); // borrows A's idle three
    assert_eq!(w.running(), set(&["b0", "b1"]));
    w.submit("a0", "A", 0, 2);
    // A's owner takes its capacity back from B, which borrowed it.
    assert_eq!(w.preempted(), set(&["b1"]));
    assert!(w.running().contains(&"a0".to_string()));
}

#[test]
fn a_job_larger_than_its_group_s_ceiling_never_fits() {
    let mut w = grouped_world(Some(2));
    w.submit("a0", "A", 0, 3);
    assert!(w.job("a0").misconfigured.is_some());
}

// ---- Issue 21, from the review: fair reclaim is strict, groups compete like owners ---------

fn group_spec(name: &str, shares: &[&str], limit: Option<(&str, u32)>) -> GroupSpec {
    GroupSpec {
        name: name.into(),
        shares: shares.iter().map(|s| s.to_string()).collect(),
        limits: limit.map(|(u, l)| (u.to_string(), l)).into_iter().collect(),
        weight: 1,
    }
}

/// Two groups, each with a lender whose idle entitlement keeps the group's figure at 0
/// (review of issue 21: the rule once flipped the instance between them on every pass).
#[test]
fn fair_reclaim_takes_nothing_between_groups_that_borrow_nothing_from_outside() {
    let mut w = World::new(&[(G5, 2)]);
    w.share_with("A", LendAndBorrow, &[(G5, 0)], |_| {});
    w.share_with("A2", Lend, &[(G5, 2)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 0)], |_| {});
    w.share_with("B2", Lend, &[(G5, 2)], |_| {});
    w.update_queue(|q| {
        q.idle_assignment = IdleAssignment::FairShare;
        q.fair_reclaim = true;
        q.groups = vec![
            group_spec("GA", &["A", "A2"], None),
            group_spec("GB", &["B", "B2"], None),
        ];
    });
    w.submit("a1", "A", 0, 1);
    w.submit("a2", "A", 0, 1);
    assert_eq!(w.running(), set(&["a1", "a2"]));
    w.submit("b1", "B", 0, 1); // settle panics with "no fixed point" if it ping-pongs
                               // Both groups borrow nothing from outside (their lenders' idle entitlement): fair reclaim
                               // would leave B's group at 0, not below A's 0, so it takes nothing.
    assert!(w.preempted().is_empty());
    assert_eq!(w.runnable(), set(&["b1"]));
}

/// Equal dominant figures on another type: a preemption on G5 would move neither figure.
#[test]
fn fair_reclaim_takes_nothing_when_another_type_sets_both_figures_alike() {
    let mut w = World::new(&[(G5, 2), (P4, 2)]);
    w.update_queue(|q| {
        q.idle_assignment = IdleAssignment::FairShare;
        q.fair_reclaim = true;
    });
    w.share_with("L", Lend, &[(G5, 4), (P4, 2)], |_| {});
    w.share_with("A", LendAndBorrow, &[(G5, 0), (P4, 0)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 0), (P4, 0)], |_| {});
    for (n, s) in [("ap", "A"), ("bp", "B")] {
        w.submit_with(n, s, |j| {
            j.instance_type = P4.into();
            j.count = 1;
        });
    }
    w.submit("a1", "A", 0, 1);
    w.submit("a2", "A", 0, 1);
    assert_eq!(w.running(), set(&["a1", "a2", "ap", "bp"]));
    w.submit("b1", "B", 0, 1);
    // Both figures are set by P4 (1 of 2 each): taking a G5 job would not bring B below A.
    assert!(w.preempted().is_empty());
}

/// B's figure falls when its P4 job ends: B may now fair-reclaim on G5, and G5 is passed.
#[test]
fn a_figure_that_falls_on_another_type_lets_a_borrower_reclaim_fairly_at_once() {
    let mut w = World::new(&[(G5, 2), (P4, 4)]);
    w.update_queue(|q| {
        q.idle_assignment = IdleAssignment::FairShare;
        q.fair_reclaim = true;
    });
    w.share_with("L", Lend, &[(G5, 4), (P4, 4)], |_| {});
    w.share_with("A", LendAndBorrow, &[(G5, 0), (P4, 0)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 0), (P4, 0)], |_| {});
    w.submit_with("bp", "B", |j| {
        j.instance_type = P4.into();
        j.count = 2;
    });
    w.submit("a1", "A", 0, 1);
    w.submit("a2", "A", 0, 1);
    w.submit("b1", "B", 0, 1);
    assert_eq!(w.running(), set(&["a1", "a2", "bp"]));
    assert!(w.preempted().is_empty());
    w.finish("bp");
    let after_finish = w.preempted();
    // Any G5 event: the pass now finds the fair victim.
    assert_eq!(
        after_finish,
        set(&["a2"]),
        "B's figure fell: it reclaims on G5 at once"
    );
    assert_eq!(w.running(), set(&["a1", "b1"]));
}

/// A group whose members' entitlements exceed its ceiling: its owners compete for the ceiling
/// as owners compete for an over-subscribed environment, and an aged owner head's reservation
/// covers its fellow members' later starts. Returns whether A's big job started within 200
/// minutes of B's stream of small ones.
fn starve(group_limit: bool) -> bool {
    let env = if group_limit { 8 } else { 4 };
    let mut w = World::new(&[(G5, env)]);
    w.share_with("A", LendAndBorrow, &[(G5, 4)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 4)], |_| {});
    if group_limit {
        w.update_queue(|q| q.groups = vec![group_spec("D", &["A", "B"], Some((G5, 4)))]);
    }
    let mut n = 0;
    let mut running: Vec<String> = Vec::new();
    for _ in 0..4 {
        let name = format!("b{n}");
        n += 1;
        w.submit(&name, "B", 0, 1);
        running.push(name);
    }
    w.submit("a", "A", 0, 4);
    for _ in 0..200 {
        w.wait(60);
        // One of B's jobs ends, another is submitted.
        let done = running.remove(0);
        w.finish(&done);
        let name = format!("b{n}");
        n += 1;
        w.submit(&name, "B", 0, 1);
        running.push(name);
        running.retain(|r| w.running().contains(r));
        if w.running().contains(&"a".to_string()) {
            return true;
        }
    }
    false
}

#[test]
fn the_starvation_guard_serves_an_owner_whose_group_ceiling_its_fellow_members_fill() {
    assert!(
        starve(false),
        "control: env contention, the starvation guard works"
    );
    assert!(
        starve(true),
        "group ceiling: the starvation guard never engages"
    );
}

/// With figures set by another type, no event on the unit flips capacity between A and B.
#[test]
fn fair_reclaim_never_flips_an_instance_back_and_forth() {
    let mut w = World::new(&[(G5, 2), (P4, 2)]);
    w.update_queue(|q| {
        q.idle_assignment = IdleAssignment::FairShare;
        q.fair_reclaim = true;
    });
    w.share_with("L", Lend, &[(G5, 4), (P4, 2)], |_| {});
    w.share_with("A", LendAndBorrow, &[(G5, 0), (P4, 0)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 0), (P4, 0)], |_| {});
    w.share_with("C", Reserve, &[(G5, 0)], |_| {});
    for (n, s) in [("ap", "A"), ("bp", "B")] {
        w.submit_with(n, s, |j| {
            j.instance_type = P4.into();
            j.count = 1;
        });
    }
    w.submit("a1", "A", 0, 1);
    w.submit("a2", "A", 0, 1);
    w.submit("b1", "B", 0, 1);
    w.preempted();
    let mut flips = 0;
    for i in 0..6 {
        // A priority change of a waiting job: only a pass of G5.
        w.advance(1);
        let Some(waiting) = w.runnable().into_iter().next() else {
            break;
        };
        w.priority(&waiting, i + 1);
        flips += w.preempted().len();
    }
    assert_eq!(
        flips, 0,
        "fair reclaim flips the same instance back and forth"
    );
}

/// The same on two types at once, each marking the other for a pass: it settles.
#[test]
fn fair_reclaim_on_two_types_settles() {
    const X: &str = "ml.x";
    let mut w = World::new(&[(G5, 2), (P4, 2), (X, 2)]);
    w.update_queue(|q| {
        q.idle_assignment = IdleAssignment::FairShare;
        q.fair_reclaim = true;
    });
    w.share_with("L", Lend, &[(G5, 4), (P4, 4), (X, 2)], |_| {});
    w.share_with("A", LendAndBorrow, &[(G5, 0), (P4, 0), (X, 0)], |_| {});
    w.share_with("B", LendAndBorrow, &[(G5, 0), (P4, 0), (X, 0)], |_| {});
    let on = |t: &'static str| {
        move |j: &mut JobSpec| {
            j.instance_type = t.into();
            j.count = 1;
        }
    };
    w.submit_with("ax", "A", on(X));
    w.submit_with("bx", "B", on(X));
    w.submit_with("a1", "A", on(G5));
    w.submit_with("a2", "A", on(G5));
    w.submit_with("b3", "B", on(P4));
    w.submit_with("b4", "B", on(P4));
    w.submit_with("b1", "B", on(G5));
    w.submit_with("a3", "A", on(P4));
    w.preempted();
    let mut flips = 0;
    for i in 0..5 {
        w.advance(1);
        let Some(waiting) = w.runnable().into_iter().next() else {
            break;
        };
        w.priority(&waiting, i + 1);
        flips += w.preempted().len();
    }
    assert_eq!(flips, 0);
}

/// An owner blocked by its group's ceiling keeps from borrowers only what the ceiling would
/// let it use: here nothing, so a borrower takes its idle entitlement.
#[test]
fn an_owner_its_group_ceiling_blocks_keeps_no_idle_capacity_from_borrowers() {
    let mut w = World::new(&[(G5, 4)]);
    w.share_with("A", Lend, &[(G5, 2)], |_| {});
    w.share_with("B", Lend, &[(G5, 2)], |_| {});
    w.share_with("X", LendAndBorrow, &[(G5, 0)], |_| {});
    w.update_queue(|q| q.groups = vec![group_spec("D", &["A", "B"], Some((G5, 2)))]);
    w.submit("b0", "B", 0, 2);
    w.submit("a0", "A", 0, 1);
    w.submit("x0", "X", 0, 2);
    assert_eq!(w.reason("a0"), "GROUP_LIMIT_REACHED");
    assert!(
        w.running().contains(&"x0".to_string()),
        "two of A's instances idle while x0 waits"
    );
}
