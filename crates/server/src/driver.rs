//! The driver: the one task that owns the state. It takes requests and executor reports in
//! batches, applies them, runs the scheduling pass once per batch, commits the batch to the
//! log, and only then answers the clients and carries out the decisions. Group commit is what
//! makes durability cheap: one fsync covers every request that arrived while the last one ran.
//!
//! Recovery is the same code: [`recover`] replays the log through [`State`] — this build's own
//! batches are decided again and must come out exactly as logged (the determinism check);
//! another build's are applied as they were decided, its logged decisions imposed in place
//! of this build's rules — and [`Driver::reconcile`] deals with the attempts that were
//! running when the previous server died.

use std::collections::HashMap;
use std::path::PathBuf;

use qm_api::ApiError;
use qm_core::{AttemptId, Effect};
use qm_executor::{ExecEvent, Exit, LaunchSpec};
use qm_store::{Batch, Log, SqliteLog, Writer};
use tokio::sync::{mpsc, oneshot};

use crate::archive::{Archive, ArchivedJob};
use crate::clock::now_ms;
use crate::command::{Command, Decision, ExitRecord, DECISIONS_FORMAT};
use crate::error::ServerError;
use crate::exec::{Execute, Executor};
pub use crate::request::Cadence;
use crate::request::{Answer, Query, Request};
use crate::snapshot::{decode_image, encode_image, StateImage, SNAPSHOT_FORMAT};
use crate::state::{Action, State};

/// Most requests and reports applied in one batch (one transaction).
pub const MAX_BATCH: usize = 2048;

/// Where a response goes once its batch is durable.
pub type Reply = oneshot::Sender<Result<Answer, ApiError>>;

/// A request with the channel its answer goes back on.
pub struct Envelope {
    /// What was asked.
    pub request: Request,
    /// Where the answer (or error) goes once the batch is durable.
    pub reply: Reply,
}

/// What [`recover`] found in the log.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Batches replayed.
    pub batches: u64,
    /// Commands in them.
    pub commands: u64,
    /// Batches this very build wrote and now decides differently: the core lost its
    /// determinism, and the server must not run on a state that differs from what it told.
    pub diverged_own: u64,
    /// Batches another build wrote, applied as they were decided (never decided again).
    pub applied_other: u64,
    /// Commands of another build that this build refuses (an upgrade tightened a check):
    /// skipped with a warning.
    pub refused_other: u64,
    /// The builds that wrote the log other than this one, oldest first.
    pub other_writers: Vec<String>,
    /// The batch the snapshot recovery started from covers, if there was one.
    pub snapshot: Option<u64>,
}

/// Rebuilds the state from the log, as the build `running` (this one). Batches of this build
/// are decided again and must come out exactly as logged; batches of another build are
/// applied as logged — their commands, and the decisions that build took imposed where this
/// build's rules would decide — so the state is what the clients were told, whatever rules
/// changed since. A logged decision that does not fit the state stops the recovery with an
/// error naming its batch. Ends by handing every lane to this build's first pass and
/// checking the core's invariants.
pub fn recover(
    state: &mut State,
    log: &dyn Log,
    running: &Writer,
) -> Result<Recovered, ServerError> {
    let mut r = Recovered::default();
    let after = load_snapshot(state, log, running, &mut r)?;
    let mut replay = Replay {
        // A snapshot another build wrote holds what that build's rules worked out.
        foreign_snapshot: !r.other_writers.is_empty(),
        taken_over: false,
        // A build that cannot name its source (no git, or uncommitted changes) may differ
        // from a build stamped the same: its batches are never held to an exact replay.
        identified: !running.version.ends_with("+unknown") && !running.version.ends_with("-dirty"),
        running,
        state,
        r,
    };
    log.replay(&mut |b| {
        if b.seq <= after {
            return Ok(());
        }
        replay.batch(&b)
    })?;
    let Replay {
        state,
        r,
        foreign_snapshot,
        taken_over,
        ..
    } = replay;
    // This build's rules take over from here: after another build's snapshot or batches, its
    // first pass looks at every lane.
    // (The fair-sharing rules below are the other half of [`take_over`].)
    if (foreign_snapshot || r.applied_other > 0) && !taken_over {
        state.core.reexamine();
    }
    sync_fair_rules(state);
    state.core.check_invariants().map_err(|e| {
        ServerError::Recovery(format!(
            "the state recovered from the log is inconsistent ({e}); keep the data dir and report it"
        ))
    })?;
    Ok(r)
}

