//! Lend/borrow arithmetic for one capacity unit of one queue, and nothing else.
//!
//! For share `s` with usage `U` and entitlement `L`: `own = min(U, L)`,
//! `borrowed = max(0, U - L)`, `idle = L - own`; *lendable* is the idle of LEND and
//! LEND_AND_BORROW shares (RESERVE lends nothing). A state is *admissible* when
//!
//! * `Σ U ≤ environment limit` and the physical instances are not overcommitted,
//! * `Σ borrowed ≤ Σ lendable`, so borrowing never eats into RESERVE capacity nor into
//!   capacity no share is entitled to (DESIGN.md §2 rule 3), and an owner's return is backed,
//! * each share's `borrowed` is within its borrow allowance (0 unless LEND_AND_BORROW).
//!
//! Reclaim is lazy (rule 4), so a lowered limit or a strategy change can leave a state that is
//! not admissible. Admission is therefore *relative*: a change is allowed when it breaks no
//! constraint that held before and worsens none that was already broken. Whenever the state
//! before was admissible that is plain admissibility, and it means that only a job that needs
//! capacity back (an owner) ever reclaims an excess. A job that stays within its share's
//! entitlement ([`Route::Own`]) cannot break a borrow limit, so only borrowing is checked
//! against them.

use crate::model::Strategy;

/// One share's position on one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Account {
    /// Instances the share may use without borrowing.
    pub entitlement: u32,
    /// Instances its attempts hold (running or still stopping).
    pub usage: u32,
    /// The share's strategy.
    pub strategy: Strategy,
    /// Most instances it may borrow; `None` = unlimited.
    pub allowance: Option<u32>,
}

impl Account {
    /// A share as accounting sees it after the fact (usage reports, the policy review):
    /// `usage` of `entitlement`, its idle part lent (LEND) or not (RESERVE); how much it may
    /// borrow does not matter there, since what it borrowed already happened.
    pub const fn recorded(entitlement: u32, usage: u32, lends: bool) -> Self {
        Account {
            entitlement,
            usage,
            strategy: if lends {
                Strategy::Lend
            } else {
                Strategy::Reserve
            },
            allowance: None,
        }
    }

    /// Entitlement its attempts do not use (lent or idle).
    pub fn idle(&self) -> u32 {
        self.entitlement - self.own()
    }

    /// Usage within the entitlement.
    pub fn own(&self) -> u32 {
        self.usage.min(self.entitlement)
    }

    /// Usage above the entitlement.
    pub fn borrowed(&self) -> u32 {
        self.usage.saturating_sub(self.entitlement)
    }

    /// Idle entitlement that other shares may borrow (zero for RESERVE).
    pub fn lendable(&self) -> u32 {
        if self.strategy.lends() {
            self.entitlement - self.own()
        } else {
            0
        }
    }

    /// Which admission question adding `c` instances asks.
    pub fn route(&self, c: u32) -> Route {
        if self.usage + c <= self.entitlement {
            Route::Own
        } else {
            Route::Borrow
        }
    }
}

/// The limits of one unit that are not per share.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ceiling {
    /// The service environment's limit for the unit (0 when it has none).
    pub environment: u32,
    /// Physical instances not held by *other* queues, when the executor reports a physical
    /// capacity for the unit; `None` = no physical limit beyond the environment.
    pub physical_for_queue: Option<u32>,
    /// Groups of shares with a limit on the unit: per group, the most instances its members
    /// may hold together (`None` = the group does not cap the unit).
    pub groups: Vec<Option<u32>>,
    /// Per share (by index): its group, an index into `groups`. Empty when the queue has no
    /// groups.
    pub group_of: Vec<Option<u8>>,
}

impl Ceiling {
    /// A unit limited by its environment (and physical instances) alone.
    pub fn new(environment: u32, physical_for_queue: Option<u32>) -> Self {
        Ceiling {
            environment,
            physical_for_queue,
            ..Default::default()
        }
    }

