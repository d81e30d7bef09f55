//! Replaying another build's log (issue 39): a log written under one set of rules and
//! replayed by a core whose rules differ applies what was logged — every job, attempt and
//! decision comes out exactly as the writer left them, and the invariants hold after every
//! batch. The differing rules are real policy switches: no preemptible backfill, an earlier
//! reservation, no patience before a reclaim.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use proptest::prelude::*;
use qm_core::{
    AttemptId, CoreError, Effect, Exit, Input, JobId, JobSpec, Logged, Millis, Policy, QueueSpec,
    Scheduler, ShareSpec, StopCause, Strategy as Sharing,
};

const Q: &str = "q";
const UNITS: [&str; 2] = ["ml.g5.xlarge", "ml.p4d.24xlarge"];

#[derive(Clone, Debug)]
enum Op {
    Submit {
        share: usize,
        unit: usize,
        count: u32,
        priority: u32,
        retries: Option<u32>,
    },
    Finish(usize),
    Fail(usize),
    Terminate(usize),
    Checkpoint(usize),
    Priority(usize, u32),
    Drill(usize),
    /// The attempt's supervisor died: lost, within a limit of one in a row.
    Lose(usize),
    /// `qm drain --requeue`, then `qm drain --cancel`.
    Requeue,
    Advance(u64),
    Release,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, 0..2usize, 1..3u32, 0..4u32, proptest::option::of(0..2u32)).prop_map(
            |(share, unit, count, priority, retries)| Op::Submit { share, unit, count, priority, retries }
        ),
        2 => any::<usize>().prop_map(Op::Finish),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::Terminate),
        1 => any::<usize>().prop_map(Op::Checkpoint),
        1 => (any::<usize>(), 0..6u32).prop_map(|(i, p)| Op::Priority(i, p)),
        1 => any::<usize>().prop_map(Op::Drill),
        1 => any::<usize>().prop_map(Op::Lose),
        1 => Just(Op::Requeue),
        2 => (1..900u64).prop_map(Op::Advance),
        3 => Just(Op::Release),
    ]
}

fn shares() -> impl Strategy<Value = Vec<ShareSpec>> {
    let strategy = prop_oneof![
        Just(Sharing::Reserve),
        Just(Sharing::Lend),
        Just(Sharing::LendAndBorrow)
    ];
    prop::collection::vec((strategy, 0..3u32, 0..3u32, any::<bool>()), 3).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (strategy, g5, p4, in_share))| {
                let mut s = ShareSpec::new(format!("s{i}"));
                s.strategy = strategy;
                s.limits.insert(UNITS[0].into(), g5);
                s.limits.insert(UNITS[1].into(), p4);
                s.in_share_preemption = in_share;
                s
            })
            .collect()
    })
}

/// One logged batch: its time, its inputs and the decisions it took.
type Batch = (Millis, Vec<Input>, Vec<Effect>);

/// Share `s0` of queue `Q`, limited to `limit` instances of `unit`.
fn share_s0(unit: &str, limit: u32) -> ShareSpec {
    let mut share = ShareSpec::new("s0");
    share.limits.insert(unit.into(), limit);
    share
}

fn configured(policy: Policy, shares: &[ShareSpec]) -> Scheduler {
    let mut s = Scheduler::new(policy);
    let environment = UNITS.iter().map(|u| (u.to_string(), 3)).collect();
    s.step(
        0,
        Input::PutQueue(QueueSpec {
            name: Q.into(),
            environment,
            ..Default::default()
        }),
    )
    .unwrap();
    for share in shares {
        s.step(
            0,
            Input::PutShare {
                queue: Q.into(),
                share: share.clone(),
            },
        )
        .unwrap();
    }
    s
}