/// A recovery's replay of the batches after the snapshot, one at a time.
struct Replay<'a> {
    state: &'a mut State,
    running: &'a Writer,
    r: Recovered,
    foreign_snapshot: bool,
    taken_over: bool,
    identified: bool,
}

impl Replay<'_> {
    /// Replays batch `b`: this build's own decided again, another build's applied as logged.
    fn batch(&mut self, b: &Batch) -> Result<(), String> {
        let same = b.writer.version == self.running.version;
        let own = self.identified && same;
        if !same && self.r.other_writers.last() != Some(&b.writer.version) {
            self.r.other_writers.push(b.writer.version.clone());
        }
        let commands: Vec<Command> = serde_json::from_str(&b.commands).map_err(|e| {
            format!(
                "cannot decode the commands qm {} logged: {e}",
                b.writer.version
            )
        })?;
        let n = commands.len() as u64;
        let decisions = logged_decisions(b)?;
        if own && (self.foreign_snapshot || self.r.applied_other > 0) && !self.taken_over {
            // This build's first batch after another build's: it was decided after the
            // start handed every lane to this build's rules, and is replayed so.
            take_over(self.state);
            self.taken_over = true;
        }
        let outcome = if own {
            self.state.apply_batch(b.at_ms, commands)
        } else {
            self.apply_as_logged(b, commands, &decisions)?
        };
        self.check_refusals(b, own, &outcome)?;
        let same = outcome.decisions.len() == decisions.len()
            && decisions
                .iter()
                .zip(&outcome.decisions)
                .all(|(l, e)| *l == Decision::from(e));
        if own && !same {
            self.r.diverged_own += 1;
            tracing::error!(batch = b.seq, logged = %b.decisions,
                "replay decided differently than this very build logged");
        }
        self.r.batches += 1;
        self.r.commands += n;
        Ok(())
    }

    /// Another build's batch: its commands applied, its decisions imposed.
    fn apply_as_logged(
        &mut self,
        b: &Batch,
        commands: Vec<Command>,
        decisions: &[Decision],
    ) -> Result<crate::state::BatchOutcome, String> {
        let applied = decisions
            .iter()
            .map(Effect::try_from)
            .collect::<Result<Vec<_>, _>>()
            .and_then(|effects| self.state.apply_logged_batch(b.at_ms, commands, effects))
            .map_err(|e| {
                format!(
                    "batch {} that qm {} logged cannot be applied: {e}; keep the data dir as it is and report it",
                    b.seq, b.writer.version
                )
            })?;
        self.r.applied_other += 1;
        Ok(applied)
    }

    /// A logged command was accepted when it was applied, and applying it again to the same
    /// state gives the same result: a refusal means another build's rules (or, for this
    /// build's own batch, another configuration).
    fn check_refusals(
        &mut self,
        b: &Batch,
        own: bool,
        outcome: &crate::state::BatchOutcome,
    ) -> Result<(), String> {
        for e in outcome.results.iter().filter_map(|r| r.as_ref().err()) {
            if own {
                return Err(format!(
                    "a logged command was refused on replay ({e}); the log was written by another configuration of qm"
                ));
            }
            self.r.refused_other += 1;
            tracing::warn!(batch = b.seq, written_by = %b.writer.version, error = %e,
                "a command another build accepted is refused by this one; skipped");
        }
        Ok(())
    }
}

/// Hands the state another build left to this build's rules: every lane is looked at by the
/// next pass, under the fair-sharing rules the records say.
fn take_over(state: &mut State) {
    state.core.reexamine();
    sync_fair_rules(state);
}

/// The rules a data dir's records say (its queues' fair sharing and groups), whatever build
/// wrote it: a no-op when this build wrote it all.
fn sync_fair_rules(state: &mut State) {
    if let Err(e) = state.sync_all_fair_rules() {
        tracing::warn!(error = %e, "the queues' fair-sharing rules could not be derived from their records");
    }
}

