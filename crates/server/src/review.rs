//! The policy review (`qm report review`, `GET /qm/v1/review`): is lending working for us?
//! Per queue, share and class, over a window: completion times of jobs that ran only on their
//! own capacity against jobs that borrowed; what reclaims cost; how long owners waited for
//! capacity they had lent; how jobs recovered from preemptions; and, from the audit log, how
//! stable priorities and policies were. docs/review.md defines every figure.
//!
//! Like usage accounting (`usage.rs`) the review is a pure function ([`review`]) of facts: the
//! jobs' attempt records (live ones from the state, retired ones from the archive, in the one
//! shape [`ArchivedJob`]), each share's entitlement over time, and the audit log. Whether an
//! attempt borrowed and whether a share was lending are not recorded; they are derived here
//! from those facts with a sweep over attempt starts and stops per (queue, instance type),
//! applying DESIGN.md's identity (a share's use above its entitlement is borrowed) and the
//! core's split of what is lent (`ledger::lent_out`), as the usage report does.

use qm_core::ledger::Account;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use qm_api::qm::{AuditEntry, ResumeOutcome, UsageEvery};
use qm_api::review::{
    Completion, LimitChange, PolicyStability, RecoveryWeek, ReviewGroup, ReviewReport, UsePeriod,
};
use qm_api::ApiError;

use crate::archive::{Archive, ArchivedAttempt, ArchivedJob};
use crate::facts::ShareHistory;
pub use crate::facts::{ReviewFacts, ReviewJob, ShareRules};

const HOUR_MS: f64 = 3_600_000.0;
const DAY_MS: i64 = 86_400_000;
/// Most points of the owner reclaim delay's CDF in a report (the chart is ~1,100 px wide).
pub const MAX_CDF_POINTS: usize = 200;
/// The longest window one review covers (about five years: twenty quarterly reviews).
pub const MAX_WINDOW_MS: i64 = 1830 * DAY_MS;
/// How long before its audit entry a limit change's scheduling pass may have preempted: the
/// change, its pass and its preemptions are one batch, and the entry is recorded right after
/// the answer, a few milliseconds later on a healthy server.
pub const LIMIT_CHANGE_WINDOW_MS: i64 = 2_000;
/// The status reason's ending when a job failed on reaching its preemption limit (the core's
/// words, `pass.rs`).
const PREEMPTION_LIMIT_REASON: &str = "preemption retries exhausted";

/// What a review is asked for.
#[derive(Clone, Debug, Default)]
pub struct ReviewParams {
    /// Window start (epoch ms, inclusive).
    pub since: i64,
    /// Window end (epoch ms, exclusive).
    pub until: i64,
    /// Only this share's jobs.
    pub share: Option<String>,
    /// GPUs per instance, per instance type.
    pub gpus: BTreeMap<String, u32>,
}

/// The review of the state's `facts` plus the archive's jobs and audit entries.
pub fn review_with_archive(
    archive: &Archive,
    mut facts: ReviewFacts,
    p: &ReviewParams,
) -> Result<ReviewReport, ApiError> {
    let read = |what: &str, e: std::io::Error| ApiError::server(format!("reading {what}: {e}"));
    let archived = archive
        .read(p.since, i64::MAX)
        .map_err(|e| read("the archive of retired jobs", e))?;
    // A job both archived and still in the state (a crash between the two): the state wins.
    let live: BTreeSet<String> = facts.jobs.iter().map(|j| j.record.job_id.clone()).collect();
    facts.jobs.extend(
        archived
            .into_iter()
            .filter(|j| !live.contains(&j.job_id))
            .map(|record| ReviewJob { record, unit: None }),
    );
    let audit = archive
        .read_audit(p.since, p.until)
        .map_err(|e| read("the archive of audit entries", e))?;
    facts.audit.extend(audit.into_iter().map(|a| a.entry));
    Ok(review(&facts, p))
}

