//! The Quartermaster server: the AWS Batch quota-management API over HTTP, on top of the
//! scheduling core, with durable state and an executor that really runs the attempts.
//!
//! Layout, following the request:
//! - [`http`]: routes and the AWS error shape; decodes requests, hands them to the driver.
//! - [`driver`]: the one task that owns the state; batches requests and executor reports,
//!   commits each batch to the log (`qm_store`) before answering or acting, then starts and
//!   stops attempts through the executor (`qm_executor`).
//! - [`state`]: resources, job records and the core; deterministic, no IO; `ops` holds one
//!   file per resource family.
//! - [`command`]: what is logged, and so what a restart replays.
//! - [`config`]: the TOML file and flags.
//! - [`exec`]: the executor, local processes or a Slurm cluster.
//! - [`history`]: the recent past in memory, for the dashboard and `/qm/v1/history`.
//! - [`metrics`]: `/metrics`, OpenMetrics or Prometheus text, on `prometheus-client`.
//! - `resume`: whether each attempt after a preemption resumed from its checkpoint, from the
//!   steps the attempts reported (`GET /qm/v1/jobs/{job}/attempt`); `verify`: which jobs of
//!   a class that borrows only after a verified resume may borrow.
//! - [`workload`]: a window's finished jobs in the simulator's workload schema
//!   (`GET /qm/v1/workload`, `qm workload export`), from the state and the archive.
//! - [`review`]: the policy review (`GET /qm/v1/review`), a pure function of attempt records,
//!   entitlements and the audit log.
//!
//! Threads: the HTTP server runs on the tokio runtime; the driver runs on its own thread so
//! that SQLite's fsync never stalls request parsing or process reaping.

pub mod archive;
pub mod auth;
pub mod clock;
pub mod command;
pub mod config;
pub mod credentials;
pub mod driver;
pub mod error;
pub mod exec;
pub mod facts;
pub mod history;
pub mod http;
pub mod index;
mod legacy;
pub mod limits;
pub mod metrics;
mod ops;
pub mod reload;
pub mod request;
pub mod respond;
mod resume;
pub mod review;
pub mod secret;
pub mod snapshot;
pub mod state;
pub mod usage;
mod verify;
pub mod watch;
pub mod workload;

use qm_api::Arns;
use qm_executor::slurm::{SlurmConfig, SlurmExecutor};
use qm_executor::{default_pools, detect_gpus, LocalConfig, LocalExecutor, PoolSpec};
use qm_store::{Log, SqliteLog};

use crate::config::SlurmSettings;
use tokio::sync::mpsc;

pub use config::{Config, Flags};
pub use error::ServerError;

/// This build: the package version and the commit it was built from (`build.rs`). The store
/// records it beside every batch, so that recovery knows which batches must replay exactly.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("QM_GIT_COMMIT"));

/// This build as the writer of the batches it appends.
pub fn writer() -> qm_store::Writer {
    qm_store::Writer {
        version: VERSION.into(),
        format: command::DECISIONS_FORMAT,
    }
}

/// Capacity of the driver's inbox; a full inbox makes handlers wait (backpressure).
pub const INBOX: usize = 8192;

