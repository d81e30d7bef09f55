//! Workload files: the CSV schema of `../shared/traces` (`job_id, tenant, submit_time_s,
//! duration_s, gpus, status`) with the optional columns `priority`, `instance_type` and
//! `checkpoint_interval_s`. Columns are found by name, so their order does not matter and
//! unknown columns are ignored; a bad value names its line and column.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::SimError;

/// One job of a workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
                    "the header has no `{required}` column; a workload needs job_id, tenant, submit_time_s, duration_s, gpus (and optionally status, priority, instance_type, checkpoint_interval_s)"
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

/// Writes a workload CSV (the columns of the shared traces plus the optional ones used).
pub fn write_workload(out: impl Write, jobs: &[WorkloadJob]) -> Result<(), SimError> {
    let mut w = csv::Writer::from_writer(out);
    let with_priority = jobs.iter().any(|j| j.priority.is_some());
    let mut header = vec![
        "job_id",
        "tenant",
        "submit_time_s",
        "duration_s",
        "gpus",
        "status",
    ];
    if with_priority {
        header.push("priority");
    }
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
        if with_priority {
            row.push(j.priority.map(|p| p.to_string()).unwrap_or_default());
        }
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
            instance_type: None,
            checkpoint_interval_s: None,
        }];
        let mut out = Vec::new();
        write_workload(&mut out, &jobs).unwrap();
        assert_eq!(parse_workload(&out[..], "x").unwrap(), jobs);
    }
}
