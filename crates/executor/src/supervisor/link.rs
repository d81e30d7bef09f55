//! The server's side of a supervisor's socket: connecting (to one it just spawned, or to one a
//! previous server left) and the hello exchange. The task per attempt that turns what the
//! supervisor says into the executor's reports is the executor's (`executor::link`).

use qm_core::AttemptId;
use std::path::Path;
use std::time::Duration;

use super::protocol::{FromSupervisor, Hello, ToSupervisor, OLDEST_ADOPTED, PROTOCOL};
use super::wire;

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

    /// The sending half, for an [`crate::executor::link::Outbox`] to write through.
    pub(crate) fn sender(&self) -> wire::Sender {
        self.tx.clone()
    }

    /// Writes `bytes` (whole lines) as they are.
    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.tx.send(bytes).await
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
    pub(crate) async fn hello(&mut self, attempt: AttemptId) -> Result<Hello, String> {
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
