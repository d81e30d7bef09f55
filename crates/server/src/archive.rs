//! The archive of retired jobs: append-only JSON lines, one file per month of the jobs'
//! finishing time (`<data-dir>/archive/jobs-YYYY-MM.jsonl`), read by usage accounting. A line
//! is one [`ArchivedJob`]. Appends are fsynced before the driver logs the retirement, so a
//! job is always in the state or in the archive; a crash in between may archive a job twice,
//! and readers keep one record per job id. Retired audit entries go to
//! `audit-YYYY-MM.jsonl` by the month they were recorded in, one [`ArchivedAudit`] a line.

use qm_core::time::civil_from_days;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where retired jobs go.
#[derive(Clone, Debug)]
pub struct Archive {
    dir: PathBuf,
}

impl Archive {
    /// The archive under `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Archive {
            dir: data_dir.join("archive"),
        }
    }

    /// Appends `jobs` durably (each to the file of the month it finished in).
    pub fn append(&self, jobs: &[ArchivedJob]) -> std::io::Result<()> {
        let mut by_file: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
        for job in jobs {
            let at = job.stopped_at.unwrap_or(job.created_at);
            let line = by_file.entry(self.file_for(at)).or_default();
            serde_json::to_writer(&mut *line, job)?;
            line.push(b'\n');
        }
        self.write(by_file)
    }

    /// Appends audit `entries` durably (each to the file of the month it was recorded in).
    pub fn append_audit(&self, entries: &[ArchivedAudit]) -> std::io::Result<()> {
        let mut by_file: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
        for e in entries {
            let line = by_file
                .entry(self.month_file("audit-", e.entry.at))
                .or_default();
            serde_json::to_writer(&mut *line, e)?;
            line.push(b'\n');
        }
        self.write(by_file)
    }

    fn write(&self, by_file: BTreeMap<PathBuf, Vec<u8>>) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        for (path, bytes) in by_file {
            let created = !path.exists();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            if created {
                // A new file's name is durable only once its directory is synced.
                std::fs::File::open(&self.dir)?.sync_all()?;
            }
        }
        Ok(())
    }

    /// Every archived job that finished in `[since, until)` (epoch ms), one record per job id
    /// (the last one written), in no particular order.
    pub fn read(&self, since: i64, until: i64) -> std::io::Result<Vec<ArchivedJob>> {
        let mut all: Vec<ArchivedJob> = Vec::new();
        // A month's file holds the jobs that finished in it: earlier months cannot match.
        for path in self.files("jobs-", since)? {
            let text = std::fs::read_to_string(&path)?;
            all.extend(
                parse_lines::<ArchivedJob>(&text, &path)
                    .into_iter()
                    .filter(|job| {
                        let at = job.stopped_at.unwrap_or(job.created_at);
                        at >= since && at < until
                    }),
            );
        }
        // One record per id, the last written: mark the last of each, keep those.
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(all.len());
        for (i, job) in all.iter().enumerate() {
            last.insert(job.job_id.as_str(), i);
        }
        let mut keep = vec![false; all.len()];
        for i in last.into_values() {
            keep[i] = true;
        }
        let mut keep = keep.into_iter();
        all.retain(|_| keep.next().unwrap_or(false));
        Ok(all)
    }

    /// Every archived audit entry recorded in `[since, until)` (epoch ms), once per number,
    /// oldest first (the policy review reads the changes of its window from here and the log).
    pub fn read_audit(&self, since: i64, until: i64) -> std::io::Result<Vec<ArchivedAudit>> {
        let mut out: BTreeMap<u64, ArchivedAudit> = BTreeMap::new();
        for path in self.files("audit-", since)? {
            let text = std::fs::read_to_string(&path)?;
            for e in parse_lines::<ArchivedAudit>(&text, &path) {
                if e.entry.at >= since && e.entry.at < until {
                    out.insert(e.seq, e);
                }
            }
        }
        Ok(out.into_values().collect())
    }

    /// Calls `f` with every line of the job files that may hold jobs finished at or after
    /// `since`, oldest month first, a file's lines in the order written. For readers of many
    /// jobs that parse only what they need (the workload export): no record is kept here, so
    /// the caller keeps one per job id (the last) itself.
    pub fn for_each_line(&self, since: i64, mut f: impl FnMut(&str)) -> std::io::Result<()> {
        for path in self.files("jobs-", since)? {
            let text = std::fs::read_to_string(&path)?;
            text.lines().for_each(&mut f);
        }
        Ok(())
    }

    fn file_for(&self, at_ms: i64) -> PathBuf {
        self.month_file("jobs-", at_ms)
    }

    fn month_file(&self, prefix: &str, at_ms: i64) -> PathBuf {
        let (y, m, _) = civil_from_days(at_ms.div_euclid(86_400_000));
        self.dir.join(format!("{prefix}{y:04}-{m:02}.jsonl"))
    }

    /// The `<prefix>YYYY-MM.jsonl` files of the month of `since` and later, in order (none
    /// when the archive does not exist yet).
    fn files(&self, prefix: &str, since: i64) -> std::io::Result<Vec<PathBuf>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let first = self.month_file(prefix, since.max(0));
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".jsonl"))
            })
            .filter(|p| *p >= first)
            .collect();
        files.sort();
        Ok(files)
    }
}

