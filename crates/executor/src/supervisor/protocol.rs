//! What the server and an attempt's supervisor say to each other over the supervisor's Unix
//! socket: one JSON object per line, versioned by [`PROTOCOL`].
//!
//! The server connects and says `hello` with the protocol it speaks and the attempt it
//! expects; the supervisor answers `hello` with its own protocol, the attempt it runs, its
//! [`Identity`], where the attempt is placed and its [`Status`] now. A server that spawned the
//! supervisor then sends `launch`. From then on the supervisor reports each change of status
//! (`starting`, `running`, `exited`) and the server may send `stop` (carry out SIGTERM, grace,
//! SIGKILL) and, once it holds an `exited`, `ack`. Then the supervisor renames its socket to
//! `free-<pid>.sock` and says `free`: it waits on that connection for the next attempt, which
//! the server hands it as a spawned one's (`hello`, `launch`) once it renamed the socket to the
//! attempt's; a server that closes the connection instead (or one that never reads `free`)
//! makes it remove its socket and exit. A reused supervisor costs no fork, no new socket file
//! and no connection. A launch may come with `hold`, sent while the server's log is being
//! written: the supervisor prepares and starts the job only at `go` (and says `held` in its
//! hello meanwhile, so that a server adopting it after a crash sends `go`, or `stop` if its
//! log never held the start). A connection that breaks is no loss: the next server connects
//! again and is told the status as it is then.
//!
//! Compatibility: a server adopts supervisors of every protocol version from
//! [`OLDEST_ADOPTED`] to [`PROTOCOL`]; a later version may add fields (with defaults) and
//! message types, never change the meaning of one. `tests/executor/protocol.rs` reads a
//! transcript of each version (`tests/fixtures/supervisor-protocol-<n>.jsonl`) that this build
//! must still read.

use qm_core::AttemptId;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Identity;
use crate::container::Runtime;
use crate::isolation::JobUids;
use crate::{Exit, LaunchSpec};

/// The protocol this build speaks.
pub const PROTOCOL: u32 = 1;

/// The oldest protocol whose supervisors this build adopts.
pub const OLDEST_ADOPTED: u32 = 1;

/// The longest line either side accepts: a launch with a large payload fits many times over;
/// anything longer is a bug or an attack, and the connection is dropped.
pub const MAX_LINE: usize = 4 << 20;

/// What the server says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToSupervisor {
    /// The first line of every connection.
    Hello {
        /// The server's protocol.
        protocol: u32,
        /// The attempt the server expects to find.
        attempt: AttemptId,
    },
    /// What to run: only on the first connection, from the server that spawned it.
    Launch(Box<Launch>),
    /// Stop the attempt: SIGTERM, the grace period, SIGKILL. Idempotent.
    Stop,
    /// The server holds the `exited` report: the supervisor may go.
    Ack,
    /// Start a launch that came with `hold`: the server's log now holds its start.
    Go,
}

/// What a supervisor says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromSupervisor {
    /// The answer to the server's hello.
    Hello(Box<Hello>),
    /// A change of status.
    Status(Status),
    /// After `ack`: its socket is `free-<pid>.sock` now, and it waits on this connection for
    /// the next attempt's `hello` and `launch`.
    Free,
}

/// A supervisor introducing itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Its protocol.
    pub protocol: u32,
    /// The attempt it runs.
    pub attempt: AttemptId,
    /// Who it is.
    pub identity: Identity,
    /// Where its attempt runs; `None` before its launch arrived.
    pub placement: Option<Placement>,
    /// Its attempt's status now.
    pub status: Status,
    /// Its launch came with `hold` and no `go` yet: nothing of it has run.
    #[serde(default)]
    pub held: bool,
}

