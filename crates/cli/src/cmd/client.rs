//! The client commands (`qm submit`, `qm jobs`, `qm job`, `qm logs`, `qm explain`,
//! `qm priority`, `qm terminate`, `qm shares`, `qm watch`): flags, printing and exit codes.
//! The requests and the formatting live in `qm_cli::client`.
//!
//! Exit codes: 0 on success, 1 when the server refuses or cannot be reached (the message is
//! printed as `error: <message>`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use qm_api::{DescribeServiceJobResponse, ServiceJobStatus};
use qm_cli::client::explain::{explain, Context};
use qm_cli::client::format::{
    job_details, jobs_table, queue_name, reason_code, shares_table, watch_frame,
};
use qm_cli::client::http::{looks_like_job_id, LogStream, QueueUsage, ALL_STATUSES};
use qm_cli::client::submit::{request, SubmitSpec};
use qm_cli::client::time::now_ms;
use qm_cli::client::{Client, ClientError};
use serde_json::json;

/// How often `qm logs --follow` asks for more.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts.
    Json,
}

/// Flags every client command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// The server's URL [default: $QM_ENDPOINT, else http://127.0.0.1:7611].
    #[arg(long)]
    endpoint: Option<String>,
    /// How to print the result.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

/// `--queue`, for the commands that need one.
#[derive(Debug, Args)]
pub struct QueueArg {
    /// The job queue (default: the only queue, when the server has exactly one).
    #[arg(long)]
    queue: Option<String>,
}

/// The client commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Submit a job: the command after `--` runs as its ContainerEntrypoint (or send a
    /// SageMaker CreateTrainingJob payload with --payload). Prints the job id.
    Submit(SubmitArgs),
    /// List jobs, newest first: id, name, share, priority, status, reason, age.
    Jobs(JobsArgs),
    /// Show one job: status, capacity, attempts and preemption history.
    Job(IdArgs),
    /// Print a job's log (the latest attempt's stdout by default).
    Logs(LogsArgs),
    /// Say in plain words why a job waits: what it needs, what holds it, what would free it.
    Explain(IdArgs),
    /// Change a job's scheduling priority.
    Priority(PriorityArgs),
    /// Terminate a job.
    Terminate(TerminateArgs),
    /// Preempt a running job as a reclaim would (a drill of its resume path): SIGTERM, the
    /// grace period, back to the queue, counted as a preemption. Admins and the share's leads.
    Preempt(PreemptArgs),
    /// Capacity per share and instance type: entitled, own use, borrowed, lent out, runnable.
    Shares(SharesArgs),
    /// A live view of the shares and the jobs table, redrawn until Ctrl-C.
    Watch(WatchArgs),
}

/// `qm submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    queue: QueueArg,
    /// The quota share to charge.
    #[arg(long)]
    share: String,
    /// The job name.
    #[arg(long)]
    name: String,
    /// The scheduling priority (higher runs first).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// The instance type (default ml.g5.xlarge, or the payload's).
    #[arg(long)]
    instance_type: Option<String>,
    /// The number of instances (default 1, or the payload's).
    #[arg(long)]
    count: Option<u32>,
    /// A SageMaker CreateTrainingJob request (JSON) to send; flags given override it.
    #[arg(long)]
    payload: Option<PathBuf>,
    /// Keep a job that can never run as configured (the server accepts it, as AWS does, and
    /// it waits until limits change); without this flag such a job is terminated and `qm
    /// submit` fails.
    #[arg(long)]
    allow_never_runs: bool,
    /// The job's class (its tag `qm:class`): one the job queue defines and the share allows;
    /// without it the share's default class, if any.
    #[arg(long)]
    class: Option<String>,
    /// The command to run, after `--`.
    #[arg(last = true)]
    command: Vec<String>,
}

/// `qm jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    queue: QueueArg,
    /// Only this quota share's jobs.
    #[arg(long)]
    share: Option<String>,
    /// Only jobs with this status (RUNNABLE, RUNNING, SUCCEEDED, ...), or `all`.
    #[arg(long, default_value = "all")]
    status: String,
}

