"""Every request the server must refuse: HTTP 400 ClientException whose message names the
offending field (spec §1, §3, §6; DESIGN.md §5). botocore's own parameter validation is off
(`raw_batch`), so the server sees the bad values."""

import json
import uuid

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (ACCOUNT, REGION, UNIT, ShareSpec, create_environment, create_share, error_of,
                    make_queue,
                    payload, share_arn, unique, wait_status)


def rejects(call, *fields, **kwargs):
    """`call(**kwargs)` raises a 400 ClientException whose message names one of `fields`."""
    with pytest.raises(ClientError) as e:
        call(**kwargs)
    code, message, status = error_of(e)
    assert (code, status) == ("ClientException", 400), f"{code} {status}: {message}"
    assert message, "the message says what to fix"
    if fields:
        assert any(f.lower() in message.lower() for f in fields), (
            f"message should name {' or '.join(fields)}: {message!r}")
    return message


@pytest.fixture(scope="module")
def q(server):
    batch = server.client()
    queue = make_queue(batch, "valid", [ShareSpec("A", "LEND_AND_BORROW", 1, borrow_limit=-1),
                                        ShareSpec("D", "LEND", 1)], env_max=2)
    batch.update_quota_share(quotaShareArn=queue.shares["D"], state="DISABLED")
    return queue


def submit_args(q, **over):
    args = {
        "jobName": "j",
        "jobQueue": q.name,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": "A",
        "serviceRequestPayload": json.dumps(payload("exit_code.py")),
    }
    args.update(over)
    return {k: v for k, v in args.items() if v is not None}


def share_args(q, **over):
    args = ShareSpec(unique("s")).request(q.name)
    args.update(over)
    return args


# -- names --------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["has space", "x" * 129, "", "dot.name", "é"])
def test_bad_names_are_refused(raw_batch, q, bad):
    rejects(raw_batch.create_quota_share, "quotaShareName", **share_args(q, quotaShareName=bad))
    rejects(raw_batch.create_service_environment, "serviceEnvironmentName",
            serviceEnvironmentName=bad, serviceEnvironmentType="SAGEMAKER_TRAINING",
            capacityLimits=[{"maxCapacity": 1, "capacityUnit": UNIT}])
    rejects(raw_batch.create_scheduling_policy, "name", name=bad,
            quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})
    rejects(raw_batch.create_job_queue, "jobQueueName", jobQueueName=bad,
            jobQueueType="SAGEMAKER_TRAINING", priority=1, schedulingPolicyArn=q.policy_arn,
            serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": q.env_name}])
    rejects(raw_batch.submit_service_job, "jobName", **submit_args(q, jobName=bad))


def test_a_duplicate_name_is_refused(raw_batch, q):
    assert "already exists" in rejects(raw_batch.create_quota_share, **share_args(q, quotaShareName="A"))
    assert "already exists" in rejects(
        raw_batch.create_service_environment, serviceEnvironmentName=q.env_name,
        serviceEnvironmentType="SAGEMAKER_TRAINING", capacityLimits=[{"maxCapacity": 1, "capacityUnit": UNIT}])
    assert "already exists" in rejects(raw_batch.create_scheduling_policy, name=q.policy_name,
                                       quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})


# -- quota shares -------------------------------------------------------------------------

def test_a_queue_takes_at_most_20_quota_shares(batch, raw_batch):
    q = make_queue(batch, "twenty", [], env_max=3)
    for i in range(20):
        create_share(batch, q.name, ShareSpec(f"s{i:02}", "LEND", 1))
    message = rejects(raw_batch.create_quota_share, "20", **ShareSpec("s20", "LEND", 1).request(q.name))
    assert "20" in message
    assert len(batch.list_quota_shares(jobQueue=q.name)["quotaShares"]) == 20


