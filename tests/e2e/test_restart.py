"""Durability: `kill -9` of the server loses no accepted job, and after a restart the attempts
that were running are adopted where they run (their supervisors outlive the server, issue 38);
a job never runs twice at the same time (issue 3, item 3)."""

import json
import shutil
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from qm_e2e import (REPO, Jobs, Server, ShareSpec, config_toml, demo_setup, describe_brief, events,
                    make_queue, pid_alive, wait_for, wait_status)


@pytest.fixture
def server(start_server):
    """A fresh server for each test: these tests kill it."""
    s = start_server(name="restart")
    yield s
    s.close()


def start_pids(jobs, name):
    return [pid for e, _, pid in jobs.progress(name) if e == "start"]


def test_a_server_killed_in_the_middle_of_the_demo_loses_nothing_and_runs_no_job_twice(
        server, batch, jobs, tmp_path):
    q = demo_setup(batch, "crash")
    gate = tmp_path / "gate"
    run = dict(gate=gate, target=8, pause_at=3, retry={"attempts": 1})
    names = ["qs1_job_high", "qs1_job_med", "qs1_job_low", "qs2_job_1"]
    ids = {
        "qs1_job_high": jobs.checkpointing(q, "QS1", "qs1_job_high", priority=3, **run),
        "qs1_job_med": jobs.checkpointing(q, "QS1", "qs1_job_med", priority=2, **run),
        "qs1_job_low": jobs.checkpointing(q, "QS1", "qs1_job_low", priority=1, **run),
    }
    wait_status(batch, ids["qs1_job_med"], "RUNNING")
    wait_for(lambda: events(jobs.progress("qs1_job_med"), "paused"), what="med to checkpoint")
    ids["qs2_job_1"] = jobs.checkpointing(q, "QS2", "qs2_job_1", priority=1, **run)
    wait_status(batch, ids["qs1_job_med"], "RUNNABLE")
    for name in ("qs1_job_high", "qs2_job_1"):
        wait_status(batch, ids[name], "RUNNING")
        wait_for(lambda n=name: events(jobs.progress(n), "paused"), what=f"{name} to checkpoint step 3")
    before = {name: batch.describe_service_job(jobId=jid) for name, jid in ids.items()}
    orphans = {name: start_pids(jobs, name)[-1] for name in ("qs1_job_high", "qs2_job_1")}
    assert all(pid_alive(p) for p in orphans.values())

    server.kill9()
    print(f"\n[e2e] killed the server with SIGKILL; running attempts: {orphans}")
    server.restart()

    batch = server.client()
    jobs.batch = batch
    for name, jid in ids.items():
        job = batch.describe_service_job(jobId=jid)
        assert (job["jobId"], job["jobName"], job["jobArn"]) == (
            jid, before[name]["jobName"], before[name]["jobArn"])
        assert job["createdAt"] == before[name]["createdAt"]
        if name in orphans:
            # Adopted: the same attempt, still running, as if nothing happened.
            assert job["status"] == "RUNNING", job
            assert job["startedAt"] == before[name]["startedAt"]
            assert len(job["attempts"]) == len(before[name]["attempts"])
    med = batch.describe_service_job(jobId=ids["qs1_job_med"])
    assert med["preemptionSummary"]["preemptedAttemptCount"] == 1, "the preemption record survives"
    for name, pid in orphans.items():
        assert pid_alive(pid), f"the running attempt of {name} (pid {pid}) goes on"

    gate.touch()
    for jid in ids.values():
        wait_status(batch, jid, "SUCCEEDED", timeout=120)
    for name in names:
        p = jobs.progress(name)
        print(f"  {name}: " + ", ".join(f"{e} {v}" for e, v, _ in p))
        assert not events(p, "VIOLATION"), f"{name} ran twice at the same time: {p}"
        assert events(p, "done") == ["8"], p
    for name in orphans:
        assert events(jobs.progress(name), "start") == ["0"], "never started again"