/// Runs `ops` under the writer's rules; the batches it would log (one per op, inputs then
/// the pass).
fn written(shares: &[ShareSpec], ops: &[Op]) -> (Scheduler, Vec<Batch>) {
    let mut s = configured(Policy::default(), shares);
    let (mut now, mut jobs, mut stopping) = (0, Vec::<JobId>::new(), Vec::<AttemptId>::new());
    let mut log = Vec::new();
    for op in ops {
        let running = |s: &Scheduler, jobs: &[JobId], i: usize| {
            let j = *jobs.get(i % jobs.len().max(1))?;
            s.job(j)?
                .attempt
                .filter(|a| s.attempt(*a).is_some_and(|a| a.stopping.is_none()))
                .map(|a| (j, a))
        };
        let pick = |i: usize| jobs.get(i % jobs.len().max(1)).copied();
        let inputs: Vec<Input> = match *op {
            Op::Submit {
                share,
                unit,
                count,
                priority,
                retries,
            } => {
                let id = JobId(jobs.len() as u64 + 1);
                jobs.push(id);
                let mut spec = JobSpec::new(id, Q, format!("s{share}"), UNITS[unit]);
                spec.count = count;
                spec.priority = priority;
                spec.preemption_retries = retries;
                spec.attempts = 2;
                vec![Input::Submit(spec)]
            }
            Op::Finish(i) | Op::Fail(i) => running(&s, &jobs, i)
                .map(|(_, attempt)| Input::AttemptExited {
                    attempt,
                    exit: match op {
                        Op::Finish(_) => Exit::Succeeded,
                        _ => Exit::Failed {
                            reason: "AlgorithmError".into(),
                            retryable: true,
                        },
                    },
                })
                .into_iter()
                .collect(),
            Op::Terminate(i) => pick(i)
                .map(|job| Input::Terminate {
                    job,
                    reason: "terminated".into(),
                })
                .into_iter()
                .collect(),
            Op::Checkpoint(i) => pick(i)
                .map(|job| Input::Checkpoint { job })
                .into_iter()
                .collect(),
            Op::Priority(i, p) => pick(i)
                .filter(|j| !s.job(*j).unwrap().status.is_final())
                .map(|job| Input::UpdatePriority { job, priority: p })
                .into_iter()
                .collect(),
            Op::Drill(i) => running(&s, &jobs, i)
                .map(|(job, _)| Input::Drill {
                    job,
                    reason: "drill".into(),
                })
                .into_iter()
                .collect(),
            Op::Lose(i) => running(&s, &jobs, i)
                .map(|(_, attempt)| Input::AttemptExited {
                    attempt,
                    exit: Exit::Lost {
                        reason: "lost".into(),
                        max_in_a_row: Some(1),
                    },
                })
                .into_iter()
                .collect(),
            Op::Requeue => vec![
                Input::Drain {
                    reason: "maintenance".into(),
                    requeue: true,
                },
                Input::EndDrain,
            ],
            Op::Advance(secs) => {
                now += secs * 1000;
                Vec::new()
            }
            Op::Release => std::mem::take(&mut stopping)
                .into_iter()
                .map(|attempt| Input::AttemptExited {
                    attempt,
                    exit: Exit::Failed {
                        reason: "stopped".into(),
                        retryable: false,
                    },
                })
                .collect(),
        };
        let mut applied = Vec::new();
        let mut decisions = Vec::new();
        for input in inputs {
            if let Ok(fx) = s.apply(now, input.clone()) {
                decisions.extend(fx);
                applied.push(input);
            }
        }
        decisions.extend(s.schedule(now));
        for e in &decisions {
            if let Effect::Stop { attempt, .. } = e {
                stopping.push(*attempt);
            }
        }
        s.check_invariants().unwrap();
        log.push((now, applied, decisions));
    }
    (s, log)
}

/// Replays one logged batch as the server does: its inputs with its decisions, then the rest
/// of its decisions (its pass); the decisions applied.
fn replay_batch(
    s: &mut Scheduler,
    now: Millis,
    inputs: Vec<Input>,
    decisions: &[Effect],
) -> Result<Vec<Effect>, CoreError> {
    let mut logged = Logged::new(decisions.to_vec());
    let mut applied = Vec::new();
    for input in inputs {
        applied.extend(s.apply_logged(now, input, &mut logged)?);
    }
    applied.extend(s.impose_logged(now, &mut logged)?);
    Ok(applied)
}

/// Replays `log` with other rules, as the server replays another build's batches.
fn replayed(shares: &[ShareSpec], log: &[Batch]) -> Result<Scheduler, String> {
    let mut s = configured(
        Policy {
            reserve_after_ms: 60_000,
            reclaim_patience_ms: 0,
            backfill_patience_ms: 0,
            preemptible_backfill: false,
        },
        shares,
    );
    for (seq, (now, inputs, decisions)) in log.iter().enumerate() {
        let applied = replay_batch(&mut s, *now, inputs.clone(), decisions)
            .map_err(|e| format!("batch {seq}: {e}"))?;
        if &applied != decisions {
            return Err(format!(
                "batch {seq}: applied {applied:?}, logged {decisions:?}"
            ));
        }
        s.check_invariants()
            .map_err(|e| format!("batch {seq}: {e}"))?;
    }
    Ok(s)
}

