"""Retention (issue 15, item 3): a finished job stays describable for
`[retention] finished_jobs_days`, then leaves the server for the archive
(`<data-dir>/archive/jobs-YYYY-MM.jsonl`), across restarts; unfinished jobs never do. The
audit log keeps its newest `[retention] audit_entries` and archives the rest (issue 13)."""

import json
import subprocess

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (Jobs, archived, ShareSpec, config_toml, make_queue, qm_bin, wait_for,
                    wait_status)


@pytest.fixture
def server(start_server):
    # Retire at once (a fraction of a day is allowed): the first tick after a job finishes
    # archives it.
    s = start_server(config=config_toml(count=2)
                     + "[retention]\nfinished_jobs_days = 0\ndelete_job_dirs = true\n"
                     + "audit_entries = 3\n",
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


def audit_page(server, token=None) -> dict:
    status, _, body = server.signed("GET", "/qm/v1/audit" + (f"?nextToken={token}" if token else ""))
    assert status == 200, body
    return json.loads(body)


def test_the_audit_log_keeps_its_newest_entries_and_archives_the_rest(server):
    for i in range(6):
        status, _, body = server.signed("POST", "/qm/v1/audit", {"action": "apply", "summary": f"ret-{i}"})
        assert status == 200, body
    wait_for(lambda: audit_page(server).get("archivedEntries", 0) >= 3,
             what="the oldest audit entries to be archived")
    page = audit_page(server)
    kept = [e["summary"] for e in page["entries"]]
    assert kept[-3:] == ["ret-3", "ret-4", "ret-5"] and len(kept) == 3, page
    assert page["archivedEntries"] + len(kept) >= 6
    # Numbered lines, by month recorded; a crash mid-retirement may repeat one, never lose it.
    lines = [json.loads(line) for f in sorted((server.data_dir / "archive").glob("audit-*.jsonl"))
             for line in f.read_text().splitlines()]
    by_seq = {e["seq"]: e for e in lines}
    assert [by_seq[n]["summary"] for n in sorted(by_seq)][-3:] == ["ret-0", "ret-1", "ret-2"], lines
    assert all(e["actor"] and e["at"] > 0 for e in lines), lines
    # A token from before the retirement starts at the oldest entry kept.
    assert [e["summary"] for e in audit_page(server, "0")["entries"]] == kept
    out = subprocess.run([str(qm_bin()), "audit"], env=server.cli_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ret-5" in out.stdout and "ret-0" not in out.stdout, out.stdout
    assert f"{page['archivedEntries']} older entries are in" in out.stderr, out.stderr

    server.kill9()
    server.start()
    again = audit_page(server)
    assert (again["entries"], again["archivedEntries"]) == (page["entries"], page["archivedEntries"])
