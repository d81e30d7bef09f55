//! The server's whole state, and the one place where commands change it.
//!
//! [`State`] wraps the scheduling core with what the API needs around it: resources
//! (environments, policies, queues, shares) with their AWS fields and tags, and a record per
//! service job (attempt history, preemptions, timestamps). It is deterministic: the same
//! commands at the same times give the same state, which is what makes the log replayable.
//! It does no IO; what must happen outside (start or stop an attempt) comes back as
//! [`Action`]s that the driver carries out after the batch has committed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use qm_api::*;
use qm_core::{AttemptId, Effect, Input, JobId, JobStatus, Scheduler, StopCause};
use qm_executor::LaunchSpec;
use serde::{Deserialize, Serialize};

use crate::command::{Command, ExitRecord};
use crate::facts::UsageFacts;
use crate::reply::{reply, Empty, Reply};
use crate::request::Admission;
use crate::request::{Answer, LogInfo, Query};

/// How many preempted attempts `preemptionSummary.recentPreemptedAttempts` keeps.
pub const PREEMPTED_WINDOW: usize = 10;

/// Something the driver must do once the batch is durable.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Start an attempt: the executor's spec, built once here from the job; `role` when the
    /// payload names a role, which the driver then hands the attempt credentials for.
    Launch {
        /// What to run.
        spec: Box<LaunchSpec>,
        /// Whether the attempt acts as its job's role (`RoleArn`).
        role: bool,
    },
    /// Stop an attempt (SIGTERM, grace, SIGKILL).
    Stop {
        /// Core attempt id.
        attempt: AttemptId,
    },
}

/// A service environment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EnvRec {
    /// Name.
    pub name: String,
    /// ENABLED / DISABLED.
    pub state: ServiceEnvironmentState,
    /// Capacity limits.
    pub limits: Vec<CapacityLimit>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// The queue it is connected to.
    pub queue: Option<String>,
}

/// A scheduling policy.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PolicyRec {
    /// Name.
    pub name: String,
    /// Quota-share policy.
    pub quota: Option<QuotaSharePolicy>,
    /// Fair-share policy (stored, not scheduled).
    pub fairshare: Option<FairsharePolicy>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// A job queue.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueueRec {
    /// Name.
    pub name: String,
    /// ENABLED / DISABLED.
    pub state: JQState,
    /// Queue priority (kept, not used: one queue per environment).
    pub priority: i32,
    /// Scheduling policy ARN.
    pub policy_arn: String,
    /// Connected service environment.
    pub environment: String,
    /// `jobStateTimeLimitActions`.
    pub actions: Vec<JobStateTimeLimitAction>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Quota shares by name.
    pub shares: BTreeMap<String, ShareRec>,
    /// RUNNABLE jobs in dispatch order: priority descending, then submission order.
    pub runnable: BTreeSet<(Reverse<i32>, JobId)>,
    /// Tells this queue from an earlier, deleted queue of the same name.
    pub generation: u64,
    /// Per class that borrows only after a verified resume: when one of its jobs was last
    /// seen `resumed` (dropped once that is older than the class's `verify-days`).
    #[serde(default)]
    pub verified_resume: BTreeMap<String, i64>,
    /// Its groups of shares as `PUT /qm/v1/queues/{queue}/groups` defined them (members
    /// come from the shares' `qm:group` tags; absent from snapshots of builds before groups).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<qm_api::qm::GroupDef>,
}

/// A quota share.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShareRec {
    /// Name.
    pub name: String,
    /// Limits.
    pub limits: Vec<QuotaShareCapacityLimit>,
    /// Strategy and borrow limit.
    pub sharing: QuotaShareResourceSharingConfiguration,
    /// In-share preemption.
    pub preemption: QuotaSharePreemptionConfiguration,
    /// ENABLED / DISABLED.
    pub state: QuotaShareState,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// One attempt of a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttemptRec {
    /// Core attempt id.
    pub attempt: AttemptId,
    /// 1-based number within the job.
    pub number: u32,
    /// The SageMaker-style training job name of this attempt.
    pub training_job_name: String,
    /// When capacity was granted.
    pub started_at: i64,
    /// When its processes were gone.
    pub stopped_at: Option<i64>,
    /// How it ended.
    pub status_reason: Option<String>,
    /// Why the core stopped it, when it did.
    pub stop_reason: Option<String>,
    /// Whether that stop was a preemption.
    pub preempted: bool,
    /// Process ids reported by the executor.
    pub pids: Vec<u32>,
    /// Its supervisor, as the local executor reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervisor: Option<qm_executor::supervisor::Identity>,
    /// When the executor reported it running.
    pub running_at: Option<i64>,
    /// The instance type it holds.
    pub instance_type: String,
    /// Instances it holds.
    pub count: u32,
    /// When the job last reported a checkpoint during this attempt (lost-work accounting).
    #[serde(default)]
    pub checkpoint_at: Option<i64>,
    /// When the core decided to stop it (a preemption or a termination).
    #[serde(default)]
    pub stop_at: Option<i64>,
    /// For a preemption: the share and the job it was preempted for.
    #[serde(default)]
    pub preempted_for: Option<(String, String)>,
    /// What it used, once it ended (where the executor counts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<qm_executor::Usage>,
    /// The steps it reported in its progress file (first, last, last checkpoint), which tell
    /// whether the attempt after a preemption resumed (`resume.rs`).
    #[serde(default, skip_serializing_if = "qm_executor::Steps::is_empty")]
    pub steps: qm_executor::Steps,
    /// Checkpoints it reported: with `checkpoint_at`, the interval at which the job really
    /// checkpoints (`qm workload export`).
    #[serde(default, skip_serializing_if = "crate::archive::is_zero")]
    pub checkpoints: u32,
}

impl State {
    /// `name` as the one allocation every job that names it shares.
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(name);
        self.names.insert(shared.clone());
        shared
    }

    /// The record's names as the ones its other jobs share (a snapshot's load makes each
    /// job its own).
    pub(crate) fn intern_names(&mut self, rec: &mut JobRec) {
        rec.queue = self.intern(&rec.queue);
        rec.share = self.intern(&rec.share);
    }

    /// A job's capacity unit and instance count (its payload's `ResourceConfig`), as the core
    /// holds them in the job's spec for as long as the record lives; from the payload for a
    /// record the core does not know.
    pub(crate) fn unit_of(&self, rec: &JobRec) -> (String, u32) {
        match self.core.job(rec.core) {
            Some(job) => (job.spec.instance_type.clone(), job.spec.count),
            None => {
                let payload = rec.payload();
                (payload.instance_type, payload.instance_count)
            }
        }
    }
}