/// The review of `facts` for `p`.
pub fn review(facts: &ReviewFacts, p: &ReviewParams) -> ReviewReport {
    let in_window = |t: i64| t >= p.since && t < p.until;
    // The sweep needs every share's jobs (lending is between shares) even when one is asked.
    let mut clock = UseClock::new(
        crate::usage::periods(p.since, p.until, Some(use_period(p))),
        p.until.min(facts.now),
        p.share.clone(),
    );
    let flags = lending(&facts.jobs, &facts.history, facts.now, &mut clock);
    let weeks = crate::usage::periods(p.since, p.until, Some(UsageEvery::Week));
    let mut acc = Accumulator {
        groups: Vec::new(),
        weeks: vec![RecoveryWeek::default(); weeks.len()],
        week_starts: weeks.iter().map(|w| w.0).collect(),
        owner_delays: Vec::new(),
        notes: BTreeSet::new(),
    };
    let rules: HashMap<(&str, &str), &ShareRules> = facts
        .shares
        .iter()
        .map(|((q, s), r)| ((q.as_str(), s.as_str()), r))
        .collect();
    let mut index: BTreeMap<GroupKey, usize> = BTreeMap::new();
    let mut members: Vec<(&ArchivedJob, usize)> = Vec::with_capacity(facts.jobs.len());
    for (job, flags) in facts.jobs.iter().zip(flags) {
        let r = &job.record;
        if p.share.as_ref().is_some_and(|s| *s != r.quota_share_name) {
            continue;
        }
        let key = group_key(&rules, r);
        let g = *index.entry(key).or_insert_with(|| {
            acc.groups.push(Group::of(key));
            acc.groups.len() - 1
        });
        members.push((r, g));
        acc.job(job, g, flags, facts.now, p, &in_window);
    }
    if let Some(share) = p.share.as_ref().filter(|_| members.is_empty()) {
        if !facts.shares.keys().any(|(_, s)| s == share) {
            acc.notes.insert(format!(
                "quota share {share}: no job queue has a share of that name now, and no job of it is in the window; check --share"
            ));
        }
    }
    let policy = stability(facts, p, &members, &mut acc);
    let mut owner_delays = std::mem::take(&mut acc.owner_delays);
    owner_delays.sort_by(f64::total_cmp);
    ReviewReport {
        since: p.since,
        until: p.until,
        quota_share_name: p.share.clone(),
        policy,
        owner_reclaim_delay_cdf: cdf_points(&owner_delays),
        use_over_time: clock.finish(),
        weeks: std::iter::zip(acc.week_starts, acc.weeks)
            .map(|(start, w)| RecoveryWeek {
                week_start: start,
                ..w
            })
            .collect(),
        groups: finished_groups(index, &mut acc.groups),
        notes: acc.notes.into_iter().collect(),
    }
}

/// The groups' figures, in the order of their keys; a group of jobs that did nothing in the
/// window (they finished after it, say) has nothing to show.
fn finished_groups(index: BTreeMap<GroupKey, usize>, groups: &mut [Group]) -> Vec<ReviewGroup> {
    index
        .into_iter()
        .map(|(key, g)| {
            (
                Group::of(key).finish(),
                std::mem::take(&mut groups[g]).finish(),
            )
        })
        .filter(|(blank, group)| group != blank)
        .map(|(_, group)| group)
        .collect()
}

/// (queue, share, class).
type GroupKey<'a> = (&'a str, &'a str, Option<&'a str>);

/// A job's group: its class is the one it named, else its share's default now.
fn group_key<'a>(
    rules: &HashMap<(&str, &str), &'a ShareRules>,
    job: &'a ArchivedJob,
) -> GroupKey<'a> {
    let (queue, share) = (job.job_queue.as_str(), job.quota_share_name.as_str());
    let class = job
        .tags
        .get(qm_api::class::TAG_CLASS)
        .map(String::as_str)
        .or_else(|| rules.get(&(queue, share))?.default_class.as_deref());
    (queue, share, class)
}

/// A group's figures while they are gathered.
#[derive(Default)]
struct Group {
    out: ReviewGroup,
    own_only: Vec<f64>,
    borrowed: Vec<f64>,
    owner_delays: Vec<f64>,
    reclaimed_jobs: u64,
}

impl Group {
    fn of((queue, share, class): GroupKey) -> Self {
        Group {
            out: ReviewGroup {
                job_queue: queue.to_string(),
                quota_share_name: share.to_string(),
                class: class.map(String::from),
                ..ReviewGroup::default()
            },
            ..Group::default()
        }
    }

    fn finish(mut self) -> ReviewGroup {
        let completion = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            Completion {
                jobs: v.len() as u64,
                p50_seconds: nearest_rank(v, 0.50),
                p95_seconds: nearest_rank(v, 0.95),
            }
        };
        self.out.own_only = completion(&mut self.own_only);
        self.out.borrowed = completion(&mut self.borrowed);
        let d = &mut self.owner_delays;
        d.sort_by(f64::total_cmp);
        let delay = &mut self.out.owner_reclaim_delay;
        delay.count = d.len() as u64;
        delay.p50_seconds = nearest_rank(d, 0.50);
        delay.p95_seconds = nearest_rank(d, 0.95);
        delay.max_seconds = d.last().copied();
        self.out.reclaim_loss.jobs = self.reclaimed_jobs;
        let loss = &mut self.out.reclaim_loss;
        loss.requeued_hours = round(loss.requeued_hours);
        loss.recomputed_hours = round(loss.recomputed_hours);
        self.out.recovery.recomputed_gpu_hours = round(self.out.recovery.recomputed_gpu_hours);
        self.out
    }
}