/// The records of a file's lines, in order, parsed on every core: a quarter's archive is
/// hundreds of megabytes of JSON. A crash mid-append can leave a torn last line: what does not
/// parse is skipped, with a warning.
fn parse_lines<T: serde::de::DeserializeOwned + Send>(text: &str, path: &Path) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Chunks end at line ends, so that no line is cut.
    let mut chunks: Vec<&str> = Vec::with_capacity(threads);
    let mut rest = text;
    let size = text.len() / threads + 1;
    while !rest.is_empty() {
        let cut = rest
            .get(size.min(rest.len())..)
            .and_then(|tail| tail.find('\n'))
            .map_or(rest.len(), |i| size + i + 1);
        let (chunk, tail) = rest.split_at(cut.min(rest.len()));
        chunks.push(chunk);
        rest = tail;
    }
    let parse = |chunk: &str| -> Vec<T> {
        chunk
            .lines()
            .filter_map(|line| match serde_json::from_str::<T>(line) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "skipping an unreadable archive line");
                    None
                }
            })
            .collect()
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|&chunk| scope.spawn(move || parse(chunk)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// One retired job, as the archive keeps it: what accounting needs, in a documented shape
/// (docs/server.md, "Retention and archive").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedJob {
    /// The job id.
    pub job_id: String,
    /// The job name.
    pub job_name: String,
    /// Queue name.
    pub job_queue: String,
    /// Quota share name.
    pub quota_share_name: String,
    /// SUCCEEDED or FAILED.
    pub status: String,
    /// Final status reason.
    pub status_reason: Option<String>,
    /// Scheduling priority at the end.
    pub scheduling_priority: i32,
    /// Submitted (epoch ms).
    pub created_at: i64,
    /// Finished (epoch ms).
    pub stopped_at: Option<i64>,
    /// Every attempt, preempted ones included (the latest `PREEMPTED_WINDOW` of those).
    pub attempts: Vec<ArchivedAttempt>,
    /// Times preempted in all.
    pub preempted_count: u32,
    /// The job's tags.
    pub tags: std::collections::BTreeMap<String, String>,
    /// Who submitted it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// One attempt of a retired job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedAttempt {
    /// 1, 2, ... in start order.
    pub number: u32,
    /// Instance type.
    pub instance_type: String,
    /// Instances held.
    pub count: u32,
    /// Capacity held from (epoch ms).
    pub started_at: i64,
    /// Processes running from, when they got that far.
    pub running_at: Option<i64>,
    /// Capacity released at.
    pub stopped_at: Option<i64>,
    /// Ended by a preemption.
    pub preempted: bool,
    /// How it ended.
    pub status_reason: Option<String>,
    /// When the core decided to stop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_at: Option<i64>,
    /// The last checkpoint it reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_at: Option<i64>,
    /// For a preemption: the share and the job it was preempted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_for: Option<(String, String)>,
    /// The steps it reported in its progress file (first, last, last checkpoint; absent in
    /// older archives): the policy review classifies the resumes of retired jobs from them as
    /// `resume.rs` does for live ones, and the workload export counts recomputed work.
    #[serde(default, skip_serializing_if = "qm_executor::Steps::is_empty")]
    pub steps: qm_executor::Steps,
    /// Checkpoints it reported (absent in older archives, and when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub checkpoints: u32,
    /// What it used (absent in older archives, and where the executor did not count it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<qm_executor::Usage>,
}