impl JobRec {
    /// Its payload, parsed from its request. It was accepted at submission: a build whose
    /// parsing is stricter keeps the job (and says so), and its attempts may fail.
    pub fn payload(&self) -> TrainingPayload {
        TrainingPayload::parse(&self.request.service_request_payload).unwrap_or_else(|e| {
            tracing::warn!(job = %self.id, error = %e, "this build cannot read the job's payload; it keeps the job, whose attempts may fail");
            TrainingPayload::default()
        })
    }

    /// SageMaker's name for the job: the payload's `TrainingJobName`, else the job's name
    /// (TRAINING_JOB_NAME, the role session's name, where its model goes).
    fn sagemaker_name(&self, payload: &TrainingPayload) -> String {
        payload
            .training_job_name
            .clone()
            .unwrap_or_else(|| self.request.job_name.clone())
    }

    /// What its live attempt runs: the executor's spec, from the job's SageMaker payload
    /// (credentials are the driver's to add).
    fn live_launch(&self) -> Option<LaunchSpec> {
        self.launch_of(&self.payload())
    }

    /// [`JobRec::live_launch`], from its payload `p` parsed already.
    fn launch_of(&self, p: &TrainingPayload) -> Option<LaunchSpec> {
        let live = self.live.as_ref()?;
        Some(LaunchSpec {
            attempt: live.attempt,
            job_id: self.id.clone(),
            attempt_number: live.number,
            job_name: self.sagemaker_name(p),
            instance_type: live.instance_type.clone(),
            count: live.count,
            entrypoint: p.entrypoint.clone(),
            arguments: p.arguments.clone(),
            training_image: p.training_image.clone(),
            environment: p.environment.clone(),
            hyperparameters: p.hyperparameters.clone(),
            max_runtime: qm_api::runtime_limit_seconds(p, &self.request)
                .map(std::time::Duration::from_secs),
            checkpoint_path: p
                .checkpoint_local_path
                .as_ref()
                .map(std::path::PathBuf::from),
            checkpoint_uri: p.checkpoint_s3_uri.clone(),
            output_path: p.output_path.clone(),
            channels: p.channels.iter().map(input_channel).collect(),
            credentials: None,
        })
    }
}

/// A payload's channel as the executor takes it.
fn input_channel(c: &qm_api::channel::Channel) -> qm_executor::InputChannel {
    qm_executor::InputChannel {
        name: c.name.clone(),
        uri: c.uri.clone(),
        data_type: c.data_type.clone(),
        input_mode: c.input_mode.clone(),
        distribution: c.distribution.clone(),
        content_type: c.content_type.clone(),
        compression: c.compression.clone(),
        record_wrapper: c.record_wrapper.clone(),
    }
}

/// A service job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRec {
    /// Core id: submission order.
    pub core: JobId,
    /// API id (UUID).
    pub id: String,
    /// Queue name (one allocation for all its jobs: [`State::intern`]).
    pub queue: Arc<str>,
    /// The queue's generation when the job was submitted.
    pub queue_generation: u64,
    /// Share name (interned).
    pub share: Arc<str>,
    /// The request as submitted (shared, so that a snapshot's copy of the records does not
    /// copy every payload). Its payload is parsed from it when an attempt starts
    /// ([`JobRec::payload`]): a waiting job holds nothing parsed (the core's spec of the job
    /// holds its unit and size: `State::unit_of`).
    pub request: std::sync::Arc<SubmitServiceJobRequest>,
    /// Current priority.
    pub priority: i32,
    /// Submission time.
    pub created_at: i64,
    /// Last time capacity was granted.
    pub scheduled_at: Option<i64>,
    /// Last time an attempt's processes started.
    pub started_at: Option<i64>,
    /// When it reached SUCCEEDED or FAILED.
    pub stopped_at: Option<i64>,
    /// API status.
    pub status: ServiceJobStatus,
    /// Reason of the last change, for non-RUNNABLE statuses.
    pub status_reason: Option<String>,
    /// Finished attempts that were not preempted, oldest first.
    pub attempts: Vec<AttemptRec>,
    /// The attempt holding capacity, if any (it may be stopping); boxed, so that a waiting
    /// job does not hold the room of one.
    pub live: Option<Box<AttemptRec>>,
    /// Every preempted attempt, newest first (DescribeServiceJob shows the newest
    /// [`PREEMPTED_WINDOW`]); an entry is added when the preemption is decided.
    pub preempted: VecDeque<AttemptRec>,
    /// Total preemptions.
    pub preempted_count: u32,
    /// A termination was accepted.
    pub is_terminated: bool,
    /// Attempts started so far.
    pub attempt_counter: u32,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// The training job name of the newest attempt.
    pub latest_training_job: Option<String>,
    /// Who submitted it, when known.
    #[serde(default)]
    pub principal: Option<String>,
    /// Its class (`qm:class`, else its share's default at submission), when it has one.
    #[serde(default)]
    pub class: Option<String>,
}

/// One command's answer: its typed response, or why it was refused.
pub type CommandResult = Result<Reply, ApiError>;

/// What applying a batch did ([`State::apply_batch`]).
#[derive(Debug)]
pub struct BatchOutcome {
    /// Each command's answer, in the order given.
    pub results: Vec<CommandResult>,
    /// The commands that were accepted: what the log records.
    pub logged: Vec<Command>,
    /// What to carry out once the batch is durable.
    pub actions: Vec<Action>,
    /// The core's decisions, which the log records beside the commands.
    pub decisions: Vec<Effect>,
}

/// The server state. See the module docs.
pub struct State {
    /// ARN builder/parser.
    pub arns: Arns,
    /// The scheduling core.
    pub core: Scheduler,
    /// Service environments by name.
    pub environments: BTreeMap<String, EnvRec>,
    /// Scheduling policies by name.
    pub policies: BTreeMap<String, PolicyRec>,
    /// Job queues by name.
    pub queues: BTreeMap<String, QueueRec>,
    /// Jobs by core id (submission order). Shared with snapshots: a snapshot's copy of the
    /// state takes a reference to each record, and a record changed afterwards is copied
    /// then ([`Arc::make_mut`]), so a snapshot costs the driver no deep copy.
    pub jobs: BTreeMap<JobId, Arc<JobRec>>,
    /// API id -> core id.
    pub by_id: HashMap<String, JobId>,
    /// The queue and share names jobs share, one allocation each.
    pub names: std::collections::HashSet<Arc<str>>,
    /// clientToken -> core id. The request a token stands for is its job's own
    /// (`JobRec::request`), so a waiting job holds no second copy of it; a snapshot's load
    /// rebuilds the map from the jobs' requests.
    pub tokens: HashMap<String, JobId>,
    /// Live attempts -> core job id.
    pub attempt_job: HashMap<AttemptId, JobId>,
    /// Next core job id.
    pub next_job: u64,
    /// Next queue generation.
    pub next_queue_generation: u64,
    /// Physical capacity last logged.
    pub capacity: BTreeMap<String, u32>,
    /// The time of the batch being applied.
    pub now: i64,
    /// Actions collected while applying the current batch.
    pub actions: Vec<Action>,
    /// Decisions of the current batch, for the log.
    pub decisions: Vec<Effect>,
    /// The audit log of configuration changes, its oldest entries retired to the archive
    /// (`[retention] audit_entries`).
    pub audit: Vec<crate::command::AuditEntry>,
    /// The number of the first entry of [`State::audit`]: how many were retired before it.
    pub audit_first: u64,
    /// Preemptions decided, per (queue, share).
    pub preemptions: BTreeMap<(String, String), u64>,
    /// Finished jobs by (stopped at, core id): which are due for retirement.
    pub finished: BTreeSet<(i64, JobId)>,
    /// Jobs by queue, share and status, for ListServiceJobs.
    pub by_status: crate::index::StatusIndex,
    /// Every share's entitlement over time, for usage accounting (a few entries per change
    /// of a share, never pruned).
    pub share_history: crate::facts::ShareHistory,
    /// The bounds on queued jobs that new submits must respect: set by the server once the
    /// log is replayed, so that a submit accepted once is accepted again on replay whatever
    /// the limits are now.
    pub admission: Option<Admission>,
    /// While a batch another build wrote is replayed: its logged decisions, which the core
    /// imposes in place of this build's rules, and the first that did not fit.
    replay: Option<(qm_core::Logged, Option<String>)>,
}

