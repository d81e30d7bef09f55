//! The accounts of one lane group as the scheduling pass sees them ([`View`]): what each
//! share's attempts hold, with the claims of reclaiming jobs and what waiting owners reserve.

use crate::ledger::{self, Account, Ceiling, Pressure, Route};
use crate::model::Millis;

/// The accounts of one lane group (a queue's unit), built once per pass and kept current as
/// the pass starts jobs and preempts, so that each decision costs O(1) unless it looks for
/// victims. `real` counts what stopping attempts still hold; `projected` leaves it out (it
/// will come back). Both also count, as usage of their share, what its jobs that wait for
/// their victims to exit have claimed, up to the share's idle entitlement: capacity reclaimed
/// for an owner is not lendable to anyone else.
#[derive(Clone, Debug, Default)]
pub(crate) struct View {
    pub(crate) ceiling: Ceiling,
    pub(crate) held: Vec<Account>,
    pub(crate) held_projected: Vec<Account>,
    /// Per share: instances its reclaiming jobs wait for (claims), and instances its waiting
    /// jobs that fit its idle entitlement need (`pending_own_demand`), or all its idle
    /// entitlement while its head is patient (reservations, which only borrowers see: see
    /// `borrow_gate`).
    pub(crate) demand: Vec<u32>,
    pub(crate) reserve: Vec<u32>,
    pub(crate) real: Vec<Account>,
    pub(crate) projected: Vec<Account>,
    pub(crate) real_pressure: Pressure,
    pub(crate) projected_pressure: Pressure,
    /// Instances held by stopping attempts.
    pub(crate) releasing: u32,
    /// The time decisions are made at (thrash protection depends on it).
    pub(crate) now: Millis,
}

impl View {
    /// Derives `real`, `projected` and the pressures from `held`, `held_projected` and the
    /// claims, reusing the allocations.
    pub(crate) fn finish(&mut self) {
        self.real.clear();
        self.projected.clear();
        for s in 0..self.held.len() {
            self.real
                .push(Self::with_claim(self.held[s], self.demand[s]));
            self.projected
                .push(Self::with_claim(self.held_projected[s], self.demand[s]));
        }
        ledger::pressure_into(&self.ceiling, &self.real, &mut self.real_pressure);
        ledger::pressure_into(&self.ceiling, &self.projected, &mut self.projected_pressure);
    }

    /// A reclaiming job's claim counts as usage: nobody else may take what it preempted for.
    fn with_claim(held: Account, demand: u32) -> Account {
        let claim = demand.min(held.entitlement.saturating_sub(held.usage));
        Account {
            usage: held.usage + claim,
            ..held
        }
    }

    fn refresh(&mut self, s: usize) {
        self.real[s] = Self::with_claim(self.held[s], self.demand[s]);
        self.projected[s] = Self::with_claim(self.held_projected[s], self.demand[s]);
        ledger::pressure_into(&self.ceiling, &self.real, &mut self.real_pressure);
        ledger::pressure_into(&self.ceiling, &self.projected, &mut self.projected_pressure);
    }

    /// What the attempts of share `s` hold, without claims.
    pub(crate) fn held(&self, s: usize) -> Account {
        self.held[s]
    }

    /// Every share's account, as attempts hold it.
    pub(crate) fn accounts(&self) -> &[Account] {
        &self.held
    }

    /// Every share's account once the stopping attempts have exited, as attempts hold it
    /// (without the claims of reclaiming jobs).
    pub(crate) fn held_projected(&self) -> &[Account] {
        &self.held_projected
    }

    /// Share `s` started a job of `c` instances.
    pub(crate) fn add(&mut self, s: usize, c: u32) {
        self.held[s].usage += c;
        self.held_projected[s].usage += c;
        self.refresh(s);
    }

    /// Share `s`'s reclaiming jobs wait for `c` more instances (`c` < 0: fewer).
    pub(crate) fn claim(&mut self, s: usize, c: i64) {
        self.demand[s] = (i64::from(self.demand[s]) + c) as u32;
        self.refresh(s);
    }

    /// Victims of share `s` holding `c` instances are now stopping.
    pub(crate) fn stopping(&mut self, s: usize, c: u32) {
        self.held_projected[s].usage -= c;
        self.releasing += c;
        self.refresh(s);
    }

    /// The view as the jobs of share `s` see it: claims protect released capacity from other
    /// shares; within the share the usual order decides who uses it.
    pub(crate) fn for_share(&self, s: usize) -> std::borrow::Cow<'_, View> {
        if self.demand[s] == 0 {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut own = self.clone();
        own.demand[s] = 0;
        own.refresh(s);
        std::borrow::Cow::Owned(own)
    }

