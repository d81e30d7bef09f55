//! What Slurm says, parsed: `squeue --json` (every job slurmctld still knows, finished ones
//! included until `MinJobAge`) and `sinfo -N` (one line per node and partition). Pure
//! functions over the commands' output, so they are tested on captured text.
//!
//! The JSON is read leniently: only the fields used here, each optional, and both the 22.05
//! spelling (`job_state` a string, `exit_code` a raw wait status) and the 23.02+ one
//! (`job_state` a list of flags, `exit_code` an object) are understood, so that `qm` works
//! against the Slurm a cluster already runs.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

/// One job of `squeue --json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// Slurm's job id.
    pub id: u64,
    /// `--comment`: Quartermaster's marker.
    pub comment: String,
    /// The base state (`PENDING`, `RUNNING`, `COMPLETED`, ...); `COMPLETING` while the job's
    /// processes are being cleaned up.
    pub state: String,
    /// `state_reason`, e.g. `NonZeroExitCode`, `NodeDown`.
    pub reason: String,
    /// The exit status of the batch script.
    pub exit: ExitStatus,
    /// The allocated nodes, expanded.
    pub nodes: Vec<String>,
}

/// How a job's batch script ended, as Slurm reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitStatus {
    /// Exit code (0 when killed by a signal).
    pub code: i32,
    /// The signal that killed it, 0 if none.
    pub signal: i32,
}

impl SlurmJob {
    /// True once slurmctld considers the job over and its nodes released.
    pub fn is_gone(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "PENDING"
                | "CONFIGURING"
                | "RUNNING"
                | "SUSPENDED"
                | "COMPLETING"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
                | "RESV_DEL_HOLD"
                | "POWER_UP_NODE"
        )
    }
}

#[derive(Deserialize)]
struct Squeue {
    #[serde(default)]
    jobs: Vec<RawJob>,
    #[serde(default)]
    errors: Vec<Value>,
}

#[derive(Deserialize)]
struct RawJob {
    #[serde(default)]
    job_id: Value,
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    job_state: Value,
    #[serde(default)]
    state_reason: Option<String>,
    #[serde(default)]
    exit_code: Value,
    #[serde(default)]
    nodes: Option<String>,
}

/// Parses `squeue --json`. Jobs without a usable id are skipped; an `errors` entry is an error.
pub fn parse_squeue(text: &str) -> Result<Vec<SlurmJob>, String> {
    let raw: Squeue =
        serde_json::from_str(text).map_err(|e| format!("squeue --json: unreadable output: {e}"))?;
    if let Some(err) = raw.errors.first() {
        return Err(format!("squeue --json reported an error: {err}"));
    }
    Ok(raw
        .jobs
        .into_iter()
        .filter_map(|j| {
            Some(SlurmJob {
                id: number(&j.job_id)?,
                comment: j.comment.unwrap_or_default(),
                state: job_state(&j.job_state),
                reason: j.state_reason.unwrap_or_default(),
                exit: exit_status(&j.exit_code),
                nodes: j.nodes.as_deref().map(expand_hostlist).unwrap_or_default(),
            })
        })
        .collect())
}

/// A number, or 23.02's `{"set": true, "number": N}`.
fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => {
            o.get("number").and_then(Value::as_u64)
        }
        _ => None,
    }
}

/// `"RUNNING"`, or 23.02's `["RUNNING", "COMPLETING"]`: `COMPLETING` wins, since the job's
/// nodes are not free until it clears, then `CONFIGURING` (nodes still booting: not started).
fn job_state(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(flags) => {
            let flags: Vec<&str> = flags.iter().filter_map(Value::as_str).collect();
            ["COMPLETING", "CONFIGURING"]
                .into_iter()
                .find(|f| flags.contains(f))
                .or(flags.first().copied())
                .unwrap_or("UNKNOWN")
                .into()
        }
        _ => "UNKNOWN".into(),
    }
}

