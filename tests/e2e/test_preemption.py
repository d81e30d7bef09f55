"""Preemption through the API with real processes: reclaim of lent capacity, in-share preemption
after UpdateServiceJob, ties, preemptionRetriesBeforeTermination and the SIGKILL after the grace
period (DESIGN.md §2 rules 4, 5, 9; spec §2)."""

from qm_e2e import (ShareSpec, events, make_queue, pid_alive, still, wait_for, wait_preempted,
                    wait_status)


def one_share(batch, prefix, preemption="ENABLED"):
    return make_queue(batch, prefix, [ShareSpec("S", "RESERVE", 1, in_share_preemption=preemption)],
                      env_max=1)


def test_an_owner_reclaims_its_lent_instance_from_the_lower_priority_borrower(batch, jobs):
    q = make_queue(batch, "reclaim", [
        ShareSpec("A", "LEND_AND_BORROW", 1, borrow_limit=-1),
        ShareSpec("B", "LEND", 1),
    ], env_max=2)
    a_low = jobs.sleeper(q, "A", "a_low", priority=5)
    a_high = jobs.sleeper(q, "A", "a_high", priority=6)
    wait_status(batch, a_low, "RUNNING")
    wait_status(batch, a_high, "RUNNING")
    jobs.wait_started("a_low")

    # B's job has a lower priority than both borrowers: the owner reclaims all the same.
    b = jobs.sleeper(q, "B", "b_job", priority=0)
    victim = wait_preempted(batch, a_low)
    reason = victim["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"]
    assert reason == "Preempted: capacity reclaimed by quota share B"
    wait_status(batch, b, "RUNNING")
    assert batch.describe_service_job(jobId=a_high)["status"] == "RUNNING"
    wait_for(lambda: events(jobs.progress("a_low"), "sigterm"), what="the victim to get SIGTERM")
    # The victim waits for A's own instance or for something to borrow.
    still(batch, a_low, "RUNNABLE", seconds=2)


def test_raising_a_waiting_jobs_priority_preempts_a_lower_priority_job_of_its_share(batch, jobs):
    q = one_share(batch, "inshare")
    first = jobs.sleeper(q, "S", "first", priority=3)
    wait_status(batch, first, "RUNNING")
    second = jobs.sleeper(q, "S", "second", priority=1)
    wait_status(batch, second, "RUNNABLE", reason_prefix="OWN_QUOTA_FULL")

    batch.update_service_job(jobId=second, schedulingPriority=4)
    job = wait_preempted(batch, first)
    summary = job["preemptionSummary"]
    assert summary["preemptedAttemptCount"] == 1
    assert summary["recentPreemptedAttempts"][0]["statusReason"] == f"Preempted by higher priority job {second}"
    wait_status(batch, second, "RUNNING")
    assert not job.get("attempts"), "a preempted attempt is not a retry attempt"


def test_a_job_of_equal_priority_never_preempts(batch, jobs):
    q = one_share(batch, "ties")
    first = jobs.sleeper(q, "S", "first", priority=3)
    wait_status(batch, first, "RUNNING")
    second = jobs.sleeper(q, "S", "second", priority=1)
    wait_status(batch, second, "RUNNABLE")
    batch.update_service_job(jobId=second, schedulingPriority=3)
    third = jobs.sleeper(q, "S", "third", priority=3)
    still(batch, first, "RUNNING", seconds=3)
    for jid in (second, third):
        job = batch.describe_service_job(jobId=jid)
        assert job["status"] == "RUNNABLE"
        assert job["statusReason"].startswith("OWN_QUOTA_FULL"), job["statusReason"]


def test_with_in_share_preemption_disabled_a_higher_priority_job_waits(batch, jobs):
    q = one_share(batch, "noinshare", preemption="DISABLED")
    first = jobs.sleeper(q, "S", "first", priority=0)
    wait_status(batch, first, "RUNNING")
    urgent = jobs.sleeper(q, "S", "urgent", priority=9999)
    wait_status(batch, urgent, "RUNNABLE", reason_prefix="OWN_QUOTA_FULL")
    still(batch, first, "RUNNING", seconds=2)
    batch.terminate_service_job(jobId=first, reason="make room")
    wait_status(batch, urgent, "RUNNING")