/// The nearest-rank percentile `q` of `sorted`; `None` when empty.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
    sorted.get(i - 1).copied()
}

/// Hours to the millisecond's precision, so that sums do not show float noise.
fn round(h: f64) -> f64 {
    (h * 1e6).round() / 1e6
}

struct Accumulator {
    groups: Vec<Group>,
    weeks: Vec<RecoveryWeek>,
    week_starts: Vec<i64>,
    owner_delays: Vec<f64>,
    notes: BTreeSet<String>,
}

impl Accumulator {
    fn group(&mut self, g: usize) -> &mut Group {
        &mut self.groups[g]
    }

    fn week(&mut self, t: i64) -> Option<&mut RecoveryWeek> {
        let i = self
            .week_starts
            .partition_point(|&s| s <= t)
            .checked_sub(1)?;
        self.weeks.get_mut(i)
    }

    /// One job's figures: completion, owner delay, then its attempts.
    fn job(
        &mut self,
        job: &ReviewJob,
        g: usize,
        flags: Flags,
        now: i64,
        p: &ReviewParams,
        in_window: &dyn Fn(i64) -> bool,
    ) {
        let r = &job.record;
        let group = self.group(g);
        if let Some(done) = r.stopped_at.filter(|&t| in_window(t)) {
            if r.status == "SUCCEEDED" {
                let seconds = (done - r.created_at).max(0) as f64 / 1000.0;
                if flags.borrowed {
                    group.borrowed.push(seconds);
                } else {
                    group.own_only.push(seconds);
                }
            }
            let limit = r.status_reason.as_deref().unwrap_or("");
            if r.status == "FAILED" && limit.ends_with(PREEMPTION_LIMIT_REASON) {
                group.out.recovery.reached_preemption_limit += 1;
            }
        }
        if flags.lent_at_submit && in_window(r.created_at) {
            match r.attempts.first() {
                Some(a) => {
                    let ran = a.running_at.unwrap_or(a.started_at);
                    let seconds = (ran - r.created_at).max(0) as f64 / 1000.0;
                    group.owner_delays.push(seconds);
                    self.owner_delays.push(seconds);
                }
                None if r.stopped_at.is_none() => group.out.owner_reclaim_delay.still_waiting += 1,
                None => {}
            }
        }
        self.attempts(r, g, now, p, in_window);
    }

    /// Preemptions decided in the window and the resumes started in it.
    fn attempts(
        &mut self,
        r: &ArchivedJob,
        g: usize,
        now: i64,
        p: &ReviewParams,
        in_window: &dyn Fn(i64) -> bool,
    ) {
        let mut preempted_here = false;
        let mut reclaimed_here = false;
        for (i, a) in r.attempts.iter().enumerate() {
            if !a.preempted {
                continue;
            }
            let next = r.attempts.get(i + 1).filter(|n| n.number == a.number + 1);
            let resume = next.map(|n| crate::resume::classify(&a.into(), &n.into()));
            if let (Some(n), Some(rec)) = (next, &resume) {
                if in_window(n.started_at) {
                    self.resume(g, n, rec, p);
                }
            }
            let decided = a.stop_at.or(a.stopped_at).unwrap_or(a.started_at);
            if !in_window(decided) {
                continue;
            }
            preempted_here = true;
            if let Some(w) = self.week(decided) {
                w.preemptions += 1;
            }
            let group = self.group(g);
            group.out.recovery.preemptions += 1;
            match &a.preempted_for {
                Some((share, _)) if *share != r.quota_share_name => {
                    group.out.recovery.reclaims += 1;
                    reclaimed_here = true;
                    let loss = &mut group.out.reclaim_loss;
                    loss.reclaims += 1;
                    // Re-queued until the next attempt; a job that ended instead (its
                    // preemption limit, a termination) waited for nothing.
                    let back = match (next, r.stopped_at) {
                        (Some(n), _) => n.started_at,
                        (None, Some(_)) => decided,
                        (None, None) => now,
                    };
                    loss.requeued_hours += (back - decided).max(0) as f64 / HOUR_MS;
                    let redone = resume.and_then(|x| x.recomputed_instance_hours);
                    loss.recomputed_hours += redone.unwrap_or(0.0) / f64::from(a.count.max(1));
                }
                Some(_) => group.out.recovery.in_share += 1,
                None => group.out.recovery.drills += 1,
            }
        }
        let group = self.group(g);
        if reclaimed_here {
            group.reclaimed_jobs += 1;
        }
        if preempted_here && r.preempted_count >= 3 {
            group.out.recovery.preempted_three_times_or_more += 1;
        }
    }

