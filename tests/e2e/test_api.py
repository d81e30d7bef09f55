"""Every resource operation round trip through boto3, tags, pagination, ListServiceJobs
filters, the queue snapshot and deleting a share (spec §1, §3.2, §4, §6)."""

import time

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (ACCOUNT, REGION, UNIT, ShareSpec, create_environment, create_policy, create_queue,
                    create_share, make_queue, unique, wait_for, wait_status, wait_valid)

ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}"


def test_a_service_environment_round_trip(batch):
    name = unique("se")
    out = batch.create_service_environment(
        serviceEnvironmentName=name, serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": 3, "capacityUnit": UNIT}], tags={"team": "ml"})
    assert out == {"serviceEnvironmentName": name, "serviceEnvironmentArn": f"{ARN}:service-environment/{name}",
                   "ResponseMetadata": out["ResponseMetadata"]}
    env = wait_valid(lambda: batch.describe_service_environments(serviceEnvironments=[name])["serviceEnvironments"][0],
                     name)
    assert env["serviceEnvironmentType"] == "SAGEMAKER_TRAINING"
    assert env["state"] == "ENABLED"
    assert env["capacityLimits"] == [{"maxCapacity": 3, "capacityUnit": UNIT}]
    assert env["tags"] == {"team": "ml"}
    # By ARN as well as by name.
    by_arn = batch.describe_service_environments(serviceEnvironments=[out["serviceEnvironmentArn"]])
    assert [e["serviceEnvironmentName"] for e in by_arn["serviceEnvironments"]] == [name]

    batch.update_service_environment(serviceEnvironment=name,
                                     capacityLimits=[{"maxCapacity": 5, "capacityUnit": UNIT}])
    wait_for(lambda: batch.describe_service_environments(serviceEnvironments=[name])["serviceEnvironments"][0]
             ["capacityLimits"] == [{"maxCapacity": 5, "capacityUnit": UNIT}], what="the new limit")
    batch.update_service_environment(serviceEnvironment=name, state="DISABLED")
    wait_for(lambda: batch.describe_service_environments(serviceEnvironments=[name])["serviceEnvironments"][0]
             ["state"] == "DISABLED", what="DISABLED")
    batch.delete_service_environment(serviceEnvironment=name)
    wait_for(lambda: all(e.get("status") in ("DELETING", "DELETED") for e in
                         batch.describe_service_environments(serviceEnvironments=[name])["serviceEnvironments"]),
             what=f"{name} to be deleted")


def test_describe_service_environments_pages(batch):
    names = [unique("sepage") for _ in range(3)]
    for n in names:
        create_environment(batch, n, 1)
    seen = []
    for page in batch.get_paginator("describe_service_environments").paginate(PaginationConfig={"PageSize": 2}):
        assert len(page["serviceEnvironments"]) <= 2
        seen += [e["serviceEnvironmentName"] for e in page["serviceEnvironments"]]
    assert set(names) <= set(seen) and len(seen) == len(set(seen))


def test_a_scheduling_policy_round_trip(batch):
    name = unique("sp")
    arn = create_policy(batch, name)
    assert arn == f"{ARN}:scheduling-policy/{name}"
    (policy,) = batch.describe_scheduling_policies(arns=[arn])["schedulingPolicies"]
    assert policy["name"] == name
    assert policy["quotaSharePolicy"] == {"idleResourceAssignmentStrategy": "FIFO"}
    assert "fairsharePolicy" not in policy or not policy["fairsharePolicy"]
    listed = [p["arn"] for page in batch.get_paginator("list_scheduling_policies").paginate() for p in
              page["schedulingPolicies"]]
    assert arn in listed
    batch.update_scheduling_policy(arn=arn, quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})
    batch.tag_resource(resourceArn=arn, tags={"owner": "platform"})
    assert batch.list_tags_for_resource(resourceArn=arn)["tags"] == {"owner": "platform"}
    batch.delete_scheduling_policy(arn=arn)
    assert batch.describe_scheduling_policies(arns=[arn])["schedulingPolicies"] == []