impl State {
    /// An empty state.
    pub fn new(arns: Arns, policy: qm_core::Policy) -> Self {
        State {
            arns,
            core: Scheduler::new(policy),
            environments: BTreeMap::new(),
            policies: BTreeMap::new(),
            queues: BTreeMap::new(),
            jobs: BTreeMap::new(),
            by_id: HashMap::new(),
            tokens: HashMap::new(),
            names: std::collections::HashSet::new(),
            attempt_job: HashMap::new(),
            next_job: 1,
            next_queue_generation: 1,
            capacity: BTreeMap::new(),
            now: 0,
            actions: Vec::new(),
            decisions: Vec::new(),
            audit: Vec::new(),
            audit_first: 0,
            preemptions: BTreeMap::new(),
            finished: BTreeSet::new(),
            by_status: Default::default(),
            share_history: BTreeMap::new(),
            admission: None,
            replay: None,
        }
    }

    /// Starts a batch at `now` (clamped so that time never goes backwards for the core).
    pub fn begin(&mut self, now: i64) {
        self.now = now.max(self.now);
        self.actions.clear();
        self.decisions.clear();
    }

    /// Applies one command; on error nothing changed. Returns the typed response.
    pub fn apply(&mut self, cmd: &Command) -> Result<Reply, ApiError> {
        match cmd {
            Command::CreateServiceEnvironment(r) => self.create_service_environment(r),
            Command::UpdateServiceEnvironment(r) => self.update_service_environment(r),
            Command::DeleteServiceEnvironment(r) => self.delete_service_environment(r),
            Command::CreateJobQueue(r) => self.create_job_queue(r),
            Command::UpdateJobQueue(r) => self.update_job_queue(r),
            Command::DeleteJobQueue(r) => self.delete_job_queue(r),
            Command::CreateSchedulingPolicy(r) => self.create_scheduling_policy(r),
            Command::UpdateSchedulingPolicy(r) => self.update_scheduling_policy(r),
            Command::DeleteSchedulingPolicy(r) => self.delete_scheduling_policy(r),
            Command::CreateQuotaShare(r) => self.create_quota_share(r),
            Command::UpdateQuotaShare(r) => self.update_quota_share(r),
            Command::DeleteQuotaShare(r) => self.delete_quota_share(r),
            Command::SubmitServiceJob {
                job_id,
                request,
                principal,
            } => self.submit_service_job(job_id, request, principal.as_deref()),
            Command::UpdateServiceJob(r) => self.update_service_job(r),
            Command::TerminateServiceJob(r) => self.terminate_service_job(r),
            Command::TerminateServiceJobs(r) => self.terminate_service_jobs(r),
            Command::PreemptServiceJob { job_id, reason } => {
                self.preempt_service_job(job_id, reason)
            }
            Command::Drain { reason, requeue } => self.drain(reason, *requeue),
            Command::EndDrain => self.end_drain(),
            Command::PutQueueGroups { queue, groups } => self.put_queue_groups(queue, groups),
            Command::TagResource(r) => self.tag_resource(r),
            Command::UntagResource(r) => self.untag_resource(r),
            Command::AttemptRunning {
                attempt,
                pids,
                gpus: _,
                supervisor,
                at_ms,
            } => self.attempt_running(*attempt, pids, supervisor.as_ref(), *at_ms),
            Command::AttemptStarting { attempt, reason } => {
                self.attempt_starting(*attempt, reason.as_deref())
            }
            Command::AttemptCheckpoint { attempt } => self.attempt_checkpoint(*attempt),
            Command::AttemptProgress { attempt, steps } => self.attempt_progress(*attempt, steps),
            Command::AttemptExited {
                attempt,
                outcome,
                usage,
            } => self.attempt_exited(*attempt, outcome, *usage),
            Command::SetCapacity { capacity } => self.set_capacity(capacity),
            Command::TimeLimitAction { job_id, reason } => self.time_limit_action(job_id, reason),
            Command::RetireJobs { job_ids } => self.retire_jobs(job_ids),
            Command::RetireAudit { upto } => self.retire_audit(*upto),
            Command::Wake => {
                self.expire_verified();
                reply(Empty {})
            }
            Command::Audit(entry) => {
                let mut e = entry.clone();
                e.at = self.now;
                self.audit.push(e);
                reply(Empty {})
            }
            Command::As {
                caller,
                command,
                audit,
            } => self.apply_as(caller, command, audit.as_ref()),
        }
    }

    /// Applies `command` for `caller` if its permissions allow it, recording `audit` (with the
    /// tags the command changed) when it is an audited change.
    fn apply_as(
        &mut self,
        caller: &crate::command::Caller,
        command: &Command,
        audit: Option<&crate::command::AuditEntry>,
    ) -> Result<Reply, ApiError> {
        self.permit(caller, command)?;
        let Some(entry) = audit else {
            return self.apply(command);
        };
        let before = self.tags_changed_by(command);
        let answer = self.apply(command)?;
        let mut entry = entry.clone();
        entry.at = self.now;
        entry.tags =
            before
                .zip(self.tags_changed_by(command))
                .map(|((resource, before), (_, after))| qm_api::qm::TagChange {
                    resource,
                    before,
                    after,
                });
        self.audit.push(entry);
        Ok(answer)
    }