/// 22.05's raw wait status (`exit 3` → 768, SIGKILL → 9), or 23.02's
/// `{"return_code": N, "signal": {"id": S}}`.
fn exit_status(v: &Value) -> ExitStatus {
    match v {
        Value::Number(n) => {
            let raw = n.as_i64().unwrap_or(0) as i32;
            if raw & 0x7f == 0 {
                ExitStatus {
                    code: (raw >> 8) & 0xff,
                    signal: 0,
                }
            } else {
                ExitStatus {
                    code: 0,
                    signal: raw & 0x7f,
                }
            }
        }
        Value::Object(o) => ExitStatus {
            code: o.get("return_code").and_then(number).unwrap_or(0) as i32,
            signal: o
                .get("signal")
                .and_then(|s| s.get("id"))
                .and_then(number)
                .unwrap_or(0) as i32,
        },
        _ => ExitStatus::default(),
    }
}

/// Expands a Slurm host list: `qm-node[1-3,5],gpu7` → `qm-node1 qm-node2 qm-node3 qm-node5
/// gpu7`. Zero padding is kept (`n[08-10]` → `n08 n09 n10`); several bracket groups in one
/// name multiply out. Malformed parts are kept as they are.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    for item in split_top_level(list) {
        if item.is_empty() {
            continue;
        }
        out.extend(expand_one(item));
    }
    out
}

/// Splits at commas outside brackets.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(list[start..].trim());
    parts
}

fn expand_one(item: &str) -> Vec<String> {
    let Some(open) = item.find('[') else {
        return vec![item.to_string()];
    };
    let Some(close) = item[open..].find(']').map(|c| open + c) else {
        return vec![item.to_string()];
    };
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut values = Vec::new();
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let (Ok(a), Ok(b)) = (lo.parse::<u64>(), hi.parse::<u64>()) else {
            return vec![item.to_string()];
        };
        if b < a || b - a > 100_000 {
            return vec![item.to_string()];
        }
        let width = lo.len();
        values.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    let tails = expand_one(rest);
    let mut out = Vec::with_capacity(values.len() * tails.len());
    for v in &values {
        for t in &tails {
            out.push(format!("{prefix}{v}{t}"));
        }
    }
    out
}

/// One line of `sinfo -N -h -o '%N|%t|%P|%f'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    /// Node name.
    pub name: String,
    /// Compact state, e.g. `idle`, `alloc`, `mix`, `down*`, `drain`.
    pub state: String,
    /// Partition, without the `*` that marks the default one.
    pub partition: String,
    /// Available features.
    pub features: BTreeSet<String>,
}

/// The `sinfo` format [`parse_sinfo`] reads.
pub const SINFO_FORMAT: &str = "%N|%t|%P|%f";

/// Parses `sinfo -N -h -o '%N|%t|%P|%f'`; lines that do not have four fields are skipped.
pub fn parse_sinfo(text: &str) -> Vec<SlurmNode> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.trim().split('|');
            let (name, state, partition, features) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some(SlurmNode {
                name: name.to_string(),
                state: state.to_string(),
                partition: partition.trim_end_matches('*').to_string(),
                features: features
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty() && *s != "(null)")
                    .map(String::from)
                    .collect(),
            })
        })
        .collect()
}

