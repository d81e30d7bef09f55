//! `qm explain`: why a job is where it is, in plain words.
//!
//! For a RUNNABLE job the reason code (the prefix of `statusReason`, see `qm_core::reason`)
//! picks three sentences — what the job needs, what holds it, what would free it — and the
//! context the server gave (the share's usage, the jobs running in the queue) names the
//! holders. A job that runs or has finished is said to.

use std::collections::BTreeMap;

use qm_api::{DescribeServiceJobResponse, ServiceJobStatus};

use super::format::{count, demand, reason_code, JobRow};
use super::http::QueueUsage;

/// What `qm explain` knows about the job's surroundings.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The jobs of the queue that hold capacity (SCHEDULED, STARTING or RUNNING).
    pub holding: &'a [JobRow],
    /// The queue's usage, when the server reported it.
    pub usage: Option<&'a QueueUsage>,
    /// What the queue's service environments allow per instance type, when asked for.
    pub environment: Option<&'a BTreeMap<String, u32>>,
}

/// The explanation, one paragraph per line.
pub fn explain(job: &DescribeServiceJobResponse, context: Context<'_>) -> String {
    let share = job.quota_share_name.as_deref().unwrap_or("-");
    let reason = job.status_reason.as_deref().unwrap_or("");
    let (unit, count) = demand(job).unwrap_or_else(|| ("its instance type".to_string(), 0));
    let asks = if count > 0 {
        format!("{count} × {unit}")
    } else {
        "its instances".to_string()
    };
    let by = super::format::submitted_by(job)
        .map(|p| format!(", submitted by {p}"))
        .unwrap_or_default();
    let mut out = format!(
        "job {} ({}, share {share}{by}) is {}",
        job.job_id, job.job_name, job.status
    );
    match job.status {
        ServiceJobStatus::Runnable => {}
        ServiceJobStatus::Starting if !reason.is_empty() => {
            // The Slurm executor: Quartermaster granted the capacity, the cluster has not
            // started the job yet, and says why.
            out.push_str(&format!(
                ": it holds {asks}; the cluster has not started it yet.\nreason: {reason}\n"
            ));
            return out;
        }
        ServiceJobStatus::Scheduled | ServiceJobStatus::Starting | ServiceJobStatus::Running => {
            out.push_str(&format!(
                ": it holds {asks} and is not waiting for anything.\n"
            ));
            return out;
        }
        ServiceJobStatus::Succeeded | ServiceJobStatus::Failed => {
            out.push_str(": it has finished and holds no capacity.\n");
            if !reason.is_empty() {
                out.push_str(&format!("last reason: {reason}\n"));
            }
            return out;
        }
        ServiceJobStatus::Submitted | ServiceJobStatus::Pending => {
            out.push_str(": the next scheduling pass decides.\n");
            return out;
        }
    }
    let Some(code) = reason_code(reason) else {
        out.push_str(&format!(".\nreason: {reason}\n"));
        return out;
    };
    out.push_str(&format!(": {code}\n"));
    let [needs, holds, mut frees] = sentences(code, share, &asks, &unit);
    if let Some(advice) = environment_advice(code, &unit, count, context.environment) {
        frees = advice;
    }
    out.push_str(&format!("needs:      {needs}\n"));
    out.push_str(&format!("held by:    {holds}\n"));
    for line in holders(code, share, &unit, context) {
        out.push_str(&format!("            {line}\n"));
    }
    out.push_str(&format!("frees when: {frees}\n"));
    out.push_str(&format!("server:     {reason}\n"));
    out
}

/// The three sentences of a code: what it needs, what holds it, what would free it.
fn sentences(code: &str, share: &str, asks: &str, unit: &str) -> [String; 3] {
    quota_sentences(code, share, asks, unit)
        .or_else(|| waiting_sentences(code, asks))
        .or_else(|| capacity_sentences(code, share, asks, unit))
        .unwrap_or_else(|| {
            [
                format!("{asks}."),
                format!("the server reports {code}, a code this client does not know."),
                "see the server's reason below.".to_string(),
            ]
        })
}

