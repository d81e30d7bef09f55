//! A test world: one queue, named shares and jobs, a clock, and a driver that runs the core to
//! its fixed point the way every shell does, checking the invariants after every step.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use qm_core::*;

/// The unit most tests use.
pub const G5: &str = "ml.g5.xlarge";
/// A second unit.
pub const P4: &str = "ml.p4d.24xlarge";
/// The queue every world has.
pub const Q: &str = "q";

pub struct World {
    pub s: Scheduler,
    pub now: Millis,
    ids: BTreeMap<String, JobId>,
    names: BTreeMap<JobId, String>,
    shares: BTreeMap<String, ShareSpec>,
    preempted: Vec<String>,
    /// When false, stopped attempts keep their capacity until `release_stopped`.
    pub exit_stops_at_once: bool,
    stopped: Vec<AttemptId>,
    pub effects: Vec<Effect>,
}

impl World {
    /// A world with one queue whose environment has these limits.
    pub fn new(environment: &[(&str, u32)]) -> Self {
        Self::with_policy(environment, Policy::default())
    }

    pub fn with_policy(environment: &[(&str, u32)], policy: Policy) -> Self {
        let mut w = World {
            s: Scheduler::new(policy),
            now: 0,
            ids: BTreeMap::new(),
            names: BTreeMap::new(),
            shares: BTreeMap::new(),
            preempted: Vec::new(),
            exit_stops_at_once: true,
            stopped: Vec::new(),
            effects: Vec::new(),
        };
        w.input(Input::PutQueue(QueueSpec {
            name: Q.into(),
            environment: environment
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            ..Default::default()
        }))
        .unwrap();
        w
    }

    /// Changes the queue's configuration (its rules for idle capacity, its groups): `f` adjusts
    /// what the core has now.
    pub fn update_queue(&mut self, f: impl FnOnce(&mut QueueSpec)) {
        let mut spec = self.s.queue_spec(Q).expect("the world's queue");
        f(&mut spec);
        self.input(Input::PutQueue(spec)).unwrap();
    }

    /// Adds a share; `f` adjusts the defaults (LEND, unlimited, no in-share preemption).
    pub fn share(mut self, name: &str, strategy: Strategy, limits: &[(&str, u32)]) -> Self {
        self.share_with(name, strategy, limits, |_| {});
        self
    }

    pub fn share_with(
        &mut self,
        name: &str,
        strategy: Strategy,
        limits: &[(&str, u32)],
        f: impl FnOnce(&mut ShareSpec),
    ) {
        let mut spec = ShareSpec::new(name);
        spec.strategy = strategy;
        spec.limits = limits.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        f(&mut spec);
        self.put_share(spec);
    }

    pub fn update_share(&mut self, name: &str, f: impl FnOnce(&mut ShareSpec)) {
        let mut spec = self.shares[name].clone();
        f(&mut spec);
        self.put_share(spec);
    }

    fn put_share(&mut self, spec: ShareSpec) {
        self.shares.insert(spec.name.clone(), spec.clone());
        self.input(Input::PutShare {
            queue: Q.into(),
            share: spec,
        })
        .unwrap();
    }

    /// Submits a job of `count` G5 instances.
    pub fn submit(&mut self, name: &str, share: &str, priority: u32, count: u32) {
        self.submit_with(name, share, |j| {
            j.priority = priority;
            j.count = count;
        })
    }

    pub fn submit_with(&mut self, name: &str, share: &str, f: impl FnOnce(&mut JobSpec)) {
        self.try_submit_with(name, share, f).unwrap();
    }

    pub fn try_submit(&mut self, name: &str, share: &str) -> Result<(), CoreError> {
        self.try_submit_with(name, share, |_| {})
    }

    /// Names the job before submitting it (its effects are reported by name), and forgets the
    /// name again when the core refuses the submission.
    fn try_submit_with(
        &mut self,
        name: &str,
        share: &str,
        f: impl FnOnce(&mut JobSpec),
    ) -> Result<(), CoreError> {
        let id = JobId(self.ids.len() as u64 + 1);
        let mut spec = JobSpec::new(id, Q, share, G5);
        f(&mut spec);
        self.ids.insert(name.into(), id);
        self.names.insert(id, name.into());
        let result = self.input(Input::Submit(spec));
        if result.is_err() {
            self.ids.remove(name);
            self.names.remove(&id);
        }
        result
    }

    pub fn id(&self, name: &str) -> JobId {
        self.ids[name]
    }

    pub fn name(&self, id: JobId) -> &str {
        &self.names[&id]
    }

    pub fn job(&self, name: &str) -> &Job {
        self.s.job(self.id(name)).unwrap()
    }

    fn attempt_of(&self, name: &str) -> AttemptId {
        self.job(name)
            .attempt
            .unwrap_or_else(|| panic!("{name} is not running"))
    }

