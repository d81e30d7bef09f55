//! Lend/borrow arithmetic for one capacity unit of one queue, and nothing else.
//!
//! For share `s` with usage `U` and entitlement `L`: `own = min(U, L)`,
//! `borrowed = max(0, U - L)`, `idle = L - own`. A state is *admissible* when
//!
//! * `Σ U ≤ environment limit` and the physical instances are not overcommitted,
//! * `Σ borrowed ≤ Σ idle` over the shares that lend (LEND, LEND_AND_BORROW), so borrowing
//!   never eats into RESERVE capacity or capacity no share is entitled to,
//! * each share's `borrowed` is within its borrow allowance (0 unless LEND_AND_BORROW).
//!
//! Reclaim is lazy (DESIGN.md §2 rule 4), so a lowered limit can leave a state that is not
//! admissible. Admission therefore asks a *relative* question: a change is allowed when it
//! breaks no constraint that held before and worsens none that was already broken. That is the
//! same as absolute admissibility whenever the state was admissible, and it means that only a
//! job that actually needs the excess back (an owner) ever triggers its reclaim.

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
}

/// The limits of one unit that are not per share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ceiling {
    /// The service environment's limit for the unit (0 when it has none).
    pub environment: u32,
    /// Physical instances not held by *other* queues, when the executor reports a physical
    /// capacity for the unit; `None` = no physical limit beyond the environment.
    pub physical_for_queue: Option<u32>,
}

/// How far a state is over each constraint; a value ≤ 0 means the constraint holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pressure {
    /// `Σ U - environment limit`.
    pub environment: i64,
    /// `Σ U - physical instances available to this queue`.
    pub physical: i64,
    /// `Σ borrowed - Σ lendable`.
    pub lending: i64,
    /// Per share: `borrowed - allowance` (≤ 0 when unlimited).
    pub borrowing: Vec<i64>,
}

/// Which constraint a change would break; the first one found, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The service environment's limit for the unit.
    Environment,
    /// The physical instances of the unit.
    Physical,
    /// Borrowers would need more than the lenders' idle capacity.
    Lending,
    /// The share at this index would borrow beyond its borrow limit.
    BorrowLimit(usize),
}

/// Computes how far `accounts` are over each constraint.
pub fn pressure(ceiling: Ceiling, accounts: &[Account]) -> Pressure {
    let mut total = 0i64;
    let mut borrowed = 0i64;
    let mut lendable = 0i64;
    let mut borrowing = Vec::with_capacity(accounts.len());
    for a in accounts {
        total += i64::from(a.usage);
        borrowed += i64::from(a.borrowed());
        lendable += i64::from(a.lendable());
        borrowing.push(match a.allowance {
            Some(allow) => i64::from(a.borrowed()) - i64::from(allow),
            None => i64::MIN / 2,
        });
    }
    Pressure {
        environment: total - i64::from(ceiling.environment),
        physical: match ceiling.physical_for_queue {
            Some(p) => total - i64::from(p),
            None => i64::MIN / 2,
        },
        lending: borrowed - lendable,
        borrowing,
    }
}

fn worse(before: i64, after: i64) -> bool {
    after > before.max(0)
}

/// Checks that going from `before` to `after` breaks no constraint that held and worsens none
/// that was already broken.
pub fn allowed(before: &Pressure, after: &Pressure) -> Result<(), Violation> {
    if worse(before.environment, after.environment) {
        return Err(Violation::Environment);
    }
    if worse(before.physical, after.physical) {
        return Err(Violation::Physical);
    }
    if worse(before.lending, after.lending) {
        return Err(Violation::Lending);
    }
    for (i, (b, a)) in before.borrowing.iter().zip(&after.borrowing).enumerate() {
        if worse(*b, *a) {
            return Err(Violation::BorrowLimit(i));
        }
    }
    Ok(())
}

/// The same question as [`allowed`] for the commonest change, share `s` (with account `a`)
/// taking `c` more instances, in O(1): only the totals and share `s`'s own term move.
pub fn allowed_add(before: &Pressure, a: &Account, s: usize, c: u32) -> Result<(), Violation> {
    let grown = Account {
        usage: a.usage + c,
        ..*a
    };
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
    if worse(before.borrowing[s], before.borrowing[s] + borrowed) {
        return Err(Violation::BorrowLimit(s));
    }
    Ok(())
}

