//! Usage accounting: who used, borrowed and lent what over a time window (`qm report usage`,
//! `GET /qm/v1/usage/report`, the dashboard's history).
//!
//! The figures are computed from facts only: every attempt's capacity interval (granted to
//! processes gone), its preemption and last checkpoint, and each share's entitlement over
//! time ([`ShareEpoch`]). Live jobs come from the state, retired ones from the archive, so a
//! report is the same before and after a restart or a retirement. The computation is pure
//! ([`report`]): a sweep over the instants where anything changes, per (queue, instance type),
//! applying DESIGN.md's identity `own = min(U, L)`, `borrowed = U - own`, `idle = L - own`
//! in every interval, and splitting what others borrow over the lenders with the core's
//! `ledger::lent_out`, the same split the live `/qm/v1/usage` shows.

use std::collections::{BTreeMap, BTreeSet};

use crate::facts::{UsageAttempt, UsageJob};
// The entitlement history is the report's input: its callers name it here.
pub use crate::facts::{ShareEpoch, ShareHistory};
use qm_api::qm::{Percentiles, UsageBy, UsageEvery, UsageHours, UsageReport, UsageRow};
use qm_core::ledger::Account;

const HOUR_MS: f64 = 3_600_000.0;
const DAY_MS: i64 = 86_400_000;

/// The instance-hours a preempted attempt lost: its instances times the time from
/// `worked_from` (its last checkpoint, else its start; `None`: nothing ran) to `ended`.
pub(crate) fn lost_instance_hours(worked_from: Option<i64>, ended: i64, count: u32) -> f64 {
    let lost_ms = worked_from.map_or(0, |w| (ended - w).max(0)) as f64;
    lost_ms / HOUR_MS * f64::from(count)
}

/// What a report is asked for.
#[derive(Clone, Debug)]
pub struct UsageParams {
    /// Window start (epoch ms, inclusive).
    pub since: i64,
    /// Window end (epoch ms, exclusive).
    pub until: i64,
    /// The time of the data: attempts still holding capacity count up to here.
    pub now: i64,
    /// Grouping.
    pub by: UsageBy,
    /// Period length, if split.
    pub every: Option<UsageEvery>,
    /// GPUs per instance, per instance type.
    pub gpus: BTreeMap<String, u32>,
}

/// The most periods one report may have (a year of hours), so a careless window cannot make
/// the server build millions of rows.
pub const MAX_PERIODS: usize = 366 * 24;

/// At most how many periods `[since, until)` has (without building them).
pub fn period_count(since: i64, until: i64, every: Option<UsageEvery>) -> usize {
    let len = match every {
        None => return 1,
        Some(UsageEvery::Hour) => 3_600_000,
        Some(UsageEvery::Day) => DAY_MS,
        Some(UsageEvery::Week) => 7 * DAY_MS,
    };
    let span = until.checked_sub(since).unwrap_or(i64::MAX).max(0);
    usize::try_from(span / len + 2).unwrap_or(usize::MAX)
}

/// The report of the state's `facts` plus the archive's jobs, for `p`.
pub fn report_with_archive(
    archive: &crate::archive::Archive,
    facts: crate::facts::UsageFacts,
    p: &UsageParams,
) -> Result<UsageReport, qm_api::ApiError> {
    let archived = archive.read(p.since, i64::MAX).map_err(|e| {
        qm_api::ApiError::server(format!("reading the archive of retired jobs: {e}"))
    })?;
    let mut jobs: BTreeMap<String, UsageJob> = archived
        .iter()
        .map(|j| (j.job_id.clone(), j.usage()))
        .collect();
    // A job both archived and still in the state (a crash between the two): the state wins.
    for job in facts.jobs {
        jobs.insert(job.id.clone(), job);
    }
    let jobs: Vec<UsageJob> = jobs.into_values().collect();
    Ok(report(&jobs, &facts.history, p))
}

