//! The supervisor process, `qm supervise`: one per local attempt, the parent of everything the
//! attempt runs, in a session of its own so that nothing that happens to the server reaches it.
//!
//! The server binds the attempt's socket (`<data-dir>/supervisors/<attempt>.sock`) and hands
//! the listening socket over as standard input; it connects at once and sends `hello` and
//! `launch`. The supervisor becomes the child subreaper of the job, runs the attempt
//! (`attempt`) as a task beside its main loop, reports its end and writes the outcome into
//! the attempt's directory. Once a server acknowledged it, it waits free
//! on that server's connection for the next attempt (`free`), and exits when the server
//! closes it. A launch sent with `hold` is prepared at once and started at `go`. Servers come
//! and go: each new connection is told the status as it is, and stop requests are carried out
//! whether a server is there or not. SIGTERM to the supervisor stops the attempt, which is
//! then reported lost (a service manager stopping the server's whole unit, not the job's
//! doing).

use qm_core::AttemptId;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::attempt::{self, Ctx, Report, Reporter};
use super::protocol::{FromSupervisor, Hello, Launch, Status, ToSupervisor, PROTOCOL};
use super::{
    boot_id, outcome_dir, outcome_file, socket_path, sync_outcome, wire, write_outcome_as,
    Durability, Identity,
};
use crate::{Exit, Usage};
use qm_storage::Storage;

/// How long a connecting server has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an ended attempt's supervisor waits for a server to acknowledge it. After that
/// the outcome file alone tells the next server (it records an attempt whose supervisor is
/// gone as its outcome file says).
const MAX_LINGER: Duration = Duration::from_secs(24 * 3600);

/// How serving one attempt ended.
enum Served {
    /// Acknowledged with its outcome on disk, the server still connected: nothing of the
    /// attempt is left, and the process may serve the server's next one.
    Acknowledged {
        conn: Conn,
        /// The attempt's socket (to be renamed while free).
        socket: PathBuf,
        /// Where the supervisor makes its spare job directory while free.
        spare: PathBuf,
    },
    /// Gone otherwise (never launched, orphaned, stopped by a signal): the process exits.
    Done(i32),
}

/// Runs the supervisor; its exit code. Standard input must be the listening socket.
///
/// Once an attempt is acknowledged the supervisor stays on its server's connection, free:
/// the server hands it its next attempt there, so the fork, the runtime, the socket file and
/// the connection are paid once, not per attempt. It exits when the
/// server closes the connection (it went, or keeps enough free supervisors) or on SIGTERM
/// while it is free.
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
    // `ps` and `top` show `qm-supervise`, not the `exe` of /proc/self/exe.
    let _ = rustix::thread::set_name(c"qm-supervise");
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
    runtime.block_on(async move {
        let Ok(listener) = UnixListener::from_std(listener) else {
            return 2;
        };
        // Read once: a process's boot and start time do not change.
        let Some(identity) = Identity::of(std::process::id(), &boot_id()) else {
            eprintln!("qm supervise: cannot read its own /proc entry");
            return 2;
        };
        let mut next = None;
        loop {
            match serve(&listener, &identity, next.take()).await {
                Served::Acknowledged {
                    conn,
                    socket,
                    spare,
                } => match free(conn, &socket, spare).await {
                    Some(launch) => next = Some(launch),
                    None => return 0,
                },
                Served::Done(code) => return code,
            }
        }
    })
}

