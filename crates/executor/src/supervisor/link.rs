//! The server's side of a supervisor's socket: connecting (to one it just spawned, or to one a
//! previous server left), the hello exchange, and one task per attempt that turns what the
//! supervisor says into the executor's reports and carries the server's stop requests to it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::protocol::{FromSupervisor, Hello, Status, ToSupervisor, OLDEST_ADOPTED, PROTOCOL};
use super::wire;
use crate::executor::Inner;

/// How long a supervisor has to answer hello.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to a supervisor.
#[derive(Debug)]
pub(crate) struct Conn {
    rx: wire::Receiver,
    tx: wire::Sender,
}

impl Conn {
    /// Connects to the socket at `path` (the short `/proc/self/fd/...` spelling is fine).
    pub(crate) fn connect(path: &Path) -> std::io::Result<Conn> {
        // A listening Unix socket accepts into its backlog at once: this never waits on the
        // supervisor.
        let stream = std::os::unix::net::UnixStream::connect(path)?;
        let (tx, rx) = wire::split(stream)?;
        Ok(Conn { rx, tx })
    }

    /// Whether the supervisor may still read what is sent: its end is not closed, and it
    /// said nothing since (a free one says nothing until it is handed an attempt).
    pub(crate) fn idle(&mut self) -> bool {
        self.rx.idle()
    }

    pub(crate) async fn send(&mut self, msg: &ToSupervisor) -> std::io::Result<()> {
        self.send_all(std::slice::from_ref(msg)).await
    }

    /// Sends `msgs` in one write.
    pub(crate) async fn send_all(&mut self, msgs: &[ToSupervisor]) -> std::io::Result<()> {
        self.tx.send_lines(msgs).await
    }

    /// The next message; `None` when the supervisor closed the connection (or sent a line
    /// longer than any message). A line this build cannot read (a later supervisor's new
    /// message) is logged and skipped: it is no reason to give up on the attempt.
    pub(crate) async fn recv(&mut self) -> Option<FromSupervisor> {
        loop {
            let line = self.rx.recv().await.ok()??;
            match serde_json::from_slice(&line) {
                Ok(msg) => return Some(msg),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a message of a supervisor this server cannot read")
                }
            }
        }
    }

    /// Says hello for `attempt` and reads the supervisor's, within [`HELLO_TIMEOUT`]. Refuses a
    /// supervisor of a protocol this build does not adopt.
    pub(crate) async fn hello(&mut self, attempt: u64) -> Result<Hello, String> {
        self.send(&ToSupervisor::Hello {
            protocol: PROTOCOL,
            attempt,
        })
        .await
        .map_err(|e| format!("cannot write to it: {e}"))?;
        let answer = tokio::time::timeout(HELLO_TIMEOUT, self.recv())
            .await
            .map_err(|_| format!("it did not answer within {HELLO_TIMEOUT:?}"))?;
        let Some(FromSupervisor::Hello(hello)) = answer else {
            return Err("it closed the connection instead of answering".into());
        };
        if !(OLDEST_ADOPTED..=PROTOCOL).contains(&hello.protocol) {
            return Err(format!(
                "it speaks protocol {}, this server {OLDEST_ADOPTED} to {PROTOCOL}",
                hello.protocol
            ));
        }
        Ok(*hello)
    }
}

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
    attempt: u64,
    mut conn: Conn,
    first: Vec<ToSupervisor>,
    mut commands: mpsc::UnboundedReceiver<ToSupervisor>,
    role: Role,
) {
    // In one write: the supervisor reads the hello and the launch in one wakeup.
    let _ = conn.send_all(&first).await;
    // Known from the spawn or the adoption before the link runs.
    let identity = inner.identity(attempt);
    loop {
        tokio::select! {
            msg = conn.recv() => match msg {
                Some(FromSupervisor::Status(status)) => {
                    if let Status::Exited { outcome, usage, .. } = status {
                        if role == Role::Stray {
                            inner.stray_gone(attempt);
                        } else {
                            // Acknowledged once the server's log holds the exit: a server
                            // that dies before has the supervisor report it again.
                            let committed = inner.await_commit(attempt);
                            inner.finish(attempt, outcome, usage);
                            if committed.await.is_err() {
                                return;
                            }
                        }
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
                    if role == Role::Attempt {
                        inner.report(attempt, status);
                    }
                }
                Some(FromSupervisor::Hello(_) | FromSupervisor::Free) => {}
                None => {
                    inner.supervisor_gone(attempt, role).await;
                    return;
                }
            },
            Some(cmd) = commands.recv() => {
                // With whatever else is queued, in one write: a stop sent right after a go
                // reaches the supervisor with it, and is carried out before a spawn.
                let mut batch = vec![cmd];
                while let Ok(more) = commands.try_recv() {
                    batch.push(more);
                }
                if conn.send_all(&batch).await.is_err() {
                    // Its end of the connection is gone: the read side says so next.
                    continue;
                }
            }
        }
    }
}

/// After the ack of `identity`'s attempt: a supervisor of this build says `free` at once and
/// waits on the connection, which the executor keeps for its next attempt; any other answer
/// (an earlier release's supervisor closes the connection) ends the link.
async fn keep_if_free(inner: &Inner, mut conn: Conn, identity: Option<super::Identity>) {
    let Some(identity) = identity else { return };
    if let Ok(Some(FromSupervisor::Free)) = tokio::time::timeout(HELLO_TIMEOUT, conn.recv()).await {
        inner.keep_spare(conn, identity);
    }
}
