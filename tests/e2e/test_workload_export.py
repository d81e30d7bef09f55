"""Workload export and calibration (issue 19, item 5) on the real server: real jobs, one of
them reclaimed and resumed from its checkpoint, one of a non-interruptible class, both retired
to the archive; `qm workload export` writes them in the simulator's schema, `qm simulate`
replays the export under the policy that ran and a strict baseline, and `qm workload
calibrate` prints the simulated figures beside the real ones."""

import csv
import json
import time
from datetime import datetime, timezone

import pytest

from qm_e2e import UNIT, Jobs, ShareSpec, archived, config_toml, make_queue, wait_for, wait_status
from qm_e2e import run_qm as qm


@pytest.fixture
def server(start_server):
    s = start_server(config=config_toml(count=2, gpus=0)
                     + "[retention]\nfinished_jobs_days = 0\n", name="workload")
    yield s
    s.close()


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# The model as this server runs: checkpoints every step, a 2 s stop grace (config_toml).
MODEL = ["--checkpoint-interval", "1", "--stop-grace", "2", "--restart-overhead", "0"]

CURRENT = f"""environment: {{{UNIT}: 2}}
shares:
  - {{name: A, limits: {{{UNIT}: 1}}, strategy: LEND}}
  - {{name: B, limits: {{{UNIT}: 1}}, strategy: LEND_AND_BORROW, borrow_limit: 100}}
"""


def test_a_real_period_exports_replays_and_calibrates(server, tmp_path):
    admin = server.client()
    q = make_queue(admin, "wl", [ShareSpec("A", strategy="LEND", limit=1),
                                 ShareSpec("B", limit=1, borrow_limit=100)], env_max=2)
    admin.tag_resource(resourceArn=q.arn, tags={"qm:class.urgent": "non-interruptible"})
    time.sleep(1)
    since = int(time.time()) * 1000
    jobs = Jobs(admin, server, tmp_path)

    # big holds both instances (one borrowed from A) and checkpoints every step; A's small
    # job reclaims A's instance, and big resumes from its checkpoint once small is done.
    big = jobs.checkpointing(q, "B", "big", count=2, target=40, step_seconds=0.1)
    wait_status(admin, big, "RUNNING")
    jobs.wait_started("big")
    time.sleep(1.5)
    small = jobs.submit(q, "A", "small", "exit_code.py", args=[0],
                        extra={"tags": {"qm:class": "urgent"}})
    wait_for(lambda: admin.describe_service_job(jobId=big).get("preemptionSummary"),
             what="big to be preempted")
    wait_for(lambda: {small, big} <= set(archived(server)), what="both jobs to finish and retire")
    assert archived(server)[big]["status"] == "SUCCEEDED"
    until = (int(time.time()) + 1) * 1000
    time.sleep(max(0.0, until / 1000 - time.time()) + 0.1)
    window = ["--endpoint", server.url, "--since", utc(since), "--until", utc(until),
              "--queue", q.name]

    out = tmp_path / "jobs.csv"
    r = qm(server, "workload", "export", *window, "--out", str(out))
    assert "wrote 2 job(s)" in r.stderr, r.stderr
    rows = {row["job_id"]: row for row in csv.DictReader(out.open())}
    assert set(rows) == {big, small}
    b, s = rows[big], rows[small]
    assert (b["tenant"], b["gpus"], b["instance_type"], b["class"]) == ("B", "2", UNIT, "")
    assert (s["tenant"], s["gpus"], s["class"]) == ("A", "1", "non-interruptible")
    assert (b["real_preemptions"], s["real_preemptions"]) == ("1", "0")
    assert b["checkpoint_interval_s"] != "", "big reported checkpoints"
    # The work big needed is less than the run time of its two attempts (work since its last
    # checkpoint was done twice) and about the 4 s of its 40 steps: whole seconds, rounded
    # down, and the recomputed steps are charged at the preempted attempt's pace, which
    # includes its process start, so it may come out a second short.
    record = archived(server)[big]
    ran_s = sum(a["stoppedAt"] - a["runningAt"] for a in record["attempts"]) / 1000
    assert 3 <= int(b["duration_s"]) <= round(ran_s), (b, ran_s)
    assert int(b["real_completion_ms"]) == record["stoppedAt"] - record["createdAt"]

    policy = tmp_path / "current.yaml"
    policy.write_text(CURRENT)
    sim = qm(server, "simulate", "--workload", str(out), "--policy", str(policy),
             "--baseline", "strict", "--out", str(tmp_path / "sim"), *MODEL)
    metrics = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert [v["name"] for v in metrics["variants"]] == ["current", "strict"], sim.stdout
    current, strict = (v["overall"] for v in metrics["variants"])
    assert current["completed"] == 2
    # Without lending, B's 2-instance job never fits its 1-instance share.
    assert (strict["completed"], strict["never_started"]) == (1, 1)

    cal = qm(server, "workload", "calibrate", *window, "--policy", str(policy), *MODEL)
    line = cal.stdout.strip()
    print(out.read_text(), line, sep="\n")
    assert line.startswith("calibration (simulated vs real, 2 jobs): completion p50 "), line
    assert line.endswith(" vs 1"), f"one real preemption: {line}"
    # The same from the file.
    again = qm(server, "workload", "calibrate", "--workload", str(out), "--policy", str(policy),
               *MODEL)
    assert again.stdout.strip() == line


def test_bad_flags_are_named_with_the_fix(server, tmp_path):
    r = qm(server, "workload", "export", "--endpoint", server.url, "--since", "yesterday-ish",
           "--out", str(tmp_path / "x.csv"), ok=False)
    assert r.returncode == 1 and "--since: 'yesterday-ish' is not a time" in r.stderr, r.stderr
    r = qm(server, "workload", "export", "--endpoint", server.url,
           "--out", str(tmp_path / "missing" / "x.csv"), ok=False)
    assert r.returncode == 1 and "--out " in r.stderr and "cannot write there" in r.stderr, r.stderr
