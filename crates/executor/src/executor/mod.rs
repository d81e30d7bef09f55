//! The local executor: its configuration, the launch request, the events it reports, and the
//! shared state (inventory and running attempts) behind one mutex that is never held across
//! an await. Each attempt runs under a supervisor process of its own ([`crate::supervisor`]),
//! which outlives the server; the executor keeps one task per attempt that talks to it
//! ([`crate::supervisor::link`]). Checkpoint scanning, with the progress files, is one more
//! task for all attempts ([`crate::checkpoint`], [`crate::progress`]).

use qm_core::AttemptId;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::checkpoint::Watched;
use crate::container::Runtime;
use crate::inventory::Inventory;
use crate::isolation::{self, JobUids, UidPool};
use crate::layout::{self, log_file_name, JobLayout, LogStream};
use crate::progress::{lock, Steps, Tail};
use crate::supervisor::link::Conn;
use crate::supervisor::protocol::{Launch, Placement, Running, Settings, Status, ToSupervisor};
use crate::supervisor::zygote::{self, Zygote};
use crate::supervisor::{self as sup, Identity};
use crate::{ExecError, Exit, PoolSpec, Usage};
use qm_storage::Storage;

mod background;
mod link;

use link::Role;

/// How the local executor runs attempts.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The executor writes under `data_dir/jobs/<job_id>/...`.
    pub data_dir: PathBuf,
    /// Time between SIGTERM and SIGKILL when an attempt is stopped.
    pub stop_grace: Duration,
    /// The local instances.
    pub pools: Vec<PoolSpec>,
    /// GPUs to hand out, in order; `None` = 0..total GPUs of the pools.
    pub gpu_indices: Option<Vec<u32>>,
    /// How often running attempts' checkpoint directories are scanned.
    pub checkpoint_poll: Duration,
    /// Each attempt runs under a uid of its own from this range (the server must be root);
    /// `None`: attempts run as the server's user ([`crate::isolation`]).
    pub isolation: Option<JobUids>,
    /// Bytes of stdout (and of stderr) per process of an attempt before its log is rotated
    /// (`None`: unbounded).
    pub log_bytes_per_attempt: Option<u64>,
    /// Where channels, checkpoints and models are transferred (`None`: jobs with channels,
    /// `CheckpointConfig.S3Uri` or `OutputDataConfig` fail, saying so).
    pub storage: Option<Arc<Storage>>,
    /// How often a running attempt's changed checkpoints are uploaded.
    pub checkpoint_sync: Duration,
    /// Whether each attempt gets `/opt/ml` as its own directory ([`crate::namespace`]).
    pub opt_ml: OptMl,
    /// Host processes, or containers ([`crate::container`]).
    pub runtime: Runtime,
    /// What runs each attempt's supervisor.
    pub supervisor: SupervisorCommand,
    /// Where each host's control group goes ([`crate::cgroup`]); `None`: attempts are not
    /// confined.
    pub confinement: Option<crate::cgroup::Hierarchy>,
    /// How often the GPUs of running attempts are sampled with `nvidia-smi` for their usage
    /// (zero: never).
    pub gpu_sample: Duration,
    /// How often a supervisor looks whether its socket (and `server_dir`) is still there
    /// (tests shorten it; [`crate::supervisor::DEFAULT_ORPHAN_CHECK`] otherwise).
    pub orphan_check: Duration,
    /// The server's data dir, where it is not `data_dir` (job directories kept elsewhere):
    /// supervisors watch it too, and go (stopping their attempts) once it is removed.
    pub server_dir: Option<PathBuf>,
}

/// The program that runs a supervisor, and its arguments: `qm supervise` in the server (the
/// running binary itself, through `/proc/self/exe`, so that an upgrade that replaced the file
/// still starts supervisors of the running version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

impl Default for SupervisorCommand {
    fn default() -> Self {
        SupervisorCommand {
            program: PathBuf::from("/proc/self/exe"),
            args: vec!["supervise".into()],
        }
    }
}

/// `[executor] opt_ml`: whether attempts see their job directory at `/opt/ml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptMl {
    /// Where the server can (root): a private mount namespace per process.
    Auto,
    /// Always, or the executor refuses to start.
    Required,
    /// Never: jobs find their directories through the `SM_*` variables only.
    Off,
}

/// How often the GPUs of running attempts are sampled unless configured: often enough for a
/// mean over a job of minutes, seldom enough that `nvidia-smi` costs nothing to speak of.
pub const DEFAULT_GPU_SAMPLE: Duration = Duration::from_secs(10);

impl LocalConfig {
    /// SageMaker's defaults: a 120 s stop grace, checkpoints scanned every second, GPUs 0..n.
    pub fn new(data_dir: impl Into<PathBuf>, pools: Vec<PoolSpec>) -> Self {
        LocalConfig {
            data_dir: data_dir.into(),
            stop_grace: Duration::from_secs(120),
            pools,
            gpu_indices: None,
            checkpoint_poll: Duration::from_secs(1),
            isolation: None,
            log_bytes_per_attempt: None,
            storage: None,
            checkpoint_sync: Duration::from_secs(30),
            opt_ml: OptMl::Off,
            runtime: Runtime::Host,
            supervisor: SupervisorCommand::default(),
            confinement: None,
            gpu_sample: DEFAULT_GPU_SAMPLE,
            orphan_check: crate::supervisor::DEFAULT_ORPHAN_CHECK,
            server_dir: None,
        }
    }
}

/// One attempt to run, as the server derives it from the job's SageMaker payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// The core's attempt id: unique forever.
    pub attempt: AttemptId,
    /// The API job id (a UUID): names the per-job directory.
    pub job_id: String,
    /// 1-based, per job; names the attempt's log directory.
    pub attempt_number: u32,
    /// `SM_TRAINING_JOB_NAME`.
    pub job_name: String,
    /// The capacity unit, e.g. `ml.g5.xlarge`.
    pub instance_type: String,
    /// Instances; one process per instance (`SM_CURRENT_HOST` algo-1..algo-N).
    pub count: u32,
    /// `AlgorithmSpecification.ContainerEntrypoint`: program and its first arguments.
    pub entrypoint: Vec<String>,
    /// `ContainerArguments`, appended.
    pub arguments: Vec<String>,
    /// `AlgorithmSpecification.TrainingImage`: what the podman runtime runs.
    pub training_image: Option<String>,
    /// The payload's `Environment`.
    pub environment: BTreeMap<String, String>,
    /// The payload's `HyperParameters`.
    pub hyperparameters: BTreeMap<String, String>,
    /// The lower of `MaxRuntimeInSeconds` and `timeoutConfig`; the attempt is stopped after it.
    pub max_runtime: Option<Duration>,
    /// The payload's `CheckpointConfig.LocalPath`, if the user set one.
    pub checkpoint_path: Option<PathBuf>,
    /// The payload's `CheckpointConfig.S3Uri`: restored before, uploaded during and after
    /// every attempt.
    pub checkpoint_uri: Option<String>,
    /// The payload's `OutputDataConfig.S3OutputPath`: `model.tar.gz` and `output.tar.gz` go
    /// under `<it>/<job_name>/output/` after a success.
    pub output_path: Option<String>,
    /// The payload's `InputDataConfig`: a directory each under `input/data/`, described in
    /// `input/config/inputdataconfig.json`.
    pub channels: Vec<InputChannel>,
    /// Where the attempt gets the credentials of the job's role (its processes through the
    /// AWS SDKs' container credentials variables, its transfers likewise); `None`: the
    /// processes get none, and transfers use the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<RoleCredentials>,
}

/// The server's container credentials endpoint for one attempt.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleCredentials {
    /// `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
    pub url: String,
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`: the attempt's alone.
    pub token: String,
    /// `AWS_REGION`: the region of the server's storage.
    pub region: String,
    /// `AWS_ENDPOINT_URL_S3`, where the server's storage names one (MinIO, moto).
    pub s3_endpoint: Option<String>,
}

impl std::fmt::Debug for RoleCredentials {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleCredentials")
            .field("url", &self.url)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl RoleCredentials {
    /// The variables the AWS SDKs read them from.
    pub fn variables(&self) -> Vec<(String, String)> {
        let mut vars = vec![
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI".to_string(),
                self.url.clone(),
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN".to_string(),
                self.token.clone(),
            ),
            ("AWS_REGION".to_string(), self.region.clone()),
            ("AWS_DEFAULT_REGION".to_string(), self.region.clone()),
        ];
        if let Some(e) = &self.s3_endpoint {
            vars.push(("AWS_ENDPOINT_URL_S3".to_string(), e.clone()));
        }
        vars
    }
}

/// One input channel of an attempt (the server has checked the name: it is a plain directory
/// name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputChannel {
    /// `ChannelName`.
    pub name: String,
    /// Where its data lives (`s3://` or `file://`).
    pub uri: String,
    /// `S3DataType`: `S3Prefix` (every object under the URI) or `ManifestFile`.
    pub data_type: String,
    /// `File` or `FastFile`.
    pub input_mode: String,
    /// `S3DataDistributionType`.
    pub distribution: String,
    /// `ContentType`.
    pub content_type: Option<String>,
    /// `CompressionType`.
    pub compression: Option<String>,
    /// `RecordWrapperType`.
    pub record_wrapper: Option<String>,
}