def test_a_job_with_zero_preemption_retries_fails_at_its_first_preemption(batch, jobs):
    q = one_share(batch, "noretry")
    victim = jobs.sleeper(q, "S", "victim", priority=1, preemption_retries=0)
    wait_status(batch, victim, "RUNNING")
    boss = jobs.sleeper(q, "S", "boss", priority=5)
    job = wait_preempted(batch, victim, statuses="FAILED")
    assert "preempt" in (job.get("statusReason") or "").lower(), job.get("statusReason")
    assert job["preemptionSummary"]["preemptedAttemptCount"] == 1
    wait_status(batch, boss, "RUNNING")


def test_a_job_with_one_preemption_retry_is_requeued_once_and_fails_at_the_second(batch, jobs):
    q = one_share(batch, "oneretry")
    victim = jobs.sleeper(q, "S", "victim", priority=1, preemption_retries=1,
                          retry={"attempts": 1})
    wait_status(batch, victim, "RUNNING")
    jobs.wait_started("victim")

    boss1 = jobs.sleeper(q, "S", "boss1", priority=5)
    job = wait_preempted(batch, victim)
    assert job["preemptionSummary"]["preemptedAttemptCount"] == 1
    wait_status(batch, boss1, "RUNNING")
    batch.terminate_service_job(jobId=boss1, reason="done with it")
    # Requeued, and it runs again although retryStrategy allows a single attempt.
    wait_status(batch, victim, "RUNNING")
    jobs.wait_started("victim", 2)

    boss2 = jobs.sleeper(q, "S", "boss2", priority=5)
    job = wait_preempted(batch, victim, 2, statuses="FAILED")
    summary = job["preemptionSummary"]
    assert summary["preemptedAttemptCount"] == 2
    recent = summary["recentPreemptedAttempts"]
    assert recent[0]["statusReason"] == f"Preempted by higher priority job {boss2}"
    assert recent[1]["statusReason"] == f"Preempted by higher priority job {boss1}"
    assert recent[0]["startedAt"] >= recent[1]["stoppedAt"], "newest first"
    assert recent[0]["serviceResourceId"]["value"] != recent[1]["serviceResourceId"]["value"]
    wait_status(batch, boss2, "RUNNING")


def test_a_victim_that_ignores_sigterm_is_killed_after_the_grace_period(batch, jobs):
    q = one_share(batch, "stubborn")
    victim = jobs.sleeper(q, "S", "victim", priority=1, ignore_sigterm=True)
    wait_status(batch, victim, "RUNNING")
    pid = wait_for(lambda: jobs.pid("victim"), what="the victim's pid file")
    boss = jobs.sleeper(q, "S", "boss", priority=5)
    wait_status(batch, victim, "RUNNABLE")
    wait_for(lambda: "ignored" in events(jobs.progress("victim"), "sigterm"),
             what="the victim to receive SIGTERM")
    # stop_grace_seconds = 2: then SIGKILL, and only then is the instance free for boss.
    wait_for(lambda: not pid_alive(pid), what=f"victim process {pid} to be killed")
    wait_status(batch, boss, "RUNNING")


def test_a_preempted_job_shows_its_preemption_as_soon_as_it_is_runnable_again(batch, jobs):
    # A slow victim (SIGKILL after the 2 s grace) makes the window between the preemption and the
    # process's exit visible: the job is RUNNABLE at once, and its preemption is on record then.
    q = one_share(batch, "promptsummary")
    victim = jobs.sleeper(q, "S", "victim", priority=1, ignore_sigterm=True)
    wait_status(batch, victim, "RUNNING")
    jobs.wait_started("victim")
    jobs.sleeper(q, "S", "boss", priority=5)
    job = wait_status(batch, victim, "RUNNABLE")
    assert (job.get("preemptionSummary") or {}).get("preemptedAttemptCount") == 1, (
        f"RUNNABLE after a preemption but no preemptionSummary yet: {job.get('statusReason')}")