    /// Share `s`'s group, when that group caps the unit.
    pub fn capped_group(&self, s: usize) -> Option<usize> {
        let g = usize::from(self.group_of.get(s).copied().flatten()?);
        self.groups.get(g)?.map(|_| g)
    }
}

/// Whether a share's usage ends within its entitlement (own capacity) or above it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Within the entitlement.
    Own,
    /// Above the entitlement.
    Borrow,
}

/// How far a state is over each constraint; a value ≤ 0 means the constraint holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `Σ U - environment limit`.
    pub environment: i64,
    /// `Σ U - physical instances available to this queue`.
    pub physical: i64,
    /// `Σ borrowed - Σ lendable`.
    pub lending: i64,
    /// Per share: `borrowed - allowance` (very negative when unlimited).
    pub borrowing: Vec<i64>,
    /// Per group: `Σ members' U - the group's limit` (very negative when it has none).
    pub groups: Vec<i64>,
    /// Per share: the group whose limit binds it (copied from the [`Ceiling`], so that
    /// [`allowed_add`] needs nothing else).
    pub group_of: Vec<Option<u8>>,
}

/// Which constraint a change would break; the first one found, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The service environment's limit for the unit.
    Environment,
    /// The physical instances of the unit.
    Physical,
    /// Borrowed instances would not be backed by idle lendable capacity.
    Lending,
    /// The share at this index would borrow beyond its borrow limit.
    BorrowLimit(usize),
    /// The group at this index would hold more than its limit.
    Group(usize),
    /// Borrowing would take capacity that another share's waiting owner needs, or that a job
    /// of another share preempted for (decided by the pass, not by this module).
    Reserved,
    /// A job that may not be interrupted would take its share's non-interruptible usage
    /// beyond its entitlement (decided by the pass, not by this module).
    Firm,
}

/// What each share has lent out: what all shares borrow, split over the lenders in
/// proportion to their idle lendable entitlement (lending is pooled: no borrowed instance
/// belongs to one lender), never more than a lender's idle entitlement. The one definition
/// the server's live usage, `qm shares` and usage reports share.
pub fn lent_out(accounts: &[Account]) -> Vec<f64> {
    let borrowed: f64 = accounts.iter().map(|a| f64::from(a.borrowed())).sum();
    let lendable: f64 = accounts.iter().map(|a| f64::from(a.lendable())).sum();
    let ratio = if lendable > 0.0 {
        (borrowed / lendable).min(1.0)
    } else {
        0.0
    };
    accounts
        .iter()
        .map(|a| f64::from(a.lendable()) * ratio)
        .collect()
}

/// Who lends to whom: `(lender, borrower, instances)` for every pair with something between
/// them, lenders then borrowers in index order. The same pooled split as [`lent_out`]: each
/// borrower's borrowed instances are spread over the lenders in proportion to what each lent
/// out, so a lender's flows sum to its `lent_out` and, while every borrowed instance is backed
/// by idle lendable capacity, a borrower's flows sum to its `borrowed`. When they are not
/// backed (a lowered limit or strategy change that reclaim has not caught up with), the excess
/// comes from no lender and the borrower's flows sum to less.
pub fn flows(accounts: &[Account]) -> Vec<(usize, usize, f64)> {
    let borrowed: f64 = accounts.iter().map(|a| f64::from(a.borrowed())).sum();
    if borrowed == 0.0 {
        return Vec::new();
    }
    let lent = lent_out(accounts);
    let mut out = Vec::new();
    for (l, &from) in lent.iter().enumerate().filter(|(_, &x)| x > 0.0) {
        for (b, a) in accounts
            .iter()
            .enumerate()
            .filter(|(_, a)| a.borrowed() > 0)
        {
            out.push((l, b, from * f64::from(a.borrowed()) / borrowed));
        }
    }
    out
}