/// Loads the latest snapshot that can be loaded into `state` (the store keeps the one before
/// the latest, with its batches, for this); returns the batch it covers (0 for none).
fn load_snapshot(
    state: &mut State,
    log: &dyn Log,
    running: &Writer,
    r: &mut Recovered,
) -> Result<u64, ServerError> {
    let mut first_error = None;
    for snap in log.snapshots()? {
        let loaded = decode_image(snap.writer.format, &snap.writer.version, &snap.state)
            .and_then(|image| State::from_image(state.arns.clone(), state.core.policy(), image));
        match loaded {
            Ok(s) => {
                *state = s;
                r.snapshot = Some(snap.seq);
                if snap.writer.version != running.version {
                    r.other_writers.push(snap.writer.version);
                }
                return Ok(snap.seq);
            }
            Err(e) => {
                tracing::error!(seq = snap.seq, error = %e, "a snapshot cannot be loaded; trying the one before it");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(0),
    }
}

/// The decisions batch `b` logged, read in its writer's encoding (format 0 is schema 1's
/// `Debug` text, [`crate::legacy`]).
fn logged_decisions(b: &Batch) -> Result<Vec<Decision>, String> {
    match b.writer.format {
        0 => crate::legacy::decisions(&b.decisions).map_err(|e| {
            format!(
                "batch {}: a decision qm {} logged cannot be read ({e}); keep the data dir as it is and report it",
                b.seq, b.writer.version
            )
        }),
        DECISIONS_FORMAT => serde_json::from_str(&b.decisions).map_err(|e| {
            format!(
                "batch {}: cannot decode the decisions qm {} logged: {e}",
                b.seq, b.writer.version
            )
        }),
        other => Err(format!(
            "qm {} logged its decisions in format {other}, this qm reads formats 0 to {DECISIONS_FORMAT}: run a qm at least as new as the one that wrote the data dir",
            b.writer.version
        )),
    }
}

/// Writes a snapshot of `state` as the state after the last batch of `log`, on this thread.
pub fn write_snapshot(state: &State, log: &mut dyn Log) -> Result<(), ServerError> {
    write_image(&state.image(), log.last_seq(), state.now, log)
}

fn write_image(
    image: &StateImage,
    seq: u64,
    at_ms: i64,
    log: &mut dyn Log,
) -> Result<(), ServerError> {
    let started = std::time::Instant::now();
    let text = encode_image(image)?;
    log.write_snapshot(seq, at_ms, SNAPSHOT_FORMAT, &text)?;
    tracing::info!(
        seq,
        jobs = image.jobs.len(),
        bytes = text.len(),
        ms = started.elapsed().as_millis() as u64,
        "snapshot written; the batches it covers are dropped"
    );
    Ok(())
}

/// Writes snapshots on a thread and a store connection of their own, so that encoding a large
/// state never stalls the driver, which only takes the image (a copy of the records). One
/// snapshot at a time; SQLite serializes its transaction with the driver's appends.
pub struct Snapshotter<L = SqliteLog> {
    idle: Option<L>,
    busy: Option<std::thread::JoinHandle<(L, Result<(), ServerError>)>>,
}

impl<L: Log + Send + 'static> Snapshotter<L> {
    /// Over a second connection to the driver's store.
    pub fn new(log: L) -> Self {
        Snapshotter {
            idle: Some(log),
            busy: None,
        }
    }

    /// Starts writing `image` as the state after batch `seq`; false while the previous
    /// snapshot is still being written (the caller tries again later).
    pub fn start(&mut self, image: StateImage, seq: u64, at_ms: i64) -> bool {
        self.reap(false);
        let Some(mut log) = self.idle.take() else {
            return false;
        };
        let spawned = std::thread::Builder::new()
            .name("qm-snapshot".into())
            .spawn(move || {
                let result = write_image(&image, seq, at_ms, &mut log);
                (log, result)
            });
        match spawned {
            Ok(handle) => self.busy = Some(handle),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the snapshot thread; no more snapshots until a restart")
            }
        }
        true
    }

    /// Whether a snapshot can start now (the previous one, if any, is written).
    pub fn idle(&mut self) -> bool {
        self.reap(false);
        self.idle.is_some()
    }

    /// Collects a finished snapshot, or with `wait` the one in flight.
    pub fn reap(&mut self, wait: bool) {
        if self
            .busy
            .as_ref()
            .is_some_and(|h| !wait && !h.is_finished())
        {
            return;
        }
        let Some(handle) = self.busy.take() else {
            return;
        };
        match handle.join() {
            Ok((log, result)) => {
                // A failed snapshot loses nothing: the batches stay until one covers them.
                if let Err(e) = result {
                    tracing::error!(error = %e, "writing a snapshot failed; the log keeps every batch");
                }
                self.idle = Some(log);
            }
            Err(_) => {
                tracing::error!("the snapshot thread panicked; no more snapshots until a restart")
            }
        }
    }
}

