//! Verified resume: for each attempt that followed a preemption, whether it went on from the
//! checkpoint the preempted attempt reported or started over, and how much work was done
//! twice. Both attempts' steps come from their progress files ([`qm_executor::progress`]);
//! this module only compares them, at read time, so a record is never stale and nothing new
//! is logged for it.
//!
//! Against the preempted attempt's last `checkpoint_step`, the next attempt's first `step`
//! classifies the resume: at or past it is `resumed`, below it `restarted`, and when either is
//! missing `unknown` (the job does not report progress, or the new attempt has not yet).
//! Recomputed steps are how far below the preempted attempt's last step the new one started;
//! their instance-hours come from the preempted attempt's own pace (run time × instances /
//! steps it made), or, without steps, from checkpoint-file times as the usage report counts
//! lost work.

use qm_api::qm::{ResumeOutcome, ResumeRecord};

use crate::archive::ArchivedAttempt;
use crate::state::AttemptRec;
use crate::usage::lost_instance_hours;

/// What the classifier reads of an attempt, whether a live record, an archived one or the
/// workload export's borrowed view of one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub(crate) number: u32,
    pub(crate) started_at: i64,
    pub(crate) running_at: Option<i64>,
    pub(crate) stopped_at: Option<i64>,
    pub(crate) checkpoint_at: Option<i64>,
    pub(crate) count: u32,
    pub(crate) steps: qm_executor::Steps,
}

/// `From<&T> for Run` for each record type that carries an attempt's fields under these names
/// (the live record, the archived one, the archive's borrowed view): one list of fields to
/// keep in step with [`Run`].
macro_rules! run_from {
    ($($t:ty),*) => {$(
        impl From<&$t> for $crate::resume::Run {
            fn from(a: &$t) -> Self {
                $crate::resume::Run {
                    number: a.number,
                    started_at: a.started_at,
                    running_at: a.running_at,
                    stopped_at: a.stopped_at,
                    checkpoint_at: a.checkpoint_at,
                    count: a.count,
                    steps: a.steps,
                }
            }
        }
    )*};
}
pub(crate) use run_from;

run_from!(AttemptRec, ArchivedAttempt);

/// One record per attempt that directly follows a preempted one, oldest first; `attempts` is
/// every attempt of one job, in any order, where the first of two with the same number wins.
pub(crate) fn resumes(attempts: &[&AttemptRec]) -> Vec<ResumeRecord> {
    let mut sorted = attempts.to_vec();
    // Stable: of two records of one attempt the first given stays first, and is kept.
    sorted.sort_by_key(|a| a.number);
    sorted.dedup_by_key(|a| a.number);
    sorted
        .windows(2)
        .filter(|w| w[0].preempted && w[1].number == w[0].number + 1)
        .map(|w| classify(&Run::from(w[0]), &Run::from(w[1])))
        .collect()
}

/// How `next` resumed after the preemption of `preempted`.
pub(crate) fn classify(preempted: &Run, next: &Run) -> ResumeRecord {
    let checkpoint_step = preempted.steps.checkpoint;
    let previous_last_step = preempted.steps.last;
    let first_step = next.steps.first;
    let outcome = match (first_step, checkpoint_step) {
        (Some(first), Some(checkpoint)) if first >= checkpoint => ResumeOutcome::Resumed,
        (Some(_), Some(_)) => ResumeOutcome::Restarted,
        _ => ResumeOutcome::Unknown,
    };
    let recomputed_steps = previous_last_step
        .zip(first_step)
        .map(|(last, first)| last.saturating_sub(first));
    let recomputed_instance_hours = match recomputed_steps {
        Some(0) => Some(0.0),
        Some(steps) => hours_per_step(preempted).map(|h| h * steps as f64),
        None => preempted.stopped_at.map(|ended| {
            lost_instance_hours(
                preempted.checkpoint_at.or(preempted.running_at),
                ended,
                preempted.count,
            )
        }),
    };
    ResumeRecord {
        attempt: next.number,
        outcome,
        checkpoint_step,
        previous_last_step,
        first_step,
        recomputed_steps,
        recomputed_instance_hours,
    }
}

