//! Step progress: a job may append JSON lines such as `{"step": 1200, "checkpoint_step": 1000}`
//! to `QM_PROGRESS_FILE` (the attempt's `output/progress.json`, which is
//! `/opt/ml/output/progress.json` under the SageMaker layout). The checkpoint scanner reads
//! each running attempt's file at its poll period, and once more when the attempt has exited,
//! so that the server can tell whether the attempt after a preemption resumed from its
//! checkpoint or started over, and how many steps were computed twice.
//!
//! The job writes the file and the server (often root) reads it, so the reader trusts nothing
//! in it: it opens no link and nothing but a regular file of the job's own uid, reads at most
//! [`READ_LIMIT`] bytes a poll from where it stopped, counts complete lines only, skips lines
//! longer than [`LINE_LIMIT`], and says once in the attempt's log that it ignored a line. A
//! progress file never fails a job.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

/// The progress file's name in the attempt's output directory.
pub const PROGRESS_FILE: &str = "progress.json";

/// At most this many bytes are read per poll of one attempt, so a job writing a huge file
/// cannot stall the scanner (the rest is read at the next polls).
pub const READ_LIMIT: usize = 64 * 1024;

/// A longer line is skipped: progress lines are a few dozen bytes.
pub const LINE_LIMIT: usize = 4 * 1024;

/// How many [`READ_LIMIT`] reads the last look at an exited attempt's file may take.
const FINAL_READS: usize = 16;

/// What an attempt reported of its steps. All optional: a job reports what it knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steps {
    /// The first `step` it reported: where it started (resumed, or from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<u64>,
    /// The last `step` it reported: where it stopped, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<u64>,
    /// The last `checkpoint_step` it reported: where an attempt after it should resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
}

impl Steps {
    /// Nothing reported.
    pub fn is_empty(&self) -> bool {
        *self == Steps::default()
    }
}

/// One line of the file; other fields (loss, learning rate...) are the job's and ignored.
#[derive(Deserialize)]
struct Line {
    step: Option<u64>,
    checkpoint_step: Option<u64>,
}

/// The steps a line reports; `None` when it is malformed (not a JSON object, or neither field
/// a non-negative integer). A blank line is no report and not an error: `Some` of nothing.
pub(crate) fn parse_line(line: &[u8]) -> Option<(Option<u64>, Option<u64>)> {
    let Some(&start) = line.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Some((None, None));
    };
    // Only an object: serde would also take `[1, 2]` for the struct's two fields.
    if start != b'{' {
        return None;
    }
    let Line {
        step,
        checkpoint_step,
    } = serde_json::from_slice(line).ok()?;
    (step.is_some() || checkpoint_step.is_some()).then_some((step, checkpoint_step))
}

/// Where the reader of one attempt's progress file is.
#[derive(Debug)]
pub(crate) struct Tail {
    path: PathBuf,
    /// The attempt's stderr log, for the notes.
    log: PathBuf,
    /// The uid that must own the file, when the attempt runs under a uid of its own.
    owner: Option<u32>,
    /// The start of the first line not yet counted.
    offset: u64,
    /// Inside a line longer than [`LINE_LIMIT`], skipped up to its newline.
    skipping: bool,
    pub(crate) steps: Steps,
    /// What was last sent to the server, so that only changes are.
    pub(crate) reported: Steps,
    noted_malformed: bool,
    noted_unreadable: bool,
}

impl Tail {
    pub(crate) fn new(path: PathBuf, log: PathBuf, owner: Option<u32>) -> Self {
        Tail {
            path,
            log,
            owner,
            offset: 0,
            skipping: false,
            steps: Steps::default(),
            reported: Steps::default(),
            noted_malformed: false,
            noted_unreadable: false,
        }
    }

    /// Reads what was appended since the last poll (at most [`READ_LIMIT`] bytes); returns
    /// how many bytes were read.
    pub(crate) fn poll(&mut self) -> usize {
        match self.read() {
            Ok(n) => n,
            Err(e) => {
                if !self.noted_unreadable {
                    self.noted_unreadable = true;
                    self.note(&format!(
                        "the progress file {} cannot be read ({e}); progress is not recorded",
                        self.path.display()
                    ));
                }
                0
            }
        }
    }

