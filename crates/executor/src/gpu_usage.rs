//! How busy each running attempt keeps its GPUs: every `gpu_sample` the server asks
//! `nvidia-smi` once about every GPU of the machine (one call, not one per attempt: each call
//! initialises NVML, tens of milliseconds of CPU; and not `-i` with the GPUs in use, which
//! fails whole when one of them fell off the bus), and adds to the tally of each attempt that
//! ran when the call was made the readings of its GPUs. The tally goes with the attempt's usage when it ends: the
//! mean utilisation of its GPUs over the samples and the most GPU memory they held at once.
//!
//! The server samples rather than the supervisor: the supervisor reaps every child it has
//! (`waitpid(-1)`) and knows its attempt ended when none is left, which a sampling child
//! would blur. Samples are not taken while the server is down; the tally counts what it saw.
//! The sampling task is the executor's (`executor::background`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Usage;

/// The longest a `nvidia-smi` call may take before the sample is skipped (a GPU in a bad state
/// can hang it).
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// One GPU's reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// `utilization.gpu`: the percent of the last sample period a kernel ran on it.
    pub utilization_percent: u32,
    /// `memory.used`, in bytes.
    pub memory_bytes: u64,
}

/// What was seen of one attempt's GPUs while it ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Readings taken, one per GPU per sample.
    readings: u64,
    /// The sum of their utilisation (percent).
    utilization_sum: u64,
    /// The most memory its GPUs held together in one sample.
    peak_memory_bytes: u64,
}

impl Tally {
    /// Adds a sample of the attempt's `gpus`; GPUs missing from `readings` (nvidia-smi did not
    /// list them) leave the sample out.
    pub fn add(&mut self, gpus: &[u32], readings: &BTreeMap<u32, Reading>) {
        let Some(seen) = gpus
            .iter()
            .map(|g| readings.get(g))
            .collect::<Option<Vec<&Reading>>>()
            .filter(|seen| !seen.is_empty())
        else {
            return;
        };
        self.readings += seen.len() as u64;
        self.utilization_sum += seen
            .iter()
            .map(|r| u64::from(r.utilization_percent))
            .sum::<u64>();
        self.peak_memory_bytes = self
            .peak_memory_bytes
            .max(seen.iter().map(|r| r.memory_bytes).sum());
    }

    /// `usage` with the tally's figures, where it has a sample.
    pub fn apply(&self, usage: Usage) -> Usage {
        if self.readings == 0 {
            return usage;
        }
        // Rounded to the nearest percent.
        let mean = (self.utilization_sum * 2 + self.readings) / (self.readings * 2);
        Usage {
            gpu_utilization_percent: Some(u32::try_from(mean).unwrap_or(100).min(100)),
            peak_gpu_memory_bytes: Some(self.peak_memory_bytes),
            ..usage
        }
    }
}

/// The readings of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used
/// --format=csv,noheader,nounits` (memory in MiB), by GPU index. Lines it cannot read (a GPU
/// that says `[N/A]` or `[Not Supported]`) are left out.
pub(crate) fn parse(text: &str) -> BTreeMap<u32, Reading> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(',').map(str::trim);
            let index = fields.next()?.parse().ok()?;
            let utilization_percent = fields.next()?.parse().ok()?;
            let memory_mib: u64 = fields.next()?.parse().ok()?;
            Some((
                index,
                Reading {
                    utilization_percent,
                    memory_bytes: memory_mib << 20,
                },
            ))
        })
        .collect()
}

/// Asks `nvidia-smi` about every GPU; `None` when it is absent, hangs or reads nothing. A
/// failing call still gives the GPUs it could read.
pub(crate) async fn query() -> Option<BTreeMap<u32, Reading>> {
    let run = tokio::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=index,utilization.gpu,memory.used",
            "--format=csv,noheader,nounits",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(QUERY_TIMEOUT, run).await {
        Ok(Ok(out)) => {
            let readings = parse(&String::from_utf8_lossy(&out.stdout));
            if !out.status.success() {
                tracing::debug!(status = %out.status, read = readings.len(), "nvidia-smi failed");
            }
            (!readings.is_empty()).then_some(readings)
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "nvidia-smi cannot run; no GPU sample");
            None
        }
        Err(_) => {
            tracing::warn!("nvidia-smi did not answer within 10 s; no GPU sample");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_lines_are_read_and_unreadable_ones_left_out() {
        let r = parse("0, 87, 40536\n1, [N/A], 12\n 2 ,0,0\ngarbage\n");
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[&0],
            Reading {
                utilization_percent: 87,
                memory_bytes: 40536 << 20
            }
        );
        assert_eq!(r[&2].utilization_percent, 0);
    }

    #[test]
    fn an_attempt_s_utilisation_is_the_mean_over_its_gpus_and_samples_and_its_memory_the_peak() {
        let mut tally = Tally::default();
        tally.add(&[0, 1], &parse("0, 100, 1000\n1, 50, 3000\n2, 0, 9000\n"));
        tally.add(&[0, 1], &parse("0, 20, 2000\n1, 30, 1000\n"));
        // A sample that misses one of its GPUs does not count.
        tally.add(&[0, 1], &parse("0, 0, 0\n"));
        let usage = tally.apply(Usage::default());
        // (100 + 50 + 20 + 30) / 4.
        assert_eq!(usage.gpu_utilization_percent, Some(50));
        assert_eq!(usage.peak_gpu_memory_bytes, Some(4000 << 20));
    }

    #[test]
    fn a_mean_below_one_percent_rounds_rather_than_truncates() {
        let mut tally = Tally::default();
        tally.add(&[0], &parse("0, 1, 0\n"));
        tally.add(&[0], &parse("0, 0, 0\n"));
        tally.add(&[0], &parse("0, 1, 0\n"));
        assert_eq!(
            tally.apply(Usage::default()).gpu_utilization_percent,
            Some(1)
        );
    }

    #[test]
    fn an_attempt_never_sampled_keeps_its_usage_as_it_was() {
        let usage = Usage {
            cpu_millis: 5,
            ..Usage::default()
        };
        assert_eq!(Tally::default().apply(usage), usage);
        let mut tally = Tally::default();
        tally.add(&[], &parse("0, 10, 10\n"));
        assert_eq!(tally.apply(usage), usage);
    }
}
