"""Jobs that can never fit stay RUNNABLE with the AWS misconfiguration reasons (spec §1.5;
DESIGN.md §2 rule 10), do not block smaller jobs, and run once the configuration is fixed."""

import pytest

from qm_e2e import ShareSpec, make_queue, wait_status

SE_MAX = ("MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE - Service environment(s) associated "
          "with the job queue cannot meet the capacity requirement of the job.")
LIMITS = "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED - Job requirements exceed quota share capacity limits."
BORROW = ("MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED - Job requirements exceed quota share "
          "capacity limits and borrow limits.")
BORROWABLE = ("MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED - Job requires borrowing that "
              "exceeds all configured borrowable capacity.")

CASES = {
    # name: (shares, environment limit, instances the job asks for, expected reason)
    "more_than_the_environment": ([ShareSpec("X", "RESERVE", 3)], 2, 3, SE_MAX),
    "more_than_a_reserve_share": ([ShareSpec("X", "RESERVE", 1)], 3, 2, LIMITS),
    "more_than_a_lend_share": ([ShareSpec("X", "LEND", 1), ShareSpec("Y", "LEND", 2)], 3, 2, LIMITS),
    "more_than_quota_plus_borrow_limit": (
        [ShareSpec("X", "LEND_AND_BORROW", 1, borrow_limit=100), ShareSpec("Y", "LEND", 2)], 3, 3, BORROW),
    "more_than_all_borrowable_capacity": (
        [ShareSpec("X", "LEND_AND_BORROW", 1, borrow_limit=-1), ShareSpec("Y", "LEND", 1),
         ShareSpec("Z", "RESERVE", 1)], 3, 3, BORROWABLE),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_job_that_can_never_fit_waits_with_the_aws_reason(batch, jobs, case):
    shares, env_max, count, reason = CASES[case]
    q = make_queue(batch, case.replace("_", "-")[:20], shares, env_max=env_max)
    jid = jobs.sleeper(q, "X", "too_big", count=count)
    job = wait_status(batch, jid, "RUNNABLE", reason_prefix=reason.split(" - ")[0])
    assert job["statusReason"] == reason
    assert job["capacityUsage"] == [{"capacityUnit": "ml.g5.xlarge", "quantity": float(count)}]


def test_a_job_larger_than_the_executors_pool_waits_for_capacity(batch, jobs):
    # The test server has 3 instances; the environment and the share would allow 5.
    q = make_queue(batch, "physical", [ShareSpec("X", "RESERVE", 5)], env_max=5)
    jid = jobs.sleeper(q, "X", "huge", count=4)
    wait_status(batch, jid, "RUNNABLE", reason_prefix="CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")


def test_a_job_that_never_fits_does_not_block_a_smaller_one_behind_it(batch, jobs):
    q = make_queue(batch, "noblock", [ShareSpec("X", "RESERVE", 1)], env_max=3)
    big = jobs.sleeper(q, "X", "big", count=2, priority=9)
    small = jobs.sleeper(q, "X", "small", priority=1)
    wait_status(batch, small, "RUNNING")
    assert batch.describe_service_job(jobId=big)["statusReason"] == LIMITS


def test_raising_the_share_limit_lets_the_waiting_job_run(batch, jobs):
    q = make_queue(batch, "fixit", [ShareSpec("X", "RESERVE", 1)], env_max=3)
    jid = jobs.sleeper(q, "X", "pair", count=2)
    wait_status(batch, jid, "RUNNABLE", reason_prefix="MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED")
    batch.update_quota_share(quotaShareArn=q.shares["X"],
                             capacityLimits=[{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}])
    job = wait_status(batch, jid, "RUNNING")
    assert job["capacityUsage"] == [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}]


def test_two_service_environments_share_the_executors_pool(batch, jobs):
    """Each environment allows 3 instances and the test server's pool has 3: a second queue's
    job waits for the physical capacity the first queue holds, and runs once it is released."""
    a = make_queue(batch, "pool-a", [ShareSpec("X", "RESERVE", 3)], env_max=3)
    b = make_queue(batch, "pool-b", [ShareSpec("Y", "RESERVE", 3)], env_max=3)
    first = [jobs.sleeper(a, "X", f"a{i}") for i in range(3)]
    for jid in first:
        wait_status(batch, jid, "RUNNING")
    other = jobs.sleeper(b, "Y", "b0")
    wait_status(batch, other, "RUNNABLE", reason_prefix="CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
    batch.terminate_service_job(jobId=first[0], reason="make room")
    wait_status(batch, other, "RUNNING")
