//! Tables and detail views: pure functions from the server's data (and `now`) to text.

use qm_api::qm::{JobAttemptNow, ResumeRecord, RunningAttempt};
use qm_api::{DescribeServiceJobResponse, ServiceJobStatus, ServiceJobSummary, TrainingPayload};
use serde::Serialize;

use super::http::{QueueUsage, ShareUsage};
use super::time::{age, duration, utc};

/// The widest reason shown in the jobs table; `qm job` and `qm explain` show it whole.
const REASON_WIDTH: usize = 60;

/// One line of `qm jobs`: what the table shows of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRow {
    /// The job id.
    pub job_id: String,
    /// The job name.
    pub job_name: String,
    /// Its quota share.
    pub quota_share_name: String,
    /// Its scheduling priority (0 when none was given).
    pub scheduling_priority: i32,
    /// Its status.
    pub status: String,
    /// The full status reason.
    pub status_reason: String,
    /// Creation time, epoch milliseconds.
    pub created_at: i64,
}

impl JobRow {
    /// The row of a listed job, when the listing carries its priority (a qm extension).
    pub fn from_summary(job: &ServiceJobSummary) -> Option<JobRow> {
        Some(JobRow {
            job_id: job.job_id.clone(),
            job_name: job.job_name.clone(),
            quota_share_name: job.quota_share_name.clone().unwrap_or_default(),
            scheduling_priority: job.scheduling_priority?,
            status: job.status?.as_str().to_string(),
            status_reason: job.status_reason.clone().unwrap_or_default(),
            created_at: job.created_at.unwrap_or(0),
        })
    }

    /// The row of a described job.
    pub fn from_job(job: &DescribeServiceJobResponse) -> JobRow {
        JobRow {
            job_id: job.job_id.clone(),
            job_name: job.job_name.clone(),
            quota_share_name: job.quota_share_name.clone().unwrap_or_default(),
            scheduling_priority: job.scheduling_priority.unwrap_or(0),
            status: job.status.as_str().to_string(),
            status_reason: job.status_reason.clone().unwrap_or_default(),
            created_at: job.created_at.unwrap_or(0),
        }
    }
}

/// The machine code a RUNNABLE job's reason starts with (`OWN_QUOTA_FULL`, ...), if any.
pub fn reason_code(reason: &str) -> Option<&str> {
    let code = reason.split(" - ").next()?.trim();
    let is_code = !code.is_empty()
        && code
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_:".contains(c));
    is_code.then_some(code)
}

/// Left-aligned columns, two spaces apart, headers in capitals; no trailing spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_ascii_uppercase()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[i].saturating_sub(cell.chars().count());
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// The reason column: the code for a waiting job; for a job holding capacity whose it is
/// (`own capacity`, `borrowed from inference`); else the (shortened) reason.
fn reason_cell(row: &JobRow) -> String {
    if row.status == ServiceJobStatus::Runnable.as_str() {
        if let Some(code) = reason_code(&row.status_reason) {
            return code.to_string();
        }
    }
    if let Some(capacity) = capacity_cell(&row.status_reason) {
        return capacity;
    }
    shorten(&row.status_reason, REASON_WIDTH)
}

/// `own capacity` or `borrowed from X, Y` from a running job's `OWN_CAPACITY`/`BORROWED`
/// status reason (the server's wording: docs/scheduling.md).
fn capacity_cell(reason: &str) -> Option<String> {
    match reason_code(reason)? {
        "OWN_CAPACITY" => Some("own capacity".into()),
        "BORROWED" => {
            let from = reason.split_once(" borrowed from ")?.1;
            let from = from.split(';').next().unwrap_or(from);
            Some(shorten(&format!("borrowed from {from}"), REASON_WIDTH))
        }
        _ => None,
    }
}

/// `qm jobs`: id, name, share, priority, status, reason, age; rows in the order given.
pub fn jobs_table(rows: &[JobRow], now_ms: i64) -> String {
    if rows.is_empty() {
        return "no jobs\n".to_string();
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.job_id.clone(),
                r.job_name.clone(),
                r.quota_share_name.clone(),
                r.scheduling_priority.to_string(),
                r.status.clone(),
                reason_cell(r),
                age(now_ms, r.created_at),
            ]
        })
        .collect();
    table(
        &["id", "name", "share", "priority", "status", "reason", "age"],
        &cells,
    )
}

