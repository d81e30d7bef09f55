//! The executor's background loops: the checkpoint scanner (with the log cap and progress
//! tails) and the GPU sampler. Each holds the executor weakly and ends once it is dropped.

use std::sync::Weak;
use std::time::Duration;

use super::Inner;
use crate::{checkpoint, gpu_usage};

/// The shortest scan period, so a zero `checkpoint_poll` cannot spin.
const MIN_POLL: Duration = Duration::from_millis(10);

/// The scanner loop (checkpoints, and logs past their limit); it ends when the executor is
/// dropped.
pub(crate) async fn scan_loop(inner: Weak<Inner>) {
    loop {
        // The period in force now: a reload may change it.
        let Some(poll) = inner.upgrade().map(|i| i.cfg().checkpoint_poll) else {
            return;
        };
        tokio::time::sleep(poll.max(MIN_POLL)).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Some((limit, dirs)) = inner.log_targets() {
            let _ = tokio::task::spawn_blocking(move || {
                dirs.iter().for_each(|d| crate::logcap::cap(d, limit))
            })
            .await;
        }
        let targets = inner.checkpoint_targets();
        if targets.is_empty() {
            continue;
        }
        inner.record_checkpoints(&checkpoint::scan(targets).await);
        let tails = inner.progress_targets();
        let _ = tokio::task::spawn_blocking(move || {
            for tail in tails {
                crate::progress::lock(&tail).poll();
            }
        })
        .await;
        inner.record_progress();
    }
}

/// Samples the GPUs of running attempts every `gpu_sample` (read again each round: a reload
/// may change it; zero: no sampling) until the executor is gone.
pub(crate) async fn sample_loop(inner: Weak<Inner>) {
    loop {
        let Some(every) = inner.upgrade().map(|i| i.cfg().gpu_sample) else {
            return;
        };
        if every.is_zero() {
            // Off; a reload may turn it on.
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        tokio::time::sleep(every).await;
        let Some(attempts) = inner.upgrade().map(|i| i.gpus_in_use()) else {
            return;
        };
        if attempts.is_empty() {
            continue;
        }
        if let Some(readings) = gpu_usage::query().await {
            let Some(inner) = inner.upgrade() else { return };
            inner.record_gpu_sample(&attempts, &readings);
        }
    }
}