/// Runs the server until SIGINT or SIGTERM.
pub async fn serve(config: Config, flags: Flags) -> Result<(), ServerError> {
    let io = |context: String| move |source| ServerError::Io { context, source };
    if !config.auth && !auth::no_auth_allowed(config.listen) {
        return Err(ServerError::Config(format!(
            "--no-auth: refused on {}: without authentication anyone who reaches the port can change every share and run code as this server's user; listen on a loopback address (127.0.0.1:PORT) or drop --no-auth",
            config.listen
        )));
    }
    // Files the server makes are its own only (the database's WAL, the lock, archives); jobs
    // inherit it, which keeps their files from each other too.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let existed = config.data_dir.exists();
    std::fs::create_dir_all(&config.data_dir).map_err(io(format!(
        "creating data dir {}",
        config.data_dir.display()
    )))?;
    // The data dir holds the database, the admin's keys and the jobs' files: its owner only.
    // One that existed is the user's to set (it may be a directory shared on purpose).
    {
        use std::os::unix::fs::PermissionsExt;
        let dir = &config.data_dir;
        if !existed {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(
                format!("making data dir {} private (mode 0700)", dir.display()),
            ))?;
        } else if let Ok(m) = std::fs::metadata(dir) {
            // Traversal (0711) is what isolated jobs need to reach their directories.
            if m.permissions().mode() & 0o066 != 0 {
                eprintln!(
                    "qm: warning: data dir {} is readable by other users (mode {:o}); it holds the database and its secrets: chmod 700 it",
                    dir.display(),
                    m.permissions().mode() & 0o777
                );
            }
        }
    }
    private_files(&config.data_dir);
    let _lock = lock_data_dir(&config.data_dir)?;
    // Bind before touching the state: a busy port must not cost a replay and a reconciliation
    // that would stop attempts.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(io(format!("listening on {}", config.listen)))?;
    // Before touching the state, too: an unreadable certificate must not cost a replay.
    let tls = match &config.tls {
        Some((cert, key)) => Some(load_tls(cert, key).await?),
        None => None,
    };
    let db = config.data_dir.join("qm.sqlite3");
    let mut log = SqliteLog::open(&db)?;
    pin_settings(&mut log, &config)?;

    let arns = Arns::new(config.region.clone(), config.account_id.clone());
    let policy = qm_core::Policy {
        reserve_after_ms: config.reserve_after.as_millis() as u64,
        reclaim_patience_ms: config.reclaim_patience.as_millis() as u64,
        backfill_patience_ms: config.backfill_patience.as_millis() as u64,
        ..Default::default()
    };
    let mut state = state::State::new(arns, policy);
    let started = std::time::Instant::now();
    let running = writer();
    let recovered = driver::recover(&mut state, &log, &running)?;
    if recovered.batches > 0 {
        tracing::info!(
            batches = recovered.batches,
            jobs = state.jobs.len(),
            ms = started.elapsed().as_millis() as u64,
            "state recovered from the log"
        );
    }
    if recovered.diverged_own > 0 {
        return Err(ServerError::Recovery(format!(
            "replaying the log decided differently than this very build ({VERSION}) recorded in {} batch(es) (see the errors above); \
             refusing to run on a state that differs from what clients were told. Keep the data dir and report it",
            recovered.diverged_own
        )));
    }
    if !recovered.other_writers.is_empty() {
        eprintln!(
            "qm: the data dir was written by {}; now {VERSION}: {}",
            recovered.other_writers.join(", then "),
            upgrade_summary(&recovered)
        );
    }
    log.set_writer(&running)?;
    if let Some(reason) = state.core.drained() {
        eprintln!(
            "qm: the executor is drained ({reason}): no attempt starts until an admin runs `qm drain --cancel`"
        );
    }
    state.admission = Some(state::Admission {
        per_share: config.limits.queued_per_share,
        per_queue: config.limits.queued_per_queue,
        file_roots: config.storage.file_roots.clone(),
        runs_images: config.runtime.runs_images(),
    });
    // After an upgrade, a snapshot at once: the next start (of this build or a later one) goes
    // on from this build's state instead of replaying the previous build's batches again.
    if !recovered.other_writers.is_empty() {
        driver::write_snapshot(&state, &mut log)?;
    }
    let (auth, auth_lines) = auth::Auth::open(
        &db,
        auth::Settings {
            enabled: config.auth,
            region: config.region.clone(),
            hosts: config.hosts.clone(),
            public_metrics: config.public_metrics,
            data_dir: config.data_dir.clone(),
        },
    )?;
    let mut snapshot_log = SqliteLog::open(&db)?;
    snapshot_log.set_writer(&running)?;

    check_executor_switch(&mut log, &config, state.live_attempts().len())?;
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let StartedExecutor {
        executor,
        instances,
        gpus,
        jobs_line,
        found,
    } = match &config.slurm {
        None => local_executor(&config, events_tx.clone())?,
        Some(settings) => slurm_executor(&config, settings, &mut log, events_tx.clone())?,
    };
    if config.slurm.is_none() {
        pin_work_dir(
            &mut log,
            &config,
            &found.work_dir,
            state.live_attempts().len(),
        )?;
    }

    let addr = listener
        .local_addr()
        .map_err(io("reading the listen address".into()))?;
    let credentials = role_broker(&config, addr)?;
    let jobs_line = match &credentials {
        Some(b) => format!("{jobs_line}\n{}", b.describe()),
        None => jobs_line,
    };
    let logs = executor.clone();
    let reloading = executor.clone();
    let settling = executor.clone();
    let (req_tx, req_rx) = mpsc::channel(INBOX);
    let driver = driver::Driver::new(
        state,
        log,
        executor,
        driver::Channels {
            requests: req_rx,
            events: events_rx,
            events_tx,
        },
        driver::Snapshotter::new(snapshot_log),
        config.data_dir.clone(),
        driver::Cadence {
            tick: config.tick,
            snapshot_every: config.snapshot_every,
            since_snapshot: recovered.commands,
            retention: config.retention,
            delete_job_dirs: config.delete_job_dirs,
            max_lost_attempts: config.max_lost_attempts,
            audit_entries: config.audit_entries,
        },
    );
    let mut driver = driver.with_credentials(credentials.clone());
    let lost = driver.reconcile().await?;
    if lost > 0 {
        eprintln!("qm: {lost} attempt(s) were running when the server last stopped; their jobs are queued again");
    }

    let handle = tokio::runtime::Handle::current();
    let driver_thread = std::thread::Builder::new()
        .name("qm-driver".into())
        .spawn(move || {
            if let Err(e) = handle.block_on(driver.run()) {
                tracing::error!(error = %e, "cannot commit to the log; stopping the server");
                std::process::exit(70);
            }
        })
        .map_err(io("starting the driver thread".into()))?;

    print_banner(&config, addr, &instances, &auth_lines, &jobs_line);
    let history = std::sync::Arc::new(std::sync::Mutex::new(history::Ring::new(
        config.history_sample,
    )));
    tokio::spawn(history::sample_every(
        req_tx.downgrade(),
        history.clone(),
        config.history_sample,
    ));
    // GPUs per instance type, for the GPU-hours of the usage report and the review; a
    // reload adds the types it brings.
    let gpus = std::sync::Arc::new(std::sync::RwLock::new(gpus));
    let reloader = std::sync::Arc::new(reload::Reloader::new(
        flags,
        config.clone(),
        reloading,
        found,
        gpus.clone(),
        req_tx.downgrade(),
    ));
    let app = http::App {
        reloader: reloader.clone(),
        auth: std::sync::Arc::new(auth),
        requests: req_tx,
        latency: Default::default(),
        history,
        executor: logs,
        archive: std::sync::Arc::new(archive::Archive::new(&config.data_dir)),
        gpus,
        limits: config.limits,
        credentials,
    };
    reload_on_hangup(reloader);
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        stopping.graceful_shutdown(Some(std::time::Duration::from_secs(10)));
    });
    let listener = listener
        .into_std()
        .map_err(io("handing over the listener".into()))?;
    let limits = config.limits;
    let service = http::router(app).into_make_service();
    match tls {
        None => {
            let mut server = axum_server::from_tcp(listener)
                .acceptor(watch::Watch::new(
                    limits::Limited::new(limits.max_connections, true),
                    limits.header_timeout,
                ))
                .handle(handle);
            limits::configure(server.http_builder(), &limits);
            server
                .serve(service)
                .await
                .map_err(io("serving HTTP".into()))?
        }
        Some(tls) => {
            // Watched inside TLS: the time runs from the end of the handshake (whose own
            // timeout is axum-server's), on what the client sends once decrypted.
            let acceptor = watch::Watch::new(
                axum_server::tls_rustls::RustlsAcceptor::new(tls)
                    .acceptor(limits::Limited::new(limits.max_connections, false)),
                limits.header_timeout,
            );
            let mut server = axum_server::from_tcp(listener)
                .acceptor(acceptor)
                .handle(handle);
            limits::configure(server.http_builder(), &limits);
            server
                .serve(service)
                .await
                .map_err(io("serving HTTPS".into()))?
        }
    }
    // The router (and its inbox sender) is gone: the driver drains what is queued and ends.
    let _ = tokio::task::spawn_blocking(move || driver_thread.join()).await;
    settling.settle(std::time::Duration::from_secs(2)).await;
    eprintln!("qm: stopped");
    Ok(())
}

