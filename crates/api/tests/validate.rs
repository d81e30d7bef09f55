//! Every refusal of `validate`: each case starts from a valid request as boto3 would send it,
//! changes one thing, and checks that the message names the wire field and says what to do.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;

use qm_api::*;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// `base` with `patch` merged in; a `null` in the patch removes the member and an empty
/// object replaces it.
fn patched(base: &Value, patch: Value) -> Value {
    fn merge(base: &mut Value, patch: Value) {
        match (base, patch) {
            (Value::Object(b), Value::Object(p)) if !p.is_empty() => {
                for (k, v) in p {
                    if v.is_null() {
                        b.remove(&k);
                    } else {
                        merge(b.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (b, p) => *b = p,
        }
    }
    let mut out = base.clone();
    merge(&mut out, patch);
    out
}

fn parsed<T: DeserializeOwned>(body: &Value) -> T {
    parse_request(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
}

/// Runs `cases` of `(name, patch, expected message start, expected fragment)` against `check`.
fn table<T: DeserializeOwned>(
    base: Value,
    check: fn(&T) -> Result<(), ApiError>,
    cases: &[(&str, Value, &str, &str)],
) {
    check(&parsed::<T>(&base)).unwrap_or_else(|e| panic!("the base request is refused: {e}"));
    for (name, patch, start, fragment) in cases {
        let body = patched(&base, patch.clone());
        let err = check(&parsed::<T>(&body)).expect_err(name);
        assert_eq!(err.http_status(), 400, "{name}");
        assert!(
            err.message().starts_with(start) && err.message().contains(fragment),
            "{name}: got {:?}, expected it to start with {start:?} and contain {fragment:?}",
            err.message()
        );
    }
}

#[test]
fn resource_names_are_letters_digits_hyphens_and_underscores() {
    assert!(resource_name("n", "my-queue_1").is_ok());
    let long = "a".repeat(129);
    for (value, fragment) in [
        ("", "n is empty"),
        (long.as_str(), "n is 129 characters long"),
        ("my queue", "contains ' '"),
        ("q.1", "contains '.'"),
    ] {
        let err = resource_name("n", value).unwrap_err();
        assert!(err.message().contains(fragment), "{value:?}: {err}");
    }
}

#[test]
fn job_names_start_with_a_letter_or_digit() {
    assert!(job_name("jobName", "1job-a_b").is_ok());
    let err = job_name("jobName", "-job").unwrap_err();
    assert!(err
        .message()
        .starts_with("jobName '-job' must start with a letter or a digit"));
    let err = job_name("jobName", "job!").unwrap_err();
    assert!(err.message().starts_with("jobName 'job!' contains '!'"));
}

#[test]
fn tag_maps_are_bounded_and_aws_keys_are_reserved() {
    let ok = BTreeMap::from([("team".to_string(), String::new())]);
    assert!(tags("tags", &ok).is_ok());
    let cases: Vec<(BTreeMap<String, String>, &str)> = vec![
        (BTreeMap::new(), "tags is empty"),
        (
            (0..51).map(|i| (format!("k{i}"), "v".into())).collect(),
            "tags has 51 tags",
        ),
        (
            BTreeMap::from([("a".repeat(129), "v".into())]),
            "the tag key is 129 characters",
        ),
        (
            BTreeMap::from([("k".into(), "v".repeat(257))]),
            "tags.k has a value of 257",
        ),
        (
            BTreeMap::from([("AWS:owner".into(), "v".into())]),
            "reserved for AWS",
        ),
        (
            BTreeMap::from([(String::new(), "v".into())]),
            "a tag key is empty",
        ),
    ];
    for (map, fragment) in cases {
        let err = tags("tags", &map).unwrap_err();
        assert!(err.message().starts_with("tags"), "{err}");
        assert!(err.message().contains(fragment), "{fragment}: {err}");
    }
}

#[test]
fn untag_keys_are_bounded() {
    assert!(tag_keys("tagKeys", &["a".into()]).is_ok());
    assert!(tag_keys("tagKeys", &[])
        .unwrap_err()
        .message()
        .starts_with("tagKeys is empty"));
    let many: Vec<String> = (0..51).map(|i| format!("k{i}")).collect();
    assert!(tag_keys("tagKeys", &many)
        .unwrap_err()
        .message()
        .starts_with("tagKeys has 51"));
    let err = tag_keys("tagKeys", &["a".into(), "aws:x".into()]).unwrap_err();
    assert!(err
        .message()
        .starts_with("tagKeys[1]: tag keys starting with 'aws:'"));
}

#[test]
fn capacity_limits_name_the_entry_at_fault() {
    let limit = |unit: Option<&str>, max: Option<i32>| CapacityLimit {
        capacity_unit: unit.map(String::from),
        max_capacity: max,
    };
    let g5 = Some("ml.g5.xlarge");
    assert!(capacity_limits("capacityLimits", &[limit(g5, Some(1))], 1).is_ok());
    let six: Vec<CapacityLimit> = (0..6)
        .map(|i| limit(Some(&format!("ml.t{i}")), Some(1)))
        .collect();
    let cases: Vec<(Vec<CapacityLimit>, i32, &str)> = vec![
        (vec![], 1, "capacityLimits is empty"),
        (six, 1, "capacityLimits has 6 limits"),
        (
            vec![limit(None, Some(1))],
            1,
            "capacityLimits[0].capacityUnit is missing",
        ),
        (
            vec![limit(Some(" "), Some(1))],
            1,
            "capacityLimits[0].capacityUnit is empty",
        ),
        (
            vec![limit(Some("NUM_INSTANCES"), Some(1))],
            1,
            "capacityLimits[0].capacityUnit NUM_INSTANCES",
        ),
        (
            vec![limit(Some("ml g5"), Some(1))],
            1,
            "capacityLimits[0].capacityUnit 'ml g5' is not an instance type",
        ),
        (
            vec![limit(g5, Some(1)), limit(g5, Some(2))],
            1,
            "capacityLimits[1].capacityUnit 'ml.g5.xlarge' appears twice",
        ),
        (
            vec![limit(g5, None)],
            1,
            "capacityLimits[0].maxCapacity is missing",
        ),
        (
            vec![limit(Some("ml.p5"), Some(2)), limit(g5, Some(0))],
            1,
            "capacityLimits[1].maxCapacity is 0",
        ),
        (
            vec![limit(g5, Some(-1))],
            0,
            "capacityLimits[0].maxCapacity is -1",
        ),
    ];
    for (limits, min, start) in cases {
        let err = capacity_limits("capacityLimits", &limits, min).unwrap_err();
        assert!(err.message().starts_with(start), "{start}: {err}");
    }
    // Quota shares may give a limit of 0 (borrow-only units).
    let share = [QuotaShareCapacityLimit {
        capacity_unit: "ml.g5.xlarge".into(),
        max_capacity: 0,
    }];
    assert!(capacity_limits("capacityLimits", &share, 0).is_ok());
}

#[test]
fn max_results_defaults_and_stays_within_one_to_a_hundred() {
    assert_eq!(max_results("maxResults", None, 100), Ok(100));
    assert_eq!(max_results("maxResults", Some(7), 100), Ok(7));
    for bad in [0, -1, 101] {
        let err = max_results("maxResults", Some(bad), 100).unwrap_err();
        assert!(err
            .message()
            .starts_with(&format!("maxResults is {bad}: give a page size")));
    }
}

#[test]
fn service_environment_requests_are_checked() {
    let base = json!({
        "serviceEnvironmentName": "se",
        "serviceEnvironmentType": "SAGEMAKER_TRAINING",
        "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}],
        "tags": {"a": "b"}
    });
    table(
        base,
        validate_create_service_environment,
        &[
            (
                "bad name",
                json!({"serviceEnvironmentName": "s e"}),
                "serviceEnvironmentName 's e'",
                "",
            ),
            (
                "limit below one",
                json!({"capacityLimits": [{"maxCapacity": 0, "capacityUnit": "ml.g5.xlarge"}]}),
                "capacityLimits[0].maxCapacity is 0",
                "at least 1",
            ),
            (
                "no limits",
                json!({"capacityLimits": []}),
                "capacityLimits is empty",
                "",
            ),
            ("bad tags", json!({"tags": {}}), "tags is empty", ""),
        ],
    );
    let err = parse_request::<CreateServiceEnvironmentRequest>(
        br#"{"serviceEnvironmentName":"se","serviceEnvironmentType":"ECS","capacityLimits":[]}"#,
    )
    .unwrap_err();
    assert!(
        err.message().contains(
            "serviceEnvironmentType: unknown variant `ECS`, expected `SAGEMAKER_TRAINING`"
        ),
        "{err}"
    );

    let base = json!({"serviceEnvironment": "se", "state": "DISABLED"});
    table(
        base,
        validate_update_service_environment,
        &[
            (
                "empty name",
                json!({"serviceEnvironment": ""}),
                "serviceEnvironment is empty",
                "",
            ),
            (
                "limit below one",
                json!({"capacityLimits": [{"maxCapacity": 0, "capacityUnit": "ml.g5.xlarge"}]}),
                "capacityLimits[0].maxCapacity",
                "",
            ),
        ],
    );
    table(
        json!({}),
        validate_describe_service_environments,
        &[
            (
                "empty entry",
                json!({"serviceEnvironments": [""]}),
                "serviceEnvironments[0] is empty",
                "",
            ),
            (
                "too many",
                json!({"serviceEnvironments": vec!["se"; 101]}),
                "serviceEnvironments has 101 entries",
                "",
            ),
            ("page size", json!({"maxResults": 0}), "maxResults is 0", ""),
        ],
    );
}

#[test]
fn job_queue_requests_are_checked() {
    let base = json!({
        "jobQueueName": "jq",
        "priority": 1,
        "jobQueueType": "SAGEMAKER_TRAINING",
        "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/sp",
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
        "jobStateTimeLimitActions": [{
            "reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "state": "RUNNABLE",
            "maxTimeSeconds": 600, "action": "TERMINATE"
        }],
        "tags": {"a": "b"}
    });
    let action = |reason: &str, seconds: i32, action: &str| json!({"reason": reason, "state": "RUNNABLE", "maxTimeSeconds": seconds, "action": action});
    let capacity = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY";
    table(
        base.clone(),
        validate_create_job_queue,
        &[
            (
                "bad name",
                json!({"jobQueueName": ""}),
                "jobQueueName is empty",
                "",
            ),
            (
                "no type",
                json!({"jobQueueType": null}),
                "jobQueueType is missing",
                "SAGEMAKER_TRAINING",
            ),
            (
                "container type",
                json!({"jobQueueType": "ECS"}),
                "jobQueueType ECS is not supported",
                "SAGEMAKER_TRAINING",
            ),
            (
                "priority too high",
                json!({"priority": 1001}),
                "priority is 1001",
                "0 to 1000",
            ),
            (
                "negative priority",
                json!({"priority": -1}),
                "priority is -1",
                "",
            ),
            (
                "compute environments",
                json!({"computeEnvironmentOrder": [{"order": 1, "computeEnvironment": "ce"}]}),
                "computeEnvironmentOrder is for container job queues",
                "serviceEnvironmentOrder",
            ),
            (
                "no service environment",
                json!({"serviceEnvironmentOrder": null}),
                "serviceEnvironmentOrder is missing",
                "",
            ),
            (
                "two service environments",
                json!({"serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "a"}, {"order": 2, "serviceEnvironment": "b"}]}),
                "serviceEnvironmentOrder has 2 entries",
                "exactly one",
            ),
            (
                "negative order",
                json!({"serviceEnvironmentOrder": [{"order": -1, "serviceEnvironment": "a"}]}),
                "serviceEnvironmentOrder[0].order is -1",
                "",
            ),
            (
                "empty environment",
                json!({"serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": ""}]}),
                "serviceEnvironmentOrder[0].serviceEnvironment is empty",
                "",
            ),
            (
                "no policy",
                json!({"schedulingPolicyArn": null}),
                "schedulingPolicyArn is missing",
                "quotaSharePolicy",
            ),
            (
                "empty policy",
                json!({"schedulingPolicyArn": ""}),
                "schedulingPolicyArn is empty",
                "",
            ),
            (
                "cancel action",
                json!({"jobStateTimeLimitActions": [action(capacity, 600, "CANCEL")]}),
                "jobStateTimeLimitActions[0].action is CANCEL",
                "only TERMINATE",
            ),
            (
                "too short",
                json!({"jobStateTimeLimitActions": [action(capacity, 599, "TERMINATE")]}),
                "jobStateTimeLimitActions[0].maxTimeSeconds is 599",
                "600",
            ),
            (
                "too long",
                json!({"jobStateTimeLimitActions": [action(capacity, 86401, "TERMINATE")]}),
                "jobStateTimeLimitActions[0].maxTimeSeconds is 86401",
                "86400",
            ),
            (
                "unknown reason",
                json!({"jobStateTimeLimitActions": [action("UNDETERMINED", 600, "TERMINATE")]}),
                "jobStateTimeLimitActions[0].reason 'UNDETERMINED'",
                "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
            ),
            (
                "reason twice",
                json!({"jobStateTimeLimitActions": [action(capacity, 600, "TERMINATE"), action(capacity, 700, "TERMINATE")]}),
                "jobStateTimeLimitActions[1].reason",
                "appears twice",
            ),
            (
                "bad tags",
                json!({"tags": {"aws:x": "y"}}),
                "tags.aws:x",
                "reserved",
            ),
        ],
    );
    // An empty computeEnvironmentOrder is what some clients send by default.
    let empty = patched(&base, json!({"computeEnvironmentOrder": []}));
    assert!(validate_create_job_queue(&parsed(&empty)).is_ok());

    table(
        json!({"jobQueue": "jq", "priority": 2}),
        validate_update_job_queue,
        &[
            (
                "empty queue",
                json!({"jobQueue": ""}),
                "jobQueue is empty",
                "",
            ),
            (
                "priority too high",
                json!({"priority": 5000}),
                "priority is 5000",
                "",
            ),
            (
                "compute environments",
                json!({"computeEnvironmentOrder": [{"order": 1, "computeEnvironment": "ce"}]}),
                "computeEnvironmentOrder",
                "",
            ),
            (
                "two service environments",
                json!({"serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "a"}, {"order": 2, "serviceEnvironment": "b"}]}),
                "serviceEnvironmentOrder has 2 entries",
                "",
            ),
            (
                "policy removed",
                json!({"schedulingPolicyArn": ""}),
                "schedulingPolicyArn is empty",
                "not removed",
            ),
            (
                "bad action",
                json!({"jobStateTimeLimitActions": [action(capacity, 1, "TERMINATE")]}),
                "jobStateTimeLimitActions[0].maxTimeSeconds is 1",
                "",
            ),
        ],
    );
    table(
        json!({}),
        validate_describe_job_queues,
        &[
            (
                "empty entry",
                json!({"jobQueues": ["jq", ""]}),
                "jobQueues[1] is empty",
                "",
            ),
            (
                "page size",
                json!({"maxResults": 101}),
                "maxResults is 101",
                "",
            ),
        ],
    );
}

#[test]
fn scheduling_policy_requests_are_checked() {
    let base =
        json!({"name": "sp", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}});
    let fairshare = |policy: Value| json!({"quotaSharePolicy": null, "fairsharePolicy": policy});
    table(
        base.clone(),
        validate_create_scheduling_policy,
        &[
            ("bad name", json!({"name": "s p"}), "name 's p'", ""),
            (
                "both kinds",
                json!({"fairsharePolicy": {}}),
                "quotaSharePolicy and fairsharePolicy are both set",
                "",
            ),
            (
                "neither kind",
                json!({"quotaSharePolicy": null}),
                "quotaSharePolicy is missing",
                "FIFO",
            ),
            (
                "decay too long",
                fairshare(json!({"shareDecaySeconds": 604801})),
                "fairsharePolicy.shareDecaySeconds is 604801",
                "",
            ),
            (
                "reservation too high",
                fairshare(json!({"computeReservation": 100})),
                "fairsharePolicy.computeReservation is 100",
                "",
            ),
            (
                "bad identifier",
                fairshare(json!({"shareDistribution": [{"shareIdentifier": "a-b"}]})),
                "fairsharePolicy.shareDistribution[0].shareIdentifier 'a-b'",
                "",
            ),
            (
                "identifier twice",
                fairshare(
                    json!({"shareDistribution": [{"shareIdentifier": "a"}, {"shareIdentifier": "a"}]}),
                ),
                "fairsharePolicy.shareDistribution[1].shareIdentifier 'a' appears twice",
                "",
            ),
            (
                "weight too small",
                fairshare(
                    json!({"shareDistribution": [{"shareIdentifier": "a*", "weightFactor": 0.0}]}),
                ),
                "fairsharePolicy.shareDistribution[0].weightFactor is 0",
                "",
            ),
            ("bad tags", json!({"tags": {}}), "tags is empty", ""),
        ],
    );
    // A fair-share policy may be stored; queues refuse it later.
    let stored = patched(
        &base,
        fairshare(
            json!({"shareDistribution": [{"shareIdentifier": "teamA*", "weightFactor": 0.5}]}),
        ),
    );
    assert!(validate_create_scheduling_policy(&parsed(&stored)).is_ok());

    table(
        json!({"arn": "arn:x"}),
        validate_update_scheduling_policy,
        &[
            ("empty arn", json!({"arn": ""}), "arn is empty", ""),
            (
                "both kinds",
                json!({"quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}, "fairsharePolicy": {}}),
                "quotaSharePolicy and fairsharePolicy are both set",
                "",
            ),
            (
                "bad fairshare",
                json!({"fairsharePolicy": {"computeReservation": -1}}),
                "fairsharePolicy.computeReservation is -1",
                "",
            ),
        ],
    );
    table(
        json!({"arns": ["arn:x"]}),
        validate_describe_scheduling_policies,
        &[("empty entry", json!({"arns": [""]}), "arns[0] is empty", "")],
    );
}

#[test]
fn quota_share_requests_are_checked() {
    let base = json!({
        "quotaShareName": "QS1",
        "jobQueue": "jq",
        "capacityLimits": [{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}],
        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 200},
        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
        "tags": {"a": "b"}
    });
    table(
        base.clone(),
        validate_create_quota_share,
        &[
            (
                "bad name",
                json!({"quotaShareName": "QS 1"}),
                "quotaShareName 'QS 1'",
                "",
            ),
            (
                "empty queue",
                json!({"jobQueue": ""}),
                "jobQueue is empty",
                "",
            ),
            (
                "no limits",
                json!({"capacityLimits": []}),
                "capacityLimits is empty",
                "",
            ),
            (
                "negative limit",
                json!({"capacityLimits": [{"maxCapacity": -1, "capacityUnit": "ml.g5.xlarge"}]}),
                "capacityLimits[0].maxCapacity is -1",
                "at least 0",
            ),
            (
                "borrow limit below -1",
                json!({"resourceSharingConfiguration": {"borrowLimit": -2}}),
                "resourceSharingConfiguration.borrowLimit is -2",
                "",
            ),
            (
                "borrow limit on LEND",
                json!({"resourceSharingConfiguration": {"strategy": "LEND", "borrowLimit": 100}}),
                "resourceSharingConfiguration.borrowLimit applies only to LEND_AND_BORROW",
                "LEND",
            ),
            (
                "borrow limit on RESERVE",
                json!({"resourceSharingConfiguration": {"strategy": "RESERVE", "borrowLimit": 0}}),
                "resourceSharingConfiguration.borrowLimit applies only",
                "RESERVE",
            ),
            (
                "bad tags",
                json!({"tags": {"": "x"}}),
                "tags",
                "a tag key is empty",
            ),
        ],
    );
    // The default -1 may be echoed back for any strategy, and a limit of 0 is allowed.
    let echo = patched(
        &base,
        json!({
            "resourceSharingConfiguration": {"strategy": "RESERVE", "borrowLimit": -1},
            "capacityLimits": [{"maxCapacity": 0, "capacityUnit": "ml.g5.xlarge"}]
        }),
    );
    assert!(validate_create_quota_share(&parsed(&echo)).is_ok());
    let err = parse_request::<CreateQuotaShareRequest>(
        patched(&base, json!({"preemptionConfiguration": null}))
            .to_string()
            .as_bytes(),
    )
    .unwrap_err();
    assert!(
        err.message()
            .contains("preemptionConfiguration is required"),
        "{err}"
    );

    table(
        json!({"quotaShareArn": "arn:x", "state": "DISABLED"}),
        validate_update_quota_share,
        &[
            (
                "empty arn",
                json!({"quotaShareArn": ""}),
                "quotaShareArn is empty",
                "",
            ),
            (
                "six limits",
                json!({"capacityLimits": (0..6).map(|i| json!({"maxCapacity": 1, "capacityUnit": format!("ml.t{i}")})).collect::<Vec<_>>()}),
                "capacityLimits has 6 limits",
                "",
            ),
            (
                "borrow limit on LEND",
                json!({"resourceSharingConfiguration": {"strategy": "LEND", "borrowLimit": 5}}),
                "resourceSharingConfiguration.borrowLimit applies only",
                "",
            ),
        ],
    );
    table(
        json!({"jobQueue": "jq"}),
        validate_list_quota_shares,
        &[
            (
                "empty queue",
                json!({"jobQueue": ""}),
                "jobQueue is empty",
                "",
            ),
            ("page size", json!({"maxResults": 0}), "maxResults is 0", ""),
        ],
    );
}

#[test]
fn submit_service_job_requests_are_checked() {
    let base = json!({
        "jobName": "job-1",
        "jobQueue": "jq",
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": "{}",
        "quotaShareName": "QS1",
        "schedulingPriority": 9999,
        "retryStrategy": {"attempts": 10, "evaluateOnExit": [{"action": "Retry", "onStatusReason": "*"}]},
        "timeoutConfig": {"attemptDurationSeconds": 1},
        "preemptionConfiguration": {"preemptionRetriesBeforeTermination": 0},
        "clientToken": "t",
        "tags": {"a": "b"}
    });
    let rule = |action: Value, reason: Value| json!({"action": action, "onStatusReason": reason});
    table(
        base,
        validate_submit_service_job,
        &[
            (
                "bad job name",
                json!({"jobName": "_job"}),
                "jobName '_job' must start with a letter or a digit",
                "",
            ),
            (
                "empty queue",
                json!({"jobQueue": ""}),
                "jobQueue is empty",
                "",
            ),
            (
                "empty payload",
                json!({"serviceRequestPayload": " "}),
                "serviceRequestPayload is empty",
                "CreateTrainingJob",
            ),
            (
                "long client token",
                json!({"clientToken": "x".repeat(65)}),
                "clientToken is 65 characters long",
                "",
            ),
            (
                "empty client token",
                json!({"clientToken": ""}),
                "clientToken is 0 characters long",
                "",
            ),
            (
                "priority too high",
                json!({"schedulingPriority": 10000}),
                "schedulingPriority is 10000",
                "0 to 9999",
            ),
            (
                "negative priority",
                json!({"schedulingPriority": -1}),
                "schedulingPriority is -1",
                "",
            ),
            (
                "share identifier",
                json!({"shareIdentifier": "teamA"}),
                "shareIdentifier is for fair-share queues",
                "quotaShareName",
            ),
            (
                "no quota share",
                json!({"quotaShareName": null}),
                "quotaShareName is missing",
                "ListQuotaShares",
            ),
            (
                "bad quota share",
                json!({"quotaShareName": "Q S"}),
                "quotaShareName 'Q S'",
                "",
            ),
            (
                "no attempts",
                json!({"retryStrategy": {"attempts": 0}}),
                "retryStrategy.attempts is 0",
                "1 to 10",
            ),
            (
                "too many attempts",
                json!({"retryStrategy": {"attempts": 11}}),
                "retryStrategy.attempts is 11",
                "",
            ),
            (
                "six rules",
                json!({"retryStrategy": {"evaluateOnExit": vec![rule(json!("EXIT"), json!("*")); 6]}}),
                "retryStrategy.evaluateOnExit has 6 rules",
                "",
            ),
            (
                "rule without action",
                json!({"retryStrategy": {"evaluateOnExit": [rule(Value::Null, json!("*"))]}}),
                "retryStrategy.evaluateOnExit[0].action is missing",
                "RETRY or EXIT",
            ),
            (
                "rule without glob",
                json!({"retryStrategy": {"evaluateOnExit": [rule(json!("EXIT"), Value::Null)]}}),
                "retryStrategy.evaluateOnExit[0].onStatusReason is missing",
                "",
            ),
            (
                "empty glob",
                json!({"retryStrategy": {"evaluateOnExit": [rule(json!("EXIT"), json!(""))]}}),
                "retryStrategy.evaluateOnExit[0].onStatusReason is 0 characters long",
                "",
            ),
            (
                "long glob",
                json!({"retryStrategy": {"evaluateOnExit": [rule(json!("EXIT"), json!("x".repeat(513)))]}}),
                "retryStrategy.evaluateOnExit[0].onStatusReason is 513 characters long",
                "",
            ),
            (
                "control character",
                json!({"retryStrategy": {"evaluateOnExit": [rule(json!("EXIT"), json!("a\tb"))]}}),
                "retryStrategy.evaluateOnExit[0].onStatusReason",
                "control character",
            ),
            (
                "zero timeout",
                json!({"timeoutConfig": {"attemptDurationSeconds": 0}}),
                "timeoutConfig.attemptDurationSeconds is 0",
                "",
            ),
            (
                "negative preemption retries",
                json!({"preemptionConfiguration": {"preemptionRetriesBeforeTermination": -1}}),
                "preemptionConfiguration.preemptionRetriesBeforeTermination is -1",
                "",
            ),
            (
                "bad tags",
                json!({"tags": {"aws:k": "v"}}),
                "tags.aws:k",
                "",
            ),
        ],
    );
    let err = parse_request::<SubmitServiceJobRequest>(
        br#"{"jobName":"j","jobQueue":"q","serviceRequestPayload":"{}","serviceJobType":"ECS"}"#,
    )
    .unwrap_err();
    assert!(
        err.message()
            .contains("serviceJobType: unknown variant `ECS`"),
        "{err}"
    );
}

#[test]
fn other_service_job_requests_are_checked() {
    table(
        json!({"jobId": "a", "schedulingPriority": 0}),
        validate_update_service_job,
        &[
            ("empty id", json!({"jobId": ""}), "jobId is empty", ""),
            (
                "priority too high",
                json!({"schedulingPriority": 10000}),
                "schedulingPriority is 10000",
                "",
            ),
        ],
    );
    table(
        json!({"jobId": "a", "reason": "r"}),
        validate_terminate_service_job,
        &[
            ("empty id", json!({"jobId": ""}), "jobId is empty", ""),
            ("empty reason", json!({"reason": ""}), "reason is empty", ""),
        ],
    );
    table(
        json!({"jobs": ["a"], "reason": "r"}),
        validate_terminate_service_jobs,
        &[
            ("no jobs", json!({"jobs": []}), "jobs is empty", "1 to 50"),
            (
                "51 jobs",
                json!({"jobs": vec!["a"; 51]}),
                "jobs has 51 ids",
                "",
            ),
            (
                "empty id",
                json!({"jobs": ["a", ""]}),
                "jobs[1] is empty",
                "",
            ),
            (
                "empty reason",
                json!({"reason": " "}),
                "reason is empty",
                "",
            ),
        ],
    );
    table(
        json!({"jobQueue": "jq"}),
        validate_list_service_jobs,
        &[
            (
                "empty queue",
                json!({"jobQueue": ""}),
                "jobQueue is empty",
                "",
            ),
            (
                "page size",
                json!({"maxResults": 1000}),
                "maxResults is 1000",
                "",
            ),
        ],
    );
}

#[test]
fn tag_requests_are_checked_after_the_server_fills_in_the_uri_members() {
    let mut tag: TagResourceRequest = parse_request(br#"{"tags":{"a":"b"}}"#).unwrap();
    let err = validate_tag_resource(&tag).unwrap_err();
    assert!(err.message().starts_with("resourceArn is empty"));
    tag.resource_arn = "arn:x".into();
    assert!(validate_tag_resource(&tag).is_ok());
    tag.tags.clear();
    assert!(validate_tag_resource(&tag)
        .unwrap_err()
        .message()
        .starts_with("tags is empty"));

    let mut untag = UntagResourceRequest {
        resource_arn: "arn:x".into(),
        tag_keys: vec![],
    };
    assert!(validate_untag_resource(&untag)
        .unwrap_err()
        .message()
        .starts_with("tagKeys is empty"));
    untag.tag_keys.push("k".into());
    assert!(validate_untag_resource(&untag).is_ok());
}

fn tags_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_policy_s_fair_sharing_tags_take_only_their_values_and_say_which() {
    for (key, value, says) in [
        ("qm:idle-assignment", "ROUND_ROBIN", "FIFO"),
        ("qm:idle-assignment", "fair_share", "FAIR_SHARE"),
        ("qm:fair-reclaim", "yes", "true"),
        ("qm:fair-reclaim", "TRUE", "false"),
    ] {
        let e = policy_tags("tags", &tags_of(&[(key, value)])).unwrap_err();
        let m = e.message();
        assert!(
            m.starts_with(&format!("tags.{key} is '{value}'")) && m.contains(says),
            "{m}"
        );
    }
    let ok = tags_of(&[
        ("qm:idle-assignment", "FAIR_SHARE"),
        ("qm:fair-reclaim", "true"),
    ]);
    policy_tags("tags", &ok).unwrap();
    assert_eq!(idle_rules(&ok), (qm_core::IdleAssignment::FairShare, true));
    assert_eq!(
        idle_rules(&BTreeMap::new()),
        (qm_core::IdleAssignment::Fifo, false)
    );
    // CreateSchedulingPolicy checks them too.
    let r: CreateSchedulingPolicyRequest = parsed(&json!({
        "name": "p", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
        "tags": {"qm:idle-assignment": "LIFO"},
    }));
    let m = validate_create_scheduling_policy(&r)
        .unwrap_err()
        .message()
        .to_string();
    assert!(m.contains("tags.qm:idle-assignment"), "{m}");
}

#[test]
fn a_share_s_group_and_weight_tags_are_checked_with_the_share_s_other_qm_tags() {
    for (key, value) in [
        ("qm:group", ""),
        ("qm:group", "research org"),
        ("qm:group", &"g".repeat(65)),
        ("qm:weight", "0"),
        ("qm:weight", "10001"),
        ("qm:weight", "1.5"),
    ] {
        let e = protection_tags("tags", &tags_of(&[(key, value)])).unwrap_err();
        assert!(
            e.message().starts_with(&format!("tags.{key} is ")),
            "{}",
            e.message()
        );
    }
    let ok = tags_of(&[("qm:group", "research-org_2"), ("qm:weight", "10000")]);
    protection_tags("tags", &ok).unwrap();
    assert_eq!(group(&ok), Some("research-org_2"));
    assert_eq!(weight(&ok), 10_000);
}

#[test]
fn group_definitions_name_the_field_that_is_out_of_bounds() {
    let check = |body: Value| {
        parsed::<qm::QueueGroups>(&body)
            .checked(100)
            .map_err(|e| e.message().to_string())
    };
    let ok =
        check(json!({"groups": [{"name": "research", "limits": {"ml.p4d.24xlarge": 6}}]})).unwrap();
    assert_eq!(ok.groups[0].weight, Some(1), "the weight defaults to 1");
    for (body, field) in [
        (json!({"groups": [{"name": "a b"}]}), "groups[0].name"),
        (
            json!({"groups": [{"name": "a"}, {"name": "a"}]}),
            "groups[1].name",
        ),
        (
            json!({"groups": [{"name": "a", "weight": 0}]}),
            "groups[0].weight",
        ),
        (
            json!({"groups": [{"name": "a", "weight": 10001}]}),
            "groups[0].weight",
        ),
        (
            json!({"groups": [{"name": "a", "limits": {"ml.g5.xlarge": -1}}]}),
            "groups[0].limits.ml.g5.xlarge is -1",
        ),
        (
            json!({"groups": [{"name": "a", "limits": {"t1": 1, "t2": 1, "t3": 1, "t4": 1, "t5": 1, "t6": 1}}]}),
            "groups[0].limits has 6",
        ),
        (
            json!({"groups": [{"name": "a", "limits": {"a b": 1}}]}),
            "groups[0].limits",
        ),
    ] {
        let m = check(body.clone()).unwrap_err();
        assert!(m.starts_with(field), "{body}: {m}");
    }
    let many: Vec<Value> = (0..101).map(|i| json!({"name": format!("g{i}")})).collect();
    assert!(check(json!({"groups": many}))
        .unwrap_err()
        .contains("at most 100"));
}
