"""Running jobs outlive the server (issue 38): every attempt runs under a supervisor of its own,
so a graceful stop, a kill -9, ten kill -9 in a row or an upgrade of `qm serve` leave the job's
processes running; the next start adopts them (same attempt, same startedAt, no lost attempt).
An attempt that ends while no server watches is recorded as it ended; a stop in progress when
the server dies still ends after its grace."""

import os
import signal
import time
from pathlib import Path

import pytest

from qm_e2e import (ShareSpec, config_toml, events, make_queue, pid_alive, wait_for, wait_status)

# Jobs run as the server's user here: these job programs are this checkout's Python scripts,
# which per-attempt uids may not read (the venv's interpreter may live under /root). Isolated
# attempts outliving the server are tested with /bin/sh jobs in test_isolation.py.
def config(count: int = 3, grace: int = 2) -> str:
    return config_toml(count=count, grace=grace, isolation="none")


@pytest.fixture
def server(start_server):
    s = start_server(config=config(), name="supervise")
    yield s
    s.close()


def steps(jobs, name):
    """The steps the checkpointing job recorded, with their pids."""
    return [(e, v, pid) for e, v, pid in jobs.progress(name)]


def running_pid(jobs, name) -> int:
    starts = [pid for e, _, pid in jobs.progress(name) if e == "start"]
    assert len(starts) == 1, f"{name} started {len(starts)} times: {jobs.progress(name)}"
    return starts[0]


def long_jobs(batch, jobs, prefix, n=2):
    q = make_queue(batch, prefix, [ShareSpec("team", limit=3)])
    ids = {}
    for k in range(n):
        name = f"{prefix}_{k}"
        ids[name] = jobs.checkpointing(q, "team", name, target=100000, step_seconds=0.2,
                                       retry={"attempts": 1})
    for name, jid in ids.items():
        wait_status(batch, jid, "RUNNING")
        jobs.wait_started(name)
    return q, ids


def snapshot(batch, jobs, ids):
    out = {}
    for name, jid in ids.items():
        d = batch.describe_service_job(jobId=jid)
        out[name] = (d["status"], d["startedAt"], len(d.get("attempts", [])), running_pid(jobs, name))
    return out


def checkpoint_step(server, jid) -> int:
    try:
        return int((server.jobs_dir / jid / "checkpoints" / "step").read_text())
    except (OSError, ValueError):
        return -1


def still_working(server, jobs, name, jid, pid):
    """The job's process checkpoints new steps after the restart, and never started again."""
    seen = checkpoint_step(server, jid)
    wait_for(lambda: checkpoint_step(server, jid) > seen + 1, what=f"{name} to go on stepping")
    assert [p for e, _, p in jobs.progress(name) if e == "start"] == [pid], jobs.progress(name)


def assert_adopted(server, batch, jobs, ids, before):
    after = snapshot(batch, jobs, ids)
    assert after == before, f"before {before}\nafter {after}"
    for name, jid in ids.items():
        d = batch.describe_service_job(jobId=jid)
        assert "lost" not in (d.get("statusReason") or "").lower(), d.get("statusReason")
        assert pid_alive(before[name][3])
        still_working(server, jobs, name, jid, before[name][3])


def test_a_graceful_stop_and_restart_leaves_running_jobs_running(server, batch, jobs):
    _, ids = long_jobs(batch, jobs, "graceful")
    before = snapshot(batch, jobs, ids)
    assert server.stop() == 0
    for name in ids:
        assert pid_alive(before[name][3]), "the stop of the server stopped a job"
    server.start()
    batch = jobs.batch = server.client()
    assert_adopted(server, batch, jobs, ids, before)
    assert "adopted 2 running attempt(s)" in server.log_path.read_text()


def test_kill_9_ten_times_in_a_row_never_touches_the_jobs(server, batch, jobs):
    _, ids = long_jobs(batch, jobs, "crashes")
    before = snapshot(batch, jobs, ids)
    for _ in range(10):
        server.kill9()
        server.start()
    batch = jobs.batch = server.client()
    assert_adopted(server, batch, jobs, ids, before)


def test_jobs_that_end_while_the_server_is_down_are_recorded_as_they_ended(server, batch, jobs, tmp_path):
    q = make_queue(batch, "down", [ShareSpec("team", limit=3)])
    gate = tmp_path / "release"
    ids = {}
    for name, code in (("ok", 0), ("bad", 3)):
        ids[name] = jobs.submit(q, "team", name, "exit_code.py",
                                env={"EXIT_CODES": str(code), "PROGRESS_FILE": str(jobs.file(name)),
                                     "WAIT_FOR": str(gate)},
                                retry={"attempts": 1})
        wait_status(batch, ids[name], "RUNNING")
    server.kill9()
    gate.touch()
    wait_for(lambda: all(jobs.file(n).exists() and jobs.file(n).read_text() for n in ids),
             what="both jobs to run to their end")
    time.sleep(0.5)
    server.start()
    batch = jobs.batch = server.client()
    wait_status(batch, ids["ok"], "SUCCEEDED")
    bad = wait_status(batch, ids["bad"], "FAILED")
    assert "exited with code 3" in bad["statusReason"], bad["statusReason"]


