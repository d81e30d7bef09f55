"""Usage accounting (issue 15, item 4) on the real server: real processes, a real reclaim,
boto3 clients signing as two principals (created through the admin API), jobs retired to the archive at once, and
`qm report usage` asked before and after a kill -9 restart. The hours the report gives are
checked against the attempts' own start and stop times in the archive."""

import json
import os
import subprocess
import time
from datetime import datetime, timezone

import pytest

from qm_e2e import (Jobs, archived, ShareSpec, attempt_usage, config_toml, make_queue, qm_bin,
                    run_qm, wait_for, wait_status)


@pytest.fixture
def server(start_server):
    s = start_server(config=config_toml(count=2, gpus=0)
                     + "[retention]\nfinished_jobs_days = 0\n", name="usage")
    yield s
    s.close()


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def report(server, since: int, until: int, *args: str, output: str = "json"):
    cmd = [str(qm_bin()), "report", "usage", "--endpoint", server.url, "--since", utc(since),
           "--until", utc(until), "--output", output, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=server.cli_env())
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}"
    return json.loads(r.stdout) if output == "json" else r.stdout


def test_usage_reports_real_runs_and_survives_retirement_and_restart(server, tmp_path):
    # Two principals, created by the admin; usage is accounted to the name that signed.
    alice, bob = server.client(principal="alice"), server.client(principal="bob")
    # The configuration is the admin's; alice and bob only submit.
    q = make_queue(server.client(), "use", [ShareSpec("A", strategy="LEND", limit=1),
                                  ShareSpec("B", limit=1, borrow_limit=100)], env_max=2)
    # The window opens once the shares exist, so A is entitled all through it.
    time.sleep(1)
    since = int(time.time()) * 1000
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    jobs_a, jobs_b = Jobs(alice, server, tmp_path / "a"), Jobs(bob, server, tmp_path / "b")

    # bob's job holds both instances (one borrowed from A) until alice's job reclaims A's.
    big = jobs_b.sleeper(q, "B", "big", count=2)
    wait_status(bob, big, "RUNNING")
    time.sleep(1.5)
    small = jobs_a.submit(q, "A", "small", "exit_code.py", args=[0])
    wait_for(lambda: bob.describe_service_job(jobId=big).get("preemptionSummary"),
             what="big to be preempted")
    wait_for(lambda: small in archived(server), what="small to finish and be retired")
    wait_status(bob, big, "RUNNING")
    time.sleep(1)
    bob.terminate_service_job(jobId=big, reason="done measuring")
    wait_for(lambda: big in archived(server), what="big to finish and be retired")
    # A window that has ended: a report counts entitlement only up to now.
    until = (int(time.time()) + 1) * 1000
    time.sleep(max(0.0, until / 1000 - time.time()) + 0.1)

    records = archived(server)
    hours = {}
    for job in records.values():
        share = job["quotaShareName"]
        for a in job["attempts"]:
            hours[share] = hours.get(share, 0) + a["count"] * (a["stoppedAt"] - a["startedAt"]) / 3.6e6
    by_share = report(server, since, until)
    rows = {r["quotaShareName"]: r for r in by_share["rows"] if r["jobQueue"] == q.name}
    a, b = rows["A"], rows["B"]
    for share, row in rows.items():
        assert row["instanceHours"]["used"] == pytest.approx(hours[share], abs=1e-5), share
    assert b["preemptionsSuffered"] == 1 and a["preemptionsCaused"] == 1
    assert b["instanceHours"]["borrowed"] > 0 and a["instanceHours"]["lentOut"] > 0
    assert b["lostInstanceHours"] > 0, "big ran, and checkpointed nothing, before it was preempted"
    assert b["starts"] == 2 and a["starts"] == 1
    # Within, borrowed and used agree; A's entitlement over the window is fully accounted.
    for row in (a, b):
        h = row["instanceHours"]
        assert h["withinEntitlement"] + h["borrowed"] == pytest.approx(h["used"], abs=1e-5)
    window_h = (until - since) / 3.6e6
    ha = a["instanceHours"]
    assert ha["withinEntitlement"] + ha["lentOut"] + ha["idleEntitlement"] == pytest.approx(
        window_h, abs=1e-4)

    people = {r["principal"]: r for r in report(server, since, until, "--by", "principal")["rows"]}
    assert set(people) >= {"alice", "bob"}
    assert people["bob"]["preemptionsSuffered"] == 1 and people["alice"]["preemptionsCaused"] == 1

    table = report(server, since, until, output="table")
    assert "BORROWED" in table and q.name in table

    # The jobs are only in the archive now; a crash and restart change nothing.
    server.kill9()
    server.start()
    assert report(server, since, until) == by_share


