//! Plays a [`Scenario`] through the real scheduling core and compares every `expect` with the
//! state it finds.
//!
//! The runner is a tiny shell around [`qm_core::Scheduler`]: one queue ([`QUEUE`]), a clock
//! that starts at 0 ms and moves only with `advance`, job names numbered [`JobId`]`(1)`, `(2)`...
//! in order of submission, and an executor that stops attempts at once. After each step it
//! drives the core to a fixed point: apply the step's input, then repeatedly carry out the
//! effects (a `Stop` is answered immediately with `AttemptExited`, which releases the capacity)
//! and run the scheduling pass, until a pass decides nothing. It then checks the core's
//! invariants.
//!
//! A scenario that does not behave as written is a result, not an error: [`run`] returns an
//! [`Outcome`] whose [`Failure`] says at which step and how.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use qm_core::{
    CoreError, Effect, Exit, Input, JobId, JobSpec, JobStatus, Millis, PendingReason, Policy,
    Scheduler, ShareSpec,
};

use crate::scenario::{BorrowWhen, Expect, Scenario, Step};

/// The name of the one queue a scenario runs in.
pub const QUEUE: &str = "scenario";

/// Most rounds of "carry out effects, run the pass" after one step. The core reaches its fixed
/// point in a handful; hitting this bound means the core keeps deciding, which is a bug.
pub const MAX_ROUNDS: usize = 10_000;

/// What happened when a scenario was played.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Each step and the effects it caused, one line each; empty unless tracing was asked for.
    pub trace: Vec<String>,
    /// The first thing that did not go as the scenario says; `None` = it passed.
    pub failure: Option<Failure>,
}

impl Outcome {
    /// Whether every step ran and every `expect` held.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// Where and how a scenario failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// 1-based index into `steps`; 0 = while creating the queue and the shares.
    pub step: usize,
    /// The step in words (as in the trace).
    pub action: String,
    /// What went wrong.
    pub problem: Problem,
}

/// What went wrong at a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// An `expect` did not hold.
    Mismatch {
        /// The job sets that differ.
        sets: Vec<SetDiff>,
        /// The pending reasons that differ.
        reasons: Vec<ReasonDiff>,
    },
    /// The core refused the step's input.
    Refused(CoreError),
    /// `finish` or `fail` of a job that holds no running attempt.
    NotRunning {
        /// The job.
        job: String,
        /// Its status at that point.
        status: JobStatus,
    },
    /// `advance` would move the clock past `u64::MAX` milliseconds.
    ClockOverflow,
    /// The core's invariants do not hold after the step.
    Invariant(String),
    /// The core was still deciding after [`MAX_ROUNDS`] rounds.
    NoFixedPoint,
}

/// One job set of an `expect` that differs from the state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetDiff {
    /// `running`, `runnable`, `preempted`, `succeeded` or `failed`.
    pub set: &'static str,
    /// As written in the scenario.
    pub expected: BTreeSet<String>,
    /// As found.
    pub actual: BTreeSet<String>,
}

impl SetDiff {
    /// Expected but not found.
    pub fn missing(&self) -> Vec<&str> {
        self.expected
            .difference(&self.actual)
            .map(String::as_str)
            .collect()
    }

    /// Found but not expected.
    pub fn unexpected(&self) -> Vec<&str> {
        self.actual
            .difference(&self.expected)
            .map(String::as_str)
            .collect()
    }
}

/// A job whose pending reason is not the expected one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasonDiff {
    /// The job.
    pub job: String,
    /// The expected code.
    pub expected: &'static str,
    /// The reason found; `None` when the job is not RUNNABLE.
    pub actual: Option<PendingReason>,
    /// The job's status.
    pub status: JobStatus,
}

/// Plays the scenario; with `trace`, the outcome lists every step and its effects.
pub fn run(scenario: &Scenario, trace: bool) -> Outcome {
    let mut runner = Runner {
        sched: Scheduler::new(Policy::default()),
        now: 0,
        ids: BTreeMap::new(),
        names: BTreeMap::new(),
        shares: BTreeMap::new(),
        firm_by_default: BTreeSet::new(),
        unverified_by_default: BTreeSet::new(),
        preempted: BTreeSet::new(),
        trace: trace.then(Vec::new),
    };
    let failure = runner.play(scenario).err();
    Outcome {
        trace: runner.trace.unwrap_or_default(),
        failure,
    }
}