/// A command about one job.
#[derive(Debug, Args)]
pub struct IdArgs {
    #[command(flatten)]
    common: Common,
    /// The job: its id, or its name when one job has it.
    id: String,
}

/// `qm logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The server's URL [default: $QM_ENDPOINT, else http://127.0.0.1:7611]. (No --output:
    /// a log is printed as the job wrote it.)
    #[arg(long)]
    endpoint: Option<String>,
    /// The job: its id, or its name when one job has it.
    id: String,
    /// The attempt (default: the latest).
    #[arg(long)]
    attempt: Option<u32>,
    /// Print stderr instead of stdout.
    #[arg(long)]
    stderr: bool,
    /// Keep printing until the attempt ends.
    #[arg(long, short)]
    follow: bool,
}

/// `qm priority`.
#[derive(Debug, Args)]
pub struct PriorityArgs {
    #[command(flatten)]
    common: Common,
    /// The job: its id, or its name when one job has it.
    id: String,
    /// The new scheduling priority.
    #[arg(allow_negative_numbers = true)]
    priority: i32,
}

/// `qm terminate`.
#[derive(Debug, Args)]
pub struct TerminateArgs {
    #[command(flatten)]
    common: Common,
    /// The job: its id, or its name when one job has it.
    id: String,
    /// Why (recorded as the job's status reason).
    #[arg(long, default_value = "Terminated with qm terminate")]
    reason: String,
}

/// `qm preempt`.
#[derive(Debug, Args)]
pub struct PreemptArgs {
    #[command(flatten)]
    common: Common,
    /// The job: its id, or its name when one job has it.
    id: String,
    /// Why (recorded in the attempt's status reason and the audit log).
    #[arg(long)]
    reason: Option<String>,
}

/// `qm shares`.
#[derive(Debug, Args)]
pub struct SharesArgs {
    #[command(flatten)]
    common: Common,
    /// Only this queue (default: every queue).
    #[arg(long)]
    queue: Option<String>,
}

/// `qm watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    queue: QueueArg,
    /// Seconds between redraws.
    #[arg(long, default_value_t = 2.0)]
    interval: f64,
    /// Print one frame and exit (no terminal control codes).
    #[arg(long)]
    once: bool,
}

/// Runs a client command. A refusal or an unreachable server is printed here as
/// `error: <message>` with exit code 1; other errors go back to `main`.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let result = match cmd {
        Command::Submit(args) => submit(args),
        Command::Jobs(args) => jobs(args),
        Command::Job(args) => job(args),
        Command::Logs(args) => logs(args),
        Command::Explain(args) => explain_job(args),
        Command::Priority(args) => priority(args),
        Command::Terminate(args) => terminate(args),
        Command::Preempt(args) => preempt(args),
        Command::Shares(args) => shares(args),
        Command::Watch(args) => watch(args),
    };
    exit_code(result)
}

/// The exit code of a client command's result: a refusal or an unreachable server is printed
/// here as `error: <message>` with exit code 1; other errors go back to `main`.
pub(crate) fn exit_code(result: anyhow::Result<()>) -> anyhow::Result<ExitCode> {
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => match e.downcast_ref::<ClientError>() {
            Some(client) => {
                eprintln!("error: {client}");
                Ok(ExitCode::from(1))
            }
            None => Err(e),
        },
    }
}

impl Common {
    /// The client these flags (and the environment's credentials) point at.
    pub(crate) fn client(&self) -> Result<Client, ClientError> {
        Client::for_endpoint(self.endpoint.as_deref())
    }

    /// How to print.
    pub(crate) fn output(&self) -> Output {
        self.output
    }
}

pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    let file = match &args.payload {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("{} is not valid JSON", path.display()))?,
            )
        }
        None => None,
    };
    let spec = SubmitSpec {
        queue: client.resolve_queue(args.queue.queue.as_deref())?,
        share: args.share,
        name: args.name,
        priority: args.priority,
        instance_type: args.instance_type,
        count: args.count,
        command: args.command,
        class: args.class,
    };
    let req = request(&spec, file).map_err(ClientError::Usage)?;
    let answer = client.submit(&req)?;
    if !args.allow_never_runs {
        refuse_if_never_runs(&client, &answer.job_id, &answer.job_name)?;
    }
    match args.common.output {
        Output::Table => println!("{}", answer.job_id),
        Output::Json => print_json(&answer)?,
    }
    Ok(())
}

/// A job that can never run as configured is accepted by the API (AWS does the same, and a
/// limit may be raised later), but a person at the command line almost always made a typo:
/// terminate it and say why, instead of printing an id that waits for ever.
fn refuse_if_never_runs(client: &Client, id: &str, name: &str) -> Result<(), ClientError> {
    // The submit's own scheduling pass has run by the time it is answered, so one look
    // suffices; a server that has not decided yet (SUBMITTED) is taken at its word, and so is
    // one that cannot be asked: the job exists, and its id must be printed.
    let job = match client.describe(id) {
        Ok(job) => job,
        Err(e) => {
            eprintln!("warning: could not check whether job {name} ({id}) can ever run: {e}");
            return Ok(());
        }
    };
    let reason = job.status_reason.as_deref().unwrap_or("");
    // More instances than the executor has is not a mistake of the configuration: under Slurm
    // it means nodes are down or held by others for now.
    let never = qm_core::Misconfiguration::from_status_reason(reason)
        .filter(|m| *m != qm_core::Misconfiguration::PhysicalMax);
    if job.status != ServiceJobStatus::Runnable || never.is_none() {
        return Ok(());
    }
    let terminated = client
        .terminate(id, "qm submit: can never run as configured")
        .map_or_else(
            |e| format!("Terminating it failed ({e}): terminate it with `qm terminate {id}`"),
            |()| "It was terminated".to_string(),
        );
    Err(ClientError::Usage(format!(
        "job {name} ({id}) can never run as configured: {reason}\n\
         {terminated}. `qm explain` on such a job says what to change; to keep it queued until \
         the configuration changes, submit with --allow-never-runs."
    )))
}

fn parse_statuses(status: &str) -> Result<Vec<ServiceJobStatus>, ClientError> {
    if status.eq_ignore_ascii_case("all") {
        return Ok(ALL_STATUSES.to_vec());
    }
    ServiceJobStatus::from_wire(&status.to_ascii_uppercase())
        .map(|s| vec![s])
        .ok_or_else(|| {
            let names: Vec<&str> = ALL_STATUSES.iter().map(|s| s.as_str()).collect();
            ClientError::Usage(format!(
                "unknown status {status:?}: use one of {} or all",
                names.join(", ")
            ))
        })
}

fn jobs(args: JobsArgs) -> anyhow::Result<()> {
    let statuses = parse_statuses(&args.status)?;
    let client = args.common.client()?;
    let queue = client.resolve_queue(args.queue.queue.as_deref())?;
    if let Some(share) = &args.share {
        // A typo must not look like an empty share.
        let usage = client.usage()?;
        let mut names: Vec<&str> = usage
            .queues
            .iter()
            .filter(|q| q.job_queue == queue)
            .flat_map(|q| q.shares.iter().map(|s| s.quota_share_name.as_str()))
            .collect();
        names.dedup();
        if !names.contains(&share.as_str()) {
            anyhow::bail!(
                "job queue '{queue}' has no quota share '{share}'; its shares are: {}",
                names.join(", ")
            );
        }
    }
    let rows = client.job_rows(&queue, args.share.as_deref(), &statuses)?;
    match args.common.output {
        Output::Table => print!("{}", jobs_table(&rows, now_ms())),
        Output::Json => print_json(&rows)?,
    }
    Ok(())
}