impl LaunchSpec {
    /// Attempt number 1 of `job_id` on one instance, with no arguments, environment,
    /// hyperparameters, runtime limit or checkpoint path; the job name is the job id.
    pub fn new(
        attempt: AttemptId,
        job_id: impl Into<String>,
        instance_type: impl Into<String>,
        entrypoint: Vec<String>,
    ) -> Self {
        let job_id = job_id.into();
        LaunchSpec {
            attempt,
            job_name: job_id.clone(),
            job_id,
            attempt_number: 1,
            instance_type: instance_type.into(),
            count: 1,
            entrypoint,
            arguments: Vec::new(),
            training_image: None,
            environment: BTreeMap::new(),
            hyperparameters: BTreeMap::new(),
            max_runtime: None,
            checkpoint_path: None,
            checkpoint_uri: None,
            output_path: None,
            channels: Vec::new(),
            credentials: None,
        }
    }
}

/// What the executor reports, in order per attempt: `Running`, any `Checkpoint`s and
/// `Progress`es, `Exited`
/// (an attempt whose processes could not all be spawned gets only `Exited`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecEvent {
    /// All processes of the attempt were spawned.
    Running {
        /// The attempt.
        attempt: AttemptId,
        /// Process ids, one per host in host order; each is also its process group id, which
        /// is what [`LocalExecutor::reap_orphans`] stops when no supervisor holds it.
        pids: Vec<u32>,
        /// GPU indices of all hosts, in host order.
        gpus: Vec<u32>,
        /// The attempt's log directory (see [`crate::log_file_name`]).
        log_dir: PathBuf,
        /// Epoch milliseconds.
        at_ms: u64,
        /// Its supervisor, as the log must record it to find it again after a restart.
        supervisor: Option<Identity>,
    },
    /// The attempt was accepted by the cluster and waits to start (Slurm executor only); sent
    /// again when the reason it waits for changes.
    Starting {
        /// The attempt.
        attempt: AttemptId,
        /// Why the cluster has not started it yet, e.g. `Slurm job 12 is pending: Resources`.
        reason: Option<String>,
    },
    /// The instances the executor offers changed (Slurm executor only: nodes went down or
    /// came back, or jobs of others took or freed nodes).
    Capacity {
        /// Instances per instance type.
        capacity: BTreeMap<String, u32>,
    },
    /// The newest modification time under the checkpoint directory moved forward.
    Checkpoint {
        /// The attempt.
        attempt: AttemptId,
        /// That modification time, in epoch milliseconds.
        at_ms: u64,
    },
    /// The steps the attempt reported in its progress file moved ([`crate::progress`]): sent
    /// at most once per scan, and once more just before `Exited` if the last lines moved them.
    Progress {
        /// The attempt.
        attempt: AttemptId,
        /// Everything it reported so far (not only the change).
        steps: Steps,
    },
    /// Every process of the attempt is gone; its instances (and GPUs) are free again.
    Exited {
        /// The attempt.
        attempt: AttemptId,
        /// How it ended.
        outcome: Exit,
        /// Epoch milliseconds.
        at_ms: u64,
        /// What it used, where the executor counts it (the local executor's attempts that
        /// started).
        usage: Option<Usage>,
    },
}

/// Runs attempts as local process groups, each under a supervisor process of its own. Cheap to
/// clone; all clones share one state.
#[derive(Debug, Clone)]
pub struct LocalExecutor {
    inner: Arc<Inner>,
}

/// State shared by the executor handle, the supervisors' links and the checkpoint scanner.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The settings; [`LocalExecutor::reload`] replaces them (attempts take theirs at launch).
    cfg: std::sync::RwLock<Arc<LocalConfig>>,
    /// Whether attempts get `/opt/ml` ([`crate::namespace`]), as found at start-up.
    pub(crate) opt_ml: bool,
    events: mpsc::UnboundedSender<ExecEvent>,
    state: Mutex<State>,
    scanner_started: AtomicBool,
    /// This boot's id, for the supervisors' identities.
    boot_id: String,
    /// `<data-dir>/supervisors`, held open: sockets are named through `/proc/self/fd/<fd>`,
    /// whatever the length of the data dir's path (a socket's path has at most 107 bytes).
    supervisors: OwnedFd,
    /// Exits reported and waiting for the server's log to hold them before the supervisor is
    /// acknowledged.
    commits: Mutex<BTreeMap<AttemptId, tokio::sync::oneshot::Sender<()>>>,
    /// Acknowledgements decided and not yet written to their supervisors (a stopping server
    /// waits for them: [`LocalExecutor::settle`]).
    acks: tokio::sync::watch::Sender<u32>,
    /// What supervisors are forked from.
    zygote: Mutex<ZygoteState>,
    /// Supervisors whose attempts are acknowledged, free on their connections for the next
    /// attempt (most recently freed last).
    spares: Mutex<Vec<Spare>>,
}

/// A free supervisor ([`crate::supervisor::process`]): its connection, and who it is.
#[derive(Debug)]
struct Spare {
    conn: Conn,
    identity: Identity,
}

/// The most free supervisors the executor keeps; one more is let go (it exits). Each costs a
/// few hundred KiB and no CPU.
const MAX_SPARE: usize = 64;

/// The supervisor zygote ([`crate::supervisor::zygote`]).
#[derive(Debug)]
enum ZygoteState {
    /// Not started yet.
    Idle,
    Running(Zygote),
    /// It failed at this instant: supervisors are executed until [`ZYGOTE_RETRY`] later.
    Off(std::time::Instant),
}

impl ZygoteState {
    /// The zygote failed (`why`): it is stopped (dropped: killed and reaped) and supervisors
    /// are executed until [`ZYGOTE_RETRY`] later.
    fn fail(&mut self, why: &dyn std::fmt::Display) {
        tracing::warn!(%why, "the supervisor zygote failed; supervisors are executed for a while");
        *self = ZygoteState::Off(std::time::Instant::now());
    }
}

/// How long after a failure of the zygote supervisors are executed before it is tried again.
const ZYGOTE_RETRY: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct State {
    inventory: Inventory,
    attempts: BTreeMap<AttemptId, Slot>,
    /// The uids of running attempts, when attempts run apart from the server.
    uids: Option<UidPool>,
    /// What this server knows its control groups to be limited to.
    limited: Limited,
}

/// The share each control group was last limited to by an attempt this server started,
/// known once that attempt ran: the next attempt in the group under the same share need not
/// have its supervisor read the limits back ([`Launch::limits_kept`]). Forgotten when an
/// attempt is placed in the group, until that one runs (a supervisor that failed half-way
/// may have left any limits); empty after a restart, and an adopted attempt adds nothing
/// (it may run under the share of a config since changed).
#[derive(Debug, Default)]
struct Limited(BTreeMap<String, crate::cgroup::Share>);

impl Limited {
    /// Whether every one of `groups` holds `share`'s limits, for an attempt placed in them
    /// now (under its own uid: an attempt of the server's uid could write its group's
    /// files). Each group is forgotten until the attempt runs.
    fn kept(&mut self, groups: &[String], share: Option<crate::cgroup::Share>, uid: bool) -> bool {
        let mut kept = uid && share.is_some() && !groups.is_empty();
        for group in groups {
            kept &= self.0.remove(group) == share;
        }
        kept
    }

    /// An attempt started under `share` on `instances` ran in `groups`: its supervisor
    /// limited them. Only the instances' own groups are kept: a group named for one attempt
    /// (its instance's was still held) is never taken again.
    fn ran(&mut self, groups: &[String], instances: &[usize], share: crate::cgroup::Share) {
        let own = crate::cgroup::instance_groups(instances);
        for group in groups.iter().filter(|g| own.contains(g)) {
            self.0.insert(group.clone(), share);
        }
    }
}