    /// Answers a read, typed where the HTTP layer uses the answer itself.
    pub fn answer(&self, q: &Query, now: i64) -> Result<Answer, ApiError> {
        match q {
            Query::LogInfo { job_id, attempt } => {
                self.log_info(job_id, *attempt).map(Answer::LogInfo)
            }
            Query::UsageFacts { since } => Ok(Answer::UsageFacts(Box::new(UsageFacts {
                jobs: self.usage_jobs(*since),
                history: self.share_history.clone(),
                now: now.max(self.now),
            }))),
            Query::WorkloadFacts {
                since,
                until,
                queue,
            } => Ok(Answer::WorkloadFacts(Box::new(self.workload_facts(
                *since,
                *until,
                queue.as_deref(),
            )))),
            Query::ReviewFacts { since } => Ok(Answer::ReviewFacts(Box::new(
                self.review_facts(*since, now),
            ))),
            Query::Sample => Ok(Answer::Sample(Box::new(self.sample(now.max(self.now))))),
            Query::AttemptRole { attempt } => Ok(Answer::AttemptRole(self.attempt_role(*attempt))),
            q => self.query(q, now).map(Answer::Reply),
        }
    }

    /// Answers a read with a typed response; `now` is only shown (`lastUpdatedAt`), never
    /// kept.
    pub fn query(&self, q: &Query, now: i64) -> Result<Reply, ApiError> {
        match q {
            Query::DescribeServiceEnvironments(r) => self.describe_service_environments(r),
            Query::DescribeJobQueues(r) => self.describe_job_queues(r),
            Query::DescribeSchedulingPolicies(r) => self.describe_scheduling_policies(r),
            Query::ListSchedulingPolicies(r) => self.list_scheduling_policies(r),
            Query::DescribeQuotaShare(r) => self.describe_quota_share(r),
            Query::ListQuotaShares(r) => self.list_quota_shares(r),
            Query::DescribeServiceJob(r) => self.describe_service_job(r),
            Query::ListServiceJobs(r) => self.list_service_jobs(r),
            Query::GetJobQueueSnapshot(r) => self.get_job_queue_snapshot(r, now),
            Query::ListTagsForResource(r) => self.list_tags_for_resource(r),
            Query::Usage => self.usage_json(),
            Query::Drain => reply(self.drain_status()),
            Query::QueueGroups { queue } => self.queue_groups(queue),
            Query::RunningAttempt { job_id } => self.running_attempt(job_id),
            Query::WhatIf(r) => self.what_if(r),
            Query::Audit { start, max } => reply(self.audit_page(*start, *max)),
            Query::LogInfo { .. }
            | Query::UsageFacts { .. }
            | Query::WorkloadFacts { .. }
            | Query::ReviewFacts { .. }
            | Query::Sample
            | Query::AttemptRole { .. }
            | Query::Metrics => Err(ApiError::server(
                "internal: this read has a typed answer (State::answer, or Driver::answer for metrics)",
            )),
        }
    }

    /// Applies one batch: every command at `now` in order, then the scheduling pass. The one
    /// way the driver, recovery and tests change the state, so they cannot differ in how.
    /// A refused command changed nothing and is not in `logged`.
    pub fn apply_batch(&mut self, now: i64, commands: Vec<Command>) -> BatchOutcome {
        self.begin(now);
        let (results, logged) = self.apply_commands(commands);
        let actions = self.finish();
        BatchOutcome {
            results,
            logged,
            actions,
            decisions: std::mem::take(&mut self.decisions),
        }
    }

    /// Applies a batch's commands in order: each one's answer, and the accepted ones (what the
    /// log records).
    fn apply_commands(&mut self, commands: Vec<Command>) -> (Vec<CommandResult>, Vec<Command>) {
        let mut results = Vec::with_capacity(commands.len());
        let mut logged = Vec::with_capacity(commands.len());
        for c in commands {
            let r = self.apply(&c);
            if r.is_ok() {
                logged.push(c);
            }
            results.push(r);
        }
        (results, logged)
    }

    /// Ends a batch: runs the scheduling pass and returns the actions to carry out once the
    /// batch is durable.
    pub fn finish(&mut self) -> Vec<Action> {
        let effects = self.core.schedule(self.now as u64);
        self.absorb(effects);
        std::mem::take(&mut self.actions)
    }

    /// Applies a batch another build wrote as it was decided: its commands, with the
    /// decisions it logged imposed wherever this build's rules would decide, and those
    /// decisions' pass in place of one of this build ([`qm_core::logged`]). An error names
    /// the decision that does not fit the state the log built: the log cannot be replayed.
    pub fn apply_logged_batch(
        &mut self,
        now: i64,
        commands: Vec<Command>,
        decisions: Vec<Effect>,
    ) -> Result<BatchOutcome, String> {
        self.begin(now);
        self.replay = Some((qm_core::Logged::new(decisions), None));
        let (results, logged) = self.apply_commands(commands);
        let (mut rest, failed) = self.replay.take().expect("set above");
        // A command this build refuses leaves the decisions it led to for the inputs after
        // it: an error then names it as the likely cause.
        let refused: Vec<String> = results
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
            .collect();
        let explain = |e: String| match refused.as_slice() {
            [] => e,
            r => format!(
                "{e} (this build refused {} of the batch's commands: {})",
                r.len(),
                r.join("; ")
            ),
        };
        if let Some(e) = failed {
            return Err(explain(e));
        }
        let effects = self
            .core
            .impose_logged(self.now as u64, &mut rest)
            .map_err(|e| explain(e.to_string()))?;
        self.absorb(effects);
        Ok(BatchOutcome {
            results,
            logged,
            actions: std::mem::take(&mut self.actions),
            decisions: std::mem::take(&mut self.decisions),
        })
    }

    /// Feeds an input to the core (no pass) and absorbs its effects; while a logged batch is
    /// replayed, with its decisions.
    pub(crate) fn core_apply(&mut self, input: Input) -> Result<(), ApiError> {
        let now = self.now as u64;
        let effects = match self.replay.as_mut() {
            None => self.core.apply(now, input)?,
            Some((logged, failed)) => match self.core.apply_logged(now, input, logged) {
                Ok(effects) => effects,
                Err(e) => {
                    if matches!(e, qm_core::CoreError::Replay(_)) {
                        failed.get_or_insert_with(|| e.to_string());
                    }
                    return Err(e.into());
                }
            },
        };
        self.absorb(effects);
        Ok(())
    }

    /// The API id of a core job.
    pub(crate) fn api_id(&self, core: JobId) -> String {
        self.jobs
            .get(&core)
            .map(|j| j.id.clone())
            .unwrap_or_else(|| core.to_string())
    }