/// Encodes the decisions of a batch for the log.
pub fn encode_decisions(effects: &[Effect]) -> Result<String, ServerError> {
    let decisions: Vec<Decision> = effects.iter().map(Decision::from).collect();
    serde_json::to_string(&decisions)
        .map_err(|e| ServerError::Recovery(format!("encoding decisions: {e}")))
}

/// The clock side of `jobStateTimeLimitActions`: head jobs seen blocked with a reason an
/// action names, and since when. Not logged (the resulting terminations are); a restart starts
/// the clocks again.
#[derive(Debug, Default)]
pub struct TimeLimits {
    blocked_since: HashMap<String, (String, i64)>,
}

impl TimeLimits {
    /// The terminations due at `now`, given the current candidates `(job id, reason code,
    /// max seconds)` of [`State::time_limit_candidates`]: a job's clock starts when it is first
    /// seen blocked for that reason and restarts when the reason changes; a job no longer
    /// blocked is forgotten.
    pub fn due(&mut self, candidates: Vec<(String, String, i64)>, now: i64) -> Vec<Command> {
        let mut keep = HashMap::new();
        let mut out = Vec::new();
        for (job, code, max_seconds) in candidates {
            let since = match self.blocked_since.get(&job) {
                Some((c, since)) if *c == code => *since,
                _ => now,
            };
            if now - since >= max_seconds * 1000 {
                out.push(Command::TimeLimitAction {
                    job_id: job,
                    reason: code,
                });
            } else {
                keep.insert(job, (code, since));
            }
        }
        self.blocked_since = keep;
        out
    }
}

/// What the driver hears from: the HTTP handlers' requests and the executor's reports (and
/// a sender of the latter, to report launch failures the same way).
pub struct Channels {
    /// Requests, with where their answers go.
    pub requests: mpsc::Receiver<Envelope>,
    /// Executor reports.
    pub events: mpsc::UnboundedReceiver<ExecEvent>,
    /// Another sender of executor reports.
    pub events_tx: mpsc::UnboundedSender<ExecEvent>,
}

/// The running driver, over a store `L` and an executor `E` (the server's: SQLite and the
/// local or Slurm executor; tests put fakes there).
pub struct Driver<L = SqliteLog, E = Executor> {
    /// The state.
    pub state: State,
    log: L,
    executor: E,
    requests: mpsc::Receiver<Envelope>,
    events: mpsc::UnboundedReceiver<ExecEvent>,
    /// To report launch failures as exits, through the same path as real exits.
    events_tx: mpsc::UnboundedSender<ExecEvent>,
    /// Its periodic work (`since_snapshot` aside, which counts here); a reload replaces it.
    cadence: Cadence,
    /// When share heads began to be blocked for a time-limited reason.
    time_limits: TimeLimits,
    /// Commands logged since the last snapshot began.
    since_snapshot: u64,
    /// Jobs in the last snapshot begun.
    snapshot_jobs: u64,
    snapshots: Snapshotter<L>,
    /// Where retired jobs go.
    archive: Archive,
    /// When retirement was last looked for (epoch ms).
    retire_checked: i64,
    /// Directories of jobs whose retirement is in the batch being committed.
    retired_dirs: Vec<PathBuf>,
    /// Where attempts get their job's role, if they do.
    credentials: Option<std::sync::Arc<crate::credentials::Broker>>,
    /// Scheduling pass durations, for `/metrics` (measured here: not part of the state).
    pass_seconds: prometheus_client::metrics::histogram::Histogram,
}

/// Most jobs (and most audit entries) retired in one batch: retirement catches up over
/// several ticks rather than stalling the driver after a long downtime.
const RETIRE_MAX: usize = 10_000;

enum Item {
    Request(Envelope),
    Event(ExecEvent),
    /// Commands the clock produced (time-limit actions, retirement, and `Wake` when the core's
    /// `next_wakeup` is due). A tick that produces none runs no pass and logs nothing.
    Timed(Vec<Command>),
}

impl Item {
    /// Whether it changes the state (anything but a read).
    fn writes(&self) -> bool {
        match self {
            Item::Request(e) => !matches!(e.request, Request::Query(_)),
            Item::Event(_) | Item::Timed(_) => true,
        }
    }
}