/// A started (or adopted) attempt, until its `Exited` event.
#[derive(Debug)]
struct Slot {
    instances: Vec<usize>,
    /// The control groups its hosts run in ([`Placement::groups`]).
    groups: Vec<String>,
    /// Whether its groups go when it ends: an adopted attempt whose instances are not the
    /// ones its groups were named (and their device rules written) after.
    retire_groups: bool,
    job_id: String,
    attempt_number: u32,
    /// Its log directory, where the outcome is written before `Exited` is sent.
    attempt_dir: PathBuf,
    /// To its supervisor.
    link: Arc<link::Outbox>,
    /// Its supervisor, once known.
    supervisor: Option<Identity>,
    /// A supervisor the log does not know, asked to stop: nothing of it is reported.
    stray: bool,
    /// Set once every process is spawned.
    pgids: Vec<u32>,
    /// The uid the attempt runs as, when isolated.
    uid: Option<u32>,
    /// The share its groups are limited to, until it runs (see [`Limited`]); `None` for an
    /// adopted attempt.
    share: Option<crate::cgroup::Share>,
    /// Set once every process is spawned; the scanner skips the attempt before.
    checkpoints: Option<Watched>,
    /// The reader of its progress file, set with `checkpoints`; shared with the scanner,
    /// which reads outside the state lock.
    progress: Option<Arc<Mutex<Tail>>>,
    /// Its GPUs, as samples of them saw them ([`crate::gpu_usage`]).
    gpu: crate::gpu_usage::Tally,
}

impl Slot {
    /// The slot of an attempt placed on `p`, before its processes are known.
    fn new(
        data_dir: &Path,
        p: &Placement,
        link: Arc<link::Outbox>,
        supervisor: Option<Identity>,
        stray: bool,
    ) -> Slot {
        Slot {
            instances: p.instances.clone(),
            groups: p.groups.clone(),
            retire_groups: false,
            job_id: p.job_id.clone(),
            attempt_number: p.attempt_number,
            attempt_dir: JobLayout::new(data_dir, &p.job_id, p.attempt_number).attempt_dir,
            link,
            supervisor,
            stray,
            pgids: Vec::new(),
            uid: p.uid,
            share: None,
            checkpoints: None,
            progress: None,
            gpu: crate::gpu_usage::Tally::default(),
        }
    }
}

pub use crate::supervisor::OUTCOME_FILE;

/// An attempt the log says was live when the server last stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The attempt.
    pub attempt: AttemptId,
    /// Its job's API id.
    pub job_id: String,
    /// Its number within the job.
    pub attempt_number: u32,
    /// The process groups recorded for it (releases before supervisors: what to stop).
    pub pids: Vec<u32>,
    /// Its supervisor, if the log recorded one.
    pub supervisor: Option<Identity>,
    /// Whether the server had asked it to stop (a preemption, a termination): the stop is
    /// carried on.
    pub stopping: bool,
}

/// What became of a recorded attempt while no server watched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Its supervisor answered: it goes on. `running` is set when it runs but the log did not
    /// know yet (the server stopped between the spawn and recording it).
    Adopted {
        /// Its processes, GPUs and supervisor, when they are news to the log.
        running: Option<(Vec<u32>, Vec<u32>, Identity)>,
    },
    /// It ended: as its outcome file says.
    Ended(Exit, Option<Usage>),
    /// Its supervisor is gone (it died, or the machine rebooted): lost, for this reason.
    Lost(String),
}

