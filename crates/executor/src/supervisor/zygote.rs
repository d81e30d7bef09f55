//! The supervisor zygote: supervisors are forked from a process that is already running, not
//! executed anew. An exec of `qm` costs milliseconds of loading and relocating a large binary
//! for every attempt, on the path from a reclaim to the owner's job running; a fork of a small
//! idle process costs a fraction of one.
//!
//! The server starts `qm supervise zygote` once, with one end of a socket pair as its standard
//! input. For each attempt it sends one byte carrying the attempt's listening socket
//! (`SCM_RIGHTS`), without waiting for the answer to the one before; the zygote forks twice —
//! the middle process writes the supervisor's pid back and exits at once, so the supervisor
//! is nobody's child but init's (or a subreaper's), exactly as an exec'd one is once its
//! server goes — and the supervisor puts the listening socket on its standard input and runs
//! [`super::process::main`] as an exec'd one would.
//!
//! A supervisor whose attempt is acknowledged stays free on its server's connection for the
//! next attempt ([`super::process`]): the zygote forks only when the server has no free one.
//! The zygote exits when the server closes its end. If anything about the zygote fails, the
//! server kills it and execs the supervisor instead; nothing depends on the zygote being
//! there.
//!
//! This is the one module that forks without exec: the zygote never starts a thread (no
//! runtime, no thread pool; `main` checks), so its children get a consistent copy of it.

// One of the workspace's five unsafe sites (the others: `reap`'s `wait4`, registering a socket with tokio for
// reading only, `wire`; a v2 child entering its control group, `cgroup::enter`; the device
// program's system calls, `cgroup::bpf`): `fork` in
// a process that is provably single-threaded.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::SupervisorCommand;

/// The argument (after the supervisor command's own) that makes it a zygote.
pub const ZYGOTE_ARG: &str = "zygote";

/// How long the server waits for the zygote's answer (a fork: well under a millisecond)
/// before it gives up on it and executes supervisors instead.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// A running zygote, from the server's side. Requests are pipelined: a launch sends its
/// socket and waits for its answer without holding anything, so a batch of launches reaches
/// the zygote at once instead of one round trip after the other (the zygote serves them in
/// order, and answers in order).
#[derive(Debug)]
pub(crate) struct Zygote {
    control: UnixStream,
    child: Child,
    /// Where each request's answer goes, oldest first; the reader thread answers them.
    waiting: Arc<Mutex<VecDeque<oneshot::Sender<u32>>>>,
}

impl Zygote {
    /// Starts the zygote (the supervisor command with [`ZYGOTE_ARG`]) and the thread that
    /// reads its answers.
    pub(crate) fn start(cmd: &SupervisorCommand) -> std::io::Result<Zygote> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_write_timeout(Some(ANSWER_TIMEOUT))?;
        let answers = ours.try_clone()?;
        let child = Command::new(&cmd.program)
            .args(&cmd.args)
            .arg(ZYGOTE_ARG)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .spawn()?;
        let waiting = Arc::new(Mutex::new(VecDeque::new()));
        let reader = waiting.clone();
        let read = std::thread::Builder::new()
            .name("qm-zygote-answers".into())
            .spawn(move || read_answers(answers, &reader));
        let zygote = Zygote {
            control: ours,
            child,
            waiting,
        };
        // Dropped on failure: the zygote is killed and reaped.
        read?;
        Ok(zygote)
    }

    /// The zygote's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `listener` to the zygote, which forks a supervisor onto it; the answer is that
    /// supervisor's pid, 0 if it could not fork, or nothing (the sender dropped) if the
    /// zygote is gone.
    pub(crate) fn request(
        &self,
        listener: BorrowedFd<'_>,
    ) -> std::io::Result<oneshot::Receiver<u32>> {
        let (tx, rx) = oneshot::channel();
        // Queued before it is sent, under the lock the reader takes: its answer cannot come
        // before it is waited for, nor be taken for another's.
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.push_back(tx);
        if let Err(e) = send_fd(&self.control, listener) {
            waiting.pop_back();
            return Err(e);
        }
        Ok(rx)
    }
}