def test_every_submit_that_was_answered_survives_a_kill_9(server, batch, tmp_path):
    q = make_queue(batch, "burst", [ShareSpec("X", "RESERVE", 1)], env_max=1)
    jobs = Jobs(batch, server, tmp_path)
    total, kill_after, threads = 1000, 150, 4
    accepted: dict[str, str] = {}
    failures = []
    lock = threading.Lock()
    enough = threading.Event()
    clients = [server.client() for _ in range(threads)]

    def submit(i):
        c = clients[i % threads]
        name = f"burst-{i}"
        try:
            # 2 instances against a 1-instance share: never fits, so no process runs.
            jid = Jobs(c, server, tmp_path).submit(q, "X", name, "exit_code.py", count=2)
        except (ClientError, BotoCoreError) as e:
            with lock:
                failures.append(repr(e))
            return
        with lock:
            accepted[name] = jid
            if len(accepted) >= kill_after:
                enough.set()

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(submit, i) for i in range(total)]
        enough.wait(timeout=120)
        server.kill9()
        for f in futures:
            f.result()
    print(f"\n[e2e] {len(accepted)} submits answered before the kill, {len(failures)} failed")
    assert len(accepted) >= kill_after

    server.restart()
    batch = server.client()
    jobs.batch = batch
    for name, jid in accepted.items():
        job = batch.describe_service_job(jobId=jid)
        assert job["jobName"] == name and job["status"] == "RUNNABLE", job
    listed = [j for page in batch.get_paginator("list_service_jobs").paginate(
        jobQueue=q.name, filters=[{"name": "JOB_NAME", "values": ["burst-*"]}]) for j in page["jobSummaryList"]]
    names = [j["jobName"] for j in listed]
    assert len(names) == len(set(names)), "no job was stored twice"
    assert set(accepted) <= set(names)
    assert len(names) <= len(accepted) + threads, "at most the in-flight submits were stored unanswered"
    # New submits are accepted after the restart.
    jobs.submit(q, "X", "after-restart", "exit_code.py", count=2)


def test_finished_jobs_and_resources_survive_a_clean_stop(server, batch, jobs):
    q = make_queue(batch, "stop", [ShareSpec("X", "RESERVE", 1)], env_max=1)
    done = jobs.submit(q, "X", "finished", "exit_code.py")
    wait_status(batch, done, "SUCCEEDED")
    failed = jobs.submit(q, "X", "failed", "exit_code.py", env={"EXIT_CODES": "9"})
    wait_status(batch, failed, "FAILED")
    before = {j: batch.describe_service_job(jobId=j) for j in (done, failed)}
    assert server.stop() == 0, "SIGTERM shuts the server down cleanly"
    server.start()
    batch = server.client()
    jobs.batch = batch
    for jid, old in before.items():
        new = batch.describe_service_job(jobId=jid)
        for key in ("status", "statusReason", "attempts", "createdAt", "startedAt", "stoppedAt"):
            assert new.get(key) == old.get(key), key
    assert batch.describe_quota_share(quotaShareArn=q.shares["X"])["status"] == "VALID"
    nxt = jobs.submit(q, "X", "next", "exit_code.py")
    wait_status(batch, nxt, "SUCCEEDED")