def test_a_stop_in_progress_when_the_server_dies_still_ends_after_its_grace(server, batch, jobs):
    q = make_queue(batch, "stopping", [ShareSpec("team", limit=3)])
    jid = jobs.sleeper(q, "team", "stubborn", ignore_sigterm=True)
    wait_status(batch, jid, "RUNNING")
    jobs.wait_started("stubborn")
    pid = jobs.pid("stubborn")
    batch.terminate_service_job(jobId=jid, reason="stop it")
    wait_for(lambda: any(e == "sigterm" for e, _, _ in jobs.progress("stubborn")),
             what="the job to get SIGTERM")
    server.kill9()
    # The grace is 2 s: the supervisor kills it while no server runs.
    wait_for(lambda: not pid_alive(pid), timeout=30, what="the stubborn job to be killed after its grace")
    server.start()
    batch = jobs.batch = server.client()
    wait_status(batch, jid, "FAILED")


def test_an_adopted_job_can_be_terminated_and_preempted_by_a_reclaim(server, batch, jobs):
    q = make_queue(batch, "adopted", [ShareSpec("owner", "LEND", 1),
                                      ShareSpec("borrower", "LEND_AND_BORROW", 1, 100)],
                   env_max=2)
    b = [jobs.sleeper(q, "borrower", f"borrower_{k}") for k in range(2)]
    for k, jid in enumerate(b):
        wait_status(batch, jid, "RUNNING")
        jobs.wait_started(f"borrower_{k}")
    server.kill9()
    server.start()
    batch = jobs.batch = server.client()
    # The owner's job reclaims its instance from an adopted borrower.
    owner = jobs.sleeper(q, "owner", "owner_0")
    wait_status(batch, owner, "RUNNING")
    preempted = [j for j in b if batch.describe_service_job(jobId=j)["status"] == "RUNNABLE"]
    assert len(preempted) == 1
    kept = next(j for j in b if j not in preempted)
    batch.terminate_service_job(jobId=kept, reason="done with it")
    wait_status(batch, kept, "FAILED")


def test_kill_9_under_load_fails_no_job_restarts_none_and_runs_none_twice(server, batch, jobs, tmp_path):
    """The kill -9 torture with long-running jobs: short jobs stream in while the server is
    killed and restarted ten times; afterwards no job FAILED, the long jobs never started
    again, and no short job ran twice."""
    q = make_queue(batch, "torture", [ShareSpec("team", limit=3)])
    gate = tmp_path / "release"
    long = {f"long_{k}": jobs.checkpointing(q, "team", f"long_{k}", target=5, pause_at=2, gate=gate,
                                            retry={"attempts": 1})
            for k in range(2)}
    for name, jid in long.items():
        wait_status(batch, jid, "RUNNING")
        jobs.wait_started(name)
    short = {}

    def submit_some(client, n):
        for _ in range(n):
            name = f"short_{len(short)}"
            try:
                short[name] = jobs.submit(q, "team", name, "exit_code.py",
                                          env={"PROGRESS_FILE": str(jobs.file(f"{name}.progress"))},
                                          retry={"attempts": 1})
            except Exception:  # the server is down: try the next one after the restart
                return

    for _ in range(10):
        submit_some(jobs.batch, 4)
        time.sleep(0.3)
        server.kill9()
        server.start()
        jobs.batch = server.client()
    batch = jobs.batch
    for name, jid in short.items():
        job = wait_status(batch, jid, ("SUCCEEDED", "FAILED"), timeout=120)
        assert job["status"] == "SUCCEEDED", (name, job.get("statusReason"))
        runs = [v for e, v, _ in jobs.progress(name) if e == "run"]
        assert len(runs) == 1, f"{name} ran {len(runs)} times: {runs}"
    assert len(short) >= 20, len(short)
    for name, jid in long.items():
        job = batch.describe_service_job(jobId=jid)
        assert job["status"] == "RUNNING" and len(job["attempts"]) <= 1, job
        assert len(events(jobs.progress(name), "start")) == 1, jobs.progress(name)
    gate.touch()
    for name, jid in long.items():
        wait_status(batch, jid, "SUCCEEDED", timeout=120)
        assert not events(jobs.progress(name), "VIOLATION"), jobs.progress(name)


def test_sighup_does_not_stop_the_server_or_its_jobs(server, batch, jobs):
    _, ids = long_jobs(batch, jobs, "hangup", n=1)
    before = snapshot(batch, jobs, ids)
    server.proc.send_signal(signal.SIGHUP)
    time.sleep(1)
    assert server.proc.poll() is None, server.log_tail()
    assert "SIGHUP" in server.log_path.read_text()
    assert snapshot(batch, jobs, ids) == before


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def test_a_supervisor_sent_sigterm_stops_its_attempt_which_is_lost_not_failed(server, batch, jobs):
    """What a service manager does when it stops the server's whole unit (systemd without
    KillMode=process): the job is stopped and queued again without using a retry."""
    q = make_queue(batch, "sigterm", [ShareSpec("team", limit=3)])
    jid = jobs.sleeper(q, "team", "termed", retry={"attempts": 1})
    wait_status(batch, jid, "RUNNING")
    jobs.wait_started("termed")
    supervisor = parent_of(jobs.pid("termed"))
    assert Path(f"/proc/{supervisor}/comm").read_text().strip() == "qm-supervise"
    os.kill(supervisor, signal.SIGTERM)
    jobs.wait_started("termed", times=2)
    job = wait_status(batch, jid, "RUNNING")
    # The ended attempt is listed (the running one is not yet): lost, no retry used.
    assert len(job["attempts"]) == 1, job
    reason = job["attempts"][0]["statusReason"]
    assert reason.startswith("Attempt lost: its supervisor was sent SIGTERM"), reason
