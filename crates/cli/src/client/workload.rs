//! `qm workload export` and `qm workload calibrate`: a server's jobs of a window in the
//! simulator's workload schema (`GET /qm/v1/workload`, docs/workload-export.md). The server
//! computes the CSV; the client only fetches it, with the counts the server left out.

use super::http::{Client, ClientError};

/// The most bytes an export may have: about 16 million jobs at some 130 bytes a row.
const MAX_EXPORT_BYTES: u64 = 2 << 30;

/// An export as the server sent it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadCsv {
    /// The workload CSV.
    pub csv: Vec<u8>,
    /// Jobs in it.
    pub jobs: u64,
    /// Jobs submitted in the window that have not finished (left out).
    pub unfinished: u64,
    /// Finished jobs that never ran (left out).
    pub never_ran: u64,
}

impl Client {
    /// The finished jobs submitted in `[since, until)` (epoch ms) to `queue` (any, if
    /// `None`) as a workload CSV.
    pub fn workload(
        &self,
        since: i64,
        until: i64,
        queue: Option<&str>,
    ) -> Result<WorkloadCsv, ClientError> {
        let mut path = format!("/qm/v1/workload?since={since}&until={until}");
        if let Some(q) = queue {
            path += &format!("&queue={}", super::http::encode_path_segment(q));
        }
        let answer = self.get_large(&path, MAX_EXPORT_BYTES)?;
        let count = |name: &str| {
            answer
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok(WorkloadCsv {
            jobs: count("x-qm-workload-jobs"),
            unfinished: count("x-qm-workload-unfinished"),
            never_ran: count("x-qm-workload-never-ran"),
            csv: answer.body,
        })
    }
}

#[cfg(test)]
mod tests {
    use qm_api::workload::{write_csv, Columns, WorkloadJob};

    /// The server writes the export, the simulator reads it: one schema, all of whose columns
    /// come back.
    #[test]
    fn the_servers_export_reads_back_as_the_simulators_workload() {
        let job = WorkloadJob {
            job_id: "0b6c".into(),
            tenant: "research".into(),
            submit_time_s: 5,
            duration_s: 1801,
            gpus: 2,
            status: "SUCCEEDED".into(),
            priority: Some(7),
            instance_type: Some("ml.g5.xlarge".into()),
            checkpoint_interval_s: Some(200),
            class: Some(WorkloadJob::class_of(false)),
            real_completion_ms: Some(2_105_000),
            real_preemptions: Some(1),
            real_instance_ms: Some(4_030_000),
        };
        let mut csv = Vec::new();
        write_csv(std::slice::from_ref(&job), &mut csv, Columns::All).unwrap();
        let jobs = qm_sim::parse_workload(&csv[..], "export").unwrap();
        assert_eq!(jobs, [job]);
        assert!(!jobs[0].interruptible());
    }
}
