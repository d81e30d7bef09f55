//! The workload CSV, in one place: its columns, one row per job ([`WorkloadJob`]), its reader
//! and its writer. The schema of `../shared/traces` (`job_id, tenant, submit_time_s,
//! duration_s, gpus, status`) with the optional columns `priority`, `instance_type`,
//! `checkpoint_interval_s` and `class`, and the `real_*` columns of an export of a server's
//! jobs, which the simulator ignores and calibration compares with.
//!
//! It lives here, below the server and the simulator: the server writes it (`GET
//! /qm/v1/workload`, `qm workload export`), the simulator reads it (`qm simulate`) and writes
//! it (`qm workload generate`). Columns are read by name, so their order does not matter and
//! unknown columns are ignored; a bad value names its line and column.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

/// All the columns, in the order they are written; an export ([`Columns::All`]) writes each.
pub const COLUMNS: [&str; 13] = [
    "job_id",
    "tenant",
    "submit_time_s",
    "duration_s",
    "gpus",
    "status",
    "priority",
    "instance_type",
    "checkpoint_interval_s",
    "class",
    "real_completion_ms",
    "real_preemptions",
    "real_instance_ms",
];

/// The columns of the shared traces: always written.
const TRACE_COLUMNS: usize = 6;

/// The columns a workload must have.
const REQUIRED: [&str; 5] = ["job_id", "tenant", "submit_time_s", "duration_s", "gpus"];

/// The `class` values a workload may give: a job of a non-interruptible class runs only
/// within its share's own quota and is never preempted (docs/scheduling.md). Named classes
/// (a cluster file's `classes:`) are not supported by the simulator yet.
pub const CLASSES: [&str; 2] = ["interruptible", "non-interruptible"];

/// One job of a workload: a row of the CSV.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadJob {
    /// The trace's id (kept in reports; not interpreted).
    pub job_id: String,
    /// Who submitted it; mapped to a quota share by the cluster file's `tenants` (an export
    /// writes the job's quota share).
    pub tenant: String,
    /// Seconds since the start of the trace (an export's window).
    pub submit_time_s: u64,
    /// Seconds of work the job needs (uninterrupted run time; in an export, its attempts'
    /// run time less the recomputation).
    pub duration_s: u64,
    /// Instances of the job's instance type (`gpus` in the traces, one GPU per instance; in
    /// an export, those of its last attempt).
    pub gpus: u32,
    /// As in the trace (`UNKNOWN` in Philly; SUCCEEDED or FAILED in an export); recorded, not
    /// simulated.
    #[serde(default)]
    pub status: String,
    /// Scheduling priority 0..=9999; absent = 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Capacity unit; absent = the simulation's `--instance-type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// This job's checkpoint interval; absent = the simulation's default (an export gives the
    /// seconds between the checkpoints the job reported, when it reported any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_s: Option<u64>,
    /// One of [`CLASSES`]; absent = interruptible (an export gives its class's contract, when
    /// it had a class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Exported jobs only: milliseconds from submission to the end of the last attempt, as
    /// it really went. Not simulated; calibration compares the simulation with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_completion_ms: Option<u64>,
    /// Exported jobs only: the times the job was really preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_preemptions: Option<u32>,
    /// Exported jobs only: instance-milliseconds its attempts really held capacity (grants to
    /// processes gone, preempted attempts included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_instance_ms: Option<u64>,
}

impl WorkloadJob {
    /// Whether the simulator may preempt it (its `class`).
    pub fn interruptible(&self) -> bool {
        self.class.as_deref() != Some("non-interruptible")
    }

    /// The `class` of a contract: `interruptible` or `non-interruptible`.
    pub fn class_of(interruptible: bool) -> String {
        CLASSES[usize::from(!interruptible)].to_string()
    }
}

/// Why a workload CSV cannot be read: the line (the header is line 1) and what is wrong and
/// how to fix it. The reader's caller names the source (a file, the server's export) in its
/// own error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based line.
    pub line: usize,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl BadLine {
    fn new(line: usize, message: impl Into<String>) -> Self {
        BadLine {
            line,
            message: message.into(),
        }
    }
}

