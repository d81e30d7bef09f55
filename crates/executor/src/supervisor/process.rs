//! The supervisor process, `qm supervise`: one per local attempt, the parent of everything the
//! attempt runs, in a session of its own so that nothing that happens to the server reaches it.
//!
//! The server binds the attempt's socket (`<data-dir>/supervisors/<attempt>.sock`) and hands
//! the listening socket over as standard input; it connects at once and sends `hello` and
//! `launch`. The supervisor becomes the child subreaper of the job, runs the attempt
//! (`attempt`), writes the outcome durably into the attempt's directory, reports it,
//! and exits once a server acknowledged it. Servers come and go: each new connection is told
//! the status as it is, and stop requests are carried out whether a server is there or not.
//! SIGTERM to the supervisor stops the attempt as a stop request would.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};

use super::protocol::{FromSupervisor, Hello, Launch, Status, ToSupervisor, MAX_LINE, PROTOCOL};
use super::{boot_id, outcome_file, socket_path, write_outcome, Identity};
use crate::attempt::{self, Ctx, Report, Reporter};
use qm_storage::Storage;

/// How long a connecting server has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the supervisor looks whether its socket is still there: a data dir deleted under
/// it (a test's, an admin's) means no server will ever ask for the attempt.
const ORPHAN_CHECK: Duration = Duration::from_secs(60);

/// How long an ended attempt's supervisor waits for a server to acknowledge it. After that
/// the outcome file alone tells the next server (it records an attempt whose supervisor is
/// gone as its outcome file says).
const MAX_LINGER: Duration = Duration::from_secs(24 * 3600);

/// Runs the supervisor; its exit code. Standard input must be the listening socket.
pub fn main() -> i32 {
    let listener = match take_listener() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("qm supervise: standard input is not the attempt's listening socket ({e}); only qm serve starts supervisors");
            return 2;
        }
    };
    // Out of the server's session and process group: a signal to them (a terminal's ^C, a
    // service manager stopping the server's group) does not reach the job.
    let _ = rustix::process::setsid();
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("qm supervise: cannot become the job's subreaper: {e}");
        return 2;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("qm supervise: cannot start: {e}");
            return 2;
        }
    };
    runtime.block_on(serve(listener))
}

/// Standard input as the listening socket, and /dev/null as standard input again (the job
/// must not inherit the socket).
fn take_listener() -> std::io::Result<std::os::unix::net::UnixListener> {
    let stdin = std::io::stdin();
    let fd: OwnedFd = rustix::io::fcntl_dupfd_cloexec(stdin.as_fd(), 3)?;
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    let listener = std::os::unix::net::UnixListener::from(fd);
    // Fails unless it is a listening socket.
    listener.local_addr()?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// One connection to a server: its messages come through `incoming` (a reader task per
/// connection, so that the main loop's select never cancels a half-read line).
struct Conn {
    write: OwnedWriteHalf,
    incoming: mpsc::UnboundedReceiver<ToSupervisor>,
}

impl Conn {
    fn new(stream: UnixStream) -> Conn {
        let (read, write) = stream.into_split();
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(read);
            let mut line = String::new();
            loop {
                line.clear();
                match (&mut lines)
                    .take(MAX_LINE as u64)
                    .read_line(&mut line)
                    .await
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) => match serde_json::from_str::<ToSupervisor>(&line) {
                        Ok(msg) => {
                            if tx.send(msg).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "a message the supervisor cannot read; dropping the connection");
                            return;
                        }
                    },
                }
            }
        });
        Conn { write, incoming }
    }

    async fn send(&mut self, msg: &FromSupervisor) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.write.write_all(&line).await
    }

    /// The next message, within `HELLO_TIMEOUT`.
    async fn first(&mut self) -> Option<ToSupervisor> {
        tokio::time::timeout(HELLO_TIMEOUT, self.incoming.recv())
            .await
            .ok()
            .flatten()
    }
}

/// What the supervisor knows of itself, to introduce itself to each server.
struct Me {
    attempt: u64,
    identity: Identity,
    launch: Launch,
}