    /// Updates job records from the core's decisions and queues the actions.
    fn absorb(&mut self, effects: Vec<Effect>) {
        for e in effects {
            self.decisions.push(e.clone());
            match e {
                Effect::Start {
                    job,
                    attempt,
                    unit,
                    count,
                } => self.absorb_start(job, attempt, unit, count),
                Effect::Stop {
                    job,
                    attempt,
                    cause,
                } => self.absorb_stop(job, attempt, &cause),
                Effect::Requeued { job, reason } => {
                    self.set_status(job, ServiceJobStatus::Runnable, Some(reason));
                }
                Effect::Finished {
                    job,
                    status,
                    reason,
                } => {
                    let s = if status == JobStatus::Succeeded {
                        ServiceJobStatus::Succeeded
                    } else {
                        ServiceJobStatus::Failed
                    };
                    self.set_status(job, s, Some(reason));
                    if let Some(rec) = self.jobs.get_mut(&job).map(Arc::make_mut) {
                        rec.stopped_at = Some(self.now);
                        self.finished.insert((self.now, job));
                    }
                }
            }
        }
    }

    /// A start: the job's new live attempt, and its launch.
    fn absorb_start(&mut self, job: JobId, attempt: AttemptId, unit: String, count: u32) {
        let now = self.now;
        let Some(rec) = self.jobs.get_mut(&job).map(Arc::make_mut) else {
            return;
        };
        rec.attempt_counter += 1;
        // Parsed once for the start: a waiting job keeps only its request.
        let payload = rec.payload();
        let name = training_job_name(rec, &payload, attempt);
        rec.latest_training_job = Some(name.clone());
        rec.live = Some(Box::new(AttemptRec {
            attempt,
            number: rec.attempt_counter,
            training_job_name: name,
            started_at: now,
            stopped_at: None,
            status_reason: None,
            stop_reason: None,
            preempted: false,
            pids: Vec::new(),
            supervisor: None,
            running_at: None,
            instance_type: unit,
            count,
            checkpoint_at: None,
            stop_at: None,
            preempted_for: None,
            steps: qm_executor::Steps::default(),
            usage: None,
            checkpoints: 0,
        }));
        rec.scheduled_at = Some(now);
        let spec = rec
            .launch_of(&payload)
            .expect("the live attempt was just set");
        let role = payload.role_arn.is_some();
        self.attempt_job.insert(attempt, job);
        self.set_status(job, ServiceJobStatus::Scheduled, None);
        self.actions.push(Action::Launch {
            spec: Box::new(spec),
            role,
        });
    }

    /// A stop: the live attempt learns why and when; a preemption is counted and kept in the
    /// job's history at once.
    fn absorb_stop(&mut self, job: JobId, attempt: AttemptId, cause: &StopCause) {
        let now = self.now;
        let reason = cause.describe(|j| self.api_id(j));
        let preempted_for = self.preemptor(cause);
        if let Some(rec) = self.jobs.get_mut(&job).map(Arc::make_mut) {
            if let Some(live) = rec.live.as_mut().filter(|l| l.attempt == attempt) {
                live.stop_reason = Some(reason.clone());
                live.stop_at = Some(now);
                // A drain's requeue is no preemption: the attempt ends in the job's history
                // with its reason, like any other.
                live.preempted = cause.counts_as_preemption();
                live.preempted_for = preempted_for;
                if live.preempted {
                    *self
                        .preemptions
                        .entry((rec.queue.to_string(), rec.share.to_string()))
                        .or_default() += 1;
                    // The job is RUNNABLE again from now on, so its summary shows the
                    // preemption at once; `stoppedAt` follows when the processes are gone.
                    let mut entry = AttemptRec::clone(live);
                    entry.status_reason = Some(reason);
                    rec.preempted_count += 1;
                    // Every preempted attempt is kept (usage accounting needs its hours);
                    // DescribeServiceJob shows the newest PREEMPTED_WINDOW.
                    rec.preempted.push_front(entry);
                }
            }
        }
        self.actions.push(Action::Stop { attempt });
    }

    /// The (share, job id) a preemption is for.
    fn preemptor(&self, cause: &qm_core::StopCause) -> Option<(String, String)> {
        let for_job = match cause {
            qm_core::StopCause::Reclaim { for_job, .. }
            | qm_core::StopCause::InShare { for_job } => *for_job,
            qm_core::StopCause::Terminated { .. }
            | qm_core::StopCause::Drill { .. }
            | qm_core::StopCause::Requeue { .. } => return None,
        };
        let rec = self.jobs.get(&for_job)?;
        Some((rec.share.to_string(), rec.id.clone()))
    }

    /// Moves a job to `status`, keeping the queue's RUNNABLE index in step.
    pub(crate) fn set_status(
        &mut self,
        core: JobId,
        status: ServiceJobStatus,
        reason: Option<String>,
    ) {
        let Some(rec) = self.jobs.get_mut(&core).map(Arc::make_mut) else {
            return;
        };
        let key = (Reverse(rec.priority), core);
        if let Some(q) = self.queues.get_mut(&*rec.queue) {
            if status == ServiceJobStatus::Runnable {
                q.runnable.insert(key);
            } else {
                q.runnable.remove(&key);
            }
        }
        if rec.status != status {
            self.by_status.remove(rec);
            rec.status = status;
            self.by_status.insert(rec);
        }
        if reason.is_some() || status != ServiceJobStatus::Runnable {
            rec.status_reason = reason;
        }
    }

    fn attempt_running(
        &mut self,
        attempt: AttemptId,
        pids: &[u32],
        supervisor: Option<&qm_executor::supervisor::Identity>,
        spawned_at: Option<i64>,
    ) -> Result<Reply, ApiError> {
        let now = self.now;
        let Some(&core) = self.attempt_job.get(&attempt) else {
            // A report about an attempt that has already been accounted for (e.g. lost at a
            // restart): nothing to change.
            return reply(Empty {});
        };
        let Some(rec) = self.jobs.get_mut(&core).map(Arc::make_mut) else {
            return reply(Empty {});
        };
        if let Some(live) = rec.live.as_mut().filter(|l| l.attempt == attempt) {
            // The job started when its processes did, not when the report was logged; a
            // clock that says otherwise (before the dispatch, after this batch) is not believed.
            let at = spawned_at.map_or(now, |t| t.clamp(live.started_at.min(now), now));
            live.pids = pids.to_vec();
            live.supervisor = supervisor.cloned();
            live.running_at = Some(at);
            rec.started_at = Some(at);
            if matches!(
                rec.status,
                ServiceJobStatus::Scheduled | ServiceJobStatus::Starting
            ) {
                self.set_status(core, ServiceJobStatus::Running, None);
            }
        }
        reply(Empty {})
    }