fn job(args: IdArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    let job = client.describe(&client.resolve_job(&args.id)?)?;
    match args.common.output {
        Output::Table => {
            let attempt_now = client.attempt_now(&job.job_id)?;
            let job = with_job_names(&client, job);
            print!("{}", job_details(&job, &attempt_now, now_ms()))
        }
        Output::Json => print_json(&job)?,
    }
    Ok(())
}

/// Preemption reasons name the job that preempted by id (`Preempted by higher priority job
/// <id>`): say its name beside it, as people know jobs by their names. An id that no longer
/// resolves is left as it is.
fn with_job_names(
    client: &Client,
    mut job: DescribeServiceJobResponse,
) -> DescribeServiceJobResponse {
    let attempts = job
        .preemption_summary
        .iter_mut()
        .flat_map(|s| s.recent_preempted_attempts.iter_mut().flatten());
    let mut names = std::collections::BTreeMap::new();
    for attempt in attempts {
        let Some(reason) = attempt.status_reason.as_mut() else {
            continue;
        };
        let Some(id) = reason
            .split(' ')
            .find(|w| looks_like_job_id(w))
            .map(str::to_string)
        else {
            continue;
        };
        let name = names
            .entry(id.clone())
            .or_insert_with(|| client.describe(&id).ok().map(|j| j.job_name));
        if let Some(name) = name {
            *reason = reason.replace(&id, &format!("{name} ({id})"));
        }
    }
    job
}

