//! One attempt's life inside its supervisor process (`qm supervise`, [`crate::supervisor`]):
//! prepare the job's directories, download its inputs, spawn one process group per host, wait
//! for every process the job started (the supervisor is their child subreaper, so orphans come
//! back to it and a blocking `waitpid(-1)` sees the last one go: no polling), and carry out stop
//! requests, the runtime limit and the stop of the other hosts when one fails. The outcome is
//! returned only after every process has been reaped.

use qm_core::AttemptId;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};

use crate::cgroup::Group;
use crate::container::Runtime;
use crate::group::signal_group;
use crate::isolation::JobUids;
use crate::layout::{log_file_name, JobDir, JobLayout, LogStream};
use crate::outcome::{self, CLIENT_ERROR, TIMEOUT_REASON};
use crate::staging::{CheckpointSync, Stage};
use crate::supervisor::reap::{Reaped, Reaper};
use crate::supervisor::spawn::{self, ArmedHosts, Namespaces, Spawned, Spawner};
use crate::supervisor::{Placement, Running, Settings};
use crate::{checkpoint, environment, Exit, LaunchSpec, Usage};
use qm_storage::Storage;

/// How long what the job left outside its hosts' process groups (a daemon, podman's conmon
/// finishing its cleanup) may outlive the last host before it is killed.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// After a SIGKILL, how soon the supervisor looks again for processes that were reparented to
/// it meanwhile (grandchildren of what it killed), and kills those too.
const KILL_AGAIN: Duration = Duration::from_millis(100);

/// How many times an attempt's control group is killed while it still holds a process, a
/// `KILL_AGAIN` apart, before the attempt ends with a warning.
const VACATE_TRIES: u32 = 50;

/// What an attempt reports while it runs.
pub(crate) enum Report {
    /// Its inputs are downloading.
    Starting(String),
    /// Every process is spawned.
    Running(Running),
}

/// Where an attempt reports.
pub(crate) type Reporter = Arc<dyn Fn(Report) + Send + Sync>;

/// What an attempt runs with: the settings it was launched with, its storage and its reporter.
pub(crate) struct Ctx {
    pub(crate) settings: Settings,
    pub(crate) storage: Option<Arc<Storage>>,
    pub(crate) report: Reporter,
}

impl Ctx {
    fn stop_grace(&self) -> Duration {
        Duration::from_millis(self.settings.stop_grace_ms)
    }
}

/// Why the supervisor began stopping the attempt.
#[derive(Debug)]
enum StopCause {
    /// `LocalExecutor::stop`: the real outcome is reported.
    Requested,
    /// `max_runtime` elapsed: reported as a timeout whatever the exit codes.
    Timeout,
    /// One host failed: the others are stopped and the first failure is reported.
    HostFailed,
    /// A host could not be spawned: the spawned ones are stopped and this reason reported.
    SpawnFailed(String),
}

/// Runs attempt `spec` where `placement` says (its instances, the GPUs of each host in host
/// order, its uid) until every process is gone, and says how it ended and whether it started
/// (it is prepared at once, and started once `go` is true; a stop first ends it unstarted).
/// Only inside a supervisor process: it reaps every child of the process.
pub(crate) async fn supervise(
    ctx: Arc<Ctx>,
    spec: LaunchSpec,
    placement: Placement,
    limits_kept: bool,
    stop: watch::Receiver<bool>,
    go: watch::Receiver<bool>,
) -> Supervised {
    let Placement {
        hosts,
        uid,
        instances,
        mut groups,
        ..
    } = placement;
    if groups.is_empty() {
        // From a server that named none.
        groups = crate::cgroup::instance_groups(&instances);
    }
    let mut supervisor = Supervisor {
        ctx,
        attempt: spec.attempt,
        uid,
        cgroup_names: groups,
        limits_kept,
        groups: Vec::new(),
        live: Vec::new(),
        cgroups: Vec::new(),
        done: false,
        started: false,
        namespaces: Namespaces::default(),
        spawners: Vec::new(),
        reaped: Reaped::default(),
    };
    let outcome = supervisor.run(spec, hosts, stop, go).await;
    // Ended long since (they end at the spawn): out of the hosts' groups before the groups
    // are vacated and the end reported.
    supervisor.spawners.clear();
    let usage = supervisor.usage();
    supervisor.vacate_cgroups().await;
    supervisor.done = true;
    Supervised {
        outcome,
        started: supervisor.started,
        usage,
        namespaces: std::mem::take(&mut supervisor.namespaces),
    }
}