/// Whether a state is admissible in the absolute sense (every constraint holds).
pub fn admissible(p: &Pressure) -> bool {
    p.environment <= 0 && p.physical <= 0 && p.lending <= 0 && p.borrowing.iter().all(|b| *b <= 0)
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

    const ENV3: Ceiling = Ceiling {
        environment: 3,
        physical_for_queue: None,
    };

    fn demo(u1: u32, u2: u32, u3: u32) -> Vec<Account> {
        vec![
            acct(1, u1, LendAndBorrow, Some(2)),
            acct(1, u2, Lend, Some(0)),
            acct(1, u3, Reserve, Some(0)),
        ]
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
        assert!(admissible(&pressure(ENV3, &demo(2, 0, 0))));
        assert!(!admissible(&pressure(ENV3, &demo(3, 0, 0))));
    }

    #[test]
    fn demo_step_two_owner_return_makes_the_borrow_unbacked() {
        // QS1 holds 2 (1 borrowed from QS2); QS2 takes its own instance back.
        let before = pressure(ENV3, &demo(2, 0, 0));
        let after = pressure(ENV3, &demo(2, 1, 0));
        assert_eq!(allowed(&before, &after), Err(Violation::Lending));
        // Preempting the borrower restores admissibility.
        assert_eq!(allowed(&before, &pressure(ENV3, &demo(1, 1, 0))), Ok(()));
    }

    #[test]
    fn reserve_owner_can_use_its_idle_instance_next_to_a_borrower() {
        let before = pressure(ENV3, &demo(2, 0, 0));
        assert_eq!(allowed(&before, &pressure(ENV3, &demo(2, 0, 1))), Ok(()));
    }

    #[test]
    fn borrow_limit_rounds_down_and_caps_each_share() {
        let accounts = [
            acct(2, 3, LendAndBorrow, Some(1)),
            acct(4, 0, Lend, Some(0)),
        ];
        let before = pressure(
            Ceiling {
                environment: 10,
                physical_for_queue: None,
            },
            &accounts,
        );
        let more = [
            acct(2, 4, LendAndBorrow, Some(1)),
            acct(4, 0, Lend, Some(0)),
        ];
        let after = pressure(
            Ceiling {
                environment: 10,
                physical_for_queue: None,
            },
            &more,
        );
        assert_eq!(allowed(&before, &after), Err(Violation::BorrowLimit(0)));
    }

    #[test]
    fn environment_limit_binds_before_lending() {
        let c = Ceiling {
            environment: 2,
            physical_for_queue: None,
        };
        let before = pressure(c, &demo(1, 1, 0));
        assert_eq!(
            allowed(&before, &pressure(c, &demo(1, 1, 1))),
            Err(Violation::Environment)
        );
    }

    #[test]
    fn physical_capacity_binds_when_lower_than_the_environment() {
        let c = Ceiling {
            environment: 3,
            physical_for_queue: Some(1),
        };
        let before = pressure(c, &demo(1, 0, 0));
        assert_eq!(
            allowed(&before, &pressure(c, &demo(1, 1, 0))),
            Err(Violation::Physical)
        );
    }

    #[test]
    fn an_existing_excess_may_stay_but_not_grow() {
        // QS2's limit was lowered to 0 while it held 2: 2 borrowed, nothing lends them.
        let c = Ceiling {
            environment: 4,
            physical_for_queue: None,
        };
        let lowered = [acct(2, 0, Reserve, Some(0)), acct(0, 2, Lend, Some(0))];
        let before = pressure(c, &lowered);
        assert!(!admissible(&before));
        // The RESERVE owner may use its idle capacity: the excess does not grow.
        let owner = [acct(2, 2, Reserve, Some(0)), acct(0, 2, Lend, Some(0))];
        assert_eq!(allowed(&before, &pressure(c, &owner)), Ok(()));
        // The lowered share may not add to its excess.
        let grow = [acct(2, 0, Reserve, Some(0)), acct(0, 3, Lend, Some(0))];
        assert_eq!(
            allowed(&before, &pressure(c, &grow)),
            Err(Violation::Lending)
        );
    }

    #[test]
    fn allowed_add_agrees_with_allowed_on_every_small_state() {
        let strategies = [Reserve, Lend, LendAndBorrow];
        let ceilings = [
            Ceiling {
                environment: 3,
                physical_for_queue: None,
            },
            Ceiling {
                environment: 5,
                physical_for_queue: Some(2),
            },
        ];
        let mut checked = 0;
        for ceiling in ceilings {
            for s1 in strategies {
                for s2 in strategies {
                    for (l1, l2, u1, u2) in
                        (0..27).map(|i| (i % 3, (i / 3) % 3, (i / 9) % 3, i / 9 % 3 + i % 2))
                    {
                        for allowance in [None, Some(0), Some(1)] {
                            for c in 1..=3 {
                                let b = [acct(l1, u1, s1, allowance), acct(l2, u2, s2, Some(0))];
                                let before = pressure(ceiling, &b);
                                let mut a = b;
                                a[0].usage += c;
                                let want = allowed(&before, &pressure(ceiling, &a));
                                assert_eq!(allowed_add(&before, &b[0], 0, c), want, "{b:?} + {c}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn exhaustive_small_states_relative_check_matches_absolute_when_admissible() {
        // Over every state of two shares with entitlements 0..=2 and usages 0..=3, when the
        // state before is admissible, `allowed` must equal absolute admissibility of the after
        // state.
        let strategies = [Reserve, Lend, LendAndBorrow];
        let c = Ceiling {
            environment: 4,
            physical_for_queue: None,
        };
        let mut checked = 0;
        for s1 in strategies {
            for s2 in strategies {
                for l1 in 0..=2u32 {
                    for l2 in 0..=2u32 {
                        for u1 in 0..=3u32 {
                            for u2 in 0..=3u32 {
                                for d in [(1, 0), (0, 1)] {
                                    let al1 = if s1.borrows() { Some(l1) } else { Some(0) };
                                    let al2 = if s2.borrows() { Some(l2) } else { Some(0) };
                                    let b = [acct(l1, u1, s1, al1), acct(l2, u2, s2, al2)];
                                    let a =
                                        [acct(l1, u1 + d.0, s1, al1), acct(l2, u2 + d.1, s2, al2)];
                                    let pb = pressure(c, &b);
                                    if !admissible(&pb) {
                                        continue;
                                    }
                                    let pa = pressure(c, &a);
                                    assert_eq!(allowed(&pb, &pa).is_ok(), admissible(&pa));
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 500, "only {checked} states checked");
    }
}
