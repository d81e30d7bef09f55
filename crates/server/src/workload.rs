//! The workload export (`GET /qm/v1/workload`, `qm workload export`): the jobs submitted in a
//! window, in the simulator's workload schema, so that a period can be replayed under another
//! policy and the simulator calibrated against what really happened (docs/workload-export.md).
//!
//! Computed from facts only, as usage accounting is: the finished jobs of the state and of
//! the archive, each read as a [`JobView`] (borrowed from the archive's line or the state's
//! record). The computation is pure ([`export`]); what a job needed is its attempts' run time
//! less the work done twice after preemptions, which the resume classifier (`resume.rs`)
//! measures from the steps the attempts reported, else from their checkpoint times.

use std::borrow::Cow;
use std::collections::HashSet;

use qm_api::ApiError;
use serde::Deserialize;

use crate::archive::{ArchivedAttempt, ArchivedJob};
use crate::facts::{ClassBook, WorkloadFacts};
use crate::state::State;
use crate::usage::lost_instance_hours;
pub use qm_api::workload::{write_csv, Columns, WorkloadJob, COLUMNS};

const HOUR_MS: f64 = 3_600_000.0;

/// A window's export: the rows, oldest submission first, and what was left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadExport {
    /// The finished jobs that ran.
    pub rows: Vec<WorkloadJob>,
    /// Jobs submitted in the window that have not finished: what they need is not known yet.
    pub unfinished: u64,
    /// Finished jobs that never ran (terminated or failed while waiting): they needed nothing.
    pub never_ran: u64,
}

impl State {
    /// The facts of an export of the jobs submitted in `[since, until)` to `queue` (any, if
    /// `None`).
    pub fn workload_facts(&self, since: i64, until: i64, queue: Option<&str>) -> WorkloadFacts {
        let mut facts = WorkloadFacts::default();
        for rec in self.jobs.values() {
            if rec.created_at < since
                || rec.created_at >= until
                || queue.is_some_and(|q| q != &*rec.queue)
            {
                continue;
            }
            match rec.stopped_at {
                Some(_) => facts.jobs.push(ArchivedJob::of(rec)),
                None => facts.unfinished += 1,
            }
        }
        for q in self.queues.values() {
            let defined = qm_api::class::defined(&q.tags)
                .into_iter()
                .map(|(name, def)| (name, def.interruptible))
                .collect();
            facts.classes.defined.insert(q.name.clone(), defined);
            for s in q.shares.values() {
                if let Some(c) = s.tags.get(qm_api::class::TAG_DEFAULT_CLASS) {
                    let key = (q.name.clone(), s.name.clone());
                    facts.classes.defaults.insert(key, c.clone());
                }
            }
        }
        facts
    }
}

/// What the export reads of a job, borrowed from an archive line (parsing only these members
/// and allocating almost nothing is what makes a million jobs take seconds) or from a record.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobView<'a> {
    #[serde(borrow)]
    job_id: Cow<'a, str>,
    #[serde(borrow)]
    job_queue: Cow<'a, str>,
    #[serde(borrow)]
    quota_share_name: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    scheduling_priority: i32,
    created_at: i64,
    stopped_at: Option<i64>,
    #[serde(borrow)]
    attempts: Vec<AttemptView<'a>>,
    preempted_count: u32,
    #[serde(default, borrow)]
    tags: ClassTag<'a>,
}

/// Of a job's tags, its class.
#[derive(Debug, Default, Deserialize)]
struct ClassTag<'a> {
    #[serde(rename = "qm:class", default, borrow)]
    class: Option<Cow<'a, str>>,
}

/// What the export reads of an attempt.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttemptView<'a> {
    number: u32,
    #[serde(borrow)]
    instance_type: Cow<'a, str>,
    count: u32,
    started_at: i64,
    running_at: Option<i64>,
    stopped_at: Option<i64>,
    preempted: bool,
    #[serde(default)]
    checkpoint_at: Option<i64>,
    #[serde(default)]
    steps: qm_executor::Steps,
    #[serde(default)]
    checkpoints: u32,
}