/// Waits, free, on the connection of the server that acknowledged the last attempt: its
/// socket renamed to `free-<pid>.sock` (no scan takes it for an attempt's), `free` said, and
/// the next attempt's hello and launch read (the server renamed the socket to the attempt's
/// before it sent them). Meanwhile it makes its `spare` job directory, which the next
/// attempt takes if its job is new ([`crate::layout::spare_dir`]). `None` (the socket and the
/// spare removed) when the server closes the connection or sends anything else, or on
/// SIGTERM.
async fn free(mut conn: Conn, socket: &Path, spare: PathBuf) -> Option<(Conn, AttemptId, Launch)> {
    let free_socket = socket.with_file_name(super::free_socket_name(std::process::id()));
    if std::fs::rename(socket, &free_socket).is_err() {
        let _ = std::fs::remove_file(socket);
        return None;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    // On the blocking pool, so that a launch is read while it is made; awaited before the
    // launch is served or the spare removed, so that neither finds it half made. One the last
    // attempt did not take (its job had a directory) is kept: `make_spare` finds it there.
    let making = spare.clone();
    let made = tokio::task::spawn_blocking(move || crate::layout::make_spare(&making));
    let next = async {
        conn.send(&FromSupervisor::Free).await.ok()?;
        let Some(ToSupervisor::Hello { attempt, .. }) = conn.incoming.recv().await else {
            return None;
        };
        launch_of(&mut conn, attempt)
            .await
            .map(|launch| (attempt, launch))
    };
    let got = tokio::select! {
        got = next => got,
        Some(()) = recv_signal(&mut term) => None,
    };
    let _ = made.await;
    match got {
        Some((attempt, launch)) => Some((conn, attempt, launch)),
        None => {
            // Renamed to an attempt's socket by a server that then went: that one is
            // removed by the next server, which finds nothing listening on it.
            let _ = std::fs::remove_file(&free_socket);
            let _ = std::fs::remove_dir_all(&spare);
            None
        }
    }
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
/// connection, so that the main loop's select never cancels a half-read line). A line this
/// build cannot read (a later server's new message) is skipped, not fatal. Dropping it shuts
/// the connection down (the server reads its end, the reader task stops).
struct Conn {
    write: wire::Sender,
    incoming: mpsc::UnboundedReceiver<ToSupervisor>,
}

impl Conn {
    /// `None` if the stream cannot be registered with the runtime (the connection is then
    /// dropped, as a broken one would be).
    fn new(stream: UnixStream) -> Option<Conn> {
        let (write, mut read) = wire::split(stream.into_std().ok()?).ok()?;
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            // Ends at the end of the stream, or at a line longer than any message: the
            // connection is not a server's.
            while let Ok(Some(line)) = read.recv().await {
                match serde_json::from_slice::<ToSupervisor>(&line) {
                    Ok(msg) => {
                        if tx.send(msg).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "skipping a message this supervisor cannot read")
                    }
                }
            }
        });
        Some(Conn { write, incoming })
    }

    async fn send(&mut self, msg: &FromSupervisor) -> std::io::Result<()> {
        self.write.send_lines(std::slice::from_ref(msg)).await
    }

    /// The next message, within `HELLO_TIMEOUT`.
    async fn first(&mut self) -> Option<ToSupervisor> {
        tokio::time::timeout(HELLO_TIMEOUT, self.incoming.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.write.shutdown();
    }
}

/// What the supervisor knows of itself, to introduce itself to each server.
struct Me {
    attempt: AttemptId,
    identity: Identity,
    launch: Launch,
    /// Whether the attempt may start: false while a launch with `hold` waits for `go`.
    go: watch::Sender<bool>,
}

impl Me {
    fn hello(&self, status: &Status) -> FromSupervisor {
        FromSupervisor::Hello(Box::new(Hello {
            protocol: PROTOCOL,
            attempt: self.attempt,
            identity: self.identity.clone(),
            placement: Some(self.launch.placement.clone()),
            status: status.clone(),
            held: !*self.go.borrow(),
        }))
    }
}