/// The sentences of the codes about a share's own quota and what it may borrow.
fn quota_sentences(code: &str, share: &str, asks: &str, unit: &str) -> Option<[String; 3]> {
    Some(match code {
        "OWN_QUOTA_FULL" => [
            format!("{asks} within share {share}'s own quota."),
            format!("{share}'s own jobs use all of its entitlement, and it may neither borrow nor preempt them."),
            format!("one of {share}'s running jobs ends or is terminated, the job gets a higher priority than a running one (with in-share preemption enabled), or {share} gets a larger limit or a borrowing strategy."),
        ],
        "NOT_INTERRUPTIBLE" => [
            format!("{asks} within {share}'s own quota: its class may not be interrupted, so it never borrows."),
            format!("{share}'s other jobs that may not be interrupted hold its own quota."),
            format!("one of them ends, or {share} gets a larger limit (or the job an interruptible class, tag qm:class)."),
        ],
        "RESUME_UNVERIFIED" => [
            format!("{asks} within {share}'s own quota: its class borrows only after one of its jobs was seen resuming from a checkpoint (borrow: after-verified-resume), and none was within the class's verify-days."),
            format!("{share}'s jobs that may not borrow hold its own quota."),
            "one of them ends, or a job of the class resumes from its checkpoint after a preemption: drill one with `qm preempt JOB` (it must report its steps, QM_PROGRESS_FILE).".to_string(),
        ],
        "BORROW_LIMIT_REACHED" => [
            format!("{asks}, more than {share} may borrow."),
            format!("{share} already borrows up to its borrow limit."),
            format!("{share}'s borrowed jobs end, or its borrowLimit is raised."),
        ],
        "NOTHING_TO_BORROW" => [
            format!("{asks}, beyond {share}'s own quota: it must borrow."),
            "the other shares use their capacity themselves, or have lent it already.".to_string(),
            "another share's jobs end and leave its capacity idle to lend, or capacity within the share's own quota frees up.".to_string(),
        ],
        "RESERVED_FOR_OTHERS" => [
            format!("{asks}, borrowed from other shares."),
            "the idle capacity it would borrow is kept for its owner's waiting jobs, or for a job waiting for its victims to exit.".to_string(),
            "the owners' waiting jobs start, or more capacity becomes idle.".to_string(),
        ],
        "BEHIND_FAIR_SHARE" => [
            format!("{asks}, borrowed from idle capacity, which the queue shares fairly (its scheduling policy's tag qm:idle-assignment is FAIR_SHARE)."),
            format!("a share whose weighted borrowed share (borrowed / (weight x what is lent)) would stay lower than {share}'s goes first; the server's reason below names it and the figures."),
            format!("{share}'s borrowed jobs end, the shares ahead of it borrow more, or {share} gets a higher weight (tag qm:weight); `qm shares` shows each share's weighted share."),
        ],
        "GROUP_LIMIT_REACHED" => [
            format!("{asks}, more than {share}'s group may hold."),
            format!("the shares of {share}'s group (tag qm:group) together hold the group's limit of {unit} (PUT /qm/v1/queues/{{queue}}/groups)."),
            "a job of the group ends, or the group's limit is raised; `qm shares` shows the group's usage against its limit.".to_string(),
        ],
        _ => return None,
    })
}

/// The sentences of the codes about jobs and attempts the job waits for.
fn waiting_sentences(code: &str, asks: &str) -> Option<[String; 3]> {
    let s = |a: &str, b: &str, c: &str| [a.to_string(), b.to_string(), c.to_string()];
    Some(match code {
        "WAITING_FOR_RELEASE" => [
            format!("{asks} that preempted or stopping attempts still hold."),
            "attempts that were told to stop have not exited yet.".to_string(),
            "their processes exit (at the latest after the stop grace period); then it starts.".to_string(),
        ],
        "HELD_FOR_OLDER_JOB" => s(
            &format!("{asks}."),
            "an older or higher-priority job holds the capacity: it has waited past the starvation guard and lets the jobs backfilled onto its reservation finish, or it waits for the jobs it would preempt to checkpoint.",
            "that job starts (at the latest when its patience runs out).",
        ),
        "BACKFILL_FINISHING" => s(
            &format!("{asks}: it has waited past the starvation guard, and capacity is reserved for it."),
            "jobs that started on that capacity meanwhile (backfilled, preemptible for this job).",
            "they finish, or checkpoint (each is taken then, losing nothing); when the backfill patience runs out they are preempted for it.",
        ),
        "VICTIMS_PROTECTED" => s(
            &format!("{asks}, by preempting running jobs."),
            "the jobs it would preempt are under their share's thrash protection (tags qm:min-runtime-seconds, qm:max-preemptions-per-hour).",
            "their protection ends (the time is in the server's reason below); then it preempts them.",
        ),
        "WAITING_FOR_CHECKPOINT" => s(
            &format!("{asks}, reclaimed from borrowers that checkpoint regularly."),
            "the borrowers it would preempt; it waits for them to checkpoint so that they lose no work.",
            "each is taken as it checkpoints, capacity frees up on its own, or the reclaim patience runs out and they are preempted.",
        ),
        "PREVIOUS_ATTEMPT_STOPPING" => s(
            "its previous attempt to exit first: a job never runs twice.",
            "the previous attempt's processes are still running.",
            "they exit (at the latest after the stop grace period); then it is scheduled again.",
        ),
        "AWAITING_PASS" => s(
            "a scheduling decision.",
            "nothing yet: it was submitted or changed since the last pass.",
            "the next scheduling pass (within a second).",
        ),
        _ => return None,
    })
}