/// What a job asks for, from its payload: `(instance type, count)`.
pub fn demand(job: &DescribeServiceJobResponse) -> Option<(String, u32)> {
    let payload = TrainingPayload::parse(job.service_request_payload.as_deref()?).ok()?;
    Some((payload.instance_type, payload.instance_count))
}

fn command_of(job: &DescribeServiceJobResponse) -> Option<String> {
    let payload = TrainingPayload::parse(job.service_request_payload.as_deref()?).ok()?;
    let words: Vec<&str> = payload
        .entrypoint
        .iter()
        .chain(&payload.arguments)
        .map(String::as_str)
        .collect();
    (!words.is_empty()).then(|| {
        words
            .iter()
            .map(|w| shell_word(w))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// A queue's name, from its name or ARN (`DescribeServiceJob` answers the ARN).
pub fn queue_name(name_or_arn: &str) -> &str {
    name_or_arn
        .rsplit_once("job-queue/")
        .map_or(name_or_arn, |(_, name)| name)
}

/// A word as a POSIX shell would need it: single-quoted when it is not plain.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn when(ms: Option<i64>, now_ms: i64) -> String {
    match ms {
        Some(ms) if ms > 0 => format!("{} ({} ago)", utc(ms), age(now_ms, ms)),
        _ => "-".to_string(),
    }
}

fn span(started: Option<i64>, stopped: Option<i64>, now_ms: i64) -> [String; 3] {
    let start = started.filter(|&t| t > 0);
    let stop = stopped.filter(|&t| t > 0);
    let ran = match (start, stop) {
        (Some(a), Some(b)) => duration(a, b),
        (Some(a), None) => format!("{} so far", duration(a, now_ms)),
        _ => "-".to_string(),
    };
    [
        start.map_or("-".to_string(), utc),
        stop.map_or("-".to_string(), utc),
        ran,
    ]
}

/// Who submitted the job: the principal the server names in its `qm:submitted-by` tag.
pub fn submitted_by(job: &DescribeServiceJobResponse) -> Option<&str> {
    job.tags
        .as_ref()?
        .get(qm_api::validate::TAG_SUBMITTED_BY)
        .map(String::as_str)
}

/// `qm job ID`: the job, its capacity, the attempt running now and how the attempts after
/// its preemptions resumed (`attempt_now`, from `GET /qm/v1/jobs/{job}/attempt`), its ended
/// attempts and its preemptions.
pub fn job_details(
    job: &DescribeServiceJobResponse,
    attempt_now: &JobAttemptNow,
    now_ms: i64,
) -> String {
    let mut out = job_fields(job, now_ms);
    if let Some(a) = &attempt_now.running {
        out.push_str(&running_attempt(a, now_ms));
    }
    out.push_str(&ended_attempts(job, now_ms));
    out.push_str(&preemptions(job, now_ms));
    if !attempt_now.resumes.is_empty() {
        out.push_str(&resumes(&attempt_now.resumes));
    }
    if !attempt_now.usage.is_empty() {
        out.push_str(&usage(&attempt_now.usage));
    }
    out
}

/// The job's own fields, one `name  value` line each, the values aligned.
fn job_fields(job: &DescribeServiceJobResponse, now_ms: i64) -> String {
    let mut fields: Vec<(&str, String)> = vec![
        ("id", job.job_id.clone()),
        ("name", job.job_name.clone()),
        ("queue", queue_name(&job.job_queue).to_string()),
        (
            "share",
            job.quota_share_name
                .clone()
                .unwrap_or_else(|| "-".to_string()),
        ),
        ("priority", job.scheduling_priority.unwrap_or(0).to_string()),
        ("submitted by", submitted_by(job).unwrap_or("-").to_string()),
        ("status", job.status.as_str().to_string()),
        (
            "reason",
            job.status_reason.clone().unwrap_or_else(|| "-".to_string()),
        ),
        ("created", when(job.created_at, now_ms)),
        ("started", when(Some(job.started_at), now_ms)),
        ("stopped", when(job.stopped_at, now_ms)),
    ];
    fields.push(("capacity", capacity_of(job)));
    if let Some(command) = command_of(job) {
        fields.push(("command", command));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in &fields {
        out.push_str(&format!("{k:<width$}  {v}\n"));
    }
    out
}

/// The capacity the job holds, else the capacity it asks for, else `-`.
fn capacity_of(job: &DescribeServiceJobResponse) -> String {
    let requested = demand(job).map(|(t, n)| format!("{n} × {t}"));
    let held: Vec<String> = job
        .capacity_usage
        .iter()
        .flatten()
        .filter_map(|c| {
            let unit = c.capacity_unit.as_deref()?;
            Some(format!("{} × {unit}", c.quantity.unwrap_or(0.0)))
        })
        .collect();
    let capacity = if held.is_empty() {
        requested
    } else {
        Some(held.join(", "))
    };
    capacity.unwrap_or_else(|| "-".to_string())
}

/// The job's ended attempts: a heading with their count, then a table of them.
fn ended_attempts(job: &DescribeServiceJobResponse, now_ms: i64) -> String {
    let attempts = job.attempts.as_deref().unwrap_or_default();
    let mut out = format!("\nattempts ended ({})\n", attempts.len());
    if !attempts.is_empty() {
        let rows: Vec<Vec<String>> = attempts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let [start, stop, ran] = span(a.started_at, a.stopped_at, now_ms);
                let reason = a.status_reason.clone().unwrap_or_else(|| "-".to_string());
                vec![format!("{}", i + 1), start, stop, ran, reason]
            })
            .collect();
        out.push_str(&indent(&table(
            &["#", "started", "stopped", "ran", "outcome"],
            &rows,
        )));
    }
    out
}

/// The job's preemptions: a heading with their count, then a table of the recent ones.
fn preemptions(job: &DescribeServiceJobResponse, now_ms: i64) -> String {
    let summary = job.preemption_summary.as_ref();
    let count = summary.and_then(|s| s.preempted_attempt_count).unwrap_or(0);
    let recent = summary
        .and_then(|s| s.recent_preempted_attempts.as_deref())
        .unwrap_or_default();
    let mut out = format!("\npreemptions ({count})\n");
    if !recent.is_empty() {
        let rows: Vec<Vec<String>> = recent
            .iter()
            .map(|a| {
                let [start, stop, ran] = span(a.started_at, a.stopped_at, now_ms);
                vec![
                    start,
                    stop,
                    ran,
                    a.status_reason.clone().unwrap_or_else(|| "-".to_string()),
                ]
            })
            .collect();
        out.push_str(&indent(&table(
            &["started", "stopped", "ran", "reason"],
            &rows,
        )));
    }
    out
}

/// What each ended attempt used, with GPU columns only where some attempt's GPUs were sampled.
fn usage(records: &[qm_api::qm::AttemptUsage]) -> String {
    let gpus = records.iter().any(|u| u.gpu_utilization_percent.is_some());
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|u| {
            let mut row = vec![
                u.attempt.to_string(),
                format!("{:.1} s", u.cpu_seconds),
                u.peak_memory_bytes.map_or("-".to_string(), memory),
            ];
            if gpus {
                row.push(
                    u.gpu_utilization_percent
                        .map_or("-".into(), |p| format!("{p} %")),
                );
                row.push(u.peak_gpu_memory_bytes.map_or("-".to_string(), memory));
            }
            row
        })
        .collect();
    let mut headers = vec!["attempt", "CPU time", "peak memory (largest host)"];
    if gpus {
        headers.extend(["GPU utilisation (mean)", "peak GPU memory"]);
    }
    let mut out = "\nusage per attempt\n".to_string();
    out.push_str(&indent(&table(&headers, &rows)));
    out
}

