//! Workload files: the CSV schema of `../shared/traces` (`job_id, tenant, submit_time_s,
//! duration_s, gpus, status`) with the optional columns `priority`, `instance_type`,
//! `checkpoint_interval_s` and `class`, and the `real_*` columns of an export of a server's
//! jobs (`qm workload export`), which the simulator ignores and calibration compares with.
//! Columns are found by name, so their order does not matter and unknown columns are
//! ignored; a bad value names its line and column.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::SimError;

/// The `class` values the simulator understands: a job of a non-interruptible class runs
/// only within its share's own quota and is never preempted (docs/scheduling.md). Named
/// classes (a cluster file's `classes:`) are not supported yet.
pub const CLASSES: [&str; 2] = ["interruptible", "non-interruptible"];

/// One job of a workload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadJob {
    /// The trace's id (kept in reports; not interpreted).
    pub job_id: String,
    /// Who submitted it; mapped to a quota share by the cluster file's `tenants`.
    pub tenant: String,
    /// Seconds since the start of the trace.
    pub submit_time_s: u64,
    /// Seconds of work the job needs (uninterrupted run time).
    pub duration_s: u64,
    /// Instances of the job's instance type (`gpus` in the traces, one GPU per instance).
    pub gpus: u32,
    /// As in the trace (`UNKNOWN` in Philly); recorded, not simulated.
    #[serde(default)]
    pub status: String,
    /// Scheduling priority 0..=9999; absent = 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Capacity unit; absent = the simulation's `--instance-type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// This job's checkpoint interval; absent = the simulation's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_s: Option<u64>,
    /// `interruptible` or `non-interruptible`; absent = interruptible.
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
}