def test_a_second_server_on_the_same_data_dir_is_refused(server):
    import subprocess
    from qm_e2e import free_port, qm_bin
    out = subprocess.run(
        [str(qm_bin()), "serve", "--listen", f"127.0.0.1:{free_port()}",
         "--data-dir", str(server.data_dir), "--config", str(server.config_path)],
        capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "in use by another qm serve" in out.stderr, out.stderr
    # The first server is unaffected.
    assert server.proc.poll() is None


def test_an_attempt_spawned_just_before_a_crash_is_adopted_at_restart(
        server, batch, jobs, tmp_path):
    """The crash window between spawning an attempt and committing its pids: simulated by
    removing the batch that recorded them from the log while the server is dead. The restarted
    server finds the attempt's supervisor at its socket and adopts it (and logs it running);
    the job is not run again."""
    import sqlite3
    q = make_queue(batch, "window", [ShareSpec("X", "RESERVE", 1)], env_max=1)
    gate = tmp_path / "gate"
    jid = jobs.checkpointing(q, "X", "spawned", gate=gate, target=5, pause_at=2)
    wait_status(batch, jid, "RUNNING")
    wait_for(lambda: events(jobs.progress("spawned"), "paused"), what="the job to reach its pause")
    running = start_pids(jobs, "spawned")[-1]
    server.kill9()

    db = sqlite3.connect(server.data_dir / "qm.sqlite3")
    seq = db.execute("SELECT MIN(seq) FROM batches WHERE commands LIKE '%AttemptRunning%'").fetchone()[0]
    assert seq is not None
    db.execute("DELETE FROM batches WHERE seq >= ?", (seq,))
    db.commit()
    db.close()
    assert pid_alive(running)

    server.restart()
    batch = server.client()
    jobs.batch = batch
    job = wait_status(batch, jid, "RUNNING")
    assert len(job["attempts"]) <= 1, job
    assert pid_alive(running), "adopted, not stopped"
    gate.touch()
    wait_status(batch, jid, "SUCCEEDED", timeout=120)
    p = jobs.progress("spawned")
    assert not events(p, "VIOLATION"), f"ran twice at the same time: {p}"
    assert len(start_pids(jobs, "spawned")) == 1, p


def test_an_attempt_that_finished_just_before_a_crash_is_not_run_again(
        server, batch, jobs, tmp_path):
    """The crash window between an attempt's exit and the commit of that exit: simulated by
    removing the batch that logged it. The restarted server finds the outcome the executor
    recorded next to the attempt's logs and keeps it, instead of running the job again."""
    import sqlite3
    q = make_queue(batch, "exitwin", [ShareSpec("X", "RESERVE", 1)], env_max=1)
    jid = jobs.checkpointing(q, "X", "quick", target=2, retry={"attempts": 1})
    wait_status(batch, jid, "SUCCEEDED")
    server.kill9()

    db = sqlite3.connect(server.data_dir / "qm.sqlite3")
    seq = db.execute("SELECT MIN(seq) FROM batches WHERE commands LIKE '%AttemptExited%'").fetchone()[0]
    assert seq is not None
    db.execute("DELETE FROM batches WHERE seq >= ?", (seq,))
    db.commit()
    db.close()

    server.restart()
    batch = server.client()
    job = wait_status(batch, jid, "SUCCEEDED")
    assert len(job["attempts"]) == 1, job["attempts"]
    p = jobs.progress("quick")
    assert events(p, "start") == ["0"], f"the finished job ran again: {p}"


def test_a_data_dir_written_by_release_7368e83_starts_with_its_jobs_and_runs_them_on(
        qm_binary, tmp_path):
    """Upgrade: the store release 7368e83 left when it was killed with SIGKILL while three
    attempts ran (crates/server/tests/fixtures/release-7368e83, made by
    tests/upgrade/make_fixture.py) opens under this build, which says who wrote it, keeps every
    job, and runs the interrupted ones again."""
    fixture = REPO / "crates/server/tests/fixtures/release-7368e83"
    recorded = json.loads((fixture / "answers.json").read_text())
    server = Server(tmp_path / "upgrade", config_toml(count=3), name="upgrade")
    server.data_dir.mkdir(parents=True)
    shutil.copy(fixture / "qm.sqlite3", server.data_dir / "qm.sqlite3")
    try:
        server.start()
        log = Path(server.log_path).read_text()
        assert "the data dir was written by schema-1 (7368e83 or earlier)" in log, log
        batch = server.client()
        ids = recorded["jobs"]
        final = {"done": "SUCCEEDED", "fails": "FAILED", "terminated": "FAILED"}
        for name, status in final.items():
            assert batch.describe_service_job(jobId=ids[name])["status"] == status, name
        # The attempts that ran when the release died are lost, and their jobs run again.
        for name in ("r3", "r4", "p1"):
            job = wait_status(batch, ids[name], "RUNNING")
            assert job["jobName"] == name
        names = {j["jobName"] for s in ("RUNNABLE", "RUNNING", "SUCCEEDED", "FAILED")
                 for j in batch.list_service_jobs(jobQueue="fx-queue", jobStatus=s)["jobSummaryList"]}
        assert names == set(ids), names
        # The first start wrote a snapshot of the state it rebuilt: a restart goes on from it
        # and from this build's own batches, and no longer reads the release's.
        assert "snapshot written" in log, log
        server.restart()
        assert "schema-1" not in Path(server.log_path).read_text()
        for name, status in final.items():
            assert batch.describe_service_job(jobId=ids[name])["status"] == status, name
        for name in ("r3", "r4", "p1"):
            wait_status(batch, ids[name], "RUNNING")
        names = {j["jobName"] for s in ("RUNNABLE", "RUNNING", "SUCCEEDED", "FAILED")
                 for j in batch.list_service_jobs(jobQueue="fx-queue", jobStatus=s)["jobSummaryList"]}
        assert names == set(ids), names
    finally:
        server.close()


def test_jobs_queued_when_release_7368e83_was_killed_run_to_success_after_the_upgrade(
        qm_binary, tmp_path):
    """Upgrade (issue 39): the data dir of release 7368e83 killed with six short jobs queued
    or running (crates/server/tests/fixtures/release-7368e83-queued). Its batches are applied
    as logged, never decided again: every finished job keeps its status and reason, and the
    six run to SUCCEEDED under this build."""
    fixture = REPO / "crates/server/tests/fixtures/release-7368e83-queued"
    recorded = json.loads((fixture / "answers.json").read_text())
    ids = recorded["jobs"]
    told = {}
    for op, request, response in recorded["answers"]:
        if op == "describeservicejob":
            told[response["jobName"]] = response
    server = Server(tmp_path / "upgrade", config_toml(count=3), name="upgrade")
    server.data_dir.mkdir(parents=True)
    shutil.copy(fixture / "qm.sqlite3", server.data_dir / "qm.sqlite3")
    gate = Path(recorded["gate"])
    try:
        server.start()
        log = Path(server.log_path).read_text()
        assert "applied as they were decided" in log, log
        batch = server.client()
        for name in ("done", "fails", "terminated", "q1"):
            job = batch.describe_service_job(jobId=ids[name])
            assert (job["status"], job.get("statusReason")) == (
                told[name]["status"], told[name].get("statusReason")), name
        gate.touch()
        for n in range(1, 7):
            job = wait_status(batch, ids[f"q{n}"], ("SUCCEEDED", "FAILED"), timeout=120)
            assert job["status"] == "SUCCEEDED", describe_brief(job)
        # Nothing the release had finished changed meanwhile.
        for name in ("done", "fails", "terminated"):
            job = batch.describe_service_job(jobId=ids[name])
            assert job["status"] == told[name]["status"], name
    finally:
        gate.unlink(missing_ok=True)
        server.close()


def test_snapshots_drop_the_log_they_cover_and_a_kill_9_after_one_loses_nothing(
        start_server, tmp_path):
    """`[state] snapshot_every_commands`: the server snapshots its state every N logged
    commands and drops the batches the snapshot covers; a restart after `kill -9` starts from
    the snapshot plus the batches after it and has every job."""
    config = config_toml(count=2) + "[state]\nsnapshot_every_commands = 25\n"
    server = start_server(config=config, name="snapshots")
    try:
        batch = server.client()
        q = make_queue(batch, "snap", [ShareSpec("A", limit=2)], env_max=2)
        jobs = Jobs(batch, server, tmp_path)
        ids = [jobs.sleeper(q, "A", f"snap-{i}") for i in range(120)]
        for jid in ids[:2]:
            wait_status(batch, jid, "RUNNING")
        db = server.data_dir / "qm.sqlite3"

        def store():
            with sqlite3.connect(db) as conn:
                batches = conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
                snapshots = conn.execute("SELECT COUNT(*), MAX(seq) FROM snapshots").fetchone()
            return batches, snapshots

        # Snapshots are written in the background; the store keeps the latest two and the
        # batches after the older one: wait until a second one has dropped batches.
        wait_for(lambda: store()[1][0] == 2 and store()[0] < 120, what="two snapshots")
        batches, snapshots = store()
        assert snapshots[1] > 0, snapshots
        assert batches > 0, "the restart must replay batches after a snapshot, too"
        before = {jid: batch.describe_service_job(jobId=jid) for jid in ids}

        first_log = Path(server.log_path).read_text()
        assert "snapshot written" in first_log, first_log[-2000:]
        server.kill9()
        server.start()
        batch = server.client()
        # Every job is there (DescribeServiceJob fails for an unknown id), as it was.
        for jid, job in before.items():
            now = batch.describe_service_job(jobId=jid)
            assert (now["jobName"], now["createdAt"]) == (job["jobName"], job["createdAt"])
        for jid in ids[:2]:
            wait_status(batch, jid, "RUNNING")
        jobs.batch = batch
        jobs.cleanup()
    finally:
        server.close()