/// The period boundaries of `[since, until)`.
pub fn periods(since: i64, until: i64, every: Option<UsageEvery>) -> Vec<(i64, i64)> {
    let Some(every) = every else {
        return vec![(since, until)];
    };
    let start_of = |t: i64| match every {
        UsageEvery::Hour => t.div_euclid(3_600_000) * 3_600_000,
        UsageEvery::Day => t.div_euclid(DAY_MS) * DAY_MS,
        // 1970-01-01 was a Thursday: Mondays are days d with (d + 3) % 7 == 0.
        UsageEvery::Week => {
            let d = t.div_euclid(DAY_MS);
            (d - (d + 3).rem_euclid(7)) * DAY_MS
        }
    };
    let len = match every {
        UsageEvery::Hour => 3_600_000,
        UsageEvery::Day => DAY_MS,
        UsageEvery::Week => 7 * DAY_MS,
    };
    let mut out = Vec::new();
    let mut t = since;
    while t < until {
        let end = start_of(t).saturating_add(len).min(until);
        out.push((t, end));
        t = end;
    }
    out
}

/// A row's key: (queue, share, principal, instance type), the parts the grouping uses.
type Key = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

#[derive(Default)]
struct Cell {
    instance: UsageHours,
    gpu: UsageHours,
    suffered: u64,
    caused: u64,
    lost_instance: f64,
    lost_gpu: f64,
    starts: u64,
    delays: Vec<f64>,
    cpu_ms: u64,
    peak_memory: Option<u64>,
    /// Sampled GPU utilisation (percent) times the GPU-hours it was seen over, and those hours.
    gpu_busy: f64,
    gpu_sampled_hours: f64,
}

/// The report of `jobs` under `history`. Jobs must be unique by id.
pub fn report(jobs: &[UsageJob], history: &ShareHistory, p: &UsageParams) -> UsageReport {
    let mut tally = Tally {
        p,
        periods: periods(p.since, p.until, p.every),
        cells: BTreeMap::new(),
        notes: BTreeSet::new(),
        principal_of: jobs
            .iter()
            .map(|j| (j.id.as_str(), j.principal.as_deref().unwrap_or("unknown")))
            .collect(),
    };
    // Events: preemptions, lost work, starts and their waits.
    for job in jobs {
        tally.job_events(job);
    }
    // Hours: one sweep per (queue, instance type).
    for (queue, unit) in &units(jobs, history) {
        tally.hours(queue, unit, jobs, history);
    }
    let Tally {
        periods,
        cells,
        notes,
        ..
    } = tally;
    let rows = cells
        .into_iter()
        .map(|((i, key), c)| usage_row(periods[i], key, c))
        .collect();
    UsageReport {
        since: p.since,
        until: p.until,
        by: p.by,
        every: p.every,
        rows,
        notes: notes.into_iter().collect(),
    }
}

/// A report's cells, per period and key, while they are gathered.
struct Tally<'a> {
    p: &'a UsageParams,
    periods: Vec<(i64, i64)>,
    cells: BTreeMap<(usize, Key), Cell>,
    notes: BTreeSet<String>,
    /// Who submitted each job, by id.
    principal_of: BTreeMap<&'a str, &'a str>,
}