    pub fn finish(&mut self, name: &str) {
        let a = self.attempt_of(name);
        self.input(Input::AttemptExited {
            attempt: a,
            exit: Exit::Succeeded,
        })
        .unwrap();
    }

    pub fn fail(&mut self, name: &str, reason: &str) {
        let a = self.attempt_of(name);
        let exit = Exit::Failed {
            reason: reason.into(),
            retryable: true,
        };
        self.input(Input::AttemptExited { attempt: a, exit })
            .unwrap();
    }

    pub fn checkpoint(&mut self, name: &str) {
        let id = self.id(name);
        self.input(Input::Checkpoint { job: id }).unwrap();
    }

    pub fn priority(&mut self, name: &str, priority: u32) {
        let id = self.id(name);
        self.input(Input::UpdatePriority { job: id, priority })
            .unwrap();
    }

    pub fn terminate(&mut self, name: &str) {
        let id = self.id(name);
        self.input(Input::Terminate {
            job: id,
            reason: "terminated by test".into(),
        })
        .unwrap();
    }

    pub fn advance(&mut self, secs: u64) {
        self.now += secs * 1000;
    }

    /// Moves the clock and runs the passes the core asked to be woken for by then.
    pub fn wait(&mut self, secs: u64) {
        self.advance(secs);
        self.settle();
    }

    /// Applies an input and runs to the fixed point.
    pub fn input(&mut self, input: Input) -> Result<(), CoreError> {
        let fx = self.s.apply(self.now, input)?;
        self.absorb(fx);
        self.settle();
        Ok(())
    }

    fn absorb(&mut self, fx: Vec<Effect>) {
        for e in &fx {
            if let Effect::Stop {
                job,
                attempt,
                cause,
            } = e
            {
                if cause.is_preemption() {
                    self.preempted
                        .push(self.names.get(job).cloned().unwrap_or_default());
                }
                self.stopped.push(*attempt);
            }
        }
        self.effects.extend(fx);
    }

    /// Runs passes until nothing changes, reporting stopped attempts as exited at once when
    /// `exit_stops_at_once`.
    pub fn settle(&mut self) {
        for _ in 0..10_000 {
            self.s.check_invariants().unwrap();
            let fx = self.s.schedule(self.now);
            let quiet = fx.is_empty();
            self.absorb(fx);
            if self.exit_stops_at_once && !self.stopped.is_empty() {
                self.release_stopped();
                continue;
            }
            if quiet {
                self.s.check_invariants().unwrap();
                return;
            }
        }
        let tail: Vec<_> = self.effects.iter().rev().take(12).collect();
        panic!("no fixed point after 10000 rounds; last effects {tail:#?}");
    }

    /// Reports every stopped attempt as exited.
    pub fn release_stopped(&mut self) {
        for a in std::mem::take(&mut self.stopped) {
            let exit = Exit::Failed {
                reason: "stopped".into(),
                retryable: false,
            };
            let fx = self
                .s
                .apply(self.now, Input::AttemptExited { attempt: a, exit })
                .unwrap();
            self.absorb(fx);
        }
        if !self.exit_stops_at_once {
            self.settle();
        }
    }

    fn with_status(&self, status: JobStatus) -> Vec<String> {
        let mut v: Vec<String> = self
            .s
            .job_ids()
            .into_iter()
            .filter(|id| self.s.job(*id).unwrap().status == status)
            .filter_map(|id| self.names.get(&id).cloned())
            .collect();
        v.sort();
        v
    }

    pub fn running(&self) -> Vec<String> {
        self.with_status(JobStatus::Dispatched)
    }

    pub fn runnable(&self) -> Vec<String> {
        self.with_status(JobStatus::Runnable)
    }

    pub fn succeeded(&self) -> Vec<String> {
        self.with_status(JobStatus::Succeeded)
    }

    pub fn failed(&self) -> Vec<String> {
        self.with_status(JobStatus::Failed)
    }

    /// Jobs preempted since the last call, sorted.
    pub fn preempted(&mut self) -> Vec<String> {
        let mut v: Vec<String> = std::mem::take(&mut self.preempted);
        v.sort();
        v.dedup();
        v
    }

    pub fn reason(&self, name: &str) -> String {
        self.s
            .explain(self.id(name))
            .map(|r| r.code().to_string())
            .unwrap_or_else(|| "-".into())
    }

    pub fn reason_text(&self, name: &str) -> String {
        self.s
            .explain(self.id(name))
            .map(|r| r.to_string())
            .unwrap_or_default()
    }

    pub fn usage(&self, share: &str) -> u32 {
        self.s
            .usage(Q)
            .unwrap()
            .iter()
            .filter(|u| u.share == share && u.instance_type == G5)
            .map(|u| u.usage)
            .sum()
    }
}

/// `set(&["a", "b"])` for comparing with `running()` and friends.
pub fn set(names: &[&str]) -> Vec<String> {
    let s: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    s.into_iter().collect()
}
