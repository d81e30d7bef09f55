//! Request and response bodies as boto3 sends and reads them: each body parses into its wire
//! type and serializes back to the same JSON, so member names, optionality and enum spellings
//! match the botocore model.

use qm_api::*;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};

/// Parses `body` as `T` the way the server does, and checks that it serializes back unchanged.
fn round_trips<T: DeserializeOwned + Serialize>(body: Value) -> T {
    let parsed: T = parse_request(body.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", body));
    let back = serde_json::to_value(&parsed).unwrap();
    assert_eq!(back, body, "the body changed on the way through");
    parsed
}

#[test]
fn a_service_environment_family_round_trips() {
    let create: CreateServiceEnvironmentRequest = round_trips(json!({
        "serviceEnvironmentName": "my-sm-training-qm-se",
        "serviceEnvironmentType": "SAGEMAKER_TRAINING",
        "state": "ENABLED",
        "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}],
        "tags": {"team": "ml"}
    }));
    assert_eq!(create.capacity_limits[0].max_capacity, Some(3));
    round_trips::<UpdateServiceEnvironmentRequest>(json!({
        "serviceEnvironment": "my-sm-training-qm-se",
        "state": "DISABLED",
        "capacityLimits": [{"maxCapacity": 4, "capacityUnit": "ml.g5.xlarge"}]
    }));
    round_trips::<DescribeServiceEnvironmentsRequest>(json!({
        "serviceEnvironments": ["my-sm-training-qm-se"], "maxResults": 10, "nextToken": "t"
    }));
    round_trips::<DeleteServiceEnvironmentRequest>(json!({"serviceEnvironment": "se"}));
    round_trips::<DescribeServiceEnvironmentsResponse>(json!({
        "serviceEnvironments": [{
            "serviceEnvironmentName": "se",
            "serviceEnvironmentArn": "arn:aws:batch:us-east-1:123456789012:service-environment/se",
            "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "state": "ENABLED",
            "status": "VALID",
            "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}],
            "tags": {"team": "ml"}
        }],
        "nextToken": "qm1-x"
    }));
}

#[test]
fn a_job_queue_family_round_trips() {
    let create: CreateJobQueueRequest = round_trips(json!({
        "jobQueueName": "my-sm-training-qm-jq",
        "state": "ENABLED",
        "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/sp",
        "priority": 1,
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "my-sm-training-qm-se"}],
        "jobQueueType": "SAGEMAKER_TRAINING",
        "tags": {"team": "ml"},
        "jobStateTimeLimitActions": [{
            "reason": "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
            "state": "RUNNABLE",
            "maxTimeSeconds": 14400,
            "action": "TERMINATE"
        }]
    }));
    assert_eq!(create.job_queue_type, Some(JobQueueType::SagemakerTraining));
    round_trips::<CreateJobQueueRequest>(json!({
        "jobQueueName": "container-queue",
        "priority": 1,
        "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": "ce"}]
    }));
    round_trips::<UpdateJobQueueRequest>(json!({
        "jobQueue": "arn:aws:batch:us-east-1:123456789012:job-queue/jq",
        "state": "DISABLED",
        "priority": 5,
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
        "jobStateTimeLimitActions": []
    }));
    round_trips::<DescribeJobQueuesRequest>(json!({"jobQueues": ["jq"], "maxResults": 1}));
    round_trips::<DeleteJobQueueRequest>(json!({"jobQueue": "jq"}));
    round_trips::<DescribeJobQueuesResponse>(json!({
        "jobQueues": [{
            "jobQueueName": "jq",
            "jobQueueArn": "arn:aws:batch:us-east-1:123456789012:job-queue/jq",
            "state": "ENABLED",
            "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/sp",
            "status": "VALID",
            "statusReason": "JobQueue Healthy",
            "priority": 1,
            "computeEnvironmentOrder": [],
            "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "arn:aws:batch:us-east-1:123456789012:service-environment/se"}],
            "jobQueueType": "SAGEMAKER_TRAINING",
            "tags": {"a": "b"},
            "jobStateTimeLimitActions": []
        }]
    }));
}