/// How a supervised attempt ended.
pub(crate) struct Supervised {
    pub(crate) outcome: Exit,
    /// Whether it was told to go (anything after its preparation may have run).
    pub(crate) started: bool,
    pub(crate) usage: Usage,
    /// Its processes' mount namespaces, to [`Namespaces::release`] once the end is reported.
    pub(crate) namespaces: Namespaces,
}

/// Waits for `go`; false if a stop (or the end of either channel) comes first. It watches a
/// copy of `stop`, so that a stop sent with the go (both queued while the supervisor was still
/// connecting) is still news to `stop` for whoever looks next: waiting for it here must not
/// consume it, or the attempt would run on with its stop lost.
async fn wait_for_go(go: &mut watch::Receiver<bool>, stop: &watch::Receiver<bool>) -> bool {
    let mut stop = stop.clone();
    loop {
        if *go.borrow_and_update() {
            return true;
        }
        if *stop.borrow() {
            return false;
        }
        tokio::select! {
            changed = go.changed() => if changed.is_err() { return false },
            _ = stop.changed() => {}
        }
    }
}

struct Supervisor {
    ctx: Arc<Ctx>,
    attempt: AttemptId,
    /// The attempt's own uid, when it runs apart from the server.
    uid: Option<u32>,
    /// The control group of each host, in host order, when confined.
    cgroup_names: Vec<String>,
    /// The server knows those groups to hold this attempt's limits already.
    limits_kept: bool,
    /// The process group of each spawned host, whether its leader lives or not: the rest of a
    /// group keeps the grace period after its leader exits (a shell leader dies at SIGTERM at
    /// once, while the training script it started is still saving its checkpoint).
    groups: Vec<u32>,
    /// The leader of each spawned host while it is unreaped.
    live: Vec<Option<u32>>,
    /// Each host's control group, when the attempt is confined ([`crate::cgroup`]).
    cgroups: Vec<Group>,
    done: bool,
    /// Whether it was told to go (anything after its preparation may have run).
    started: bool,
    /// The hosts' mount namespaces, held until the end is reported.
    namespaces: Namespaces,
    /// The threads that spawned the hosts' processes, joined once they are gone.
    spawners: Vec<Spawner>,
    /// What the attempt's processes used, once they are all reaped.
    reaped: Reaped,
}

impl Drop for Supervisor {
    /// The attempt's future was dropped (a panic): nothing may keep running unsupervised.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.signal_groups(Signal::SIGKILL, None);
        self.kill_cgroups();
        crate::supervisor::reap::kill_children();
    }
}

/// What preparing produced: the attempt's directories, or the reason it cannot start.
pub(super) struct Prepared {
    pub(super) layout: Box<JobLayout>,
    /// Whether the job's directory was made for this attempt.
    job_dir: JobDir,
    /// Each host's standard output and error logs, open for appending ([`Prepared::log`]).
    logs: Vec<[std::fs::File; 2]>,
    checkpoint_dir: PathBuf,
    pub(super) env: Vec<(String, String)>,
    /// What is spawned (the entrypoint, or podman), for messages.
    pub(super) program: String,
}

impl Prepared {
    /// A handle of host `host`'s (0-based) log of `stream`, opened by the preparation.
    pub(super) fn log(&self, host: usize, stream: LogStream) -> std::io::Result<std::fs::File> {
        let logs = self.logs.get(host).ok_or_else(|| {
            std::io::Error::other(format!("no log was opened for algo-{}", host + 1))
        })?;
        match stream {
            LogStream::Stdout => logs[0].try_clone(),
            LogStream::Stderr => logs[1].try_clone(),
        }
    }
}

/// Whether the attempt has files to move: inputs or checkpoints to download before it runs,
/// checkpoints or a model to upload.
fn transfers(spec: &LaunchSpec) -> bool {
    !spec.channels.is_empty() || spec.checkpoint_uri.is_some() || spec.output_path.is_some()
}