/// The attempt as the main loop follows it: preparing at first.
#[derive(Default)]
struct Tracked {
    /// The status as of the last event.
    status: Status,
    /// Whether the outcome is recorded: on disk, or copied there once a server's log held it
    /// (an acknowledged attempt whose file could not be written keeps its supervisor until a
    /// server has it in its log, or the socket goes).
    durable: bool,
    /// Whether a server acknowledged the end before its outcome was on disk: the supervisor
    /// goes once it is, or once the attempt's task is done (the file could not be written,
    /// and the server's log holds the end anyway).
    acked: bool,
    /// Whether the attempt's task is done: its last status sent, its outcome file written or
    /// found impossible to write.
    ended: bool,
}

impl Tracked {
    /// Takes the attempt's newest status and tells the connected server what is new (an
    /// outcome that only became durable is no news to it).
    async fn update(&mut self, conn: &mut Option<Conn>, status: Status, durable: bool) {
        let news = self.status != status;
        self.status = status.clone();
        self.durable = durable;
        if news {
            send(conn, &FromSupervisor::Status(status)).await;
        }
    }

    /// Whether the attempt ended and its outcome is on disk.
    fn settled(&self) -> bool {
        self.durable && matches!(self.status, Status::Exited { .. })
    }

    /// Whether nothing more will come of the attempt: settled, or its task done.
    fn finished(&self) -> bool {
        self.settled() || self.ended
    }
}

/// Runs one attempt: `handed`'s (handed over on a free supervisor's connection), else the one
/// the spawning server sends on the first connection.
async fn serve(
    listener: &UnixListener,
    identity: &Identity,
    handed: Option<(Conn, AttemptId, Launch)>,
) -> Served {
    // The server that spawned it connects at once: hello, then launch.
    let first = match handed {
        Some(handed) => Some(handed),
        None => first_connection(listener).await,
    };
    let Some((conn, attempt, launch)) = first else {
        // Never launched (its server died right after spawning it): nothing ran.
        return Served::Done(0);
    };
    let me = Me {
        attempt,
        identity: identity.clone(),
        go: watch::channel(!launch.hold).0,
        launch,
    };
    let span = tracing::info_span!("supervisor", attempt = attempt.0);
    // Instrumented, not entered: the attempt's task and the connection's reader run on this
    // thread between its steps.
    follow(listener, me, conn, span.clone())
        .instrument(span)
        .await
}

/// Follows attempt `me` from its launch on `conn` until it is settled and acknowledged, or
/// the supervisor must go.
async fn follow(listener: &UnixListener, me: Me, conn: Conn, span: tracing::Span) -> Served {
    let attempt = me.attempt;
    let mut conn = Some(conn);
    send(&mut conn, &me.hello(&Status::Preparing)).await;
    let (heard_tx, heard) = watch::channel(match conn {
        Some(_) => Heard::Waiting,
        None => Heard::Alone,
    });
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped_by = Arc::new(OnceLock::new());
    spawn_attempt(Job {
        launch: me.launch.clone(),
        events: events_tx,
        stop: stop_rx,
        go: me.go.subscribe(),
        stopped_by: stopped_by.clone(),
        heard,
        span,
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let socket = socket_path(&me.launch.settings.data_dir, attempt);
    let mut watch = Orphan::new(&socket, &me.launch.settings);
    let mut f = Following {
        conn,
        tracked: Tracked::default(),
        heard: heard_tx,
        stop: stop_tx,
        stopped_by,
        socket,
        spare: crate::layout::spare_dir(&me.launch.settings.data_dir, std::process::id()),
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                f.accept(stream, &me, &mut events).await;
            }
            msg = next(&mut f.conn) => {
                if let Some(served) = f.on_message(msg, &me) {
                    return served;
                }
            }
            event = events.recv(), if !f.tracked.ended => {
                // `None`: the attempt's task is done.
                let served = match event {
                    Some((status, durable)) => f.on_status(status, durable, watch.orphaned).await,
                    None => f.on_end(watch.orphaned),
                };
                if let Some(served) = served {
                    return served;
                }
            }
            Some(()) = recv_signal(&mut term) => {
                // Ended and on disk: the outcome file speaks for the attempt from now on.
                if f.tracked.settled() {
                    return Served::Done(0);
                }
                f.stop_by(SelfStop::Signalled);
            }
            _ = watch.check.tick() => {
                if let Some(served) = f.on_check(&mut watch) {
                    return served;
                }
            }
        }
    }
}