    fn attempt_starting(
        &mut self,
        attempt: AttemptId,
        reason: Option<&str>,
    ) -> Result<Reply, ApiError> {
        let Some(&core) = self.attempt_job.get(&attempt) else {
            return reply(Empty {});
        };
        let starting = self.jobs.get(&core).is_some_and(|rec| {
            matches!(
                rec.status,
                ServiceJobStatus::Scheduled | ServiceJobStatus::Starting
            ) && rec.live.as_ref().is_some_and(|l| l.attempt == attempt)
        });
        if starting {
            self.set_status(core, ServiceJobStatus::Starting, reason.map(String::from));
        }
        reply(Empty {})
    }

    fn attempt_checkpoint(&mut self, attempt: AttemptId) -> Result<Reply, ApiError> {
        let Some(&core) = self.attempt_job.get(&attempt) else {
            return reply(Empty {});
        };
        let now = self.now;
        if let Some(live) = self
            .jobs
            .get_mut(&core)
            .and_then(|rec| Arc::make_mut(rec).live.as_mut())
            .filter(|l| l.attempt == attempt)
        {
            live.checkpoint_at = Some(now);
            live.checkpoints += 1;
        }
        // A checkpoint of a job that is no longer dispatched means nothing to the core.
        if self.core.attempt(attempt).is_some() {
            self.core_apply(Input::Checkpoint { job: core })?;
        }
        reply(Empty {})
    }

    /// Keeps what the attempt reported of its steps; the core does not use them (yet): they
    /// are shown, and classify the resume after a preemption.
    fn attempt_progress(
        &mut self,
        attempt: AttemptId,
        steps: &qm_executor::Steps,
    ) -> Result<Reply, ApiError> {
        let Some(&core) = self.attempt_job.get(&attempt) else {
            return reply(Empty {});
        };
        let mut first = false;
        if let Some(live) = self
            .jobs
            .get_mut(&core)
            .and_then(|rec| Arc::make_mut(rec).live.as_mut())
            .filter(|l| l.attempt == attempt)
        {
            first = live.steps.first.is_none() && steps.first.is_some();
            live.steps = *steps;
        }
        if first {
            self.note_first_step(core);
        }
        reply(Empty {})
    }

    fn attempt_exited(
        &mut self,
        attempt: AttemptId,
        outcome: &ExitRecord,
        usage: Option<qm_executor::Usage>,
    ) -> Result<Reply, ApiError> {
        let now = self.now;
        let Some(core) = self.attempt_job.remove(&attempt) else {
            return reply(Empty {});
        };
        if self.core.attempt(attempt).is_none() {
            return reply(Empty {});
        }
        // Record the attempt's end first: the core's effects below may start a new one.
        if let Some(rec) = self.jobs.get_mut(&core).map(Arc::make_mut) {
            if let Some(mut live) = rec.live.take().filter(|l| l.attempt == attempt) {
                live.stopped_at = Some(now);
                live.usage = usage;
                let outcome_reason = match outcome {
                    ExitRecord::Succeeded => "Training job completed".to_string(),
                    ExitRecord::Failed { reason, .. } | ExitRecord::Lost { reason, .. } => {
                        reason.clone()
                    }
                };
                if live.preempted {
                    if let Some(entry) = rec.preempted.iter_mut().find(|p| p.attempt == attempt) {
                        entry.stopped_at = Some(now);
                        entry.checkpoint_at = live.checkpoint_at;
                        entry.steps = live.steps;
                        entry.usage = usage;
                    }
                } else {
                    live.status_reason = Some(match &live.stop_reason {
                        Some(stop) => stop.clone(),
                        None => outcome_reason,
                    });
                    rec.attempts.push(*live);
                }
            }
        }
        self.core_apply(Input::AttemptExited {
            attempt,
            exit: outcome.to_core(),
        })?;
        reply(Empty {})
    }

    fn set_capacity(&mut self, capacity: &BTreeMap<String, u32>) -> Result<Reply, ApiError> {
        // Types no longer offered get no physical limit... of zero: nothing may start on them.
        let old: Vec<String> = self.capacity.keys().cloned().collect();
        for t in old {
            if !capacity.contains_key(&t) {
                self.core_apply(Input::SetPhysicalCapacity {
                    instance_type: t,
                    instances: Some(0),
                })?;
            }
        }
        for (t, n) in capacity {
            self.core_apply(Input::SetPhysicalCapacity {
                instance_type: t.clone(),
                instances: Some(*n),
            })?;
        }
        self.capacity = capacity.clone();
        // Types the environments name but the executor lacks have no instance at all.
        let queues: Vec<(String, Vec<CapacityLimit>)> = self
            .queues
            .values()
            .filter_map(|q| {
                self.environments
                    .get(&q.environment)
                    .map(|e| (q.name.clone(), e.limits.clone()))
            })
            .collect();
        for (q, limits) in queues {
            self.put_queue_limits(&q, &limits)?;
        }
        reply(Empty {})
    }

    fn time_limit_action(&mut self, job_id: &str, reason: &str) -> Result<Reply, ApiError> {
        let Some(&core) = self.by_id.get(job_id) else {
            return reply(Empty {});
        };
        if self.jobs[&core].status != ServiceJobStatus::Runnable {
            return reply(Empty {});
        }
        self.core_apply(Input::Terminate {
            job: core,
            reason: format!("Terminated by JobStateTimeLimit action due to reason: {reason}"),
        })?;
        self.mark_terminated(&[core]);
        reply(Empty {})
    }

    /// Unfinished jobs of a share (they are terminated when the share or its queue is deleted).
    pub(crate) fn unfinished_jobs_of(&self, queue: &str, share: &str) -> Vec<JobId> {
        self.jobs
            .values()
            .filter(|rec| {
                *rec.queue == *queue
                    && *rec.share == *share
                    && !matches!(
                        rec.status,
                        ServiceJobStatus::Succeeded | ServiceJobStatus::Failed
                    )
            })
            .map(|rec| rec.core)
            .collect()
    }

    /// Sets `isTerminated` on jobs whose termination was accepted.
    pub(crate) fn mark_terminated(&mut self, jobs: &[JobId]) {
        for core in jobs {
            if let Some(rec) = self.jobs.get_mut(core).map(Arc::make_mut) {
                rec.is_terminated = true;
            }
        }
    }

    /// The API job id and attempt number of a live attempt.
    pub fn attempt_identity(&self, attempt: AttemptId) -> Option<(String, u32)> {
        let rec = self.jobs.get(self.attempt_job.get(&attempt)?)?;
        let live = rec.live.as_ref().filter(|l| l.attempt == attempt)?;
        Some((rec.id.clone(), live.number))
    }

    /// Whose role attempt `attempt` acts as, while it holds capacity.
    pub fn attempt_role(&self, attempt: AttemptId) -> Option<crate::request::AttemptRole> {
        let rec = self.jobs.get(self.attempt_job.get(&attempt)?)?;
        rec.live.as_ref().filter(|l| l.attempt == attempt)?;
        let payload = rec.payload();
        Some(crate::request::AttemptRole {
            share: rec.share.to_string(),
            job_name: rec.sagemaker_name(&payload),
            role_arn: payload.role_arn,
            job_id: rec.id.clone(),
        })
    }