/// Reads a workload CSV: columns by name, in any order, unknown ones ignored; values trimmed.
pub fn read_csv(input: impl Read) -> Result<Vec<WorkloadJob>, BadLine> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(input);
    let headers = reader
        .headers()
        .map_err(|e| BadLine::new(1, e.to_string()))?
        .clone();
    for required in REQUIRED {
        if !headers.iter().any(|h| h == required) {
            return Err(BadLine::new(
                1,
                format!(
                    "the header has no `{required}` column; a workload needs job_id, tenant, submit_time_s, duration_s, gpus (and optionally status, priority, instance_type, checkpoint_interval_s, class)"
                ),
            ));
        }
    }
    let mut jobs = Vec::new();
    for (i, record) in reader.deserialize::<WorkloadJob>().enumerate() {
        let line = i + 2;
        let job = record.map_err(|e| BadLine::new(line, describe_csv_error(&e)))?;
        check(&job).map_err(|message| BadLine::new(line, message))?;
        jobs.push(job);
    }
    Ok(jobs)
}

/// What is wrong with a job's values, if anything.
fn check(job: &WorkloadJob) -> Result<(), String> {
    if job.gpus == 0 {
        return Err("gpus is 0; every job needs at least one instance".into());
    }
    if job.priority.is_some_and(|p| p > qm_core::MAX_PRIORITY) {
        return Err(format!("priority must be 0..={}", qm_core::MAX_PRIORITY));
    }
    if job.checkpoint_interval_s == Some(0) {
        return Err(
            "checkpoint_interval_s is 0; leave it empty for the default or give seconds > 0".into(),
        );
    }
    if let Some(class) = job.class.as_deref().filter(|c| !CLASSES.contains(c)) {
        return Err(format!(
            "class is '{class}'; give interruptible, non-interruptible or leave it empty (named classes are not supported by the simulator yet)"
        ));
    }
    Ok(())
}

fn describe_csv_error(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => match err.field() {
            Some(f) => format!("column {}: {}", f + 1, err.kind()),
            None => err.kind().to_string(),
        },
        _ => e.to_string(),
    }
}

/// Which columns [`write_csv`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Columns {
    /// All of [`COLUMNS`], empty where a job has no value: the server's export, whose header
    /// is the same whatever the window.
    All,
    /// The columns of the shared traces plus each optional one that some job has a value
    /// for: the simulator's workloads.
    Used,
}

/// An optional column's value in a job, as written (`None`: empty).
type Value = fn(&WorkloadJob) -> Option<String>;

/// The values of the optional columns, in the order of [`COLUMNS`] after the trace's.
const OPTIONAL: [Value; 7] = [
    |j| j.priority.map(|v| v.to_string()),
    |j| j.instance_type.clone(),
    |j| j.checkpoint_interval_s.map(|v| v.to_string()),
    |j| j.class.clone(),
    |j| j.real_completion_ms.map(|v| v.to_string()),
    |j| j.real_preemptions.map(|v| v.to_string()),
    |j| j.real_instance_ms.map(|v| v.to_string()),
];