/// What `follow` holds while it serves one attempt: the server's connection, if there is
/// one, what it knows of the attempt, and its channels to the attempt's task.
struct Following {
    conn: Option<Conn>,
    tracked: Tracked,
    heard: watch::Sender<Heard>,
    stop: watch::Sender<bool>,
    /// Why the supervisor stopped the attempt on its own, if it did.
    stopped_by: Arc<OnceLock<SelfStop>>,
    socket: PathBuf,
    /// This process's spare job directory, made when it is free.
    spare: PathBuf,
}

impl Following {
    /// A server connects: it replaces an older connection once it said hello.
    async fn accept(
        &mut self,
        stream: UnixStream,
        me: &Me,
        events: &mut mpsc::UnboundedReceiver<(Status, bool)>,
    ) {
        // A server connecting now learns the newest status: an outcome written just
        // before it connected is told in the hello, not as an adoption.
        while let Ok((status, durable)) = events.try_recv() {
            self.tracked.update(&mut self.conn, status, durable).await;
        }
        if let Some(c) = handshake(stream, me, &self.tracked.status).await {
            // The newest server wins; an older connection is dropped.
            self.conn = Some(c);
        }
    }

    /// What the server said (`None`: its connection is gone); `Some` when the attempt is
    /// served.
    fn on_message(&mut self, msg: Option<ToSupervisor>, me: &Me) -> Option<Served> {
        match msg {
            Some(ToSupervisor::Stop) => {
                self.stop.send_replace(true);
            }
            Some(ToSupervisor::Go) => {
                me.go.send_replace(true);
            }
            Some(ToSupervisor::Ack) => {
                self.heard.send_replace(Heard::Logged);
                self.tracked.acked = true;
                if self.tracked.finished() {
                    return Some(self.acknowledged());
                }
            }
            Some(_) => {}
            None => {
                self.conn = None;
                self.heard.send_if_modified(|h| {
                    let alone = *h == Heard::Waiting;
                    if alone {
                        *h = Heard::Alone;
                    }
                    alone
                });
            }
        }
        None
    }

    /// A new status of the attempt (`durable`: its outcome is on disk); `Some` when the
    /// attempt is served.
    async fn on_status(&mut self, status: Status, durable: bool, orphaned: bool) -> Option<Served> {
        self.tracked.update(&mut self.conn, status, durable).await;
        if self.tracked.settled() && orphaned {
            return Some(Served::Done(0));
        }
        // Acknowledged before its file was on disk.
        (self.tracked.settled() && self.tracked.acked).then(|| self.acknowledged())
    }

    /// The attempt's task is done; `Some` when the attempt is served: acknowledged (its file
    /// may not be on disk, a server's log holds the end), or orphaned (no server will ever
    /// ask for it, and its directory may be gone with its socket).
    fn on_end(&mut self, orphaned: bool) -> Option<Served> {
        self.tracked.ended = true;
        if orphaned {
            return Some(Served::Done(0));
        }
        self.tracked.acked.then(|| self.acknowledged())
    }

    /// The periodic look at the socket: an orphan's attempt is stopped, and a finished one's
    /// supervisor goes (as one does that waited long enough for an acknowledgement). One that
    /// ended but is still writing its outcome goes when it is done (`on_status`, `on_end`:
    /// orphaned), or at a later look.
    fn on_check(&mut self, watch: &mut Orphan) -> Option<Served> {
        let exited = matches!(self.tracked.status, Status::Exited { .. });
        if watch.gone(&self.socket) || (exited && watch.lingered()) {
            if self.tracked.finished() {
                return Some(Served::Done(0));
            }
            if !exited {
                self.stop_by(SelfStop::Orphaned);
            }
        }
        None
    }