/// Answers each waiting request with the next pid the zygote writes, until it closes its end
/// (or the server shut the socket down): then every request left gets no answer.
fn read_answers(mut answers: UnixStream, waiting: &Mutex<VecDeque<oneshot::Sender<u32>>>) {
    let mut pid = [0u8; 4];
    while answers.read_exact(&mut pid).is_ok() {
        let next = waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        if let Some(tx) = next {
            let _ = tx.send(u32::from_le_bytes(pid));
        }
    }
    waiting
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // Closing our end makes it exit; a stuck one is killed. It is our child: reaped here.
        // The reader thread sees the end of the socket and stops.
        let _ = self.control.shutdown(std::net::Shutdown::Both);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `fd` over `socket` with one byte.
fn send_fd(socket: &UnixStream, fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other(
            "no room for the socket in the message",
        ));
    }
    rustix::net::sendmsg(
        socket,
        &[IoSlice::new(b"s")],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// `qm supervise zygote`: forks a supervisor for every listening socket the server sends,
/// until the server closes the control socket. Standard input must be the control socket.
pub fn main() -> i32 {
    let _ = rustix::thread::set_name(c"qm-zygote");
    let mut control = match take_control() {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("qm supervise zygote: standard input is not the server's control socket ({e}); only qm serve starts it");
            return 2;
        }
    };
    while let Some(socket) = &control {
        let listener = match receive(socket) {
            Ok(Some(fd)) => fd,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("qm supervise zygote: reading the control socket: {e}");
                return 1;
            }
        };
        if let Err(e) = fork_supervisor(&mut control, listener) {
            eprintln!("qm supervise zygote: cannot fork a supervisor: {e}");
            if let Some(socket) = &control {
                let _ = (&*socket).write_all(&0u32.to_le_bytes());
            }
        }
    }
    0
}

/// Standard input as the control socket (close-on-exec, above the standard descriptors), and
/// /dev/null as standard input again.
fn take_control() -> std::io::Result<UnixStream> {
    let fd: OwnedFd = rustix::io::fcntl_dupfd_cloexec(std::io::stdin().as_fd(), 3)?;
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    let control = UnixStream::from(fd);
    control.peer_addr()?;
    Ok(control)
}

/// The next listening socket the server sends; `None` once it closed its end.
fn receive(control: &UnixStream) -> std::io::Result<Option<OwnedFd>> {
    loop {
        match receive_one(control)? {
            Message::Closed => return Ok(None),
            Message::Socket(fd) => return Ok(Some(fd)),
            // A byte without a socket: nothing to fork for; answer so the server is not left
            // waiting.
            Message::Empty => (&*control).write_all(&0u32.to_le_bytes())?,
        }
    }
}

/// What one message on a socket carried.
enum Message {
    Socket(OwnedFd),
    Empty,
    Closed,
}

/// One message: a byte with (or without) a socket, or the end.
fn receive_one(socket: impl AsFd) -> std::io::Result<Message> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut byte)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if got.bytes == 0 {
        return Ok(Message::Closed);
    }
    let fd = ancillary.drain().find_map(|m| match m {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    Ok(fd.map_or(Message::Empty, Message::Socket))
}

/// Forks twice: the middle process answers with the supervisor's (the grandchild's) pid and
/// exits at once, reaped here, so that the zygote has no children; the server need not wait
/// for the supervisor to be scheduled before it connects (its listening socket queues the
/// connection). Both take the control socket out of `control` (neither returns to the
/// zygote's loop) and close it: the server's end sees the zygote alone.
fn fork_supervisor(control: &mut Option<UnixStream>, listener: OwnedFd) -> std::io::Result<()> {
    if threads() != Some(1) {
        return Err(std::io::Error::other(
            "the zygote has more than one thread; forking it would not be safe",
        ));
    }
    use nix::unistd::{fork, ForkResult};
    // SAFETY: this process has exactly one thread (checked above, and nothing in this module
    // starts one), so the child's copy of every lock and allocator state is consistent.
    match unsafe { fork() }.map_err(std::io::Error::from)? {
        ForkResult::Parent { child } => {
            drop(listener);
            nix::sys::wait::waitpid(child, None).map_err(std::io::Error::from)?;
            Ok(())
        }
        ForkResult::Child => {
            // SAFETY: as above; this child is single-threaded too.
            let code = match (unsafe { fork() }, control.take()) {
                (Ok(ForkResult::Child), socket) => {
                    drop(socket);
                    supervise(listener)
                }
                (Ok(ForkResult::Parent { child }), Some(socket)) => {
                    let pid = child.as_raw() as u32;
                    i32::from((&socket).write_all(&pid.to_le_bytes()).is_err())
                }
                (Err(_), Some(socket)) => {
                    let _ = (&socket).write_all(&0u32.to_le_bytes());
                    1
                }
                (_, None) => 1,
            };
            std::process::exit(code)
        }
    }
}

/// In the supervisor: become an exec'd supervisor.
fn supervise(listener: OwnedFd) -> i32 {
    if let Err(e) = nix::unistd::dup2_stdin(&listener) {
        eprintln!("qm supervise: cannot take the attempt's socket: {e}");
        return 2;
    }
    drop(listener);
    super::process::main()
}

/// The number of threads of this process (`/proc/self/status`).
fn threads() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}
