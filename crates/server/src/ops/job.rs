//! Service jobs: submit, describe, list, update priority, terminate. A job is a core job plus
//! the record the API shows (attempts, preemptions, timestamps); the core decides, the record
//! remembers.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use qm_api::*;
use qm_core::{Input, JobId, JobSpec};

use crate::reply::{reply, Reply};
use crate::state::{AttemptRec, JobRec, State};

impl State {
    /// Core id of an existing job.
    pub(crate) fn job_core(&self, field: &str, id: &str) -> Result<JobId, ApiError> {
        let id = match self.arns.parse(field, id) {
            Ok(Resource::ServiceJob(id)) => id,
            _ => id.to_string(),
        };
        self.by_id.get(&id).copied().ok_or_else(|| {
            ApiError::client(format!(
                "{field}: service job '{id}' does not exist; check the id returned by SubmitServiceJob (ListServiceJobs shows the jobs of a queue; a job that finished more than [retention] finished_jobs_days ago is in the server's archive instead)"
            ))
        })
    }

    fn submit_response(&self, core: JobId) -> Result<Reply, ApiError> {
        let rec = &self.jobs[&core];
        reply(SubmitServiceJobResponse {
            job_arn: Some(self.arns.service_job(&rec.id)),
            job_name: rec.request.job_name.clone(),
            job_id: rec.id.clone(),
        })
    }