impl Tally<'_> {
    /// GPUs per instance of type `t`; 0, with a note, where the config does not say.
    fn gpus(&mut self, t: &str) -> f64 {
        match self.p.gpus.get(t) {
            Some(&g) => f64::from(g),
            None => {
                self.notes.insert(format!(
                    "{t}: no gpus_per_instance in the server's [[executor.pool]] configuration, so its GPU-hours count 0"
                ));
                0.0
            }
        }
    }

    /// The period holding `t`, found by binary search: periods are sorted and contiguous.
    fn period_of(&self, t: i64) -> Option<usize> {
        let i = self.periods.partition_point(|&(_, b)| b <= t);
        self.periods.get(i).filter(|&&(a, _)| t >= a).map(|_| i)
    }

    /// The events of `job`'s attempts: starts and the waits before them, what they used,
    /// and their preemptions.
    fn job_events(&mut self, job: &UsageJob) {
        let principal = self.principal_of[job.id.as_str()];
        let mut runnable_since = job.created_at;
        for a in &job.attempts {
            let key = key_of(
                self.p.by,
                &job.queue,
                &job.share,
                principal,
                &a.instance_type,
            );
            let g = self.gpus(&a.instance_type);
            if let Some(i) = self.period_of(a.started_at) {
                let cell = self.cells.entry((i, key.clone())).or_default();
                cell.starts += 1;
                cell.delays
                    .push((a.started_at - runnable_since).max(0) as f64 / 1000.0);
            }
            runnable_since = a.stop_at.or(a.stopped_at).unwrap_or(a.started_at);
            if let Some((used, i)) = a.usage.zip(a.stopped_at.and_then(|t| self.period_of(t))) {
                self.add_use(i, key.clone(), a, used, g);
            }
            if a.preempted {
                self.preemption(job, a, key, g);
            }
        }
    }

    /// What a finished attempt used, in the period it ended in.
    fn add_use(&mut self, i: usize, key: Key, a: &UsageAttempt, used: qm_executor::Usage, g: f64) {
        let cell = self.cells.entry((i, key)).or_default();
        cell.cpu_ms += used.cpu_millis;
        cell.peak_memory = cell.peak_memory.max(used.peak_memory_bytes);
        if let (Some(percent), Some(ended)) = (used.gpu_utilization_percent, a.stopped_at) {
            // Weighted by GPU-hours; by instance-hours where the type's GPUs are not
            // configured (it was sampled, so it has some).
            let hours = lost_instance_hours(a.running_at, ended, a.count) * g.max(1.0);
            cell.gpu_busy += f64::from(percent) * hours;
            cell.gpu_sampled_hours += hours;
        }
    }

    /// A preempted attempt, in the period it ended in: the work it lost, and the preemption
    /// caused, for the job it made room for.
    fn preemption(&mut self, job: &UsageJob, a: &UsageAttempt, key: Key, g: f64) {
        let ended = a.stopped_at.unwrap_or(self.p.now);
        let Some(i) = self.period_of(ended) else {
            return;
        };
        let hours = lost_instance_hours(a.checkpoint_at.or(a.running_at), ended, a.count);
        let cell = self.cells.entry((i, key)).or_default();
        cell.suffered += 1;
        cell.lost_instance += hours;
        cell.lost_gpu += hours * g;
        if let Some((by_share, by_job)) = &a.preempted_for {
            let by_principal = self
                .principal_of
                .get(by_job.as_str())
                .copied()
                .unwrap_or("unknown");
            let key = key_of(
                self.p.by,
                &job.queue,
                by_share,
                by_principal,
                &a.instance_type,
            );
            self.cells.entry((i, key)).or_default().caused += 1;
        }
    }

    /// The hours of one (queue, instance type), swept over the instants where anything
    /// changes, added to each period an interval overlaps.
    fn hours(&mut self, queue: &str, unit: &str, jobs: &[UsageJob], history: &ShareHistory) {
        let g = self.gpus(unit);
        let by = self.p.by;
        let key = move |queue: &str, share: &str, principal: &str, unit: &str| {
            key_of(by, queue, share, principal, unit)
        };
        let grouping = Grouping {
            key: &key,
            share_level: by != UsageBy::Principal,
        };
        let sweep = Sweep::new(queue, unit, jobs, history, self.p);
        for seg in sweep.segments() {
            // Only the periods the segment overlaps.
            let first = self.periods.partition_point(|&(_, b)| b <= seg.from);
            for (i, &(a, b)) in self.periods.iter().enumerate().skip(first) {
                if a >= seg.to {
                    break;
                }
                let (from, to) = (seg.from.max(a), seg.to.min(b));
                if from >= to {
                    continue;
                }
                let h = (to - from) as f64 / HOUR_MS;
                seg.add(h, g, i, &mut self.cells, &grouping);
            }
        }
    }
}

/// A row's key under the grouping `by`: only the parts it groups by.
fn key_of(by: UsageBy, queue: &str, share: &str, principal: &str, unit: &str) -> Key {
    match by {
        UsageBy::Share => (Some(queue.into()), Some(share.into()), None, None),
        UsageBy::Principal => (None, None, Some(principal.into()), None),
        UsageBy::InstanceType => (None, None, None, Some(unit.into())),
    }
}

/// Every (queue, instance type) an attempt ran on or an entitlement was given in.
fn units(jobs: &[UsageJob], history: &ShareHistory) -> BTreeSet<(String, String)> {
    let mut units: BTreeSet<(String, String)> = BTreeSet::new();
    for job in jobs {
        for a in &job.attempts {
            units.insert((job.queue.clone(), a.instance_type.clone()));
        }
    }
    for ((queue, _), epochs) in history {
        for e in epochs {
            for unit in e.limits.keys() {
                units.insert((queue.clone(), unit.clone()));
            }
        }
    }
    units
}

