"""Interruption contracts (issue 19, item 1) through boto3 against the real `qm serve`: a job
queue defines classes by tags (`qm:class.<name>`), a share names its default class and the
classes it allows, a job picks one with the tag `qm:class`. A job of a non-interruptible class
runs only within its share's own quota and waits rather than borrow, while an interruptible
job of the same share borrows; an unknown or disallowed class, or a priority above the
class's maximum, is a ClientException that says what is allowed. A class that borrows only
after a verified resume waits for its share's own capacity until a drill shows one of its jobs
resuming from its checkpoint."""

import json
import subprocess

import pytest
from botocore.exceptions import ClientError

from qm_e2e import ShareSpec, error_of, make_queue, qm_bin, wait_for, wait_status

CLASSES = {"qm:class.exploratory": "interruptible",
           "qm:class.release": "non-interruptible,max-priority=500"}


@pytest.fixture
def classes_queue(batch):
    q = make_queue(batch, "classes", [
        ShareSpec("research", "LEND_AND_BORROW", 1, borrow_limit=100,
                  tags={"qm:default-class": "exploratory", "qm:classes": "exploratory,release"}),
        ShareSpec("inference", "LEND", 1),
    ], env_max=2)
    batch.tag_resource(resourceArn=q.arn, tags=CLASSES)
    return q


def release(jobs, q, name, **kw):
    return jobs.sleeper(q, "research", name, extra={"tags": {"qm:class": "release"}}, **kw)


def test_a_non_interruptible_job_waits_rather_than_borrow_while_an_interruptible_one_borrows(
        batch, jobs, server, classes_queue):
    q = classes_queue
    first = release(jobs, q, "release_1")
    wait_status(batch, first, "RUNNING")
    second = release(jobs, q, "release_2")
    waiting = wait_status(batch, second, "RUNNABLE", reason_prefix="NOT_INTERRUPTIBLE")
    assert "may not be interrupted" in waiting["statusReason"], waiting["statusReason"]
    # `qm submit --class` is the same tag.
    cli = subprocess.run([str(qm_bin()), "submit", "--queue", q.name, "--share", "research",
                          "--name", "cli-release", "--class", "release", "--", "sleep", "60"],
                         env=server.cli_env(), capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    jobs.ids.append(cli.stdout.strip())
    wait_status(batch, cli.stdout.strip(), "RUNNABLE", reason_prefix="NOT_INTERRUPTIBLE")
    # The share's default class is interruptible: this job borrows inference's idle instance.
    borrower = jobs.sleeper(q, "research", "exploring")
    running = wait_status(batch, borrower, "RUNNING")
    # Every running job says whose capacity it runs on, through the API and `qm jobs`.
    assert running["statusReason"] == (
        "BORROWED - its instance borrowed from inference; may be reclaimed"), running["statusReason"]
    assert batch.describe_service_job(jobId=first)["statusReason"].startswith("OWN_CAPACITY - ")
    listed = {j["jobName"]: j for j in batch.list_service_jobs(jobQueue=q.arn, jobStatus="RUNNING")["jobSummaryList"]}
    assert listed["exploring"]["statusReason"].startswith("BORROWED - "), listed
    table = subprocess.run([str(qm_bin()), "jobs", "--queue", q.name, "--status", "RUNNING"],
                           env=server.cli_env(), capture_output=True, text=True, timeout=60, check=True).stdout
    assert "borrowed from inference" in table and "own capacity" in table, table
    # The owner reclaims from the interruptible job, never from the release job.
    owner = jobs.sleeper(q, "inference", "owner")
    wait_status(batch, owner, "RUNNING", timeout=60)
    assert batch.describe_service_job(jobId=first)["status"] == "RUNNING"
    assert batch.describe_service_job(jobId=borrower)["preemptionSummary"]["preemptedAttemptCount"] == 1


def test_an_unknown_or_disallowed_class_or_a_priority_above_its_maximum_is_refused(
        batch, jobs, classes_queue):
    q = classes_queue
    with pytest.raises(ClientError) as e:
        jobs.sleeper(q, "research", "nightly", extra={"tags": {"qm:class": "nightly"}})
    code, message, status = error_of(e)
    assert (code, status) == ("ClientException", 400), (code, status)
    assert "defines no class 'nightly'" in message and "exploratory, release" in message, message
    with pytest.raises(ClientError) as e:
        release(jobs, q, "too_urgent", priority=600)
    assert "above the maximum of class 'release' (500)" in error_of(e)[1]
    # ... and so is raising a job's priority above it later.
    within = release(jobs, q, "within", priority=400)
    with pytest.raises(ClientError) as e:
        batch.update_service_job(jobId=within, schedulingPriority=600)
    assert "above the maximum of class 'release' (500)" in error_of(e)[1], error_of(e)[1]
    batch.tag_resource(resourceArn=q.shares["research"], tags={"qm:classes": "exploratory"})
    with pytest.raises(ClientError) as e:
        release(jobs, q, "not_here")
    assert "does not allow class 'release'" in error_of(e)[1], error_of(e)[1]
    with pytest.raises(ClientError) as e:
        batch.tag_resource(resourceArn=q.arn, tags={"qm:class.bad": "sometimes"})
    assert "give interruptible or non-interruptible" in error_of(e)[1], error_of(e)[1]


def test_a_class_that_borrows_after_a_verified_resume_waits_until_a_drill_resumed_one_of_its_jobs(
        batch, jobs, server):
    """`borrow: after-verified-resume`: the class's second job may not borrow inference's idle
    instance until a drill (`qm preempt`) of the first shows it resuming from its checkpoint."""
    q = make_queue(batch, "verify", [
        ShareSpec("research", "LEND_AND_BORROW", 1, borrow_limit=-1,
                  tags={"qm:default-class": "unproven"}),
        ShareSpec("inference", "LEND", 1),
    ], env_max=2)
    batch.tag_resource(resourceArn=q.arn, tags={
        "qm:class.unproven": "interruptible,borrow=after-verified-resume,verify-days=30"})
    learner = jobs.submit(q, "research", "learner", "reports_steps.py",
                          env={"PROGRESS_FILE": str(jobs.file("learner.progress"))})
    wait_status(batch, learner, "RUNNING")
    second = jobs.sleeper(q, "research", "second")
    waiting = wait_status(batch, second, "RUNNABLE", reason_prefix="RESUME_UNVERIFIED")
    assert "verified" in waiting["statusReason"] or "resuming" in waiting["statusReason"], waiting
    explained = subprocess.run([str(qm_bin()), "explain", second], env=server.cli_env(),
                               capture_output=True, text=True, timeout=60, check=True).stdout
    assert "qm preempt" in explained, explained

    # The drill: the learner stops at step 15 (checkpoint at 10) and goes on from step 10.
    def last_step():
        status, _, body = server.signed("GET", f"/qm/v1/jobs/{learner}/attempt")
        assert status == 200, body
        return (json.loads(body).get("running") or {}).get("lastStep")
    wait_for(lambda: last_step() == 15, what="the learner to reach step 15")
    subprocess.run([str(qm_bin()), "preempt", learner, "--reason", "resume check"],
                   env=server.cli_env(), capture_output=True, text=True, timeout=60, check=True)
    wait_status(batch, second, "RUNNING", timeout=60)
    assert batch.describe_service_job(jobId=second)["statusReason"].startswith("BORROWED - ")