    /// Whether the core has asked attempt `attempt` to stop and waits for it to go.
    pub fn attempt_stopping(&self, attempt: AttemptId) -> bool {
        self.core
            .attempt(attempt)
            .is_some_and(|a| a.stopping.is_some())
    }

    /// What was launched for live attempt `attempt`, rebuilt from the job (the Slurm executor
    /// adopts its jobs with it after a restart), and when it was seen running, if it was.
    pub fn live_launch(&self, attempt: AttemptId) -> Option<(LaunchSpec, Option<i64>)> {
        let rec = self.jobs.get(self.attempt_job.get(&attempt)?)?;
        let launch = rec.live_launch().filter(|l| l.attempt == attempt)?;
        let running = rec.live.as_ref().and_then(|l| l.running_at);
        Some((launch, running))
    }

    /// Attempts the core still holds capacity for, as the log recorded them: after a replay,
    /// what the local executor reconciles (adopts, records as ended, or loses).
    pub fn recorded_attempts(&self) -> Vec<qm_executor::Recorded> {
        self.live_attempts()
            .into_iter()
            .filter_map(|(attempt, pids)| {
                let rec = self.jobs.get(self.attempt_job.get(&attempt)?)?;
                let live = rec.live.as_ref().filter(|l| l.attempt == attempt)?;
                Some(qm_executor::Recorded {
                    attempt,
                    job_id: rec.id.clone(),
                    attempt_number: live.number,
                    pids,
                    supervisor: live.supervisor.clone(),
                    stopping: self.attempt_stopping(attempt),
                })
            })
            .collect()
    }

    /// Attempts the core still holds capacity for, with their recorded process ids: after a
    /// replay these are the orphans of the previous server.
    pub fn live_attempts(&self) -> Vec<(AttemptId, Vec<u32>)> {
        let mut out: Vec<(AttemptId, Vec<u32>)> = self
            .attempt_job
            .iter()
            .map(|(&a, &core)| {
                let pids = self.jobs[&core]
                    .live
                    .as_ref()
                    .filter(|l| l.attempt == a)
                    .map(|l| l.pids.clone())
                    .unwrap_or_default();
                (a, pids)
            })
            .collect();
        out.sort();
        out
    }

    /// The status reason the API shows: the core's pending reason for RUNNABLE jobs; for a
    /// job whose attempt was backfilled onto an aged head's reservation, that it is
    /// preemptible for that head (issue 18, item 7); for any other job holding capacity,
    /// whether it runs on its share's own capacity or on borrowed capacity (issue 19).
    pub fn status_reason(&self, rec: &JobRec) -> Option<String> {
        let active = matches!(
            rec.status,
            ServiceJobStatus::Scheduled | ServiceJobStatus::Starting | ServiceJobStatus::Running
        );
        let head = self
            .core
            .job(rec.core)
            .and_then(|j| j.attempt)
            .and_then(|a| self.core.attempt(a))
            .and_then(|a| a.backfill_for);
        if let Some(head) = head.filter(|_| active) {
            return Some(format!(
                "BACKFILLED - runs on capacity reserved for job {}, which has waited past the starvation guard; preemptible: that job takes the capacity back when it can start",
                self.api_id(head)
            ));
        }
        if active {
            if let Some(b) = self.core.borrowing(rec.core) {
                return Some(capacity_reason(&rec.share, &b));
            }
        }
        if rec.status == ServiceJobStatus::Runnable {
            if let Some(r) = self.core.explain(rec.core) {
                return Some(match r {
                    qm_core::PendingReason::HeldForOlderJob { job } => format!(
                        "HELD_FOR_OLDER_JOB - capacity is held for job {}, which is ahead of it: it has waited past the starvation guard, or waits for the jobs it would preempt to checkpoint or finish",
                        self.api_id(job)
                    ),
                    other => other.to_string(),
                });
            }
        }
        rec.status_reason.clone()
    }

    /// Jobs of a queue at the head of each share that have waited with a blocked reason the
    /// queue's `jobStateTimeLimitActions` name: (job id, reason code, max seconds).
    pub fn time_limit_candidates(&self) -> Vec<(String, String, i64)> {
        let mut out = Vec::new();
        for q in self.queues.values() {
            if q.actions.is_empty() {
                continue;
            }
            let mut seen = BTreeSet::new();
            for &(_, core) in &q.runnable {
                let rec = &self.jobs[&core];
                if !seen.insert(rec.share.clone()) {
                    continue;
                }
                let Some(reason) = self.core.explain(core) else {
                    continue;
                };
                let code = reason.code();
                if let Some(a) = q.actions.iter().find(|a| a.reason == code) {
                    out.push((
                        rec.id.clone(),
                        code.to_string(),
                        i64::from(a.max_time_seconds),
                    ));
                }
            }
        }
        out
    }

    /// The core's accounting of a queue: every share on every instance type it has a limit
    /// for or a job has used.
    pub fn share_usage(&self, queue: &str) -> Vec<qm_core::ShareUsage> {
        self.core.usage(queue).unwrap_or_default()
    }

    /// RUNNABLE jobs per (share, instance type) that can fit — those waiting for a stopping
    /// attempt included (the core's own count leaves them out), misconfigured ones not.
    pub fn runnable_counts(&self, queue: &str) -> BTreeMap<(String, String), u64> {
        let mut out = BTreeMap::new();
        let Some(q) = self.queues.get(queue) else {
            return out;
        };
        for &(_, core) in &q.runnable {
            let misconfigured = self
                .core
                .job(core)
                .is_some_and(|j| j.misconfigured.is_some());
            if !misconfigured {
                let rec = &self.jobs[&core];
                *out.entry((rec.share.to_string(), self.unit_of(rec).0))
                    .or_default() += 1;
            }
        }
        out
    }

    /// Per queue, share and instance type: entitled, used, own use, borrowed, lent out,
    /// stopping, runnable. "Lent out" splits what others borrow over the lenders in proportion
    /// to their idle entitlement (lending is pooled; no instance belongs to one lender).
    fn usage_json(&self) -> Result<Reply, ApiError> {
        let queues = self.queues.values().map(|q| self.queue_usage(q)).collect();
        reply(qm_api::qm::Usage { queues })
    }