/// `bytes` for people: `900.0 KiB`, `512.0 MiB`, `1.50 GiB` (memory, backups).
pub fn memory(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    }
}

/// How each attempt after a preemption resumed, from the steps the job reported.
fn resumes(records: &[ResumeRecord]) -> String {
    let step = |s: Option<u64>| s.map_or("-".to_string(), |s| s.to_string());
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.attempt.to_string(),
                r.outcome.as_str().to_string(),
                step(r.checkpoint_step),
                step(r.previous_last_step),
                step(r.first_step),
                step(r.recomputed_steps),
                r.recomputed_instance_hours.map_or("-".to_string(), hours),
            ]
        })
        .collect();
    let mut out = format!(
        "
resumes after preemption ({})
",
        records.len()
    );
    out.push_str(&indent(&table(
        &[
            "attempt",
            "resume",
            "checkpoint step",
            "stopped at step",
            "first step",
            "recomputed steps",
            "recomputed instance-hours",
        ],
        &rows,
    )));
    out
}

/// Instance-hours to two decimals; a loss too small to show says so rather than `0.00`.
fn hours(h: f64) -> String {
    if h > 0.0 && h < 0.01 {
        "<0.01".to_string()
    } else {
        format!("{h:.2}")
    }
}

/// The attempt holding capacity: what it holds, where, since when, and its last checkpoint
/// (what a preemption now would lose).
fn running_attempt(a: &RunningAttempt, now_ms: i64) -> String {
    let state = if a.stopping_since.is_some() {
        "stopping"
    } else if a.running_at.is_some() {
        "running"
    } else {
        "starting"
    };
    let hosts: Vec<String> = a
        .hosts
        .iter()
        .map(|h| match h.pid {
            Some(pid) => format!("{} (pid {pid})", h.name),
            None => h.name.clone(),
        })
        .collect();
    let checkpoint = match a.last_checkpoint_at {
        Some(t) => when(Some(t), now_ms),
        None => "none reported".to_string(),
    };
    let mut fields = vec![
        ("instances", format!("{} × {}", a.count, a.instance_type)),
        ("hosts", hosts.join(", ")),
        ("granted", when(Some(a.granted_at), now_ms)),
        ("running since", when(a.running_at, now_ms)),
        ("last checkpoint", checkpoint),
        ("training job", a.training_job_name.clone()),
    ];
    if let Some(progress) = progress(a) {
        fields.push(("progress", progress));
    }
    if let Some(t) = a.stopping_since {
        let why = a.stop_reason.as_deref().unwrap_or("-");
        fields.push((
            "stopping since",
            format!("{} — {why}", when(Some(t), now_ms)),
        ));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = format!("\nattempt {} ({state})\n", a.number);
    for (k, v) in &fields {
        out.push_str(&format!("  {k:<width$}  {v}\n"));
    }
    out
}

/// The steps the running attempt reported in its progress file, if it reported any.
fn progress(a: &RunningAttempt) -> Option<String> {
    match (a.last_step, a.checkpoint_step) {
        (None, None) => None,
        (Some(step), None) => Some(format!("step {step}")),
        (None, Some(c)) => Some(format!("checkpoint at step {c}")),
        (Some(step), Some(c)) => Some(format!("step {step}, checkpoint at step {c}")),
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// An instance count: whole numbers without a fraction.
pub fn count(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n:.2}")
    }
}

/// `qm shares`: per queue, one row per share and instance type.
pub fn shares_table(queues: &[QueueUsage]) -> String {
    if queues.is_empty() {
        return "no job queues\n".to_string();
    }
    let mut out = String::new();
    for (i, queue) in queues.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("queue {}\n", queue.job_queue));
        if queue.shares.is_empty() {
            out.push_str("  no quota shares\n");
            continue;
        }
        out.push_str(&queue_shares(queue));
    }
    out
}