/// Why and how an attempt's processes are being stopped while the supervisor waits on them.
#[derive(Default)]
struct Stopping {
    cause: Option<StopCause>,
    /// When the groups get SIGKILL (again).
    kill_at: Option<Instant>,
    /// The first host's failure.
    first_failure: Option<String>,
    killed: bool,
}

/// Creates the job's directories and config files and builds the environment (blocking file
/// work: see [`Supervisor::prepare`] for where it runs). It spawns nothing: every spawn stays
/// inside the supervisor's poll, so a runtime shutdown cannot leave a process spawned after
/// the supervisor that would kill it is gone.
fn prepare(
    spec: &LaunchSpec,
    data_dir: &Path,
    owner: Option<(u32, JobUids)>,
    runtime: &Runtime,
) -> Result<Prepared, Exit> {
    let program = match (runtime, spec.entrypoint.first()) {
        (Runtime::Podman(p), _) if spec.training_image.as_deref().is_some_and(crate::container::valid_image) => {
            p.program.to_string_lossy().into_owned()
        }
        (Runtime::Host, Some(program)) => program.clone(),
        (Runtime::Podman(_), _) => return Err(Exit::Failed {
            reason: format!("{CLIENT_ERROR}AlgorithmSpecification.TrainingImage is missing or not an image reference: the podman runtime runs the job's image"),
            retryable: false,
        }),
        (Runtime::Host, None) => return Err(Exit::Failed {
            reason: format!(
                "{CLIENT_ERROR}AlgorithmSpecification.ContainerEntrypoint is missing: this executor runs \
                 host processes ([executor] runtime = \"host\") and does not run TrainingImage, so set \
                 ContainerEntrypoint, or run the server with runtime = \"podman\""
            ),
            retryable: false,
        }),
    };
    let program = program.as_str();
    let failed = |path: &Path, e: std::io::Error, verb: &str| Exit::Failed {
        reason: outcome::spawn_reason(
            program,
            format_args!("cannot {verb} '{}': {e}", path.display()),
        ),
        retryable: true,
    };
    let layout = JobLayout::new(data_dir, &spec.job_id, spec.attempt_number);
    let job_dir = layout
        .prepare(owner)
        .map_err(|(path, e)| failed(&path, e, "create"))?;
    let uid = owner.map(|(uid, _)| uid);
    crate::input::prepare(&layout, spec, Some(spec.count), job_dir, uid)
        .map_err(|(path, e)| failed(&path, e, "write"))?;
    // Every host's logs exist from here on: the downloads write their progress to algo-1's
    // stderr before the processes start. Kept open for the spawn (a dup, not an open again).
    let mut logs = Vec::with_capacity(spec.count as usize);
    for host in 1..=spec.count {
        let create = |stream| {
            let path = layout.attempt_dir.join(log_file_name(stream, host));
            crate::logcap::create(&path).map_err(|e| failed(&path, e, "open log"))
        };
        logs.push([create(LogStream::Stdout)?, create(LogStream::Stderr)?]);
    }
    let checkpoint_dir = layout.checkpoint_dir(spec.checkpoint_path.as_deref(), spec.attempt, uid);
    let mut env = environment::common(spec, &layout, &checkpoint_dir);
    if let Some(uid) = uid {
        // First, so that the payload's Environment may set them otherwise.
        let user = format!("qm-job-{uid}");
        env.splice(
            0..0,
            [
                (
                    "HOME".to_string(),
                    layout.work.to_string_lossy().into_owned(),
                ),
                ("USER".to_string(), user.clone()),
                ("LOGNAME".to_string(), user),
            ],
        );
    }
    // Marks every process of this executor's attempts, so that a restarted server finds them
    // in /proc even if it never learned their pids (a crash right after the spawn).
    env.push((
        crate::group::MARKER.into(),
        data_dir.to_string_lossy().into_owned(),
    ));
    Ok(Prepared {
        layout: Box::new(layout),
        job_dir,
        logs,
        checkpoint_dir,
        env,
        program: program.to_string(),
    })
}

