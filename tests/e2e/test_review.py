"""The policy review (issue 19, item 4) on the real server: real processes, a real reclaim of
borrowed capacity, a job that reports its steps and resumes from its checkpoint, changes made
by someone other than the owner, every job retired to the archive at once, and
`qm report review` asked as JSON, as a table and as HTML, the page opened in headless Chromium.

Queue on 2 instances (4 GPUs each): share A (alice) entitled to 1, LEND; share B (bob) to 1,
LEND_AND_BORROW. bob's learner takes both (one borrowed from A) and checkpoints at step 10;
alice's owner job arrives while A lends and reclaims; the admin raises the learner's priority
and terminates alice's owner job; the learner runs again from step 10 (`resumed`). Then a job
of each share runs to success: bob's on both instances (borrowed), alice's on one (own)."""

import json
import re
import subprocess
import time
from datetime import datetime, timezone

import pytest

from qm_e2e import (UNIT, Jobs, ShareSpec, archived, config_toml, make_queue, qm_bin, wait_for,
                    wait_preempted, wait_status)
from test_dashboard import Tree, chromium
from test_resume import attempt_now


@pytest.fixture
def server(start_server):
    s = start_server(config=config_toml(count=2, gpus=4)
                     + "[retention]\nfinished_jobs_days = 0\n", name="review")
    yield s
    s.close()


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def review(server, since: int, until: int, output: str):
    cmd = [str(qm_bin()), "report", "review", "--endpoint", server.url, "--since", utc(since),
           "--until", utc(until), "--output", output]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=server.cli_env())
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}"
    return json.loads(r.stdout) if output == "json" else r.stdout


def reclaim_and_resume(server, admin, alice, bob, tmp_path) -> tuple:
    q = make_queue(admin, "rev", [ShareSpec("A", strategy="LEND", limit=1),
                                  ShareSpec("B", limit=1, borrow_limit=100)], env_max=2)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    jobs_a, jobs_b = Jobs(alice, server, tmp_path / "a"), Jobs(bob, server, tmp_path / "b")
    learner = jobs_b.submit(q, "B", "learner", "reports_steps.py", count=2, env={
        "RESUME": "1", "PROGRESS_FILE": str(jobs_b.file("learner.progress"))})
    wait_status(bob, learner, "RUNNING")
    wait_for(lambda: (attempt_now(server, learner).get("running") or {}).get("lastStep") == 15,
             what="the learner to report step 15, its checkpoint at step 10")
    owner = jobs_a.sleeper(q, "A", "owner")
    wait_preempted(bob, learner)
    wait_status(alice, owner, "RUNNING")
    admin.update_service_job(jobId=learner, schedulingPriority=5)
    admin.terminate_service_job(jobId=owner, reason="the review's owner job is done")
    wait_status(bob, learner, "RUNNING")

    def resumed():
        records = attempt_now(server, learner).get("resumes") or []
        return records and records[0].get("firstStep") is not None and records[0]
    record = wait_for(resumed, what="the learner's second attempt to report its first step")
    assert record["outcome"] == "resumed", record
    bob.terminate_service_job(jobId=learner, reason="measured")

    # A finished job is retired to the archive at once: its status is read there.
    def succeeded(job_id):
        return lambda: archived(server).get(job_id, {}).get("status") == "SUCCEEDED"
    borrowing = jobs_b.submit(q, "B", "borrowing", "exit_code.py", args=[0], count=2)
    wait_for(succeeded(borrowing), what="bob's borrowing job to succeed")
    own = jobs_a.submit(q, "A", "own", "exit_code.py", args=[0])
    wait_for(succeeded(own), what="alice's own job to succeed")
    ids = [learner, owner, borrowing, own]
    wait_for(lambda: all(i in archived(server) for i in ids), what="every job to be retired")
    return q, learner