/// The sentences of the codes about the environment's and the pool's capacity, and limits
/// the job can never fit.
fn capacity_sentences(code: &str, share: &str, asks: &str, unit: &str) -> Option<[String; 3]> {
    Some(match code {
        "ENVIRONMENT_FULL" => [
            format!("{asks} within the service environment's limit."),
            "other shares use the environment's whole limit within their own quotas (the shares' limits add up to more than the environment).".to_string(),
            format!("their jobs end, or the service environment's maxCapacity for {unit} is raised."),
        ],
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" => [
            format!("{asks} on the server's physical pool."),
            format!("the executor has no free {unit} instance (the pool is shared by every queue), or fewer than the job asks for."),
            format!("jobs holding {unit} instances end, or instances are added to the pool ([[executor.pool]] in the server's configuration; with the Slurm executor, nodes of the type's partition or feature come back up or are freed by other Slurm jobs)."),
        ],
        "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE" => [
            format!("{asks}, more than the service environment allows."),
            "nothing: it can never run as configured.".to_string(),
            format!("lower the instance count, or raise the service environment's maxCapacity for {unit}."),
        ],
        "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED" => [
            format!("{asks}, more than {share}'s limit plus what it may borrow."),
            "nothing: it can never run as configured.".to_string(),
            format!("lower the instance count, or raise {share}'s limit or borrow limit."),
        ],
        _ => return None,
    })
}

/// For a job larger than its service environments allow, advice that names what they
/// offer: no instance count helps when the type is not offered at all.
fn environment_advice(
    code: &str,
    unit: &str,
    count: u32,
    environment: Option<&BTreeMap<String, u32>>,
) -> Option<String> {
    let limits = environment?;
    if code != "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE" {
        return None;
    }
    let offered: Vec<String> = limits
        .iter()
        .filter(|(_, &max)| max > 0)
        .map(|(t, max)| format!("{t} (up to {max})"))
        .collect();
    let offered = if offered.is_empty() {
        "none: they have no capacity limits yet".to_string()
    } else {
        offered.join(", ")
    };
    Some(match limits.get(unit).copied().filter(|&m| m > 0) {
        None => format!(
            "never as configured: the queue's service environments do not offer {unit} at all. They offer {offered}: resubmit with one of those types, or add {unit} to a service environment's capacityLimits."
        ),
        Some(max) => format!(
            "lower the instance count to at most {max} (it asks for {count}), or raise the service environment's maxCapacity for {unit}."
        ),
    })
}