/// The TLS settings of `[tls]` / `--tls-cert`, with ring as rustls's crypto.
async fn load_tls(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<axum_server::tls_rustls::RustlsConfig, ServerError> {
    // Installed once per process; a second server in the same process finds it there.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let loaded = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(|e| {
            ServerError::Config(format!(
                "tls: cannot use certificate {} with key {} ({e}); give PEM files: the chain, leaf first, and its private key",
                cert.display(),
                key.display()
            ))
        })?;
    // HTTP/1.1 only, where [limits] header_timeout_seconds holds (the SDKs and the CLI speak
    // it; clients that offer h2 settle on it).
    let mut settings = (*loaded.get_inner()).clone();
    settings.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(axum_server::tls_rustls::RustlsConfig::from_config(
        std::sync::Arc::new(settings),
    ))
}

/// One line on how batches of other builds replayed under this one.
fn upgrade_summary(r: &driver::Recovered) -> String {
    let applied = if r.batches == 0 {
        "its state was read from its snapshot (no batch after it); this version's rules decide from now on".to_string()
    } else {
        format!(
            "{} of {} batch(es) written by earlier builds applied as they were decided; this version's rules decide from now on",
            r.applied_other, r.batches
        )
    };
    if r.refused_other == 0 {
        return applied;
    }
    format!(
        "{applied}; {} command(s) this version refuses were skipped (warnings above)",
        r.refused_other
    )
}