def test_a_job_queue_round_trip(batch):
    base = unique("jqrt")
    create_environment(batch, base + "-se", 2)
    policy = create_policy(batch, base + "-sp")
    arn = create_queue(batch, base + "-jq", base + "-se", policy)
    assert arn == f"{ARN}:job-queue/{base}-jq"
    (jq,) = batch.describe_job_queues(jobQueues=[arn])["jobQueues"]
    assert jq["jobQueueName"] == base + "-jq"
    assert (jq["state"], jq["status"]) == ("ENABLED", "VALID")
    assert jq["jobQueueType"] == "SAGEMAKER_TRAINING"
    assert jq["schedulingPolicyArn"] == policy
    assert jq["serviceEnvironmentOrder"] == [{"order": 1, "serviceEnvironment": f"{ARN}:service-environment/{base}-se"}] \
        or jq["serviceEnvironmentOrder"] == [{"order": 1, "serviceEnvironment": base + "-se"}]
    batch.update_job_queue(jobQueue=arn, priority=7)
    wait_for(lambda: batch.describe_job_queues(jobQueues=[arn])["jobQueues"][0]["priority"] == 7, what="priority 7")
    batch.update_job_queue(jobQueue=arn, state="DISABLED")
    wait_for(lambda: batch.describe_job_queues(jobQueues=[arn])["jobQueues"][0]["state"] == "DISABLED",
             what="DISABLED")
    batch.delete_job_queue(jobQueue=arn)
    wait_for(lambda: all(j.get("status") == "DELETING" for j in
                         batch.describe_job_queues(jobQueues=[arn])["jobQueues"]), what="the queue to be deleted")


def test_a_quota_share_round_trip_with_tags(batch):
    q = make_queue(batch, "qsrt", [], env_max=3)
    arn = create_share(batch, q.name, ShareSpec("team-a", "LEND_AND_BORROW", 2, borrow_limit=50,
                                                in_share_preemption="ENABLED", tags={"team": "a"}))
    assert arn == f"{q.arn}/quota-share/team-a"
    share = batch.describe_quota_share(quotaShareArn=arn)
    assert share["quotaShareName"] == "team-a"
    assert share["jobQueueArn"] == q.arn
    assert share["capacityLimits"] == [{"maxCapacity": 2, "capacityUnit": UNIT}]
    assert share["resourceSharingConfiguration"] == {"strategy": "LEND_AND_BORROW", "borrowLimit": 50}
    assert share["preemptionConfiguration"] == {"inSharePreemption": "ENABLED"}
    assert (share["state"], share["status"]) == ("ENABLED", "VALID")
    assert share["tags"] == {"team": "a"}

    (listed,) = batch.list_quota_shares(jobQueue=q.arn)["quotaShares"]
    assert listed["quotaShareArn"] == arn and "tags" not in listed

    # Tags through the tag operations: the share's ARN contains '/'.
    batch.tag_resource(resourceArn=arn, tags={"cost-center": "42", "team": "b"})
    assert batch.list_tags_for_resource(resourceArn=arn)["tags"] == {"team": "b", "cost-center": "42"}
    batch.untag_resource(resourceArn=arn, tagKeys=["team"])
    assert batch.list_tags_for_resource(resourceArn=arn)["tags"] == {"cost-center": "42"}
    assert batch.describe_quota_share(quotaShareArn=arn)["tags"] == {"cost-center": "42"}
    batch.tag_resource(resourceArn=q.arn, tags={"queue": "yes"})
    assert batch.list_tags_for_resource(resourceArn=q.arn)["tags"] == {"queue": "yes"}

    batch.update_quota_share(quotaShareArn=arn, capacityLimits=[{"maxCapacity": 1, "capacityUnit": UNIT}],
                             resourceSharingConfiguration={"strategy": "LEND"},
                             preemptionConfiguration={"inSharePreemption": "DISABLED"})
    share = wait_valid(lambda: batch.describe_quota_share(quotaShareArn=arn), "the updated share")
    assert share["capacityLimits"] == [{"maxCapacity": 1, "capacityUnit": UNIT}]
    assert share["resourceSharingConfiguration"]["strategy"] == "LEND"
    assert share["resourceSharingConfiguration"].get("borrowLimit", -1) in (-1, None)
    assert share["preemptionConfiguration"] == {"inSharePreemption": "DISABLED"}

    # The AWS sample's delete: disable, wait for VALID/DISABLED, delete, wait for a ClientError.
    batch.update_quota_share(quotaShareArn=arn, state="DISABLED")
    wait_for(lambda: (lambda s: s["state"] == "DISABLED" and s["status"] == "VALID")(
        batch.describe_quota_share(quotaShareArn=arn)), what="the share to be DISABLED")
    batch.delete_quota_share(quotaShareArn=arn)
    assert_deleted(batch, arn)
    assert batch.list_quota_shares(jobQueue=q.name)["quotaShares"] == []


def assert_deleted(batch, arn):
    def gone():
        try:
            batch.describe_quota_share(quotaShareArn=arn)
            return False
        except ClientError as e:
            assert e.response["Error"]["Code"] == "ClientException"
            return True
    wait_for(gone, what=f"{arn} to be deleted")


