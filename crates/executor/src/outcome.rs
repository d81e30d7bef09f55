//! How an attempt ended, and the reason strings `retryStrategy.evaluateOnExit` globs match.
//! They follow what AWS Batch shows for SageMaker jobs: `Received status from SageMaker: ...`.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

pub use qm_core::Exit;
use serde::{Deserialize, Serialize};

/// The reason of an attempt stopped for exceeding its `max_runtime` (never retried).
pub const TIMEOUT_REASON: &str = "Job attempt duration exceeded timeout";

/// The prefix of failures caused by the job's own code.
pub(crate) const ALGORITHM_ERROR: &str = "Received status from SageMaker: AlgorithmError: ";

/// The prefix of failures to start the job.
pub(crate) const CLIENT_ERROR: &str = "Received status from SageMaker: ClientError: ";

/// The prefix of an attempt whose host the kernel killed for going over its memory limit
/// (`evaluateOnExit` `onStatusReason: "*OutOfMemory*"`, which matches Slurm's too).
pub const OUT_OF_MEMORY: &str = "OutOfMemory: ";

/// `bytes` for people: `512 MiB`, `2 GiB`, `1.5 GiB`.
pub(crate) fn bytes(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    if bytes < 1 << 30 {
        return format!("{} MiB", bytes >> 20);
    }
    let gib = bytes as f64 / GIB;
    let text = format!("{gib:.2}");
    format!("{} GiB", text.trim_end_matches('0').trim_end_matches('.'))
}

/// What an attempt used, as the kernel counted it: the CPU time of the processes its
/// supervisor reaped (`wait4`, each with the descendants it waited for), and the peak memory
/// of its largest host's control group where it was confined, else of its largest process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time of its processes, user and system, summed over its hosts (ms).
    pub cpu_millis: u64,
    /// The most memory one host held at once (bytes): a control group's peak, else the
    /// largest resident set of one process. `None` where the kernel does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The mean utilisation of its GPUs (percent), over its GPUs and the samples the server
    /// took of them while it ran (`nvidia-smi`, module `gpu_usage`); `None` where none was
    /// taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_percent: Option<u32>,
    /// The most memory its GPUs held together in one sample (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_gpu_memory_bytes: Option<u64>,
}

/// The longest failure-file message kept, in characters (SageMaker truncates too).
const FAILURE_MESSAGE_MAX_CHARS: usize = 512;

/// `process exited with code <n>` or `process killed by signal <SIGNAME>`, prefixed.
pub(crate) fn exit_reason(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("{ALGORITHM_ERROR}process exited with code {code}");
    }
    let signal = status.signal().unwrap_or(0);
    let name = nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signal}"));
    format!("{ALGORITHM_ERROR}process killed by signal {name}")
}

/// The reason from the job's failure file: its first line, trimmed, at most 512 characters.
/// `None` when the file is absent, unreadable or its first line is blank.
pub(crate) fn failure_file_reason(path: &Path, owner: Option<u32>) -> Option<String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut head = Vec::new();
    // The file is the job's and may be anything: a FIFO (non-blocking open, then only a
    // regular file is read), a link to a file the job may not read (only a file of the job's
    // own uid is read: the server may be root), or huge (a bounded read).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let uid = owner.unwrap_or_else(|| nix::unistd::geteuid().as_raw());
    if !meta.is_file() || meta.uid() != uid {
        return None;
    }
    file.take(16 * 1024).read_to_end(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    let message: String = line.chars().take(FAILURE_MESSAGE_MAX_CHARS).collect();
    Some(format!("{ALGORITHM_ERROR}{message}"))
}

/// `cannot start '<program>': <what went wrong>`, prefixed.
pub(crate) fn spawn_reason(program: &str, error: impl std::fmt::Display) -> String {
    format!("{CLIENT_ERROR}cannot start '{program}': {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_signals_read_as_sagemaker_algorithm_errors() {
        assert_eq!(
            exit_reason(ExitStatus::from_raw(3 << 8)),
            "Received status from SageMaker: AlgorithmError: process exited with code 3"
        );
        assert_eq!(
            exit_reason(ExitStatus::from_raw(9)),
            "Received status from SageMaker: AlgorithmError: process killed by signal SIGKILL"
        );
    }

    #[test]
    fn the_failure_file_gives_its_first_line_trimmed_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failure");
        assert_eq!(failure_file_reason(&path, None), None);
        std::fs::write(&path, "  out of memory \nsecond line").unwrap();
        assert_eq!(
            failure_file_reason(&path, None).unwrap(),
            "Received status from SageMaker: AlgorithmError: out of memory"
        );
        std::fs::write(&path, "é".repeat(600)).unwrap();
        assert_eq!(
            failure_file_reason(&path, None).unwrap().chars().count(),
            ALGORITHM_ERROR.len() + 512
        );
        std::fs::write(&path, "\n\nlater").unwrap();
        assert_eq!(failure_file_reason(&path, None), None);
    }

    #[test]
    fn a_failure_file_that_is_a_fifo_or_not_the_jobs_own_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("failure");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Would block for ever on a blocking open.
        assert_eq!(failure_file_reason(&fifo, None), None);
        let file = dir.path().join("other");
        std::fs::write(&file, "a secret of the server's user").unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert!(failure_file_reason(&file, Some(me)).is_some());
        assert_eq!(failure_file_reason(&file, Some(me.wrapping_add(1))), None);
    }
}