/// A batch's items sorted out ([`Driver::gather`]): `repliers[i]` is where `commands[i]`'s
/// answer goes, if it came from a client.
#[derive(Default)]
struct Gathered {
    commands: Vec<Command>,
    repliers: Vec<Option<Reply>>,
    queries: Vec<(Query, Reply)>,
}

impl<L: Log + Send + 'static, E: Execute> Driver<L, E> {
    /// A driver over a recovered state.
    pub fn new(
        state: State,
        log: L,
        executor: E,
        channels: Channels,
        snapshots: Snapshotter<L>,
        archive_dir: PathBuf,
        cadence: Cadence,
    ) -> Self {
        let Channels {
            requests,
            events,
            events_tx,
        } = channels;
        Driver {
            state,
            log,
            executor,
            requests,
            events,
            events_tx,
            cadence,
            time_limits: TimeLimits::default(),
            since_snapshot: cadence.since_snapshot,
            snapshot_jobs: 0,
            snapshots,
            archive: Archive::new(&archive_dir),
            retire_checked: 0,
            retired_dirs: Vec::new(),
            credentials: None,
            pass_seconds: crate::metrics::latency_histogram(),
        }
    }

    /// Answers a read: the state's answer, but for `/metrics`, whose registry also carries
    /// what the driver measures.
    fn answer(&self, q: &Query, now: i64) -> Result<Answer, ApiError> {
        match q {
            Query::Metrics => Ok(Answer::Metrics(Box::new(crate::metrics::registry_of(
                &self.state,
                &self.pass_seconds,
            )))),
            q => self.state.answer(q, now),
        }
    }

    /// Gives every attempt launched from now on its job's role, from `broker`.
    pub fn with_credentials(
        mut self,
        broker: Option<std::sync::Arc<crate::credentials::Broker>>,
    ) -> Self {
        self.credentials = broker;
        self
    }

    /// Takes a reload's settings (`crate::reload`); its audit entry is logged in the batch.
    fn reload(&mut self, r: &crate::request::Reloaded) {
        self.cadence = r.cadence;
        // Look for retirements under the new retention at the next tick.
        self.retire_checked = 0;
        self.state.admission = Some(r.admission.clone());
    }

    /// The jobs and audit entries due for retirement, archived durably, as the commands that
    /// retire them; none while it is not time to look, or when archiving failed (they stay,
    /// and are tried again).
    fn retire_commands(&mut self, now: i64) -> Vec<Command> {
        let retention = self.cadence.retention.as_millis() as i64;
        let every = (retention / 10).clamp(self.cadence.tick.as_millis() as i64, 60_000);
        if now - self.retire_checked < every {
            return Vec::new();
        }
        self.retire_checked = now;
        let mut out: Vec<Command> = self.retire_jobs(now - retention).into_iter().collect();
        out.extend(self.retire_audit());
        out
    }

    /// The audit entries beyond `[retention] audit_entries`, archived.
    fn retire_audit(&mut self) -> Option<Command> {
        let due = self
            .state
            .audit_retirable(self.cadence.audit_entries, RETIRE_MAX);
        let upto = due.last()?.seq + 1;
        if let Err(e) = self.archive.append_audit(&due) {
            tracing::error!(error = %e, entries = due.len(), "cannot write the audit archive; the entries stay until it can be written");
            return None;
        }
        Some(Command::RetireAudit { upto })
    }

    /// The finished jobs that stopped at or before `before`, archived.
    fn retire_jobs(&mut self, before: i64) -> Option<Command> {
        let due = self.state.retirable(before, RETIRE_MAX);
        if due.is_empty() {
            return None;
        }
        let archived: Vec<ArchivedJob> = due.iter().map(|r| ArchivedJob::of(r)).collect();
        if let Err(e) = self.archive.append(&archived) {
            tracing::error!(error = %e, jobs = archived.len(), "cannot write the archive; the finished jobs stay until it can be written");
            return None;
        }
        let job_ids: Vec<String> = archived.into_iter().map(|a| a.job_id).collect();
        if self.cadence.delete_job_dirs {
            // Ids are the server's own UUIDs; anything that could leave jobs/ is never deleted.
            self.retired_dirs = job_ids
                .iter()
                .filter(|id| !id.is_empty() && !id.contains(['/', '\\']) && !id.contains(".."))
                .map(|id| self.executor.job_dir(id))
                .collect();
        }
        Some(Command::RetireJobs { job_ids })
    }

    /// Starts a snapshot of the state after the last logged batch (which drops the batches
    /// before it once written: the next start replays only what comes after).
    fn start_snapshot(&mut self) {
        // The image costs the driver time: none while the previous snapshot is being written.
        if !self.snapshots.idle() {
            return;
        }
        let started = std::time::Instant::now();
        let image = self.state.image();
        tracing::debug!(
            jobs = image.jobs.len(),
            us = started.elapsed().as_micros() as u64,
            "took the state's image for a snapshot"
        );
        self.snapshot_jobs = image.jobs.len() as u64;
        if self
            .snapshots
            .start(image, self.log.last_seq(), self.state.now)
        {
            self.since_snapshot = 0;
        }
    }

    /// After a restart: deals with the attempts the log says were running (the local
    /// executor stops what is left of them and reports them lost, so the core puts their jobs
    /// back to RUNNABLE without using a retry; the Slurm executor adopts the jobs Slurm still
    /// runs), and publishes the executor's capacity. Commits one batch and starts what it
    /// decides. Returns the number of attempts that were not taken back.
    pub async fn reconcile(&mut self) -> Result<usize, ServerError> {
        let mut commands = self.executor.reconcile(&self.state).await?;
        let lost = commands
            .iter()
            .filter(|c| {
                matches!(
                    c,
                    Command::AttemptExited {
                        outcome: ExitRecord::Lost { .. },
                        ..
                    }
                )
            })
            .count();
        let capacity = self.executor.capacity();
        if capacity != self.state.capacity {
            commands.push(Command::SetCapacity { capacity });
        }
        if commands.is_empty() {
            return Ok(0);
        }
        let now = now_ms();
        stamp_lost_limit(&mut commands, self.cadence.max_lost_attempts);
        let outcome = self.state.apply_batch(now, commands);
        for e in outcome.results.iter().filter_map(|r| r.as_ref().err()) {
            tracing::warn!(error = %e, "reconciliation step refused");
        }
        let carry = self.ready(outcome.actions);
        self.commit(now, &outcome.logged, &outcome.decisions)?;
        self.carry_out(carry);
        Ok(lost)
    }
}

