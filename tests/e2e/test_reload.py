"""Reload (issue 38, item 5): SIGHUP and `qm reload` read the config file again and apply what
can change while the server runs, without touching running jobs; what takes a restart, or a
file that does not parse, is refused with the reason and the config in force is kept."""

import json
import signal
import subprocess
import time
from datetime import datetime, timezone

from qm_e2e import ShareSpec, config_toml, make_queue, pid_alive, qm_bin, wait_for, wait_status
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


def test_an_instance_type_a_reload_adds_has_its_gpus_counted_in_usage_reports(start_server, jobs):
    server = start_server(config=config_toml(count=1), name="reload-gpus")
    batch = jobs.batch = server.client()
    added = "ml.g5.2xlarge"
    server.config_path.write_text(config_toml(count=1) + f"""[[executor.pool]]
instance_type = "{added}"
count = 1
gpus_per_instance = 0
""")
    assert "applied executor.pool" in qm(server, "reload").stdout
    q = make_queue(batch, "reload-gpus", [ShareSpec("team", limit=1, unit=added)], env_max=1, unit=added)
    since = int(time.time()) * 1000
    done = jobs.submit(q, "team", "short", "exit_code.py", args=[0], unit=added)
    wait_status(batch, done, "SUCCEEDED")
    until = (int(time.time()) + 2) * 1000
    utc = lambda ms: datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = subprocess.run([str(qm_bin()), "report", "usage", "--endpoint", server.url, "--since", utc(since),
                        "--until", utc(until), "--output", "json"],
                       capture_output=True, text=True, timeout=60, env=server.cli_env())
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    # The type is known since the reload: no note that its GPU-hours count 0 for want of it.
    assert not [n for n in report["notes"] if added in n], report["notes"]
    assert report["rows"], report
    server.close()