impl LocalExecutor {
    /// An executor that reports to `events`. Fails if the pools need more GPUs than
    /// `gpu_indices` lists, or list one twice.
    pub fn new(
        mut cfg: LocalConfig,
        events: mpsc::UnboundedSender<ExecEvent>,
    ) -> Result<Self, ExecError> {
        // The marker that finds a previous server's processes compares this path, so both
        // processes must be one spelling.
        cfg.data_dir = layout::prepare_root(&cfg.data_dir)?;
        let inventory = Inventory::build(&cfg.pools, cfg.gpu_indices.as_deref())?;
        if let Some(range) = cfg.isolation {
            isolation::check_usable(range, &cfg.data_dir, inventory.capacity().values().sum())?;
        }
        let uids = cfg.isolation.map(UidPool::new);
        let opt_ml = match cfg.opt_ml {
            // A container has its own /opt/ml.
            _ if cfg.runtime.runs_images() => false,
            OptMl::Off => false,
            mode => match crate::namespace::probe(&cfg.data_dir.join("jobs")) {
                Ok(()) => true,
                Err(why) if mode == OptMl::Auto => {
                    tracing::warn!("attempts do not get /opt/ml ({why}); jobs find their directories through the SM_* variables");
                    false
                }
                Err(why) => return Err(ExecError::OptMl(why)),
            },
        };
        let supervisors = open_supervisors_dir(&cfg.data_dir)?;
        // Adoption and every signal to a supervisor go through pidfds: without them nothing
        // could be verified, and a restart would lose (or double) every attempt.
        rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        )
        .map_err(|e| ExecError::NoPidfd(e.to_string()))?;
        Ok(LocalExecutor {
            inner: Arc::new(Inner {
                opt_ml,
                cfg: std::sync::RwLock::new(Arc::new(cfg)),
                events,
                state: Mutex::new(State {
                    inventory,
                    attempts: BTreeMap::new(),
                    uids,
                    limited: Limited::default(),
                }),
                scanner_started: AtomicBool::new(false),
                boot_id: sup::boot_id(),
                supervisors,
                commits: Mutex::new(BTreeMap::new()),
                acks: tokio::sync::watch::Sender::new(0),
                zygote: Mutex::new(ZygoteState::Idle),
                spares: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Whether attempts see their job directory at `/opt/ml`.
    pub fn opt_ml(&self) -> bool {
        self.inner.opt_ml
    }

    /// Instances per instance type, free or not (what the core gets as physical capacity).
    pub fn capacity(&self) -> BTreeMap<String, u32> {
        self.inner.state().inventory.capacity()
    }

    /// The pid of the supervisor zygote, while one runs (for diagnostics and tests).
    pub fn zygote(&self) -> Option<u32> {
        match &*self
            .inner
            .zygote
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            ZygoteState::Running(z) => Some(z.pid()),
            _ => None,
        }
    }

    /// Applies a reloaded configuration (SIGHUP, `qm reload`): the pools are resized at once
    /// (grown instances are free now; a removed one that runs an attempt goes when it ends)
    /// and a changed capacity is reported as an event; every other setting applies to the
    /// attempts launched from now on, and to scans. What takes a restart (the data dir,
    /// isolation, `/opt/ml`, the supervisor) is kept as it is; switching between host
    /// processes and images is refused. Nothing changes on error.
    pub fn reload(&self, mut cfg: LocalConfig) -> Result<(), ExecError> {
        let old = self.inner.cfg();
        if old.runtime.runs_images() != cfg.runtime.runs_images() {
            return Err(ExecError::Reload(
                "executor.runtime: switching between host processes and podman takes a restart"
                    .into(),
            ));
        }
        cfg.data_dir = old.data_dir.clone();
        cfg.isolation = old.isolation;
        cfg.opt_ml = old.opt_ml;
        cfg.supervisor = old.supervisor.clone();
        let (before, after) = {
            let mut state = self.inner.state();
            let before = state.inventory.capacity();
            state
                .inventory
                .resize(&cfg.pools, cfg.gpu_indices.as_deref())?;
            (before, state.inventory.capacity())
        };
        *self
            .inner
            .cfg
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(cfg);
        if before != after {
            let _ = self
                .inner
                .events
                .send(ExecEvent::Capacity { capacity: after });
        }
        Ok(())
    }

    /// Free instances of `instance_type` now.
    pub fn free(&self, instance_type: &str) -> u32 {
        self.inner.state().inventory.free(instance_type)
    }

    /// Starts an attempt under a supervisor of its own; must be called inside a tokio runtime;
    /// never blocks on the attempt.
    ///
    /// Directories, log files and processes are created by the supervisor, so a failure there
    /// (program not found, not executable, cannot create directories) arrives as
    /// `Exited { Failed { reason: "...ClientError: cannot start '<program>': ...", retryable: true } }`.
    /// A missing entrypoint arrives the same way, with `retryable: false`, and so does a
    /// supervisor that cannot be started. Errors are for caller bugs: more instances than are
    /// free, an unknown type, `count` 0, a duplicate attempt id, a job id that cannot name a
    /// directory, no runtime.
    pub fn start(&self, spec: LaunchSpec) -> Result<(), ExecError> {
        self.begin(spec, false)
    }

    /// Takes the attempt's instances and launches it, held until released if `hold`.
    fn begin(&self, spec: LaunchSpec, hold: bool) -> Result<(), ExecError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ExecError::NoRuntime)?;
        if spec.count == 0 {
            return Err(ExecError::NoInstances(spec.attempt));
        }
        if !layout::valid_job_id(&spec.job_id) {
            return Err(ExecError::InvalidJobId(spec.job_id));
        }
        let outbox = Arc::new(link::Outbox::default());
        let settings = self.inner.settings(&spec.instance_type);
        let share = settings.confinement.as_ref().map(|c| c.share);
        let (placement, limits_kept) = self.inner.place(&spec, outbox.clone(), share)?;
        self.inner.start_scanner(&runtime);
        tracing::debug!(attempt = spec.attempt.0, job_id = %spec.job_id, count = spec.count, "starting attempt");
        let launch = Launch {
            settings,
            spec,
            placement,
            hold,
            limits_kept,
        };
        // The supervisor is found and connected off the caller's thread (the server's driver
        // starts a batch's attempts one after the other and must not wait on each one's
        // zygote round trip); a go or stop told meanwhile waits in the attempt's outbox.
        runtime.spawn(self.inner.clone().launch(launch, outbox));
        Ok(())
    }

    /// [`LocalExecutor::start`] in two steps, for a caller that may start an attempt only
    /// once its decision is durable: the attempt's instances are taken, its supervisor forked
    /// (or found free) and told of the launch with `hold` now, while the caller makes the
    /// decision durable, and the supervisor prepares the job's directories and config files
    /// meanwhile; nothing of the job runs until [`LocalExecutor::release`]. A supervisor
    /// never released (its server could not make the start durable, and exits) is stopped by
    /// the next server as one its log does not know, and writes no outcome.
    pub fn ready(&self, spec: LaunchSpec) -> Result<(), ExecError> {
        self.begin(spec, true)
    }

    /// Starts an attempt [`LocalExecutor::ready`] got ready; a no-op for any other.
    pub fn release(&self, attempt: AttemptId) {
        self.inner.tell(attempt, ToSupervisor::Go);
    }

    /// Stops an attempt: its supervisor sends SIGTERM to each process group and SIGKILL to
    /// what is left after `stop_grace`, even if the server is gone meanwhile; the `Exited`
    /// event comes once every process is gone and reports the real outcome. Idempotent; an
    /// unknown attempt is a no-op.
    pub fn stop(&self, attempt: AttemptId) {
        self.inner.tell(attempt, ToSupervisor::Stop);
    }

    /// The per-job directory (`data_dir/jobs/<job_id>`).
    pub fn job_dir(&self, job_id: &str) -> PathBuf {
        layout::job_dir(&self.inner.cfg().data_dir, job_id)
    }

    /// The log directory of attempt number `attempt_number` of `job_id`.
    pub fn log_dir(&self, job_id: &str, attempt_number: u32) -> PathBuf {
        JobLayout::new(&self.inner.cfg().data_dir, job_id, attempt_number).attempt_dir
    }

    /// After a server restart, before any `start`: what became of each attempt the log says
    /// was live, as slurmd reconciles its steps. A supervisor that answers and is who the log
    /// says is adopted (the attempt goes on; a stop the previous server had begun is carried
    /// on); one that has ended is acknowledged and its outcome taken; a recorded outcome file
    /// stands for an attempt whose supervisor is gone; anything else is lost, after its
    /// processes are stopped. Supervisors the log does not know are asked to stop, and every
    /// process of this data dir's attempts that no live supervisor holds is stopped too.
    pub async fn reconcile(&self, recorded: Vec<Recorded>) -> Vec<(AttemptId, Reconciled)> {
        let runtime = tokio::runtime::Handle::current();
        self.inner.start_scanner(&runtime);
        let mut out = Vec::with_capacity(recorded.len());
        let known: BTreeSet<AttemptId> = recorded.iter().map(|r| r.attempt).collect();
        for r in recorded {
            let what = self.inner.clone().reconcile_one(&r).await;
            out.push((r.attempt, what));
        }
        self.inner.clone().stop_strays(&known).await;
        self.reap_orphans().await;
        crate::layout::remove_spares(&self.inner.cfg().data_dir);
        out
    }

    /// Stops every process marked with this data dir that no live supervisor of this executor
    /// holds (what a previous server's crashed supervisors, or releases before supervisors,
    /// left): SIGTERM, up to `stop_grace`, SIGKILL, and returns once they are gone (or 10 s
    /// after SIGKILL, with a warning).
    pub async fn reap_orphans(&self) {
        self.reap_orphans_but(None).await;
    }

    /// [`Self::reap_orphans`], where the attempt `gone` (its supervisor died) has no say in
    /// what is kept any more.
    async fn reap_orphans_but(&self, gone: Option<AttemptId>) {
        // A scan of /proc reads every process's environment: off the runtime's workers.
        let exec = self.clone();
        let orphans = tokio::task::spawn_blocking(move || exec.orphans())
            .await
            .unwrap_or_default();
        if !orphans.is_empty() {
            tracing::info!(
                groups = orphans.len(),
                "stopping processes no supervisor holds"
            );
            crate::group::reap(orphans, self.inner.cfg().stop_grace).await;
        }
        if let Some(hierarchy) = self.inner.cfg().confinement.clone() {
            // At start (`gone` is None only there), every group no live attempt runs in goes;
            // later, only those of the attempt whose supervisor died: other instances' groups
            // may be taken by attempts being launched meanwhile.
            let left = match gone {
                None => {
                    let keep = self.live_names(None, |_, slot| slot.groups.clone());
                    tokio::task::spawn_blocking(move || crate::cgroup::sweep(&hierarchy, &keep))
                        .await
                }
                Some(a) => {
                    let dead = self
                        .inner
                        .state()
                        .attempts
                        .get(&a)
                        .map(|s| s.groups.clone());
                    let dead = dead.unwrap_or_default();
                    tokio::task::spawn_blocking(move || crate::cgroup::discard(&hierarchy, dead))
                        .await
                }
            }
            .unwrap_or_default();
            for group in left {
                tracing::warn!("a control group is left behind: {group}");
            }
        }
        if let Runtime::Podman(podman) = &self.inner.cfg().runtime {
            // A container outlives a SIGKILLed `podman run`; adopted attempts keep theirs.
            let keep = self.live_names(gone, |a, slot| [format!("qm-{}-{a}-algo-", slot.job_id)]);
            crate::container::remove_labelled(
                podman,
                &crate::container::label(&self.inner.cfg().data_dir),
                &keep,
            )
            .await;
        }
    }

    /// What `names` says of each live attempt but `gone`, in one list: the control groups of
    /// the instances they hold, or their containers' name prefixes.
    fn live_names<I: IntoIterator<Item = String>>(
        &self,
        gone: Option<AttemptId>,
        names: impl Fn(AttemptId, &Slot) -> I,
    ) -> Vec<String> {
        let state = self.inner.state();
        let live = state.attempts.iter().filter(|(a, _)| Some(**a) != gone);
        live.flat_map(|(&a, slot)| names(a, slot)).collect()
    }

    /// Process groups of live processes marked with this executor's data directory that no
    /// supervisor of its attempts is an ancestor of: whatever a previous server or a dead
    /// supervisor left behind. Empty where /proc cannot be read.
    pub fn orphans(&self) -> Vec<u32> {
        let supervisors: BTreeSet<u32> = self
            .inner
            .state()
            .attempts
            .values()
            .filter_map(|s| s.supervisor.as_ref().map(|i| i.pid))
            .collect();
        crate::group::marked_groups_outside(&self.inner.cfg().data_dir, &supervisors)
            .into_iter()
            .collect()
    }

    /// How attempt `attempt_number` of `job_id` ended, as recorded before its `Exited` event;
    /// `None` when it has not ended (or never started here).
    pub fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Exit> {
        sup::read_outcome(&self.log_dir(job_id, attempt_number))
    }

    /// Number of attempts started (or adopted) and not yet `Exited`.
    pub fn running(&self) -> usize {
        self.inner
            .state()
            .attempts
            .values()
            .filter(|s| !s.stray)
            .count()
    }

    /// The server's log holds the exits of `attempts`: their supervisors are acknowledged (and
    /// go). Until then a supervisor keeps its report for the next server.
    pub fn acknowledge(&self, attempts: &[AttemptId]) {
        let mut commits = self
            .inner
            .commits
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for attempt in attempts {
            if let Some(tx) = commits.remove(attempt) {
                self.inner.acks.send_modify(|n| *n += 1);
                if tx.send(()).is_err() {
                    self.inner.ack_written();
                }
            }
        }
    }

    /// For a stopping server, after its last commit: waits (at most `within`) until every
    /// acknowledgement it decided is written to its supervisor. Otherwise the supervisor of
    /// an attempt that ended just before the stop would wait for the next server to learn
    /// what the log already holds.
    pub async fn settle(&self, within: Duration) {
        let mut acks = self.inner.acks.subscribe();
        let _ = tokio::time::timeout(within, acks.wait_for(|n| *n == 0)).await;
        self.remove_idle_groups();
    }

    /// A stopping server with no attempt: its control groups go (see
    /// [`crate::cgroup::remove_empty`]). With one, they stay as they are: its supervisor may
    /// be taking its group at this moment, and the next server sweeps at its start anyway.
    fn remove_idle_groups(&self) {
        let Some(hierarchy) = self.inner.cfg().confinement.clone() else {
            return;
        };
        if !self.inner.state().attempts.is_empty() {
            return;
        }
        let removed = crate::cgroup::remove_empty(&hierarchy);
        tracing::debug!(
            removed,
            "removed the control groups of this server's idle instances"
        );
    }

    /// How many supervisors wait free for the next attempt.
    pub fn free_supervisors(&self) -> usize {
        self.inner
            .spares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The supervisor of a running attempt, once known.
    pub fn supervisor(&self, attempt: AttemptId) -> Option<Identity> {
        self.inner.identity(attempt)
    }

    /// Checks that every instance is free or held by exactly one running attempt.
    pub fn check_invariants(&self) -> Result<(), String> {
        let state = self.inner.state();
        let held: Vec<usize> = state
            .attempts
            .values()
            .flat_map(|slot| slot.instances.iter().copied())
            .collect();
        state.inventory.check_invariants(&held)
    }
}

/// What answers at a supervisor's socket.
enum Answer {
    /// Its supervisor, and what it said.
    Hello(Box<Conn>, Box<sup::protocol::Hello>),
    /// No socket, or nothing listens on it.
    Nobody,
    /// Something listens but would not say hello, and why.
    Silent(String),
}

/// Creates `<data-dir>/supervisors` (the server's only) and opens it.
fn open_supervisors_dir(data_dir: &Path) -> Result<OwnedFd, ExecError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = data_dir.join(sup::SUPERVISORS_DIR);
    let made = std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .or_else(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Ok(()),
            _ => Err(e),
        });
    let opened = made.and_then(|()| {
        rustix::fs::open(
            &dir,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(std::io::Error::from)
    });
    opened.map_err(|source| ExecError::CreateDir { path: dir, source })
}

impl Inner {
    /// The settings in force now.
    pub(crate) fn cfg(&self) -> Arc<LocalConfig> {
        self.cfg
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not wedge the executor: the state stays consistent because
        // every critical section is a few map operations.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The short name of attempt `attempt`'s socket (through the held directory).
    fn socket(&self, attempt: AttemptId) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!(
            "/proc/self/fd/{}/{attempt}.sock",
            self.supervisors.as_raw_fd()
        ))
    }

