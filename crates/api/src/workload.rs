//! The workload CSV that `qm workload export` writes and `qm simulate` reads: its columns,
//! one row per finished job, and its writer. It lives here, below the server and the client,
//! which both write it (the server's `GET /qm/v1/workload`, the client from JSON rows).

use std::borrow::Cow;
use std::io::Write;

/// The columns of the export, in order; the simulator reads the first ten and ignores the
/// `real_*` ones, which calibration compares with.
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

/// One exported job: a row of the workload CSV.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadRow {
    /// The job id.
    pub job_id: String,
    /// Its quota share (the simulator maps tenants to shares by name).
    pub tenant: String,
    /// Seconds from the window's start to its submission.
    pub submit_time_s: u64,
    /// The work it needed, seconds: its attempts' run time less the recomputation.
    pub duration_s: u64,
    /// Instances of its last attempt.
    pub gpus: u32,
    /// SUCCEEDED or FAILED.
    pub status: String,
    /// Scheduling priority at the end.
    pub priority: u32,
    /// Instance type of its last attempt.
    pub instance_type: String,
    /// Seconds between the checkpoints it reported, when it reported any.
    pub checkpoint_interval_s: Option<u64>,
    /// Its class's contract, when it had a class: `Some(false)` is non-interruptible.
    pub interruptible: Option<bool>,
    /// Milliseconds from submission to the end of its last attempt.
    pub real_completion_ms: u64,
    /// Times it was preempted.
    pub real_preemptions: u32,
    /// Instance-milliseconds its attempts held capacity.
    pub real_instance_ms: u64,
}

/// A CSV field: quoted when it holds a comma, a quote or a line break (share names and
/// instance types cannot, but the archive is a file a person may have edited).
fn field(v: &str) -> Cow<'_, str> {
    if v.bytes().any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r')) {
        format!("\"{}\"", v.replace('"', "\"\"")).into()
    } else {
        v.into()
    }
}

/// Writes `rows` as the workload CSV ([`COLUMNS`]).
pub fn write_csv(rows: &[WorkloadRow], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{}", COLUMNS.join(","))?;
    for r in rows {
        let interval = r.checkpoint_interval_s.map(|s| s.to_string());
        let class = match r.interruptible {
            Some(true) => "interruptible",
            Some(false) => "non-interruptible",
            None => "",
        };
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            field(&r.job_id),
            field(&r.tenant),
            r.submit_time_s,
            r.duration_s,
            r.gpus,
            field(&r.status),
            r.priority,
            field(&r.instance_type),
            interval.as_deref().unwrap_or(""),
            class,
            r.real_completion_ms,
            r.real_preemptions,
            r.real_instance_ms
        )?;
    }
    Ok(())
}