/// Puts the configured limit on the lost attempts of a batch about to be logged: the limit in
/// force when an attempt was lost is part of the record, so a replay decides as the server
/// did whatever the setting is later (a replayed log is never stamped).
fn stamp_lost_limit(commands: &mut [Command], max: u32) {
    for c in commands {
        if let Command::AttemptExited {
            outcome: ExitRecord::Lost { max_in_a_row, .. },
            ..
        } = c
        {
            max_in_a_row.get_or_insert(max);
        }
    }
}

impl<L: Log + Send + 'static, E: Execute> Driver<L, E> {
    fn commit(
        &mut self,
        now: i64,
        commands: &[Command],
        decisions: &[Effect],
    ) -> Result<(), ServerError> {
        let json = serde_json::to_string(commands)
            .map_err(|e| ServerError::Recovery(format!("encoding commands: {e}")))?;
        let decisions = encode_decisions(decisions)?;
        self.log.append(now, &json, &decisions)?;
        if !self.retired_dirs.is_empty() {
            // Only once the retirement is durable: a crash before it keeps the jobs, and
            // their directories with them.
            let dirs = std::mem::take(&mut self.retired_dirs);
            tokio::task::spawn_blocking(move || {
                for dir in dirs {
                    if let Err(e) = std::fs::remove_dir_all(&dir) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            tracing::warn!(dir = %dir.display(), error = %e, "cannot delete a retired job's directory");
                        }
                    }
                }
            });
        }
        self.since_snapshot += commands.len() as u64;
        // A snapshot costs in proportion to the state, so the next one waits for four times
        // as many commands as the last one had jobs: its cost per command stays a fraction
        // of a job's encoding however large the state grows (a flood of submits included),
        // and a restart replays at most that many commands.
        let due = self.cadence.snapshot_every.max(4 * self.snapshot_jobs);
        if self.cadence.snapshot_every > 0 && self.since_snapshot >= due {
            self.start_snapshot();
        }
        Ok(())
    }

    /// Runs until every request sender is gone. An error means the log could not be written:
    /// the state in memory is ahead of what is durable, and the caller must stop the process,
    /// so that a restart rebuilds the state from what was committed (clients got
    /// ServerException for everything in the failed batch).
    pub async fn run(mut self) -> Result<(), ServerError> {
        let mut ticker = tokio::time::interval(self.cadence.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let first = tokio::select! {
                r = self.requests.recv() => match r {
                    Some(env) => Item::Request(env),
                    None => break,
                },
                Some(ev) = self.events.recv() => Item::Event(ev),
                _ = ticker.tick() => {
                    let now = now_ms();
                    let mut timed = self.time_limit_commands(now);
                    timed.extend(self.retire_commands(now));
                    let expiry = self.state.next_verification_expiry();
                    // A pass is also due after a replay of another build's batches: this
                    // build's rules decide from its first tick on.
                    if self.state.core.next_wakeup().is_some_and(|w| w <= now as u64)
                        || expiry.is_some_and(|w| w <= now)
                        || self.state.core.pass_due()
                    {
                        timed.push(Command::Wake);
                    }
                    if timed.is_empty() {
                        continue;
                    }
                    Item::Timed(timed)
                }
            };
            let mut items = vec![first];
            // Executor reports first: an exit frees capacity, and under a flood of submits it
            // must not wait for a batch with room.
            while items.len() < MAX_BATCH {
                match self.events.try_recv() {
                    Ok(ev) => items.push(Item::Event(ev)),
                    Err(_) => break,
                }
            }
            while items.len() < MAX_BATCH {
                match self.requests.try_recv() {
                    Ok(env) => items.push(Item::Request(env)),
                    Err(_) => break,
                }
            }
            self.batch(items)?;
            if ticker.period() != self.cadence.tick {
                // A reload changed the period.
                ticker = tokio::time::interval(self.cadence.tick);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
        }
        self.snapshots.reap(true);
        if self.since_snapshot > 0 {
            self.start_snapshot();
            self.snapshots.reap(true);
        }
        Ok(())
    }

    /// One batch: apply, commit, reply, act (ARCHITECTURE.md, "The server in one request").
    fn batch(&mut self, items: Vec<Item>) -> Result<(), ServerError> {
        if !items.iter().any(Item::writes) {
            // Reads only: nothing to apply, log or decide.
            self.answer_reads(items);
            return Ok(());
        }
        let now = now_ms();
        let Gathered {
            mut commands,
            repliers,
            queries,
        } = self.gather(items);
        let pass = std::time::Instant::now();
        stamp_lost_limit(&mut commands, self.cadence.max_lost_attempts);
        let exited: Vec<AttemptId> = commands
            .iter()
            .filter_map(|c| match c {
                Command::AttemptExited { attempt, .. } => Some(*attempt),
                _ => None,
            })
            .collect();
        let outcome = self.state.apply_batch(now, commands);
        self.pass_seconds.observe(pass.elapsed().as_secs_f64());
        let replies = repliers.into_iter().zip(outcome.results);
        let carry = self.ready(outcome.actions);
        if let Err(e) = self.commit(now, &outcome.logged, &outcome.decisions) {
            for (reply, _) in replies {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(ApiError::server(
                        "the server could not make the request durable; retry shortly",
                    )));
                }
            }
            return Err(e);
        }
        for (reply, r) in replies {
            if let Some(reply) = reply {
                let _ = reply.send(r.map(Answer::Reply));
            }
        }
        // Before the reads are answered: a stop or a go is a message on a socket, and on a
        // reclaim the owner's job waits for both (a read's answer costs far more).
        self.carry_out(carry);
        if !exited.is_empty() {
            self.executor.acknowledge(&exited);
        }
        let answered = now_ms();
        for (q, reply) in queries {
            let _ = reply.send(self.answer(&q, answered));
        }
        Ok(())
    }

    /// Answers a batch of reads only.
    fn answer_reads(&self, items: Vec<Item>) {
        let now = now_ms();
        for item in items {
            if let Item::Request(Envelope {
                request: Request::Query(q),
                reply,
            }) = item
            {
                let _ = reply.send(self.answer(&q, now));
            }
        }
    }

    /// The batch's commands in arrival order, where each one's answer goes (if it came from
    /// a client), and its reads, answered after the commit. A reload's new settings take
    /// effect here, before the batch that records it.
    fn gather(&mut self, items: Vec<Item>) -> Gathered {
        let mut g = Gathered::default();
        for item in items {
            match item {
                Item::Request(Envelope { request, reply }) => match request {
                    Request::Command(c) => {
                        g.commands.push(c);
                        g.repliers.push(Some(reply));
                    }
                    Request::Query(q) => g.queries.push((q, reply)),
                    Request::Reload(r) => {
                        self.reload(&r);
                        g.commands.push(Command::Audit(r.audit));
                        g.repliers.push(Some(reply));
                    }
                },
                Item::Event(ev) => {
                    g.commands.push(event_command(ev));
                    g.repliers.push(None);
                }
                Item::Timed(timed) => {
                    g.repliers.extend(timed.iter().map(|_| None));
                    g.commands.extend(timed);
                }
            }
        }
        g
    }

    /// `jobStateTimeLimitActions`: terminate share heads blocked past their time limit.
    fn time_limit_commands(&mut self, now: i64) -> Vec<Command> {
        self.time_limits
            .due(self.state.time_limit_candidates(), now)
    }

    /// Readies the batch's launches while it is being made durable ([`Execute::ready`]):
    /// what the executor can do before an attempt may run is not on the path from the
    /// decision to the job running.
    fn ready(&self, actions: Vec<Action>) -> Vec<Carry> {
        actions
            .into_iter()
            .map(|a| match a {
                Action::Launch { mut spec, role } => {
                    let attempt = spec.attempt;
                    // A job that names no role keeps the server's storage for its transfers.
                    spec.credentials = self
                        .credentials
                        .as_deref()
                        .filter(|_| role)
                        .map(|b| b.for_attempt(attempt));
                    match self.executor.ready(*spec) {
                        Ok(Some(spec)) => Carry::Start(Box::new(spec)),
                        Ok(None) => Carry::Release(attempt),
                        Err(e) => Carry::Refused(attempt, e),
                    }
                }
                Action::Stop { attempt } => Carry::Stop(attempt),
            })
            .collect()
    }

    /// Carries out a durable batch's decisions.
    fn carry_out(&mut self, carry: Vec<Carry>) {
        for c in carry {
            let (attempt, refused) = match c {
                Carry::Release(attempt) => {
                    self.executor.release(attempt);
                    continue;
                }
                Carry::Stop(attempt) => {
                    self.executor.stop(attempt);
                    continue;
                }
                Carry::Start(spec) => {
                    let attempt = spec.attempt;
                    match self.executor.start(*spec) {
                        Ok(()) => continue,
                        Err(e) => (attempt, e),
                    }
                }
                Carry::Refused(attempt, e) => (attempt, e),
            };
            let _ = self.events_tx.send(ExecEvent::Exited {
                attempt,
                outcome: Exit::Failed {
                    reason: format!(
                        "Received status from SageMaker: InternalServerError: the executor could not start the attempt: {refused}"
                    ),
                    retryable: true,
                },
                at_ms: now_ms() as u64,
                usage: None,
            });
        }
    }
}