def test_list_quota_shares_pages_through_more_than_max_results(batch):
    q = make_queue(batch, "qspage", [ShareSpec(f"p{i}", "LEND", 1) for i in range(7)], env_max=3)
    pages, token = [], None
    while True:
        kw = {"nextToken": token} if token else {}
        page = batch.list_quota_shares(jobQueue=q.name, maxResults=3, **kw)
        pages.append([s["quotaShareName"] for s in page["quotaShares"]])
        token = page.get("nextToken")
        if not token:
            break
    assert [len(p) for p in pages] == [3, 3, 1]
    assert sorted(sum(pages, [])) == [f"p{i}" for i in range(7)]
    via_paginator = [s["quotaShareName"] for page in batch.get_paginator("list_quota_shares").paginate(
        jobQueue=q.arn, PaginationConfig={"PageSize": 2}) for s in page["quotaShares"]]
    assert sorted(via_paginator) == [f"p{i}" for i in range(7)]


@pytest.fixture
def waiting_jobs(batch, jobs):
    """A queue with 7 jobs that never fit (2 instances against a 1-instance RESERVE share), so
    they stay RUNNABLE and no process runs, plus one RUNNING job in another share."""
    q = make_queue(batch, "lsj", [ShareSpec("big", "RESERVE", 1), ShareSpec("run", "RESERVE", 1)], env_max=2)
    ids = []
    for i in range(7):
        ids.append(jobs.sleeper(q, "big", f"{'alpha' if i < 4 else 'beta'}-{i}", count=2))
        time.sleep(0.01)  # distinct createdAt
    running = jobs.sleeper(q, "run", "runner")
    wait_status(batch, running, "RUNNING")
    for jid in ids:
        wait_status(batch, jid, "RUNNABLE")
    return q, ids, running


def all_pages(batch, **kw):
    pages, token = [], None
    while True:
        page = batch.list_service_jobs(maxResults=3, **kw, **({"nextToken": token} if token else {}))
        pages.append(page["jobSummaryList"])
        token = page.get("nextToken")
        if not token:
            return pages


