//! How many trivial attempts per second the local executor sustains: keeps 64 instances busy
//! with `true` until N attempts (default 2000) have exited, then prints attempts/s.
//!
//! `cargo run --release -p qm-executor --example throughput [N] [INSTANCES] [DATA_DIR]`
//!
//! The data directory defaults to a fresh temporary directory. Most of the cost is the file
//! system creating each job's directory tree (8 directories, 2 log files), so the figure
//! depends on where DATA_DIR lives (try /dev/shm for the executor's own overhead).

use qm_executor::AttemptId;
use std::time::{Duration, Instant};

use qm_executor::{ExecEvent, Exit, LaunchSpec, LocalConfig, LocalExecutor, PoolSpec};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let total: u64 = args
        .next()
        .map_or(2000, |a| a.parse().expect("N: number of attempts"));
    let instances: u32 = args
        .next()
        .map_or(64, |a| a.parse().expect("INSTANCES: number of instances"));
    let dir = match args.next() {
        Some(parent) => tempfile::tempdir_in(parent),
        None => tempfile::tempdir(),
    }
    .expect("temporary directory");
    let mut cfg = LocalConfig::new(
        dir.path(),
        vec![PoolSpec::new("ml.g5.xlarge", instances, 0)],
    );
    cfg.stop_grace = Duration::from_secs(5);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let exec = LocalExecutor::new(cfg, tx).expect("executor");
    let launch = |attempt: u64| {
        // A fresh job per attempt, as the server would see for distinct jobs.
        let spec = LaunchSpec::new(
            AttemptId(attempt),
            format!("job-{attempt}"),
            "ml.g5.xlarge",
            vec!["true".into()],
        );
        exec.start(spec).expect("start within free capacity");
    };

    let began = Instant::now();
    let mut next = 0;
    while next < total.min(u64::from(instances)) {
        launch(next);
        next += 1;
    }
    let (mut done, mut failed) = (0u64, 0u64);
    while done < total {
        if let ExecEvent::Exited { outcome, .. } = rx.recv().await.expect("events") {
            {
                done += 1;
                if outcome != Exit::Succeeded {
                    failed += 1;
                    if failed == 1 {
                        eprintln!("first failure: {outcome:?}");
                    }
                }
                if next < total {
                    launch(next);
                    next += 1;
                }
            }
        }
    }
    let secs = began.elapsed().as_secs_f64();
    println!(
        "{total} attempts of `true` on {instances} instances in {secs:.2} s: {:.0} attempts/s ({failed} failed)",
        total as f64 / secs
    );
}