/// Computes how far `accounts` are over each constraint.
pub fn pressure(ceiling: &Ceiling, accounts: &[Account]) -> Pressure {
    let mut p = Pressure {
        borrowing: Vec::with_capacity(accounts.len()),
        ..Default::default()
    };
    pressure_into(ceiling, accounts, &mut p);
    p
}

/// [`pressure`] into an existing value, reusing its allocation (the pass recomputes it after
/// every start).
pub fn pressure_into(ceiling: &Ceiling, accounts: &[Account], p: &mut Pressure) {
    p.groups.clear();
    p.group_of.clear();
    if ceiling.groups.iter().any(Option::is_some) {
        p.groups.extend(
            ceiling
                .groups
                .iter()
                .map(|l| l.map_or(i64::MIN / 2, |l| -i64::from(l))),
        );
        for (s, a) in accounts.iter().enumerate() {
            let g = ceiling.capped_group(s);
            p.group_of.push(g.map(|g| g as u8));
            if let Some(g) = g {
                p.groups[g] += i64::from(a.usage);
            }
        }
    }
    let mut total = 0i64;
    let mut borrowed = 0i64;
    let mut lendable = 0i64;
    p.borrowing.clear();
    for a in accounts {
        total += i64::from(a.usage);
        borrowed += i64::from(a.borrowed());
        lendable += i64::from(a.lendable());
        p.borrowing.push(match a.allowance {
            Some(allow) => i64::from(a.borrowed()) - i64::from(allow),
            None => i64::MIN / 2,
        });
    }
    p.environment = total - i64::from(ceiling.environment);
    p.physical = match ceiling.physical_for_queue {
        Some(cap) => total - i64::from(cap),
        None => i64::MIN / 2,
    };
    p.lending = borrowed - lendable;
}

fn worse(before: i64, after: i64) -> bool {
    after > before.max(0)
}

/// Checks that going from `before` to `after` (one admission by the share at index `s`,
/// possibly after victims left) breaks no constraint that held and worsens none that was
/// already broken, for the admission's route.
pub fn allowed(before: &Pressure, after: &Pressure, route: Route) -> Result<(), Violation> {
    if worse(before.environment, after.environment) {
        return Err(Violation::Environment);
    }
    if worse(before.physical, after.physical) {
        return Err(Violation::Physical);
    }
    if worse(before.lending, after.lending) {
        return Err(Violation::Lending);
    }
    if route == Route::Borrow {
        for (i, (b, a)) in before.borrowing.iter().zip(&after.borrowing).enumerate() {
            if worse(*b, *a) {
                return Err(Violation::BorrowLimit(i));
            }
        }
    }
    for (g, (b, a)) in before.groups.iter().zip(&after.groups).enumerate() {
        if worse(*b, *a) {
            return Err(Violation::Group(g));
        }
    }
    Ok(())
}

/// The same question as [`allowed`] for share `s` (with account `a`) taking `c` more
/// instances, in O(1): only the totals and share `s`'s own terms move.
pub fn allowed_add(before: &Pressure, a: &Account, s: usize, c: u32) -> Result<(), Violation> {
    let grown = Account {
        usage: a.usage + c,
        ..*a
    };
    let route = a.route(c);
    let c = i64::from(c);
    let borrowed = i64::from(grown.borrowed()) - i64::from(a.borrowed());
    let lendable = i64::from(grown.lendable()) - i64::from(a.lendable());
    if worse(before.environment, before.environment + c) {
        return Err(Violation::Environment);
    }
    if worse(before.physical, before.physical + c) {
        return Err(Violation::Physical);
    }
    if worse(before.lending, before.lending + borrowed - lendable) {
        return Err(Violation::Lending);
    }
    if route == Route::Borrow && worse(before.borrowing[s], before.borrowing[s] + borrowed) {
        return Err(Violation::BorrowLimit(s));
    }
    if let Some(g) = before.group_of.get(s).copied().flatten().map(usize::from) {
        if worse(before.groups[g], before.groups[g] + c) {
            return Err(Violation::Group(g));
        }
    }
    Ok(())
}