/// The preempted attempt's pace: instance-hours per step, from the time its processes ran and
/// the steps it made; `None` when it made none or has not stopped.
fn hours_per_step(a: &Run) -> Option<f64> {
    let made = a
        .steps
        .last?
        .checked_sub(a.steps.first?)
        .filter(|&n| n > 0)?;
    let ran_hours = lost_instance_hours(
        Some(a.running_at.unwrap_or(a.started_at)),
        a.stopped_at?,
        a.count,
    );
    Some(ran_hours / made as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_executor::Steps;

    const HOUR: i64 = 3_600_000;

    /// Attempt `number` on 2 instances that ran for an hour from `start_h` and reported
    /// `first..=last` with its last checkpoint at `checkpoint`.
    fn attempt(number: u32, start_h: i64, steps: Steps, preempted: bool) -> AttemptRec {
        AttemptRec {
            attempt: qm_core::AttemptId(u64::from(number)),
            number,
            training_job_name: format!("job-{number}"),
            started_at: start_h * HOUR,
            stopped_at: Some((start_h + 1) * HOUR),
            status_reason: None,
            stop_reason: None,
            preempted,
            pids: Vec::new(),
            supervisor: None,
            running_at: Some(start_h * HOUR),
            instance_type: "ml.g5.xlarge".into(),
            count: 2,
            checkpoint_at: Some(start_h * HOUR + HOUR / 2),
            stop_at: None,
            preempted_for: None,
            steps,
            checkpoints: 1,
            usage: None,
        }
    }

    fn steps(first: Option<u64>, last: Option<u64>, checkpoint: Option<u64>) -> Steps {
        Steps {
            first,
            last,
            checkpoint,
        }
    }

    #[test]
    fn an_attempt_starting_at_its_checkpoint_resumed_and_recomputed_the_steps_after_it() {
        let before = attempt(1, 0, steps(Some(0), Some(1200), Some(1000)), true);
        let after = attempt(2, 1, steps(Some(1001), Some(2000), None), false);
        let r = classify(&Run::from(&before), &Run::from(&after));
        assert_eq!(r.outcome, ResumeOutcome::Resumed);
        assert_eq!(
            (r.checkpoint_step, r.previous_last_step, r.first_step),
            (Some(1000), Some(1200), Some(1001))
        );
        assert_eq!(r.recomputed_steps, Some(199));
        // 2 instance-hours for 1200 steps.
        let hours = r.recomputed_instance_hours.unwrap();
        assert!((hours - 199.0 * 2.0 / 1200.0).abs() < 1e-9, "{hours}");
    }

    #[test]
    fn an_attempt_starting_below_the_checkpoint_restarted_and_recomputed_everything_before() {
        let before = attempt(1, 0, steps(Some(0), Some(1200), Some(1000)), true);
        let after = attempt(2, 1, steps(Some(0), Some(300), None), false);
        let r = classify(&Run::from(&before), &Run::from(&after));
        assert_eq!(r.outcome, ResumeOutcome::Restarted);
        assert_eq!(r.recomputed_steps, Some(1200));
        assert!((r.recomputed_instance_hours.unwrap() - 2.0).abs() < 1e-9);
    }

    #[test]
    fn an_attempt_past_where_the_last_one_stopped_recomputed_nothing() {
        let before = attempt(1, 0, steps(Some(0), Some(1200), Some(1200)), true);
        let after = attempt(2, 1, steps(Some(1201), None, None), false);
        let r = classify(&Run::from(&before), &Run::from(&after));
        assert_eq!(r.outcome, ResumeOutcome::Resumed);
        assert_eq!(r.recomputed_steps, Some(0));
        assert_eq!(r.recomputed_instance_hours, Some(0.0));
    }

    #[test]
    fn without_progress_the_resume_is_unknown_and_the_loss_comes_from_checkpoint_times() {
        let before = attempt(1, 0, Steps::default(), true);
        let after = attempt(2, 1, Steps::default(), false);
        let r = classify(&Run::from(&before), &Run::from(&after));
        assert_eq!(r.outcome, ResumeOutcome::Unknown);
        assert_eq!(r.recomputed_steps, None);
        // Half an hour since the last checkpoint, on 2 instances.
        assert!((r.recomputed_instance_hours.unwrap() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_next_attempt_that_has_not_reported_yet_is_unknown() {
        let before = attempt(1, 0, steps(Some(0), Some(1200), Some(1000)), true);
        let after = attempt(2, 1, Steps::default(), false);
        assert_eq!(
            classify(&Run::from(&before), &Run::from(&after)).outcome,
            ResumeOutcome::Unknown
        );
    }

    #[test]
    fn only_attempts_that_follow_a_preemption_get_a_record() {
        let one = attempt(1, 0, steps(Some(0), Some(10), Some(10)), false);
        let two = attempt(2, 1, steps(Some(0), Some(10), Some(10)), true);
        let three = attempt(3, 2, steps(Some(10), Some(20), None), false);
        let stale = attempt(2, 1, Steps::default(), true);
        let records = resumes(&[&three, &one, &two, &stale]);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].attempt, 3);
        assert_eq!(records[0].outcome, ResumeOutcome::Resumed);
    }
}