/// The row of one cell: the figures of `key` over the period `(start, end)`.
fn usage_row((start, end): (i64, i64), key: Key, mut c: Cell) -> UsageRow {
    let (job_queue, quota_share_name, principal, instance_type) = key;
    UsageRow {
        period_start: start,
        period_end: end,
        job_queue,
        quota_share_name,
        principal,
        instance_type,
        instance_hours: round_hours(c.instance),
        gpu_hours: round_hours(c.gpu),
        preemptions_suffered: c.suffered,
        preemptions_caused: c.caused,
        lost_instance_hours: round(c.lost_instance),
        lost_gpu_hours: round(c.lost_gpu),
        starts: c.starts,
        queue_delay_seconds: Percentiles::of(&mut c.delays),
        cpu_hours: round(c.cpu_ms as f64 / HOUR_MS),
        peak_memory_bytes: c.peak_memory,
        gpu_utilization_percent: (c.gpu_sampled_hours > 0.0)
            .then(|| (c.gpu_busy / c.gpu_sampled_hours * 10.0).round() / 10.0),
    }
}

/// Hours to the millisecond's precision, so that sums do not show float noise.
fn round(h: f64) -> f64 {
    (h * 1e6).round() / 1e6
}

fn round_hours(h: UsageHours) -> UsageHours {
    UsageHours {
        used: round(h.used),
        within_entitlement: round(h.within_entitlement),
        borrowed: round(h.borrowed),
        lent_out: round(h.lent_out),
        idle_entitlement: round(h.idle_entitlement),
    }
}

/// The intervals of one (queue, instance type) over which nothing changes.
struct Sweep<'a> {
    /// Instants where usage or an entitlement changes, with the change: (share, principal,
    /// +/- instances) for usage, or a new entitlement for a share.
    changes: BTreeMap<i64, Vec<Change<'a>>>,
    queue: &'a str,
    unit: &'a str,
    since: i64,
    until: i64,
}

enum Change<'a> {
    Usage {
        share: &'a str,
        principal: &'a str,
        delta: i64,
    },
    Entitled {
        share: &'a str,
        limit: u32,
        lends: bool,
    },
}

/// One interval: per share, its usage per principal and its entitlement.
struct Segment<'a> {
    from: i64,
    to: i64,
    queue: &'a str,
    unit: &'a str,
    shares: BTreeMap<&'a str, ShareNow<'a>>,
}

#[derive(Clone, Default)]
struct ShareNow<'a> {
    by_principal: BTreeMap<&'a str, i64>,
    limit: u32,
    lends: bool,
}

impl<'a> Sweep<'a> {
    fn new(
        queue: &'a str,
        unit: &'a str,
        jobs: &'a [UsageJob],
        history: &'a ShareHistory,
        p: &UsageParams,
    ) -> Self {
        let mut changes: BTreeMap<i64, Vec<Change<'a>>> = BTreeMap::new();
        for job in jobs.iter().filter(|j| j.queue == queue) {
            let principal = job.principal.as_deref().unwrap_or("unknown");
            for a in job.attempts.iter().filter(|a| a.instance_type == unit) {
                let end = a.stopped_at.unwrap_or(p.now.max(a.started_at));
                if end <= p.since || a.started_at >= p.until || end <= a.started_at {
                    continue;
                }
                let delta = i64::from(a.count);
                let share = job.share.as_str();
                changes
                    .entry(a.started_at)
                    .or_default()
                    .push(Change::Usage {
                        share,
                        principal,
                        delta,
                    });
                changes.entry(end).or_default().push(Change::Usage {
                    share,
                    principal,
                    delta: -delta,
                });
            }
        }
        for ((q, share), epochs) in history {
            if q != queue {
                continue;
            }
            for e in epochs {
                changes.entry(e.from).or_default().push(Change::Entitled {
                    share,
                    limit: e.limits.get(unit).copied().unwrap_or(0),
                    lends: e.lends,
                });
            }
        }
        Sweep {
            changes,
            queue,
            unit,
            since: p.since,
            // Nothing is used or idle after the data's time: a window reaching into the future
            // is counted up to now.
            until: p.until.min(p.now),
        }
    }