impl<'a> JobView<'a> {
    /// The view of a record.
    pub fn of(job: &'a ArchivedJob) -> Self {
        JobView {
            job_id: Cow::Borrowed(&job.job_id),
            job_queue: Cow::Borrowed(&job.job_queue),
            quota_share_name: Cow::Borrowed(&job.quota_share_name),
            status: Cow::Borrowed(&job.status),
            scheduling_priority: job.scheduling_priority,
            created_at: job.created_at,
            stopped_at: job.stopped_at,
            attempts: job.attempts.iter().map(AttemptView::of).collect(),
            preempted_count: job.preempted_count,
            tags: ClassTag {
                class: job
                    .tags
                    .get(qm_api::class::TAG_CLASS)
                    .map(|c| Cow::Borrowed(c.as_str())),
            },
        }
    }
}

impl<'a> AttemptView<'a> {
    fn of(a: &'a ArchivedAttempt) -> Self {
        AttemptView {
            number: a.number,
            instance_type: Cow::Borrowed(&a.instance_type),
            count: a.count,
            started_at: a.started_at,
            running_at: a.running_at,
            stopped_at: a.stopped_at,
            preempted: a.preempted,
            checkpoint_at: a.checkpoint_at,
            steps: a.steps,
            checkpoints: a.checkpoints,
        }
    }
}

/// The export of the state's `facts` plus the archive's jobs submitted in `[since, until)`
/// to `queue` (any, if `None`); a job in both (a crash between archiving and retiring) is
/// taken from the state.
pub fn export_with_archive(
    archive: &crate::archive::Archive,
    facts: WorkloadFacts,
    (since, until): (i64, i64),
    queue: Option<&str>,
) -> Result<WorkloadExport, ApiError> {
    let live: HashSet<&str> = facts.jobs.iter().map(|j| j.job_id.as_str()).collect();
    let mut export = Exporter::new(&facts.classes, since);
    // A job submitted at or after `since` finished at or after it too.
    archive
        .for_each_line(since, |line| {
            // A crash mid-append can leave a torn last line: skip what does not parse.
            let Ok(job) = serde_json::from_str::<JobView>(line) else {
                tracing::warn!("skipping an unreadable archive line");
                return;
            };
            let wanted = job.created_at >= since
                && job.created_at < until
                && queue.is_none_or(|q| q == job.job_queue)
                && !live.contains(&*job.job_id);
            if wanted {
                export.add(&job);
            }
        })
        .map_err(|e| ApiError::server(format!("reading the archive of retired jobs: {e}")))?;
    for job in &facts.jobs {
        export.add(&JobView::of(job));
    }
    let mut out = export.finish();
    out.unfinished += facts.unfinished;
    Ok(out)
}

/// The rows of `jobs` (finished, submitted in the window that starts at `since`).
pub fn export<'a>(
    jobs: impl IntoIterator<Item = &'a ArchivedJob>,
    classes: &ClassBook,
    since: i64,
) -> WorkloadExport {
    let mut export = Exporter::new(classes, since);
    for job in jobs {
        export.add(&JobView::of(job));
    }
    export.finish()
}

/// Builds an export one job at a time.
struct Exporter<'c> {
    classes: &'c ClassBook,
    since: i64,
    out: WorkloadExport,
}

impl<'c> Exporter<'c> {
    fn new(classes: &'c ClassBook, since: i64) -> Self {
        Exporter {
            classes,
            since,
            out: WorkloadExport::default(),
        }
    }

    fn add(&mut self, job: &JobView) {
        let class = job.tags.class.as_deref();
        let interruptible =
            self.classes
                .interruptible(&job.job_queue, &job.quota_share_name, class);
        match row(job, interruptible, self.since) {
            Some(r) => self.out.rows.push(r),
            None if job.stopped_at.is_none() => self.out.unfinished += 1,
            None => self.out.never_ran += 1,
        }
    }