#[test]
fn a_scheduling_policy_family_round_trips() {
    let create: CreateSchedulingPolicyRequest = round_trips(json!({
        "name": "my-qm-scheduling-policy",
        "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
        "tags": {"k": ""}
    }));
    assert!(create.fairshare_policy.is_none());
    round_trips::<CreateSchedulingPolicyRequest>(json!({
        "name": "fs",
        "fairsharePolicy": {
            "shareDecaySeconds": 3600,
            "computeReservation": 50,
            "shareDistribution": [{"shareIdentifier": "teamA*", "weightFactor": 0.125}]
        }
    }));
    round_trips::<UpdateSchedulingPolicyRequest>(json!({
        "arn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/sp",
        "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}
    }));
    round_trips::<DescribeSchedulingPoliciesRequest>(json!({"arns": ["arn:x"]}));
    round_trips::<ListSchedulingPoliciesRequest>(json!({"maxResults": 2, "nextToken": "t"}));
    round_trips::<DeleteSchedulingPolicyRequest>(json!({"arn": "arn:x"}));
    round_trips::<DescribeSchedulingPoliciesResponse>(json!({
        "schedulingPolicies": [{
            "name": "sp", "arn": "arn:x",
            "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
            "tags": {"a": "b"}
        }]
    }));
    round_trips::<ListSchedulingPoliciesResponse>(json!({
        "schedulingPolicies": [{"arn": "arn:x"}], "nextToken": "t"
    }));
}

#[test]
fn a_quota_share_family_round_trips() {
    let create: CreateQuotaShareRequest = round_trips(json!({
        "quotaShareName": "QS1",
        "jobQueue": "my-sm-training-qm-jq",
        "capacityLimits": [{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}],
        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 200},
        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
        "state": "ENABLED",
        "tags": {"team": "background"}
    }));
    assert_eq!(
        create.resource_sharing_configuration.strategy,
        QuotaShareResourceSharingStrategy::LendAndBorrow
    );
    round_trips::<UpdateQuotaShareRequest>(json!({
        "quotaShareArn": "arn:aws:batch:us-east-1:123456789012:job-queue/jq/quota-share/QS1",
        "capacityLimits": [{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}],
        "resourceSharingConfiguration": {"strategy": "RESERVE"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        "state": "DISABLED"
    }));
    round_trips::<DescribeQuotaShareRequest>(json!({"quotaShareArn": "arn:x"}));
    round_trips::<ListQuotaSharesRequest>(json!({"jobQueue": "jq", "maxResults": 100}));
    round_trips::<DeleteQuotaShareRequest>(json!({"quotaShareArn": "arn:x"}));
    round_trips::<CreateQuotaShareResponse>(
        json!({"quotaShareName": "QS1", "quotaShareArn": "arn:x"}),
    );
    round_trips::<DescribeQuotaShareResponse>(json!({
        "quotaShareName": "QS1",
        "quotaShareArn": "arn:x",
        "jobQueueArn": "arn:y",
        "capacityLimits": [{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}],
        "resourceSharingConfiguration": {"strategy": "LEND"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        "state": "ENABLED",
        "status": "VALID",
        "tags": {"a": "b"}
    }));
    round_trips::<ListQuotaSharesResponse>(json!({
        "quotaShares": [{"quotaShareName": "QS1", "state": "ENABLED", "status": "CREATING"}]
    }));
}

/// The request of the AWS API reference example, with a quota share.
fn submit_body() -> Value {
    let payload = json!({
        "TrainingJobName": "my-training-job",
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "TrainingImage": "image:latest",
            "ContainerEntrypoint": ["echo", "hello world"]
        },
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 30}
    });
    json!({
        "jobName": "qs1_job_high",
        "jobQueue": "my-sm-training-qm-jq",
        "retryStrategy": {
            "attempts": 3,
            "evaluateOnExit": [
                {"action": "RETRY", "onStatusReason": "Received status from SageMaker: InternalServerError*"},
                {"action": "EXIT", "onStatusReason": "*"}
            ]
        },
        "schedulingPriority": 3,
        "serviceRequestPayload": payload.to_string(),
        "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": "QS1",
        "preemptionConfiguration": {"preemptionRetriesBeforeTermination": 2},
        "timeoutConfig": {"attemptDurationSeconds": 86400},
        "tags": {"team": "ml"},
        "clientToken": "9b2a8f0e-4f0e-4d59-9b8a-1e2f3a4b5c6d"
    })
}