/// One queue's part of `qm shares`: its fair-sharing line, its shares' table, its groups and
/// its idle capacity.
fn queue_shares(queue: &QueueUsage) -> String {
    let mut out = String::new();
    let mut shares: Vec<&ShareUsage> = queue.shares.iter().collect();
    shares.sort_by(|a, b| {
        (&a.quota_share_name, &a.capacity_unit).cmp(&(&b.quota_share_name, &b.capacity_unit))
    });
    // The protection column only where a share has thrash protection.
    let protected = shares.iter().any(|s| s.protection.is_some());
    // The fair-sharing line and columns only where they say something: fair sharing
    // on, groups, or a weight other than the default (AWS's FIFO needs no words).
    let fair = queue.fairness.as_ref().filter(|f| {
        f.idle_assignment != "FIFO"
            || f.fair_reclaim
            || !f.groups.is_empty()
            || f.shares.iter().any(|s| s.weight != 1)
    });
    if let Some(f) = fair {
        out.push_str(&format!(
            "idle capacity: {}, fair reclaim {}\n",
            f.idle_assignment,
            if f.fair_reclaim { "on" } else { "off" }
        ));
    }
    let rows: Vec<Vec<String>> = shares
        .iter()
        .map(|s| share_row(s, protected, fair))
        .collect();
    let mut head = vec![
        "share", "type", "entitled", "own-use", "borrowed", "lent-out", "stopping", "runnable",
    ];
    if protected {
        head.push("protection");
    }
    if fair.is_some() {
        head.extend(["weight", "group", "weighted-share", "fair-share"]);
    }
    out.push_str(&table(&head, &rows));
    if let Some(f) = fair.filter(|f| !f.groups.is_empty()) {
        out.push_str(&groups_table(&f.groups));
    }
    for idle in &queue.idle_while_waiting {
        out.push_str(&idle_line(idle));
    }
    out
}