impl Me {
    fn hello(&self, status: &Status) -> FromSupervisor {
        FromSupervisor::Hello(Box::new(Hello {
            protocol: PROTOCOL,
            attempt: self.attempt,
            identity: self.identity.clone(),
            placement: Some(self.launch.placement.clone()),
            status: status.clone(),
        }))
    }
}

async fn serve(listener: std::os::unix::net::UnixListener) -> i32 {
    let Ok(listener) = UnixListener::from_std(listener) else {
        return 2;
    };
    let boot = boot_id();
    let Some(identity) = Identity::of(std::process::id(), &boot) else {
        eprintln!("qm supervise: cannot read its own /proc entry");
        return 2;
    };
    // The server that spawned it connects at once: hello, then launch.
    let Some((mut conn, attempt, launch)) = first_connection(&listener).await else {
        // Never launched (its server died right after spawning it): nothing ran.
        return 0;
    };
    let me = Me {
        attempt,
        identity,
        launch,
    };
    let span = tracing::info_span!("supervisor", attempt);
    let _entered = span.enter();
    let (status_tx, mut status_rx) = watch::channel(Status::Preparing);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conn = conn
        .send(&me.hello(&Status::Preparing))
        .await
        .ok()
        .map(|()| conn);
    let mut task = tokio::spawn(tracing::Instrument::instrument(
        run_attempt(me.launch.clone(), status_tx.clone(), stop_rx),
        span.clone(),
    ));
    let mut task_done = false;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let socket = socket_path(&me.launch.settings.data_dir, attempt);
    let mut watch = Orphan::new(&socket);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let status = status_rx.borrow().clone();
                if let Some(c) = handshake(stream, &me, &status).await {
                    // The newest server wins; an older connection is dropped.
                    conn = Some(c);
                }
            }
            msg = next(&mut conn) => match msg {
                Some(ToSupervisor::Stop) => {
                    stop_tx.send_replace(true);
                }
                Some(ToSupervisor::Ack) if matches!(*status_rx.borrow(), Status::Exited { .. }) => {
                    let _ = std::fs::remove_file(&socket);
                    return 0;
                }
                Some(_) => {}
                None => conn = None,
            },
            joined = &mut task, if !task_done => {
                task_done = true;
                if let Err(e) = joined {
                    // The attempt's processes were killed as its future was dropped.
                    failed(&me.launch, &status_tx, &e.to_string());
                }
            }
            changed = status_rx.changed() => {
                if changed.is_err() {
                    return 3;
                }
                let status = status_rx.borrow_and_update().clone();
                let exited = matches!(status, Status::Exited { .. });
                if let Some(c) = conn.as_mut() {
                    if c.send(&FromSupervisor::Status(status)).await.is_err() {
                        conn = None;
                    }
                }
                if exited && watch.orphaned {
                    return 0;
                }
            }
            Some(()) = recv_signal(&mut term) => {
                stop_tx.send_replace(true);
            }
            _ = watch.check.tick() => {
                let exited = matches!(*status_rx.borrow(), Status::Exited { .. });
                if watch.gone(&socket) || (exited && watch.lingered()) {
                    if exited {
                        return 0;
                    }
                    stop_tx.send_replace(true);
                }
            }
        }
    }
}

/// Whether the supervisor's socket is still the one it was started with.
struct Orphan {
    check: tokio::time::Interval,
    inode: Option<(u64, u64)>,
    since: tokio::time::Instant,
    /// Its socket is gone: the attempt is being stopped, and the supervisor goes when it ends.
    orphaned: bool,
}

impl Orphan {
    fn new(socket: &std::path::Path) -> Orphan {
        let start = tokio::time::Instant::now();
        Orphan {
            check: tokio::time::interval_at(start + ORPHAN_CHECK, ORPHAN_CHECK),
            inode: inode(socket),
            since: start,
            orphaned: false,
        }
    }

    /// True, once, when the socket was removed or replaced.
    fn gone(&mut self, socket: &std::path::Path) -> bool {
        if self.orphaned || inode(socket) == self.inode {
            return false;
        }
        tracing::warn!(socket = %socket.display(), "the attempt's socket is gone (its data dir was removed?): stopping the attempt; no server can ask for it");
        self.orphaned = true;
        true
    }