#[test]
fn a_service_job_family_round_trips() {
    let submit: SubmitServiceJobRequest = round_trips(submit_body());
    validate_submit_service_job(&submit).unwrap();
    let payload = TrainingPayload::parse(&submit.service_request_payload).unwrap();
    assert_eq!(payload.instance_type, "ml.c5.xlarge");
    round_trips::<SubmitServiceJobResponse>(json!({
        "jobArn": "arn:aws:batch:us-east-1:123456789012:service-job/a4d6", "jobName": "j", "jobId": "a4d6"
    }));
    round_trips::<DescribeServiceJobRequest>(json!({"jobId": "a4d6"}));
    let list: ListServiceJobsRequest = round_trips(json!({
        "jobQueue": "jq",
        "jobStatus": "RUNNABLE",
        "maxResults": 50,
        "nextToken": "t",
        "filters": [{"name": "QUOTA_SHARE_NAME", "values": ["QS1"]}]
    }));
    assert_eq!(
        parse_filters(list.filters.as_deref()).unwrap(),
        Some(JobFilter::QuotaShareName("QS1".into()))
    );
    round_trips::<UpdateServiceJobRequest>(json!({"jobId": "a4d6", "schedulingPriority": 4}));
    round_trips::<UpdateServiceJobResponse>(
        json!({"jobArn": "arn:x", "jobName": "j", "jobId": "a4d6"}),
    );
    round_trips::<TerminateServiceJobRequest>(
        json!({"jobId": "a4d6", "reason": "no longer needed"}),
    );
    round_trips::<TerminateServiceJobsRequest>(json!({"jobs": ["a", "b"], "reason": "cleanup"}));
    round_trips::<TerminateServiceJobsResponse>(json!({
        "successful": ["a"],
        "errors": [{"job": "b", "code": "ClientException", "message": "job b already finished"}]
    }));
    round_trips::<ListServiceJobsResponse>(json!({
        "jobSummaryList": [{
            "latestAttempt": {"serviceResourceId": {"name": "TrainingJobArn", "value": "arn:t"}},
            "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}],
            "createdAt": 1774420000000i64,
            "jobArn": "arn:x",
            "jobId": "a4d6",
            "jobName": "j",
            "scheduledAt": 1774420001000i64,
            "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": "QS1",
            "status": "RUNNING",
            "statusReason": "Received status from SageMaker: Training",
            "startedAt": 1774420002000i64,
            "isTerminated": true
        }],
        "nextToken": "t"
    }));
}

#[test]
fn a_full_service_job_description_round_trips() {
    round_trips::<DescribeServiceJobResponse>(json!({
        "attempts": [{
            "serviceResourceId": {"name": "TrainingJobArn", "value": "arn:t1"},
            "startedAt": 1, "stoppedAt": 2, "statusReason": "failed"
        }],
        "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}],
        "createdAt": 1,
        "isTerminated": false,
        "jobArn": "arn:x",
        "jobId": "a4d6",
        "jobName": "j",
        "jobQueue": "arn:q",
        "latestAttempt": {"serviceResourceId": {"name": "TrainingJobArn", "value": "arn:t2"}},
        "retryStrategy": {"attempts": 2},
        "scheduledAt": 3,
        "schedulingPriority": 0,
        "serviceRequestPayload": "{}",
        "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": "QS1",
        "preemptionConfiguration": {"preemptionRetriesBeforeTermination": 1},
        "preemptionSummary": {
            "preemptedAttemptCount": 1,
            "recentPreemptedAttempts": [{
                "serviceResourceId": {"name": "TrainingJobArn", "value": "arn:t0"},
                "startedAt": 0, "stoppedAt": 1,
                "statusReason": "Preempted: capacity reclaimed by quota share QS2"
            }]
        },
        "startedAt": 4,
        "status": "RUNNING",
        "statusReason": "Running",
        "stoppedAt": 5,
        "tags": {"a": "b"},
        "timeoutConfig": {"attemptDurationSeconds": 60}
    }));
}

#[test]
fn a_description_of_a_waiting_job_leaves_out_what_it_does_not_have() {
    let response = DescribeServiceJobResponse {
        attempts: None,
        capacity_usage: None,
        created_at: Some(1774420000000),
        is_terminated: None,
        job_arn: Some("arn:x".into()),
        job_id: "a4d6".into(),
        job_name: "j".into(),
        job_queue: "arn:q".into(),
        latest_attempt: None,
        retry_strategy: None,
        scheduled_at: None,
        scheduling_priority: None,
        service_request_payload: None,
        service_job_type: ServiceJobType::SagemakerTraining,
        share_identifier: None,
        quota_share_name: Some("QS1".into()),
        preemption_configuration: None,
        preemption_summary: None,
        started_at: 0,
        status: ServiceJobStatus::Runnable,
        status_reason: None,
        stopped_at: None,
        tags: None,
        timeout_config: None,
    };
    assert_eq!(
        serde_json::to_value(&response).unwrap(),
        json!({
            "createdAt": 1774420000000i64,
            "jobArn": "arn:x",
            "jobId": "a4d6",
            "jobName": "j",
            "jobQueue": "arn:q",
            "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": "QS1",
            "status": "RUNNABLE"
        })
    );
}