/// One share's row of `qm shares`, with the protection column when `protected` and the
/// fair-sharing columns when `fair` is shown.
fn share_row(
    s: &ShareUsage,
    protected: bool,
    fair: Option<&qm_api::qm::QueueFairness>,
) -> Vec<String> {
    let mut row = vec![
        s.quota_share_name.clone(),
        s.capacity_unit.clone(),
        count(s.entitled),
        count(s.own_use),
        count(s.borrowed),
        count(s.lent_out),
        count(s.stopping),
        count(s.runnable),
    ];
    if protected {
        row.push(s.protection.clone().unwrap_or_else(|| "-".into()));
    }
    if let Some(fair) = fair {
        let f = fair
            .shares
            .iter()
            .find(|f| f.quota_share_name == s.quota_share_name);
        row.push(f.map_or_else(|| "-".into(), |f| f.weight.to_string()));
        row.push(
            f.and_then(|f| f.group.clone())
                .unwrap_or_else(|| "-".into()),
        );
        row.push(f.map_or_else(|| "-".into(), |f| share_figure(f.weighted_share)));
        row.push(
            f.and_then(|f| f.fair_share.get(&s.capacity_unit))
                .map_or_else(|| "-".into(), |n| format!("{n:.2}")),
        );
    }
    row
}

/// A weighted borrowed share as people read it (as status reasons write it): two decimals.
fn share_figure(x: f64) -> String {
    if x >= 1e9 {
        "inf".into()
    } else {
        format!("{x:.2}")
    }
}

/// The groups of a queue: members, weight, and per instance type what the members hold
/// against the group's limit.
fn groups_table(groups: &[qm_api::qm::GroupFairness]) -> String {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            let units: std::collections::BTreeSet<&String> =
                g.limits.keys().chain(g.usage.keys()).collect();
            let held = units
                .into_iter()
                .map(|u| {
                    let used = g.usage.get(u).copied().unwrap_or(0);
                    match g.limits.get(u) {
                        Some(l) => format!("{u} {used}/{l}"),
                        None => format!("{u} {used}"),
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                g.name.clone(),
                if g.shares.is_empty() {
                    "-".into()
                } else {
                    g.shares.join(",")
                },
                g.weight.to_string(),
                if held.is_empty() { "-".into() } else { held },
                share_figure(g.weighted_share),
            ]
        })
        .collect();
    table(
        &["group", "shares", "weight", "used/limit", "weighted-share"],
        &rows,
    )
}

/// "Is the cluster wasted?": free instances a waiting job fits, why, and which job to explain.
fn idle_line(idle: &qm_api::qm::IdleWhileWaiting) -> String {
    let why = match idle.cause.as_str() {
        "reservation" => "held for an older job's reservation or another share's waiting owner",
        "reserve" => "the free capacity is a RESERVE share's or no share's, and never lent",
        "borrow_limit" => "the waiting share is at its borrow limit",
        "group_limit" => "the waiting share's group is at its ceiling",
        "no_borrowing" => "the waiting share is full and its strategy does not borrow",
        "never_fits" => "the waiting job can never run as configured",
        _ => "a preemption or a decision is under way",
    };
    let job = if idle.job_name.is_empty() {
        idle.job_id.clone()
    } else {
        idle.job_name.clone()
    };
    format!(
        "idle while jobs wait: {} of {} free {} ({}: {why}; `qm explain {job}`)\n",
        idle.idle, idle.free, idle.capacity_unit, idle.cause
    )
}