/// A started executor and what the banner, the HTTP layer and reloads need from its start.
struct StartedExecutor {
    executor: exec::Executor,
    /// A line per pool or instance type.
    instances: Vec<String>,
    /// GPUs per instance type.
    gpus: std::collections::BTreeMap<String, u32>,
    /// The banner's `jobs:` line (and more).
    jobs_line: String,
    /// What a reload builds the executor's settings from again.
    found: reload::Found,
}

/// Makes the files directly in the data dir (database, WAL, lock, keys) its owner's only:
/// data dirs of earlier releases may have them 0644, and isolated jobs can traverse the dir.
fn private_files(data_dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600));
        }
    }
}

/// The uids attempts run under, if they run apart from the server, where their job
/// directories go, and the banner's line saying what a job can reach. Where the isolation the
/// config asks for cannot be set up, the server refuses to start: jobs run as the server's
/// user only when the config says so (or the server is not root and `isolation = "auto"`).
fn job_isolation(
    config: &Config,
) -> Result<(Option<qm_executor::JobUids>, std::path::PathBuf, String), ServerError> {
    let range = config.job_uids;
    let shared = |why: &str| {
        format!(
            "jobs: run as this server's user (uid {}): {why}; a job can then read and write everything this user can, the data dir's database and keys included, and signal the server (docs/security.md)",
            nix::unistd::geteuid()
        )
    };
    let unisolated_dir = || config.work_dir.clone().unwrap_or(config.data_dir.clone());
    let root = nix::unistd::geteuid().is_root();
    match config.isolation {
        config::Isolation::None => Ok((
            None,
            unisolated_dir(),
            shared("[executor] isolation = \"none\""),
        )),
        config::Isolation::Auto if !root => Ok((
            None,
            unisolated_dir(),
            shared("the server does not run as root, so it cannot start jobs under other uids"),
        )),
        _ => {
            let dir = qm_executor::isolation::reachable_work_dir(&config.data_dir, config.work_dir.as_deref())
                .map_err(|why| ServerError::Config(format!(
                    "executor.isolation: attempts cannot run under uids of their own: {why}. Set [executor] work_dir to a directory that other users can traverse to (e.g. /var/lib/qm-jobs/<name>), or set [executor] isolation = \"none\" to run jobs as this server's user"
                )))?;
            let line = format!(
                "jobs: each attempt runs under a uid of its own ({}-{}), its directory under {}: it cannot read the data dir's database and keys or other jobs' directories, nor signal the server or other jobs",
                range.first, range.last, dir.join("jobs").display()
            );
            Ok((Some(range), dir, line))
        }
    }
}