def test_list_service_jobs_pages_and_filters(batch, waiting_jobs):
    q, ids, running = waiting_jobs
    # Without jobStatus: only RUNNING jobs.
    assert [j["jobId"] for j in batch.list_service_jobs(jobQueue=q.name)["jobSummaryList"]] == [running]

    pages = all_pages(batch, jobQueue=q.name, jobStatus="RUNNABLE")
    assert [len(p) for p in pages] == [3, 3, 1]
    listed = [j["jobId"] for p in pages for j in p]
    assert sorted(listed) == sorted(ids)
    summary = pages[0][0]
    assert summary["status"] == "RUNNABLE" and summary["quotaShareName"] == "big"
    assert summary["jobArn"] == f"{ARN}:service-job/{summary['jobId']}"
    assert summary["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 2.0}]
    assert summary["statusReason"].startswith("MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED")
    assert "isTerminated" not in summary

    # JOB_NAME: case-insensitive, trailing * is a prefix; all statuses; newest first.
    by_name = batch.list_service_jobs(jobQueue=q.name, filters=[{"name": "JOB_NAME", "values": ["ALPHA*"]}])
    assert [j["jobId"] for j in by_name["jobSummaryList"]] == list(reversed(ids[:4]))
    exact = batch.list_service_jobs(jobQueue=q.name, filters=[{"name": "JOB_NAME", "values": ["beta-5"]}])
    assert [j["jobId"] for j in exact["jobSummaryList"]] == [ids[5]]

    # QUOTA_SHARE_NAME combines with jobStatus.
    share = batch.list_service_jobs(jobQueue=q.name, jobStatus="RUNNING",
                                    filters=[{"name": "QUOTA_SHARE_NAME", "values": ["run"]}])
    assert [j["jobId"] for j in share["jobSummaryList"]] == [running]
    share = batch.list_service_jobs(jobQueue=q.name, jobStatus="RUNNING",
                                    filters=[{"name": "QUOTA_SHARE_NAME", "values": ["big"]}])
    assert share["jobSummaryList"] == []

    # Created-at filters, epoch milliseconds as strings.
    middle = batch.describe_service_job(jobId=ids[3])["createdAt"]
    after = batch.list_service_jobs(jobQueue=q.name, filters=[{"name": "AFTER_CREATED_AT", "values": [str(middle)]}])
    after_ids = {j["jobId"] for j in after["jobSummaryList"]}
    assert set(ids[4:]) <= after_ids and not set(ids[:3]) & after_ids
    before = batch.list_service_jobs(jobQueue=q.name, filters=[{"name": "BEFORE_CREATED_AT", "values": [str(middle)]}])
    before_ids = {j["jobId"] for j in before["jobSummaryList"]}
    assert set(ids[:3]) <= before_ids and not set(ids[4:]) & before_ids

    # The paginator of botocore works too.
    via = [j["jobId"] for page in batch.get_paginator("list_service_jobs").paginate(
        jobQueue=q.name, jobStatus="RUNNABLE", PaginationConfig={"PageSize": 2}) for j in page["jobSummaryList"]]
    assert sorted(via) == sorted(ids)


def test_the_queue_snapshot_shows_the_fronts_and_the_usage(batch, jobs):
    q = make_queue(batch, "snap", [ShareSpec("A", "RESERVE", 1), ShareSpec("B", "RESERVE", 1),
                                   ShareSpec("C", "RESERVE", 1)], env_max=3)
    a_run = jobs.sleeper(q, "A", "a-run")
    wait_status(batch, a_run, "RUNNING")
    a_low = jobs.sleeper(q, "A", "a-low", priority=1)
    a_high = jobs.sleeper(q, "A", "a-high", priority=5)
    b_run = jobs.sleeper(q, "B", "b-run")
    wait_status(batch, b_run, "RUNNING")
    b_wait = jobs.sleeper(q, "B", "b-wait")
    for jid in (a_low, a_high, b_wait):
        wait_status(batch, jid, "RUNNABLE")

    snap = batch.get_job_queue_snapshot(jobQueue=q.name)
    front = [j["jobArn"].rsplit("/", 1)[1] for j in snap["frontOfQueue"]["jobs"]]
    assert sorted(front) == sorted([a_low, a_high, b_wait])
    assert front.index(a_high) < front.index(a_low), "priority order within a share"
    assert all(j["earliestTimeAtPosition"] > 0 for j in snap["frontOfQueue"]["jobs"])
    assert snap["frontOfQueue"]["lastUpdatedAt"] > 0
    shares = snap["frontOfQuotaShares"]["quotaShares"]
    assert set(shares) == {"A", "B"}, "shares without a RUNNABLE job are left out"
    assert [j["jobArn"].rsplit("/", 1)[1] for j in shares["A"]] == [a_high]
    assert [j["jobArn"].rsplit("/", 1)[1] for j in shares["B"]] == [b_wait]
    util = snap["queueUtilization"]
    assert util["totalCapacityUsage"] == [{"capacityUnit": UNIT, "quantity": 2.0}]
    top = util["quotaShareUtilization"]["topCapacityUtilization"]
    assert sorted(t["quotaShareName"] for t in top) == ["A", "B"]
    assert all(t["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 1.0}] for t in top)
    assert not util.get("fairshareUtilization")
    # By ARN too.
    assert batch.get_job_queue_snapshot(jobQueue=q.arn)["frontOfQuotaShares"]["quotaShares"].keys() == shares.keys()


def test_update_service_job_answers_with_the_job(batch, jobs):
    q = make_queue(batch, "upd", [ShareSpec("X", "RESERVE", 1)], env_max=1)
    jid = jobs.sleeper(q, "X", "updatable", count=2)  # never fits, stays RUNNABLE
    out = batch.update_service_job(jobId=jid, schedulingPriority=42)
    assert (out["jobId"], out["jobName"], out["jobArn"]) == (jid, "updatable", f"{ARN}:service-job/{jid}")
    assert batch.describe_service_job(jobId=jid)["schedulingPriority"] == 42


def test_deleting_a_share_terminates_its_jobs(batch, jobs):
    q = make_queue(batch, "del", [ShareSpec("X", "RESERVE", 1), ShareSpec("Y", "RESERVE", 1)], env_max=2)
    running = jobs.sleeper(q, "X", "running")
    wait_status(batch, running, "RUNNING")
    waiting = jobs.sleeper(q, "X", "waiting")
    wait_status(batch, waiting, "RUNNABLE")
    other = jobs.sleeper(q, "Y", "other")
    wait_status(batch, other, "RUNNING")
    arn = q.shares["X"]
    batch.update_quota_share(quotaShareArn=arn, state="DISABLED")
    wait_for(lambda: batch.describe_quota_share(quotaShareArn=arn)["state"] == "DISABLED", what="DISABLED")
    batch.delete_quota_share(quotaShareArn=arn)
    for jid in (running, waiting):
        job = wait_status(batch, jid, "FAILED")
        assert job.get("isTerminated") is True
        assert job["statusReason"]
    assert_deleted(batch, arn)
    assert batch.describe_service_job(jobId=other)["status"] == "RUNNING"
    # The deleted share's name is free again.
    create_share(batch, q.name, ShareSpec("X", "RESERVE", 1))