struct Runner {
    sched: Scheduler,
    now: Millis,
    ids: BTreeMap<String, JobId>,
    names: BTreeMap<JobId, String>,
    /// The current configuration of every share, so that `update_share` can change one field.
    shares: BTreeMap<String, ShareSpec>,
    /// Shares whose `default_class` may not be interrupted: their jobs that do not say
    /// `interruptible` may not be either.
    firm_by_default: BTreeSet<String>,
    /// Shares whose `default_class` borrows only after a verified resume.
    unverified_by_default: BTreeSet<String>,
    /// Jobs preempted since the previous `expect`.
    preempted: BTreeSet<JobId>,
    trace: Option<Vec<String>>,
}

impl Runner {
    fn play(&mut self, scenario: &Scenario) -> Result<(), Failure> {
        let setup = |problem| Failure {
            step: 0,
            action: "create the queue and its shares".into(),
            problem,
        };
        self.setup(scenario).map_err(setup)?;
        for (i, step) in scenario.steps.iter().enumerate() {
            let n = i + 1;
            self.note(format!("step {n} at {}: {step}", seconds(self.now)));
            let failure = |problem| Failure {
                step: n,
                action: step.to_string(),
                problem,
            };
            self.step(n, step).map_err(failure)?;
            self.sched
                .check_invariants()
                .map_err(|e| failure(Problem::Invariant(e)))?;
        }
        Ok(())
    }

    fn setup(&mut self, scenario: &Scenario) -> Result<(), Problem> {
        let queue = scenario.queue_spec(QUEUE);
        self.drive(Some(Input::PutQueue(queue)))?;
        for decl in &scenario.shares {
            let default = decl.default_class.as_ref();
            let class = scenario.classes.iter().find(|c| Some(&c.name) == default);
            if class.is_some_and(|c| !c.interruptible) {
                self.firm_by_default.insert(decl.name.clone());
            }
            if class.is_some_and(|c| c.borrow == BorrowWhen::AfterVerifiedResume) {
                self.unverified_by_default.insert(decl.name.clone());
            }
            let spec = decl.spec();
            self.shares.insert(spec.name.clone(), spec.clone());
            self.drive(Some(Input::PutShare {
                queue: QUEUE.into(),
                share: spec,
            }))?;
        }
        self.sched.check_invariants().map_err(Problem::Invariant)
    }

    fn step(&mut self, n: usize, step: &Step) -> Result<(), Problem> {
        let input = match step {
            Step::Submit(s) => {
                let id = JobId(self.ids.len() as u64 + 1);
                self.ids.insert(s.job.clone(), id);
                self.names.insert(id, s.job.clone());
                Input::Submit(JobSpec {
                    id,
                    queue: QUEUE.into(),
                    share: s.share.clone(),
                    priority: s.priority,
                    instance_type: s.instance_type.clone(),
                    count: s.count,
                    preemption_retries: s.preemption_retries,
                    attempts: 1,
                    evaluate_on_exit: Vec::new(),
                    runtime_limit_ms: s.runtime_limit.map(|secs| secs.saturating_mul(1000)),
                    interruptible: s
                        .interruptible
                        .unwrap_or(!self.firm_by_default.contains(&s.share)),
                    borrows: s
                        .borrows
                        .unwrap_or(!self.unverified_by_default.contains(&s.share)),
                })
            }
            Step::UpdatePriority(u) => Input::UpdatePriority {
                job: self.id(&u.job),
                priority: u.priority,
            },
            Step::Finish(j) => Input::AttemptExited {
                attempt: self.running_attempt(&j.job)?,
                exit: Exit::Succeeded,
            },
            Step::Fail(j) => Input::AttemptExited {
                attempt: self.running_attempt(&j.job)?,
                exit: Exit::Failed {
                    reason: "AlgorithmError: exit code 1".into(),
                    retryable: true,
                },
            },
            Step::Checkpoint(j) => Input::Checkpoint {
                job: self.id(&j.job),
            },
            Step::Terminate(j) => Input::Terminate {
                job: self.id(&j.job),
                reason: format!("terminated by scenario step {n}"),
            },
            Step::Advance(secs) => {
                self.now = secs
                    .checked_mul(1000)
                    .and_then(|ms| self.now.checked_add(ms))
                    .ok_or(Problem::ClockOverflow)?;
                return self.drive(None);
            }
            Step::UpdateShare(u) => self.put_share(&u.name, |spec| u.apply(spec)),
            Step::UpdateQueue(u) => {
                let spec = self.sched.queue_spec(QUEUE).expect("the scenario's queue");
                Input::PutQueue(u.apply(&spec))
            }
            Step::DisableShare(r) => self.put_share(&r.name, |spec| ShareSpec {
                enabled: false,
                ..spec.clone()
            }),
            Step::Expect(e) => return self.expect(e),
        };
        self.drive(Some(input))
    }

