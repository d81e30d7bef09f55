//! One task per attempt on the server's side of its supervisor's socket
//! ([`crate::supervisor::link`]): it turns what the supervisor says into the executor's reports
//! and carries the server's stop requests to it.

use qm_core::AttemptId;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::Inner;
use crate::supervisor::link::{Conn, HELLO_TIMEOUT};
use crate::supervisor::protocol::{FromSupervisor, Status, ToSupervisor};
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
async fn keep_if_free(inner: &Inner, mut conn: Conn, identity: Option<Identity>) {
    let Some(identity) = identity else { return };
    if let Ok(Some(FromSupervisor::Free)) = tokio::time::timeout(HELLO_TIMEOUT, conn.recv()).await {
        inner.keep_spare(conn, identity);
    }
}
