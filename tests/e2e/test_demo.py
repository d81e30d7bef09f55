"""The AWS quota-management demo (spec/aws-batch-quota.md §8), step by step, with jobs that
checkpoint, so a preempted job is seen resuming from its checkpoint rather than starting over.

`pytest -s -k demo` prints the transcript of each step (`jobName (priority: n): STATUS (reason)`).
"""

import pytest

from qm_e2e import demo_setup, events, line, wait_for, wait_preempted, wait_status

TARGET = 10
PAUSE = 3


@pytest.fixture(scope="module")
def server(start_server):
    s = start_server(name="demo")
    yield s
    s.close()


def transcript(batch, title, ids):
    print(f"\n== {title}")
    for jid in ids:
        print("  " + line(batch.describe_service_job(jobId=jid)))


def wait_paused(jobs, name):
    """The job is running with checkpoint PAUSE written and waits for the gate."""
    wait_for(lambda: f"{PAUSE}" in events(jobs.progress(name), "paused"), what=f"{name} to checkpoint step {PAUSE}")


def test_the_aws_demo_preempts_and_every_preempted_job_resumes_from_its_checkpoint(batch, jobs, tmp_path):
    q = demo_setup(batch, "demo")
    gate = tmp_path / "gate"
    run = dict(gate=gate, target=TARGET, pause_at=PAUSE)

    # Step 1: three jobs to QS1. high runs on QS1's own instance, med borrows QS2's idle one,
    # low waits: QS3 is RESERVE, so nothing more can be borrowed.
    high = jobs.checkpointing(q, "QS1", "qs1_job_high", priority=3, **run)
    med = jobs.checkpointing(q, "QS1", "qs1_job_med", priority=2, **run)
    low = jobs.checkpointing(q, "QS1", "qs1_job_low", priority=1, **run)
    wait_status(batch, high, "RUNNING")
    wait_status(batch, med, "RUNNING")
    wait_status(batch, low, "RUNNABLE", reason_prefix="NOTHING_TO_BORROW")
    wait_paused(jobs, "qs1_job_high")
    wait_paused(jobs, "qs1_job_med")
    transcript(batch, "Step 1: three jobs to QS1 (high on own quota, med borrowing from QS2, low waiting)",
               [high, med, low])

    # Step 2: a QS2 job with a lower priority than med reclaims QS2's lent instance.
    qs2 = jobs.checkpointing(q, "QS2", "qs2_job_1", priority=1, **run)
    wait_preempted(batch, med)
    # The summary shows the preemption as soon as it is decided; `stoppedAt` once the
    # preempted process is gone (it gets SIGTERM and time to checkpoint).
    job = wait_for(lambda: (lambda j: j if "stoppedAt" in j["preemptionSummary"]["recentPreemptedAttempts"][0] else None)(
        batch.describe_service_job(jobId=med)), what="med's preempted attempt to stop")
    summary = job["preemptionSummary"]
    assert summary["preemptedAttemptCount"] == 1
    newest = summary["recentPreemptedAttempts"][0]
    assert newest["statusReason"].startswith("Preempted: capacity reclaimed by quota share")
    assert "QS2" in newest["statusReason"]
    assert newest["serviceResourceId"]["name"] == "TrainingJobArn"
    assert newest["startedAt"] <= newest["stoppedAt"]
    wait_status(batch, qs2, "RUNNING")
    wait_for(lambda: "3" in events(jobs.progress("qs1_job_med"), "sigterm"),
             what="med to checkpoint on SIGTERM")
    assert batch.describe_service_job(jobId=high)["status"] == "RUNNING"
    assert batch.describe_service_job(jobId=low)["status"] == "RUNNABLE"
    transcript(batch, "Step 2: qs2_job_1 (priority 1) reclaims QS2's instance from qs1_job_med (priority 2)",
               [high, med, low, qs2])

    # Step 3: raising low to 4 preempts high (3) within QS1, which has in-share preemption.
    out = batch.update_service_job(jobId=low, schedulingPriority=4)
    assert out["jobId"] == low
    job = wait_preempted(batch, high)
    newest = job["preemptionSummary"]["recentPreemptedAttempts"][0]
    assert newest["statusReason"] == f"Preempted by higher priority job {low}"
    wait_status(batch, low, "RUNNING")
    assert batch.describe_service_job(jobId=low)["schedulingPriority"] == 4
    assert batch.describe_service_job(jobId=med)["status"] == "RUNNABLE"
    assert batch.describe_service_job(jobId=qs2)["status"] == "RUNNING"
    transcript(batch, "Step 3: qs1_job_low raised to priority 4 preempts qs1_job_high (priority 3) in QS1",
               [high, med, low, qs2])

    snapshot = batch.get_job_queue_snapshot(jobQueue=q.name)
    front = [j["jobArn"] for j in snapshot["frontOfQueue"]["jobs"]]
    assert any(a.endswith(high) for a in front) and any(a.endswith(med) for a in front)
    assert list(snapshot["frontOfQuotaShares"]["quotaShares"]) == ["QS1"]
    assert snapshot["frontOfQuotaShares"]["quotaShares"]["QS1"][0]["jobArn"].endswith(high)
    usage = snapshot["queueUtilization"]["totalCapacityUsage"]
    assert usage == [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}]

    # Let everything finish: the preempted jobs run again and continue from step 3.
    gate.touch()
    for jid in (high, med, low, qs2):
        wait_status(batch, jid, "SUCCEEDED", timeout=120)
    transcript(batch, "Finally: every job SUCCEEDED", [high, med, low, qs2])

    print("\n== Progress of the preempted jobs (each attempt's first step)")
    for name in ("qs1_job_high", "qs1_job_med"):
        p = jobs.progress(name)
        print(f"  {name}: " + ", ".join(f"{e} {v}" for e, v, _ in p))
        assert events(p, "start") == ["0", str(PAUSE)], f"{name} did not resume from its checkpoint: {p}"
        assert events(p, "sigterm") == [str(PAUSE)]
        assert events(p, "done") == [str(TARGET)]
        assert not events(p, "VIOLATION"), p
    for name in ("qs1_job_low", "qs2_job_1"):
        p = jobs.progress(name)
        assert events(p, "start") == ["0"] and events(p, "done") == [str(TARGET)], p
    for jid in (high, med):
        job = batch.describe_service_job(jobId=jid)
        assert job["preemptionSummary"]["preemptedAttemptCount"] == 1
        # Preempted attempts are not retry attempts; only the successful one is listed.
        assert len(job.get("attempts", [])) == 1, job.get("attempts")