    fn resume(
        &mut self,
        g: usize,
        next: &ArchivedAttempt,
        rec: &qm_api::qm::ResumeRecord,
        p: &ReviewParams,
    ) {
        let gpus = match p.gpus.get(&next.instance_type) {
            Some(&g) => f64::from(g),
            None => {
                self.notes.insert(format!(
                    "{}: no gpus_per_instance in the server's [[executor.pool]] configuration, so its recomputed GPU-hours count 0",
                    next.instance_type
                ));
                0.0
            }
        };
        let outcome = rec.outcome;
        if let Some(w) = self.week(next.started_at) {
            bump(w, outcome);
        }
        let recovery = &mut self.group(g).out.recovery;
        match outcome {
            ResumeOutcome::Resumed => recovery.resumed += 1,
            ResumeOutcome::Restarted => recovery.restarted += 1,
            ResumeOutcome::Unknown => recovery.unknown += 1,
        }
        recovery.recomputed_gpu_hours += rec.recomputed_instance_hours.unwrap_or(0.0) * gpus;
    }
}

fn bump(w: &mut RecoveryWeek, outcome: ResumeOutcome) {
    match outcome {
        ResumeOutcome::Resumed => w.resumed += 1,
        ResumeOutcome::Restarted => w.restarted += 1,
        ResumeOutcome::Unknown => w.unknown += 1,
    }
}

/// What the sweep found about one job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// One of its attempts started while its share held more than its entitlement.
    pub borrowed: bool,
    /// When it was submitted its share was lending part of its entitlement to others.
    pub lent_at_submit: bool,
}

/// A change or a question at an instant of one (queue, instance type). At one instant,
/// capacity is released before an entitlement changes, a submission sees the result, and
/// starts come last (each sees itself).
#[derive(Clone, Copy)]
enum Event {
    End { share: u32, count: u32 },
    Epoch { share: u32, epoch: u32 },
    Submit { share: u32, job: u32 },
    Start { share: u32, count: u32, job: u32 },
}

impl Event {
    fn order(&self) -> u8 {
        match self {
            Event::End { .. } => 0,
            Event::Epoch { .. } => 1,
            Event::Submit { .. } => 2,
            Event::Start { .. } => 3,
        }
    }
}

/// A share with no entitlement and no use, before the sweep meets it.
const IDLE: Account = Account::recorded(0, 0, false);

/// Per job, in order: whether it borrowed and whether its share was lending when it was
/// submitted.
/// One sweep over every attempt start and stop, per (queue, instance type).
pub fn lending<'a>(
    jobs: &'a [ReviewJob],
    history: &'a ShareHistory,
    now: i64,
    clock: &mut UseClock,
) -> Vec<Flags> {
    let mut units: Names<'a> = HashMap::new();
    let mut shares: Names<'a> = HashMap::new();
    let mut events: Vec<(u32, i64, Event)> = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let r = &job.record;
        let share = intern(&mut shares, (&r.job_queue, &r.quota_share_name));
        let unit = r.attempts.first().map(|a| a.instance_type.as_str());
        if let Some(u) = unit.or(job.unit.as_deref()) {
            let unit = intern(&mut units, (&r.job_queue, u));
            let job = j as u32;
            events.push((unit, r.created_at, Event::Submit { share, job }));
        }
        for a in &r.attempts {
            let unit = intern(&mut units, (&r.job_queue, &a.instance_type));
            let (count, job) = (a.count, j as u32);
            let end = a.stopped_at.unwrap_or(now.max(a.started_at));
            events.push((unit, a.started_at, Event::Start { share, count, job }));
            events.push((unit, end, Event::End { share, count }));
        }
    }
    let mut epochs: Vec<(&str, &crate::usage::ShareEpoch)> = Vec::new();
    for ((queue, name), list) in history {
        let share = intern(&mut shares, (queue, name));
        for e in list {
            for unit_type in e.limits.keys().map(String::as_str) {
                let unit = intern(&mut units, (queue, unit_type));
                let epoch = epochs.len() as u32;
                events.push((unit, e.from, Event::Epoch { share, epoch }));
                epochs.push((unit_type, e));
            }
        }
    }
    events.sort_by_key(|&(unit, t, e)| (unit, t, e.order()));
    let mut counted = vec![false; shares.len()];
    for (&(_, name), &id) in &shares {
        counted[id as usize] = clock.share.as_ref().is_none_or(|s| s == name);
    }
    clock.counted = counted;
    sweep(&events, &epochs, jobs.len(), clock)
}