    /// Stops the attempt on the supervisor's own account: its outcome says so (lost, no retry
    /// used), whatever the job's exit.
    fn stop_by(&mut self, why: SelfStop) {
        let _ = self.stopped_by.set(why);
        self.stop.send_replace(true);
    }

    /// Served and acknowledged: free on the server's connection, or gone when a server that
    /// acknowledged went since.
    fn acknowledged(&mut self) -> Served {
        let socket = std::mem::take(&mut self.socket);
        match self.conn.take() {
            Some(conn) => Served::Acknowledged {
                conn,
                socket,
                spare: std::mem::take(&mut self.spare),
            },
            None => Served::Done(0),
        }
    }
}

/// Sends `msg` on the connection, if there is one; a connection that fails is dropped.
async fn send(conn: &mut Option<Conn>, msg: &FromSupervisor) {
    if let Some(c) = conn.as_mut() {
        if c.send(msg).await.is_err() {
            *conn = None;
        }
    }
}

/// Whether the supervisor's socket is still the one it was started with, and its server's
/// data dir (where job directories live apart from it) still there.
struct Orphan {
    check: tokio::time::Interval,
    inode: Option<(u64, u64)>,
    server_dir: Option<PathBuf>,
    since: tokio::time::Instant,
    /// Checks in a row that found the socket (or the server's data dir) missing.
    missing: u32,
    /// Its socket is gone: the attempt is being stopped, and the supervisor goes when it ends.
    orphaned: bool,
}

impl Orphan {
    fn new(socket: &Path, settings: &super::Settings) -> Orphan {
        let start = tokio::time::Instant::now();
        let every = settings.orphan_check();
        Orphan {
            check: {
                // Two looks in a row must be a period apart, even after the loop was held up.
                let mut check = tokio::time::interval_at(start + every, every);
                check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                check
            },
            inode: inode(socket).ok(),
            server_dir: settings.server_dir.clone(),
            since: start,
            missing: 0,
            orphaned: false,
        }
    }

    /// True, once, when the socket was removed or replaced, or the server's data dir removed:
    /// seen so at two checks in a row (an error other than "no such file", a stale NFS handle
    /// say, does not count).
    fn gone(&mut self, socket: &Path) -> bool {
        if self.orphaned {
            return false;
        }
        let missing = |e: std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        let socket_gone = match inode(socket) {
            Ok(now) => Some(now) != self.inode,
            Err(e) => missing(e),
        };
        let server_gone = self
            .server_dir
            .as_deref()
            .is_some_and(|dir| std::fs::symlink_metadata(dir).is_err_and(missing));
        let gone = socket_gone || server_gone;
        self.missing = if gone { self.missing + 1 } else { 0 };
        if self.missing < 2 {
            return false;
        }
        tracing::warn!(socket = %socket.display(), server_dir = ?self.server_dir, "the attempt's socket or its server's data dir is gone (removed?): stopping the attempt; no server can ask for it");
        self.orphaned = true;
        true
    }

    /// Whether it has waited long enough for an acknowledgement (counted from its start: an
    /// attempt shorter than the bound waits at least the rest of it).
    fn lingered(&self) -> bool {
        self.since.elapsed() > MAX_LINGER
    }
}

fn inode(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino()))
}

/// The spawning server's connection, its hello and its launch. The server connects at once
/// and says hello; if it dies first, the supervisor has nothing to do and exits.
async fn first_connection(listener: &UnixListener) -> Option<(Conn, AttemptId, Launch)> {
    let (stream, _) = tokio::time::timeout(HELLO_TIMEOUT, listener.accept())
        .await
        .ok()?
        .ok()?;
    let mut conn = Conn::new(stream)?;
    let Some(ToSupervisor::Hello { attempt, .. }) = conn.incoming.recv().await else {
        return None;
    };
    let launch = launch_of(&mut conn, attempt).await?;
    Some((conn, attempt, launch))
}

