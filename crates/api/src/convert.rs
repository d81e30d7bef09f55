//! From wire shapes to the core's specs. The core speaks in its own terms (entitlements,
//! strategies, exit rules) and never sees a wire type; this is the one place where the AWS
//! spelling of a setting becomes the core's, and where AWS defaults (borrow limit -1, one
//! attempt, priority 0) are filled in.

use std::collections::BTreeMap;

use qm_core::{ExitRule, JobId, JobSpec, ShareSpec, Strategy};

use crate::payload::TrainingPayload;
use crate::types::*;

/// The core's strategy for a wire strategy.
pub fn strategy(strategy: QuotaShareResourceSharingStrategy) -> Strategy {
    match strategy {
        QuotaShareResourceSharingStrategy::Reserve => Strategy::Reserve,
        QuotaShareResourceSharingStrategy::Lend => Strategy::Lend,
        QuotaShareResourceSharingStrategy::LendAndBorrow => Strategy::LendAndBorrow,
    }
}

/// Instance type -> instances, from validated capacity limits. Entries without a unit are
/// skipped and negative counts read as 0 (validation refuses both first).
fn limits_map<L: CapacityLimitEntry>(limits: &[L]) -> BTreeMap<String, u32> {
    limits
        .iter()
        .filter_map(|l| {
            let unit = l.capacity_unit()?;
            let max = u32::try_from(l.max_capacity().unwrap_or(0)).unwrap_or(0);
            Some((unit.to_string(), max))
        })
        .collect()
}

/// A quota share's spec for the core. `limits` may be `QuotaShareCapacityLimit`s (the shape of
/// the quota-share operations) or `CapacityLimit`s.
pub fn share_spec<L: CapacityLimitEntry>(
    name: &str,
    limits: &[L],
    sharing: &QuotaShareResourceSharingConfiguration,
    preemption: &QuotaSharePreemptionConfiguration,
    state: QuotaShareState,
    tags: &BTreeMap<String, String>,
) -> ShareSpec {
    let (min_runtime_ms, max_preemptions_per_hour) = crate::validate::protection(tags);
    ShareSpec {
        name: name.to_string(),
        limits: limits_map(limits),
        strategy: strategy(sharing.strategy),
        borrow_limit_percent: sharing.borrow_limit.unwrap_or(-1),
        in_share_preemption: preemption.in_share_preemption
            == QuotaShareInSharePreemptionState::Enabled,
        enabled: state == QuotaShareState::Enabled,
        min_runtime_ms,
        max_preemptions_per_hour,
        weight: crate::validate::weight(tags),
    }
}

/// `retryStrategy` as the core's `(attempts, evaluate_on_exit)`: one attempt and no rules when
/// absent. Rules without an action or a glob are skipped (validation refuses them first).
pub fn exit_rules(retry: Option<&ServiceJobRetryStrategy>) -> (u32, Vec<ExitRule>) {
    let Some(retry) = retry else {
        return (1, Vec::new());
    };
    let attempts = u32::try_from(retry.attempts.clamp(1, 10)).unwrap_or(1);
    let rules = retry
        .evaluate_on_exit
        .iter()
        .flatten()
        .filter_map(|rule| {
            Some(ExitRule {
                retry: rule.action? == ServiceJobRetryAction::Retry,
                on_status_reason: rule.on_status_reason.clone()?,
            })
        })
        .collect();
    (attempts, rules)
}

/// A service environment's limits as the core's queue environment map.
pub fn environment_limits(limits: &[CapacityLimit]) -> BTreeMap<String, u32> {
    limits_map(limits)
}

/// The core's job spec for a validated submission whose payload was read. `id` is the core's
/// number for the job and `queue` the resolved queue name.
pub fn job_spec(
    id: JobId,
    queue: &str,
    req: &SubmitServiceJobRequest,
    payload: &TrainingPayload,
) -> JobSpec {
    let (attempts, evaluate_on_exit) = exit_rules(req.retry_strategy.as_ref());
    JobSpec {
        id,
        queue: queue.to_string(),
        share: req.quota_share_name.clone().unwrap_or_default(),
        priority: u32::try_from(req.scheduling_priority.unwrap_or(0)).unwrap_or(0),
        instance_type: payload.instance_type.clone(),
        count: payload.instance_count,
        preemption_retries: req
            .preemption_configuration
            .as_ref()
            .and_then(|p| p.preemption_retries_before_termination)
            .map(|n| u32::try_from(n).unwrap_or(0)),
        attempts,
        evaluate_on_exit,
        runtime_limit_ms: runtime_limit_seconds(payload, req).map(|s| s.saturating_mul(1000)),
        // The class (`qm:class`) needs the queue's and share's tags: the caller resolves it.
        interruptible: true,
        borrows: true,
    }
}