/// Downloads the attempt's inputs and checkpoints, if it has any to download (`stage`): the
/// checkpoints' state, or how the attempt ended when it could not or was stopped meanwhile.
async fn stage_in(
    stage: Option<&mut Stage>,
    spec: &LaunchSpec,
    prepared: &Prepared,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<qm_storage::SyncState>, Exit> {
    let Some(stage) = stage else {
        return Ok(None);
    };
    tokio::select! {
        staged = stage.stage_in(spec, &prepared.layout, &prepared.checkpoint_dir) => staged,
        _ = stop.changed() => Err(Exit::Failed {
            reason: format!("{CLIENT_ERROR}stopped while its inputs were downloading"),
            retryable: true,
        }),
    }
}

impl Supervisor {
    async fn run(
        &mut self,
        spec: LaunchSpec,
        hosts: Vec<Vec<u32>>,
        mut stop: watch::Receiver<bool>,
        mut go: watch::Receiver<bool>,
    ) -> Exit {
        let prepared = match self.prepare(&spec).await {
            Ok(prepared) => self.confine(&hosts).map(|()| prepared),
            Err(outcome) => Err(outcome),
        };
        // Prepared while the server makes the start durable, and armed too when nothing is to
        // be downloaded first: the go then only spawns.
        let armed = match &prepared {
            Ok(prepared) if !transfers(&spec) => Some(self.arm(&spec, prepared, &hosts)),
            _ => None,
        };
        let stopped_unstarted = || Exit::Failed {
            reason: format!("{CLIENT_ERROR}stopped before it was started"),
            retryable: true,
        };
        if !wait_for_go(&mut go, &stop).await {
            return stopped_unstarted();
        }
        self.started = true;
        if *stop.borrow_and_update() {
            // Told to go and to stop before it looked: nothing is spawned.
            return stopped_unstarted();
        }
        let prepared = match prepared {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        let mut stage = match self.stage(&spec, &prepared) {
            Ok(stage) => stage,
            Err(outcome) => return outcome,
        };
        let checkpoints = match stage_in(stage.as_mut(), &spec, &prepared, &mut stop).await {
            Ok(checkpoints) => checkpoints,
            Err(outcome) => return outcome,
        };
        let sync = self.checkpoint_sync(&spec, &prepared, checkpoints);
        let armed = armed.unwrap_or_else(|| self.arm(&spec, &prepared, &hosts));
        let (outcome, sync) = self
            .run_processes(&spec, &prepared, (&hosts, armed), stop, sync)
            .await;
        let Some(stage) = stage.as_mut() else {
            return outcome;
        };
        let mut state = match sync {
            Some(sync) => Some(sync.into_state().await),
            None => None,
        };
        let ckpt = state
            .as_mut()
            .map(|s| (prepared.checkpoint_dir.as_path(), s));
        let succeeded = outcome == Exit::Succeeded;
        match stage
            .stage_out(&spec, &prepared.layout, ckpt, succeeded)
            .await
        {
            Err(reason) if succeeded => Exit::Failed {
                reason,
                retryable: true,
            },
            _ => outcome,
        }
    }

    /// [`prepare`]s the attempt. A new job's directories take a millisecond and are made on
    /// the supervisor's thread; an earlier attempt's tree is walked (handed over to this
    /// attempt's uid) on the blocking pool, since it may hold any number of files and the
    /// supervisor's socket must be answered meanwhile.
    async fn prepare(&self, spec: &LaunchSpec) -> Result<Prepared, Exit> {
        let owner = self.uid.zip(self.ctx.settings.isolation);
        let settings = &self.ctx.settings;
        let job_dir = crate::layout::job_dir(&settings.data_dir, &spec.job_id);
        if std::fs::symlink_metadata(&job_dir).is_err() {
            return prepare(spec, &settings.data_dir, owner, &settings.runtime);
        }
        let (spec, data_dir, runtime) = (
            spec.clone(),
            settings.data_dir.clone(),
            settings.runtime.clone(),
        );
        tokio::task::spawn_blocking(move || prepare(&spec, &data_dir, owner, &runtime))
            .await
            .unwrap_or_else(|e| {
                Err(Exit::Failed {
                    reason: format!(
                        "{CLIENT_ERROR}preparing the attempt's directories failed: {e}"
                    ),
                    retryable: true,
                })
            })
    }

    /// The attempt's transfers, if it has any: `Err` when it needs storage and none is
    /// configured.
    fn stage(&self, spec: &LaunchSpec, prepared: &Prepared) -> Result<Option<Stage>, Exit> {
        if !transfers(spec) {
            return Ok(None);
        }
        let Some(storage) = self.ctx.storage.clone() else {
            // A job with only an output path loses nothing it was promised before it runs;
            // one with inputs would run on empty channels.
            if spec.channels.is_empty() && spec.checkpoint_uri.is_none() {
                tracing::warn!(
                    attempt = spec.attempt.0,
                    "no [storage]: the model and output will not be uploaded"
                );
                return Ok(None);
            }
            return Err(Exit::Failed {
                reason: format!("{CLIENT_ERROR}the job has input channels or CheckpointConfig.S3Uri but this executor has no storage configured ([storage] in the server's config)"),
                retryable: false,
            });
        };
        let ctx = self.ctx.clone();
        let report: crate::staging::Report =
            Arc::new(move |_, reason| (ctx.report)(Report::Starting(reason)));
        Ok(Some(Stage::new(
            report,
            storage,
            spec,
            &prepared.layout,
            self.uid,
        )))
    }

    /// The periodic checkpoint upload of a job with `CheckpointConfig.S3Uri`.
    fn checkpoint_sync(
        &self,
        spec: &LaunchSpec,
        prepared: &Prepared,
        restored: Option<qm_storage::SyncState>,
    ) -> Option<CheckpointSync> {
        let (storage, uri, state) = (
            self.ctx.storage.clone()?,
            spec.checkpoint_uri.clone()?,
            restored?,
        );
        Some(CheckpointSync::new(
            storage,
            prepared.checkpoint_dir.clone(),
            uri,
            self.uid,
            Duration::from_millis(self.ctx.settings.checkpoint_sync_ms),
            state,
        ))
    }

    /// The hosts' processes, armed to be spawned.
    fn arm(&self, spec: &LaunchSpec, prepared: &Prepared, hosts: &[Vec<u32>]) -> ArmedHosts {
        spawn::arm_all(
            spec,
            prepared,
            hosts,
            self.uid,
            &self.ctx.settings,
            &self.cgroups,
        )
    }

    /// Spawns the hosts' processes and supervises them until every process of the attempt is
    /// gone.
    async fn run_processes(
        &mut self,
        spec: &LaunchSpec,
        prepared: &Prepared,
        (hosts, armed): (&[Vec<u32>], ArmedHosts),
        stop: watch::Receiver<bool>,
        mut sync: Option<CheckpointSync>,
    ) -> (Exit, Option<CheckpointSync>) {
        let grace = self.ctx.stop_grace();
        let checkpoint_dir = prepared.checkpoint_dir.clone();
        // A job directory made for this attempt, with nothing downloaded into it, holds no
        // checkpoint: there is nothing to look at (on the path from a go to the spawn).
        let baseline_ns = if prepared.job_dir == JobDir::Fresh && !transfers(spec) {
            0
        } else {
            checkpoint::newest_mtime_ns(&checkpoint_dir).unwrap_or(0)
        };
        let Spawned {
            children,
            spawn_failure,
            namespaces,
            spawners,
        } = armed.fire(&prepared.program);
        self.namespaces = namespaces;
        self.spawners = spawners;
        // Every process is its group's leader.
        self.groups.clone_from(&children);
        self.live = children.iter().map(|&pid| Some(pid)).collect();
        // After the spawns: every child the process has from now on is the job's.
        let mut reaped = crate::supervisor::reap::start();
        let started = Instant::now();
        let mut st = Stopping::default();
        if let Some(reason) = spawn_failure {
            st.cause = Some(StopCause::SpawnFailed(reason));
            st.kill_at = Some(self.terminate(grace, &reaped));
        } else {
            (self.ctx.report)(Report::Running(Running {
                pids: children,
                gpus: hosts.concat(),
                log_dir: prepared.layout.attempt_dir.clone(),
                checkpoint_dir,
                checkpoint_baseline_ns: baseline_ns,
                at_ms: crate::clock::now_ms(),
            }));
        }
        let deadline = spec.max_runtime.map(|limit| started + limit);
        self.wait_processes(&mut reaped, &mut st, stop, deadline, grace, &mut sync)
            .await;
        self.reaped = reaped.used();
        if let (true, Runtime::Podman(podman)) = (st.killed, &self.ctx.settings.runtime) {
            // SIGKILL ended `podman run`, not the container it runs.
            for host in 1..=spec.count {
                crate::container::remove(
                    podman,
                    &crate::container::name(&spec.job_id, spec.attempt, host),
                )
                .await;
            }
        }
        let outcome = self.outcome(st.cause, st.first_failure, &prepared.layout);
        (self.out_of_memory(outcome), sync)
    }

    /// Waits until no process of the attempt is left, stopping them when one host fails, a
    /// stop is requested or the runtime limit passes, and killing what outlives its grace.
    async fn wait_processes(
        &mut self,
        reaped: &mut Reaper,
        st: &mut Stopping,
        mut stop: watch::Receiver<bool>,
        deadline: Option<Instant>,
        grace: Duration,
        sync: &mut Option<CheckpointSync>,
    ) {
        loop {
            tokio::select! {
                exit = reaped.next() => {
                    // None: no process of the attempt is left.
                    let Some((pid, status)) = exit else { break };
                    let failure = self.reaped(pid, status, st.kill_at.is_some());
                    if let Some(failure) = failure {
                        st.first_failure.get_or_insert(failure);
                        if st.cause.is_none() && self.live.iter().any(Option::is_some) {
                            st.cause = Some(StopCause::HostFailed);
                            st.kill_at = Some(self.terminate(grace, reaped));
                        }
                    }
                    if st.kill_at.is_none() && self.live.iter().all(Option::is_none) {
                        // Only what left the hosts' groups is left; it does not outlive them.
                        st.kill_at = Some(Instant::now() + LEFTOVER_GRACE.min(grace));
                    }
                }
                _ = stop.changed(), if st.cause.is_none() => {
                    // Only `true` is ever sent; a closed channel also means stop.
                    st.cause = Some(StopCause::Requested);
                    st.kill_at = Some(self.terminate(grace, reaped));
                }
                () = sleep_until_opt(deadline), if st.cause.is_none() => {
                    st.cause = Some(StopCause::Timeout);
                    st.kill_at = Some(self.terminate(grace, reaped));
                }
                () = sleep_until_opt(st.kill_at) => {
                    self.signal_groups(Signal::SIGKILL, Some(reaped));
                    self.kill_cgroups();
                    st.killed |= crate::supervisor::reap::kill_children() > 0 || st.cause.is_some();
                    st.kill_at = Some(Instant::now() + KILL_AGAIN);
                }
                () = CheckpointSync::tick(sync) => {}
            }
        }
    }

    /// A reaped process: a host's leader (its failure, if it failed) or something the job left
    /// (nothing to say). A leader that exits while nothing is being stopped takes what it
    /// forked with it, as in a container.
    fn reaped(&mut self, pid: u32, status: i32, stopping: bool) -> Option<String> {
        let host = self.live.iter().position(|p| *p == Some(pid))?;
        self.live[host] = None;
        if !stopping {
            signal_group(pid, Signal::SIGKILL);
        }
        let status = ExitStatus::from_raw(status);
        (!status.success()).then(|| outcome::exit_reason(status))
    }

    /// How the attempt ended, from why it was stopped and the first host's failure.
    fn outcome(
        &self,
        cause: Option<StopCause>,
        first_failure: Option<String>,
        layout: &JobLayout,
    ) -> Exit {
        match cause {
            Some(StopCause::Timeout) => Exit::Failed {
                reason: TIMEOUT_REASON.to_string(),
                retryable: false,
            },
            Some(StopCause::SpawnFailed(reason)) => Exit::Failed {
                reason,
                retryable: true,
            },
            Some(StopCause::Requested | StopCause::HostFailed) | None => match first_failure {
                None => Exit::Succeeded,
                Some(reason) => Exit::Failed {
                    reason: outcome::failure_file_reason(&layout.failure_file(), self.uid)
                        .unwrap_or(reason),
                    retryable: true,
                },
            },
        }
    }

    /// Takes each host's control group (its instance's), when the attempt is confined.
    fn confine(&mut self, hosts: &[Vec<u32>]) -> Result<(), Exit> {
        let Some(confinement) = &self.ctx.settings.confinement else {
            return Ok(());
        };
        for (index, (gpus, name)) in hosts.iter().zip(&self.cgroup_names).enumerate() {
            let host = index as u32 + 1;
            let limits = confinement.limits(gpus);
            match Group::take_kept(&confinement.hierarchy, name, &limits, self.limits_kept) {
                Ok(group) => self.cgroups.push(group),
                Err(e) => {
                    // Emptied with the others at the end, should anything have entered it.
                    self.cgroups
                        .push(Group::named(&confinement.hierarchy, name));
                    return Err(Exit::Failed {
                        reason: format!(
                            "{CLIENT_ERROR}cannot set up the control group of algo-{host}: {e}"
                        ),
                        retryable: true,
                    });
                }
            }
        }
        Ok(())
    }

    /// SIGKILLs whatever is in the hosts' control groups.
    fn kill_cgroups(&self) {
        for group in &self.cgroups {
            if let Err(e) = group.kill() {
                tracing::warn!(attempt = self.attempt.0, "cannot kill a control group: {e}");
            }
        }
    }

    /// Returns once the hosts' control groups are empty, for the instances' next attempts.
    /// Every process of the attempt has been reaped by now, so they are, unless something
    /// left the supervisor's tree: that is killed, for a few seconds.
    async fn vacate_cgroups(&mut self) {
        for group in std::mem::take(&mut self.cgroups) {
            let mut tries = 0;
            while !group.is_vacant() {
                tries += 1;
                if tries == VACATE_TRIES {
                    tracing::warn!(
                        attempt = self.attempt.0,
                        "a process outlives its attempt in its control group; the instance's next attempt kills it before it starts, or fails"
                    );
                    break;
                }
                let _ = group.kill();
                sleep(KILL_AGAIN).await;
            }
        }
    }

    /// What the attempt used: the CPU time of the processes it reaped, and the largest host
    /// group's peak memory where it was confined, else the largest resident set of one of
    /// its processes.
    fn usage(&self) -> Usage {
        let peak_memory_bytes = if self.cgroups.is_empty() {
            Some(self.reaped.max_rss_kib * 1024).filter(|&b| b > 0)
        } else {
            self.cgroups
                .iter()
                .filter_map(Group::peak_memory_bytes)
                .max()
        };
        Usage {
            cpu_millis: self.reaped.cpu_micros / 1000,
            peak_memory_bytes,
            ..Usage::default()
        }
    }

    /// `outcome`, or `OutOfMemory` when a host failed after the kernel killed one of its
    /// processes for going over the host's memory limit.
    fn out_of_memory(&self, outcome: Exit) -> Exit {
        let (
            Exit::Failed {
                retryable: true, ..
            },
            Some(confinement),
        ) = (&outcome, &self.ctx.settings.confinement)
        else {
            return outcome;
        };
        let Some(index) = self.cgroups.iter().position(|g| g.oom_kills() > 0) else {
            return outcome;
        };
        Exit::Failed {
            reason: format!(
                "{}algo-{} went over its memory limit of {} (one instance's memory: [[executor.pool]] memory_gib) and the kernel killed it",
                outcome::OUT_OF_MEMORY,
                index + 1,
                outcome::bytes(confinement.share.memory_bytes)
            ),
            retryable: true,
        }
    }

    /// SIGTERM to every host's group; returns when SIGKILL is due (to the groups and to
    /// whatever the job left outside them).
    fn terminate(&mut self, grace: Duration, reaper: &Reaper) -> Instant {
        tracing::debug!(attempt = self.attempt.0, "stopping attempt");
        self.signal_groups(Signal::SIGTERM, Some(reaper));
        Instant::now() + grace
    }

    /// Sends `signal` to each host's group that still holds the job's processes (a group that
    /// emptied is forgotten: its number may name someone else's group by now). A group whose
    /// leader is not reaped yet is ours without looking: the leader's pid, which is the
    /// group's id, cannot be reused before it is reaped — so `reaper` (the exits reaped and not
    /// handed out yet) is asked too. Only a group whose leader is gone costs a scan of /proc,
    /// as does every group when there is no reaper to ask (a panic's clean-up).
    fn signal_groups(&mut self, signal: Signal, reaper: Option<&Reaper>) {
        let me = std::process::id();
        let live = &self.live;
        self.groups.retain(|&pgid| {
            let unreaped = reaper.is_some_and(|r| live.contains(&Some(pgid)) && !r.holds(pgid));
            unreaped || crate::group::group_held(pgid, me)
        });
        for &pgid in &self.groups {
            signal_group(pgid, signal);
        }
    }
}

/// Sleeps until `at`, or forever when there is no deadline.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}