fn logs(args: LogsArgs) -> anyhow::Result<()> {
    let client = Client::for_endpoint(args.endpoint.as_deref())?;
    let id = client.resolve_job(&args.id)?;
    let stream = if args.stderr {
        LogStream::Stderr
    } else {
        LogStream::Stdout
    };
    let mut attempt = args.attempt;
    let mut offset = 0;
    let mut out = std::io::stdout().lock();
    loop {
        let chunk = client.logs(&id, attempt, stream, offset)?;
        // Stay on the attempt the first answer picked until it ends.
        attempt = Some(chunk.attempt);
        out.write_all(&chunk.bytes)?;
        out.flush()?;
        let drained = chunk.bytes.is_empty() || chunk.next_offset <= offset;
        offset = chunk.next_offset;
        if !drained {
            continue;
        }
        if !args.follow {
            return Ok(());
        }
        if chunk.finished {
            // The attempt ended: so does the log, unless the job goes on with a new attempt
            // (after a preemption) and no attempt was asked for.
            let job = client.describe(&id)?;
            let done = matches!(
                job.status,
                ServiceJobStatus::Succeeded | ServiceJobStatus::Failed
            );
            if args.attempt.is_some() || done {
                return Ok(());
            }
            std::thread::sleep(FOLLOW_POLL);
            let latest = client.logs(&id, None, stream, 0)?.attempt;
            if latest != chunk.attempt {
                writeln!(out, "--- attempt {latest} ---")?;
                attempt = Some(latest);
                offset = 0;
            }
            continue;
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

fn explain_job(args: IdArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    let job = client.describe(&client.resolve_job(&args.id)?)?;
    let waiting = job.status == ServiceJobStatus::Runnable;
    let holding = if waiting {
        let statuses = [
            ServiceJobStatus::Scheduled,
            ServiceJobStatus::Starting,
            ServiceJobStatus::Running,
        ];
        client.job_rows(&job.job_queue, None, &statuses)?
    } else {
        Vec::new()
    };
    // Usage only adds context; an older server without /qm/v1/usage still gets an answer.
    let usage = if waiting { client.usage().ok() } else { None };
    let queue_usage: Option<&QueueUsage> = usage.as_ref().and_then(|u| {
        u.queues
            .iter()
            .find(|q| q.job_queue == queue_name(&job.job_queue))
    });
    // Only a job too large for its environments needs to know what they offer.
    let environment = match reason_code(job.status_reason.as_deref().unwrap_or("")) {
        Some("MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE") => {
            client.environment_limits(queue_name(&job.job_queue)).ok()
        }
        _ => None,
    };
    let text = explain(
        &job,
        Context {
            holding: &holding,
            usage: queue_usage,
            environment: environment.as_ref(),
        },
    );
    match args.common.output {
        Output::Table => print!("{text}"),
        Output::Json => print_json(&json!({
            "jobId": job.job_id,
            "status": job.status,
            "reasonCode": job.status_reason.as_deref().and_then(reason_code).filter(|_| waiting),
            "statusReason": job.status_reason,
            "explanation": text,
        }))?,
    }
    Ok(())
}

fn priority(args: PriorityArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    let id = client.resolve_job(&args.id)?;
    client.set_priority(&id, args.priority)?;
    match args.common.output {
        Output::Table => println!("job {id}: priority {}", args.priority),
        Output::Json => print_json(&json!({"jobId": id, "schedulingPriority": args.priority}))?,
    }
    Ok(())
}

fn terminate(args: TerminateArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    let id = client.resolve_job(&args.id)?;
    client.terminate(&id, &args.reason)?;
    match args.common.output {
        Output::Table => println!("job {id}: terminating ({})", args.reason),
        Output::Json => print_json(&json!({"jobId": id, "reason": args.reason}))?,
    }
    Ok(())
}

fn preempt(args: PreemptArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    let id = client.resolve_job(&args.id)?;
    let answer = client.preempt(&id, args.reason.as_deref())?;
    match args.common.output {
        Output::Table => println!(
            "job {} ({}): preempted for a drill; it goes back to the queue once its processes have stopped, and `qm job {}` shows how it resumes",
            answer.job_id, answer.job_name, answer.job_id
        ),
        Output::Json => print_json(&answer)?,
    }
    Ok(())
}

fn usage_of(client: &Client, queue: Option<&str>) -> anyhow::Result<Vec<QueueUsage>> {
    let mut queues = client.usage()?.queues;
    if let Some(name) = queue {
        queues.retain(|q| q.job_queue == name);
        if queues.is_empty() {
            return Err(ClientError::Usage(format!("no job queue named {name:?}")).into());
        }
    }
    queues.sort_by(|a, b| a.job_queue.cmp(&b.job_queue));
    Ok(queues)
}

fn shares(args: SharesArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    let queues = usage_of(&client, args.queue.as_deref())?;
    match args.common.output {
        Output::Table => print!("{}", shares_table(&queues)),
        Output::Json => print_json(&json!({ "queues": queues }))?,
    }
    Ok(())
}

fn watch(args: WatchArgs) -> anyhow::Result<()> {
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        return Err(ClientError::Usage("--interval must be at least 0.1 seconds".into()).into());
    }
    let client = args.common.client()?;
    let queue = client.resolve_queue(args.queue.queue.as_deref())?;
    let frame = || -> anyhow::Result<String> {
        let queues = usage_of(&client, Some(&queue))?;
        let rows = client.job_rows(&queue, None, &ALL_STATUSES)?;
        Ok(match args.common.output {
            Output::Table => watch_frame(&queues, &rows, now_ms()),
            Output::Json => {
                format!(
                    "{}\n",
                    serde_json::to_string(&json!({"queues": queues, "jobs": rows}))?
                )
            }
        })
    };
    if args.once {
        print!("{}", frame()?);
        return Ok(());
    }
    let interval = Duration::from_secs_f64(args.interval);
    loop {
        // A failed refresh (server restarting) is shown in place and retried.
        let body = frame().unwrap_or_else(|e| format!("error: {e:#}\n"));
        let mut out = std::io::stdout().lock();
        if args.common.output == Output::Table {
            write!(
                out,
                "\x1b[2J\x1b[H{} — queue {queue} — every {}s (Ctrl-C to stop)\n\n",
                client.endpoint(),
                args.interval
            )?;
        }
        out.write_all(body.as_bytes())?;
        out.flush()?;
        drop(out);
        std::thread::sleep(interval);
    }
}
