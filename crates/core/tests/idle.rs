//! Idle while jobs wait (issue 20): scenarios for `Scheduler::idle_while_waiting`, each a
//! cluster with free instances and a job that fits them, and the cause the query names.

mod support;

use qm_core::Strategy::*;
use qm_core::*;
use support::*;

/// The one entry of the world's queue, on G5.
fn idle(w: &World) -> IdleWhileWaiting {
    let mut all = w.s.idle_while_waiting();
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

#[test]
fn a_reserve_shares_idle_capacity_while_another_share_waits_is_reserve() {
    let mut w = World::new(&[(G5, 4)])
        .share("owner", Reserve, &[(G5, 2)])
        .share("busy", LendAndBorrow, &[(G5, 2)]);
    w.submit("b1", "busy", 0, 2);
    w.submit("b2", "busy", 0, 1);
    assert_eq!(w.reason("b2"), "NOTHING_TO_BORROW");
    let e = idle(&w);
    assert_eq!((e.free, e.wasted, e.cause), (2, 1, IdleCause::Reserve));
    assert_eq!(e.job, w.id("b2"));
    assert_eq!(e.cause.code(), "reserve");
}

#[test]
fn a_share_at_its_borrow_limit_next_to_idle_lendable_capacity_is_borrow_limit() {
    let mut w = World::new(&[(G5, 4)]).share("lender", Lend, &[(G5, 2)]);
    w.share_with("busy", LendAndBorrow, &[(G5, 2)], |s| {
        s.borrow_limit_percent = 50
    });
    w.submit("b1", "busy", 0, 2);
    w.submit("b2", "busy", 0, 1);
    w.submit("b3", "busy", 0, 1);
    w.submit("b4", "busy", 0, 1);
    assert_eq!(w.running(), set(&["b1", "b2"]));
    assert_eq!(w.reason("b3"), "BORROW_LIMIT_REACHED");
    let e = idle(&w);
    // Two waiting jobs of one instance each, one instance free.
    assert_eq!((e.free, e.wasted, e.cause), (1, 1, IdleCause::BorrowLimit));
    assert_eq!(e.job, w.id("b3"));
}

#[test]
fn a_share_whose_group_is_at_its_ceiling_next_to_free_capacity_is_group_limit() {
    let mut w = World::new(&[(G5, 4)]).share("lender", Lend, &[(G5, 2)]);
    w.share_with("a", LendAndBorrow, &[(G5, 1)], |_| {});
    w.share_with("b", LendAndBorrow, &[(G5, 1)], |_| {});
    w.update_queue(|q| {
        q.groups = vec![GroupSpec {
            name: "org".into(),
            shares: vec!["a".into(), "b".into()],
            limits: [(G5.to_string(), 2)].into(),
            weight: 1,
        }]
    });
    w.submit("a1", "a", 0, 2);
    // b's owner takes back what a borrows within their group; a1 then waits for the ceiling.
    w.submit("b1", "b", 0, 1);
    assert_eq!(w.running(), set(&["b1"]));
    assert_eq!(w.reason("a1"), "GROUP_LIMIT_REACHED");
    let e = idle(&w);
    assert_eq!((e.free, e.wasted, e.cause), (3, 2, IdleCause::GroupLimit));
    assert_eq!(e.job, w.id("a1"));
}

#[test]
fn a_job_larger_than_its_share_on_a_free_cluster_never_fits() {
    let mut w = World::new(&[(G5, 4)]).share("small", Reserve, &[(G5, 1)]);
    w.submit("big", "small", 0, 2);
    assert!(w.reason("big").starts_with("MISCONFIGURATION"));
    let e = idle(&w);
    assert_eq!((e.free, e.wasted, e.cause), (4, 2, IdleCause::NeverFits));
    assert_eq!(e.cause.code(), "never_fits");
}

#[test]
fn a_share_that_does_not_borrow_waits_next_to_lendable_capacity_is_no_borrowing() {
    let mut w = World::new(&[(G5, 4)])
        .share("lender", Lend, &[(G5, 2)])
        .share("busy", Lend, &[(G5, 2)]);
    w.submit("b1", "busy", 0, 2);
    w.submit("b2", "busy", 0, 2);
    assert_eq!(w.reason("b2"), "OWN_QUOTA_FULL");
    let e = idle(&w);
    assert_eq!((e.free, e.wasted, e.cause), (2, 2, IdleCause::NoBorrowing));
}

#[test]
fn the_cause_with_more_waiting_instances_wins() {
    let mut w = World::new(&[(G5, 6)])
        .share("owner", Reserve, &[(G5, 3)])
        .share("lends", Lend, &[(G5, 1)]);
    w.share_with("busy", LendAndBorrow, &[(G5, 2)], |s| {
        s.borrow_limit_percent = 0
    });
    w.submit("l1", "lends", 0, 1);
    w.submit("l2", "lends", 0, 1);
    w.submit("b1", "busy", 0, 2);
    w.submit("b2", "busy", 0, 1);
    w.submit("b3", "busy", 0, 1);
    // Three free (owner's): `lends` wants 1 (it never borrows), `busy` 2 (borrow limit 0).
    let e = idle(&w);
    assert_eq!((e.free, e.wasted, e.cause), (3, 3, IdleCause::BorrowLimit));
}

#[test]
fn a_full_cluster_or_an_empty_queue_has_nothing_idle_while_waiting() {
    let mut w = World::new(&[(G5, 2)]).share("a", LendAndBorrow, &[(G5, 2)]);
    assert!(w.s.idle_while_waiting().is_empty());
    w.submit("a1", "a", 0, 1);
    assert!(
        w.s.idle_while_waiting().is_empty(),
        "one free, nobody waits"
    );
    w.submit("a2", "a", 0, 1);
    w.submit("a3", "a", 0, 1);
    assert_eq!(w.runnable(), set(&["a3"]));
    assert!(w.s.idle_while_waiting().is_empty(), "nothing free");
}

#[test]
fn a_waiting_job_larger_than_what_is_free_does_not_count() {
    let mut w = World::new(&[(G5, 4)])
        .share("owner", Reserve, &[(G5, 1)])
        .share("busy", LendAndBorrow, &[(G5, 3)]);
    w.submit("b1", "busy", 0, 3);
    w.submit("b2", "busy", 0, 2);
    assert_eq!(w.runnable(), set(&["b2"]));
    assert!(w.s.idle_while_waiting().is_empty());
}