/// One frame of `qm watch`: the shares of the queue, then its jobs.
pub fn watch_frame(queues: &[QueueUsage], rows: &[JobRow], now_ms: i64) -> String {
    format!("{}\n{}", shares_table(queues), jobs_table(rows, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_show_a_protection_column_only_when_a_share_has_thrash_protection() {
        let row = |name: &str, protection: Option<&str>| ShareUsage {
            quota_share_name: name.into(),
            capacity_unit: "ml.g5.xlarge".into(),
            entitled: 2.0,
            protection: protection.map(str::to_string),
            ..ShareUsage::default()
        };
        let queue = |shares| QueueUsage {
            job_queue: "jq".into(),
            shares,
            ..QueueUsage::default()
        };
        let plain = shares_table(&[queue(vec![row("A", None)])]);
        assert!(!plain.contains("PROTECTION"), "{plain}");
        let protected = shares_table(&[queue(vec![
            row("A", None),
            row("B", Some("min-runtime 900s")),
        ])]);
        assert!(protected.contains("PROTECTION"), "{protected}");
        assert!(protected.contains("min-runtime 900s"), "{protected}");
    }

    #[test]
    fn shares_show_fair_sharing_only_when_a_queue_uses_it() {
        use qm_api::qm::{GroupFairness, QueueFairness, ShareFairness};
        let row = ShareUsage {
            quota_share_name: "vision".into(),
            capacity_unit: "gpu".into(),
            entitled: 1.0,
            borrowed: 1.0,
            ..ShareUsage::default()
        };
        let standing = |weight| ShareFairness {
            quota_share_name: "vision".into(),
            weight,
            group: Some("research".into()),
            weighted_share: 1.0 / 6.0,
            dominant: Some("gpu".into()),
            fair_share: [("gpu".to_string(), 1.5)].into(),
        };
        let queue = |fairness| QueueUsage {
            job_queue: "jq".into(),
            shares: vec![row.clone()],
            fairness: Some(fairness),
            ..QueueUsage::default()
        };
        let fifo = QueueFairness {
            idle_assignment: "FIFO".into(),
            shares: vec![ShareFairness {
                group: None,
                ..standing(1)
            }],
            ..QueueFairness::default()
        };
        let plain = shares_table(&[queue(fifo)]);
        assert!(
            !plain.contains("idle capacity") && !plain.contains("WEIGHT"),
            "{plain}"
        );
        let fair = QueueFairness {
            idle_assignment: "FAIR_SHARE".into(),
            fair_reclaim: true,
            shares: vec![standing(3)],
            groups: vec![GroupFairness {
                name: "research".into(),
                shares: vec!["nlp".into(), "vision".into()],
                limits: [("gpu".to_string(), 6)].into(),
                weight: 2,
                usage: [("gpu".to_string(), 2)].into(),
                weighted_share: 0.25,
            }],
        };
        let text = shares_table(&[queue(fair)]);
        assert!(
            text.starts_with("queue jq\nidle capacity: FAIR_SHARE, fair reclaim on\n"),
            "{text}"
        );
        assert!(
            text.contains("WEIGHT  GROUP     WEIGHTED-SHARE  FAIR-SHARE"),
            "{text}"
        );
        assert!(
            text.contains("3       research  0.17            1.50"),
            "{text}"
        );
        assert!(
            text.contains("research  nlp,vision  2       gpu 2/6     0.25"),
            "{text}"
        );
    }

    #[test]
    fn the_reason_code_is_the_part_before_the_dash() {
        assert_eq!(
            reason_code("OWN_QUOTA_FULL - needs 1"),
            Some("OWN_QUOTA_FULL")
        );
        assert_eq!(
            reason_code("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Unable"),
            Some("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
        );
        assert_eq!(reason_code("Training job completed"), None);
    }

    #[test]
    fn words_that_are_not_plain_are_quoted_for_the_shell() {
        assert_eq!(shell_word("train.py"), "train.py");
        assert_eq!(shell_word("echo hi; it's"), "'echo hi; it'\\''s'");
    }

    #[test]
    fn a_queue_arn_is_shown_by_its_name() {
        assert_eq!(
            queue_name("arn:aws:batch:us-east-1:1:job-queue/training"),
            "training"
        );
        assert_eq!(queue_name("training"), "training");
    }

    #[test]
    fn a_table_aligns_columns_without_trailing_spaces() {
        let rows = vec![
            vec!["a".to_string(), "".to_string()],
            vec!["bbb".into(), "x".into()],
        ];
        assert_eq!(table(&["k", "v"], &rows), "K    V\na\nbbb  x\n");
    }
}
