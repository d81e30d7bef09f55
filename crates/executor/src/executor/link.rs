//! One task per attempt on the server's side of its supervisor's socket
//! ([`crate::supervisor::link`]): it turns what the supervisor says into the executor's reports.
//! What the server tells the supervisor (go, stop) goes through the attempt's [`Outbox`]:
//! written to the socket from the caller's thread when it can be, else by the task.

use qm_core::AttemptId;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::Inner;
use crate::supervisor::link::{Conn, HELLO_TIMEOUT};
use crate::supervisor::protocol::{FromSupervisor, Status, ToSupervisor};
use crate::supervisor::wire;
use crate::supervisor::Identity;

/// What a link does with the attempt's reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// An attempt of the executor's: its reports are the executor's events.
    Attempt,
    /// A supervisor the log does not know: it was asked to stop; its exit is acknowledged and
    /// its instances freed, nothing is reported.
    Stray,
}

/// Serves one supervisor until it reported its exit (acknowledged) or went away.
pub(crate) async fn run(
    inner: Arc<Inner>,
    attempt: AttemptId,
    mut conn: Conn,
    first: Vec<ToSupervisor>,
    outbox: Arc<Outbox>,
    role: Role,
) {
    // In one write: the supervisor reads the hello and the launch in one wakeup.
    let _ = conn.send_all(&first).await;
    outbox.open(conn.sender());
    // Known from the spawn or the adoption before the link runs.
    let identity = inner.identity(attempt);
    loop {
        tokio::select! {
            msg = conn.recv() => match msg {
                Some(FromSupervisor::Status(Status::Exited { outcome, usage, .. })) => {
                    if role == Role::Stray {
                        inner.stray_gone(attempt);
                    } else {
                        // Acknowledged once the server's log holds the exit: a server that
                        // dies before has the supervisor report it again.
                        let committed = inner.await_commit(attempt);
                        inner.finish(attempt, outcome, usage);
                        if committed.await.is_err() {
                            outbox.close();
                            return;
                        }
                    }
                    // From here on this task is the connection's only writer.
                    outbox.close();
                    // Harmless if it is gone already; it exits once told.
                    let told = conn.send(&ToSupervisor::Ack).await.is_ok();
                    if role == Role::Attempt {
                        inner.ack_written();
                        if told {
                            keep_if_free(&inner, conn, identity).await;
                        }
                    }
                    return;
                }
                Some(FromSupervisor::Status(status)) => {
                    if role == Role::Attempt {
                        inner.report(attempt, status);
                    }
                }
                Some(FromSupervisor::Hello(_) | FromSupervisor::Free) => {}
                None => {
                    outbox.close();
                    inner.supervisor_gone(attempt, role).await;
                    return;
                }
            },
            () = outbox.wake.notified() => {
                // In one write, with whatever queued behind it: a stop told right after a go
                // reaches the supervisor with it, and is carried out before a spawn.
                loop {
                    let queued = outbox.take_queued();
                    // An error: its end of the connection is gone, and the read side says so.
                    if queued.is_empty() || conn.send_raw(&queued).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
}

/// After the ack of `identity`'s attempt: a supervisor of this build says `free` at once and
/// waits on the connection, which the executor keeps for its next attempt; any other answer
/// (an earlier release's supervisor closes the connection) ends the link.
async fn keep_if_free(inner: &Inner, mut conn: Conn, identity: Option<Identity>) {
    let Some(identity) = identity else { return };
    if let Ok(Some(FromSupervisor::Free)) = tokio::time::timeout(HELLO_TIMEOUT, conn.recv()).await {
        inner.keep_spare(conn, identity);
    }
}

/// What the server tells one attempt's supervisor, in order. A go or a stop is written to the
/// socket by the thread that decides it (the server's driver, once the batch that decided it
/// is durable): handing it to the link's task cost a wakeup of a runtime thread on the path of
/// every reclaim, up to a millisecond and a half on a busy 2-core machine. What cannot be
/// written at once (the link has not said its first lines yet, or the socket's buffer is
/// full) is queued for the task, and whatever is told meanwhile queues behind it.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    out: Mutex<Out>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct Out {
    /// The connection, once the link said its first lines.
    direct: Option<wire::Sender>,
    /// Whole lines (or the rest of one) for the task to write, before anything told later.
    queued: Vec<u8>,
    /// Whether the task has lines to write (queued, or taken and being written).
    behind: bool,
    /// The link is done: what is told now goes nowhere (the connection may serve another
    /// attempt by now).
    closed: bool,
}

impl Outbox {
    /// Tells the supervisor `msg`: at once if nothing waits before it and the socket has
    /// room, else through the link's task. Never waits.
    pub(crate) fn tell(&self, msg: &ToSupervisor) {
        let line = match wire::lines(std::slice::from_ref(msg)) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a message to a supervisor");
                return;
            }
        };
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        if out.closed {
            return;
        }
        let sent = match (&out.direct, out.behind) {
            (Some(direct), false) => match direct.try_send(&line) {
                Ok(n) => n,
                // Its end is gone: the link's read side says so.
                Err(_) => return,
            },
            _ => 0,
        };
        if sent < line.len() {
            out.queued.extend_from_slice(&line[sent..]);
            out.behind = true;
            drop(out);
            self.wake.notify_one();
        }
    }

    /// The link said its first lines: from now on a message may go straight to `sender`.
    fn open(&self, sender: wire::Sender) {
        self.out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .direct = Some(sender);
    }

    /// The lines queued for the task; empty (and the task no longer behind) when none are.
    fn take_queued(&self) -> Vec<u8> {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let queued = std::mem::take(&mut out.queued);
        out.behind = !queued.is_empty();
        queued
    }

    /// The link is done with the connection: nothing more is written to it through this.
    fn close(&self) {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        out.closed = true;
        out.direct = None;
        out.queued.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn line(msg: ToSupervisor) -> Vec<u8> {
        wire::lines(&[msg]).unwrap()
    }

    /// Before the link said its first lines, and while anything waits for its task, a message
    /// queues in order; otherwise it goes straight to the socket; once closed, nowhere.
    #[tokio::test]
    async fn an_outbox_queues_in_order_writes_at_once_when_free_and_nothing_once_closed() {
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        let (sender, _receiver) = wire::split(ours).unwrap();
        let outbox = Outbox::default();

        outbox.tell(&ToSupervisor::Go);
        outbox.open(sender);
        outbox.tell(&ToSupervisor::Stop);
        let mut both = line(ToSupervisor::Go);
        both.extend(line(ToSupervisor::Stop));
        assert_eq!(
            outbox.take_queued(),
            both,
            "queued behind the first, in order"
        );
        assert!(outbox.take_queued().is_empty());

        outbox.tell(&ToSupervisor::Stop);
        let mut buf = [0u8; 64];
        let n = theirs.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], line(ToSupervisor::Stop), "written at once");

        outbox.close();
        outbox.tell(&ToSupervisor::Go);
        assert!(outbox.take_queued().is_empty());
        let err = theirs.read(&mut buf).unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::WouldBlock,
            "nothing once closed"
        );
    }
}
