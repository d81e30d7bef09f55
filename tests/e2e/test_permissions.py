"""Permissions (issue 12, item 4) through boto3 against the real `qm serve`: a share's
`qm:submitters`, `qm:leads` and `qm:max-priority` tags, who may change the configuration, and
who may change or terminate whose jobs. Every denial is HTTP 403 `AccessDeniedException`
naming the principal, the action and the resource, and leaves the state as it was."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (Keys, ShareSpec, error_of, make_queue, payload, send, unique, wait_preempted,
                    wait_status)

SLEEP = "sleep_forever.py"


def principal(server, name: str, groups: list[str]):
    """A principal with groups, created through the admin API; a boto3 client signing as it."""
    status, _, body = server.signed("POST", "/qm/v1/principals", {"name": name, "groups": groups})
    assert status == 200, body
    k = json.loads(body)
    keys = Keys(name, k["accessKeyId"], k["secretAccessKey"])
    client = server.client(keys=keys)
    client.qm_keys = keys  # for qm's own endpoints, signed by hand
    return client


@pytest.fixture(scope="module")
def world(server):
    """Two shares: research (submitters group:research, lead carol, max priority 10) and
    prod (submitters ops). alice and bob are in group research; carol leads research."""
    admin = server.client()
    suffix = unique("p")[-6:]
    names = {n: f"{n}-{suffix}" for n in ("alice", "bob", "carol", "mallory")}
    who = {n: principal(server, names[n], g) for n, g in
           [("alice", ["research"]), ("bob", ["research"]), ("carol", []), ("mallory", [])]}
    tags = {"qm:submitters": "group:research", "qm:leads": names["carol"],
            "qm:max-priority": "10"}
    q = make_queue(admin, "perm", [
        ShareSpec("research", strategy="RESERVE", limit=1, tags=tags),
        ShareSpec("prod", strategy="RESERVE", limit=1, tags={"qm:submitters": "ops"}),
    ], env_max=2)
    return admin, q, who


def submit(client, server, q, share: str, name: str, priority: int = 0) -> str:
    return client.submit_service_job(
        jobName=name, jobQueue=q.name, serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName=share, schedulingPriority=priority,
        serviceRequestPayload=json.dumps(payload(SLEEP, name=name, token=server.token)),
    )["jobId"]


def denied(excinfo, *words: str) -> str:
    code, message, status = error_of(excinfo)
    assert (code, status) == ("AccessDeniedException", 403), (code, status, message)
    for w in words:
        assert w in message, message
    return message


def test_a_submitter_of_one_share_cannot_submit_to_another(server, world):
    admin, q, who = world
    alice, mallory = who["alice"], who["mallory"]
    before = admin.list_service_jobs(jobQueue=q.name)["jobSummaryList"]
    with pytest.raises(ClientError) as e:
        submit(alice, server, q, "prod", "alice-in-prod")
    denied(e, "may not submit to quota share prod", "qm:submitters")
    with pytest.raises(ClientError) as e:
        submit(mallory, server, q, "research", "mallory-in-research")
    denied(e, "research")
    assert admin.list_service_jobs(jobQueue=q.name)["jobSummaryList"] == before
    job = submit(alice, server, q, "research", "alice-ok", priority=10)
    described = admin.describe_service_job(jobId=job)
    assert described["tags"]["qm:submitted-by"].startswith("alice")
    admin.terminate_service_job(jobId=job, reason="test")


def test_submitters_stay_within_the_share_s_max_priority_and_a_lead_does_not_have_to(server, world):
    admin, q, who = world
    alice, carol = who["alice"], who["carol"]
    with pytest.raises(ClientError) as e:
        submit(alice, server, q, "research", "too-high", priority=11)
    denied(e, "priority 11", "qm:max-priority", "10")
    job = submit(alice, server, q, "research", "fine", priority=5)
    with pytest.raises(ClientError) as e:
        alice.update_service_job(jobId=job, schedulingPriority=50)
    denied(e, "raise a job to priority 50")
    assert admin.describe_service_job(jobId=job)["schedulingPriority"] == 5
    alice.update_service_job(jobId=job, schedulingPriority=9)
    carol.update_service_job(jobId=job, schedulingPriority=500)  # a lead may
    assert admin.describe_service_job(jobId=job)["schedulingPriority"] == 500
    lead_job = submit(carol, server, q, "research", "lead-high", priority=900)
    for j in (job, lead_job):
        admin.terminate_service_job(jobId=j, reason="test")


def test_nobody_but_the_submitter_a_lead_or_an_admin_changes_or_terminates_a_job(server, world):
    admin, q, who = world
    alice, bob, carol = who["alice"], who["bob"], who["carol"]
    job = submit(alice, server, q, "research", "alices")
    with pytest.raises(ClientError) as e:
        bob.terminate_service_job(jobId=job, reason="mine now")
    denied(e, "may not terminate job", "submitted by alice", "not a lead")
    with pytest.raises(ClientError) as e:
        bob.update_service_job(jobId=job, schedulingPriority=1)
    denied(e, "change the priority of")
    if hasattr(bob, "terminate_service_jobs"):
        with pytest.raises(ClientError) as e:
            bob.terminate_service_jobs(jobs=[job], reason="bulk")
        denied(e, "may not terminate job")
    assert admin.describe_service_job(jobId=job)["status"] not in ("FAILED", "SUCCEEDED")
    carol.terminate_service_job(jobId=job, reason="the lead stops it")
    assert admin.describe_service_job(jobId=job)["isTerminated"]
    own = submit(bob, server, q, "research", "bobs")
    bob.terminate_service_job(jobId=own, reason="my own")
    assert admin.describe_service_job(jobId=own)["isTerminated"]


def test_a_drill_is_for_leads_and_admins_and_stops_the_job_as_a_reclaim_would(server, world):
    """`qm preempt` (issue 19, item 3): the submitter may not drill its own job; the share's
    lead may, and the job goes back to the queue, counted as a preemption, and runs again."""
    admin, q, who = world
    alice, carol = who["alice"], who["carol"]
    job = submit(alice, server, q, "research", "drilled")
    wait_status(admin, job, "RUNNING")
    path = f"/qm/v1/jobs/{job}/preempt"
    for who in (alice, who["mallory"]):  # its submitter; someone with no role at all
        status, _, body = server.signed("POST", path, {"reason": "mine"}, keys=who.qm_keys)
        assert status == 403, body
        assert b"drills are for admins and the leads of quota share research" in body, body
    status, _, body = send("POST", server.url + path, b"{}", {"Content-Type": "application/json"})
    assert status == 403, body  # unsigned
    assert admin.describe_service_job(jobId=job)["status"] == "RUNNING"

    status, _, body = server.signed("POST", path, {"reason": "resume check"}, keys=carol.qm_keys)
    assert status == 200, body
    assert json.loads(body) == {"jobId": job, "jobName": "drilled"}
    described = wait_preempted(admin, job, statuses=("RUNNABLE", "SCHEDULED", "STARTING", "RUNNING"))
    reason = described["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"]
    assert reason == f"Preempted: drill (qm preempt by {carol.qm_keys.name}: resume check)", reason
    wait_status(admin, job, "RUNNING")
    # A job that is not running cannot be drilled; the lead's drill is in the audit log.
    admin.terminate_service_job(jobId=job, reason="done")
    status, _, body = server.signed("POST", path, {}, keys=carol.qm_keys)
    assert status == 400 and b"only a running job can be preempted" in body, body
    entries, token = [], ""
    while token is not None:
        status, _, body = server.signed("GET", "/qm/v1/audit" + (f"?nextToken={token}" if token else ""))
        page = json.loads(body)
        entries += [e for e in page["entries"] if e["action"] == "preempt"]
        token = page.get("nextToken")
    assert any(e["actor"] == carol.qm_keys.name and job in e["summary"] for e in entries), entries


def test_configuration_is_for_admins(server, world):
    admin, q, who = world
    alice = who["alice"]
    share = q.shares["prod"]
    with pytest.raises(ClientError) as e:
        alice.update_quota_share(quotaShareArn=share, capacityLimits=[
            {"maxCapacity": 0, "capacityUnit": "ml.g5.xlarge"}])
    denied(e, "may not change quota shares", "admins")
    with pytest.raises(ClientError) as e:
        alice.tag_resource(resourceArn=share, tags={"qm:submitters": "group:research"})
    denied(e, "may not change tags")
    with pytest.raises(ClientError) as e:
        alice.create_scheduling_policy(name=unique("x"),
                                       quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})
    denied(e, "scheduling policies")
    described = admin.describe_quota_share(quotaShareArn=share)
    assert described["capacityLimits"][0]["maxCapacity"] == 1
    assert described["tags"]["qm:submitters"] == "ops"
    # Everyone authenticated may read.
    assert alice.describe_quota_share(quotaShareArn=share)["quotaShareName"] == "prod"


def test_permission_tags_are_checked(server, world):
    admin, q, _ = world
    share = q.shares["research"]
    for tags, field in [({"qm:max-priority": "high"}, "qm:max-priority"),
                        ({"qm:submitters": "alice,,bob"}, "qm:submitters"),
                        ({"qm:leads": "group:bad name"}, "qm:leads")]:
        with pytest.raises(ClientError) as e:
            admin.tag_resource(resourceArn=share, tags=tags)
        code, message, _ = error_of(e)
        assert code == "ClientException" and field in message, message
    with pytest.raises(ClientError) as e:
        admin.submit_service_job(
            jobName="spoof", jobQueue=q.name, serviceJobType="SAGEMAKER_TRAINING",
            quotaShareName="research", tags={"qm:submitted-by": "someone-else"},
            serviceRequestPayload=json.dumps(payload(SLEEP, name="spoof", token=server.token)))
    assert "set by the server" in error_of(e)[1]


def test_admins_listed_by_group_may_change_the_configuration_and_only_admins_list_them(server, world):
    admin, q, who = world
    alice = who["alice"]
    status, _, body = server.signed("PUT", "/qm/v1/admins", {"admins": ["group:platform"]},
                                    principal=None)
    assert status == 200, body
    suffix = unique("o")[-6:]
    ops = principal(server, f"ops-{suffix}", ["platform"])
    arn = ops.create_scheduling_policy(
        name=unique("ops"), quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})["arn"]
    assert arn
    status, _, body = server.signed("GET", "/qm/v1/admins", principal=None)
    assert json.loads(body) == {"admins": ["group:platform"]}
    # alice is no admin: she may not make herself one.
    keys = alice._request_signer._credentials
    status, _, body = server.signed("PUT", "/qm/v1/admins", {"admins": ["group:research"]},
                                    keys=Keys("alice", keys.access_key, keys.secret_key))
    assert status == 403 and b"AccessDeniedException" in body, body
    status, _, _ = server.signed("PUT", "/qm/v1/admins", {"admins": []}, principal=None)
    assert status == 200
    with pytest.raises(ClientError) as e:
        ops.create_scheduling_policy(
            name=unique("ops"), quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})
    denied(e, "configuration changes are for admins")