/// What the clients were told about every job and attempt.
fn told(s: &Scheduler) -> (Vec<String>, Vec<String>) {
    let image = s.image();
    let jobs = image
        .jobs
        .iter()
        .map(|j| {
            format!(
                "{:?} {:?} {:?} attempt {:?} stopping {:?} preempted {} failed {} terminated {}",
                j.spec.id,
                j.status,
                j.status_reason,
                j.attempt,
                j.stopping,
                j.preemptions,
                j.failures,
                j.terminated
            )
        })
        .collect();
    let attempts = image
        .attempts
        .iter()
        .map(|a| {
            format!(
                "{:?} of {:?}: {} from {} stopping {:?}",
                a.id, a.job, a.count, a.started_at, a.stopping
            )
        })
        .collect();
    (jobs, attempts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_log_replayed_under_other_rules_leaves_every_job_and_attempt_as_logged(
        shares in shares(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let (writer, log) = written(&shares, &ops);
        let replay = replayed(&shares, &log).map_err(TestCaseError::fail)?;
        prop_assert_eq!(told(&replay), told(&writer));
    }
}

#[test]
fn a_logged_requeue_stands_where_this_build_would_fail_the_job() {
    // The writer requeued a preempted job; the log is then read by a build that (say) counts
    // its preemption retries as exhausted. The logged requeue stands.
    let mut share = share_s0(UNITS[0], 1);
    share.in_share_preemption = true;
    let mut s = configured(Policy::default(), std::slice::from_ref(&share));
    let mut low = JobSpec::new(JobId(1), Q, "s0", UNITS[0]);
    low.preemption_retries = Some(0);
    let started = s.step(0, Input::Submit(low)).unwrap();
    let Effect::Start { attempt, .. } = started[0] else {
        panic!("{started:?}")
    };
    // As a build with more preemption retries logged it: stopped and queued again.
    let decisions = vec![
        Effect::Stop {
            job: JobId(1),
            attempt,
            cause: StopCause::Drill {
                reason: "drill".into(),
            },
        },
        Effect::Requeued {
            job: JobId(1),
            reason: "Preempted: drill (drill)".into(),
        },
    ];
    let mut logged = Logged::new(decisions.clone());
    let fx = s
        .apply_logged(
            1,
            Input::Drill {
                job: JobId(1),
                reason: "drill".into(),
            },
            &mut logged,
        )
        .unwrap();
    assert_eq!(fx, decisions);
    assert_eq!(
        s.job(JobId(1)).unwrap().status,
        qm_core::JobStatus::Runnable
    );
    s.check_invariants().unwrap();
}

#[test]
fn a_logged_start_of_a_job_that_does_not_wait_stops_the_replay_naming_it() {
    let share = share_s0(UNITS[0], 1);
    let mut s = configured(Policy::default(), &[share]);
    let mut logged = Logged::new(vec![Effect::Start {
        job: JobId(9),
        attempt: AttemptId(0),
        unit: UNITS[0].into(),
        count: 1,
    }]);
    let e = s.impose_logged(0, &mut logged).unwrap_err();
    assert!(e.to_string().contains("job 9"), "{e}");
}

#[test]
fn a_state_image_is_loaded_as_its_writer_left_it_and_this_builds_rules_decide_from_the_next_pass() {
    // A job its writer parked as never fitting (say, under an older limit rule) is loaded
    // parked, not judged again by this build's rules on loading; the next pass after a
    // re-examination decides with today's rules, which start it.
    let share = share_s0(UNITS[0], 2);
    let mut s = configured(Policy::default(), &[share]);
    s.step(0, Input::Submit(JobSpec::new(JobId(3), Q, "s0", UNITS[0])))
        .unwrap();
    let mut image = s.image();
    let job = image
        .jobs
        .iter_mut()
        .find(|j| j.spec.id == JobId(3))
        .unwrap();
    assert!(job.attempt.is_some(), "it fits and runs under this build");
    // The writer's image: the job waiting, parked as never fitting, nothing else pending.
    job.attempt = None;
    job.status = qm_core::JobStatus::Runnable;
    job.misconfigured = Some(qm_core::Misconfiguration::ShareLimit);
    image.attempts.clear();
    image.next_attempt = 1;
    image.dirty.clear();
    let mut loaded = Scheduler::from_image(Policy::default(), image).unwrap();
    assert_eq!(
        loaded.job(JobId(3)).unwrap().misconfigured,
        Some(qm_core::Misconfiguration::ShareLimit),
        "loaded as its writer left it"
    );
    assert!(
        loaded.schedule(0).is_empty(),
        "no lane is due: nothing decided on loading"
    );
    loaded.reexamine();
    let fx = loaded.schedule(0);
    assert!(
        matches!(fx.as_slice(), [Effect::Start { job: JobId(3), .. }]),
        "{fx:?}"
    );
    loaded.check_invariants().unwrap();
}

#[test]
fn a_waiting_job_an_older_build_ended_ends_as_logged_even_where_its_command_is_refused_now() {
    // An older build accepted a termination of a waiting job that this build refuses (the
    // command is skipped on replay); the decision it logged still stands.
    let share = share_s0(UNITS[0], 0);
    let mut s = configured(Policy::default(), &[share]);
    s.step(0, Input::Submit(JobSpec::new(JobId(1), Q, "s0", UNITS[0])))
        .unwrap();
    let finished = Effect::Finished {
        job: JobId(1),
        status: qm_core::JobStatus::Failed,
        reason: "terminated by an older rule".into(),
    };
    let mut logged = Logged::new(vec![finished.clone()]);
    assert_eq!(s.impose_logged(1, &mut logged).unwrap(), vec![finished]);
    let job = s.job(JobId(1)).unwrap();
    assert_eq!(job.status, qm_core::JobStatus::Failed);
    assert_eq!(job.status_reason, "terminated by an older rule");
    s.check_invariants().unwrap();
}

#[test]
fn a_preempted_attempts_exit_leaves_a_later_inputs_decision_to_that_input() {
    // Drilled, so queued again at the stop; its exit and a termination in one later batch:
    // the logged Finished is the termination's, and the job is terminated as its clients
    // were told.
    let share = share_s0(UNITS[0], 1);
    let mut writer = configured(Policy::default(), std::slice::from_ref(&share));
    let mut replay = configured(Policy::default(), &[share]);
    let batches: Vec<(Millis, Vec<Input>)> = vec![
        (
            0,
            vec![Input::Submit(JobSpec::new(JobId(1), Q, "s0", UNITS[0]))],
        ),
        (
            1,
            vec![Input::Drill {
                job: JobId(1),
                reason: "drill".into(),
            }],
        ),
        (
            2,
            vec![
                Input::AttemptExited {
                    attempt: AttemptId(0),
                    exit: Exit::Failed {
                        reason: "stopped".into(),
                        retryable: true,
                    },
                },
                Input::Terminate {
                    job: JobId(1),
                    reason: "bye".into(),
                },
            ],
        ),
    ];
    for (now, inputs) in batches {
        let mut decisions = Vec::new();
        for input in &inputs {
            decisions.extend(writer.apply(now, input.clone()).unwrap());
        }
        decisions.extend(writer.schedule(now));
        let applied = replay_batch(&mut replay, now, inputs, &decisions).unwrap();
        assert_eq!(applied, decisions);
    }
    assert_eq!(told(&replay), told(&writer));
    assert!(replay.job(JobId(1)).unwrap().terminated);
}

#[test]
fn a_logged_start_of_a_job_this_build_parks_does_not_panic() {
    // Four instances where the environment has three: this build parks it (and made no lane
    // for it); the writer started it. Applied as logged, not a panic.
    let mut share = share_s0(UNITS[1], 4);
    share.strategy = Sharing::LendAndBorrow;
    let mut s = configured(Policy::default(), &[share]);
    let mut spec = JobSpec::new(JobId(1), Q, "s0", UNITS[1]);
    spec.count = 4;
    s.apply(0, Input::Submit(spec)).unwrap();
    assert!(s.job(JobId(1)).unwrap().misconfigured.is_some());
    let mut logged = Logged::new(vec![Effect::Start {
        job: JobId(1),
        attempt: AttemptId(0),
        unit: UNITS[1].into(),
        count: 4,
    }]);
    let fx = s.impose_logged(0, &mut logged).unwrap();
    assert_eq!(fx.len(), 1);
    assert_eq!(s.job(JobId(1)).unwrap().attempt, Some(AttemptId(0)));
}