    /// What an attempt on `instance_type` runs with (one reading: a reload meanwhile gives it
    /// the old settings or the new, never a mix).
    fn settings(&self, instance_type: &str) -> Settings {
        let cfg = self.cfg();
        let confinement = cfg.confinement.as_ref().map(|hierarchy| {
            let machine = crate::cgroup::Machine::this();
            crate::cgroup::Confinement {
                hierarchy: hierarchy.clone(),
                share: crate::cgroup::share(&cfg.pools, machine, instance_type),
            }
        });
        Settings {
            confinement,
            data_dir: cfg.data_dir.clone(),
            stop_grace_ms: cfg.stop_grace.as_millis() as u64,
            isolation: cfg.isolation,
            opt_ml: self.opt_ml,
            runtime: cfg.runtime.clone(),
            storage: cfg.storage.as_ref().map(|s| s.settings().clone()),
            checkpoint_sync_ms: cfg.checkpoint_sync.as_millis() as u64,
            orphan_check_ms: cfg.orphan_check.as_millis() as u64,
            server_dir: cfg.server_dir.clone(),
        }
    }

    fn start_scanner(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        if !self.scanner_started.swap(true, Ordering::Relaxed) {
            runtime.spawn(background::scan_loop(Arc::downgrade(self)));
            runtime.spawn(background::sample_loop(Arc::downgrade(self)));
        }
    }

    /// Takes the instances (and uid) of a new attempt, to be confined under `share`, and
    /// records its slot; whether its groups hold that share's limits already
    /// ([`Launch::limits_kept`]).
    fn place(
        &self,
        spec: &LaunchSpec,
        link: Arc<link::Outbox>,
        share: Option<crate::cgroup::Share>,
    ) -> Result<(Placement, bool), ExecError> {
        let mut state = self.state();
        if state.attempts.contains_key(&spec.attempt) {
            return Err(ExecError::DuplicateAttempt(spec.attempt));
        }
        let instances = state
            .inventory
            .take(spec.attempt, &spec.instance_type, spec.count)?;
        // Never empty: check_usable made the range at least as large as the instances.
        let uid = match state.uids.as_mut() {
            Some(pool) => match pool.take() {
                Some(uid) => Some(uid),
                None => {
                    state.inventory.give_back(&instances);
                    return Err(ExecError::NoJobUid(spec.attempt));
                }
            },
            None => None,
        };
        let hosts: Vec<Vec<u32>> = instances
            .iter()
            .map(|&id| state.inventory.gpus(id).to_vec())
            .collect();
        let groups = match self.cfg().confinement {
            Some(_) => {
                let taken = state.attempts.values().flat_map(|s| &s.groups);
                crate::cgroup::names_for(&instances, taken, spec.attempt)
            }
            None => Vec::new(),
        };
        let limits_kept = state.limited.kept(&groups, share, uid.is_some());
        let placement = Placement {
            job_id: spec.job_id.clone(),
            attempt_number: spec.attempt_number,
            instance_type: spec.instance_type.clone(),
            instances,
            hosts,
            uid,
            groups,
        };
        let mut slot = Slot::new(&self.cfg().data_dir, &placement, link, None, false);
        // Only an attempt of a uid of its own leaves its groups' limits as it found them.
        slot.share = share.filter(|_| uid.is_some());
        state.attempts.insert(spec.attempt, slot);
        Ok((placement, limits_kept))
    }

    /// Starts `launch`'s supervisor, hands it the attempt and serves it until it is done; a
    /// supervisor that cannot be started ends the attempt as a retryable failure.
    async fn launch(self: Arc<Self>, launch: Launch, outbox: Arc<link::Outbox>) {
        let attempt = launch.spec.attempt;
        match self.spawn_supervisor(attempt).await {
            Ok((conn, identity)) => {
                self.set_supervisor(attempt, identity);
                let first = vec![
                    ToSupervisor::Hello {
                        protocol: sup::PROTOCOL,
                        attempt,
                    },
                    ToSupervisor::Launch(Box::new(launch)),
                ];
                link::run(self, attempt, conn, first, outbox, Role::Attempt).await;
            }
            Err(e) => self.finish(
                attempt,
                Exit::Failed {
                    reason: format!(
                        "Received status from SageMaker: InternalServerError: cannot start the attempt's supervisor: {e}"
                    ),
                    retryable: true,
                },
                None,
            ),
        }
    }