/// A decision of a batch, as the executor carries it out once the batch is durable.
enum Carry {
    /// Start an attempt the executor got ready.
    Release(AttemptId),
    /// Start an attempt.
    Start(Box<LaunchSpec>),
    /// Stop an attempt.
    Stop(AttemptId),
    /// The executor refused the launch of an attempt: it is reported failed.
    Refused(AttemptId, qm_executor::ExecError),
}

fn event_command(ev: ExecEvent) -> Command {
    match ev {
        ExecEvent::Running {
            attempt,
            pids,
            gpus,
            supervisor,
            at_ms,
            ..
        } => Command::AttemptRunning {
            attempt,
            pids,
            gpus,
            supervisor,
            at_ms: i64::try_from(at_ms).ok(),
        },
        ExecEvent::Starting { attempt, reason } => Command::AttemptStarting { attempt, reason },
        ExecEvent::Capacity { capacity } => Command::SetCapacity { capacity },
        ExecEvent::Checkpoint { attempt, .. } => Command::AttemptCheckpoint { attempt },
        ExecEvent::Progress { attempt, steps } => Command::AttemptProgress { attempt, steps },
        ExecEvent::Exited {
            attempt,
            outcome,
            usage,
            ..
        } => Command::AttemptExited {
            attempt,
            outcome: ExitRecord::from(outcome),
            usage,
        },
    }
}