/// The launch that follows a spawning server's hello for `attempt`.
async fn launch_of(conn: &mut Conn, attempt: AttemptId) -> Option<Launch> {
    let Some(ToSupervisor::Launch(launch)) = conn.first().await else {
        eprintln!("qm supervise: the server sent no launch");
        return None;
    };
    if launch.spec.attempt != attempt {
        eprintln!("qm supervise: the launch is for another attempt");
        return None;
    }
    Some(*launch)
}

/// A later server's connection: its hello, and ours with the status now.
async fn handshake(stream: UnixStream, me: &Me, status: &Status) -> Option<Conn> {
    let mut conn = Conn::new(stream)?;
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

/// What the supervisor runs: one attempt, with where its statuses go, its stop request, why
/// the supervisor stopped it on its own (if it did) and what it heard of the servers.
struct Job {
    launch: Launch,
    events: mpsc::UnboundedSender<(Status, bool)>,
    stop: watch::Receiver<bool>,
    go: watch::Receiver<bool>,
    stopped_by: Arc<OnceLock<SelfStop>>,
    heard: watch::Receiver<Heard>,
    span: tracing::Span,
}

/// Why a supervisor stopped its attempt on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SelfStop {
    /// It was sent SIGTERM.
    Signalled,
    /// Its socket, or its server's data dir, was removed.
    Orphaned,
}

impl SelfStop {
    /// The attempt's outcome, whatever the job's exit: not the job's doing, so lost (no retry
    /// used).
    fn outcome(self) -> Exit {
        Exit::lost(match self {
            SelfStop::Signalled => "Attempt lost: its supervisor was sent SIGTERM (a service manager stopping the server's unit? set KillMode=process); the job was queued again without using a retry",
            SelfStop::Orphaned => "Attempt lost: its supervisor found its socket or its server's data dir removed, so no server could ask for it, and stopped it; the job was queued again without using a retry",
        })
    }
}

/// What the supervisor heard of the servers since it reported its attempt's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// A connected server has the report and has not acknowledged it yet.
    Waiting,
    /// A server acknowledged the end: its log holds it.
    Logged,
    /// No server is connected: the outcome file is the end's only record.
    Alone,
}

/// How long a supervisor waits for a connected server to log its attempt's end before it
/// writes the outcome durably anyway. A server acknowledges within milliseconds (one batch);
/// the end is in the supervisor's memory only meanwhile.
const LOG_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// How the outcome file must be written: as a copy once a server's log holds the end, durably
/// when no server is there or none answered within [`LOG_WAIT`].
async fn sync_needed(mut heard: watch::Receiver<Heard>) -> Durability {
    match tokio::time::timeout(LOG_WAIT, heard.wait_for(|h| *h != Heard::Waiting)).await {
        Ok(Ok(h)) if *h == Heard::Logged => Durability::Plain,
        _ => Durability::Durable,
    }
}

/// Runs the attempt as a task of the supervisor's runtime: its statuses come through
/// `events`, in order, each with whether the outcome is on disk. The main loop goes on between
/// the attempt's steps; only its short file work holds it (a new job's directories, the
/// outcome file: a millisecond or so), and what may take long (walking an earlier attempt's
/// files, an fsync) goes to the blocking pool. On a thread of its own the attempt needed no
/// such care, but each status crossed between threads (a drain of 1,500 trivial jobs: 27
/// context switches per job with a worker thread, 15 here, 19 for the release before
/// supervisors). A task that panics ends the
/// attempt as a failure the job may retry (its processes were killed as its future was
/// dropped).
fn spawn_attempt(job: Job) {
    let path = outcome_path(&job.launch);
    let events = job.events.clone();
    let span = job.span.clone();
    let attempt = tokio::spawn(run_attempt(job, path.clone()).instrument(span));
    tokio::spawn(async move {
        if attempt.await.is_err() {
            failed(&path, &events, "it panicked");
        }
    });
}