    /// A free supervisor with its socket renamed to the attempt's; else binds the attempt's
    /// socket, starts its supervisor with the listening socket as its standard input —
    /// forked from the zygote, else executed — and connects.
    async fn spawn_supervisor(&self, attempt: AttemptId) -> std::io::Result<(Conn, Identity)> {
        if let Some(spare) = self.take_spare(attempt) {
            return Ok(spare);
        }
        let socket = self.socket(attempt);
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket)?;
        let pid = match self.fork_from_zygote(listener.as_fd()).await {
            Some(pid) => pid,
            None => {
                // A zygote that failed after it got the socket may still fork a supervisor
                // onto it: the executed one gets a socket of its own (the other, unreachable,
                // gives up after its wait for a connection).
                drop(listener);
                let _ = std::fs::remove_file(&socket);
                self.exec_supervisor(std::os::unix::net::UnixListener::bind(&socket)?)?
            }
        };
        let identity = Identity::of(pid, &self.boot_id).ok_or_else(|| {
            std::io::Error::other(format!("the supervisor (pid {pid}) has no /proc entry"))
        })?;
        Ok((Conn::connect(&socket)?, identity))
    }

    /// A supervisor forked from the zygote (started now if there is none); `None` when the
    /// zygote failed, or failed lately: the caller executes the supervisor instead.
    async fn fork_from_zygote(&self, listener: std::os::fd::BorrowedFd<'_>) -> Option<u32> {
        // A server that is PID 1 (a container without an init) would inherit every
        // double-forked supervisor and never reap it: executed ones are its children, reaped.
        if rustix::process::getpid().is_init() {
            return None;
        }
        let (answer, zygote_pid) = self.request_fork(listener)?;
        let why = match tokio::time::timeout(zygote::ANSWER_TIMEOUT, answer).await {
            Ok(Ok(0)) => "it could not fork",
            Ok(Ok(pid)) => return Some(pid),
            Ok(Err(_)) => "it is gone",
            Err(_) => "it did not answer in time",
        };
        // Still the one in use (not one that failed before and was replaced): set aside.
        let mut zygote = self.zygote.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(&*zygote, ZygoteState::Running(z) if z.pid() == zygote_pid) {
            zygote.fail(&why);
        }
        None
    }

    /// Sends `listener` to the zygote (started now if there is none): the answer to wait for
    /// and the zygote's pid; `None` when there is no zygote to ask.
    fn request_fork(
        &self,
        listener: std::os::fd::BorrowedFd<'_>,
    ) -> Option<(tokio::sync::oneshot::Receiver<u32>, u32)> {
        let mut zygote = self.zygote.lock().unwrap_or_else(PoisonError::into_inner);
        if let ZygoteState::Off(since) = *zygote {
            if since.elapsed() < ZYGOTE_RETRY {
                return None;
            }
            *zygote = ZygoteState::Idle;
        }
        if matches!(*zygote, ZygoteState::Idle) {
            match Zygote::start(&self.cfg().supervisor) {
                Ok(z) => *zygote = ZygoteState::Running(z),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the supervisor zygote; supervisors are executed");
                    *zygote = ZygoteState::Off(std::time::Instant::now());
                    return None;
                }
            }
        }
        let ZygoteState::Running(z) = &*zygote else {
            return None;
        };
        match z.request(listener) {
            Ok(answer) => Some((answer, z.pid())),
            Err(e) => {
                zygote.fail(&e);
                None
            }
        }
    }

    /// A supervisor executed anew (the zygote's fallback). It is the server's child until
    /// the server goes (reaped by a task of its own), in a session of its own from its first
    /// instruction on.
    fn exec_supervisor(&self, listener: std::os::unix::net::UnixListener) -> std::io::Result<u32> {
        // Its messages go where the server's go (standard error).
        let cfg = self.cfg();
        let mut child = tokio::process::Command::new(&cfg.supervisor.program)
            .args(&cfg.supervisor.args)
            .stdin(std::process::Stdio::from(OwnedFd::from(listener)))
            .stdout(std::process::Stdio::null())
            .kill_on_drop(false)
            .spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| std::io::Error::other("the supervisor exited at once"))?;
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(pid)
    }

    /// Keeps a supervisor that said it is free ([`MAX_SPARE`] at most).
    pub(crate) fn keep_spare(&self, conn: Conn, identity: Identity) {
        let mut spares = self.spares.lock().unwrap_or_else(PoisonError::into_inner);
        if spares.len() < MAX_SPARE {
            spares.push(Spare { conn, identity });
        }
    }

    /// The most recently freed supervisor that is still there, its socket renamed to
    /// `attempt`'s; `None` when there is none. One that is gone, or whose socket is, is let
    /// go.
    fn take_spare(&self, attempt: AttemptId) -> Option<(Conn, Identity)> {
        loop {
            let mut spare = self
                .spares
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop()?;
            if !spare.conn.idle() {
                continue;
            }
            let from = sup::free_socket_name(spare.identity.pid);
            let to = sup::socket_name(attempt);
            match rustix::fs::renameat(&self.supervisors, &from, &self.supervisors, &to) {
                Ok(()) => return Some((spare.conn, spare.identity)),
                Err(e) => {
                    tracing::warn!(pid = spare.identity.pid, error = %e, "a free supervisor's socket cannot be renamed; letting it go");
                }
            }
        }
    }

    /// The supervisor of a started (or adopted) attempt, once known.
    pub(crate) fn identity(&self, attempt: AttemptId) -> Option<Identity> {
        self.state().attempts.get(&attempt)?.supervisor.clone()
    }

    /// Sends `msg` to a started (or adopted) attempt's supervisor; nothing for another.
    fn tell(&self, attempt: AttemptId, msg: ToSupervisor) {
        let outbox = self.state().attempts.get(&attempt).map(|s| s.link.clone());
        if let Some(outbox) = outbox {
            outbox.tell(&msg);
        }
    }

    fn set_supervisor(&self, attempt: AttemptId, identity: Identity) {
        if let Some(slot) = self.state().attempts.get_mut(&attempt) {
            slot.supervisor = Some(identity);
        }
    }

    /// An acknowledgement [`LocalExecutor::acknowledge`] decided is written (or its
    /// supervisor is gone).
    pub(crate) fn ack_written(&self) {
        self.acks.send_modify(|n| *n = n.saturating_sub(1));
    }

    /// Waits for [`LocalExecutor::acknowledge`] of `attempt`'s exit.
    pub(crate) fn await_commit(&self, attempt: AttemptId) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.commits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(attempt, tx);
        rx
    }

    /// What a supervisor said of its attempt, before its exit.
    pub(crate) fn report(&self, attempt: AttemptId, status: Status) {
        match status {
            Status::Starting { reason } => self.report_starting(attempt, reason),
            Status::Running(running) => self.mark_running(attempt, running, true),
            Status::Preparing | Status::Exited { .. } => {}
        }
    }

    /// Records the spawned processes and, when `report` and it is news, reports `Running`.
    /// From now on the scanner looks at the checkpoint directory, reporting only mtimes newer
    /// than the baseline, and at the progress file.
    fn mark_running(&self, attempt: AttemptId, running: Running, report: bool) {
        let mut state = self.state();
        let State {
            attempts, limited, ..
        } = &mut *state;
        let Some(slot) = attempts.get_mut(&attempt) else {
            return;
        };
        let news = slot.pgids.is_empty();
        let cfg = self.cfg();
        let layout = JobLayout::new(&cfg.data_dir, &slot.job_id, slot.attempt_number);
        slot.pgids = running.pids.clone();
        // Its supervisor limited its groups before it spawned anything.
        if let Some(share) = slot.share.take() {
            limited.ran(&slot.groups, &slot.instances, share);
        }
        if slot.checkpoints.is_none() {
            slot.checkpoints = Some(Watched {
                dir: running.checkpoint_dir,
                last_seen_ns: running.checkpoint_baseline_ns,
            });
            slot.progress = Some(Arc::new(Mutex::new(Tail::new(
                layout.progress_file(),
                layout.attempt_dir.join(log_file_name(LogStream::Stderr, 1)),
                slot.uid.filter(|_| cfg.isolation.is_some()),
            ))));
        }
        if report && news {
            // Sent under the lock so that no Checkpoint or Exited of this attempt can precede it.
            let _ = self.events.send(ExecEvent::Running {
                attempt,
                pids: running.pids,
                gpus: running.gpus,
                log_dir: running.log_dir,
                at_ms: running.at_ms,
                supervisor: slot.supervisor.clone(),
            });
        }
    }

    /// Reports why a started attempt has not spawned its processes yet (its downloads); only
    /// while it has not reported `Running`.
    fn report_starting(&self, attempt: AttemptId, reason: String) {
        let state = self.state();
        if state
            .attempts
            .get(&attempt)
            .is_some_and(|s| s.pgids.is_empty())
        {
            let _ = self.events.send(ExecEvent::Starting {
                attempt,
                reason: Some(reason),
            });
        }
    }

    /// Frees the attempt's instances and reports `Exited`; called once every process is gone
    /// (its supervisor said so, after writing the outcome). The progress file is read a last
    /// time first (a bounded read: the lines the job wrote while it was stopping say where it
    /// stopped).
    pub(crate) fn finish(&self, attempt: AttemptId, outcome: Exit, usage: Option<Usage>) {
        let tail = self
            .state()
            .attempts
            .get(&attempt)
            .and_then(|s| s.progress.clone());
        if let Some(tail) = &tail {
            lock(tail).poll_final();
        }
        let mut state = self.state();
        let mut usage = usage;
        if let Some(slot) = state.attempts.remove(&attempt) {
            if let Some(steps) = slot.progress.as_deref().and_then(|t| lock(t).take_change()) {
                let _ = self.events.send(ExecEvent::Progress { attempt, steps });
            }
            usage = usage.map(|u| slot.gpu.apply(u));
            self.give_back(&mut state, &slot);
        }
        tracing::debug!(attempt = attempt.0, ?outcome, "attempt exited");
        // Under the lock: when the server sees Exited, the capacity is already free.
        let _ = self.events.send(ExecEvent::Exited {
            attempt,
            outcome,
            at_ms: crate::clock::now_ms(),
            usage,
        });
    }

    /// A stray supervisor exited: its instances are free again; nothing is reported.
    pub(crate) fn stray_gone(&self, attempt: AttemptId) {
        let mut state = self.state();
        if let Some(slot) = state.attempts.remove(&attempt) {
            self.give_back(&mut state, &slot);
        }
    }

    /// Returns an ended attempt's instances and uid. Retired instances go; the capacity that
    /// changes with them (instances whose GPUs they held) is reported.
    fn give_back(&self, state: &mut State, slot: &Slot) {
        let retired = state.inventory.any_retired(&slot.instances);
        let before = retired.then(|| state.inventory.capacity());
        state.inventory.give_back(&slot.instances);
        if let (true, Some(hierarchy)) = (slot.retire_groups, &self.cfg().confinement) {
            // Empty by now (its supervisor vacated them), so removing them is an rmdir each;
            // done before the instances can be placed again.
            for group in crate::cgroup::discard(hierarchy, slot.groups.clone()) {
                tracing::warn!("a control group is left behind: {group}");
            }
        }
        if let (Some(pool), Some(uid)) = (state.uids.as_mut(), slot.uid) {
            pool.give_back(uid);
        }
        let after = before.is_some().then(|| state.inventory.capacity());
        if let (Some(before), Some(capacity)) = (before, after) {
            if before != capacity {
                let _ = self.events.send(ExecEvent::Capacity { capacity });
            }
        }
    }

    /// A supervisor's connection closed before it reported an exit: it died (killed, or out of
    /// memory). The attempt ended as its outcome file says, if it wrote one; otherwise it is
    /// lost, once whatever it left running is stopped.
    pub(crate) async fn supervisor_gone(self: Arc<Self>, attempt: AttemptId, role: Role) {
        let dir = self
            .state()
            .attempts
            .get(&attempt)
            .map(|s| s.attempt_dir.clone());
        let Some(dir) = dir else { return };
        let identity = self
            .state()
            .attempts
            .get_mut(&attempt)
            .and_then(|s| s.supervisor.take());
        let pid = identity.as_ref().map(|i| i.pid);
        // A supervisor that is alive but dropped the connection (it could not read what it
        // was sent) is not trusted with the attempt any more: it goes, and what it ran is
        // stopped below, before the instances are free.
        if let Some(id) = &identity {
            id.signal(&self.boot_id, rustix::process::Signal::KILL);
        }
        let ended = sup::read_ended(&dir);
        tracing::warn!(
            attempt = attempt.0,
            ?pid,
            ended = ended.is_some(),
            "an attempt's supervisor went away"
        );
        let executor = LocalExecutor {
            inner: self.clone(),
        };
        executor.reap_orphans_but(Some(attempt)).await;
        if role == Role::Stray {
            return self.stray_gone(attempt);
        }
        let (outcome, usage) = ended.unwrap_or_else(|| (Exit::lost(format!(
                "Attempt lost: its supervisor{} died while it ran; the job was queued again without using a retry",
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            )), None));
        self.finish(attempt, outcome, usage);
    }

    /// What became of one recorded attempt ([`LocalExecutor::reconcile`]).
    async fn reconcile_one(self: Arc<Self>, r: &Recorded) -> Reconciled {
        match self.answer(r).await {
            Answer::Hello(conn, hello) => match self.verify(r, &hello) {
                Ok(()) => return self.adopt(r, *conn, *hello),
                Err(why) => tracing::warn!(
                    attempt = r.attempt.0,
                    "not adopting what answers at its socket: {why}"
                ),
            },
            Answer::Nobody => {}
            Answer::Silent(why) => {
                tracing::warn!(
                    attempt = r.attempt.0,
                    "its supervisor does not answer: {why}"
                )
            }
        }
        // Not adopted: nothing of it may go on running. A recorded supervisor that is alive
        // (it did not answer) is killed, and gone, before the attempt counts as ended.
        if let Some(id) = &r.supervisor {
            if id.signal(&self.boot_id, rustix::process::Signal::KILL) {
                tracing::warn!(attempt = r.attempt.0, pid = id.pid, "killed its supervisor");
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while id.alive(&self.boot_id) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        // An unrecorded supervisor that did not answer notices its socket is gone and stops
        // its attempt; the processes it ran are stopped with the orphans meanwhile.
        let _ = std::fs::remove_file(self.socket(r.attempt));
        if let Some((outcome, usage)) = sup::read_ended(
            &JobLayout::new(&self.cfg().data_dir, &r.job_id, r.attempt_number).attempt_dir,
        ) {
            return Reconciled::Ended(outcome, usage);
        }
        Reconciled::Lost(self.lost_reason(r))
    }

    /// What answers at a recorded attempt's socket: its supervisor's hello (a slow one gets
    /// three tries), nobody (no socket, or nothing listens on it), or something that would not
    /// say hello.
    async fn answer(&self, r: &Recorded) -> Answer {
        let mut why = String::new();
        for _ in 0..3 {
            let mut conn = match Conn::connect(&self.socket(r.attempt)) {
                Ok(conn) => conn,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    return Answer::Nobody
                }
                Err(e) => {
                    why = format!("cannot connect: {e}");
                    continue;
                }
            };
            match conn.hello(r.attempt).await {
                Ok(hello) => return Answer::Hello(Box::new(conn), Box::new(hello)),
                Err(e) => why = e,
            }
        }
        Answer::Silent(why)
    }

    /// Why a recorded attempt that nothing answers for is lost.
    fn lost_reason(&self, r: &Recorded) -> String {
        let why = match &r.supervisor {
            None if r.pids.is_empty() => {
                "it never reported running and has no supervisor".to_string()
            }
            None => "the server restarted while it ran (started by a release without supervisors)"
                .to_string(),
            Some(id) if id.boot_id != self.boot_id => {
                "the machine rebooted while it ran".to_string()
            }
            Some(id) => format!(
                "its supervisor (pid {}) died while the server was down",
                id.pid
            ),
        };
        format!("Attempt lost: {why}; the job was queued again without using a retry")
    }

    /// Whether what answered at a recorded attempt's socket is its supervisor: the attempt it
    /// names, and a live process of this boot with the identity it gives, which is the one the
    /// log recorded if it recorded one.
    fn verify(&self, r: &Recorded, hello: &sup::protocol::Hello) -> Result<(), String> {
        if hello.attempt != r.attempt {
            return Err(format!("it runs attempt {}", hello.attempt));
        }
        if let Some(recorded) = &r.supervisor {
            if recorded != &hello.identity {
                return Err(format!(
                    "it is {:?}, the log recorded {recorded:?}",
                    hello.identity
                ));
            }
        }
        if !hello.identity.alive(&self.boot_id) {
            return Err(format!("no live process is {:?}", hello.identity));
        }
        match &hello.placement {
            Some(p) if p.job_id == r.job_id && p.attempt_number == r.attempt_number => Ok(()),
            _ => Err("it runs another job's attempt".into()),
        }
    }

    /// Takes a verified supervisor back: its instances and uid are held again, its link runs,
    /// and a stop the previous server had begun is carried on.
    fn adopt(
        self: Arc<Self>,
        r: &Recorded,
        mut conn: Conn,
        hello: sup::protocol::Hello,
    ) -> Reconciled {
        if let Status::Exited { outcome, usage, .. } = hello.status {
            tokio::spawn(async move {
                let _ = conn.send(&ToSupervisor::Ack).await;
            });
            return Reconciled::Ended(outcome, usage);
        }
        let placement = hello
            .placement
            .clone()
            .unwrap_or_else(|| unreachable!("verified"));
        let outbox = Arc::new(link::Outbox::default());
        if let Err(why) = self.hold(
            r.attempt,
            &placement,
            hello.identity.clone(),
            outbox.clone(),
            false,
        ) {
            tracing::error!(attempt = r.attempt.0, "cannot adopt: {why}; stopping it");
            outbox.tell(&ToSupervisor::Stop);
        }
        let mut running = None;
        if let Status::Running(run) = &hello.status {
            self.mark_running(r.attempt, run.clone(), false);
            if r.pids.is_empty() || r.supervisor.is_none() {
                running = Some((run.pids.clone(), run.gpus.clone(), hello.identity.clone()));
            }
        }
        if hello.held {
            // Launched while the previous server wrote the start, which its log holds.
            outbox.tell(&ToSupervisor::Go);
        }
        if r.stopping {
            outbox.tell(&ToSupervisor::Stop);
        }
        tracing::info!(
            attempt = r.attempt.0,
            pid = hello.identity.pid,
            "adopted a running attempt"
        );
        tokio::spawn(link::run(
            self.clone(),
            r.attempt,
            conn,
            Vec::new(),
            outbox,
            Role::Attempt,
        ));
        Reconciled::Adopted { running }
    }

    /// Holds the instances and uid of a supervisor that runs already.
    fn hold(
        &self,
        attempt: AttemptId,
        p: &Placement,
        identity: Identity,
        link: Arc<link::Outbox>,
        stray: bool,
    ) -> Result<(), String> {
        let mut state = self.state();
        let held = state
            .inventory
            .hold_placed(&p.instance_type, &p.instances, &p.hosts);
        if held != p.instances {
            tracing::warn!(
                attempt = attempt.0,
                recorded = ?p.instances,
                held = ?held,
                "the pools changed while the attempt ran: it keeps its GPUs on the instances it holds now"
            );
        }
        if let (Some(pool), Some(uid)) = (state.uids.as_mut(), p.uid) {
            pool.hold(uid);
        }
        let mut groups = p.groups.clone();
        if groups.is_empty() && self.cfg().confinement.is_some() {
            // Named after the instances it was launched on, as its supervisor did.
            groups = crate::cgroup::instance_groups(&p.instances);
        }
        let retire_groups = held != p.instances;
        let placed = Placement {
            instances: held,
            groups,
            ..p.clone()
        };
        let mut slot = Slot::new(&self.cfg().data_dir, &placed, link, Some(identity), stray);
        slot.retire_groups = retire_groups;
        state.attempts.insert(attempt, slot);
        Ok(())
    }

    /// Supervisors whose sockets are in the directory but whose attempts the log does not
    /// hold as live: asked to stop (holding their instances until they exit), or acknowledged
    /// if they ended.
    async fn stop_strays(self: Arc<Self>, known: &BTreeSet<AttemptId>) {
        let dir = self.cfg().data_dir.join(sup::SUPERVISORS_DIR);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            // A previous server's free supervisors exit with their connections.
            if name.to_string_lossy().starts_with(sup::FREE_PREFIX) {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            let Some(attempt) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".sock"))
                .and_then(|n| n.parse::<u64>().ok())
                .map(AttemptId)
            else {
                continue;
            };
            if known.contains(&attempt) {
                continue;
            }
            let Ok(mut conn) = Conn::connect(&self.socket(attempt)) else {
                let _ = std::fs::remove_file(entry.path());
                continue;
            };
            let hello = match conn.hello(attempt).await {
                Ok(h) if h.attempt == attempt && h.identity.alive(&self.boot_id) => h,
                _ => continue,
            };
            if let Status::Exited { .. } = hello.status {
                let _ = conn.send(&ToSupervisor::Ack).await;
                continue;
            }
            tracing::warn!(
                attempt = attempt.0,
                pid = hello.identity.pid,
                "a supervisor the log does not know runs; stopping it"
            );
            let outbox = Arc::new(link::Outbox::default());
            outbox.tell(&ToSupervisor::Stop);
            if let Some(p) = &hello.placement {
                if let Err(why) =
                    self.hold(attempt, p, hello.identity.clone(), outbox.clone(), true)
                {
                    tracing::warn!(attempt = attempt.0, "its instances are not free: {why}");
                }
            }
            tokio::spawn(link::run(
                self.clone(),
                attempt,
                conn,
                Vec::new(),
                outbox,
                Role::Stray,
            ));
        }
    }

    /// The log limit and the directories of running attempts, when logs are bounded.
    pub(crate) fn log_targets(&self) -> Option<(u64, Vec<PathBuf>)> {
        let limit = self.cfg().log_bytes_per_attempt?;
        let dirs = self
            .state()
            .attempts
            .values()
            .map(|slot| slot.attempt_dir.clone())
            .collect();
        Some((limit, dirs))
    }

    /// The running attempts (every process spawned) that hold GPUs, with their GPUs.
    pub(crate) fn gpus_in_use(&self) -> Vec<(AttemptId, Vec<u32>)> {
        let state = self.state();
        state
            .attempts
            .iter()
            .filter(|(_, slot)| !slot.pgids.is_empty())
            .map(|(&attempt, slot)| {
                let gpus = slot.instances.iter();
                let gpus = gpus.flat_map(|&id| state.inventory.gpus(id).iter().copied());
                (attempt, gpus.collect::<Vec<u32>>())
            })
            .filter(|(_, gpus)| !gpus.is_empty())
            .collect()
    }

    /// Adds `readings` to the tally of each of `attempts` (as [`Inner::gpus_in_use`] gave
    /// them before the readings were taken) that still runs: an attempt started meanwhile on
    /// the same GPUs gets none of its predecessor's readings.
    pub(crate) fn record_gpu_sample(
        &self,
        attempts: &[(AttemptId, Vec<u32>)],
        readings: &BTreeMap<u32, crate::gpu_usage::Reading>,
    ) {
        let mut state = self.state();
        for (attempt, gpus) in attempts {
            if let Some(slot) = state.attempts.get_mut(attempt) {
                slot.gpu.add(gpus, readings);
            }
        }
    }

    /// The checkpoint directories to scan: running attempts only.
    pub(crate) fn checkpoint_targets(&self) -> Vec<(AttemptId, PathBuf)> {
        self.state()
            .attempts
            .iter()
            .filter_map(|(&attempt, slot)| Some((attempt, slot.checkpoints.as_ref()?.dir.clone())))
            .collect()
    }

    /// Reports a `Checkpoint` for each attempt, still running, whose newest mtime moved
    /// past what was last seen.
    pub(crate) fn record_checkpoints(&self, scanned: &[(AttemptId, u64)]) {
        let mut state = self.state();
        for &(attempt, newest_ns) in scanned {
            let Some(watched) = state
                .attempts
                .get_mut(&attempt)
                .and_then(|s| s.checkpoints.as_mut())
            else {
                continue;
            };
            if newest_ns > watched.last_seen_ns {
                watched.last_seen_ns = newest_ns;
                let _ = self.events.send(ExecEvent::Checkpoint {
                    attempt,
                    at_ms: newest_ns / 1_000_000,
                });
            }
        }
    }

    /// The progress readers of running attempts.
    pub(crate) fn progress_targets(&self) -> Vec<Arc<Mutex<Tail>>> {
        self.state()
            .attempts
            .values()
            .filter_map(|slot| slot.progress.clone())
            .collect()
    }

    /// Reports a `Progress` for each attempt, still running, whose steps moved since its last
    /// report: at most one per attempt per scan, however many lines the job wrote.
    pub(crate) fn record_progress(&self) {
        let state = self.state();
        for (&attempt, slot) in &state.attempts {
            if let Some(steps) = slot.progress.as_deref().and_then(|t| lock(t).take_change()) {
                let _ = self.events.send(ExecEvent::Progress { attempt, steps });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Share;

    const SHARE: Share = Share {
        memory_bytes: 1 << 30,
        cpu_millis: 1000,
        pids: 4096,
    };

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// A group's limits are vouched for only after an attempt placed in it under the same
    /// share ran, never for an attempt of the server's own uid, and not for the attempt after
    /// one that did not run.
    #[test]
    fn limits_are_kept_after_an_attempt_ran_under_the_same_share_and_forgotten_meanwhile() {
        let mut limited = Limited::default();
        let g = names(&["qm-instance-1", "qm-instance-2"]);
        assert!(!limited.kept(&g, Some(SHARE), true), "never limited");
        limited.ran(&g, &[1, 2], SHARE);
        assert!(
            !limited.kept(&g, Some(SHARE), false),
            "the server's own uid"
        );
        limited.ran(&g, &[1, 2], SHARE);
        assert!(limited.kept(&g, Some(SHARE), true));
        assert!(
            !limited.kept(&g, Some(SHARE), true),
            "the last attempt placed there has not run"
        );
        limited.ran(&g, &[1, 2], SHARE);
        let bigger = Share {
            memory_bytes: 2 << 30,
            ..SHARE
        };
        assert!(
            !limited.kept(&g, Some(bigger), true),
            "a reload changed the share"
        );
        limited.ran(&names(&["qm-instance-1"]), &[1], SHARE);
        assert!(
            !limited.kept(&g, Some(SHARE), true),
            "one of two groups only"
        );
        assert!(!limited.kept(&[], Some(SHARE), true), "no group");
        assert!(!limited.kept(&g, None, true), "not confined");
    }
}