/// Own and borrowed instance-hours per period, added up by the lending sweep between its
/// events (DESIGN.md's identity: `own = min(used, entitled)`, `borrowed = used - own`), as the
/// usage report counts them; without building the usage report's per-interval rows, which
/// would not fit in memory for a million jobs.
#[derive(Clone, Debug, Default)]
pub struct UseClock {
    periods: Vec<(i64, i64)>,
    /// Nothing is used after the data's time.
    end: i64,
    share: Option<String>,
    /// Per interned share: whether its use is added (the share asked for, or all).
    counted: Vec<bool>,
    own: Vec<f64>,
    borrowed: Vec<f64>,
}

impl UseClock {
    /// A clock of `periods` (sorted, contiguous) up to `end`, of `share`'s use or all shares'.
    pub fn new(periods: Vec<(i64, i64)>, end: i64, share: Option<String>) -> Self {
        let n = periods.len();
        UseClock {
            periods,
            end,
            share,
            counted: Vec::new(),
            own: vec![0.0; n],
            borrowed: vec![0.0; n],
        }
    }

    /// Adds the use of `accounts` over `[from, to)`.
    fn add(&mut self, accounts: &BTreeMap<u32, Account>, from: i64, to: i64) {
        let to = to.min(self.end);
        let first = self.periods.partition_point(|&(_, b)| b <= from);
        for i in first..self.periods.len() {
            let (a, b) = self.periods[i];
            let (x, y) = (from.max(a), to.min(b));
            if a >= to {
                break;
            }
            if x >= y {
                continue;
            }
            let hours = (y - x) as f64 / HOUR_MS;
            for (&share, acct) in accounts {
                if !self.counted.get(share as usize).copied().unwrap_or(false) {
                    continue;
                }
                self.own[i] += f64::from(acct.own()) * hours;
                self.borrowed[i] += f64::from(acct.borrowed()) * hours;
            }
        }
    }

    /// The periods with their hours.
    pub fn finish(self) -> Vec<UsePeriod> {
        let sums = self.own.into_iter().zip(self.borrowed);
        self.periods
            .into_iter()
            .zip(sums)
            .map(|((a, b), (own, borrowed))| UsePeriod {
                period_start: a,
                period_end: b,
                own_instance_hours: round(own),
                borrowed_instance_hours: round(borrowed),
            })
            .collect()
    }
}

/// Interned (queue, name) pairs: small numbers sort and compare faster than strings.
type Names<'a> = HashMap<(&'a str, &'a str), u32>;

fn intern<'a>(names: &mut Names<'a>, key: (&'a str, &'a str)) -> u32 {
    let next = names.len() as u32;
    *names.entry(key).or_insert(next)
}

fn sweep(
    events: &[(u32, i64, Event)],
    epochs: &[(&str, &crate::usage::ShareEpoch)],
    jobs: usize,
    clock: &mut UseClock,
) -> Vec<Flags> {
    let mut flags: Vec<Flags> = vec![Flags::default(); jobs];
    // The accounts of the unit being swept, by share, as they have been since `last`.
    let mut accounts: BTreeMap<u32, Account> = BTreeMap::new();
    let mut current = None;
    let mut last = i64::MIN;
    for &(unit, t, e) in events {
        if current != Some(unit) {
            accounts.clear();
            current = Some(unit);
        } else if t > last {
            clock.add(&accounts, last, t);
        }
        last = t;
        match e {
            Event::End { share, count } => {
                let a = accounts.entry(share).or_insert(IDLE);
                a.usage = a.usage.saturating_sub(count);
            }
            Event::Epoch { share, epoch } => {
                let (unit_type, e) = epochs[epoch as usize];
                let a = accounts.entry(share).or_insert(IDLE);
                let usage = a.usage;
                *a = Account::recorded(
                    e.limits.get(unit_type).copied().unwrap_or(0),
                    usage,
                    e.lends,
                );
            }
            Event::Submit { share, job } => {
                flags[job as usize].lent_at_submit |= lends_now(&accounts, share);
            }
            Event::Start { share, count, job } => {
                let a = accounts.entry(share).or_insert(IDLE);
                a.usage += count;
                flags[job as usize].borrowed |= a.borrowed() > 0;
            }
        }
    }
    flags
}