/// Keeps where job directories are while attempts run there: a moved work dir (a new
/// `[executor] work_dir`, or an upgrade that moves a closed data dir's jobs to
/// `/var/lib/qm-jobs`) would leave their supervisors unfound and run their jobs twice. Earlier
/// releases kept job directories in the data dir.
fn pin_work_dir(
    log: &mut SqliteLog,
    config: &Config,
    work_dir: &std::path::Path,
    live: usize,
) -> Result<(), ServerError> {
    const KEY: &str = "executor.work_dir";
    let canonical = |p: &std::path::Path| {
        std::fs::canonicalize(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let new = canonical(work_dir);
    let old = log
        .meta(KEY)?
        .unwrap_or_else(|| canonical(&config.data_dir));
    if old != new && live > 0 {
        return Err(ServerError::Config(format!(
            "executor.work_dir: job directories would move from {old} to {new} while {live} attempt(s) run there, whose supervisors would then not be found and whose jobs would run twice. Until they end, set [executor] work_dir = \"{old}\" (with isolation = \"none\" if job uids cannot reach it), or stop them first (`qm drain --requeue`, then restart)"
        )));
    }
    Ok(log.set_meta(KEY, &new)?)
}

/// The broker of attempts' credentials, where `[credentials]` asks for one (`credentials.rs`).
fn role_broker(
    config: &Config,
    addr: std::net::SocketAddr,
) -> Result<Option<std::sync::Arc<credentials::Broker>>, ServerError> {
    let Some(wanted) = &config.credentials else {
        return Ok(None);
    };
    let refuse = |why: String| ServerError::Config(format!("credentials: {why}"));
    if config.slurm.is_some() {
        return Err(refuse("the Slurm executor's jobs run on other nodes, which cannot reach this server's loopback endpoint; remove [credentials] (its jobs use the nodes' own credentials)".into()));
    }
    if config.tls.is_some() {
        return Err(refuse("jobs fetch their credentials over plain HTTP on loopback, and this server speaks TLS only; remove [credentials] or [tls]".into()));
    }
    let secret = credentials_key(&config.data_dir)?;
    let settings = storage_settings(config);
    if matches!(wanted.source, credentials::Source::AssumeRole { .. }) && settings.keys.is_none() {
        return Err(refuse(format!(
            "source = \"assume_role\" signs STS AssumeRole with the server's own keys, and it has none ({}): give it a profile ([storage] profile) or AWS_ACCESS_KEY_ID",
            settings.keys_from
        )));
    }
    credentials::Broker::new(wanted.clone(), &secret, addr, &settings)
        .map(|b| Some(std::sync::Arc::new(b)))
        .map_err(refuse)
}

/// The data dir's key of attempts' credential tokens: made once (0600), so that tokens stay
/// valid across restarts and upgrades.
fn credentials_key(data_dir: &std::path::Path) -> Result<Vec<u8>, ServerError> {
    let path = data_dir.join("attempt-credentials.key");
    match std::fs::read(&path) {
        Ok(key) if key.len() == 32 => Ok(key),
        Ok(_) => Err(ServerError::Config(format!(
            "{} is not a 32-byte key: remove it, and a new one is made (running attempts' credential tokens change)",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Written whole or not at all: a crash midway must not leave a short key.
            let key = secret::random_bytes(32);
            let tmp = path.with_extension("key.tmp");
            let written = std::fs::write(&tmp, &key)
                .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &path));
            written.map_err(|source| ServerError::Io {
                context: format!("writing {}", path.display()),
                source,
            })?;
            Ok(key)
        }
        Err(e) => Err(ServerError::Io {
            context: format!("reading {}", path.display()),
            source: e,
        }),
    }
}

/// Where attempts' control groups go, if they are confined, and the banner's line saying
/// what a job may use. Refuses where `config` requires confinement and it cannot be set up.
fn job_confinement(
    config: &Config,
) -> Result<(Option<qm_executor::cgroup::Hierarchy>, String), ServerError> {
    use qm_executor::cgroup::{self, Found};
    let unconfined = |why: &str| {
        format!("confinement: none ({why}): a job can use every GPU, all the memory and every CPU of this machine (docs/security.md)")
    };
    if config.confinement == config::Confinement::None {
        return Ok((None, unconfined("[executor] confinement = \"none\"")));
    }
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let key = cgroup::key_for(&config.data_dir);
    let found = cgroup::detect(
        &read("/proc/self/mountinfo"),
        &read("/proc/self/cgroup"),
        &key,
    );
    let required =
        config.confinement == config::Confinement::Cgroup || nix::unistd::geteuid().is_root();
    let prepared = match found {
        Found::Usable(h) => h.prepare().map(|()| h).map_err(|e| e.to_string()),
        Found::Unusable(why) => Err(why),
    };
    // GPU nodes unfenced are a reason to refuse where confinement is required; elsewhere (a
    // server that is not root) the memory, CPU and process limits still hold.
    let prepared = prepared.and_then(|h| match h.fence_probe() {
        Ok(()) => Ok(h),
        Err(e) if required => Err(e.to_string()),
        Err(e) => {
            tracing::warn!("{e}");
            Ok(h.without_device_fence())
        }
    });
    match prepared {
        Ok(h) => {
            let line = format!("confinement: each host of an attempt runs in a control group of its own ({}): its instance's GPUs, memory, CPUs and processes, no more", h.describe());
            Ok((Some(h), line))
        }
        Err(why) if required => Err(ServerError::Config(format!(
            "executor.confinement: attempts cannot run in control groups of their own: {why}. Mount cgroup v2 (or the v1 memory, pids, cpu, devices and freezer hierarchies) and run the server where it may make groups (as root, or in a delegated group: systemd Delegate=yes), or set [executor] confinement = \"none\" to run jobs unconfined"
        ))),
        Err(why) => Ok((None, unconfined(&format!("not root, and {why}")))),
    }
}

/// The local executor of `config`: its pools (configured, else detected GPUs, else four
/// simulated instances) and a line per pool for the banner.
fn local_executor(
    config: &Config,
    events_tx: mpsc::UnboundedSender<qm_executor::ExecEvent>,
) -> Result<StartedExecutor, ServerError> {
    let (pools, gpu_indices) = local_pools(config);
    let (isolation, work_dir, mut jobs_line) = job_isolation(config)?;
    if let Some(uids) = isolation.filter(|_| !config.metadata_allowed) {
        let line = credentials::fence_metadata(uids)
            .map_err(|e| ServerError::Config(format!("credentials.metadata: {e}")))?;
        jobs_line = format!("{jobs_line}\n{line}");
    }
    let (confinement, confined_line) = job_confinement(config)?;
    let found = reload::Found {
        detected: (pools.clone(), gpu_indices.clone()),
        isolation,
        work_dir,
        confinement,
        slurm_tag: None,
    };
    let jobs_line = format!("{jobs_line}\n{confined_line}");
    let cfg = local_config(config, pools.clone(), gpu_indices, &found);
    let storage_line = cfg
        .storage
        .as_ref()
        .map(|s| s.settings().describe())
        .unwrap_or_default();
    let executor =
        LocalExecutor::new(cfg, events_tx).map_err(|e| ServerError::Executor(e.to_string()))?;
    let opt_ml = if let qm_executor::Runtime::Podman(p) = &config.runtime {
        format!(
            "runs each job's TrainingImage with {} ({} image mapping(s))",
            p.program.display(),
            p.images.len()
        )
    } else if executor.opt_ml() {
        "each attempt sees its job directory at /opt/ml".to_string()
    } else {
        "no /opt/ml (not root, or [executor] opt_ml = \"off\"): jobs use the SM_* paths".to_string()
    };
    let jobs_line = format!("{jobs_line}\nsagemaker: {opt_ml}; {storage_line}");

    let described = pools
        .iter()
        .map(|p| {
            format!(
                "{} x {} ({} GPU each)",
                p.count, p.instance_type, p.gpus_per_instance
            )
        })
        .collect();
    let gpus = pool_gpus(&pools);
    Ok(StartedExecutor {
        executor: exec::Executor::Local(executor),
        instances: described,
        gpus,
        jobs_line,
        found,
    })
}

/// The local executor's settings under `config`, with the pools and GPUs found at start
/// (`qm reload` builds them again from the reloaded config).
pub(crate) fn local_config(
    config: &Config,
    pools: Vec<PoolSpec>,
    gpu_indices: Option<Vec<u32>>,
    found: &reload::Found,
) -> LocalConfig {
    LocalConfig {
        isolation: found.isolation,
        confinement: found.confinement.clone(),
        data_dir: found.work_dir.clone(),
        stop_grace: config.stop_grace,
        pools,
        gpu_indices,
        checkpoint_poll: config.checkpoint_poll,
        log_bytes_per_attempt: Some(config.limits.log_bytes_per_attempt),
        storage: Some(std::sync::Arc::new(storage(config))),
        checkpoint_sync: config.checkpoint_sync,
        opt_ml: config.opt_ml,
        runtime: config.runtime.clone(),
        supervisor: qm_executor::SupervisorCommand::default(),
        gpu_sample: config.gpu_sample,
    }
}

/// The local pools: configured, else one instance per GPU `nvidia-smi` finds (with the GPUs'
/// indices, in its order), else four simulated instances.
pub(crate) fn local_pools(config: &Config) -> (Vec<PoolSpec>, Option<Vec<u32>>) {
    let mut gpu_indices = None;
    let pools: Vec<PoolSpec> = if config.pool.is_empty() {
        let gpus = detect_gpus();
        let pools = default_pools(&gpus);
        if !gpus.is_empty() {
            // Hand out the indices nvidia-smi reported, in its order, so that each pool's
            // instances get GPUs of the model the pool was named after.
            gpu_indices = Some(gpus.iter().map(|g| g.index).collect());
        }
        if gpus.is_empty() {
            eprintln!(
                "qm: no GPU found (nvidia-smi); offering {} simulated instance(s) that run on the CPU",
                pools.iter().map(|p| p.count).sum::<u32>()
            );
        }
        pools
    } else {
        config.pool.clone()
    };
    (pools, gpu_indices)
}

/// Attempts run where the executor that started them put them: local processes are found by
/// the local executor, Slurm jobs by the Slurm executor under its shared directory. Switching
/// either while attempts are live would lose track of them (and run their jobs twice), so it
/// is refused until they are done; with none live the switch is recorded.
fn check_executor_switch(
    log: &mut SqliteLog,
    config: &Config,
    live: usize,
) -> Result<(), ServerError> {
    let kind = if config.slurm.is_some() {
        "slurm"
    } else {
        "local"
    };
    let shared = config.slurm.as_ref().map(|s| {
        let dir = s.shared_dir_or(&config.data_dir);
        std::fs::canonicalize(&dir)
            .unwrap_or(dir)
            .to_string_lossy()
            .into_owned()
    });
    let settings = [
        ("executor.kind", Some(kind.to_string())),
        ("executor.slurm.shared_dir", shared),
    ];
    for (key, value) in settings {
        let Some(value) = value else { continue };
        keep_setting(log, key, &value, |old| {
            (live > 0).then(|| {
                ServerError::Config(format!(
                    "{key} is '{value}' but {live} attempt(s) started with '{old}' are still running; \
                     start once more with {key} = \"{old}\" and let them finish (or terminate them), then switch"
                ))
            })
        })?;
    }
    Ok(())
}

/// The storage of `[storage]` and the server's AWS environment.
fn storage(config: &Config) -> qm_executor::Storage {
    qm_executor::Storage::new(storage_settings(config))
}

/// `[storage]` resolved against the server's environment.
fn storage_settings(config: &Config) -> qm_executor::StorageSettings {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    qm_executor::StorageSettings::resolve(&config.storage, &env)
}

/// GPUs per instance of each local pool's type (what usage reports count).
pub(crate) fn pool_gpus(pools: &[PoolSpec]) -> std::collections::BTreeMap<String, u32> {
    pools
        .iter()
        .map(|p| (p.instance_type.clone(), p.gpus_per_instance))
        .collect()
}

/// GPUs per instance of each Slurm instance type (what usage reports count).
pub(crate) fn slurm_gpus(settings: &SlurmSettings) -> std::collections::BTreeMap<String, u32> {
    settings
        .instances
        .iter()
        .map(|i| (i.instance_type.clone(), i.gpus_per_instance))
        .collect()
}

/// The Slurm executor's settings under `config`.
pub(crate) fn slurm_config(config: &Config, settings: &SlurmSettings, tag: &str) -> SlurmConfig {
    let mut cfg = SlurmConfig::new(
        settings.shared_dir_or(&config.data_dir),
        settings.instances.clone(),
        tag,
    );
    cfg.stop_grace = config.stop_grace;
    cfg.poll = settings.poll;
    cfg.bin_dir = settings.bin_dir.clone();
    cfg.account = settings.account.clone();
    cfg.extra_sbatch_args = settings.extra_sbatch_args.clone();
    cfg
}

/// The Slurm executor of `config` and a line per instance type for the banner.
fn slurm_executor(
    config: &Config,
    settings: &SlurmSettings,
    log: &mut SqliteLog,
    events_tx: mpsc::UnboundedSender<qm_executor::ExecEvent>,
) -> Result<StartedExecutor, ServerError> {
    let tag = slurm_tag(log)?;
    let cfg = slurm_config(config, settings, &tag);
    let storage = storage(config);
    let storage_line = storage.settings().describe();
    let slurm = SlurmExecutor::with_storage(cfg, events_tx, Some(std::sync::Arc::new(storage)))
        .map_err(|e| ServerError::Executor(e.to_string()))?;
    let described = settings
        .instances
        .iter()
        .map(|i| {
            let mut at = Vec::new();
            if let Some(p) = &i.partition {
                at.push(format!("partition {p}"));
            }
            if let Some(f) = &i.feature {
                at.push(format!("feature {f}"));
            }
            format!(
                "{} = Slurm nodes of {} ({} GPU each)",
                i.instance_type,
                at.join(", "),
                i.gpus_per_instance
            )
        })
        .collect();
    let gpus = slurm_gpus(settings);
    let jobs_line = format!("jobs: run by Slurm as this server's user, in the directories of executor.slurm.shared_dir (docs/slurm.md)\n\
         sagemaker: channels, checkpoints and models transferred by this server into and out of the shared directory (no /opt/ml on the nodes); {storage_line}");
    Ok(StartedExecutor {
        executor: exec::Executor::Slurm(slurm),
        instances: described,
        gpus,
        jobs_line,
        found: reload::Found {
            detected: (Vec::new(), None),
            isolation: None,
            work_dir: config.data_dir.clone(),
            confinement: None,
            slurm_tag: Some(tag),
        },
    })
}

/// Keeps `value` as the setting `key` stored with the data dir. A different stored value is
/// refused with the error `refuse` gives for it, or replaced when it gives none.
fn keep_setting(
    log: &mut SqliteLog,
    key: &str,
    value: &str,
    refuse: impl Fn(&str) -> Option<ServerError>,
) -> Result<(), ServerError> {
    match log.meta(key)? {
        Some(stored) if stored == value => Ok(()),
        Some(stored) => match refuse(&stored) {
            Some(e) => Err(e),
            None => Ok(log.set_meta(key, value)?),
        },
        None => Ok(log.set_meta(key, value)?),
    }
}

/// This server's mark on its Slurm jobs, drawn once per data dir and kept in the store, so
/// that a restarted server recognises its jobs and leaves other servers' alone.
fn slurm_tag(log: &mut SqliteLog) -> Result<String, ServerError> {
    const KEY: &str = "executor.slurm.tag";
    if let Some(tag) = log.meta(KEY)? {
        return Ok(tag);
    }
    let tag: String = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    log.set_meta(KEY, &tag)?;
    Ok(tag)
}

/// Settings that shape the logged state: ARNs are in the logged requests, and the starvation
/// guard and the reclaim and backfill patience change the core's decisions. They are fixed when the data directory is created; a
/// later change would make the replay refuse commands or decide differently.
fn pin_settings(log: &mut SqliteLog, config: &Config) -> Result<(), ServerError> {
    let settings = [
        ("region", config.region.clone()),
        ("account_id", config.account_id.clone()),
        (
            "scheduler.reserve_after_seconds",
            config.reserve_after.as_secs().to_string(),
        ),
        (
            "scheduler.reclaim_patience_seconds",
            config.reclaim_patience.as_secs().to_string(),
        ),
        (
            "scheduler.backfill_patience_seconds",
            config.backfill_patience.as_secs().to_string(),
        ),
    ];
    for (key, value) in settings {
        keep_setting(log, key, &value, |pinned| {
            Some(ServerError::Config(format!(
                "{key} is '{value}' but the data dir {} was created with '{pinned}', and its state depends on it; \
                 set {key} = \"{pinned}\" or start with a fresh --data-dir",
                config.data_dir.display()
            )))
        })?;
    }
    Ok(())
}

/// Two servers on one data directory would both replay the log and both run its jobs: the
/// first takes an exclusive lock (released by the kernel however it dies) and the second is
/// refused.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, ServerError> {
    let path = dir.join("qm.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| ServerError::Io {
            context: format!("opening {}", path.display()),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(ServerError::DataDirInUse(dir.display().to_string()))
        }
        Err(std::fs::TryLockError::Error(source)) => Err(ServerError::Io {
            context: format!("locking {}", path.display()),
            source,
        }),
    }
}