/// Whether a state is admissible in the absolute sense (every constraint holds).
pub fn admissible(p: &Pressure) -> bool {
    p.environment <= 0
        && p.physical <= 0
        && p.lending <= 0
        && p.borrowing.iter().all(|b| *b <= 0)
        && p.groups.iter().all(|g| *g <= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Strategy::*;

    fn acct(entitlement: u32, usage: u32, strategy: Strategy, allowance: Option<u32>) -> Account {
        Account {
            entitlement,
            usage,
            strategy,
            allowance,
        }
    }

    fn env3() -> Ceiling {
        Ceiling::new(3, None)
    }

    fn demo(u1: u32, u2: u32, u3: u32) -> Vec<Account> {
        vec![
            acct(1, u1, LendAndBorrow, Some(2)),
            acct(1, u2, Lend, Some(0)),
            acct(1, u3, Reserve, Some(0)),
        ]
    }

    fn add(accounts: &[Account], s: usize, c: u32) -> (Pressure, Route) {
        let mut a = accounts.to_vec();
        let route = a[s].route(c);
        a[s].usage += c;
        (pressure(&env3(), &a), route)
    }

    #[test]
    fn flows_split_each_borrower_over_the_lenders_and_add_up_to_both_sides() {
        let accounts = [
            acct(4, 1, Lend, None),          // 3 idle lendable
            acct(2, 1, LendAndBorrow, None), // 1 idle lendable
            acct(2, 4, LendAndBorrow, None), // borrows 2
            acct(3, 0, Reserve, None),       // lends nothing
            acct(1, 3, LendAndBorrow, None), // borrows 2
        ];
        let f = flows(&accounts);
        let lent = lent_out(&accounts);
        for (i, a) in accounts.iter().enumerate() {
            let out: f64 = f.iter().filter(|x| x.0 == i).map(|x| x.2).sum();
            let inn: f64 = f.iter().filter(|x| x.1 == i).map(|x| x.2).sum();
            assert!(
                (out - lent[i]).abs() < 1e-9,
                "lender {i}: {out} vs {}",
                lent[i]
            );
            assert!(
                (inn - f64::from(a.borrowed())).abs() < 1e-9,
                "borrower {i}: {inn}"
            );
        }
        assert_eq!(
            f,
            vec![(0, 2, 1.5), (0, 4, 1.5), (1, 2, 0.5), (1, 4, 0.5)],
            "4 borrowed from 4 lendable: everything idle is lent, half to each borrower"
        );
        assert!(f.iter().all(|x| x.0 != 3), "RESERVE never lends");
    }

    #[test]
    fn flows_are_empty_when_nobody_borrows_and_short_when_borrowing_is_not_backed() {
        assert!(flows(&demo(1, 0, 0)).is_empty());
        // A limit lowered under the usage: 2 borrowed, only 1 idle lendable instance.
        let accounts = [acct(1, 0, Lend, None), acct(0, 2, LendAndBorrow, None)];
        assert_eq!(flows(&accounts), vec![(0, 1, 1.0)]);
    }

    #[test]
    fn what_is_borrowed_is_lent_out_in_proportion_to_idle_lendable_entitlement() {
        let accounts = [
            acct(4, 1, Lend, None),          // 3 idle lendable
            acct(2, 1, LendAndBorrow, None), // 1 idle lendable
            acct(2, 4, LendAndBorrow, None), // borrows 2
            acct(3, 0, Reserve, None),       // lends nothing
        ];
        assert_eq!(lent_out(&accounts), vec![1.5, 0.5, 0.0, 0.0]);
        // More borrowed than lendable (a limit was lowered): lenders lend at most their idle.
        let over = [acct(1, 0, Lend, None), acct(1, 4, LendAndBorrow, None)];
        assert_eq!(lent_out(&over), vec![1.0, 0.0]);
    }

    #[test]
    fn own_borrowed_and_lendable_split_usage_at_the_entitlement() {
        let a = acct(4, 6, LendAndBorrow, None);
        assert_eq!((a.own(), a.borrowed(), a.lendable()), (4, 2, 0));
        let b = acct(4, 1, Lend, Some(0));
        assert_eq!((b.own(), b.borrowed(), b.lendable()), (1, 0, 3));
    }

    #[test]
    fn reserve_shares_lend_nothing() {
        assert_eq!(acct(5, 0, Reserve, Some(0)).lendable(), 0);
    }

    #[test]
    fn demo_step_one_borrows_the_lend_share_but_not_the_reserve_share() {
        let before = pressure(&env3(), &demo(1, 0, 0));
        let (after, route) = add(&demo(1, 0, 0), 0, 1);
        assert_eq!(allowed(&before, &after, route), Ok(()));
        let before = pressure(&env3(), &demo(2, 0, 0));
        let (after, route) = add(&demo(2, 0, 0), 0, 1);
        assert_eq!(allowed(&before, &after, route), Err(Violation::Lending));
    }

    #[test]
    fn demo_step_two_owner_return_makes_the_borrow_unbacked() {
        // QS1 holds 2 (1 borrowed from QS2); QS2 takes its own instance back. QS3's idle
        // instance is RESERVEd and nobody else's capacity is unassigned.
        let before = pressure(&env3(), &demo(2, 0, 0));
        let (after, route) = add(&demo(2, 0, 0), 1, 1);
        assert_eq!(allowed(&before, &after, route), Err(Violation::Lending));
        // Once the borrower is gone, the owner fits.
        let before = pressure(&env3(), &demo(1, 0, 0));
        let (after, route) = add(&demo(1, 0, 0), 1, 1);
        assert_eq!(allowed(&before, &after, route), Ok(()));
    }

    #[test]
    fn reserve_owner_can_use_its_idle_instance_next_to_a_borrower() {
        let before = pressure(&env3(), &demo(2, 0, 0));
        let (after, route) = add(&demo(2, 0, 0), 2, 1);
        assert_eq!(allowed(&before, &after, route), Ok(()));
    }

    #[test]
    fn capacity_nobody_is_entitled_to_backs_no_borrower() {
        // Environment 10; L is entitled to 1 and B (LEND_AND_BORROW, 0) borrows it. The 9
        // instances nobody owns are not lendable: B may not borrow a second one.
        let c = Ceiling::new(10, None);
        let before = pressure(
            &c,
            &[acct(1, 0, Lend, Some(0)), acct(0, 1, LendAndBorrow, None)],
        );
        let more = [acct(1, 0, Lend, Some(0)), acct(0, 2, LendAndBorrow, None)];
        assert_eq!(
            allowed(&before, &pressure(&c, &more), Route::Borrow),
            Err(Violation::Lending)
        );
        // And L's owner taking its instance back needs the borrower gone.
        let owner = [acct(1, 1, Lend, Some(0)), acct(0, 1, LendAndBorrow, None)];
        assert_eq!(
            allowed(&before, &pressure(&c, &owner), Route::Own),
            Err(Violation::Lending)
        );
    }

    #[test]
    fn borrow_limit_rounds_down_and_caps_each_share() {
        let c = Ceiling::new(10, None);
        let accounts = [
            acct(2, 3, LendAndBorrow, Some(1)),
            acct(4, 0, Lend, Some(0)),
        ];
        let before = pressure(&c, &accounts);
        let more = [
            acct(2, 4, LendAndBorrow, Some(1)),
            acct(4, 0, Lend, Some(0)),
        ];
        assert_eq!(
            allowed(&before, &pressure(&c, &more), Route::Borrow),
            Err(Violation::BorrowLimit(0))
        );
    }

    #[test]
    fn environment_limit_binds_before_lending() {
        let c = Ceiling::new(2, None);
        let before = pressure(&c, &demo(1, 1, 0));
        assert_eq!(
            allowed(&before, &pressure(&c, &demo(1, 1, 1)), Route::Own),
            Err(Violation::Environment)
        );
    }

    #[test]
    fn physical_capacity_binds_when_lower_than_the_environment() {
        let c = Ceiling::new(3, Some(1));
        let before = pressure(&c, &demo(1, 0, 0));
        assert_eq!(
            allowed(&before, &pressure(&c, &demo(1, 1, 0)), Route::Own),
            Err(Violation::Physical)
        );
    }

    #[test]
    fn an_existing_excess_may_stay_but_not_grow() {
        // QS2's limit was lowered to 0 while it held 2, in an environment of exactly 2 + 2.
        let c = Ceiling::new(4, None);
        let lowered = [acct(2, 0, Reserve, Some(0)), acct(0, 2, Lend, Some(0))];
        let before = pressure(&c, &lowered);
        assert!(!admissible(&before));
        // The RESERVE owner may use its idle capacity.
        let owner = [acct(2, 2, Reserve, Some(0)), acct(0, 2, Lend, Some(0))];
        assert_eq!(allowed(&before, &pressure(&c, &owner), Route::Own), Ok(()));
        // The lowered share may not add to its excess: that would be new borrowing.
        let grow = [acct(2, 0, Reserve, Some(0)), acct(0, 3, Lend, Some(0))];
        assert_eq!(
            allowed(&before, &pressure(&c, &grow), Route::Borrow),
            Err(Violation::Lending)
        );
    }

    #[test]
    fn allowed_add_agrees_with_allowed_on_every_small_state() {
        let strategies = [Reserve, Lend, LendAndBorrow];
        let ceilings = [Ceiling::new(3, None), Ceiling::new(5, Some(2))];
        let mut checked = 0;
        for ceiling in &ceilings {
            for s1 in strategies {
                for s2 in strategies {
                    for i in 0..81u32 {
                        let (l1, l2, u1, u2) = (i % 3, (i / 3) % 3, (i / 9) % 3, (i / 27) % 3);
                        for allowance in [None, Some(0), Some(1)] {
                            for c in 1..=3 {
                                let b = [acct(l1, u1, s1, allowance), acct(l2, u2, s2, Some(0))];
                                let before = pressure(ceiling, &b);
                                let mut a = b;
                                a[0].usage += c;
                                let want = allowed(&before, &pressure(ceiling, &a), b[0].route(c));
                                assert_eq!(allowed_add(&before, &b[0], 0, c), want, "{b:?} + {c}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 4000);
    }

    #[test]
    fn from_an_admissible_state_an_allowed_admission_stays_admissible() {
        let strategies = [Reserve, Lend, LendAndBorrow];
        let c = Ceiling::new(4, None);
        let mut checked = 0;
        for s1 in strategies {
            for s2 in strategies {
                for i in 0..144u32 {
                    let (l1, l2, u1, u2) = (i % 3, (i / 3) % 3, (i / 9) % 4, (i / 36) % 4);
                    for d in [(1, 0), (0, 1), (2, 0)] {
                        let al1 = if s1.borrows() { Some(l1) } else { Some(0) };
                        let al2 = if s2.borrows() { Some(l2) } else { Some(0) };
                        let b = [acct(l1, u1, s1, al1), acct(l2, u2, s2, al2)];
                        let pb = pressure(&c, &b);
                        if !admissible(&pb) {
                            continue;
                        }
                        let (s, n) = if d.0 > 0 { (0, d.0) } else { (1, d.1) };
                        let mut a = b;
                        a[s].usage += n;
                        let pa = pressure(&c, &a);
                        if allowed(&pb, &pa, b[s].route(n)).is_ok() {
                            assert!(admissible(&pa), "{b:?} + {n} on {s}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 500, "only {checked} states checked");
    }
}