/// Whether `share` lends part of its entitlement now, as the core splits what is borrowed.
fn lends_now(accounts: &BTreeMap<u32, Account>, share: u32) -> bool {
    let Some(index) = accounts.keys().position(|&s| s == share) else {
        return false;
    };
    let ledger: Vec<Account> = accounts.values().copied().collect();
    qm_core::ledger::lent_out(&ledger)[index] > 0.0
}

/// Audit figures: per group (priority changes, terminations by others) and overall.
fn stability(
    facts: &ReviewFacts,
    p: &ReviewParams,
    members: &[(&ArchivedJob, usize)],
    acc: &mut Accumulator,
) -> PolicyStability {
    let mut reader = AuditReader {
        facts,
        members,
        by_id: None,
        one_share: p.share.is_some(),
        out: PolicyStability::default(),
        terminated: BTreeSet::new(),
        unreadable: 0,
        preemptions: None,
    };
    let mut entries: Vec<&AuditEntry> = facts
        .audit
        .iter()
        .filter(|e| e.at >= p.since && e.at < p.until)
        .collect();
    entries.sort_by_key(|e| e.at);
    for e in entries {
        reader.entry(e, acc);
    }
    if reader.unreadable > 0 {
        acc.notes.insert(format!(
            "{} audit entries of job changes could not be read (their request was clipped): not counted",
            reader.unreadable
        ));
    }
    reader.out
}

/// Reads the audit entries of the window, oldest first.
struct AuditReader<'a> {
    facts: &'a ReviewFacts,
    /// The jobs reviewed, with their groups.
    members: &'a [(&'a ArchivedJob, usize)],
    /// The same by id: only needed once a job changed, so built at the first.
    by_id: Option<HashMap<&'a str, (&'a ArchivedJob, usize)>>,
    one_share: bool,
    out: PolicyStability,
    /// Jobs already counted as terminated by someone else.
    terminated: BTreeSet<String>,
    unreadable: u64,
    /// When preemptions were decided: only needed once a limit changed.
    preemptions: Option<Vec<i64>>,
}

impl<'a> AuditReader<'a> {
    /// The job `id` and its group, if it is reviewed.
    fn job(&mut self, id: &str) -> Option<(&'a ArchivedJob, usize)> {
        let members = self.members;
        let by_id = self.by_id.get_or_insert_with(|| {
            members
                .iter()
                .map(|&(r, g)| (r.job_id.as_str(), (r, g)))
                .collect()
        });
        by_id.get(id).copied()
    }

    fn entry(&mut self, e: &AuditEntry, acc: &mut Accumulator) {
        let action = e.action.to_ascii_lowercase();
        let job_change = matches!(
            action.as_str(),
            "updateservicejob" | "terminateservicejob" | "terminateservicejobs"
        );
        if job_change {
            match serde_json::from_str::<serde_json::Value>(&e.details) {
                Ok(body) if action == "updateservicejob" => self.priority(e, &body, acc),
                Ok(body) => self.termination(e, &body, acc),
                Err(_) => self.unreadable += 1,
            }
        } else if action == "apply" {
            self.out.applies += 1;
        } else if POLICY_ACTIONS.contains(&action.as_str()) {
            self.policy_edit(e, &action);
        }
    }

    fn priority(&mut self, e: &AuditEntry, body: &serde_json::Value, acc: &mut Accumulator) {
        let found = job_id(body.get("jobId")).and_then(|id| self.job(id));
        let Some((job, g)) = found else {
            // With --share, another share's job is simply not this review's.
            if !self.one_share {
                self.out.priority_changes_unattributed += 1;
            }
            return;
        };
        let priority = body.get("schedulingPriority").and_then(|v| v.as_i64());
        let class = acc.groups[g].out.class.as_deref();
        let above = priority.is_some_and(|v| above_default(self.facts, job, class, v));
        let s = &mut acc.group(g).out.stability;
        s.priority_changes += 1;
        s.priority_changes_above_default += u64::from(above);
        *s.priority_changes_by.entry(e.actor.clone()).or_default() += 1;
    }