/// The attempt could not run to its end: it failed, and the job may retry.
fn failed(path: &Path, events: &mpsc::UnboundedSender<(Status, bool)>, why: &str) {
    let outcome = Exit::Failed {
        reason: format!(
            "{}the attempt's supervisor failed ({why}); its processes were killed",
            crate::outcome::CLIENT_ERROR
        ),
        retryable: true,
    };
    let durable = record(path, &outcome, None, Durability::Durable);
    let _ = events.send((
        Status::Exited {
            outcome,
            at_ms: crate::clock::now_ms(),
            usage: None,
        },
        durable,
    ));
}

/// `settings` acting as the job's role: the server's endpoint, the attempt's token in a file
/// beside its outcome (root's, 0600: object_store reads the token from a file). Where the file
/// cannot be written, transfers fail on the missing token: never as the server.
fn as_role(
    mut settings: qm_storage::Settings,
    role: &crate::RoleCredentials,
    outcome: &Path,
) -> qm_storage::Settings {
    let token_file = outcome.with_file_name("credentials-token");
    let written = outcome_dir(outcome).and_then(|dir| {
        std::fs::create_dir_all(dir)?;
        crate::layout::write_private(&token_file, role.token.as_bytes())
    });
    if let Err(e) = written {
        tracing::error!(path = %token_file.display(), error = %e, "cannot write the attempt's credentials token");
    }
    // The storage ignores its keys while `container` is set (`qm_storage::s3`).
    settings.container = Some(qm_storage::ContainerCredentials {
        url: role.url.clone(),
        token_file,
    });
    settings
}

/// Where `launch`'s outcome is written.
fn outcome_path(launch: &Launch) -> PathBuf {
    outcome_file(
        &launch.settings.data_dir,
        &launch.spec.job_id,
        launch.spec.attempt_number,
    )
}

/// Makes the outcome written at `path` durable (the file, then its directory); whether it
/// could. Until then a crash of the machine may leave the file empty or torn, which reads as
/// no outcome: the attempt is then lost, as it would be had nothing been written.
fn sync_recorded(path: &Path) -> bool {
    succeeded(
        path,
        sync_outcome(path),
        "cannot make the attempt's outcome durable",
    )
}

/// Writes the attempt's outcome (to `path`) as `sync` says; whether it could.
fn record(path: &Path, outcome: &Exit, usage: Option<Usage>, sync: Durability) -> bool {
    let written = write_outcome_as(path, outcome, usage, sync);
    succeeded(
        path,
        written,
        "cannot write the attempt's outcome; reporting it anyway",
    )
}

/// Whether the outcome file work on `path` went through; a failure is logged, saying `what`.
fn succeeded(path: &Path, done: std::io::Result<()>, what: &str) -> bool {
    match done {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "{what}");
            false
        }
    }
}

/// What the attempt's steps share: its settings, its storage client when it transfers
/// anything (a client costs a trivial job its start), and where its statuses go.
fn attempt_ctx(
    settings: super::Settings,
    spec: &crate::LaunchSpec,
    path: &Path,
    events: &mpsc::UnboundedSender<(Status, bool)>,
) -> Arc<Ctx> {
    let transfers =
        !spec.channels.is_empty() || spec.checkpoint_uri.is_some() || spec.output_path.is_some();
    let storage = settings
        .storage
        .clone()
        .filter(|_| transfers)
        .map(|s| match &spec.credentials {
            Some(role) => as_role(s, role, path),
            None => s,
        })
        .map(|s| Arc::new(Storage::new(s)));
    let reports = events.clone();
    let report: Reporter = Arc::new(move |r| {
        let status = match r {
            Report::Starting(reason) => Status::Starting { reason },
            Report::Running(running) => Status::Running(running),
        };
        let _ = reports.send((status, false));
    });
    Arc::new(Ctx {
        settings,
        storage,
        report,
    })
}