/// SIGHUP reloads the config file (`reload`), as `qm reload` does; it never ends the server
/// (its default action would). What it applied, or why it changed nothing, goes to the log.
fn reload_on_hangup(reloader: std::sync::Arc<reload::Reloader>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match reloader.reload("SIGHUP").await {
                Ok(r) if r.changed.is_empty() => {
                    eprintln!("qm: SIGHUP: reloaded the config; nothing changed")
                }
                Ok(r) => eprintln!(
                    "qm: SIGHUP: reloaded the config; applied {}",
                    r.changed.join(", ")
                ),
                Err(e) => eprintln!("qm: SIGHUP: reload refused: {}", e.message()),
            }
        }
    });
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn print_banner(
    config: &Config,
    addr: std::net::SocketAddr,
    pool: &[String],
    auth: &[String],
    jobs: &str,
) {
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let url = format!("{scheme}://{addr}");
    let region = &config.region;
    let clients = if config.auth {
        format!(
            "AWS CLI:  (with the export above) aws batch describe-service-environments --endpoint-url {url}\n\
             boto3:    boto3.Session(profile_name=\"qm-admin\").client(\"batch\", endpoint_url=\"{url}\", region_name=\"{region}\")"
        )
    } else {
        format!(
            "AWS CLI:  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION={region}\n\
             \x20         aws batch describe-service-environments --endpoint-url {url}\n\
             boto3:    boto3.client(\"batch\", endpoint_url=\"{url}\", region_name=\"{region}\",\n\
             \x20                      aws_access_key_id=\"local\", aws_secret_access_key=\"local\")"
        )
    };
    println!(
        "Quartermaster listening on {url}\n\
         data dir: {data}\n\
         instances: {pool}\n\
         {jobs}\n\
         stop: Ctrl-C or SIGTERM stops this server only; running jobs go on and its next start adopts them (`qm drain --requeue` stops them)\n\
         region {region}, account {account}\n\
         {auth}\n\
         \n\
         {clients}",
        data = config.data_dir.display(),
        pool = pool.join(", "),
        account = config.account_id,
        auth = auth.join("\n"),
    );
    if std::env::var_os("INVOCATION_ID").is_some() {
        // systemd's default KillMode=control-group signals every process of the unit when it
        // stops: the supervisors, and so the jobs, with the server.
        eprintln!(
            "qm: running under systemd: give the unit KillMode=process, or stopping or restarting it stops every running job (their attempts are then recorded lost)"
        );
    }
    if !config.listen.ip().is_loopback() && config.tls.is_none() {
        eprintln!(
            "qm: warning: listening on {} without TLS: SigV4 keeps requests from being forged or altered, but payloads, environment variables and logs cross the network in clear text; put the server behind a TLS proxy or keep it on a trusted network",
            config.listen
        );
    }
}