    fn termination(&mut self, e: &AuditEntry, body: &serde_json::Value, acc: &mut Accumulator) {
        let ids: Vec<&str> = match body.get("jobs").and_then(|v| v.as_array()) {
            Some(list) => list.iter().filter_map(|v| job_id(Some(v))).collect(),
            None => job_id(body.get("jobId")).into_iter().collect(),
        };
        for id in ids {
            let Some((job, g)) = self.job(id) else {
                continue;
            };
            let by_other = job.principal.as_deref().is_some_and(|s| s != e.actor);
            if by_other && self.terminated.insert(id.to_string()) {
                acc.group(g).out.stability.terminations_by_others += 1;
            }
        }
    }

    fn policy_edit(&mut self, e: &AuditEntry, action: &str) {
        let out = &mut self.out;
        out.policy_edits += 1;
        *out.policy_edits_by.entry(e.actor.clone()).or_default() += 1;
        *out.policy_edits_by_action
            .entry(action.to_string())
            .or_default() += 1;
        if !LIMIT_ACTIONS.contains(&action) {
            return;
        }
        let jobs = &self.facts.jobs;
        let times = self
            .preemptions
            .get_or_insert_with(|| preemption_times(jobs));
        let preemptions = preempted_by_change(times, e.at);
        if preemptions > 0 {
            self.out.limit_changes_that_preempted.push(LimitChange {
                at: e.at,
                actor: e.actor.clone(),
                action: action.to_string(),
                summary: e.summary.clone(),
                preemptions,
            });
        }
    }
}

/// Operations that change policy: environments, queues, scheduling policies, quota shares.
const POLICY_ACTIONS: [&str; 12] = [
    "createserviceenvironment",
    "updateserviceenvironment",
    "deleteserviceenvironment",
    "createjobqueue",
    "updatejobqueue",
    "deletejobqueue",
    "createschedulingpolicy",
    "updateschedulingpolicy",
    "deleteschedulingpolicy",
    "createquotashare",
    "updatequotashare",
    "deletequotashare",
];

/// Of those, the ones that can change a limit or an entitlement.
const LIMIT_ACTIONS: [&str; 6] = [
    "updateserviceenvironment",
    "deleteserviceenvironment",
    "updatejobqueue",
    "createquotashare",
    "updatequotashare",
    "deletequotashare",
];

/// A job id from a request field: an id or an ARN ending in one.
fn job_id(v: Option<&serde_json::Value>) -> Option<&str> {
    let s = v?.as_str()?;
    s.rsplit('/').next()
}

/// Whether `priority` is above what the job's class or share allows submitters.
fn above_default(
    facts: &ReviewFacts,
    job: &ArchivedJob,
    class: Option<&str>,
    priority: i64,
) -> bool {
    let Some(rules) = facts
        .shares
        .get(&(job.job_queue.clone(), job.quota_share_name.clone()))
    else {
        return false;
    };
    let class_max = class.and_then(|c| rules.class_max_priority.get(c));
    [class_max.copied(), rules.max_priority]
        .into_iter()
        .flatten()
        .any(|max| priority > i64::from(max))
}

/// When each preemption that was not a drill was decided, sorted.
fn preemption_times(jobs: &[ReviewJob]) -> Vec<i64> {
    let mut times: Vec<i64> = jobs
        .iter()
        .flat_map(|j| &j.record.attempts)
        .filter(|a| a.preempted && a.preempted_for.is_some())
        .filter_map(|a| a.stop_at)
        .collect();
    times.sort_unstable();
    times
}

/// Of `times` (sorted), those in the scheduling pass just before an audit entry at `at`.
fn preempted_by_change(times: &[i64], at: i64) -> u64 {
    let from = times.partition_point(|&t| t < at - LIMIT_CHANGE_WINDOW_MS);
    let to = times.partition_point(|&t| t <= at);
    to.saturating_sub(from) as u64
}

/// The period of own against borrowed use: a UTC day, or a week for windows over 62 days.
fn use_period(p: &ReviewParams) -> UsageEvery {
    if p.until - p.since > 62 * DAY_MS {
        UsageEvery::Week
    } else {
        UsageEvery::Day
    }
}

/// At most [`MAX_CDF_POINTS`] points of the CDF of `sorted`: `(value, fraction of values at
/// most it)`, at evenly spaced ranks, the last always.
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let m = n.min(MAX_CDF_POINTS);
    (1..=m)
        .map(|k| {
            let rank = (k * n).div_ceil(m);
            (sorted[rank - 1], round(rank as f64 / n as f64))
        })
        .collect()
}