    /// Refuses a submit for an instance type no pool of the executor provides (it would wait
    /// for ever), or one that would queue more RUNNABLE jobs than `[limits]` allows in the
    /// share or the queue. Only live: see [`State::admission`].
    fn admit(&self, queue: &str, share: &str, payload: &TrainingPayload) -> Result<(), ApiError> {
        let Some(limits) = &self.admission else {
            return Ok(());
        };
        let instance_type = &payload.instance_type;
        check_file_roots(payload, &limits.file_roots)?;
        if payload.entrypoint.is_empty() && !limits.runs_images {
            return Err(ApiError::client(
                "serviceRequestPayload.AlgorithmSpecification.ContainerEntrypoint is missing: this server runs \
                 the entrypoint as a host process ([executor] runtime = \"host\") and does not run TrainingImage, \
                 so ContainerEntrypoint must name the program to run, e.g. [\"python3\", \"train.py\"] \
                 (or the operator sets runtime = \"podman\")",
            ));
        }
        if limits.runs_images {
            if let Some(image) = payload
                .training_image
                .as_deref()
                .filter(|i| !qm_executor::valid_image(i))
            {
                return Err(ApiError::client(format!(
                    "serviceRequestPayload.AlgorithmSpecification.TrainingImage '{}' is not an image reference: use letters, digits and ._/:@- starting with a letter or digit, e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/team/trainer:latest",
                    image.chars().take(100).collect::<String>().escape_debug()
                )));
            }
        }
        if payload.entrypoint.is_empty() && payload.training_image.is_none() {
            return Err(ApiError::client(
                "serviceRequestPayload.AlgorithmSpecification: give TrainingImage (the image whose entrypoint runs) or ContainerEntrypoint",
            ));
        }
        if !self.capacity.contains_key(instance_type) {
            return Err(ApiError::client(format!(
                "serviceRequestPayload.ResourceConfig.InstanceType: no pool of this server provides '{instance_type}' (it offers {}): ask for one of those, or add the type to the executor's pools ([[executor.pool]], or [[executor.slurm.instance]] for Slurm) and reload the config (qm reload, or SIGHUP)",
                self.capacity.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let key = (queue.to_string(), self.queues[queue].generation);
        let queued = |share| {
            self.by_status
                .jobs(&key, share, ServiceJobStatus::Runnable)
                .map_or(0, |jobs| jobs.len() as u64)
        };
        let n = queued(Some(share));
        if n >= limits.per_share {
            return Err(ApiError::client(format!(
                "quotaShareName: quota share '{share}' of job queue '{queue}' already holds {n} RUNNABLE jobs, its limit ([limits] queued_jobs_per_share = {}); submit again once some have started",
                limits.per_share
            )));
        }
        let n = queued(None);
        if n >= limits.per_queue {
            return Err(ApiError::client(format!(
                "jobQueue: job queue '{queue}' already holds {n} RUNNABLE jobs, its limit ([limits] queued_jobs_per_queue = {}); submit again once some have started",
                limits.per_queue
            )));
        }
        Ok(())
    }

    pub(crate) fn submit_service_job(
        &mut self,
        job_id: &str,
        r: &SubmitServiceJobRequest,
        principal: Option<&str>,
    ) -> Result<Reply, ApiError> {
        validate_submit_service_job(r)?;
        if let Some(token) = &r.client_token {
            if let Some(core) = self.token_job(token, r)? {
                return self.submit_response(core);
            }
        }
        let (queue, share) = self.open_queue_and_share(r)?;
        let q = &self.queues[&queue];
        let payload = TrainingPayload::parse(&r.service_request_payload)?;
        self.admit(&queue, &share, &payload)?;
        let core = JobId(self.next_job);
        let priority = r.scheduling_priority.unwrap_or(0);
        let class = qm_api::class::resolve(
            &queue,
            &share,
            &q.tags,
            &q.shares[&share].tags,
            r.tags.as_ref(),
            priority,
        )?;
        // The API's spec of the submission, with what only the server knows: the share it
        // resolved and the class's contract (the queue's and share's tags).
        self.core_apply(Input::Submit(JobSpec {
            share: share.clone(),
            interruptible: class.as_ref().is_none_or(|c| c.def.interruptible),
            borrows: class
                .as_ref()
                .is_none_or(|c| self.class_may_borrow(&queue, &c.name, c.def.borrow)),
            ..qm_api::job_spec(core, &queue, r, &payload)
        }))?;
        self.next_job += 1;
        let rec = JobRec {
            core,
            id: job_id.to_string(),
            queue: self.intern(&queue),
            queue_generation: self.queues[&queue].generation,
            share: self.intern(&share),
            request: std::sync::Arc::new(r.clone()),
            priority,
            created_at: self.now,
            scheduled_at: None,
            started_at: None,
            stopped_at: None,
            status: ServiceJobStatus::Runnable,
            status_reason: None,
            attempts: Vec::new(),
            live: None,
            preempted: VecDeque::new(),
            preempted_count: 0,
            is_terminated: false,
            attempt_counter: 0,
            tags: r.tags.clone().unwrap_or_default(),
            latest_training_job: None,
            principal: principal.map(str::to_string),
            class: class.map(|c| c.name),
        };
        self.insert_submitted(rec);
        self.submit_response(core)
    }

    /// The job a client token was already used for, if it was, with the same request
    /// (`r`, its token aside); the same token with another request is refused.
    fn token_job(
        &self,
        token: &str,
        r: &SubmitServiceJobRequest,
    ) -> Result<Option<JobId>, ApiError> {
        let Some(core) = self.tokens.get(token) else {
            return Ok(None);
        };
        let Some(rec) = self.jobs.get(core) else {
            // Retired with its job: the token is free again.
            return Ok(None);
        };
        let untokened = |r: &SubmitServiceJobRequest| SubmitServiceJobRequest {
            client_token: None,
            ..r.clone()
        };
        if untokened(&rec.request) == untokened(r) {
            return Ok(Some(*core));
        }
        Err(ApiError::client(format!(
            "clientToken: '{token}' was already used for a different request; send the identical request to get the original job back, or use a new token"
        )))
    }

    /// The job queue and quota share a submit names, refused unless both exist and accept
    /// jobs (the queue's service environment too).
    fn open_queue_and_share(
        &self,
        r: &SubmitServiceJobRequest,
    ) -> Result<(String, String), ApiError> {
        let queue = self.queue_name("jobQueue", &r.job_queue)?;
        let q = &self.queues[&queue];
        if q.state == JQState::Disabled {
            return Err(ApiError::client(format!(
                "jobQueue: job queue '{queue}' is DISABLED and accepts no jobs; enable it with UpdateJobQueue"
            )));
        }
        if self.environments[&q.environment].state == ServiceEnvironmentState::Disabled {
            return Err(ApiError::client(format!(
                "jobQueue: the service environment '{}' of job queue '{queue}' is DISABLED; enable it with UpdateServiceEnvironment",
                q.environment
            )));
        }
        let Some(share) = r.quota_share_name.clone() else {
            return Err(ApiError::client(format!(
                "quotaShareName: job queue '{queue}' has a quota-share scheduling policy, so every job names its quota share; pass one of: {}",
                q.shares.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        match q.shares.get(&share) {
            None => Err(ApiError::client(format!(
                "quotaShareName: quota share '{share}' does not exist in job queue '{queue}'; pass one of: {}",
                q.shares.keys().cloned().collect::<Vec<_>>().join(", ")
            ))),
            Some(s) if s.state == QuotaShareState::Disabled => Err(ApiError::client(format!(
                "quotaShareName: quota share '{share}' is DISABLED and accepts no new jobs; enable it with UpdateQuotaShare or submit to another share"
            ))),
            Some(_) => Ok((queue, share)),
        }
    }

    /// Files a submitted job's record: in its queue's runnable set, under its id and its
    /// client token, and in the status index.
    fn insert_submitted(&mut self, rec: JobRec) {
        let core = rec.core;
        self.queues
            .get_mut(&*rec.queue)
            .expect("checked")
            .runnable
            .insert((Reverse(rec.priority), core));
        self.by_id.insert(rec.id.clone(), core);
        if let Some(token) = &rec.request.client_token {
            self.tokens.insert(token.clone(), core);
        }
        self.by_status.insert(&rec);
        self.jobs.insert(core, Arc::new(rec));
    }

    pub(crate) fn update_service_job(
        &mut self,
        r: &UpdateServiceJobRequest,
    ) -> Result<Reply, ApiError> {
        validate_update_service_job(r)?;
        let core = self.job_core("jobId", &r.job_id)?;
        let rec = &self.jobs[&core];
        if matches!(
            rec.status,
            ServiceJobStatus::Succeeded | ServiceJobStatus::Failed
        ) {
            return Err(ApiError::client(format!(
                "jobId: service job '{}' is {} and can no longer change priority",
                rec.id,
                rec.status.as_str()
            )));
        }
        let (old, queue) = (rec.priority, rec.queue.clone());
        // The class's maximum holds for a change as at submission.
        let class_max = rec.class.as_ref().and_then(|c| {
            let def = qm_api::class::defined(&self.queues.get(&*queue)?.tags).remove(c)?;
            def.max_priority.map(|m| (c.clone(), m))
        });
        if let Some((class, max)) = class_max.filter(|(_, m)| r.scheduling_priority > *m as i32) {
            return Err(ApiError::client(format!(
                "schedulingPriority: {} is above the maximum of class '{class}' ({max}); give {max} or lower",
                r.scheduling_priority
            )));
        }
        self.core_apply(Input::UpdatePriority {
            job: core,
            priority: r.scheduling_priority as u32,
        })?;
        if let Some(q) = self.queues.get_mut(&*queue) {
            if q.runnable.remove(&(Reverse(old), core)) {
                q.runnable.insert((Reverse(r.scheduling_priority), core));
            }
        }
        let rec = self
            .jobs
            .get_mut(&core)
            .map(Arc::make_mut)
            .expect("checked");
        rec.priority = r.scheduling_priority;
        reply(UpdateServiceJobResponse {
            job_arn: Some(self.arns.service_job(&rec.id)),
            job_name: Some(rec.request.job_name.clone()),
            job_id: Some(rec.id.clone()),
        })
    }

    /// Terminates one job; finished jobs are left as they are.
    fn terminate(&mut self, core: JobId, reason: &str) -> Result<(), ApiError> {
        let rec = self
            .jobs
            .get_mut(&core)
            .map(Arc::make_mut)
            .expect("caller checked");
        if matches!(
            rec.status,
            ServiceJobStatus::Succeeded | ServiceJobStatus::Failed
        ) {
            return Ok(());
        }
        self.core_apply(Input::Terminate {
            job: core,
            reason: reason.to_string(),
        })?;
        self.mark_terminated(&[core]);
        Ok(())
    }

    pub(crate) fn terminate_service_job(
        &mut self,
        r: &TerminateServiceJobRequest,
    ) -> Result<Reply, ApiError> {
        if r.reason.is_empty() {
            return Err(ApiError::client(
                "reason: is empty; say why the job is terminated (it becomes the job's statusReason)",
            ));
        }
        let core = self.job_core("jobId", &r.job_id)?;
        self.terminate(core, &r.reason)?;
        reply(TerminateServiceJobResponse {})
    }

    /// A drill: the job's running attempt is stopped as a reclaim would stop it (SIGTERM,
    /// grace, back to RUNNABLE, counted as a preemption).
    pub(crate) fn preempt_service_job(
        &mut self,
        job_id: &str,
        reason: &str,
    ) -> Result<Reply, ApiError> {
        let core = self.job_core("jobId", job_id)?;
        let rec = &self.jobs[&core];
        // Only RUNNING: a job still starting (under Slurm, perhaps queued in Slurm for a long
        // time) has no resume path to check, and a drill would only cost it a retry.
        let running = rec.status == ServiceJobStatus::Running
            && rec.live.as_ref().is_some_and(|l| l.stop_at.is_none());
        if !running {
            return Err(ApiError::client(format!(
                "jobId: job {} ({}) is {}{}: only a running job can be preempted for a drill",
                rec.id,
                rec.request.job_name,
                rec.status,
                if rec.live.is_some() {
                    " and already stopping"
                } else {
                    ""
                }
            )));
        }
        let (id, name) = (rec.id.clone(), rec.request.job_name.clone());
        self.core_apply(Input::Drill {
            job: core,
            reason: reason.to_string(),
        })?;
        reply(qm_api::qm::PreemptResponse {
            job_id: id,
            job_name: name,
        })
    }

    pub(crate) fn terminate_service_jobs(
        &mut self,
        r: &TerminateServiceJobsRequest,
    ) -> Result<Reply, ApiError> {
        validate_terminate_service_jobs(r)?;
        let mut successful = Vec::new();
        let mut errors = Vec::new();
        for id in &r.jobs {
            match self.job_core("jobs", id) {
                // Unknown ids count as successful (AWS behaviour).
                Err(_) => successful.push(id.clone()),
                Ok(core) => match self.terminate(core, &r.reason) {
                    Ok(()) => successful.push(id.clone()),
                    Err(e) => errors.push(TerminateServiceJobsErrorDetail {
                        job: id.clone(),
                        code: e.error_type().to_string(),
                        message: e.message().to_string(),
                    }),
                },
            }
        }
        reply(TerminateServiceJobsResponse { successful, errors })
    }

    fn resource_id(&self, training_job: &str) -> ServiceResourceId {
        ServiceResourceId {
            name: ServiceResourceIdName::TrainingJobArn,
            value: self.arns.training_job(training_job),
        }
    }

    fn capacity_usage(&self, rec: &JobRec) -> (String, f64) {
        let (unit, count) = self.unit_of(rec);
        (unit, f64::from(count))
    }

    fn attempt_detail(&self, a: &AttemptRec) -> ServiceJobAttemptDetail {
        ServiceJobAttemptDetail {
            service_resource_id: Some(self.resource_id(&a.training_job_name)),
            started_at: Some(a.started_at),
            stopped_at: a.stopped_at,
            status_reason: a.status_reason.clone(),
        }
    }

    pub(crate) fn describe_service_job(
        &self,
        r: &DescribeServiceJobRequest,
    ) -> Result<Reply, ApiError> {
        let core = self.job_core("jobId", &r.job_id)?;
        let rec = &self.jobs[&core];
        let (unit, quantity) = self.capacity_usage(rec);
        let preemption_summary = (rec.preempted_count > 0).then(|| ServiceJobPreemptionSummary {
            preempted_attempt_count: Some(rec.preempted_count as i32),
            recent_preempted_attempts: Some(
                rec.preempted
                    .iter()
                    .take(crate::state::PREEMPTED_WINDOW)
                    .map(|a| ServiceJobPreemptedAttempt {
                        service_resource_id: Some(self.resource_id(&a.training_job_name)),
                        started_at: Some(a.started_at),
                        stopped_at: a.stopped_at,
                        status_reason: a.status_reason.clone(),
                    })
                    .collect(),
            ),
        });
        reply(DescribeServiceJobResponse {
            attempts: Some(
                rec.attempts
                    .iter()
                    .map(|a| self.attempt_detail(a))
                    .collect(),
            ),
            capacity_usage: Some(vec![ServiceJobCapacityUsageDetail {
                capacity_unit: Some(unit),
                quantity: Some(quantity),
            }]),
            created_at: Some(rec.created_at),
            is_terminated: Some(rec.is_terminated),
            job_arn: Some(self.arns.service_job(&rec.id)),
            job_id: rec.id.clone(),
            job_name: rec.request.job_name.clone(),
            job_queue: self.arns.job_queue(&rec.queue),
            latest_attempt: rec
                .latest_training_job
                .as_ref()
                .map(|t| LatestServiceJobAttempt {
                    service_resource_id: Some(self.resource_id(t)),
                }),
            retry_strategy: rec.request.retry_strategy.clone(),
            scheduled_at: rec.scheduled_at,
            scheduling_priority: Some(rec.priority),
            service_request_payload: Some(rec.request.service_request_payload.clone()),
            service_job_type: ServiceJobType::SagemakerTraining,
            share_identifier: None,
            quota_share_name: Some(rec.share.to_string()),
            preemption_configuration: rec.request.preemption_configuration.clone(),
            preemption_summary,
            started_at: rec.started_at.unwrap_or(0),
            status: rec.status,
            status_reason: self.status_reason(rec),
            stopped_at: rec.stopped_at,
            tags: Self::described_tags(rec),
            timeout_config: rec.request.timeout_config.clone(),
        })
    }

    /// `GET /qm/v1/jobs/{job}/attempt`: the attempt holding capacity now (`qm job` shows it
    /// first; the AWS shapes only list ended attempts).
    pub(crate) fn running_attempt(&self, job_id: &str) -> Result<Reply, ApiError> {
        let core = self.job_core("jobId", job_id)?;
        let rec = &self.jobs[&core];
        let running = rec.live.as_ref().map(|a| {
            let hosts = (1..=a.count)
                .map(|i| qm_api::qm::AttemptHost {
                    name: qm_executor::host_name(i),
                    pid: a.pids.get(i as usize - 1).copied(),
                })
                .collect();
            qm_api::qm::RunningAttempt {
                number: a.number,
                training_job_name: a.training_job_name.clone(),
                instance_type: a.instance_type.clone(),
                count: a.count,
                hosts,
                granted_at: a.started_at,
                running_at: a.running_at,
                last_checkpoint_at: a.checkpoint_at,
                stopping_since: a.stop_at,
                stop_reason: a.stop_reason.clone(),
                last_step: a.steps.last,
                checkpoint_step: a.steps.checkpoint,
            }
        });
        reply(qm_api::qm::JobAttemptNow {
            running,
            resumes: Self::resumes(rec),
            usage: Self::usage(rec),
        })
    }

    /// What each ended attempt used, oldest first.
    fn usage(rec: &JobRec) -> Vec<qm_api::qm::AttemptUsage> {
        let mut ended: Vec<qm_api::qm::AttemptUsage> = rec
            .attempts
            .iter()
            .chain(&rec.preempted)
            .filter_map(|a| {
                let u = a.usage?;
                Some(qm_api::qm::AttemptUsage {
                    attempt: a.number,
                    cpu_seconds: u.cpu_millis as f64 / 1000.0,
                    peak_memory_bytes: u.peak_memory_bytes,
                    gpu_utilization_percent: u.gpu_utilization_percent,
                    peak_gpu_memory_bytes: u.peak_gpu_memory_bytes,
                })
            })
            .collect();
        // An ended attempt is filed once: under `attempts`, or under `preempted`.
        ended.sort_by_key(|u| u.attempt);
        ended
    }

    /// How each attempt after a preemption resumed ([`crate::resume`]); nothing to compare
    /// for a job never preempted.
    fn resumes(rec: &JobRec) -> Vec<qm_api::qm::ResumeRecord> {
        if rec.preempted.is_empty() {
            return Vec::new();
        }
        // The live attempt first: while it stops after a preemption, `preempted` holds a copy
        // of it taken when the preemption was decided, without the steps reported since.
        let all: Vec<&AttemptRec> = rec
            .live
            .as_deref()
            .into_iter()
            .chain(&rec.preempted)
            .chain(&rec.attempts)
            .collect();
        crate::resume::resumes(&all)
    }

    /// The job's tags, plus who submitted it as `qm:submitted-by` (a qm extension, shown by
    /// DescribeServiceJob only: the tag APIs keep the client's own tags).
    fn described_tags(rec: &JobRec) -> Option<BTreeMap<String, String>> {
        let mut tags = rec.tags.clone();
        if let Some(p) = &rec.principal {
            tags.insert(TAG_SUBMITTED_BY.to_string(), p.clone());
        }
        (!tags.is_empty()).then_some(tags)
    }

    fn summary(&self, rec: &JobRec) -> ServiceJobSummary {
        let (unit, quantity) = self.capacity_usage(rec);
        ServiceJobSummary {
            latest_attempt: rec
                .latest_training_job
                .as_ref()
                .map(|t| LatestServiceJobAttempt {
                    service_resource_id: Some(self.resource_id(t)),
                }),
            capacity_usage: Some(vec![ServiceJobCapacityUsageSummary {
                capacity_unit: Some(unit),
                quantity: Some(quantity),
            }]),
            created_at: Some(rec.created_at),
            job_arn: Some(self.arns.service_job(&rec.id)),
            job_id: rec.id.clone(),
            job_name: rec.request.job_name.clone(),
            scheduled_at: rec.scheduled_at,
            service_job_type: ServiceJobType::SagemakerTraining,
            share_identifier: None,
            quota_share_name: Some(rec.share.to_string()),
            status: Some(rec.status),
            status_reason: self.status_reason(rec),
            started_at: rec.started_at,
            stopped_at: rec.stopped_at,
            is_terminated: rec.is_terminated.then_some(true),
            scheduling_priority: Some(rec.priority),
            submitted_by: rec.principal.clone(),
        }
    }

    pub(crate) fn list_service_jobs(&self, r: &ListServiceJobsRequest) -> Result<Reply, ApiError> {
        let max = max_results("maxResults", r.max_results, 100)?;
        // A queue is its name and generation: jobs of a deleted queue of the same name are not
        // listed under the new one.
        let queue = match &r.job_queue {
            Some(q) => Some(self.queue_key(q)?),
            None => None,
        };
        let filter = parse_filters(r.filters.as_deref())?;
        // Without a filter AWS lists RUNNING jobs only; a filter lists every status unless it
        // is one of those that combine with jobStatus.
        let status = match &filter {
            Some(f) if !f.keeps_status_filter() => None,
            _ => Some(r.job_status.unwrap_or(ServiceJobStatus::Running)),
        };
        let below = list_start(r.next_token.as_deref())?;
        // With a queue and a status, walk only the jobs in that status (of that share, with
        // the QUOTA_SHARE_NAME filter); otherwise every job.
        let indexed = match (&queue, status) {
            (Some(q), Some(st)) => {
                let share = match &filter {
                    Some(JobFilter::QuotaShareName(name)) => Some(name.as_str()),
                    _ => None,
                };
                Some(self.by_status.jobs(q, share, st))
            }
            _ => None,
        };
        let candidates: Box<dyn Iterator<Item = (JobId, &JobRec)>> = match indexed {
            Some(set) => Box::new(
                set.into_iter()
                    .flat_map(move |s| s.range(..below).rev())
                    .filter_map(|core| self.jobs.get(core).map(|r| (*core, &**r))),
            ),
            None => Box::new(self.jobs.range(..below).rev().map(|(c, r)| (*c, &**r))),
        };
        let mut out = Vec::new();
        let mut next = None;
        // Newest first.
        for (core, rec) in candidates {
            if !listed(rec, queue.as_ref(), status, filter.as_ref()) {
                continue;
            }
            if out.len() == max {
                next = Some(encode_token(&(core.0 + 1).to_string()));
                break;
            }
            out.push(self.summary(rec));
        }
        reply(ListServiceJobsResponse {
            job_summary_list: out,
            next_token: next,
        })
    }

    /// A job queue as jobs record it: its name and generation.
    fn queue_key(&self, queue: &str) -> Result<(String, u64), ApiError> {
        let name = self.queue_name("jobQueue", queue)?;
        let generation = self.queues[&name].generation;
        Ok((name, generation))
    }

    /// Tags of a job, for the tag operations.
    pub(crate) fn job_tags_mut(&mut self, id: &str) -> Option<&mut BTreeMap<String, String>> {
        let core = *self.by_id.get(id)?;
        self.jobs
            .get_mut(&core)
            .map(Arc::make_mut)
            .map(|r| &mut r.tags)
    }
}

/// The core id below which a listing starts: `nextToken`'s, else the newest job's and up.
fn list_start(next_token: Option<&str>) -> Result<JobId, ApiError> {
    let before: Option<u64> = match next_token {
        Some(t) => Some(decode_token("nextToken", t)?.parse().map_err(|_| {
            ApiError::client(
                "nextToken: is not a token this server issued; pass the nextToken of the previous response unchanged",
            )
        })?),
        None => None,
    };
    Ok(before.map_or(JobId::MAX, JobId))
}

/// Whether ListServiceJobs lists `rec`: of the queue (name and generation) and in the status
/// asked for, if any, and passing the filter.
fn listed(
    rec: &JobRec,
    queue: Option<&(String, u64)>,
    status: Option<ServiceJobStatus>,
    filter: Option<&JobFilter>,
) -> bool {
    if queue.is_some_and(|(q, g)| **q != *rec.queue || *g != rec.queue_generation) {
        return false;
    }
    if status.is_some_and(|s| s != rec.status) {
        return false;
    }
    filter.is_none_or(|f| {
        f.matches(
            &rec.request.job_name,
            rec.created_at,
            None,
            Some(&*rec.share),
        )
    })
}

/// Refuses a payload whose `file://` URIs lie outside `[storage] file_roots`: the executor
/// would refuse them at launch, after the job waited for capacity.
fn check_file_roots(
    payload: &TrainingPayload,
    roots: &[std::path::PathBuf],
) -> Result<(), ApiError> {
    let field = "serviceRequestPayload";
    let uris = payload
        .channels
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                format!("{field}.InputDataConfig[{i}].DataSource.S3DataSource.S3Uri"),
                &c.uri,
            )
        })
        .chain(
            payload
                .checkpoint_s3_uri
                .iter()
                .map(|u| (format!("{field}.CheckpointConfig.S3Uri"), u)),
        )
        .chain(
            payload
                .output_path
                .iter()
                .map(|u| (format!("{field}.OutputDataConfig.S3OutputPath"), u)),
        );
    for (at, uri) in uris {
        if !uri.starts_with("file://") {
            continue;
        }
        // The storage's own parse: a `.` or `..` component makes it no path at all.
        let path = match qm_executor::StorageUri::parse(uri).map(|u| u.location) {
            Ok(qm_executor::StorageLocation::File(path)) => Some(path),
            _ => None,
        };
        if !path.is_some_and(|p| roots.iter().any(|r| p.starts_with(r))) {
            let allowed: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
            return Err(ApiError::client(format!(
                "{at}: '{uri}' is not under a directory of this server's [storage] file_roots ({}): use an s3:// URI, or a file:// path under one of those",
                if allowed.is_empty() { "none: file:// is not allowed".to_string() } else { allowed.join(", ") }
            )));
        }
    }
    Ok(())
}
