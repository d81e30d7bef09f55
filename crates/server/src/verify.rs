//! `borrow: after-verified-resume` (issue 19): a class whose jobs may borrow only once one of
//! them was seen resuming from its checkpoint after a preemption (a reclaim or a drill), within
//! the class's `verify-days`. The server keeps, per queue and class, when that was last seen
//! ([`crate::state::QueueRec::verified_resume`]) and tells the core which jobs may borrow
//! ([`qm_core::JobSpec::borrows`]): at submission, and for the waiting jobs of a class when a
//! resume verifies it, when the verification runs out, or when the queue's classes change.
//! The core owns the rule of what such a job may then use (its share's own quota).

use qm_api::class::{defined, BorrowRule};
use qm_api::qm::ResumeOutcome;
use qm_core::{Input, JobId};

use crate::state::{AttemptRec, State};

impl State {
    /// Whether jobs of `class` (with `rule`) in `queue` may borrow now.
    pub(crate) fn class_may_borrow(&self, queue: &str, class: &str, rule: BorrowRule) -> bool {
        let Some(window) = rule.verify_ms() else {
            return true;
        };
        self.queues
            .get(queue)
            .and_then(|q| q.verified_resume.get(class))
            .is_some_and(|&at| self.now - at < window)
    }

    /// The live attempt of job `core` reported its first step: when it follows a preemption
    /// and went on from the preempted attempt's checkpoint, its class is verified.
    pub(crate) fn note_first_step(&mut self, core: JobId) {
        let Some(rec) = self.jobs.get(&core) else {
            return;
        };
        let (Some(live), Some(class)) = (rec.live.as_ref(), rec.class.clone()) else {
            return;
        };
        let previous: Option<&AttemptRec> = rec
            .preempted
            .iter()
            .chain(&rec.attempts)
            .find(|a| a.preempted && a.number + 1 == live.number);
        let Some(previous) = previous else {
            return;
        };
        if crate::resume::classify(&previous.into(), &(&**live).into()).outcome
            != ResumeOutcome::Resumed
        {
            return;
        }
        let queue = rec.queue.clone();
        let Some(q) = self.queues.get_mut(&*queue) else {
            return;
        };
        let rule = defined(&q.tags).get(&class).map(|d| d.borrow);
        if !matches!(rule, Some(BorrowRule::AfterVerifiedResume { .. })) {
            return;
        }
        q.verified_resume.insert(class, self.now);
        self.sync_borrows(&queue);
    }

    /// Drops verifications older than their class's window (or of classes that no longer
    /// need one), and tells the core which waiting jobs may borrow now.
    pub(crate) fn expire_verified(&mut self) {
        let now = self.now;
        let mut changed = Vec::new();
        for (name, q) in &mut self.queues {
            let classes = defined(&q.tags);
            let before = q.verified_resume.len();
            q.verified_resume.retain(|class, at| {
                let window = classes.get(class).and_then(|d| d.borrow.verify_ms());
                window.is_some_and(|w| now - *at < w)
            });
            if q.verified_resume.len() != before {
                changed.push(name.clone());
            }
        }
        for queue in changed {
            self.sync_borrows(&queue);
        }
    }

    /// When the next verification runs out, if any.
    pub fn next_verification_expiry(&self) -> Option<i64> {
        self.queues
            .values()
            // Checked at every tick of the driver: queues without one parse no tags.
            .filter(|q| !q.verified_resume.is_empty())
            .flat_map(|q| {
                let classes = defined(&q.tags);
                q.verified_resume.iter().map(move |(class, at)| {
                    let window = classes.get(class).and_then(|d| d.borrow.verify_ms());
                    window.map_or(*at, |w| at + w)
                })
            })
            .min()
    }

    /// Makes every unfinished job of `queue` that has a class borrow exactly when its class
    /// may (after a verification, its expiry, or a change of the queue's classes): a waiting
    /// job from its next decision, a running one from its next attempt (after a requeue). A
    /// class the queue no longer defines restricts nothing. O(jobs held in the state), on
    /// these rare events only.
    pub(crate) fn sync_borrows(&mut self, queue: &str) {
        let Some(q) = self.queues.get(queue) else {
            return;
        };
        let classes = defined(&q.tags);
        let mut inputs = Vec::new();
        for (&core, rec) in &self.jobs {
            if *rec.queue != *queue || rec.is_terminated {
                continue;
            }
            let Some(class) = rec.class.as_ref() else {
                continue;
            };
            let may = classes
                .get(class)
                .is_none_or(|def| self.class_may_borrow(queue, class, def.borrow));
            let spec = self.core.job(core).map(|j| j.spec.borrows);
            if spec.is_some_and(|b| b != may) {
                inputs.push(Input::SetBorrows {
                    job: core,
                    borrows: may,
                });
            }
        }
        for input in inputs {
            // The job is known and not final: it is in the queue's runnable set.
            let _ = self.core_apply(input);
        }
    }
}
