//! `qm serve`: the server's start and stop, in their steps. The data dir is made private and
//! locked, the port bound and the TLS certificate read (before the state is touched: either
//! failing must not cost a replay), the state recovered from the log, the executor started
//! and reconciled, the driver run on its own thread, the HTTP layer and its tasks started;
//! on SIGINT or SIGTERM the HTTP server stops, the driver drains its inbox and the executor
//! settles.

mod banner;
mod broker;
mod data_dir;
mod executor;
mod listen;
mod pinned;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use qm_api::Arns;
use qm_store::{Log, SqliteLog};
use tokio::sync::mpsc;

use crate::config::{Config, Flags};
use crate::driver::{self, Envelope};
use crate::error::ServerError;
use crate::{archive, auth, credentials, exec, history, http, reload, state};
use crate::{writer, INBOX, VERSION};

/// What the write-ahead log is extended to at start: SQLite checkpoints it at 1,000 pages
/// (4,120,032 bytes with their frame headers) and then writes it again from its start, so
/// that most commits never grow it.
const WAL_RESERVE: u64 = 4 << 20;

/// Runs the server until SIGINT or SIGTERM.
pub async fn serve(config: Config, flags: Flags) -> Result<(), ServerError> {
    refuse_open_no_auth(&config)?;
    let _lock = data_dir::prepare(&config.data_dir)?;
    // Bind before touching the state: a busy port must not cost a replay and a reconciliation
    // that would stop attempts.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(io(format!("listening on {}", config.listen)))?;
    // Before touching the state, too: an unreadable certificate must not cost a replay.
    let tls = match &config.tls {
        Some((cert, key)) => Some(listen::load_tls(cert, key).await?),
        None => None,
    };
    let db = config.data_dir.join("qm.sqlite3");
    let mut log = SqliteLog::open(&db)?;
    // Under the data directory's lock, before any append: see `reserve_wal`.
    log.reserve_wal(WAL_RESERVE)?;
    pinned::pin_settings(&mut log, &config)?;
    let (state, recovered) = recover(&config, &mut log)?;
    let (auth, auth_lines) = open_auth(&config, &db)?;
    let mut snapshot_log = SqliteLog::open(&db)?;
    snapshot_log.set_writer(&writer())?;

    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let live = state.live_attempts().len();
    let started = executor::start(&config, &mut log, live, events_tx.clone())?;
    let addr = listener
        .local_addr()
        .map_err(io("reading the listen address".into()))?;
    let credentials = broker::role_broker(&config, addr)?;
    let jobs_line = match &credentials {
        Some(b) => format!("{}\n{}", started.jobs_line, b.describe()),
        None => started.jobs_line,
    };
    let settling = started.executor.clone();
    let (req_tx, req_rx) = mpsc::channel(INBOX);
    let driver = driver::Driver::new(
        state,
        log,
        started.executor.clone(),
        driver::Channels {
            requests: req_rx,
            events: events_rx,
            events_tx,
        },
        driver::Snapshotter::new(snapshot_log),
        config.data_dir.clone(),
        config.cadence(recovered.commands),
    );
    let driver_thread = start_driver(driver.with_credentials(credentials.clone())).await?;

    banner::print_banner(&config, addr, &started.instances, &auth_lines, &jobs_line);
    let serving = Serving {
        flags,
        auth,
        executor: started.executor,
        found: started.found,
        gpus: started.gpus,
        credentials,
    };
    let app = start_tasks(&config, serving, req_tx);
    listen::serve_http(listener, tls, app, config.limits).await?;
    // The router (and its inbox sender) is gone: the driver drains what is queued and ends.
    let _ = tokio::task::spawn_blocking(move || driver_thread.join()).await;
    settling.settle(std::time::Duration::from_secs(2)).await;
    eprintln!("qm: stopped");
    Ok(())
}

/// How an IO error of the start becomes the server's, with what was being done.
fn io(context: String) -> impl FnOnce(std::io::Error) -> ServerError {
    move |source| ServerError::Io { context, source }
}

/// `--no-auth` only where nobody but this machine's users can reach the port.
fn refuse_open_no_auth(config: &Config) -> Result<(), ServerError> {
    if !config.auth && !auth::no_auth_allowed(config.listen) {
        return Err(ServerError::Config(format!(
            "--no-auth: refused on {}: without authentication anyone who reaches the port can change every share and run code as this server's user; listen on a loopback address (127.0.0.1:PORT) or drop --no-auth",
            config.listen
        )));
    }
    Ok(())
}