    /// Whether it has waited long enough for an acknowledgement (counted from its start: an
    /// attempt shorter than the bound waits at least the rest of it).
    fn lingered(&self) -> bool {
        self.since.elapsed() > MAX_LINGER
    }
}

fn inode(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The spawning server's connection, its hello and its launch. The server connects at once
/// and says hello; if it dies first, the supervisor has nothing to do and exits.
async fn first_connection(listener: &UnixListener) -> Option<(Conn, u64, Launch)> {
    let (stream, _) = tokio::time::timeout(HELLO_TIMEOUT, listener.accept())
        .await
        .ok()?
        .ok()?;
    let mut conn = Conn::new(stream);
    let Some(ToSupervisor::Hello { attempt, .. }) = conn.incoming.recv().await else {
        return None;
    };
    let Some(ToSupervisor::Launch(launch)) = conn.first().await else {
        eprintln!("qm supervise: the server sent no launch");
        return None;
    };
    if launch.spec.attempt != attempt {
        eprintln!("qm supervise: the launch is for another attempt");
        return None;
    }
    Some((conn, attempt, *launch))
}

/// A later server's connection: its hello, and ours with the status now.
async fn handshake(stream: UnixStream, me: &Me, status: &Status) -> Option<Conn> {
    let mut conn = Conn::new(stream);
    match conn.first().await {
        Some(ToSupervisor::Hello { attempt, .. }) if attempt == me.attempt => {}
        // A server looking for another attempt (a stale socket name) learns who this is.
        Some(ToSupervisor::Hello { .. }) => {
            let _ = conn.send(&me.hello(status)).await;
            return None;
        }
        _ => return None,
    }
    conn.send(&me.hello(status)).await.ok()?;
    Some(conn)
}

async fn next(conn: &mut Option<Conn>) -> Option<ToSupervisor> {
    match conn {
        Some(c) => c.incoming.recv().await,
        None => std::future::pending().await,
    }
}

async fn recv_signal(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// The attempt's task panicked: it ended as a failure the job may retry.
fn failed(launch: &Launch, status: &watch::Sender<Status>, why: &str) {
    let outcome = crate::Outcome::Failed {
        reason: format!(
            "{}the attempt's supervisor failed ({why}); its processes were killed",
            crate::outcome::CLIENT_ERROR
        ),
        retryable: true,
    };
    let path = outcome_file(
        &launch.settings.data_dir,
        &launch.spec.job_id,
        launch.spec.attempt_number,
    );
    if let Err(e) = write_outcome(&path, &outcome) {
        tracing::error!(path = %path.display(), error = %e, "cannot write the attempt's outcome");
    }
    status.send_replace(Status::Exited {
        outcome,
        at_ms: crate::executor::now_ms(),
    });
}

/// Runs the attempt, writes its outcome durably, then says it exited.
async fn run_attempt(launch: Launch, status: watch::Sender<Status>, stop: watch::Receiver<bool>) {
    let Launch {
        spec,
        placement,
        settings,
    } = launch;
    let outcome_path: PathBuf = outcome_file(&settings.data_dir, &spec.job_id, spec.attempt_number);
    // Only for an attempt that transfers something: a client costs a trivial job its start.
    let transfers =
        !spec.channels.is_empty() || spec.checkpoint_uri.is_some() || spec.output_path.is_some();
    let storage = settings
        .storage
        .clone()
        .filter(|_| transfers)
        .map(|s| Arc::new(Storage::new(s)));
    let reports = status.clone();
    let report: Reporter = Arc::new(move |r| {
        reports.send_replace(match r {
            Report::Starting(reason) => Status::Starting { reason },
            Report::Running(running) => Status::Running(running),
        });
    });
    let ctx = Arc::new(Ctx {
        settings,
        storage,
        report,
    });
    let outcome = attempt::supervise(ctx, spec, placement.hosts, placement.uid, stop).await;
    let at_ms = crate::executor::now_ms();
    if let Err(e) = write_outcome(&outcome_path, &outcome) {
        tracing::error!(path = %outcome_path.display(), error = %e, "cannot write the attempt's outcome; reporting it anyway");
    }
    status.send_replace(Status::Exited { outcome, at_ms });
}