def test_share_capacity_limits_are_checked(raw_batch, q):
    six = [{"maxCapacity": 1, "capacityUnit": f"ml.g5.{s}"}
           for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")]
    rejects(raw_batch.create_quota_share, "capacityLimits", **share_args(q, capacityLimits=six))
    rejects(raw_batch.create_quota_share, "capacityLimits", **share_args(q, capacityLimits=[]))
    rejects(raw_batch.create_quota_share, "maxCapacity",
            **share_args(q, capacityLimits=[{"maxCapacity": -1, "capacityUnit": UNIT}]))
    rejects(raw_batch.create_quota_share, "capacityUnit", **share_args(q, capacityLimits=[
        {"maxCapacity": 1, "capacityUnit": UNIT}, {"maxCapacity": 2, "capacityUnit": UNIT}]))
    rejects(raw_batch.update_quota_share, "capacityLimits", quotaShareArn=q.shares["A"], capacityLimits=six)


@pytest.mark.parametrize("strategy", ["LEND", "RESERVE"])
def test_a_borrow_limit_is_only_for_lend_and_borrow_shares(raw_batch, q, strategy):
    rejects(raw_batch.create_quota_share, "borrowLimit", **share_args(
        q, resourceSharingConfiguration={"strategy": strategy, "borrowLimit": 100}))


def test_a_borrow_limit_below_minus_one_is_refused(raw_batch, q):
    rejects(raw_batch.create_quota_share, "borrowLimit", **share_args(
        q, resourceSharingConfiguration={"strategy": "LEND_AND_BORROW", "borrowLimit": -2}))
    rejects(raw_batch.update_quota_share, "borrowLimit", quotaShareArn=q.shares["A"],
            resourceSharingConfiguration={"strategy": "LEND_AND_BORROW", "borrowLimit": -2})


def test_unknown_enum_values_are_refused(raw_batch, q):
    rejects(raw_batch.create_quota_share, "strategy",
            **share_args(q, resourceSharingConfiguration={"strategy": "SHARE"}))
    rejects(raw_batch.create_quota_share, "inSharePreemption",
            **share_args(q, preemptionConfiguration={"inSharePreemption": "MAYBE"}))
    rejects(raw_batch.update_quota_share, "state", quotaShareArn=q.shares["A"], state="PAUSED")


def test_a_share_needs_an_existing_queue(raw_batch, q):
    rejects(raw_batch.create_quota_share, "jobQueue", **share_args(q, jobQueue="no-such-queue"))


def test_quota_share_calls_need_a_well_formed_known_arn(raw_batch, q):
    rejects(raw_batch.describe_quota_share, "quotaShareArn", quotaShareArn="A")
    rejects(raw_batch.describe_quota_share, "quotaShareArn", quotaShareArn=share_arn(q.arn, "nope"))
    rejects(raw_batch.update_quota_share, "quotaShareArn", quotaShareArn=share_arn(q.arn, "nope"), state="DISABLED")
    rejects(raw_batch.delete_quota_share, "quotaShareArn", quotaShareArn=share_arn(q.arn, "nope"))


@pytest.mark.parametrize("region,account", [("us-west-2", ACCOUNT), (REGION, "999999999999")])
def test_an_arn_of_another_region_or_account_is_refused(raw_batch, q, region, account):
    foreign = q.shares["A"].replace(f":{REGION}:{ACCOUNT}:", f":{region}:{account}:")
    rejects(raw_batch.describe_quota_share, "quotaShareArn", region, account, quotaShareArn=foreign)
    foreign_queue = q.arn.replace(f":{REGION}:{ACCOUNT}:", f":{region}:{account}:")
    rejects(raw_batch.submit_service_job, "jobQueue", region, account, **submit_args(q, jobQueue=foreign_queue))


def test_deleting_an_enabled_share_is_refused(raw_batch, q):
    message = rejects(raw_batch.delete_quota_share, "DISABLED", "state", quotaShareArn=q.shares["A"])
    assert "disable" in message.lower()


# -- environments, policies, queues -------------------------------------------------------

def test_service_environment_requests_are_checked(raw_batch, q):
    def create(**over):
        args = {"serviceEnvironmentName": unique("se"), "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                "capacityLimits": [{"maxCapacity": 1, "capacityUnit": UNIT}]}
        args.update(over)
        return raw_batch.create_service_environment(**args)

    six = [{"maxCapacity": 1, "capacityUnit": f"ml.g5.{s}"}
           for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")]
    rejects(create, "capacityLimits", capacityLimits=six)
    rejects(create, "capacityLimits", capacityLimits=[])
    rejects(create, "serviceEnvironmentType", serviceEnvironmentType="EC2")
    rejects(raw_batch.delete_service_environment, "serviceEnvironment", "DISABLED",
            serviceEnvironment=q.env_name)


def test_scheduling_policy_requests_are_checked(raw_batch, q):
    rejects(raw_batch.create_scheduling_policy, "idleResourceAssignmentStrategy", name=unique("sp"),
            quotaSharePolicy={"idleResourceAssignmentStrategy": "LIFO"})
    rejects(raw_batch.create_scheduling_policy, "fairsharePolicy", "quotaSharePolicy", name=unique("sp"),
            quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"},
            fairsharePolicy={"shareDecaySeconds": 0})
    rejects(raw_batch.update_scheduling_policy, "fairsharePolicy", "quotaSharePolicy", arn=q.policy_arn,
            fairsharePolicy={"shareDecaySeconds": 0})
    rejects(raw_batch.delete_scheduling_policy, "arn", "queue", "use", arn=q.policy_arn)


def test_job_queue_requests_are_checked(raw_batch, batch, q):
    def create(**over):
        args = {"jobQueueName": unique("jq"), "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": q.env_name}],
                "schedulingPolicyArn": q.policy_arn}
        args.update(over)
        return raw_batch.create_job_queue(**args)

    # q's environment is already connected to q.
    rejects(create, "serviceEnvironment")
    other, third = unique("se"), unique("se")
    for name in (other, third):
        create_environment(batch, name, 1)
    rejects(create, "serviceEnvironment", serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "no-such-se"}])
    rejects(create, "schedulingPolicyArn", schedulingPolicyArn=q.policy_arn.replace(q.policy_name, "no-such-sp"),
            serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": other}])
    rejects(create, "serviceEnvironment", serviceEnvironmentOrder=[
        {"order": 1, "serviceEnvironment": other}, {"order": 2, "serviceEnvironment": third}])
    rejects(create, "jobQueueType", jobQueueType="ECS", serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": other}])
    rejects(raw_batch.delete_job_queue, "DISABLED", "state", jobQueue=q.name)


# -- jobs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("priority", [10000, -1])
def test_a_priority_outside_0_to_9999_is_refused(raw_batch, q, priority):
    rejects(raw_batch.submit_service_job, "schedulingPriority", **submit_args(q, schedulingPriority=priority))


def test_a_quota_queue_needs_an_enabled_known_quota_share_and_no_share_identifier(raw_batch, q):
    rejects(raw_batch.submit_service_job, "quotaShareName", **submit_args(q, quotaShareName=None))
    rejects(raw_batch.submit_service_job, "quotaShareName", **submit_args(q, quotaShareName="nope"))
    rejects(raw_batch.submit_service_job, "DISABLED", **submit_args(q, quotaShareName="D"))
    rejects(raw_batch.submit_service_job, "shareIdentifier", **submit_args(q, shareIdentifier="team"))


def test_a_payload_without_an_entrypoint_is_refused_under_the_host_runtime(raw_batch, q):
    # The image's own entrypoint runs only under runtime = "podman" (test_podman.py).
    p = json.dumps(payload("exit_code.py", entrypoint=False))
    rejects(raw_batch.submit_service_job, 'runtime = "host"', **submit_args(q, serviceRequestPayload=p))


def test_a_payload_that_is_not_a_training_job_is_refused(raw_batch, q):
    rejects(raw_batch.submit_service_job, "serviceRequestPayload", **submit_args(q, serviceRequestPayload="{not json"))
    p = payload("exit_code.py")
    del p["ResourceConfig"]
    rejects(raw_batch.submit_service_job, "ResourceConfig", "InstanceType",
            **submit_args(q, serviceRequestPayload=json.dumps(p)))


def test_other_submit_fields_are_checked(raw_batch, q):
    s = raw_batch.submit_service_job
    rejects(s, "serviceJobType", **submit_args(q, serviceJobType="EKS"))
    rejects(s, "jobQueue", **submit_args(q, jobQueue="no-such-queue"))
    rejects(s, "attempts", **submit_args(q, retryStrategy={"attempts": 0}))
    rejects(s, "attempts", **submit_args(q, retryStrategy={"attempts": 11}))
    rejects(s, "evaluateOnExit", **submit_args(q, retryStrategy={"attempts": 2, "evaluateOnExit": [
        {"onStatusReason": "*", "action": "EXIT"}] * 6}))
    rejects(s, "action", **submit_args(q, retryStrategy={"attempts": 2, "evaluateOnExit": [
        {"onStatusReason": "*", "action": "RESTART"}]}))
    rejects(s, "preemptionRetriesBeforeTermination",
            **submit_args(q, preemptionConfiguration={"preemptionRetriesBeforeTermination": -1}))
    rejects(s, "clientToken", **submit_args(q, clientToken="x" * 65))
    rejects(s, "tags", **submit_args(q, tags={f"k{i}": "v" for i in range(51)}))


def test_list_service_jobs_checks_its_paging_and_filters(raw_batch, q):
    ls = raw_batch.list_service_jobs
    rejects(ls, "maxResults", jobQueue=q.name, maxResults=0)
    rejects(ls, "maxResults", jobQueue=q.name, maxResults=101)
    rejects(ls, "nextToken", jobQueue=q.name, nextToken="not-a-token")
    rejects(ls, "jobStatus", jobQueue=q.name, jobStatus="DONE")
    rejects(ls, "filters", "name", jobQueue=q.name, filters=[{"name": "COLOR", "values": ["red"]}])
    rejects(ls, "filters", jobQueue=q.name, filters=[{"name": "JOB_NAME", "values": ["a"]},
                                                     {"name": "QUOTA_SHARE_NAME", "values": ["A"]}])
    rejects(ls, "jobQueue", jobQueue="no-such-queue")


def test_list_quota_shares_checks_its_paging(raw_batch, q):
    rejects(raw_batch.list_quota_shares, "maxResults", jobQueue=q.name, maxResults=0)
    rejects(raw_batch.list_quota_shares, "maxResults", jobQueue=q.name, maxResults=101)
    rejects(raw_batch.list_quota_shares, "nextToken", jobQueue=q.name, nextToken="not-a-token")
    rejects(raw_batch.list_quota_shares, "jobQueue", jobQueue="no-such-queue")


def test_terminate_service_jobs_takes_at_most_50_ids(raw_batch):
    rejects(raw_batch.terminate_service_jobs, "jobs", "50",
            jobs=[str(uuid.uuid4()) for _ in range(51)], reason="too many")


def test_an_unknown_job_is_refused(raw_batch):
    unknown = str(uuid.uuid4())
    rejects(raw_batch.describe_service_job, "jobId", jobId=unknown)
    rejects(raw_batch.update_service_job, "jobId", jobId=unknown, schedulingPriority=1)


def test_updating_a_job_checks_priority_and_state(raw_batch, batch, jobs, q):
    jid = jobs.submit(q, "A", "quick", "exit_code.py")
    rejects(raw_batch.update_service_job, "schedulingPriority", jobId=jid, schedulingPriority=10000)
    wait_status(batch, jid, "SUCCEEDED")
    rejects(raw_batch.update_service_job, "SUCCEEDED", "finished", "terminal", jobId=jid, schedulingPriority=5)


# -- tags ---------------------------------------------------------------------------------

def test_tag_limits_are_checked(raw_batch, q):
    arn = q.shares["A"]
    rejects(raw_batch.tag_resource, "tags", resourceArn=arn, tags={f"k{i}": "v" for i in range(51)})
    rejects(raw_batch.tag_resource, "key", "tag", resourceArn=arn, tags={"k" * 129: "v"})
    rejects(raw_batch.tag_resource, "value", "tag", resourceArn=arn, tags={"k": "v" * 257})
    rejects(raw_batch.tag_resource, "resourceArn", resourceArn=share_arn(q.arn, "nope"), tags={"a": "b"})
    rejects(raw_batch.list_tags_for_resource, "resourceArn", resourceArn="not-an-arn")


# -- the wire -----------------------------------------------------------------------------

def test_a_malformed_body_gets_a_client_exception_in_the_aws_shape(server):
    status, headers, raw = server.signed("POST", "/v1/submitservicejob", b"{not json",
                                         headers={"Content-Type": "application/json"})
    assert status == 400, (status, raw)
    assert headers["x-amzn-ErrorType"].split(":")[0] == "ClientException"
    body = json.loads(raw)
    assert body["__type"].split("#")[-1] == "ClientException"
    assert body["message"]


def test_what_could_only_fail_later_is_refused_at_the_door(raw_batch, q, server):
    # A runtime no timer can hold (it used to panic a thread), and NUL bytes that no process
    # argument or environment variable can carry (they used to fail the job at start).
    huge = payload("exit_code.py", max_runtime=9223372036854775807)
    rejects(raw_batch.submit_service_job, "MaxRuntimeInSeconds",
            **submit_args(q, serviceRequestPayload=json.dumps(huge)))
    for field, p in [("Environment.A", payload("exit_code.py", env={"A": "x\u0000y"})),
                     ("HyperParameters.lr", payload("exit_code.py", hps={"lr": "0.1\u0000"})),
                     ("ContainerArguments[0]", payload("exit_code.py", args=["a\u0000"]))]:
        message = rejects(raw_batch.submit_service_job, field,
                          **submit_args(q, serviceRequestPayload=json.dumps(p)))
        assert "NUL" in message, message


def test_a_query_string_that_does_not_decode_is_answered_in_the_aws_shape(server):
    status, headers, body = server.signed("GET", "/qm/v1/usage/report?since=yesterday")
    assert status == 400, body
    err = json.loads(body)
    assert err["__type"] == "ClientException" and "query string" in err["message"], err
    status, _, body = server.signed("GET", "/qm/v1/jobs/x/logs?offset=-1")
    assert status == 400 and json.loads(body)["__type"] == "ClientException", body