    /// The last look once the attempt's processes are gone: what they wrote since the last
    /// poll, up to [`FINAL_READS`] reads.
    pub(crate) fn poll_final(&mut self) {
        for _ in 0..FINAL_READS {
            if self.poll() < READ_LIMIT {
                return;
            }
        }
    }

    /// The change to report, if the steps moved since the last report; marks it reported.
    pub(crate) fn take_change(&mut self) -> Option<Steps> {
        (self.steps != self.reported).then(|| {
            self.reported = self.steps;
            self.steps
        })
    }

    fn read(&mut self) -> io::Result<usize> {
        let Some(mut file) = open_safely(&self.path, self.owner)? else {
            return Ok(0);
        };
        if file.metadata()?.len() < self.offset {
            // Truncated: the job writes it anew from the start.
            self.offset = 0;
            self.skipping = false;
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::with_capacity(READ_LIMIT.min(8192));
        file.take(READ_LIMIT as u64).read_to_end(&mut buf)?;
        let consumed = self.feed(&buf);
        self.offset += consumed as u64;
        Ok(buf.len())
    }

    /// Counts the complete lines of `buf`; returns how many bytes are done with. An incomplete
    /// last line is left for the next poll unless it is already too long to count.
    pub(crate) fn feed(&mut self, buf: &[u8]) -> usize {
        let mut done = 0;
        let mut malformed = false;
        while let Some(end) = buf[done..].iter().position(|&b| b == b'\n') {
            let line = &buf[done..done + end];
            done += end + 1;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            match (line.len() <= LINE_LIMIT)
                .then(|| parse_line(line))
                .flatten()
            {
                Some((step, checkpoint)) => self.count(step, checkpoint),
                None => malformed = true,
            }
        }
        if buf.len() - done > LINE_LIMIT || (self.skipping && done < buf.len()) {
            malformed |= !self.skipping;
            self.skipping = true;
            done = buf.len();
        }
        if malformed && !self.noted_malformed {
            self.noted_malformed = true;
            self.note(&format!(
                "ignored a line of the progress file {} that is not a JSON object with \"step\" or \"checkpoint_step\" (a non-negative integer) or is longer than {LINE_LIMIT} bytes; further such lines are ignored silently",
                self.path.display()
            ));
        }
        done
    }

    fn count(&mut self, step: Option<u64>, checkpoint: Option<u64>) {
        if let Some(step) = step {
            self.steps.first.get_or_insert(step);
            self.steps.last = Some(step);
        }
        if checkpoint.is_some() {
            self.steps.checkpoint = checkpoint;
        }
    }

    /// A `[qm]` line in the attempt's stderr log (the server's file, never a link).
    fn note(&self, line: &str) {
        tracing::info!(path = %self.path.display(), "{line}");
        let log = OpenOptions::new()
            .append(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&self.log);
        if let Ok(mut log) = log {
            let _ = writeln!(log, "[qm] {line}");
        }
    }
}

/// Locks a reader shared with the scanner; a panic elsewhere leaves it usable (it is only an
/// offset and steps).
pub(crate) fn lock(tail: &Mutex<Tail>) -> MutexGuard<'_, Tail> {
    tail.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Opens `path` for reading if it is a regular file (of `owner`, when given); `None` when it
/// does not exist. Never through a link, and without blocking on a FIFO the job put there.
fn open_safely(path: &Path, owner: Option<u32>) -> io::Result<Option<File>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    // A hard link to a file the job does not own (the server's, say) is not read as root.
    if owner.is_some_and(|uid| meta.uid() != uid) {
        return Err(io::Error::other("not owned by the job's uid"));
    }
    Ok(Some(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(dir: &Path) -> Tail {
        // The executor creates the attempt's logs before the job starts.
        std::fs::write(dir.join("stderr.log"), "").unwrap();
        Tail::new(dir.join(PROGRESS_FILE), dir.join("stderr.log"), None::<u32>)
    }

    fn log_of(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
    }

    #[test]
    fn lines_report_steps_and_checkpoints_and_other_fields_are_ignored() {
        assert_eq!(
            parse_line(br#"{"step": 1200, "checkpoint_step": 1000, "loss": 0.3}"#),
            Some((Some(1200), Some(1000)))
        );
        assert_eq!(parse_line(br#"{"step": 7}"#), Some((Some(7), None)));
        assert_eq!(parse_line(b"  "), Some((None, None)));
    }

    #[test]
    fn malformed_lines_report_nothing() {
        for line in [
            &b"step 12"[..],
            br#"{"step": -1}"#,
            br#"{"step": 1.5}"#,
            br#"{"step": "12"}"#,
            br#"{"loss": 0.3}"#,
            b"[1, 2]",
            b"12",
        ] {
            assert_eq!(parse_line(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn only_complete_lines_count_and_a_partial_line_waits_for_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tail(dir.path());
        let done = t.feed(b"{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3");
        assert_eq!(done, 24);
        assert_eq!(t.steps.last, Some(2));
        assert_eq!(t.feed(b"{\"step\": 30}\n"), 13);
        assert_eq!(
            t.steps,
            Steps {
                first: Some(1),
                last: Some(30),
                checkpoint: None
            }
        );
    }

    #[test]
    fn malformed_lines_are_ignored_with_one_note_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tail(dir.path());
        t.feed(b"oops\n{\"step\": 5, \"checkpoint_step\": 4}\nnope\n");
        t.feed(b"still not json\n");
        assert_eq!(t.steps.last, Some(5));
        assert_eq!(t.steps.checkpoint, Some(4));
        assert_eq!(log_of(dir.path()).matches("[qm] ignored a line").count(), 1);
    }

    #[test]
    fn a_huge_line_is_skipped_up_to_its_newline_even_across_polls() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tail(dir.path());
        let huge = vec![b'x'; LINE_LIMIT + 1];
        // Too long already without its newline: dropped, and the rest of it too.
        assert_eq!(t.feed(&huge), huge.len());
        assert_eq!(t.feed(b"xxxx"), 4);
        assert_eq!(t.feed(b"xx\n{\"step\": 9}\n"), 15);
        assert_eq!(t.steps.first, Some(9));
        let mut long_line = huge.clone();
        long_line.extend_from_slice(b"\n{\"step\": 10}\n");
        t.feed(&long_line);
        assert_eq!(t.steps.last, Some(10));
        assert_eq!(log_of(dir.path()).matches("[qm]").count(), 1);
    }

    #[test]
    fn the_file_is_read_in_bounded_chunks_from_where_the_last_poll_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROGRESS_FILE);
        let mut text = String::new();
        let mut n = 0;
        while text.len() < READ_LIMIT * 2 {
            text.push_str(&format!("{{\"step\": {n}}}\n"));
            n += 1;
        }
        std::fs::write(&path, &text).unwrap();
        let mut t = tail(dir.path());
        assert_eq!(t.poll(), READ_LIMIT);
        assert!(t.steps.last < Some(n - 1));
        assert_eq!(t.take_change().unwrap().first, Some(0));
        assert_eq!(t.take_change(), None, "nothing moved since the report");
        t.poll_final();
        assert_eq!(t.steps.last, Some(n - 1));
        assert!(log_of(dir.path()).is_empty());
    }

    #[test]
    fn a_link_or_a_fifo_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "{\"step\": 1}\n").unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join(PROGRESS_FILE)).unwrap();
        let mut t = tail(dir.path());
        assert_eq!(t.poll(), 0);
        assert_eq!(t.steps, Steps::default());
        std::fs::remove_file(dir.path().join(PROGRESS_FILE)).unwrap();
        nix::unistd::mkfifo(
            &dir.path().join(PROGRESS_FILE),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();
        assert_eq!(t.poll(), 0, "opening a FIFO does not block");
        assert_eq!(log_of(dir.path()).matches("cannot be read").count(), 1);
    }

    #[test]
    fn a_missing_file_is_no_progress_and_no_note() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tail(dir.path());
        assert_eq!(t.poll(), 0);
        assert!(log_of(dir.path()).is_empty());
    }
}