/// Writes `jobs` as a workload CSV with `columns`. A field is quoted when it holds a comma,
/// a quote or a line break (share names and instance types cannot, but a workload is a file
/// a person may have edited).
pub fn write_csv(jobs: &[WorkloadJob], out: impl Write, columns: Columns) -> std::io::Result<()> {
    let optional: Vec<(&str, Value)> = COLUMNS[TRACE_COLUMNS..]
        .iter()
        .copied()
        .zip(OPTIONAL)
        .filter(|(_, value)| columns == Columns::All || jobs.iter().any(|j| value(j).is_some()))
        .collect();
    let mut w = csv::Writer::from_writer(out);
    let header = COLUMNS[..TRACE_COLUMNS]
        .iter()
        .copied()
        .chain(optional.iter().map(|(name, _)| *name));
    w.write_record(header)?;
    for j in jobs {
        let row = [
            j.job_id.clone(),
            j.tenant.clone(),
            j.submit_time_s.to_string(),
            j.duration_s.to_string(),
            j.gpus.to_string(),
            j.status.clone(),
        ];
        let rest = optional
            .iter()
            .map(|(_, value)| value(j).unwrap_or_default());
        w.write_record(row.into_iter().chain(rest))?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported() -> WorkloadJob {
        WorkloadJob {
            job_id: "g-1".into(),
            tenant: "t0".into(),
            submit_time_s: 5,
            duration_s: 100,
            gpus: 4,
            status: "UNKNOWN".into(),
            priority: Some(3),
            instance_type: Some("ml.g5.xlarge".into()),
            checkpoint_interval_s: Some(600),
            class: Some(WorkloadJob::class_of(false)),
            real_completion_ms: Some(1500),
            real_preemptions: Some(2),
            real_instance_ms: Some(4000),
        }
    }

    fn written(jobs: &[WorkloadJob], columns: Columns) -> String {
        let mut out = Vec::new();
        write_csv(jobs, &mut out, columns).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_shared_trace_schema_parses_with_optional_columns_in_any_order() {
        let src = "tenant,job_id,submit_time_s,duration_s,gpus,status,priority,extra\n\
                   a,j1,0,60,2,UNKNOWN,5,x\n\
                   b,j2,10,30,1,UNKNOWN,,y\n";
        let jobs = read_csv(src.as_bytes()).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].priority, Some(5));
        assert_eq!(jobs[1].priority, None);
        assert_eq!((jobs[1].tenant.as_str(), jobs[1].gpus), ("b", 1));
    }

    #[test]
    fn a_bad_value_names_the_line_and_column() {
        let src = "job_id,tenant,submit_time_s,duration_s,gpus,status\nj1,a,0,sixty,1,UNKNOWN\n";
        let e = read_csv(src.as_bytes()).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.starts_with("column 4: "), "{e:?}");
        let e = read_csv("job_id,tenant\n".as_bytes()).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("submit_time_s"), "{e:?}");
    }

    #[test]
    fn written_workloads_read_back_the_same_in_either_mode() {
        let mut sparse = exported();
        sparse.class = None;
        sparse.checkpoint_interval_s = None;
        let jobs = vec![exported(), sparse];
        for columns in [Columns::All, Columns::Used] {
            let csv = written(&jobs, columns);
            assert_eq!(read_csv(csv.as_bytes()).unwrap(), jobs, "{columns:?}");
        }
    }

    #[test]
    fn an_export_writes_every_column_and_a_generated_workload_those_it_uses() {
        let job = WorkloadJob {
            job_id: "a,\"b\"".into(),
            tenant: "t".into(),
            gpus: 1,
            priority: Some(2),
            ..WorkloadJob::default()
        };
        let all = written(std::slice::from_ref(&job), Columns::All);
        assert_eq!(
            all,
            format!("{}\n\"a,\"\"b\"\"\",t,0,0,1,,2,,,,,,\n", COLUMNS.join(","))
        );
        let used = written(&[job], Columns::Used);
        assert_eq!(
            used,
            "job_id,tenant,submit_time_s,duration_s,gpus,status,priority\n\"a,\"\"b\"\"\",t,0,0,1,,2\n"
        );
    }

    #[test]
    fn a_class_is_one_of_the_two_contracts_or_empty() {
        let src = "job_id,tenant,submit_time_s,duration_s,gpus,class\n\
                   j1,a,0,60,1,non-interruptible\n\
                   j2,a,0,60,1,\n\
                   j3,a,0,60,1,interruptible\n";
        let jobs = read_csv(src.as_bytes()).unwrap();
        let interruptible: Vec<bool> = jobs.iter().map(WorkloadJob::interruptible).collect();
        assert_eq!(interruptible, [false, true, true]);
        assert_eq!(WorkloadJob::class_of(true), "interruptible");
        let bad = "job_id,tenant,submit_time_s,duration_s,gpus,class\nj1,a,0,60,1,urgent\n";
        let e = read_csv(bad.as_bytes()).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("'urgent'"), "{e:?}");
    }
}