/// Runs the attempt, says it exited, then writes its outcome (to `path`) and says so.
async fn run_attempt(job: Job, path: PathBuf) {
    let Job {
        launch,
        events,
        stop,
        go,
        stopped_by,
        heard,
        ..
    } = job;
    let Launch {
        spec,
        placement,
        settings,
        limits_kept,
        ..
    } = launch;
    let ctx = attempt_ctx(settings, &spec, &path, &events);
    let attempt::Supervised {
        mut outcome,
        started,
        usage,
        namespaces,
    } = attempt::supervise(ctx, spec, placement, limits_kept, stop, go).await;
    if let Some(why) = stopped_by.get() {
        outcome = why.outcome();
    }
    let usage = started.then_some(usage);
    let exited = Status::Exited {
        outcome: outcome.clone(),
        at_ms: crate::clock::now_ms(),
        usage,
    };
    // Held and never told to go: nothing ran, and no server's log holds the start, so no
    // outcome file may speak for the attempt (a later attempt of the same number would find
    // it).
    if !started {
        let _ = events.send((exited, true));
        namespaces.release();
        return;
    }
    // Told at once, written meanwhile: the server acts on an exit only once its own log holds
    // it, and the supervisor goes only once the file is written too, so the outcome is on
    // disk in one place or the other before anything depends on it. Writing first would put
    // two fsyncs on the path from a reclaim's victim exiting to its owner running; and once a
    // server's log holds the end, the file needs none.
    let _ = events.send((exited.clone(), false));
    // The main loop sends it before the file is made (the file's inode, on a busy disk, is a
    // good part of a millisecond): both run on this one thread, and the main loop was woken
    // by the send, so yielding lets it run first.
    tokio::task::yield_now().await;
    namespaces.release();
    // Written at once, while the server writes its log, so that the acknowledgement finds
    // nothing left to do: it comes as the freed capacity's next attempt starts.
    let written = record(&path, &outcome, usage, Durability::Plain);
    let durable = match sync_needed(heard).await {
        Durability::Plain => written,
        // Off the runtime: an fsync may take long on a busy disk, and the socket must be
        // answered meanwhile.
        Durability::Durable => {
            written
                && tokio::task::spawn_blocking(move || sync_recorded(&path))
                    .await
                    .unwrap_or(false)
        }
    };
    let _ = events.send((exited, durable));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outcome file is fsynced unless a server's log holds the end: it is the end's only
    /// record with no server connected, or none acknowledging in time.
    #[tokio::test(start_paused = true)]
    async fn the_outcome_is_fsynced_unless_a_server_logged_the_end_in_time() {
        let (tx, rx) = watch::channel(Heard::Waiting);
        tx.send_replace(Heard::Logged);
        assert_eq!(sync_needed(rx).await, Durability::Plain);

        let (_tx, rx) = watch::channel(Heard::Alone);
        assert_eq!(sync_needed(rx).await, Durability::Durable);

        // Connected, and the server goes before it acknowledges.
        assert_eq!(heard_midway(Heard::Alone).await, Durability::Durable);

        // Connected, and no acknowledgement within the wait.
        let (_tx, rx) = watch::channel(Heard::Waiting);
        assert_eq!(sync_needed(rx).await, Durability::Durable);

        // Acknowledged late but within it.
        assert_eq!(heard_midway(Heard::Logged).await, Durability::Plain);
    }

    /// What [`sync_needed`] decides when a connected server is heard to be `then` halfway
    /// through the wait.
    async fn heard_midway(then: Heard) -> Durability {
        let (tx, rx) = watch::channel(Heard::Waiting);
        let waiting = tokio::spawn(sync_needed(rx));
        tokio::time::sleep(LOG_WAIT / 2).await;
        tx.send_replace(then);
        waiting.await.unwrap()
    }
}