    /// The rows in submission order, one per job id: the last added (the archive may hold a
    /// job twice after a crash, and the state's copy is added last).
    fn finish(mut self) -> WorkloadExport {
        let rows = &mut self.out.rows;
        // Stable: of a job's rows the last added stays last.
        rows.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        let mut keep = vec![true; rows.len()];
        for i in 1..rows.len() {
            if rows[i].job_id == rows[i - 1].job_id {
                keep[i - 1] = false;
            }
        }
        let mut keep = keep.into_iter();
        rows.retain(|_| keep.next().unwrap_or(true));
        rows.sort_by(|a, b| (a.submit_time_s, &a.job_id).cmp(&(b.submit_time_s, &b.job_id)));
        self.out
    }
}

/// `job`'s row; `None` when it has not finished or no attempt of it ran.
fn row(job: &JobView, interruptible: Option<bool>, since: i64) -> Option<WorkloadJob> {
    let stopped_at = job.stopped_at?;
    let ended: Vec<&AttemptView> = job
        .attempts
        .iter()
        .filter(|a| a.stopped_at.is_some())
        .collect();
    let last = ended.last()?;
    let ran_ms: i64 = ended.iter().map(|a| run_ms(a)).sum();
    if ran_ms <= 0 {
        return None;
    }
    let work_ms = (ran_ms as f64 - recomputed_ms(&ended)).max(0.0);
    let held_ms: i64 = ended
        .iter()
        .map(|a| i64::from(a.count) * (a.stopped_at.unwrap_or(a.started_at) - a.started_at))
        .sum();
    Some(WorkloadJob {
        job_id: job.job_id.to_string(),
        tenant: job.quota_share_name.to_string(),
        submit_time_s: ms_to_u64(job.created_at - since) / 1000,
        // A job that ran needs at least a second, the schema's unit.
        duration_s: ((work_ms / 1000.0).round() as u64).max(1),
        gpus: last.count,
        status: job.status.to_string(),
        priority: Some(job.scheduling_priority.clamp(0, 9999) as u32),
        instance_type: Some(last.instance_type.to_string()),
        checkpoint_interval_s: checkpoint_interval_s(&ended),
        class: interruptible.map(WorkloadJob::class_of),
        real_completion_ms: Some(ms_to_u64(stopped_at - job.created_at)),
        real_preemptions: Some(job.preempted_count),
        real_instance_ms: Some(ms_to_u64(held_ms)),
    })
}