/// The longest an attempt of the job runs before the executor stops it: the lower of
/// `StoppingCondition.MaxRuntimeInSeconds` and `timeoutConfig.attemptDurationSeconds`.
pub fn runtime_limit_seconds(
    payload: &TrainingPayload,
    req: &SubmitServiceJobRequest,
) -> Option<u64> {
    let timeout = req
        .timeout_config
        .as_ref()
        .and_then(|t| t.attempt_duration_seconds)
        .map(|s| s.max(1) as u64);
    match (payload.max_runtime_seconds, timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(unit: &str, max: i32) -> QuotaShareCapacityLimit {
        QuotaShareCapacityLimit {
            capacity_unit: unit.into(),
            max_capacity: max,
        }
    }

    #[test]
    fn a_share_without_borrow_limit_borrows_without_limit() {
        let spec = share_spec(
            "QS1",
            &[limit("ml.g5.xlarge", 2)],
            &QuotaShareResourceSharingConfiguration {
                strategy: QuotaShareResourceSharingStrategy::LendAndBorrow,
                borrow_limit: None,
            },
            &QuotaSharePreemptionConfiguration {
                in_share_preemption: QuotaShareInSharePreemptionState::Enabled,
            },
            QuotaShareState::Enabled,
            &BTreeMap::new(),
        );
        assert_eq!(spec.name, "QS1");
        assert_eq!(spec.limits.get("ml.g5.xlarge"), Some(&2));
        assert_eq!(spec.strategy, Strategy::LendAndBorrow);
        assert_eq!(spec.borrow_limit_percent, -1);
        assert!(spec.in_share_preemption);
        assert!(spec.enabled);
    }

    #[test]
    fn a_disabled_reserve_share_maps_every_setting() {
        let spec = share_spec(
            "QS3",
            &[limit("ml.g5.xlarge", 1), limit("ml.p4d.24xlarge", 0)],
            &QuotaShareResourceSharingConfiguration {
                strategy: QuotaShareResourceSharingStrategy::Reserve,
                borrow_limit: Some(200),
            },
            &QuotaSharePreemptionConfiguration {
                in_share_preemption: QuotaShareInSharePreemptionState::Disabled,
            },
            QuotaShareState::Disabled,
            &[(
                crate::validate::TAG_MIN_RUNTIME.to_string(),
                "900".to_string(),
            )]
            .into(),
        );
        assert_eq!(spec.min_runtime_ms, 900_000);
        assert_eq!(spec.max_preemptions_per_hour, 0);
        assert_eq!(spec.strategy, Strategy::Reserve);
        assert_eq!(spec.borrow_limit_percent, 200);
        assert_eq!(spec.limits.len(), 2);
        assert!(!spec.in_share_preemption);
        assert!(!spec.enabled);
    }

    #[test]
    fn no_retry_strategy_means_one_attempt_and_no_rules() {
        assert_eq!(exit_rules(None), (1, Vec::new()));
    }

    #[test]
    fn retry_rules_keep_their_order_and_action() {
        let retry = ServiceJobRetryStrategy {
            attempts: 3,
            evaluate_on_exit: Some(vec![
                ServiceJobEvaluateOnExit {
                    action: Some(ServiceJobRetryAction::Retry),
                    on_status_reason: Some("Received status from SageMaker: Internal*".into()),
                },
                ServiceJobEvaluateOnExit {
                    action: Some(ServiceJobRetryAction::Exit),
                    on_status_reason: Some("*".into()),
                },
            ]),
        };
        let (attempts, rules) = exit_rules(Some(&retry));
        assert_eq!(attempts, 3);
        assert_eq!(rules.len(), 2);
        assert!(rules[0].retry);
        assert!(!rules[1].retry);
        assert_eq!(rules[1].on_status_reason, "*");
    }

    #[test]
    fn environment_limits_map_units_to_instances() {
        let limits = [CapacityLimit {
            capacity_unit: Some("ml.g5.xlarge".into()),
            max_capacity: Some(3),
        }];
        assert_eq!(
            environment_limits(&limits),
            BTreeMap::from([("ml.g5.xlarge".to_string(), 3)])
        );
    }

    #[test]
    fn a_submission_becomes_a_core_job_spec() {
        let req: SubmitServiceJobRequest = crate::parse_request(
            br#"{"jobName":"j","jobQueue":"jq","serviceJobType":"SAGEMAKER_TRAINING",
                "serviceRequestPayload":"{}","quotaShareName":"QS1","schedulingPriority":3,
                "preemptionConfiguration":{"preemptionRetriesBeforeTermination":2}}"#,
        )
        .unwrap();
        let payload = TrainingPayload {
            training_job_name: None,
            instance_type: "ml.g5.xlarge".into(),
            instance_count: 2,
            entrypoint: vec!["true".into()],
            arguments: vec![],
            environment: BTreeMap::new(),
            hyperparameters: BTreeMap::new(),
            max_runtime_seconds: None,
            checkpoint_local_path: None,
            checkpoint_s3_uri: None,
            training_image: None,
            input_mode: "File".into(),
            channels: vec![],
            output_path: None,
            role_arn: None,
        };
        let spec = job_spec(JobId(7), "jq", &req, &payload);
        assert_eq!(spec.share, "QS1");
        assert_eq!(spec.priority, 3);
        assert_eq!(spec.count, 2);
        assert_eq!(spec.preemption_retries, Some(2));
        assert_eq!(spec.attempts, 1);

        // The runtime limit: the lower of the payload's and the request's, either alone.
        assert_eq!(runtime_limit_seconds(&payload, &req), None);
        let with_timeout = |seconds: i32| -> SubmitServiceJobRequest {
            let mut r = req.clone();
            r.timeout_config = Some(ServiceJobTimeout {
                attempt_duration_seconds: Some(seconds),
            });
            r
        };
        assert_eq!(runtime_limit_seconds(&payload, &with_timeout(90)), Some(90));
        let capped = TrainingPayload {
            max_runtime_seconds: Some(60),
            ..payload
        };
        assert_eq!(runtime_limit_seconds(&capped, &req), Some(60));
        assert_eq!(runtime_limit_seconds(&capped, &with_timeout(90)), Some(60));
        assert_eq!(runtime_limit_seconds(&capped, &with_timeout(30)), Some(30));
    }
}
