//! A small world for executor tests: a temporary data directory, an executor and its events,
//! with waits that are generous because the tests run real processes on a loaded machine.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use qm_executor::AttemptId;
use qm_executor::{
    ExecEvent, Exit, LaunchSpec, LocalConfig, LocalExecutor, PoolSpec, SupervisorCommand,
};
use tokio::sync::mpsc;

/// Long enough for a loaded 2-core machine; a test that needs it has failed anyway.
pub const WAIT: Duration = Duration::from_secs(60);

pub struct World {
    pub dir: tempfile::TempDir,
    pub exec: LocalExecutor,
    rx: mpsc::UnboundedReceiver<ExecEvent>,
    /// Every event received so far, in order.
    pub seen: Vec<ExecEvent>,
}

pub fn pool(instance_type: &str, count: u32, gpus_per_instance: u32) -> PoolSpec {
    PoolSpec::new(instance_type, count, gpus_per_instance)
}

impl World {
    /// Two CPU instances of ml.g5.xlarge, a 300 ms stop grace, checkpoints scanned every 50 ms.
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    pub fn with(tweak: impl FnOnce(&mut LocalConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        tweak(&mut cfg);
        let (tx, rx) = mpsc::unbounded_channel();
        let exec = LocalExecutor::new(cfg, tx).unwrap();
        World {
            dir,
            exec,
            rx,
            seen: Vec::new(),
        }
    }

    /// Another executor on the same data dir, as a previous (or next) server would have it,
    /// with its own events.
    pub fn executor_alike(&self) -> (LocalExecutor, mpsc::UnboundedReceiver<ExecEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (LocalExecutor::new(config(self.dir.path()), tx).unwrap(), rx)
    }

    /// Waits for the first event (already seen or new) that `pick` accepts.
    pub async fn wait_for<T>(&mut self, what: &str, pick: impl Fn(&ExecEvent) -> Option<T>) -> T {
        if let Some(found) = self.seen.iter().find_map(&pick) {
            return found;
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let event = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no {what} within {WAIT:?}; seen: {:#?}", self.seen))
                .expect("event channel closed");
            let found = pick(&event);
            self.seen.push(event);
            if let Some(found) = found {
                return found;
            }
        }
    }

    pub async fn exited(&mut self, attempt: u64) -> Exit {
        let outcome = self
            .wait_for("Exited", |e| match e {
                ExecEvent::Exited {
                    attempt: a,
                    outcome,
                    ..
                } if *a == AttemptId(attempt) => Some(outcome.clone()),
                _ => None,
            })
            .await;
        // As the server does once its log holds the exit: the supervisor may go.
        self.exec.acknowledge(&[AttemptId(attempt)]);
        self.exec.check_invariants().unwrap();
        outcome
    }

    /// The `Running` event's pids, GPUs and log directory.
    pub async fn running(&mut self, attempt: u64) -> (Vec<u32>, Vec<u32>, PathBuf) {
        self.wait_for("Running", |e| match e {
            ExecEvent::Running {
                attempt: a,
                pids,
                gpus,
                log_dir,
                ..
            } if *a == AttemptId(attempt) => Some((pids.clone(), gpus.clone(), log_dir.clone())),
            _ => None,
        })
        .await
    }

    /// Events of `attempt` received so far.
    pub fn events_of(&self, attempt: u64) -> Vec<&ExecEvent> {
        self.seen
            .iter()
            .filter(|e| match e {
                ExecEvent::Running { attempt: a, .. }
                | ExecEvent::Checkpoint { attempt: a, .. }
                | ExecEvent::Progress { attempt: a, .. }
                | ExecEvent::Exited { attempt: a, .. }
                | ExecEvent::Starting { attempt: a, .. } => *a == AttemptId(attempt),
                ExecEvent::Capacity { .. } => false,
            })
            .collect()
    }
}

/// A runtime for an executor of its own (one from [`World::executor_alike`]): a test drops it
/// to make that executor's server die, while the test's own runtime goes on.
pub fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The first `Running` event of `attempt` among `events`: its supervisor and pids.
pub async fn running_in(
    events: &mut mpsc::UnboundedReceiver<ExecEvent>,
    attempt: u64,
) -> (qm_executor::supervisor::Identity, Vec<u32>) {
    loop {
        match tokio::time::timeout(WAIT, events.recv()).await {
            Ok(Some(ExecEvent::Running {
                attempt: a,
                pids,
                supervisor,
                ..
            })) if a == AttemptId(attempt) => {
                return (supervisor.expect("a local attempt has a supervisor"), pids)
            }
            Ok(Some(_)) => {}
            other => panic!("no Running of attempt {attempt}: {other:?}"),
        }
    }
}

/// Two CPU instances of ml.g5.xlarge, a 300 ms stop grace, checkpoints scanned every 50 ms.
fn config(dir: &Path) -> LocalConfig {
    let mut cfg = LocalConfig::new(dir, vec![pool("ml.g5.xlarge", 2, 0)]);
    cfg.stop_grace = Duration::from_millis(300);
    cfg.checkpoint_poll = Duration::from_millis(50);
    cfg.supervisor = supervisor();
    cfg
}

/// The supervisor of these tests: what `qm supervise` runs, built by this crate.
pub fn supervisor() -> SupervisorCommand {
    SupervisorCommand {
        program: env!("CARGO_BIN_EXE_qm-executor-supervise").into(),
        args: Vec::new(),
    }
}

/// Attempt `attempt` of `job` running `sh -c script` on one ml.g5.xlarge.
pub fn sh(attempt: u64, job: &str, script: &str) -> LaunchSpec {
    LaunchSpec::new(
        AttemptId(attempt),
        job,
        "ml.g5.xlarge",
        vec!["sh".into(), "-c".into(), script.into()],
    )
}

pub fn failed(reason: &str) -> Exit {
    Exit::Failed {
        reason: reason.into(),
        retryable: true,
    }
}

/// `KEY=VALUE` lines (as `env` prints them) as a map.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Waits until `path` contains `needle` (the job says it is ready, e.g. its trap is set).
pub async fn wait_for_text(path: &Path, needle: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never contained {needle:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`until`] for a test without a runtime: polls `ready` every 20 ms for up to 10 s.
pub fn until_blocking(ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "not ready within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (at most [`WAIT`]) until `done`, failing with `what`.
pub async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