#[test]
fn the_snapshot_example_of_the_spec_round_trips() {
    round_trips::<GetJobQueueSnapshotRequest>(json!({"jobQueue": "jq"}));
    let snapshot: GetJobQueueSnapshotResponse = round_trips(json!({
        "frontOfQueue": {
            "jobs": [
                {"jobArn": "arn:aws:batch:us-west-2:111122223333:service-job/high", "earliestTimeAtPosition": 1774420000000i64},
                {"jobArn": "arn:aws:batch:us-west-2:111122223333:service-job/med", "earliestTimeAtPosition": 1774419000000i64}
            ],
            "lastUpdatedAt": 1774420001000i64
        },
        "frontOfQuotaShares": {
            "quotaShares": {"QS1": [{"jobArn": "arn:aws:batch:us-west-2:111122223333:service-job/high", "earliestTimeAtPosition": 1774420000000i64}]},
            "lastUpdatedAt": 1774420001000i64
        },
        "queueUtilization": {
            "totalCapacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}],
            "quotaShareUtilization": {"topCapacityUtilization": [
                {"quotaShareName": "QS1", "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}]},
                {"quotaShareName": "QS2", "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}]}
            ]},
            "lastUpdatedAt": 1774420001000i64
        }
    }));
    let front = snapshot
        .front_of_quota_shares
        .unwrap()
        .quota_shares
        .unwrap();
    assert_eq!(front["QS1"].len(), 1);
    round_trips::<GetJobQueueSnapshotResponse>(json!({
        "queueUtilization": {"fairshareUtilization": {
            "activeShareCount": 1,
            "topCapacityUtilization": [{"shareIdentifier": "a", "capacityUsage": [{"capacityUnit": "NUM_INSTANCES", "quantity": 1.5}]}]
        }}
    }));
}

#[test]
fn tag_bodies_parse_without_the_members_that_travel_in_the_uri() {
    let tag: TagResourceRequest = parse_request(br#"{"tags":{"team":"ml"}}"#).unwrap();
    assert_eq!(tag.resource_arn, "");
    assert_eq!(tag.tags.len(), 1);
    let untag: UntagResourceRequest = parse_request(b"").unwrap();
    assert!(untag.tag_keys.is_empty());
    let list: ListTagsForResourceRequest = parse_request(b"").unwrap();
    assert_eq!(list.resource_arn, "");
    round_trips::<ListTagsForResourceResponse>(json!({"tags": {"a": "b"}}));
    round_trips::<TagResourceResponse>(json!({}));
}

#[test]
fn empty_outputs_serialize_as_an_empty_object() {
    assert_eq!(
        serde_json::to_string(&DeleteQuotaShareResponse::default()).unwrap(),
        "{}"
    );
    assert_eq!(
        serde_json::to_string(&TerminateServiceJobResponse::default()).unwrap(),
        "{}"
    );
}

#[test]
fn a_retry_action_is_read_in_any_case_and_written_in_upper_case() {
    for spelling in ["Retry", "retry", "RETRY"] {
        let rule: ServiceJobEvaluateOnExit =
            serde_json::from_value(json!({"action": spelling, "onStatusReason": "*"})).unwrap();
        assert_eq!(rule.action, Some(ServiceJobRetryAction::Retry));
        assert_eq!(serde_json::to_value(&rule).unwrap()["action"], "RETRY");
    }
    let rule: ServiceJobEvaluateOnExit = serde_json::from_value(json!({"action": "Exit"})).unwrap();
    assert_eq!(rule.action, Some(ServiceJobRetryAction::Exit));
}

#[test]
fn other_enums_are_case_sensitive_like_aws() {
    let err =
        parse_request::<UpdateQuotaShareRequest>(br#"{"quotaShareArn":"a","state":"enabled"}"#)
            .unwrap_err();
    assert!(err
        .message()
        .starts_with("invalid request: state: unknown variant `enabled`"));
}

#[test]
fn enums_know_their_wire_spelling() {
    assert_eq!(ServiceJobStatus::Runnable.as_str(), "RUNNABLE");
    assert_eq!(
        QuotaShareResourceSharingStrategy::LendAndBorrow.to_string(),
        "LEND_AND_BORROW"
    );
    assert_eq!(
        ServiceResourceIdName::TrainingJobArn.as_str(),
        "TrainingJobArn"
    );
    assert_eq!(
        JobQueueType::from_wire("ECS_FARGATE"),
        Some(JobQueueType::EcsFargate)
    );
    assert_eq!(ServiceJobStatus::ALL.len(), 8);
}