    /// The `PutShare` input for a changed share; the parser made sure the share is declared.
    fn put_share(&mut self, name: &str, change: impl FnOnce(&ShareSpec) -> ShareSpec) -> Input {
        let spec = change(&self.shares[name]);
        self.shares.insert(name.to_string(), spec.clone());
        Input::PutShare {
            queue: QUEUE.into(),
            share: spec,
        }
    }

    /// The id of a job an earlier step submitted (the parser checked that one did).
    fn id(&self, job: &str) -> JobId {
        self.ids[job]
    }

    fn name(&self, id: JobId) -> String {
        self.names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("#{}", id.0))
    }

    fn running_attempt(&self, job: &str) -> Result<qm_core::AttemptId, Problem> {
        let j = self
            .sched
            .job(self.id(job))
            .expect("a submitted job is known to the core");
        j.attempt.ok_or_else(|| Problem::NotRunning {
            job: job.to_string(),
            status: j.status,
        })
    }

    /// Applies the input, then carries out effects and runs the pass until a pass decides
    /// nothing.
    fn drive(&mut self, input: Option<Input>) -> Result<(), Problem> {
        let mut pending: VecDeque<Effect> = match input {
            Some(input) => self
                .sched
                .apply(self.now, input)
                .map_err(Problem::Refused)?
                .into(),
            None => VecDeque::new(),
        };
        for _ in 0..MAX_ROUNDS {
            while !pending.is_empty() {
                // Note a batch of decisions as the core made them, then carry out its stops:
                // the scenario's executor stops attempts at once, so their capacity is free
                // before the next pass.
                let mut stopped = Vec::new();
                for effect in pending.drain(..) {
                    self.note(format!("  {}", self.describe(&effect)));
                    if let Effect::Stop {
                        job,
                        attempt,
                        cause,
                        ..
                    } = effect
                    {
                        if cause.is_preemption() {
                            self.preempted.insert(job);
                        }
                        stopped.push((job, attempt));
                    }
                }
                for (job, attempt) in stopped {
                    self.note(format!(
                        "  exited {} (attempt {})",
                        self.name(job),
                        attempt.0
                    ));
                    let exit = Exit::Failed {
                        reason: "stopped".into(),
                        retryable: false,
                    };
                    let fx = self
                        .sched
                        .apply(self.now, Input::AttemptExited { attempt, exit })
                        .map_err(Problem::Refused)?;
                    pending.extend(fx);
                }
            }
            let fx = self.sched.schedule(self.now);
            if fx.is_empty() {
                return Ok(());
            }
            pending.extend(fx);
        }
        Err(Problem::NoFixedPoint)
    }

    fn expect(&mut self, e: &Expect) -> Result<(), Problem> {
        let preempted: BTreeSet<String> = std::mem::take(&mut self.preempted)
            .into_iter()
            .map(|id| self.name(id))
            .collect();
        let actual = [
            (
                "running",
                self.with_status(JobStatus::Dispatched),
                &e.running,
            ),
            (
                "runnable",
                self.with_status(JobStatus::Runnable),
                &e.runnable,
            ),
            ("preempted", preempted, &e.preempted),
            (
                "succeeded",
                self.with_status(JobStatus::Succeeded),
                &e.succeeded,
            ),
            ("failed", self.with_status(JobStatus::Failed), &e.failed),
        ];
        if self.trace.is_some() {
            for (set, jobs, _) in &actual {
                self.note(format!(
                    "  {set}: {}",
                    list(jobs.iter().map(String::as_str))
                ));
            }
            for (name, &id) in &self.ids.clone() {
                if let Some(r) = self.sched.explain(id) {
                    self.note(format!("  reason {name}: {r}"));
                }
            }
        }
        let sets: Vec<SetDiff> = actual
            .into_iter()
            .filter_map(|(set, actual, expected)| {
                let expected = expected.as_ref()?;
                (*expected != actual).then(|| SetDiff {
                    set,
                    expected: expected.clone(),
                    actual,
                })
            })
            .collect();
        let mut reasons = Vec::new();
        for (job, code) in e.reason.iter().flatten() {
            let id = self.id(job);
            let actual = self.sched.explain(id);
            if actual.as_ref().map(PendingReason::code) != Some(code.as_str()) {
                reasons.push(ReasonDiff {
                    job: job.clone(),
                    expected: code.as_str(),
                    actual,
                    status: self.status(id),
                });
            }
        }
        if sets.is_empty() && reasons.is_empty() {
            Ok(())
        } else {
            Err(Problem::Mismatch { sets, reasons })
        }
    }

    fn status(&self, id: JobId) -> JobStatus {
        self.sched
            .job(id)
            .expect("a submitted job is known to the core")
            .status
    }

    fn with_status(&self, status: JobStatus) -> BTreeSet<String> {
        self.ids
            .iter()
            .filter(|(_, &id)| self.status(id) == status)
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn describe(&self, effect: &Effect) -> String {
        match effect {
            Effect::Start {
                job,
                attempt,
                unit,
                count,
            } => format!(
                "start {} (attempt {}, {count} x {unit})",
                self.name(*job),
                attempt.0
            ),
            Effect::Stop {
                job,
                attempt,
                cause,
            } => format!(
                "stop {} (attempt {}): {}",
                self.name(*job),
                attempt.0,
                cause.describe(|j| self.name(j))
            ),
            Effect::Finished {
                job,
                status,
                reason,
            } => format!("{} {}: {reason}", self.name(*job), status_word(*status)),
            Effect::Requeued { job, reason } => {
                format!("requeue {}: {reason}", self.name(*job))
            }
        }
    }

    fn note(&mut self, line: String) {
        if let Some(t) = &mut self.trace {
            t.push(line);
        }
    }
}