impl SlurmNode {
    /// Whether Slurm may give the node to a job now or soon: up and responding, not drained,
    /// down, failed, in maintenance or reserved. A powered-down cloud node (`idle~`) counts,
    /// since Slurm powers it up for a job.
    pub fn usable(&self) -> bool {
        // `*` = not responding, `%` = powering down, `!` = pending power down.
        if self.state.contains(['*', '%', '!']) {
            return false;
        }
        let base = self.state.trim_end_matches(['~', '#', '$', '@', '^', '-']);
        matches!(
            base,
            "idle" | "alloc" | "allocated" | "mix" | "mixed" | "comp" | "completing" | "plnd"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_expand_ranges_padding_and_products() {
        assert_eq!(
            expand_hostlist("qm-node[1-3,5],gpu7"),
            ["qm-node1", "qm-node2", "qm-node3", "qm-node5", "gpu7"]
        );
        assert_eq!(expand_hostlist("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(
            expand_hostlist("r[1-2]-n[1-2]"),
            ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
        );
        assert_eq!(expand_hostlist(""), Vec::<String>::new());
        assert_eq!(expand_hostlist("odd[x]"), ["odd[x]"]);
    }

    /// Captured from Slurm 22.05.8 (`scripts/slurm/cluster`), trimmed to the fields read.
    const SQUEUE_2205: &str = r#"{"meta": {}, "errors": [], "jobs": [
      {"job_id": 1, "name": "qm-a-1", "comment": "qm/t/j/1/7", "job_state": "RUNNING",
       "state_reason": "None", "exit_code": 0, "nodes": "qm-node[1-2]"},
      {"job_id": 2, "name": "wrap", "comment": "", "job_state": "FAILED",
       "state_reason": "NonZeroExitCode", "exit_code": 768, "nodes": "qm-node3"},
      {"job_id": 3, "name": "wrap", "job_state": "FAILED", "state_reason": "JobLaunchFailure",
       "exit_code": 9, "nodes": ""}
    ]}"#;

    #[test]
    fn squeue_2205_json_gives_states_exit_codes_and_nodes() {
        let jobs = parse_squeue(SQUEUE_2205).unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].nodes, ["qm-node1", "qm-node2"]);
        assert_eq!(jobs[0].comment, "qm/t/j/1/7");
        assert!(!jobs[0].is_gone());
        assert_eq!(jobs[1].exit, ExitStatus { code: 3, signal: 0 });
        assert!(jobs[1].is_gone());
        assert_eq!(jobs[2].exit, ExitStatus { code: 0, signal: 9 });
        assert!(jobs[2].nodes.is_empty());
    }

    #[test]
    fn squeue_2302_json_with_state_flags_and_exit_objects_is_understood() {
        let text = r#"{"jobs": [{"job_id": {"set": true, "number": 4}, "name": "x",
          "job_state": ["CANCELLED", "COMPLETING"],
          "exit_code": {"status": ["SIGNALED"], "return_code": {"set": true, "number": 0},
                        "signal": {"id": {"set": true, "number": 15}}}}]}"#;
        let jobs = parse_squeue(text).unwrap();
        assert_eq!(jobs[0].id, 4);
        assert_eq!(jobs[0].state, "COMPLETING");
        assert!(!jobs[0].is_gone(), "a completing job still holds its nodes");
        assert_eq!(
            jobs[0].exit,
            ExitStatus {
                code: 0,
                signal: 15
            }
        );
    }

    #[test]
    fn squeue_errors_and_garbage_are_errors() {
        assert!(parse_squeue(r#"{"errors": [{"error": "no"}], "jobs": []}"#).is_err());
        assert!(parse_squeue("slurm_load_jobs error: Unable to contact").is_err());
    }

    #[test]
    fn sinfo_lines_give_partition_features_and_usability() {
        let nodes = parse_sinfo(
            "qm-node1|alloc|gpu*|(null)\nqm-node2|down*|gpu*|a100,ib\nqm-node3|idle~|gpu|a100\nbad line\nqm-node4|drain|gpu|\n",
        );
        assert_eq!(nodes.len(), 4);
        assert_eq!(nodes[0].partition, "gpu");
        assert!(nodes[0].usable());
        assert!(!nodes[1].usable());
        assert!(nodes[1].features.contains("ib"));
        assert!(
            nodes[2].usable(),
            "a powered-down cloud node can be started"
        );
        assert!(!nodes[3].usable());
        assert!(nodes[3].features.is_empty());
    }
}