impl crate::state::State {
    /// The state's part of the review's facts: its jobs that had not finished before
    /// `since` (waiting ones too: an owner may still be waiting), entitlements, the audit
    /// entries it keeps, and the shares' classes and priority ceilings now.
    pub fn review_facts(&self, since: i64, now: i64) -> ReviewFacts {
        let jobs = self
            .jobs
            .values()
            .filter(|r| r.stopped_at.is_none_or(|t| t >= since))
            .map(|r| {
                let mut record = ArchivedJob::of(r);
                if let Some(live) = r.live.as_ref().filter(|l| !l.preempted) {
                    record.attempts.push(ArchivedAttempt::of(live));
                }
                ReviewJob {
                    record,
                    unit: Some(self.unit_of(r).0),
                }
            })
            .collect();
        let mut shares = BTreeMap::new();
        for (queue, q) in &self.queues {
            let class_max_priority: BTreeMap<String, i32> = qm_api::class::defined(&q.tags)
                .into_iter()
                .filter_map(|(name, def)| Some((name, i32::try_from(def.max_priority?).ok()?)))
                .collect();
            for (name, s) in &q.shares {
                let rules = ShareRules {
                    default_class: s.tags.get(qm_api::class::TAG_DEFAULT_CLASS).cloned(),
                    max_priority: s
                        .tags
                        .get(qm_api::validate::TAG_MAX_PRIORITY)
                        .and_then(|m| m.parse().ok()),
                    class_max_priority: class_max_priority.clone(),
                };
                shares.insert((queue.clone(), name.clone()), rules);
            }
        }
        ReviewFacts {
            jobs,
            history: self.share_history.clone(),
            audit: self.audit.clone(),
            shares,
            now: now.max(self.now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(start: i64, stop: i64, count: u32) -> ArchivedAttempt {
        ArchivedAttempt {
            number: 1,
            instance_type: "u".into(),
            count,
            started_at: start,
            running_at: Some(start),
            stopped_at: Some(stop),
            preempted: false,
            status_reason: None,
            stop_at: None,
            checkpoint_at: None,
            preempted_for: None,
            steps: qm_executor::Steps::default(),
            checkpoints: 0,
            usage: None,
        }
    }

    fn job(id: &str, share: &str, created: i64, attempts: Vec<ArchivedAttempt>) -> ReviewJob {
        ReviewJob {
            record: ArchivedJob {
                job_id: id.into(),
                job_name: id.into(),
                job_queue: "q".into(),
                quota_share_name: share.into(),
                status: "SUCCEEDED".into(),
                status_reason: None,
                scheduling_priority: 0,
                created_at: created,
                stopped_at: attempts.last().and_then(|a| a.stopped_at),
                attempts,
                preempted_count: 0,
                tags: BTreeMap::new(),
                principal: None,
            },
            unit: Some("u".into()),
        }
    }

    fn history(shares: &[(&str, u32, bool)]) -> ShareHistory {
        shares
            .iter()
            .map(|&(name, limit, lends)| {
                let epoch = crate::usage::ShareEpoch {
                    from: 0,
                    limits: [("u".to_string(), limit)].into(),
                    lends,
                };
                (("q".to_string(), name.to_string()), vec![epoch])
            })
            .collect()
    }

    #[test]
    fn capacity_released_at_the_instant_another_attempt_starts_is_not_counted_twice() {
        let jobs = [
            job("one", "A", 0, vec![attempt(0, 10, 2)]),
            job("two", "A", 0, vec![attempt(10, 20, 2)]),
        ];
        let h = history(&[("A", 2, true)]);
        let flags = lending(&jobs, &h, 20, &mut UseClock::default());
        assert!(!flags[0].borrowed && !flags[1].borrowed, "{flags:?}");
    }

    #[test]
    fn an_attempt_above_the_entitlement_borrowed_and_only_a_lending_owner_waits_for_it() {
        let jobs = [
            job("big", "B", 0, vec![attempt(0, 100, 3)]),
            job("lender", "A", 50, vec![attempt(100, 110, 1)]),
            job("reserver", "C", 50, vec![attempt(60, 70, 1)]),
        ];
        let h = history(&[("A", 1, true), ("B", 2, true), ("C", 1, false)]);
        let flags = lending(&jobs, &h, 200, &mut UseClock::default());
        let [big, lender, reserver] = flags[..] else {
            panic!("{flags:?}")
        };
        assert!(big.borrowed);
        assert!(lender.lent_at_submit, "A's instance was B's third");
        assert!(!reserver.lent_at_submit, "C reserves: it lends nothing");
    }
}