/// The status as the CLI and the API show it.
fn status_word(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Runnable => "RUNNABLE",
        JobStatus::Dispatched => "RUNNING",
        JobStatus::Succeeded => "SUCCEEDED",
        JobStatus::Failed => "FAILED",
    }
}

fn seconds(ms: Millis) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    }
}

fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(", "))
}

/// The readable diff: the step, then one block per differing set or reason. Every line after
/// the first is indented by two spaces, so that a caller can indent the whole block.
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.step == 0 {
            write!(f, "setup ({})", self.action)?;
        } else {
            write!(f, "step {} ({})", self.step, self.action)?;
        }
        match &self.problem {
            Problem::Mismatch { sets, reasons } => {
                f.write_str(": expectation not met")?;
                for d in sets {
                    write!(
                        f,
                        "\n  {}: expected {}, actual {}",
                        d.set,
                        list(d.expected.iter().map(String::as_str)),
                        list(d.actual.iter().map(String::as_str))
                    )?;
                    let missing = d.missing();
                    if !missing.is_empty() {
                        write!(f, "\n    missing: {}", list(missing))?;
                    }
                    let unexpected = d.unexpected();
                    if !unexpected.is_empty() {
                        write!(f, "\n    unexpected: {}", list(unexpected))?;
                    }
                }
                for r in reasons {
                    write!(f, "\n  reason of {}: expected {}", r.job, r.expected)?;
                    match &r.actual {
                        Some(reason) => write!(f, "\n    actual: {reason}")?,
                        None => write!(
                            f,
                            "\n    actual: no pending reason, the job is {}",
                            status_word(r.status)
                        )?,
                    }
                }
                Ok(())
            }
            Problem::Refused(e) => write!(f, ": the core refused the step: {e}"),
            Problem::NotRunning { job, status } => write!(
                f,
                ": job {job} is not running at step {} (it is {})",
                self.step,
                status_word(*status)
            ),
            Problem::ClockOverflow => f.write_str(": the scenario clock overflows"),
            Problem::Invariant(e) => write!(f, ": the core's invariants do not hold: {e}"),
            Problem::NoFixedPoint => write!(
                f,
                ": the core was still deciding after {MAX_ROUNDS} rounds of effects and passes"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::parse;

    fn play(src: &str) -> Outcome {
        let mut scenarios = parse(src, Path::new("t.yaml")).expect("scenario parses");
        run(&scenarios.remove(0), true)
    }

    /// Two shares of one instance each; QS2 lends its idle instance to QS1.
    const TWO_SHARES: &str = "name: t
environment: {ml.g5.xlarge: 2}
shares:
  - {name: QS1, limits: {ml.g5.xlarge: 1}, strategy: LEND_AND_BORROW}
  - {name: QS2, limits: {ml.g5.xlarge: 1}, strategy: LEND}
";

    #[test]
    fn a_borrower_is_reclaimed_when_the_lender_needs_its_instance() {
        let out = play(&format!(
            "{TWO_SHARES}steps:
  - submit: {{job: a, share: QS1, instance_type: ml.g5.xlarge}}
  - submit: {{job: b, share: QS1, instance_type: ml.g5.xlarge}}
  - submit: {{job: c, share: QS1, instance_type: ml.g5.xlarge}}
  - expect:
      running: [a, b]
      runnable: [c]
      reason: {{c: NOTHING_TO_BORROW}}
  - advance: 60
  - submit: {{job: owner, share: QS2, instance_type: ml.g5.xlarge}}
  - expect:
      running: [a, owner]
      runnable: [b, c]
      preempted: [b]
  - finish: {{job: a}}
  - expect: {{running: [b, owner], runnable: [c], preempted: [], succeeded: [a]}}
  - fail: {{job: owner}}
  - terminate: {{job: c}}
  - expect: {{running: [b], runnable: [], failed: [c, owner]}}
"
        ));
        assert!(out.passed(), "{}", out.failure.unwrap());
        let trace = out.trace.join("\n");
        assert!(
            trace.contains("step 6 at 60s: submit owner to QS2"),
            "{trace}"
        );
        assert!(
            trace.contains("stop b (attempt 1): Preempted: capacity reclaimed by quota share QS2"),
            "{trace}"
        );
        assert!(trace.contains("exited b (attempt 1)"), "{trace}");
    }

    #[test]
    fn a_wrong_expectation_fails_with_a_diff_at_its_step() {
        let out = play(&format!(
            "{TWO_SHARES}steps:
  - submit: {{job: a, share: QS1, instance_type: ml.g5.xlarge}}
  - submit: {{job: b, share: QS2, instance_type: ml.g5.xlarge}}
  - submit: {{job: c, share: QS2, instance_type: ml.g5.xlarge}}
  - expect:
      running: [a, c]
      runnable: [b]
      reason: {{c: NOTHING_TO_BORROW, b: NOTHING_TO_BORROW}}
  - expect: {{running: []}}
"
        ));
        let failure = out.failure.expect("the scenario fails");
        assert_eq!(failure.step, 4, "stops at the first failing expect");
        let Problem::Mismatch { sets, reasons } = &failure.problem else {
            panic!("not a mismatch: {failure}")
        };
        assert_eq!(sets.len(), 2, "{failure}");
        assert_eq!(sets[0].missing(), ["c"]);
        assert_eq!(sets[0].unexpected(), ["b"]);
        assert_eq!(reasons.len(), 2);
        let text = failure.to_string();
        assert!(
            text.starts_with("step 4 (expect): expectation not met"),
            "{text}"
        );
        assert!(
            text.contains("running: expected [a, c], actual [a, b]"),
            "{text}"
        );
        assert!(text.contains("missing: [c]\n    unexpected: [b]"), "{text}");
        assert!(
            text.contains("reason of c: expected NOTHING_TO_BORROW\n    actual: OWN_QUOTA_FULL - needs 1 instance(s); the share uses 1 of its 1"),
            "a RUNNABLE job's actual reason is shown with its numbers: {text}"
        );
        assert!(text.contains("reason of b: expected NOTHING_TO_BORROW\n    actual: no pending reason, the job is RUNNING"), "{text}");
    }

    #[test]
    fn finishing_a_job_that_is_not_running_fails_the_scenario() {
        let out = play(&format!(
            "{TWO_SHARES}steps:
  - submit: {{job: a, share: QS2, instance_type: ml.g5.xlarge}}
  - submit: {{job: b, share: QS2, instance_type: ml.g5.xlarge}}
  - finish: {{job: b}}
"
        ));
        let failure = out.failure.expect("the scenario fails");
        assert_eq!(failure.step, 3);
        assert!(
            failure
                .to_string()
                .contains("job b is not running at step 3 (it is RUNNABLE)"),
            "{failure}"
        );
    }

    #[test]
    fn an_input_the_core_refuses_fails_the_scenario_at_that_step() {
        let out = play(&format!(
            "{TWO_SHARES}steps:
  - disable_share: {{name: QS2}}
  - submit: {{job: a, share: QS2, instance_type: ml.g5.xlarge}}
"
        ));
        let failure = out.failure.expect("the scenario fails");
        assert_eq!(failure.step, 2);
        assert!(matches!(
            failure.problem,
            Problem::Refused(CoreError::ShareDisabled { .. })
        ));
        assert!(failure.to_string().contains("is DISABLED"), "{failure}");
    }

    #[test]
    fn in_share_preemption_and_priority_updates_reach_the_core() {
        let out = play(
            "name: t
environment: {ml.g5.xlarge: 1}
shares:
  - {name: QS1, limits: {ml.g5.xlarge: 1}, strategy: RESERVE, in_share_preemption: true}
steps:
  - submit: {job: low, share: QS1, priority: 1, instance_type: ml.g5.xlarge}
  - submit: {job: high, share: QS1, priority: 1, instance_type: ml.g5.xlarge, preemption_retries: 0}
  - expect: {running: [low], runnable: [high], reason: {high: OWN_QUOTA_FULL}}
  - update_priority: {job: high, priority: 5}
  - expect: {running: [high], runnable: [low], preempted: [low]}
  - update_priority: {job: low, priority: 9}
  - expect: {running: [low], runnable: [], preempted: [high], failed: [high]}
",
        );
        assert!(out.passed(), "{}", out.failure.unwrap());
    }

    #[test]
    fn advance_moves_the_clock_the_core_sees_so_the_starvation_guard_applies() {
        let out = play(
            "name: t
environment: {ml.g5.xlarge: 2}
shares:
  - {name: A, limits: {ml.g5.xlarge: 2}, strategy: RESERVE}
steps:
  - submit: {job: s1, share: A, instance_type: ml.g5.xlarge}
  - submit: {job: big, share: A, instance_type: ml.g5.xlarge, count: 2}
  - submit: {job: s2, share: A, instance_type: ml.g5.xlarge}
  - expect: {running: [s1, s2], runnable: [big], reason: {big: OWN_QUOTA_FULL}}
  - advance: 600
  - submit: {job: s3, share: A, instance_type: ml.g5.xlarge}
  - finish: {job: s1}
  - expect: {running: [s2, s3], runnable: [big], reason: {big: OWN_QUOTA_FULL}}
  - finish: {job: s2}
  - expect: {running: [s3], runnable: [big], reason: {big: BACKFILL_FINISHING}}
  - advance: 1800
  - expect: {running: [big], runnable: [s3], preempted: [s3]}
",
        );
        assert!(out.passed(), "{}", out.failure.unwrap());
        assert!(out
            .trace
            .iter()
            .any(|l| l == "step 6 at 600s: submit s3 to A (priority 0, 1 x ml.g5.xlarge)"));
    }

    #[test]
    fn lowering_a_limit_makes_the_excess_reclaimable() {
        let out = play(&format!(
            "{TWO_SHARES}steps:
  - submit: {{job: a, share: QS2, instance_type: ml.g5.xlarge}}
  - update_share: {{name: QS2, limits: {{ml.g5.xlarge: 0}}}}
  - update_share: {{name: QS1, limits: {{ml.g5.xlarge: 2}}}}
  - submit: {{job: b, share: QS1, instance_type: ml.g5.xlarge, count: 2}}
  - expect: {{running: [b], runnable: [a], preempted: [a]}}
"
        ));
        assert!(
            out.passed(),
            "{}\n{}",
            out.failure.unwrap(),
            out.trace.join("\n")
        );
    }
}
