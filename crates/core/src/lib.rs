//! Quartermaster's scheduling core: pure, deterministic and shared by the server, the
//! simulator and the tests.
//!
//! A shell feeds [`Input`]s with the current time and carries out the [`Effect`]s that come
//! back, after persisting them:
//!
//! ```
//! use qm_core::*;
//! let mut s = Scheduler::new(Policy::default());
//! s.step(0, Input::PutQueue(QueueSpec { name: "q".into(), environment: [("ml.g5.xlarge".into(), 1)].into(), ..Default::default() })).unwrap();
//! let mut share = ShareSpec::new("team-a");
//! share.limits.insert("ml.g5.xlarge".into(), 1);
//! s.step(0, Input::PutShare { queue: "q".into(), share }).unwrap();
//! let fx = s.step(0, Input::Submit(JobSpec::new(JobId(1), "q", "team-a", "ml.g5.xlarge"))).unwrap();
//! assert!(matches!(fx[0], Effect::Start { job: JobId(1), .. }));
//! s.check_invariants().unwrap();
//! ```
//!
//! Rules (DESIGN.md §2): [`ledger`] holds the lend/borrow arithmetic; `pass` the scheduling
//! pass and admission; `victims` the exact victim search in the documented order
//! ([`VictimRank`]); `fair` fair sharing of idle capacity, fair reclaim and groups of shares
//! ([`Scheduler::fairness`]); `explain` the pending reasons
//! ([`PendingReason`]); [`idle`] the instances left idle while jobs that fit them wait, and
//! why; `invariants` the consistency check; `view` the accounts a pass decides against;
//! [`logged`] a logged batch's decisions, which `replay` imposes. Nothing here reads a clock, does
//! IO, spawns a thread, draws a random number or lets hash-map order reach a decision.

mod easy;
pub mod error;
mod explain;
mod fair;
pub mod glob;
pub mod idle;
pub mod image;
mod invariants;
pub mod ledger;
pub mod logged;
pub mod model;
mod pass;
mod query;
pub mod reason;
mod replay;
mod scheduler;
pub mod time;
mod victims;
mod view;

pub use error::CoreError;
pub use fair::{Fairness, GroupStanding, ShareFairness};
pub use idle::{IdleCause, IdleWhileWaiting};
pub use image::Image;
pub use logged::Logged;
pub use model::*;
pub use query::{Borrowing, Flow, PoolUsage, ShareUsage};
pub use reason::{Misconfiguration, PendingReason};
pub use scheduler::{
    Attempt, Input, Job, Policy, Scheduler, MAX_LIMITS, MAX_PRIORITY, MAX_SHARES_PER_QUEUE,
};
pub use victims::VictimRank;