/// Reads a workload CSV from a file.
pub fn read_workload(path: &Path) -> Result<Vec<WorkloadJob>, SimError> {
    let file = std::fs::File::open(path).map_err(|source| SimError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_workload(file, &path.display().to_string())
}

/// Reads a workload CSV; `name` only names the source in errors.
pub fn parse_workload(input: impl Read, name: &str) -> Result<Vec<WorkloadJob>, SimError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(input);
    let headers = reader
        .headers()
        .map_err(|e| SimError::workload(name, 1, e.to_string()))?
        .clone();
    for required in ["job_id", "tenant", "submit_time_s", "duration_s", "gpus"] {
        if !headers.iter().any(|h| h == required) {
            return Err(SimError::workload(
                name,
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
        let job = record.map_err(|e| SimError::workload(name, line, describe_csv_error(&e)))?;
        if job.gpus == 0 {
            return Err(SimError::workload(
                name,
                line,
                "gpus is 0; every job needs at least one instance".into(),
            ));
        }
        if job.priority.is_some_and(|p| p > qm_core::MAX_PRIORITY) {
            return Err(SimError::workload(
                name,
                line,
                format!("priority must be 0..={}", qm_core::MAX_PRIORITY),
            ));
        }
        if job.checkpoint_interval_s == Some(0) {
            return Err(SimError::workload(
                name,
                line,
                "checkpoint_interval_s is 0; leave it empty for the default or give seconds > 0"
                    .into(),
            ));
        }
        if let Some(class) = job.class.as_deref().filter(|c| !CLASSES.contains(c)) {
            return Err(SimError::workload(
                name,
                line,
                format!(
                    "class is '{class}'; give interruptible, non-interruptible or leave it empty (named classes are not supported by the simulator yet)"
                ),
            ));
        }
        jobs.push(job);
    }
    Ok(jobs)
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

/// An optional column: its name and how a job's value is written (empty when it has none).
type Optional = (&'static str, fn(&WorkloadJob) -> Option<String>);

/// The optional columns, in the order they are written.
const OPTIONAL: [Optional; 7] = [
    ("priority", |j| j.priority.map(|v| v.to_string())),
    ("instance_type", |j| j.instance_type.clone()),
    ("checkpoint_interval_s", |j| {
        j.checkpoint_interval_s.map(|v| v.to_string())
    }),
    ("class", |j| j.class.clone()),
    ("real_completion_ms", |j| {
        j.real_completion_ms.map(|v| v.to_string())
    }),
    ("real_preemptions", |j| {
        j.real_preemptions.map(|v| v.to_string())
    }),
    ("real_instance_ms", |j| {
        j.real_instance_ms.map(|v| v.to_string())
    }),
];

/// Writes a workload CSV: the columns of the shared traces plus each optional one that some
/// job has a value for.
pub fn write_workload(out: impl Write, jobs: &[WorkloadJob]) -> Result<(), SimError> {
    let mut w = csv::Writer::from_writer(out);
    let used: Vec<&Optional> = OPTIONAL
        .iter()
        .filter(|(_, value)| jobs.iter().any(|j| value(j).is_some()))
        .collect();
    let mut header = vec![
        "job_id",
        "tenant",
        "submit_time_s",
        "duration_s",
        "gpus",
        "status",
    ];
    header.extend(used.iter().map(|(name, _)| *name));
    let to_err = |e: csv::Error| SimError::Write(e.to_string());
    w.write_record(&header).map_err(to_err)?;
    for j in jobs {
        let mut row = vec![
            j.job_id.clone(),
            j.tenant.clone(),
            j.submit_time_s.to_string(),
            j.duration_s.to_string(),
            j.gpus.to_string(),
            j.status.clone(),
        ];
        row.extend(used.iter().map(|(_, value)| value(j).unwrap_or_default()));
        w.write_record(&row).map_err(to_err)?;
    }
    w.flush().map_err(|e| SimError::Write(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_trace_schema_parses_with_optional_columns_in_any_order() {
        let src = "tenant,job_id,submit_time_s,duration_s,gpus,status,priority,extra\n\
                   a,j1,0,60,2,UNKNOWN,5,x\n\
                   b,j2,10,30,1,UNKNOWN,,y\n";
        let jobs = parse_workload(src.as_bytes(), "w.csv").unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].priority, Some(5));
        assert_eq!(jobs[1].priority, None);
        assert_eq!((jobs[1].tenant.as_str(), jobs[1].gpus), ("b", 1));
    }

    #[test]
    fn a_bad_value_names_the_line_and_column() {
        let src = "job_id,tenant,submit_time_s,duration_s,gpus,status\nj1,a,0,sixty,1,UNKNOWN\n";
        let e = parse_workload(src.as_bytes(), "w.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.csv:2") && e.contains("column 4"), "{e}");
        let e = parse_workload("job_id,tenant\n".as_bytes(), "w.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("submit_time_s"), "{e}");
    }

    #[test]
    fn written_workloads_read_back_the_same() {
        let jobs = vec![WorkloadJob {
            job_id: "g-1".into(),
            tenant: "t0".into(),
            submit_time_s: 5,
            duration_s: 100,
            gpus: 4,
            status: "UNKNOWN".into(),
            priority: Some(3),
            instance_type: Some("ml.g5.xlarge".into()),
            checkpoint_interval_s: Some(600),
            class: Some("non-interruptible".into()),
            real_completion_ms: Some(1500),
            real_preemptions: Some(2),
            real_instance_ms: Some(4000),
        }];
        let mut out = Vec::new();
        write_workload(&mut out, &jobs).unwrap();
        assert_eq!(parse_workload(&out[..], "x").unwrap(), jobs);
    }

    #[test]
    fn a_class_is_one_of_the_two_contracts_or_empty() {
        let src = "job_id,tenant,submit_time_s,duration_s,gpus,class\n\
                   j1,a,0,60,1,non-interruptible\n\
                   j2,a,0,60,1,\n\
                   j3,a,0,60,1,interruptible\n";
        let jobs = parse_workload(src.as_bytes(), "w.csv").unwrap();
        let interruptible: Vec<bool> = jobs.iter().map(WorkloadJob::interruptible).collect();
        assert_eq!(interruptible, [false, true, true]);
        let bad = "job_id,tenant,submit_time_s,duration_s,gpus,class\nj1,a,0,60,1,urgent\n";
        let e = parse_workload(bad.as_bytes(), "w.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.csv:2") && e.contains("'urgent'"), "{e}");
    }
}
