"""Verified resume with boto3 and real processes: a job that reports its steps in
$QM_PROGRESS_FILE is preempted by the owner of the instance it borrowed, runs again, and qm
classifies the new attempt against the checkpoint the preempted one reported: `resumed` when
it went on from the checkpoint, `restarted` when it started over, with the steps computed
twice (GET /qm/v1/jobs/{job}/attempt, `qm job`)."""

import json
import subprocess

from qm_e2e import ShareSpec, make_queue, qm_bin, wait_for, wait_preempted, wait_status


def attempt_now(server, job_id: str) -> dict:
    status, _, body = server.signed("GET", f"/qm/v1/jobs/{job_id}/attempt")
    assert status == 200, body
    return json.loads(body)


def preempt_by_owner_and_run_again(batch, server, jobs, prefix: str, resume: bool) -> tuple[str, dict]:
    """Job `learner` of share A borrows B's instance, reaches step 15 with its checkpoint at
    step 10, is preempted when B's owner job arrives, and runs again once that job is gone.
    Returns its id and the resume record of its second attempt."""
    q = make_queue(batch, prefix, [
        ShareSpec("A", "LEND_AND_BORROW", 0, borrow_limit=-1),
        ShareSpec("B", "LEND", 1),
    ], env_max=1)
    learner = jobs.submit(q, "A", "learner", "reports_steps.py", env={
        "RESUME": "1" if resume else "0",
        "PROGRESS_FILE": str(jobs.file("learner.progress")),
    })
    wait_status(batch, learner, "RUNNING")
    wait_for(lambda: (attempt_now(server, learner).get("running") or {}).get("lastStep") == 15,
             what="the learner to report step 15, its checkpoint at step 10")
    running = attempt_now(server, learner)["running"]
    assert running["checkpointStep"] == 10, running

    owner = jobs.sleeper(q, "B", "owner")
    wait_preempted(batch, learner)
    wait_status(batch, owner, "RUNNING")
    batch.terminate_service_job(jobId=owner, reason="the owner is done")
    wait_status(batch, learner, "RUNNING")
    jobs.wait_started("learner", 2)

    def resumed():
        records = attempt_now(server, learner).get("resumes") or []
        return records and records[0].get("firstStep") is not None and records[0]
    record = wait_for(resumed, what="the second attempt's first step")
    return learner, record


def qm_job(server, job_id: str) -> str:
    r = subprocess.run([str(qm_bin()), "job", job_id], capture_output=True, text=True,
                       timeout=60, env=server.cli_env())
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_job_that_resumes_from_its_checkpoint_after_a_reclaim_is_resumed(batch, server, jobs):
    learner, record = preempt_by_owner_and_run_again(batch, server, jobs, "resumed", resume=True)
    assert record["attempt"] == 2
    assert record["outcome"] == "resumed"
    assert (record["checkpointStep"], record["previousLastStep"], record["firstStep"]) == (10, 15, 10)
    # Steps 11..15 were made twice; their hours at the preempted attempt's pace.
    assert record["recomputedSteps"] == 5
    assert record["recomputedInstanceHours"] > 0
    shown = qm_job(server, learner)
    assert "resumes after preemption (1)" in shown, shown
    row = next(line.split() for line in shown.splitlines() if "resumed" in line.split())
    assert row[:6] == ["2", "resumed", "10", "15", "10", "5"], shown
    # The malformed line each attempt wrote is ignored, with one note in the attempt's log.
    status, _, log = server.signed("GET", f"/qm/v1/jobs/{learner}/logs?stream=stderr&attempt=2")
    assert status == 200
    assert log.decode().count("[qm] ignored a line of the progress file") == 1, log


def test_a_job_that_ignores_its_checkpoint_after_a_reclaim_is_restarted(batch, server, jobs):
    _, record = preempt_by_owner_and_run_again(batch, server, jobs, "restarted", resume=False)
    assert record["outcome"] == "restarted"
    assert (record["checkpointStep"], record["previousLastStep"], record["firstStep"]) == (10, 15, 0)
    assert record["recomputedSteps"] == 15
    assert record["recomputedInstanceHours"] > 0