/// The state of the log: recovered, then ready to go on as this build, with the admission
/// limits of `config`. After an upgrade a snapshot is written at once.
fn recover(
    config: &Config,
    log: &mut SqliteLog,
) -> Result<(state::State, driver::Recovered), ServerError> {
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
    let recovered = driver::recover(&mut state, &*log, &running)?;
    check_recovery(&recovered, &state, started)?;
    log.set_writer(&running)?;
    if let Some(reason) = state.core.drained() {
        eprintln!(
            "qm: the executor is drained ({reason}): no attempt starts until an admin runs `qm drain --cancel`"
        );
    }
    state.admission = Some(config.admission());
    // After an upgrade, a snapshot at once: the next start (of this build or a later one) goes
    // on from this build's state instead of replaying the previous build's batches again.
    if !recovered.other_writers.is_empty() {
        driver::write_snapshot(&state, log)?;
    }
    Ok((state, recovered))
}

/// Says what recovery replayed (and how batches of other builds went), and refuses a state
/// that this very build now decides differently than it did.
fn check_recovery(
    recovered: &driver::Recovered,
    state: &state::State,
    started: std::time::Instant,
) -> Result<(), ServerError> {
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
            banner::upgrade_summary(recovered)
        );
    }
    Ok(())
}

/// The principals (in the database at `db`) and the request guard's settings, with the
/// banner's lines about who may call.
fn open_auth(config: &Config, db: &Path) -> Result<(auth::Auth, Vec<String>), ServerError> {
    auth::Auth::open(
        db,
        auth::Settings {
            enabled: config.auth,
            region: config.region.clone(),
            hosts: config.hosts.clone(),
            public_metrics: config.public_metrics,
            data_dir: config.data_dir.clone(),
        },
    )
}

/// Reconciles `driver` with what the executor runs, then runs it on a thread of its own; a
/// failed commit to the log stops the server.
async fn start_driver(
    mut driver: driver::Driver,
) -> Result<std::thread::JoinHandle<()>, ServerError> {
    let lost = driver.reconcile().await?;
    if lost > 0 {
        eprintln!("qm: {lost} attempt(s) were running when the server last stopped; their jobs are queued again");
    }
    let handle = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("qm-driver".into())
        .spawn(move || {
            if let Err(e) = handle.block_on(driver.run()) {
                tracing::error!(error = %e, "cannot commit to the log; stopping the server");
                std::process::exit(70);
            }
        })
        .map_err(io("starting the driver thread".into()))
}

/// What the HTTP layer and reloads take over from the start.
struct Serving {
    flags: Flags,
    auth: auth::Auth,
    executor: exec::Executor,
    found: reload::Found,
    /// GPUs per instance type.
    gpus: std::collections::BTreeMap<String, u32>,
    credentials: Option<Arc<credentials::Broker>>,
}

/// The HTTP layer's state, with the tasks that run beside it: the history's sampler, and
/// reloads on SIGHUP.
fn start_tasks(config: &Config, s: Serving, requests: mpsc::Sender<Envelope>) -> http::App {
    let history = Arc::new(Mutex::new(history::Ring::new(config.history_sample)));
    tokio::spawn(history::sample_every(
        requests.downgrade(),
        history.clone(),
        config.history_sample,
    ));
    // GPUs per instance type, for the GPU-hours of the usage report and the review; a
    // reload adds the types it brings.
    let gpus = Arc::new(RwLock::new(s.gpus));
    let reloader = Arc::new(reload::Reloader::new(
        s.flags,
        config.clone(),
        s.executor.clone(),
        s.found,
        gpus.clone(),
        requests.downgrade(),
    ));
    let app = http::App {
        reloader: reloader.clone(),
        auth: Arc::new(s.auth),
        requests,
        latency: Default::default(),
        history,
        executor: s.executor,
        archive: Arc::new(archive::Archive::new(&config.data_dir)),
        gpus,
        limits: config.limits,
        credentials: s.credentials,
    };
    listen::reload_on_hangup(reloader);
    app
}