fn ms_to_u64(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

/// Milliseconds an ended attempt's processes ran: from running to gone (none if they never
/// started).
fn run_ms(a: &AttemptView) -> i64 {
    match (a.running_at, a.stopped_at) {
        (Some(from), Some(to)) => (to - from).max(0),
        _ => 0,
    }
}

/// Milliseconds of work done twice or thrown away: for each attempt after a preemption, what
/// the resume classifier counts as recomputed (in the preempted attempt's time); for a
/// preempted last attempt, the work since its last checkpoint, never redone.
fn recomputed_ms(ended: &[&AttemptView]) -> f64 {
    let mut ms = 0.0;
    for w in ended.windows(2) {
        let (before, after) = (w[0], w[1]);
        if before.preempted && after.number == before.number + 1 {
            let r = crate::resume::classify(&before.into(), &after.into());
            let hours = r.recomputed_instance_hours.unwrap_or(0.0);
            ms += hours * HOUR_MS / f64::from(before.count.max(1));
        }
    }
    if let Some(last) = ended.last().filter(|a| a.preempted) {
        let from = last.checkpoint_at.or(last.running_at);
        let ended_at = last.stopped_at.unwrap_or(last.started_at);
        ms += lost_instance_hours(from, ended_at, 1) * HOUR_MS;
    }
    ms
}

/// The interval between the checkpoints the attempts reported: the time from each attempt's
/// start of processes to its last checkpoint, over the checkpoints made in that time.
fn checkpoint_interval_s(ended: &[&AttemptView]) -> Option<u64> {
    let (mut ms, mut n) = (0i64, 0u64);
    for a in ended {
        if let (Some(from), Some(at)) = (a.running_at, a.checkpoint_at) {
            if a.checkpoints > 0 && at >= from {
                ms += at - from;
                n += u64::from(a.checkpoints);
            }
        }
    }
    (n > 0).then(|| ((ms as f64 / n as f64 / 1000.0).round() as u64).max(1))
}

crate::resume::run_from!(AttemptView<'_>);

#[cfg(test)]
mod tests {
    use super::*;
    use qm_executor::Steps;

    const S: i64 = 1000;
    /// The window's start; times below are seconds after it.
    const SINCE: i64 = 1_764_547_200_000;

    /// An ended attempt on 2 instances: capacity from `started`, processes `running..stopped`.
    fn attempt(number: u32, started: i64, running: i64, stopped: i64) -> ArchivedAttempt {
        ArchivedAttempt {
            number,
            instance_type: "ml.g5.xlarge".into(),
            count: 2,
            started_at: SINCE + started * S,
            running_at: Some(SINCE + running * S),
            stopped_at: Some(SINCE + stopped * S),
            preempted: false,
            status_reason: None,
            stop_at: None,
            checkpoint_at: None,
            preempted_for: None,
            steps: Steps::default(),
            checkpoints: 0,
            usage: None,
        }
    }

    fn job(
        id: &str,
        created: i64,
        stopped: Option<i64>,
        attempts: Vec<ArchivedAttempt>,
    ) -> ArchivedJob {
        ArchivedJob {
            job_id: id.into(),
            job_name: id.into(),
            job_queue: "q".into(),
            quota_share_name: "research".into(),
            status: if stopped.is_some() {
                "SUCCEEDED"
            } else {
                "RUNNING"
            }
            .into(),
            status_reason: None,
            scheduling_priority: 7,
            created_at: SINCE + created * S,
            stopped_at: stopped.map(|t| SINCE + t * S),
            preempted_count: attempts.iter().filter(|a| a.preempted).count() as u32,
            attempts,
            tags: Default::default(),
            principal: None,
        }
    }

    /// Submitted at 5 s; attempt 1 runs 10..1,010 s, checkpoints 4 times (the last at 810 s)
    /// and is preempted; attempt 2 runs 1,110..2,110 s and checkpoints 5 times (the last at
    /// 2,110 s). Both ran 1,000 s on 2 instances.
    fn preempted_once(steps: Option<(Steps, Steps)>) -> ArchivedJob {
        let mut a1 = attempt(1, 5, 10, 1010);
        a1.preempted = true;
        a1.checkpoint_at = Some(SINCE + 810 * S);
        a1.checkpoints = 4;
        let mut a2 = attempt(2, 1100, 1110, 2110);
        a2.checkpoint_at = Some(SINCE + 2110 * S);
        a2.checkpoints = 5;
        if let Some((s1, s2)) = steps {
            (a1.steps, a2.steps) = (s1, s2);
        }
        job("j", 5, Some(2110), vec![a1, a2])
    }

    #[test]
    fn work_is_the_run_time_less_the_steps_recomputed_after_the_preemption() {
        // Attempt 1 made steps 0..1,000 in 1,000 s; attempt 2 started at step 801: 199 steps,
        // 199 s, done twice. Work: 2,000 - 199 = 1,801 s.
        let steps = (
            Steps {
                first: Some(0),
                last: Some(1000),
                checkpoint: Some(800),
            },
            Steps {
                first: Some(801),
                last: Some(2000),
                checkpoint: None,
            },
        );
        let out = export([&preempted_once(Some(steps))], &ClassBook::default(), SINCE);
        assert_eq!(
            out.rows,
            vec![WorkloadJob {
                job_id: "j".into(),
                tenant: "research".into(),
                submit_time_s: 5,
                duration_s: 1801,
                gpus: 2,
                status: "SUCCEEDED".into(),
                priority: Some(7),
                instance_type: Some("ml.g5.xlarge".into()),
                // 800 s over 4 checkpoints, then 1,000 s over 5: 1,800 s / 9.
                checkpoint_interval_s: Some(200),
                class: None,
                real_completion_ms: Some(2_105_000),
                real_preemptions: Some(1),
                // 2 instances × (1,005 s + 1,010 s) of capacity held.
                real_instance_ms: Some(4_030_000),
            }]
        );
    }

    #[test]
    fn without_steps_the_work_since_the_last_checkpoint_is_recomputed() {
        // Attempt 1's last checkpoint was at 810 s and it ran until 1,010 s: 200 s redone.
        let out = export([&preempted_once(None)], &ClassBook::default(), SINCE);
        assert_eq!(out.rows[0].duration_s, 1800);
    }

    #[test]
    fn a_job_gets_the_contract_of_its_class_or_of_its_shares_default() {
        let classes = ClassBook {
            defined: [(
                "q".to_string(),
                [("urgent".to_string(), false), ("batch".to_string(), true)].into(),
            )]
            .into(),
            defaults: [(
                ("q".to_string(), "research".to_string()),
                "batch".to_string(),
            )]
            .into(),
        };
        let mut urgent = job("a", 0, Some(20), vec![attempt(1, 0, 0, 10)]);
        urgent.tags.insert("qm:class".into(), "urgent".into());
        let by_default = job("b", 1, Some(20), vec![attempt(1, 1, 1, 10)]);
        let mut other_share = job("c", 2, Some(20), vec![attempt(1, 2, 2, 10)]);
        other_share.quota_share_name = "prod".into();
        let out = export([&other_share, &by_default, &urgent], &classes, SINCE);
        let got: Vec<(&str, Option<&str>)> = out
            .rows
            .iter()
            .map(|r| (r.job_id.as_str(), r.class.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("a", Some("non-interruptible")),
                ("b", Some("interruptible")),
                ("c", None)
            ]
        );
        let mut csv = Vec::new();
        write_csv(&out.rows, &mut csv, Columns::All).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], COLUMNS.join(","));
        assert_eq!(
            lines[1],
            "a,research,0,10,2,SUCCEEDED,7,ml.g5.xlarge,,non-interruptible,20000,0,20000"
        );
        assert_eq!(
            lines[3],
            "c,prod,2,8,2,SUCCEEDED,7,ml.g5.xlarge,,,18000,0,16000"
        );
    }

    #[test]
    fn the_archive_adds_retired_jobs_of_the_window_and_queue_and_the_state_wins_a_tie() {
        let dir = tempfile::tempdir().unwrap();
        let archive = crate::archive::Archive::new(dir.path());
        let mut stale = job("a", 0, Some(20), vec![attempt(1, 0, 0, 10)]);
        stale.status = "FAILED".into();
        let retired = job("b", 1, Some(20), vec![attempt(1, 1, 1, 10)]);
        let before = job("c", -5, Some(20), vec![attempt(1, 0, 0, 10)]);
        let mut elsewhere = job("d", 2, Some(20), vec![attempt(1, 2, 2, 10)]);
        elsewhere.job_queue = "other".into();
        let mut retired_again = retired.clone();
        retired_again.status = "FAILED".into();
        archive
            .append(&[stale, retired, before, elsewhere])
            .unwrap();
        // A crash between archiving and retiring archives a job twice: the last copy counts.
        archive.append(&[retired_again]).unwrap();
        let facts = WorkloadFacts {
            jobs: vec![job("a", 0, Some(20), vec![attempt(1, 0, 0, 10)])],
            unfinished: 2,
            classes: ClassBook::default(),
        };
        let out = export_with_archive(&archive, facts, (SINCE, SINCE + 60 * S), Some("q")).unwrap();
        let got: Vec<(&str, &str)> = out
            .rows
            .iter()
            .map(|r| (r.job_id.as_str(), r.status.as_str()))
            .collect();
        assert_eq!(got, [("a", "SUCCEEDED"), ("b", "FAILED")]);
        assert_eq!(out.unfinished, 2);
    }

    #[test]
    fn unfinished_jobs_and_jobs_that_never_ran_are_counted_not_exported() {
        let running = job("r", 0, None, vec![attempt(1, 0, 0, 10)]);
        let never = job("n", 0, Some(30), Vec::new());
        let out = export([&running, &never], &ClassBook::default(), SINCE);
        assert_eq!((out.rows.len(), out.unfinished, out.never_ran), (0, 1, 1));
    }
}
