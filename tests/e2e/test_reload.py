"""Reload (issue 38, item 5): SIGHUP and `qm reload` read the config file again and apply what
can change while the server runs, without touching running jobs; what takes a restart, or a
file that does not parse, is refused with the reason and the config in force is kept."""

import json
import signal

from qm_e2e import ShareSpec, config_toml, make_queue, pid_alive, wait_for, wait_status
from qm_e2e import run_qm as qm


def reloaded(server, text: str, via_sighup: bool):
    server.config_path.write_text(text)
    if via_sighup:
        mark = server.log_path.read_text().count("SIGHUP:")
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: server.log_path.read_text().count("SIGHUP:") > mark,
                 what="the server to answer SIGHUP")
        return server.log_path.read_text().splitlines()
    return qm(server, "reload", ok=False)


def test_a_reload_grows_and_shrinks_the_pool_without_touching_running_jobs(start_server, jobs):
    server = start_server(config=config_toml(count=1, grace=2), name="reload")
    batch = jobs.batch = server.client()
    q = make_queue(batch, "reload", [ShareSpec("team", limit=3)])
    first = jobs.sleeper(q, "team", "first")
    wait_status(batch, first, "RUNNING")
    jobs.wait_started("first")
    pid, started = jobs.pid("first"), batch.describe_service_job(jobId=first)["startedAt"]
    waiting = jobs.sleeper(q, "team", "waiting")
    assert wait_status(batch, waiting, "RUNNABLE")["statusReason"].startswith("CAPACITY")

    # SIGHUP with a larger pool starts the waiting job; the running one is untouched.
    log = reloaded(server, config_toml(count=2, grace=3), via_sighup=True)
    assert any("applied executor.pool, executor.stop_grace_seconds" in line for line in log), log[-5:]
    wait_status(batch, waiting, "RUNNING")
    job = batch.describe_service_job(jobId=first)
    assert job["status"] == "RUNNING" and job["startedAt"] == started and not job.get("attempts")
    assert pid_alive(pid) and jobs.pid("first") == pid

    # A file that does not parse, and a key that takes a restart: refused, nothing changes.
    broken = reloaded(server, "[executor\n", via_sighup=False)
    assert broken.returncode == 1, broken
    assert "config.toml" in broken.stderr and "configuration in force is kept" in broken.stderr, broken.stderr
    log = reloaded(server, "[executor\n", via_sighup=True)
    last = [line for line in log if "SIGHUP:" in line][-1]
    assert "reload refused" in last and "config.toml" in last, last
    moved = reloaded(server, config_toml(count=2).replace('region = "', 'region = "x'), via_sighup=False)
    assert moved.returncode == 1 and "region cannot change while the server runs" in moved.stderr, moved.stderr
    assert server.proc.poll() is None

    # Shrunk back to one: both keep running; the removed instance goes when its job ends,
    # and only then does a new job start.
    server.config_path.write_text(config_toml(count=1, grace=3))
    out = qm(server, "reload").stdout
    assert "applied executor.pool" in out and "instances: 1 x" in out, out
    third = jobs.sleeper(q, "team", "third")
    assert wait_status(batch, third, "RUNNABLE")
    for jid in (first, waiting):
        assert batch.describe_service_job(jobId=jid)["status"] == "RUNNING"
    batch.terminate_service_job(jobId=waiting, reason="done")
    wait_status(batch, waiting, "FAILED")
    assert batch.describe_service_job(jobId=third)["status"] == "RUNNABLE"
    batch.terminate_service_job(jobId=first, reason="done")
    wait_status(batch, third, "RUNNING")

    audit = json.loads(server.signed("GET", "/qm/v1/audit")[2])["entries"]
    reloads = [(e["actor"], e["summary"]) for e in audit if e["action"] == "reload"]
    assert [a for a, _ in reloads] == ["SIGHUP", "qm-admin"], reloads

    # Only admins reload.
    status, _, body = server.signed("POST", "/qm/v1/reload", {}, principal="alice")
    assert status == 403 and b"admins" in body, body
    server.close()
