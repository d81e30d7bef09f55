"""Retention (issue 15, item 3): a finished job stays describable for
`[retention] finished_jobs_days`, then leaves the server for the archive
(`<data-dir>/archive/jobs-YYYY-MM.jsonl`), across restarts; unfinished jobs never do."""

import pytest
from botocore.exceptions import ClientError

from qm_e2e import Jobs, archived, ShareSpec, config_toml, make_queue, wait_for, wait_status


@pytest.fixture
def server(start_server):
    # Retire at once (a fraction of a day is allowed): the first tick after a job finishes
    # archives it.
    s = start_server(config=config_toml(count=2)
                     + "[retention]\nfinished_jobs_days = 0\ndelete_job_dirs = true\n",
                     name="retention")
    yield s
    s.close()


def gone(batch, job_id) -> bool:
    try:
        batch.describe_service_job(jobId=job_id)
        return False
    except ClientError:
        return True


def test_a_finished_job_moves_to_the_archive_and_a_running_one_stays(server, tmp_path):
    batch = server.client()
    jobs = Jobs(batch, server, tmp_path)
    q = make_queue(batch, "ret", [ShareSpec("A", limit=2)], env_max=2)
    done = jobs.submit(q, "A", "done", "exit_code.py", args=[0])
    running = jobs.sleeper(q, "A", "running")
    wait_status(batch, running, "RUNNING")
    wait_for(lambda: gone(batch, done), what="the finished job to be retired")

    record = archived(server)[done]
    assert record["status"] == "SUCCEEDED" and record["jobName"] == "done"
    assert record["quotaShareName"] == "A" and record["jobQueue"] == q.name
    [attempt] = record["attempts"]
    assert attempt["instanceType"] == "ml.g5.xlarge" and attempt["count"] == 1
    assert attempt["startedAt"] <= attempt["stoppedAt"] <= record["stoppedAt"]
    # delete_job_dirs: the retired job's directory goes once its retirement is durable.
    wait_for(lambda: not (server.data_dir / "jobs" / done).exists(), what="the job dir to go")
    assert (server.data_dir / "jobs" / running).is_dir()
    listed = {j["jobId"] for s in ("SUCCEEDED", "RUNNING")
              for j in batch.list_service_jobs(jobQueue=q.name, jobStatus=s)["jobSummaryList"]}
    assert listed == {running}

    # A restart (after kill -9) replays the retirement: still gone, still archived once.
    server.kill9()
    server.start()
    batch = server.client()
    jobs.batch = batch
    assert gone(batch, done)
    assert batch.describe_service_job(jobId=running)["status"] in ("RUNNABLE", "SCHEDULED", "RUNNING")
    assert list(archived(server)) == [done]
    jobs.cleanup()