def test_the_review_of_a_real_reclaim_and_resume(server, tmp_path):
    admin = server.client()
    alice, bob = server.client(principal="alice"), server.client(principal="bob")
    since = int(time.time()) * 1000
    q, learner = reclaim_and_resume(server, admin, alice, bob, tmp_path)
    until = (int(time.time()) + 1) * 1000
    time.sleep(max(0.0, until / 1000 - time.time()) + 0.1)

    r = review(server, since, until, "json")
    groups = {g["quotaShareName"]: g for g in r["groups"] if g["jobQueue"] == q.name}
    a, b = groups["A"], groups["B"]
    assert "class" not in a and "class" not in b, "no class defined"
    # Lending: bob's jobs borrowed; alice's ran on A's own capacity after waiting for it.
    assert b["borrowed"]["jobs"] == 1 and b["ownOnly"]["jobs"] == 0
    assert a["ownOnly"]["jobs"] == 1 and a["borrowed"]["jobs"] == 0
    delay = a["ownerReclaimDelay"]
    assert delay["count"] == 1 and delay["stillWaiting"] == 0, delay
    assert 0 <= delay["p50Seconds"] == delay["maxSeconds"] < 60, delay
    loss = b["reclaimLoss"]
    assert (loss["reclaims"], loss["jobs"]) == (1, 1), loss
    assert loss["requeuedHours"] > 0 and loss["recomputedHours"] > 0, loss
    # Recovery: one reclaim, resumed from step 10, the steps after it done twice on 8 GPUs.
    rec = b["recovery"]
    assert (rec["preemptions"], rec["reclaims"], rec["resumed"], rec["restarted"]) == (1, 1, 1, 0)
    assert rec["recomputedGpuHours"] > 0, rec
    assert a["recovery"]["preemptions"] == 0
    # Stability: the admin changed bob's priority and ended alice's job.
    assert b["stability"]["priorityChanges"] == 1
    assert list(b["stability"]["priorityChangesBy"].values()) == [1]
    assert a["stability"]["terminationsByOthers"] == 1
    assert b["stability"]["terminationsByOthers"] == 0, "bob ended his own learner"
    assert r["policy"]["policyEdits"] >= 4, "environment, policy, queue and shares created"
    assert sum(w["preemptions"] for w in r["weeks"]) == 1
    assert sum(p["borrowedInstanceHours"] for p in r["useOverTime"]) > 0

    table = review(server, since, until, "table")
    assert "Policy review from" in table and "Recovery" in table and q.name in table

    # With the policy that ran, the review replays the window's finished jobs under it and
    # prints the simulated figures beside the real ones (the calibration line).
    policy = tmp_path / "current.yaml"
    policy.write_text(f"""environment: {{{UNIT}: 2}}
shares:
  - {{name: A, limits: {{{UNIT}: 1}}, strategy: LEND}}
  - {{name: B, limits: {{{UNIT}: 1}}, strategy: LEND_AND_BORROW, borrow_limit: 100}}
""")
    cmd = [str(qm_bin()), "report", "review", "--endpoint", server.url, "--since", utc(since),
           "--until", utc(until), "--policy", str(policy), "--stop-grace", "2",
           "--restart-overhead", "1", "--checkpoint-interval", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=server.cli_env())
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert re.match(r"calibration \(simulated vs real, 4 jobs\): completion p50 ", line), out.stdout
    assert "preemptions " in line and " vs 1" in line, line

    html = tmp_path / "review.html"
    html.write_text(review(server, since, until, "html"))
    dom = browse_file(chromium(), html, tmp_path / "profile")
    root = Tree(dom).root
    assert "Policy review" in " ".join(n.text() for n in root.all() if n.tag == "h1")
    rows = [n for n in root.all() if n.tag == "tr" and q.name in n.text()]
    assert len(rows) == 6, "A and B in each of three tables: " + str([n.text() for n in rows])
    svgs = {n.attrs.get("class"): n for n in root.all() if n.tag == "svg"}
    cdf = svgs["plot cdf owner-delay"]
    assert [n for n in cdf.all() if n.tag == "path"], "the owner's delay is drawn"
    use = svgs["plot use"]
    assert any("borrowed" in n.text() for n in use.all() if n.tag == "title")
    weeks = svgs["plot weeks"]
    assert any(n.text().endswith("1 resumed") for n in weeks.all() if n.tag == "title")


def browse_file(browser: str, path, profile) -> str:
    """The DOM of a local page as headless Chromium renders it (the page loads nothing)."""
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={profile}", "--dump-dom", path.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"chromium failed on {path} (exit {r.returncode}):\n{r.stderr[-3000:]}"
    return r.stdout