/// One retired audit entry, as the archive keeps it: its number in the log (a crash between
/// archiving and retiring may write an entry twice; the number tells the copies apart).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArchivedAudit {
    /// The entry's number (the first entry ever recorded is 0).
    pub seq: u64,
    /// The entry.
    #[serde(flatten)]
    pub entry: crate::command::AuditEntry,
}

/// For serde's `skip_serializing_if` on counters.
pub fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod archive_tests {
    use super::*;

    fn job(id: &str, stopped_at: i64, status: &str) -> ArchivedJob {
        ArchivedJob {
            job_id: id.into(),
            job_name: id.into(),
            job_queue: "q".into(),
            quota_share_name: "s".into(),
            status: status.into(),
            status_reason: None,
            scheduling_priority: 0,
            created_at: stopped_at - 1000,
            stopped_at: Some(stopped_at),
            attempts: Vec::new(),
            preempted_count: 0,
            tags: Default::default(),
            principal: None,
        }
    }

    #[test]
    fn jobs_go_to_the_file_of_their_month_and_read_back_once_per_id() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::new(dir.path());
        let dec = 1_764_547_200_000; // 2025-12-01T00:00Z
        let nov = dec - 86_400_000; // 2025-11-30
        archive
            .append(&[job("a", nov, "SUCCEEDED"), job("b", dec, "FAILED")])
            .unwrap();
        // A crash between the archive and the log archives a job twice.
        archive.append(&[job("b", dec, "FAILED")]).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("archive"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["jobs-2025-11.jsonl", "jobs-2025-12.jsonl"]);
        let mut all: Vec<String> = archive
            .read(0, i64::MAX)
            .unwrap()
            .into_iter()
            .map(|j| j.job_id)
            .collect();
        all.sort();
        assert_eq!(all, ["a", "b"]);
        let december = archive.read(dec, i64::MAX).unwrap();
        assert_eq!(december.len(), 1);
        assert_eq!(december[0].job_id, "b");
    }

    #[test]
    fn a_torn_last_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::new(dir.path());
        archive.append(&[job("a", 1_000_000, "SUCCEEDED")]).unwrap();
        let file = dir.path().join("archive/jobs-1970-01.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(b"{\"jobId\":\"b\",\"jobN").unwrap();
        let got = archive.read(0, i64::MAX).unwrap();
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn audit_entries_read_back_once_per_number_within_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::new(dir.path());
        let dec = 1_764_547_200_000; // 2025-12-01T00:00Z
        let entry = |seq: u64, at: i64| ArchivedAudit {
            seq,
            entry: crate::command::AuditEntry {
                at,
                actor: "admin".into(),
                action: "updatequotashare".into(),
                summary: String::new(),
                details: String::new(),
                tags: None,
            },
        };
        let entries = [entry(0, dec - 86_400_000), entry(1, dec), entry(2, dec + 5)];
        archive.append_audit(&entries).unwrap();
        // A crash between the archive and the log archives an entry twice.
        archive.append_audit(&entries[1..2]).unwrap();
        let got = archive.read_audit(dec, dec + 5).unwrap();
        let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1], "December only, before dec + 5, once");
        assert_eq!(archive.read_audit(0, i64::MAX).unwrap().len(), 3);
    }
}