    fn segments(&self) -> Vec<Segment<'a>> {
        let mut out = Vec::new();
        let mut now: BTreeMap<&'a str, ShareNow<'a>> = BTreeMap::new();
        let instants: Vec<i64> = self.changes.keys().copied().collect();
        for (k, &t) in instants.iter().enumerate() {
            for c in &self.changes[&t] {
                match *c {
                    Change::Usage {
                        share,
                        principal,
                        delta,
                    } => {
                        let s = now.entry(share).or_default();
                        let n = s.by_principal.entry(principal).or_default();
                        *n += delta;
                        if *n == 0 {
                            s.by_principal.remove(principal);
                        }
                    }
                    Change::Entitled {
                        share,
                        limit,
                        lends,
                    } => {
                        let s = now.entry(share).or_default();
                        s.limit = limit;
                        s.lends = lends;
                    }
                }
            }
            let to = instants.get(k + 1).copied().unwrap_or(self.until);
            let (from, to) = (t.max(self.since), to.min(self.until));
            if from < to {
                out.push(Segment {
                    from,
                    to,
                    queue: self.queue,
                    unit: self.unit,
                    shares: now.clone(),
                });
            }
        }
        // Before the first change nothing is used or entitled: no segment is needed.
        out
    }
}

impl Segment<'_> {
    /// Adds `h` hours of this segment to the cells of period `i`: usage split over the
    /// principals in proportion to their instances, and (unless rows are per principal) the
    /// share's lent-out and idle entitlement.
    fn add(
        &self,
        h: f64,
        gpus: f64,
        i: usize,
        cells: &mut BTreeMap<(usize, Key), Cell>,
        grouping: &Grouping,
    ) {
        // The core's own split of what is borrowed over the lenders (`qm shares` shows the
        // same at an instant), and its identity for own and borrowed.
        let accounts: Vec<Account> = self
            .shares
            .values()
            .map(|s| {
                let used = s.by_principal.values().sum::<i64>().max(0);
                Account::recorded(s.limit, u32::try_from(used).unwrap_or(u32::MAX), s.lends)
            })
            .collect();
        let lent_of = qm_core::ledger::lent_out(&accounts);
        let mut add = |key: Key, hours: UsageHours| {
            let c = cells.entry((i, key)).or_default();
            for (total, part, scale) in [(&mut c.instance, hours, h), (&mut c.gpu, hours, h * gpus)]
            {
                total.used += part.used * scale;
                total.within_entitlement += part.within_entitlement * scale;
                total.borrowed += part.borrowed * scale;
                total.lent_out += part.lent_out * scale;
                total.idle_entitlement += part.idle_entitlement * scale;
            }
        };
        for (((share, s), lent), account) in self.shares.iter().zip(lent_of).zip(&accounts) {
            let used = f64::from(account.usage);
            let own = f64::from(account.own());
            let idle = f64::from(account.idle());
            for (principal, &n) in &s.by_principal {
                let f = n.max(0) as f64 / used;
                let hours = UsageHours {
                    used: used * f,
                    within_entitlement: own * f,
                    borrowed: f64::from(account.borrowed()) * f,
                    ..UsageHours::default()
                };
                add(
                    (grouping.key)(self.queue, share, principal, self.unit),
                    hours,
                );
            }
            if grouping.share_level && idle > 0.0 {
                let hours = UsageHours {
                    lent_out: lent,
                    idle_entitlement: idle - lent,
                    ..UsageHours::default()
                };
                add((grouping.key)(self.queue, share, "", self.unit), hours);
            }
        }
    }
}

/// How rows are keyed: the key of a (queue, share, principal, unit), and whether the
/// share-level figures (lent out, idle) have a row to go to.
struct Grouping<'a> {
    key: &'a dyn Fn(&str, &str, &str, &str) -> Key,
    share_level: bool,
}