    /// Whether share `s` may take `c` more instances by borrowing as far as other shares'
    /// waiting jobs are concerned (`accounts` is the state the start would apply to). The
    /// environment (and physical) room left must still cover what their waiting owners need,
    /// and neither that room nor the lendable capacity may go to this job when another
    /// share's job preempted for it in order to borrow: it waits for its victims to exit.
    /// Owners ignore both: an owner may always take its own capacity (the other then waits).
    pub(crate) fn borrow_gate(&self, accounts: &[Account], s: usize, c: u32) -> bool {
        if accounts[s].route(c) == Route::Own {
            return true;
        }
        let (mut reserved, mut claimed_borrowing) = (0u32, 0u32);
        for x in (0..accounts.len()).filter(|&x| x != s) {
            reserved += self.reserve[x];
            claimed_borrowing += self.borrow_claim(x);
        }
        if reserved == 0 && claimed_borrowing == 0 {
            return true;
        }
        let total =
            accounts.iter().map(|a| a.usage).sum::<u32>() + c + reserved + claimed_borrowing;
        if total > self.ceiling.environment
            || self.ceiling.physical_for_queue.is_some_and(|p| total > p)
        {
            return false;
        }
        // What is lendable once every other share keeps the idle instances its waiting owners
        // need, against what is borrowed with this job and what other reclaimers will borrow.
        let grown = Account {
            usage: accounts[s].usage + c,
            ..accounts[s]
        };
        let (mut borrowed, mut lendable) = (claimed_borrowing, 0u32);
        for (x, a) in accounts.iter().enumerate() {
            let a = if x == s { &grown } else { a };
            borrowed += a.borrowed();
            lendable += if x == s {
                a.lendable()
            } else {
                a.lendable().saturating_sub(self.reserve[x])
            };
        }
        borrowed <= lendable
    }

    /// Instances share `x`'s reclaiming jobs wait for beyond its idle entitlement: capacity
    /// they preempted for in order to borrow. The idle entitlement is the one they will find
    /// once the victims exit: what the share's own victims (in-share preemption) release
    /// comes back to it, and is not borrowed.
    fn borrow_claim(&self, x: usize) -> u32 {
        self.demand[x] - (self.projected[x].usage - self.held_projected[x].usage)
    }

    /// Whether share `s`'s owners compete with other shares' for the unit: the shares' limits
    /// add up to more than the environment, a physical limit is shared with other queues, or
    /// the share's group caps the unit below what its members are entitled to together.
    pub(crate) fn contested_for(&self, s: usize) -> bool {
        let entitled: u64 = self.held.iter().map(|a| u64::from(a.entitlement)).sum();
        if entitled > u64::from(self.ceiling.environment)
            || self.ceiling.physical_for_queue.is_some()
        {
            return true;
        }
        self.ceiling.capped_group(s).is_some_and(|g| {
            let limit = self.ceiling.groups[g].unwrap_or(u32::MAX);
            let members: u64 = (0..self.held.len())
                .filter(|&x| self.ceiling.capped_group(x) == Some(g))
                .map(|x| u64::from(self.held[x].entitlement))
                .sum();
            members > u64::from(limit)
        })
    }

    /// What of share `s`'s idle entitlement its waiting owners could use now, as far as its
    /// group's ceiling lets them: an owner the ceiling blocks keeps nothing from borrowers.
    pub(crate) fn group_headroom(&self, s: usize, reserve: u32) -> u32 {
        let Some(g) = self.ceiling.capped_group(s) else {
            return reserve;
        };
        let limit = self.ceiling.groups[g].unwrap_or(u32::MAX);
        let held: u32 = (0..self.held.len())
            .filter(|&x| self.ceiling.capped_group(x) == Some(g))
            .map(|x| self.held[x].usage)
            .sum();
        reserve.min(limit.saturating_sub(held))
    }

    /// Whether a job of share `s` needing `c` instances could start if every other share's
    /// jobs were gone: only then can a reservation covering other shares' starts help it. A
    /// job that waits for its own share's jobs alone (its share full and unable to borrow that
    /// much) gains nothing from taking other shares' jobs back.
    pub(crate) fn others_could_free(&self, s: usize, c: u32) -> bool {
        let mut alone = self.projected.clone();
        for (x, a) in alone.iter_mut().enumerate() {
            if x != s {
                a.usage = 0;
            }
        }
        ledger::allowed_add(&ledger::pressure(&self.ceiling, &alone), &alone[s], s, c).is_ok()
    }

    /// Whether share `s` has reclaiming jobs.
    pub(crate) fn claims(&self, s: usize) -> bool {
        self.demand[s] > 0
    }
}