    /// One queue's part of `GET /qm/v1/usage`: its shares, its pool and who lends to whom.
    fn queue_usage(&self, q: &QueueRec) -> qm_api::qm::QueueUsage {
        let usage = self.share_usage(&q.name);
        let runnable = self.runnable_counts(&q.name);
        let shares: Vec<qm_api::qm::ShareUsage> = usage
            .iter()
            .filter(|u| q.shares.contains_key(&u.share))
            .map(|u| {
                let rec = q.shares.get(&u.share);
                qm_api::qm::ShareUsage {
                    quota_share_name: u.share.clone(),
                    capacity_unit: u.instance_type.clone(),
                    entitled: f64::from(u.entitlement),
                    used: f64::from(u.usage),
                    own_use: f64::from(u.usage - u.borrowed),
                    borrowed: f64::from(u.borrowed),
                    lent_out: u.lent_out,
                    stopping: f64::from(u.stopping),
                    runnable: runnable
                        .get(&(u.share.clone(), u.instance_type.clone()))
                        .copied()
                        .unwrap_or(0) as f64,
                    protection: q.shares.get(&u.share).and_then(|s| {
                        let (min, cap) = qm_api::validate::protection(&s.tags);
                        qm_api::qm::protection_words(min, cap)
                    }),
                    strategy: rec.map(|s| s.sharing.strategy.as_str().to_string()),
                    borrow_limit: rec.map(|s| s.sharing.borrow_limit.unwrap_or(-1)),
                    in_share_preemption: rec.map(|s| {
                        s.preemption.in_share_preemption
                            == QuotaShareInSharePreemptionState::Enabled
                    }),
                }
            })
            .collect();
        let idle_while_waiting = self.idle_while_waiting(&q.name);
        let pool = self.core.pool(&q.name).unwrap_or_default();
        let flows = self.core.flows(&q.name).unwrap_or_default();
        qm_api::qm::QueueUsage {
            job_queue: q.name.clone(),
            shares,
            pool: pool
                .into_iter()
                .map(|p| qm_api::qm::Pool {
                    capacity_unit: p.instance_type,
                    environment_max: p.environment,
                    physical: p.physical,
                    used: p.used,
                    free: p.free,
                })
                .collect(),
            flows: flows
                .into_iter()
                .filter(|f| q.shares.contains_key(&f.lender) && q.shares.contains_key(&f.borrower))
                .map(|f| qm_api::qm::Flow {
                    capacity_unit: f.instance_type,
                    lender: f.lender,
                    borrower: f.borrower,
                    instances: f.instances,
                })
                .collect(),
            idle_while_waiting,
            fairness: self.queue_fairness(q),
        }
    }

    /// Instances of the queue free while jobs that fit them wait, per type, with the cause
    /// (the core's figure, named for clients).
    pub(crate) fn idle_while_waiting(&self, queue: &str) -> Vec<qm_api::qm::IdleWhileWaiting> {
        self.core
            .idle_while_waiting_in(queue)
            .into_iter()
            .map(|e| {
                let rec = self.jobs.get(&e.job);
                qm_api::qm::IdleWhileWaiting {
                    capacity_unit: e.instance_type,
                    free: e.free,
                    idle: e.wasted,
                    cause: e.cause.code().to_string(),
                    job_id: rec.map_or_else(|| e.job.to_string(), |r| r.id.clone()),
                    job_name: rec.map_or_else(String::new, |r| r.request.job_name.clone()),
                }
            })
            .collect()
    }

    /// Every queue's shares and depth now, for the dashboard's history.
    pub fn sample(&self, at: i64) -> crate::facts::Sample {
        use crate::facts::{QueueSample, ShareSample};
        let queues = self.queues.values().map(|q| {
            let mut shares: BTreeMap<&str, ShareSample> = BTreeMap::new();
            for u in self.core.usage(&q.name).unwrap_or_default() {
                let Some((name, _)) = q.shares.get_key_value(&u.share) else {
                    continue;
                };
                let s = shares.entry(name).or_insert_with(|| ShareSample {
                    share: name.as_str().into(),
                    own: 0,
                    borrowed: 0,
                    preemptions: 0,
                });
                s.own += u.usage - u.borrowed;
                s.borrowed += u.borrowed;
            }
            for ((queue, share), n) in self.preemptions.range((q.name.clone(), String::new())..) {
                if *queue != q.name {
                    break;
                }
                if let Some(s) = shares.get_mut(share.as_str()) {
                    s.preemptions = *n;
                }
            }
            QueueSample {
                queue: q.name.as_str().into(),
                runnable: q.runnable.len() as u32,
                shares: shares.into_values().collect(),
            }
        });
        crate::facts::Sample {
            at,
            queues: queues.collect(),
        }
    }

    /// The attempt whose logs a client asks for.
    fn log_info(&self, job_id: &str, attempt: Option<u32>) -> Result<LogInfo, ApiError> {
        let core = self.job_core("jobId", job_id)?;
        let rec = &self.jobs[&core];
        let latest = rec.attempt_counter;
        if latest == 0 {
            return Err(ApiError::client(format!(
                "job '{job_id}' has not started yet, so it has no logs; `qm explain` says why it waits"
            )));
        }
        let n = attempt.unwrap_or(latest);
        if n == 0 || n > latest {
            return Err(ApiError::client(format!(
                "attempt: job '{job_id}' has attempts 1 to {latest}; ask for one of them"
            )));
        }
        let running = rec.live.as_ref().is_some_and(|l| l.number == n);
        Ok(LogInfo {
            job_id: rec.id.clone(),
            attempt: n,
            finished: !running,
        })
    }

    /// Whether any job waits (the driver re-runs the pass periodically only then).
    pub fn has_waiting(&self) -> bool {
        self.queues.values().any(|q| !q.runnable.is_empty())
    }
}

/// SageMaker names each attempt's training job after the payload's name plus a unique suffix.
fn training_job_name(rec: &JobRec, payload: &TrainingPayload, attempt: AttemptId) -> String {
    let base: String = rec.sagemaker_name(payload).chars().take(20).collect();
    format!("AWSBatch{base}{:016x}{:016x}", rec.core.0, attempt.0)
}

/// `OWN_CAPACITY - ...` or `BORROWED - ...`: whether a running job can lose its capacity to a
/// reclaim (issue 19's interruption contracts; docs/scheduling.md).
fn capacity_reason(share: &str, b: &qm_core::Borrowing) -> String {
    if b.borrowed == 0 {
        let firm = if !b.interruptible {
            format!("; {}", qm_api::class::FIRM_NOTE)
        } else if !b.borrows {
            format!("; {}", qm_api::class::UNVERIFIED_NOTE)
        } else {
            String::new()
        };
        return format!("OWN_CAPACITY - runs within quota share {share}'s own limit{firm}");
    }
    let from = match b.lenders.as_slice() {
        [] => "other shares".to_string(),
        names => names.join(", "),
    };
    let of = if b.borrowed == b.count {
        format!("its {} instances", b.count)
    } else {
        format!("{} of its {} instances", b.borrowed, b.count)
    };
    let of = if b.count == 1 {
        "its instance".to_string()
    } else {
        of
    };
    format!("BORROWED - {of} borrowed from {from}; may be reclaimed")
}