impl crate::archive::ArchivedJob {
    /// What usage accounting needs of it.
    pub fn usage(&self) -> UsageJob {
        UsageJob {
            id: self.job_id.clone(),
            queue: self.job_queue.clone(),
            share: self.quota_share_name.clone(),
            principal: self.principal.clone(),
            created_at: self.created_at,
            attempts: self
                .attempts
                .iter()
                .map(|a| UsageAttempt {
                    instance_type: a.instance_type.clone(),
                    count: a.count,
                    started_at: a.started_at,
                    running_at: a.running_at,
                    stopped_at: a.stopped_at,
                    stop_at: a.stop_at,
                    checkpoint_at: a.checkpoint_at,
                    preempted: a.preempted,
                    preempted_for: a.preempted_for.clone(),
                    usage: a.usage,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: i64 = 3_600_000;

    fn params(since: i64, until: i64, now: i64, every: Option<UsageEvery>) -> UsageParams {
        UsageParams {
            since,
            until,
            now,
            by: UsageBy::Share,
            every,
            gpus: [("u".to_string(), 8)].into(),
        }
    }

    fn history(limits: &[(&str, u32, bool)]) -> ShareHistory {
        limits
            .iter()
            .map(|&(name, limit, lends)| {
                let epoch = ShareEpoch {
                    from: i64::MIN,
                    limits: [("u".to_string(), limit)].into(),
                    lends,
                };
                (("q".to_string(), name.to_string()), vec![epoch])
            })
            .collect()
    }

    fn job(id: &str, share: &str, spans: &[(i64, i64, u32)]) -> UsageJob {
        UsageJob {
            id: id.into(),
            queue: "q".into(),
            share: share.into(),
            principal: None,
            created_at: spans.first().map_or(0, |s| s.0),
            attempts: spans
                .iter()
                .map(|&(from, to, count)| UsageAttempt {
                    instance_type: "u".into(),
                    count,
                    started_at: from,
                    running_at: Some(from),
                    stopped_at: Some(to),
                    stop_at: None,
                    checkpoint_at: None,
                    preempted: false,
                    preempted_for: None,
                    usage: None,
                })
                .collect(),
        }
    }

    #[test]
    fn weeks_start_on_monday_and_days_at_utc_midnight() {
        // 2026-11-04T12:00Z is a Wednesday; its week began Monday 2026-11-02.
        let wed_noon = 20_761 * DAY_MS + 12 * H;
        let p = periods(wed_noon, wed_noon + 7 * DAY_MS, Some(UsageEvery::Week));
        assert_eq!(p[0], (wed_noon, 20_766 * DAY_MS));
        assert_eq!(p[1], (20_766 * DAY_MS, wed_noon + 7 * DAY_MS));
        let d = periods(wed_noon, wed_noon + DAY_MS, Some(UsageEvery::Day));
        assert_eq!(
            d,
            vec![
                (wed_noon, 20_762 * DAY_MS),
                (20_762 * DAY_MS, wed_noon + DAY_MS)
            ]
        );
        assert!(period_count(0, 10 * H, Some(UsageEvery::Hour)) >= 10);
        // Extreme windows neither wrap nor loop (the server refuses them before this).
        assert_eq!(
            periods(i64::MAX - 10, i64::MAX, Some(UsageEvery::Hour)).len(),
            1
        );
        assert_eq!(
            period_count(i64::MIN, i64::MAX, Some(UsageEvery::Hour)),
            usize::try_from(i64::MAX / H + 2).unwrap()
        );
    }

    #[test]
    fn a_window_into_the_future_counts_entitlement_only_up_to_now() {
        let r = report(
            &[],
            &history(&[("A", 2, true)]),
            &params(0, 10 * H, 4 * H, None),
        );
        let [row] = &r.rows[..] else { panic!("{r:?}") };
        assert_eq!(row.instance_hours.idle_entitlement, 8.0);
        assert_eq!(row.gpu_hours.idle_entitlement, 64.0);
    }

    #[test]
    fn cpu_hours_and_peak_memory_count_in_the_period_an_attempt_ended() {
        let mut j = job("j", "A", &[(0, H, 1), (H, 3 * H, 1)]);
        j.attempts[0].usage = Some(qm_executor::Usage {
            cpu_millis: 1_800_000,
            peak_memory_bytes: Some(1 << 30),
            ..Default::default()
        });
        j.attempts[1].usage = Some(qm_executor::Usage {
            cpu_millis: 7_200_000,
            peak_memory_bytes: Some(3 << 30),
            ..Default::default()
        });
        let r = report(
            &[j],
            &history(&[("A", 1, true)]),
            &params(0, 4 * H, 4 * H, Some(UsageEvery::Hour)),
        );
        let cpu: Vec<(f64, Option<u64>)> = r
            .rows
            .iter()
            .map(|row| (row.cpu_hours, row.peak_memory_bytes))
            .collect();
        // Ended in hour 1 and hour 3 (its stop is the period's start, which it belongs to).
        assert_eq!(
            cpu,
            vec![
                (0.0, None),
                (0.5, Some(1 << 30)),
                (0.0, None),
                (2.0, Some(3 << 30))
            ]
        );
    }

    #[test]
    fn gpu_utilisation_is_the_mean_of_the_attempts_weighted_by_their_gpu_hours() {
        let mut j = job("j", "A", &[(0, H, 1), (H, 3 * H, 1)]);
        for (a, percent) in j.attempts.iter_mut().zip([90, 30]) {
            a.usage = Some(qm_executor::Usage {
                gpu_utilization_percent: Some(percent),
                ..Default::default()
            });
        }
        let r = report(
            &[j],
            &history(&[("A", 1, true)]),
            &params(0, 4 * H, 4 * H, None),
        );
        let [row] = &r.rows[..] else { panic!("{r:?}") };
        // One hour at 90 %, two at 30 %.
        assert_eq!(row.gpu_utilization_percent, Some(50.0));
    }

    #[test]
    fn an_instance_type_without_a_gpu_count_says_so() {
        let mut p = params(0, H, H, None);
        p.gpus.clear();
        let r = report(
            &[job("j", "A", &[(0, H, 1)])],
            &history(&[("A", 1, true)]),
            &p,
        );
        assert_eq!(r.rows[0].gpu_hours.used, 0.0);
        assert!(r.notes[0].contains("gpus_per_instance"), "{:?}", r.notes);
    }

    proptest! {
        /// Whatever ran: per share, own + lent + idle is its entitlement over the window and
        /// own + borrowed its use; over all shares, what was lent is what was borrowed as long
        /// as the lenders had that much idle (DESIGN.md's admissible states).
        #[test]
        fn hours_always_add_up(
            spans in proptest::collection::vec((0usize..3, 0i64..20, 1i64..10, 1u32..3), 0..12),
        ) {
            let names = ["A", "B", "C"];
            let hist = history(&[("A", 2, true), ("B", 2, true), ("C", 1, false)]);
            let jobs: Vec<UsageJob> = spans
                .iter()
                .enumerate()
                .map(|(i, &(s, from, len, count))| {
                    job(&format!("j{i}"), names[s], &[(from * H / 2, (from + len) * H / 2, count)])
                })
                .collect();
            let r = report(&jobs, &hist, &params(0, 12 * H, 12 * H, Some(UsageEvery::Hour)));
            let mut per_share: BTreeMap<String, UsageHours> = BTreeMap::new();
            for row in &r.rows {
                let t = per_share.entry(row.quota_share_name.clone().unwrap()).or_default();
                let h = row.instance_hours;
                prop_assert!((h.within_entitlement + h.borrowed - h.used).abs() < 1e-6);
                for v in [h.used, h.within_entitlement, h.borrowed, h.lent_out, h.idle_entitlement] {
                    prop_assert!(v >= 0.0);
                }
                t.within_entitlement += h.within_entitlement;
                t.lent_out += h.lent_out;
                t.idle_entitlement += h.idle_entitlement;
                t.borrowed += h.borrowed;
            }
            for (share, limit) in [("A", 2.0), ("B", 2.0), ("C", 1.0)] {
                let t = per_share.get(share).copied().unwrap_or_default();
                let entitled = t.within_entitlement + t.lent_out + t.idle_entitlement;
                prop_assert!((entitled - limit * 12.0).abs() < 1e-5, "{share}: {t:?}");
            }
            prop_assert_eq!(per_share.get("C").map_or(0.0, |t| t.lent_out), 0.0, "RESERVE lends nothing");
            let lent: f64 = per_share.values().map(|t| t.lent_out).sum();
            let borrowed: f64 = per_share.values().map(|t| t.borrowed).sum();
            prop_assert!(lent <= borrowed + 1e-5, "lent {lent} > borrowed {borrowed}");
        }
    }
}
