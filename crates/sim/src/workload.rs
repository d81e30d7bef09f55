//! Workload files, as the simulator reads and writes them. The schema (the columns, the row
//! type [`WorkloadJob`], reading and writing) is `qm_api::workload`'s, the one the server's
//! export writes; this module names the file in errors ([`SimError`]) and writes only the
//! optional columns a workload uses.

use std::io::{Read, Write};
use std::path::Path;

pub use qm_api::workload::WorkloadJob;
use qm_api::workload::{read_csv, write_csv, Columns};

use crate::error::SimError;

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
    read_csv(input).map_err(|bad| SimError::workload(name, bad.line, bad.message))
}

/// Writes a workload CSV: the columns of the shared traces plus each optional one that some
/// job has a value for.
pub fn write_workload(out: impl Write, jobs: &[WorkloadJob]) -> Result<(), SimError> {
    write_csv(jobs, out, Columns::Used).map_err(|e| SimError::Write(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_names_the_file_line_and_column() {
        let src = "job_id,tenant,submit_time_s,duration_s,gpus,status\nj1,a,0,sixty,1,UNKNOWN\n";
        let e = parse_workload(src.as_bytes(), "w.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("w.csv:2: column 4: "), "{e}");
        let e = parse_workload("job_id,tenant\n".as_bytes(), "w.csv")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("w.csv:1: ") && e.contains("submit_time_s"),
            "{e}"
        );
        let bad = "job_id,tenant,submit_time_s,duration_s,gpus,class\nj1,a,0,60,1,urgent\n";
        let e = parse_workload(bad.as_bytes(), "w.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.csv:2") && e.contains("'urgent'"), "{e}");
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
    fn only_the_optional_columns_some_job_uses_are_written() {
        let jobs = [WorkloadJob {
            job_id: "j".into(),
            tenant: "t".into(),
            gpus: 1,
            checkpoint_interval_s: Some(60),
            ..WorkloadJob::default()
        }];
        let mut out = Vec::new();
        write_workload(&mut out, &jobs).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "job_id,tenant,submit_time_s,duration_s,gpus,status,checkpoint_interval_s\nj,t,0,0,1,,60\n"
        );
    }
}