/// Where an attempt runs: what the server's inventory must hold for it when it adopts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The API job id.
    pub job_id: String,
    /// The attempt's number within the job.
    pub attempt_number: u32,
    /// The instance type.
    pub instance_type: String,
    /// The server's instance ids, one per host.
    pub instances: Vec<usize>,
    /// The GPUs of each host, in host order.
    pub hosts: Vec<Vec<u32>>,
    /// The uid it runs as, when attempts run apart from the server.
    pub uid: Option<u32>,
    /// The control group of each host, in host order, when attempts are confined: named by
    /// the server, which knows which groups live attempts run in ([`crate::cgroup`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// An attempt's status as its supervisor knows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// Launched, preparing its directories.
    #[default]
    Preparing,
    /// Downloading its inputs.
    Starting {
        /// What it waits for.
        reason: String,
    },
    /// Every process is spawned.
    Running(Running),
    /// Every process is gone; the outcome is on disk.
    Exited {
        /// How it ended.
        outcome: Exit,
        /// When (epoch ms).
        at_ms: u64,
        /// What it used (absent from supervisors of earlier releases, and where it never
        /// started).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<crate::Usage>,
    },
}

/// An attempt whose processes are all spawned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// The process (group) id of each host.
    pub pids: Vec<u32>,
    /// The GPUs of all hosts, in host order.
    pub gpus: Vec<u32>,
    /// The attempt's log directory.
    pub log_dir: PathBuf,
    /// The checkpoint directory the server scans.
    pub checkpoint_dir: PathBuf,
    /// The newest modification time under it when the attempt started (ns since the epoch):
    /// only newer ones count as this attempt's checkpoints.
    pub checkpoint_baseline_ns: u64,
    /// When the processes were spawned (epoch ms).
    pub at_ms: u64,
}

/// Everything a supervisor needs to run an attempt: it reads no config of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The attempt.
    pub spec: LaunchSpec,
    /// Where it runs.
    pub placement: Placement,
    /// How.
    pub settings: Settings,
    /// Prepare it (directories, config files) but start nothing before `go`: the server
    /// sends the launch while it makes the decision to start it durable. A supervisor held
    /// and never told to go writes no outcome (nothing ran).
    #[serde(default)]
    pub hold: bool,
    /// The server knows every group of the placement to hold this launch's limits already:
    /// the last attempt started in each, under the same share, ran, and attempts cannot write
    /// their groups' files (they run under uids of their own). The supervisor then reads none
    /// of them back (five files a host, on every attempt) and writes none; a group it has to
    /// make is limited all the same. A supervisor of an earlier release ignores it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub limits_kept: bool,
}

/// The executor's settings an attempt runs under, as they were when it was launched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The executor's data directory (canonical).
    pub data_dir: PathBuf,
    /// Between SIGTERM and SIGKILL, in milliseconds.
    pub stop_grace_ms: u64,
    /// The uid range attempts run under, when they run apart from the server.
    pub isolation: Option<JobUids>,
    /// Whether each process gets a mount namespace with its job directory at `/opt/ml`.
    pub opt_ml: bool,
    /// Host processes or containers.
    pub runtime: Runtime,
    /// Where channels, checkpoints and models are transferred.
    pub storage: Option<qm_storage::Settings>,
    /// How often changed checkpoints are uploaded, in milliseconds.
    pub checkpoint_sync_ms: u64,
    /// The control groups its hosts run in, and what each may use (`None`: unconfined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<crate::cgroup::Confinement>,
    /// How often the supervisor looks whether its socket (and `server_dir`) is still there, in
    /// milliseconds: a data dir deleted under it (a test's, an admin's) means no server will
    /// ever ask for the attempt, which is stopped, and the supervisor goes.
    #[serde(default = "default_orphan_check_ms")]
    pub orphan_check_ms: u64,
    /// The server's own data dir, where job directories live elsewhere (`[executor]
    /// work_dir`, `/var/lib/qm-jobs/<key>`): once it is gone no server will ask for the
    /// attempt either, though its socket is still there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_dir: Option<PathBuf>,
}

/// [`Settings::orphan_check_ms`] unless a launch says otherwise: a minute.
pub const DEFAULT_ORPHAN_CHECK: Duration = Duration::from_secs(60);

fn default_orphan_check_ms() -> u64 {
    DEFAULT_ORPHAN_CHECK.as_millis() as u64
}

impl Settings {
    /// [`Settings::orphan_check_ms`], at least 10 ms.
    pub fn orphan_check(&self) -> Duration {
        Duration::from_millis(self.orphan_check_ms.max(10))
    }
}