/// The jobs or shares that hold what the job waits for.
fn holders(code: &str, share: &str, unit: &str, context: Context<'_>) -> Vec<String> {
    match code {
        "OWN_QUOTA_FULL" | "BORROW_LIMIT_REACHED" | "NOT_INTERRUPTIBLE" | "RESUME_UNVERIFIED" => {
            let mine: Vec<String> = context
                .holding
                .iter()
                .filter(|j| j.quota_share_name == share)
                .map(|j| {
                    format!(
                        "{} ({}, priority {}, {})",
                        j.job_id, j.job_name, j.scheduling_priority, j.status
                    )
                })
                .collect();
            if mine.is_empty() {
                vec!["(no job of the share holds capacity now)".to_string()]
            } else {
                mine
            }
        }
        "NOTHING_TO_BORROW" | "ENVIRONMENT_FULL" | "RESERVED_FOR_OTHERS" => {
            let Some(usage) = context.usage else {
                return Vec::new();
            };
            usage
                .shares
                .iter()
                .filter(|s| s.quota_share_name != share && s.capacity_unit == unit)
                .map(|s| {
                    // Say why idle capacity of a share is not to be had: RESERVE keeps it.
                    let never_lends = if s.strategy.as_deref() == Some("RESERVE") {
                        " (RESERVE: never lends, even when idle)"
                    } else {
                        ""
                    };
                    format!(
                        "{}: uses {} of its {} {unit}, borrows {}, lends {}, {} waiting{never_lends}",
                        s.quota_share_name,
                        count(s.own_use),
                        count(s.entitled),
                        count(s.borrowed),
                        count(s.lent_out),
                        count(s.runnable)
                    )
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_api::qm::ShareUsage;

    #[test]
    fn a_reserve_share_is_named_as_the_reason_its_idle_capacity_is_not_lent() {
        let job: DescribeServiceJobResponse = serde_json::from_value(serde_json::json!({
            "jobId": "j-1", "jobName": "borrower", "jobQueue": "q", "status": "RUNNABLE",
            "statusReason": "NOTHING_TO_BORROW - needs to borrow 1 instance(s)",
            "serviceJobType": "SAGEMAKER_TRAINING", "quotaShareName": "research",
            "serviceRequestPayload": "{\"ResourceConfig\":{\"InstanceType\":\"ml.g5.xlarge\",\"InstanceCount\":1}}",
            "createdAt": 0, "schedulingPriority": 0,
            "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}]
        }))
        .expect("a describe answer");
        let share = |name: &str, strategy: &str| ShareUsage {
            quota_share_name: name.into(),
            capacity_unit: "ml.g5.xlarge".into(),
            entitled: 1.0,
            strategy: Some(strategy.into()),
            ..ShareUsage::default()
        };
        let usage = QueueUsage {
            job_queue: "q".into(),
            shares: vec![share("prod", "RESERVE"), share("inference", "LEND")],
            ..QueueUsage::default()
        };
        let text = explain(
            &job,
            Context {
                holding: &[],
                usage: Some(&usage),
                environment: None,
            },
        );
        assert!(
            text.contains("prod: uses 0 of its 1 ml.g5.xlarge, borrows 0, lends 0, 0 waiting (RESERVE: never lends, even when idle)"),
            "{text}"
        );
        assert!(
            !text.contains(
                "inference: uses 0 of its 1 ml.g5.xlarge, borrows 0, lends 0, 0 waiting ("
            ),
            "{text}"
        );
    }

    #[test]
    fn a_job_behind_its_fair_share_keeps_the_server_s_reason_whole() {
        let reason = "BEHIND_FAIR_SHARE - waits: nlp's weighted share 0.50 is above vision's 0.17, which goes first (NOTHING_TO_BORROW - needs to borrow 1 instance(s))";
        let job: DescribeServiceJobResponse = serde_json::from_value(serde_json::json!({
            "jobId": "j-2", "jobName": "n3", "jobQueue": "q", "status": "RUNNABLE",
            "statusReason": reason,
            "serviceJobType": "SAGEMAKER_TRAINING", "quotaShareName": "nlp",
            "serviceRequestPayload": "{\"ResourceConfig\":{\"InstanceType\":\"ml.g5.xlarge\",\"InstanceCount\":1}}",
            "createdAt": 0, "schedulingPriority": 0
        }))
        .expect("a describe answer");
        let text = explain(
            &job,
            Context {
                holding: &[],
                usage: None,
                environment: None,
            },
        );
        assert!(text.contains(": BEHIND_FAIR_SHARE\n"), "{text}");
        assert!(text.contains("tag qm:weight"), "{text}");
        assert!(text.contains(&format!("server:     {reason}\n")), "{text}");
    }

    #[test]
    fn a_job_too_large_for_its_environment_is_told_the_most_it_may_ask_or_the_types_offered() {
        let limits: BTreeMap<String, u32> = [
            ("ml.g5.xlarge".to_string(), 3),
            ("ml.p4d.24xlarge".to_string(), 0),
        ]
        .into();
        let code = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE";
        let too_many = environment_advice(code, "ml.g5.xlarge", 5, Some(&limits)).unwrap();
        assert!(too_many.starts_with("lower the instance count to at most 3 (it asks for 5)"));
        let elsewhere = environment_advice(code, "ml.p5.48xlarge", 1, Some(&limits)).unwrap();
        assert!(
            elsewhere.contains("do not offer ml.p5.48xlarge at all"),
            "{elsewhere}"
        );
        assert!(
            elsewhere.contains("They offer ml.g5.xlarge (up to 3):"),
            "{elsewhere}"
        );
        assert_eq!(
            environment_advice("OWN_QUOTA_FULL", "ml.g5.xlarge", 1, Some(&limits)),
            None
        );
        assert_eq!(environment_advice(code, "ml.g5.xlarge", 5, None), None);
    }
}