def test_an_unconfined_attempt_s_usage_comes_from_its_reaped_processes_and_reaches_the_report(
        start_server, tmp_path):
    """Without control groups (`confinement = "none"`) the supervisor counts what the job's
    processes used as it reaps them (wait4); the usage report adds it up per share."""
    config = config_toml().replace('kind = "local"\n', 'kind = "local"\nconfinement = "none"\n')
    server = start_server(config=config, name="usage-rusage")
    try:
        batch = server.client()
        q = make_queue(batch, "rusage", [ShareSpec("A", limit=1)], env_max=1)
        since = int(time.time()) * 1000
        jobs = Jobs(batch, server, tmp_path)
        out = jobs.file("burn.json")
        job = jobs.submit(q, "A", "burn", "confined.py",
                          env={"MODE": "burn", "RESULT_FILE": str(out), "ALLOC_MIB": "64",
                               "SPIN_SECONDS": "1.0"})
        wait_status(batch, job, "SUCCEEDED")
        [used] = attempt_usage(server, job)
        assert 1.0 <= used["cpuSeconds"] < 20, used
        assert used["peakMemoryBytes"] >= 64 << 20, used
        until = (int(time.time()) + 2) * 1000
        rows = [r for r in report(server, since, until)["rows"] if r.get("quotaShareName") == "A"]
        assert sum(r["cpuHours"] for r in rows) >= 1.0 / 3600 - 1e-6, rows
        assert max(r.get("peakMemoryBytes", 0) for r in rows) == used["peakMemoryBytes"], rows
        assert "CPU-H" in report(server, since, until, output="table")
    finally:
        server.close()


FAKE_NVIDIA_SMI = """#!/bin/sh
# Answers the server's GPU samples as nvidia-smi would: GPU 0 busy at 90 % with 1000 MiB, GPU 1
# at 30 % with 2000 MiB. Each call's arguments go to $CALLS, one line each.
echo "$*" >> {calls}
list=0,1
for arg in "$@"; do
  case "$prev" in -i) list="$arg" ;; esac
  prev="$arg"
done
for i in $(echo "$list" | tr ',' ' '); do
  case "$i" in
    0) echo "0, 90, 1000" ;;
    1) echo "1, 30, 2000" ;;
  esac
done
"""


def test_an_attempt_s_gpus_are_sampled_once_per_round_and_their_mean_reaches_job_and_report(
        start_server, tmp_path):
    """Where nvidia-smi answers (a stand-in on the server's PATH here: this machine has no
    GPU), the server samples the GPUs of running attempts every gpu_sample_seconds, in one call
    for all of them, and an attempt's usage gets the mean utilisation of its GPUs and the most
    memory they held together."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI.format(calls=calls))
    fake.chmod(0o755)
    config = config_toml(count=2, gpus=1).replace(
        'kind = "local"\n', 'kind = "local"\nconfinement = "none"\ngpu_sample_seconds = 1\n')
    server = start_server(config=config, name="usage-gpu",
                          env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    try:
        batch = server.client()
        q = make_queue(batch, "gpus", [ShareSpec("A", limit=2)], env_max=2)
        since = int(time.time()) * 1000
        jobs = Jobs(batch, server, tmp_path)
        both = jobs.sleeper(q, "A", "both", count=2)
        wait_status(batch, both, "RUNNING")
        wait_for(lambda: calls.exists() and len(calls.read_text().splitlines()) >= 3,
                 what="three GPU samples")
        batch.terminate_service_job(jobId=both, reason="measured")
        wait_status(batch, both, "FAILED")
        [used] = attempt_usage(server, both)
        # (90 + 30) / 2, and both GPUs' memory held at once.
        assert used["gpuUtilizationPercent"] == 60, used
        assert used["peakGpuMemoryBytes"] == 3000 << 20, used
        # One call per round, about every GPU of the machine (none per attempt).
        sampled = [line for line in calls.read_text().splitlines() if "utilization.gpu" in line]
        assert sampled and not any("-i" in line.split() for line in sampled), sampled

        one = jobs.sleeper(q, "A", "one")
        wait_status(batch, one, "RUNNING")
        seen = len(calls.read_text().splitlines())
        wait_for(lambda: len(calls.read_text().splitlines()) >= seen + 2, what="two more samples")
        batch.terminate_service_job(jobId=one, reason="measured")
        wait_status(batch, one, "FAILED")
        [used] = attempt_usage(server, one)
        # Its own GPU's figures, whichever it was given.
        assert (used["gpuUtilizationPercent"], used["peakGpuMemoryBytes"]) in [
            (90, 1000 << 20), (30, 2000 << 20)], used

        shown = run_qm(server, "job", one).stdout
        assert "GPU UTILISATION (MEAN)" in shown and f"{used['gpuUtilizationPercent']} %" in shown, shown
        until = (int(time.time()) + 2) * 1000
        rows = [r for r in report(server, since, until)["rows"] if r.get("quotaShareName") == "A"]
        utilisation = [r["gpuUtilizationPercent"] for r in rows if "gpuUtilizationPercent" in r]
        # Weighted by GPU-hours: between the single GPU's figure and the pair's.
        assert len(utilisation) == 1 and min(60, used["gpuUtilizationPercent"]) <= utilisation[0] \
            <= max(60, used["gpuUtilizationPercent"]), rows
        assert "GPU UTIL" in report(server, since, until, output="table")
    finally:
        server.close()
