"""The Slurm executor end to end: boto3 against the real `qm serve` with `kind = "slurm"`, and a
real Slurm 22.05 cluster started by scripts/slurm/cluster (4 nodes qm-node1..4 in partition
`gpu`, 1 fake GPU each; every node is this host). Each attempt is one Slurm job; the jobs record
which node ran them (jobs/on_host.py), so the tests can tell the nodes apart.

Needs Slurm (`scripts/slurm/cluster install`): without it the module is skipped, unless
QM_REQUIRE_SLURM is set (CI), which turns the skip into a failure. The cluster's ports start at
QM_E2E_SLURM_PORT_BASE (default 18817, moved up by 100 while taken), away from the default of a
developer's own `scripts/slurm/cluster start`.

`pytest -s -k slurm` prints what each step saw.
"""

from __future__ import annotations

import json
import os
import tarfile
import threading
import time

import pytest

from qm_e2e import (DEADLINE, STORAGE_ROOT, UNIT, Jobs, ShareSpec, SlurmCluster, demo_setup, events, line,
                    make_queue, pid_alive, slurm_config_toml, slurm_missing, still, storage_uri,
                    wait_for, wait_preempted, wait_status)
from qm_e2e import run_qm as qm
from test_resume import preempt_by_owner_and_run_again

# Without Slurm the module is skipped; with QM_REQUIRE_SLURM set (CI) each of its tests fails
# instead (in the `cluster` fixture), and the other modules still run.
_MISSING = slurm_missing()
if _MISSING and not os.environ.get("QM_REQUIRE_SLURM"):
    pytest.skip(_MISSING, allow_module_level=True)

NODES = 4
TARGET = 10
PAUSE = 3
EXITED = "Received status from SageMaker: AlgorithmError: process exited with code "
# A lost node is declared DOWN ~26 s after its slurmd dies (SlurmdTimeout=10); the job is then
# put back and dispatched again: allow for both on a busy 2-core machine.
NODE_LOSS_DEADLINE = max(DEADLINE, 120)


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if _MISSING:
        pytest.fail(f"QM_REQUIRE_SLURM is set but {_MISSING}", pytrace=False)
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=NODES, gpus=1)
    try:
        c.start()
        print(f"\n[e2e] Slurm cluster in {c.dir} (port base {c.port_base})", flush=True)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def server(start_server, cluster):
    def config(workdir):
        shared = workdir / "shared"
        shared.mkdir(exist_ok=True)
        return slurm_config_toml(shared_dir=shared, gpus=1, grace=2, poll=0.5)

    s = start_server(config, name="slurm", env=cluster.env)
    s.shared_dir = s.workdir / "shared"
    yield s
    s.close()


class SlurmJobs(Jobs):
    """`Jobs` whose programs run behind jobs/on_host.py, which records the node of each attempt
    in `<name>.hosts` before it becomes the program."""

    def submit(self, queue, share, name, script="sleep_forever.py", *, args=(), env=None, **kw):
        env = dict(env or {}, HOSTS_FILE=str(self.file(f"{name}.hosts")))
        if script != "on_host.py":
            args = [script, *args]
        return super().submit(queue, share, name, "on_host.py", args=args, env=env, **kw)

    def hosts(self, name: str) -> list[dict]:
        """What on_host.py recorded, one entry per host and attempt, oldest first."""
        try:
            text = self.file(f"{name}.hosts").read_text()
        except OSError:
            return []
        return [json.loads(x) for x in text.splitlines() if x.strip()]

    def wait_hosts(self, name: str, count: int = 1, timeout: float = DEADLINE) -> list[dict]:
        return wait_for(lambda: (lambda h: h if len(h) >= count else None)(self.hosts(name)),
                        timeout, f"{name} to record {count} host entr(y/ies): {self.hosts(name)}")


@pytest.fixture
def jobs(batch, server, tmp_path):
    j = SlurmJobs(batch, server, tmp_path)
    yield j
    j.cleanup()


@pytest.fixture(autouse=True)
def idle_cluster(cluster):
    """Every test starts on an idle cluster: all nodes up and free, no job left in Slurm."""
    def idle():
        states = cluster.node_states()
        return (len(states) == NODES and all(s == "idle" for s in states.values())
                and not cluster.jobs())

    try:
        wait_for(idle, DEADLINE, "every Slurm node to be idle and no Slurm job left", interval=0.3)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.describe()}") from None
    yield


# -- helpers ------------------------------------------------------------------------------


def transcript(batch, title, ids, jobs=None):
    print(f"\n== {title}")
    for name, jid in ids.items():
        where = ""
        if jobs is not None:
            where = " on " + " -> ".join(h["host"] for h in jobs.hosts(name)) if jobs.hosts(name) else ""
        print("  " + line(batch.describe_service_job(jobId=jid)) + where)


def wait_paused(jobs, name, step=PAUSE):
    wait_for(lambda: str(step) in events(jobs.progress(name), "paused"),
             what=f"{name} to checkpoint step {step}: {jobs.progress(name)}")


def node_index(host: str) -> int:
    assert host.startswith("qm-node"), f"SM_CURRENT_HOST should be a Slurm node name: {host!r}"
    return int(host[len("qm-node"):])


def slurm_job_fields(cluster, slurm_job_id: str) -> dict:
    """`scontrol show job` as a dict (the fields this module checks)."""
    out = cluster.run("scontrol", "-o", "show", "job", slurm_job_id)
    fields = {}
    for tok in out.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            fields.setdefault(k, v)
    return fields


def log_files(server, jid) -> dict[str, str]:
    """The job's attempt log files under the shared directory: name -> text, newest attempt."""
    root = server.shared_dir / "jobs" / jid / "attempts"
    attempts = sorted((p for p in root.glob("*") if p.is_dir()), key=lambda p: int(p.name))
    assert attempts, f"no attempt directory under {root}"
    return {p.name: p.read_text(errors="replace") for p in attempts[-1].glob("*.log")}


def diagnose(server, cluster) -> str:
    return f"{server.log_tail()}\n{cluster.describe()}"


# -- tests --------------------------------------------------------------------------------


def test_the_aws_demo_on_slurm_reclaims_a_borrowed_node_and_the_borrower_resumes_from_its_checkpoint(
        server, cluster, batch, jobs, tmp_path):
    q = demo_setup(batch, "sdemo")
    gate = tmp_path / "gate"
    run = dict(gate=gate, target=TARGET, pause_at=PAUSE, retry={"attempts": 1})

    # Step 1: high runs on QS1's own instance, med borrows QS2's idle one, low has nothing left
    # to borrow (QS3 is RESERVE). Each is a Slurm job on its own node.
    ids = {
        "qs1_job_high": jobs.checkpointing(q, "QS1", "qs1_job_high", priority=3, **run),
        "qs1_job_med": jobs.checkpointing(q, "QS1", "qs1_job_med", priority=2, **run),
        "qs1_job_low": jobs.checkpointing(q, "QS1", "qs1_job_low", priority=1, **run),
    }
    wait_status(batch, ids["qs1_job_high"], "RUNNING")
    wait_status(batch, ids["qs1_job_med"], "RUNNING")
    wait_status(batch, ids["qs1_job_low"], "RUNNABLE", reason_prefix="NOTHING_TO_BORROW")
    wait_paused(jobs, "qs1_job_high")
    wait_paused(jobs, "qs1_job_med")
    high_at = jobs.wait_hosts("qs1_job_high")[0]
    med_at = jobs.wait_hosts("qs1_job_med")[0]
    assert high_at["host"] != med_at["host"], "two exclusive jobs on one node"
    for at in (high_at, med_at):
        assert at["host"] in cluster.names() and at["slurm_node"] == at["host"], at
        assert at["hosts"] == [at["host"]], at
        assert at["gpus"] == "0", f"CUDA_VISIBLE_DEVICES comes from Slurm's GPU: {at}"
    running = {j["nodes"]: j for j in cluster.jobs() if j["state"] == "RUNNING"}
    assert set(running) == {high_at["host"], med_at["host"]}, cluster.describe()
    for at in (high_at, med_at):
        sj = running[at["host"]]
        assert sj["name"].startswith("qm-"), sj
        assert sj["id"] == at["slurm_job"], (sj, at)
        fields = slurm_job_fields(cluster, sj["id"])
        assert fields.get("Requeue") == "0", f"sbatch --no-requeue: {fields}"
        assert fields.get("OverSubscribe") == "NO", f"sbatch --exclusive: {fields}"
        assert fields.get("NumNodes", "").split("-")[0] == "1", fields
        assert fields.get("Comment") not in (None, "", "(null)"), f"a comment naming qm's attempt: {fields}"
    transcript(batch, "Step 1: three jobs to QS1 (high on its own quota, med borrowing, low waiting)",
               ids, jobs)

    # Step 2: a QS2 job reclaims QS2's lent instance from med, whatever its priority.
    ids["qs2_job_1"] = jobs.checkpointing(q, "QS2", "qs2_job_1", priority=1, **run)
    job = wait_preempted(batch, ids["qs1_job_med"])
    newest = job["preemptionSummary"]["recentPreemptedAttempts"][0]
    assert newest["statusReason"].startswith("Preempted: capacity reclaimed by quota share"), newest
    assert "QS2" in newest["statusReason"]
    wait_for(lambda: "3" in events(jobs.progress("qs1_job_med"), "sigterm"),
             what="med's Slurm task to get SIGTERM and checkpoint")
    wait_status(batch, ids["qs2_job_1"], "RUNNING")
    wait_paused(jobs, "qs2_job_1")
    assert batch.describe_service_job(jobId=ids["qs1_job_high"])["status"] == "RUNNING"
    still(batch, ids["qs1_job_low"], "RUNNABLE", seconds=1)
    still(batch, ids["qs1_job_med"], "RUNNABLE", seconds=1)
    transcript(batch, "Step 2: qs2_job_1 (priority 1) reclaims QS2's instance from qs1_job_med",
               ids, jobs)

    # Everything finishes; med runs again from its checkpoint once a node is its to use.
    gate.touch()
    for jid in ids.values():
        wait_status(batch, jid, "SUCCEEDED", timeout=120)
    transcript(batch, "Finally: every job SUCCEEDED", ids, jobs)
    p = jobs.progress("qs1_job_med")
    assert events(p, "start") == ["0", str(PAUSE)], f"med did not resume from its checkpoint: {p}"
    assert events(p, "sigterm") == [str(PAUSE)] and events(p, "done") == [str(TARGET)], p
    med_runs = jobs.hosts("qs1_job_med")
    assert len(med_runs) == 2 and med_runs[0]["attempt"] != med_runs[1]["attempt"], med_runs
    assert med_runs[0]["slurm_job"] != med_runs[1]["slurm_job"], "each attempt is its own Slurm job"
    for name in ("qs1_job_high", "qs1_job_low", "qs2_job_1"):
        p = jobs.progress(name)
        assert events(p, "start") == ["0"] and events(p, "done") == [str(TARGET)], (name, p)
    for name in ids:
        assert not events(jobs.progress(name), "VIOLATION"), name
    job = batch.describe_service_job(jobId=ids["qs1_job_med"])
    assert job["preemptionSummary"]["preemptedAttemptCount"] == 1
    assert len(job.get("attempts", [])) == 1, job.get("attempts")


def test_raising_a_waiting_jobs_priority_preempts_its_shares_slurm_job_which_leaves_before_the_next_starts(
        server, cluster, batch, jobs):
    q = make_queue(batch, "sinshare", [ShareSpec("S", "RESERVE", 1, in_share_preemption="ENABLED")],
                   env_max=1)
    # The victim ignores SIGTERM: it is killed after the grace period, and until Slurm reports
    # its job gone the node is still its own.
    first = jobs.sleeper(q, "S", "first", priority=3, ignore_sigterm=True)
    wait_status(batch, first, "RUNNING")
    jobs.wait_started("first")
    victim_pid = wait_for(lambda: jobs.pid("first"), what="first's pid file")
    second = jobs.sleeper(q, "S", "second", priority=1)
    wait_status(batch, second, "RUNNABLE", reason_prefix="OWN_QUOTA_FULL")

    batch.update_service_job(jobId=second, schedulingPriority=4)
    job = wait_preempted(batch, first)
    summary = job["preemptionSummary"]
    assert summary["recentPreemptedAttempts"][0]["statusReason"] == f"Preempted by higher priority job {second}"
    wait_for(lambda: "ignored" in events(jobs.progress("first"), "sigterm"),
             what="first's Slurm task to receive SIGTERM")

    def second_started():
        started = bool(events(jobs.progress("second"), "start"))
        if started:
            assert not pid_alive(victim_pid), (
                f"second started while the preempted first (pid {victim_pid}) still ran\n"
                + diagnose(server, cluster))
        return started

    wait_for(second_started, DEADLINE, "second to start after first's Slurm job is gone",
             batch=batch, job_ids=[first, second], interval=0.1)
    wait_status(batch, second, "RUNNING")
    assert not pid_alive(victim_pid)
    assert len([j for j in cluster.jobs() if j["state"] == "RUNNING"]) == 1, cluster.describe()
    assert not job.get("attempts"), "a preempted attempt is not a retry attempt"
    transcript(batch, "In-share preemption after UpdateServiceJob", {"first": first, "second": second}, jobs)


def test_a_preempted_checkpointing_job_resumes_from_its_checkpoint_on_a_different_node(
        server, cluster, batch, jobs, tmp_path):
    # F (3 instances, lends what it does not use) fills three nodes; S (1 instance, borrows,
    # in-share preemption) runs the victim on the fourth. The boss takes the victim's node (the
    # only one left), so the victim can only resume on the node a filler gives up.
    q = make_queue(batch, "smove", [
        ShareSpec("F", "LEND", 3),
        ShareSpec("S", "LEND_AND_BORROW", 1, borrow_limit=-1, in_share_preemption="ENABLED"),
    ], env_max=NODES)
    fillers = {f"filler{i}": jobs.sleeper(q, "F", f"filler{i}") for i in (1, 2, 3)}
    for name, jid in fillers.items():
        wait_status(batch, jid, "RUNNING")
    filler_host = {name: jobs.wait_hosts(name)[0]["host"] for name in fillers}
    assert len(set(filler_host.values())) == 3, filler_host

    gate = tmp_path / "gate"
    victim = jobs.checkpointing(q, "S", "victim", priority=1, gate=gate, target=TARGET,
                                pause_at=PAUSE, retry={"attempts": 1})
    wait_status(batch, victim, "RUNNING")
    wait_paused(jobs, "victim")
    first = jobs.wait_hosts("victim")[0]
    assert first["host"] not in filler_host.values(), (first, filler_host)

    boss = jobs.sleeper(q, "S", "boss", priority=5)
    job = wait_preempted(batch, victim)
    assert job["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"] == \
        f"Preempted by higher priority job {boss}"
    wait_for(lambda: str(PAUSE) in events(jobs.progress("victim"), "sigterm"),
             what="the victim to checkpoint on SIGTERM")
    wait_status(batch, boss, "RUNNING")
    boss_at = jobs.wait_hosts("boss")[0]
    assert boss_at["host"] == first["host"], (
        f"the boss should run on the victim's node, the only free one: {boss_at} {first}")
    still(batch, victim, "RUNNABLE", seconds=1)

    # A filler leaves: its node is the only one free, and F lends it to S.
    gone = "filler2"
    batch.terminate_service_job(jobId=fillers[gone], reason="make room on another node")
    wait_status(batch, fillers[gone], ("FAILED", "SUCCEEDED"))
    wait_status(batch, victim, "RUNNING")
    second = jobs.wait_hosts("victim", 2)[1]
    transcript(batch, "The victim resumed on another node",
               {"victim": victim, "boss": boss, **fillers}, jobs)
    assert second["host"] != first["host"], f"resumed on the same node: {first} {second}"
    assert second["host"] == filler_host[gone], (second, filler_host)
    assert second["attempt"] != first["attempt"]
    assert second["checkpoint"] == first["checkpoint"] == str(
        server.shared_dir / "jobs" / victim / "checkpoints"), (first, second)
    wait_for(lambda: len(events(jobs.progress("victim"), "start")) == 2, what="the victim's second start")
    assert events(jobs.progress("victim"), "start") == ["0", str(PAUSE)], (
        f"did not continue from its checkpoint: {jobs.progress('victim')}")

    gate.touch()
    job = wait_status(batch, victim, "SUCCEEDED", timeout=120)
    p = jobs.progress("victim")
    assert events(p, "done") == [str(TARGET)] and not events(p, "VIOLATION"), p
    assert len(job.get("attempts", [])) == 1, job.get("attempts")


def test_a_two_node_job_runs_once_on_each_of_two_distinct_nodes_that_see_each_other(
        server, cluster, batch, jobs):
    q = make_queue(batch, "stwo", [ShareSpec("S", "RESERVE", 2)], env_max=2)
    jid = jobs.submit(q, "S", "pair", "on_host.py", count=2, env={"WAIT_FOR_HOSTS": "1"},
                      retry={"attempts": 1})
    job = wait_status(batch, jid, ("SUCCEEDED", "FAILED"), timeout=90)
    seen = jobs.hosts("pair")
    print(f"\n[e2e] two-node job: {seen}")
    assert job["status"] == "SUCCEEDED", (job.get("statusReason"), seen, server.log_tail())
    assert len(seen) == 2, f"the entrypoint runs once per node: {seen}"
    a, b = seen
    assert a["host"] != b["host"], seen
    assert {a["host"], b["host"]} <= set(cluster.names()), seen
    for e in seen:
        assert sorted(e["hosts"]) == sorted([a["host"], b["host"]]), f"SM_HOSTS lists both: {seen}"
        assert e["slurm_node"] == e["host"], e
        assert e["gpus"] == "0", e
    assert a["hosts"] == b["hosts"], "every host sees the same SM_HOSTS"
    assert a["slurm_job"] == b["slurm_job"], "one Slurm job for the attempt"
    assert a["attempt"] == b["attempt"] == "1"

    logs = log_files(server, jid)
    assert set(logs) >= {"stdout.log", "stderr.log", "stdout-algo-2.log", "stderr-algo-2.log"}, list(logs)
    first_host, second_host = a["hosts"]
    assert f"host {first_host}" in logs["stdout.log"], logs
    assert f"host {second_host}" in logs["stdout-algo-2.log"], logs
    assert f"host {second_host}" in logs["stderr-algo-2.log"], logs
    status, _, body = server.signed("GET", f"/qm/v1/jobs/{jid}/logs?stream=stdout")
    assert status == 200, (status, body)
    assert f"host {first_host}".encode() in body


class StatusLog:
    """Records every (status, statusReason) a job goes through, polling in a thread with its
    own client: short-lived states (RUNNABLE between a lost attempt and the next dispatch)
    are seen even while the test waits for something else."""

    def __init__(self, server, job_id: str, interval: float = 0.05):
        self.client = server.client()
        self.job_id = job_id
        self.interval = interval
        self.seen: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                job = self.client.describe_service_job(jobId=self.job_id)
                entry = (job["status"], job.get("statusReason") or "")
                if not self.seen or self.seen[-1] != entry:
                    self.seen.append(entry)
            except Exception:  # the server may be busy; the next poll will do
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)


def test_a_job_whose_node_is_lost_goes_back_to_runnable_without_using_a_retry_and_finishes_elsewhere(
        server, cluster, batch, jobs, tmp_path):
    q = make_queue(batch, "slost", [ShareSpec("S", "RESERVE", 1)], env_max=1)
    gate = tmp_path / "gate"
    jid = jobs.checkpointing(q, "S", "survivor", gate=gate, target=TARGET, pause_at=PAUSE,
                             retry={"attempts": 1})
    wait_status(batch, jid, "RUNNING")
    wait_paused(jobs, "survivor")
    first = jobs.wait_hosts("survivor")[0]
    k = node_index(first["host"])
    on_node = [j for j in cluster.jobs() if j["nodes"] == first["host"]]
    assert [j["id"] for j in on_node] == [first["slurm_job"]], cluster.describe()

    # Jobs that are not qm's hold every other node: once the node is lost there is nowhere to
    # go, so the job visibly waits RUNNABLE until one of them leaves, and then runs there.
    others = [n for n in cluster.names() if n != first["host"]]
    external = {n: cluster.submit_external(n, name="not-qm") for n in others}
    try:
        wait_for(lambda: {j["nodes"] for j in cluster.jobs() if j["state"] == "RUNNING"} == set(cluster.names()),
                 what=f"the other jobs to hold the other nodes\n{cluster.describe()}")
        lost_at = time.monotonic()
        with StatusLog(server, jid) as log:
            cluster.stop_node(k)
            try:
                # Slurm declares the node DOWN and the job NODE_FAIL ~26 s later.
                job = wait_status(batch, jid, "RUNNABLE", timeout=NODE_LOSS_DEADLINE)
                print(f"\n[e2e] {time.monotonic() - lost_at:.0f}s after losing {first['host']}: {line(job)}")
                still(batch, jid, "RUNNABLE", seconds=1)
                assert cluster.node_states().get(first["host"], "").startswith("down"), cluster.describe()
                elsewhere = others[-1]
                cluster.cancel(external.pop(elsewhere))
                second = jobs.wait_hosts("survivor", 2)[1]
                wait_status(batch, jid, "RUNNING")
                print(f"[e2e] {time.monotonic() - lost_at:.0f}s: running again on {second['host']}")
                assert second["host"] == elsewhere, (first, second, elsewhere)
            finally:
                cluster.start_node(k)
    finally:
        cluster.cancel(*external.values())
    print(f"[e2e] statuses seen: {log.seen}")
    assert not any(st in ("FAILED", "SUCCEEDED") for st, _ in log.seen), log.seen
    assert second["attempt"] != first["attempt"], "a new attempt"
    wait_for(lambda: len(events(jobs.progress("survivor"), "start")) == 2, what="the second start")
    assert events(jobs.progress("survivor"), "start") == ["0", str(PAUSE)], jobs.progress("survivor")

    gate.touch()
    job = wait_status(batch, jid, ("SUCCEEDED", "FAILED"), timeout=120)
    transcript(batch, "After losing a node", {"survivor": jid}, jobs)
    # retryStrategy allows one attempt: SUCCEEDED means the lost attempt used no retry.
    assert job["status"] == "SUCCEEDED", line(job)
    assert events(jobs.progress("survivor"), "done") == [str(TARGET)]
    # The node failure is on record: in the reason the job waited with, or in its lost attempt.
    reasons = [r for st, r in log.seen if st == "RUNNABLE"]
    reasons += [a.get("statusReason") or "" for a in job.get("attempts", [])[:-1]]
    assert any("NODE_FAIL" in r or first["host"] in r for r in reasons), (
        f"no reason names the node failure of {first['host']}: {reasons}; attempts: {job.get('attempts')}")
    wait_for(lambda: cluster.node_states().get(first["host"]) == "idle",
             what=f"{first['host']} to be back\n{cluster.describe()}")


def test_slurm_jobs_survive_a_kill_9_of_qm_one_adopted_running_and_one_that_finished_meanwhile(
        server, cluster, batch, jobs, tmp_path):
    q = make_queue(batch, "sadopt", [ShareSpec("S", "RESERVE", 2)], env_max=2)
    gate, gate2 = tmp_path / "gate", tmp_path / "gate2"
    run = dict(target=TARGET, pause_at=PAUSE, retry={"attempts": 1})
    ids = {"adopted": jobs.checkpointing(q, "S", "adopted", gate=gate, **run),
           "finisher": jobs.checkpointing(q, "S", "finisher", gate=gate2, **run)}
    for name, jid in ids.items():
        wait_status(batch, jid, "RUNNING")
        wait_paused(jobs, name)
    at = {name: jobs.wait_hosts(name)[0] for name in ids}
    before = {name: batch.describe_service_job(jobId=jid) for name, jid in ids.items()}

    server.kill9()
    # While qm is down, one of the Slurm jobs finishes.
    gate2.touch()
    wait_for(lambda: events(jobs.progress("finisher"), "done"), what="finisher to finish while qm is down")
    wait_for(lambda: at["finisher"]["slurm_job"] not in {j["id"] for j in cluster.jobs()},
             what=f"Slurm to see finisher's job end\n{cluster.describe()}")
    server.restart()
    batch = server.client()
    jobs.batch = batch

    jid = ids["adopted"]
    job = batch.describe_service_job(jobId=jid)
    assert job["status"] in ("RUNNING", "STARTING", "SCHEDULED"), line(job)
    wait_status(batch, jid, "RUNNING")
    # Finished, or (wrongly) put back or run again: whichever shows first.
    done = wait_for(lambda: (lambda j: j if j["status"] in ("SUCCEEDED", "FAILED", "RUNNABLE")
                             or len(events(jobs.progress("finisher"), "start")) > 1 else None)(
        batch.describe_service_job(jobId=ids["finisher"])), what="finisher's outcome to be recorded")
    still(batch, jid, "RUNNING", seconds=3)
    job = batch.describe_service_job(jobId=jid)
    assert job["latestAttempt"]["serviceResourceId"] == before["adopted"]["latestAttempt"]["serviceResourceId"], (
        before["adopted"]["latestAttempt"], job["latestAttempt"])
    assert [j["id"] for j in cluster.jobs() if j["state"] == "RUNNING"] == [at["adopted"]["slurm_job"]], \
        cluster.describe()
    assert pid_alive(at["adopted"]["pid"]), "the Slurm task kept running"
    transcript(batch, "After kill -9 and restart of qm", ids, jobs)

    # The job that finished while qm was down is recorded as such, and not run again.
    assert done["status"] == "SUCCEEDED", (line(done), server.log_tail())
    assert len(done.get("attempts", [])) == 1, done.get("attempts")
    assert events(jobs.progress("finisher"), "start") == ["0"], jobs.progress("finisher")

    gate.touch()
    job = wait_status(batch, jid, "SUCCEEDED", timeout=120)
    p = jobs.progress("adopted")
    assert events(p, "start") == ["0"], f"adopted, not run again: {p}"
    assert events(p, "done") == [str(TARGET)] and len(jobs.hosts("adopted")) == 1
    assert len(job.get("attempts", [])) == 1, job.get("attempts")
    assert not (job.get("preemptionSummary") or {}).get("preemptedAttemptCount")
    assert len(jobs.hosts("finisher")) == 1


def test_a_job_whose_slurm_job_was_forgotten_while_qm_was_down_goes_back_to_runnable_and_resumes(
        server, cluster, batch, jobs, tmp_path):
    q = make_queue(batch, "sforgot", [ShareSpec("S", "RESERVE", 1)], env_max=1)
    gate = tmp_path / "gate"
    jid = jobs.checkpointing(q, "S", "forgotten", gate=gate, target=TARGET, pause_at=PAUSE,
                             retry={"attempts": 1})
    wait_status(batch, jid, "RUNNING")
    wait_paused(jobs, "forgotten")
    first = jobs.wait_hosts("forgotten")[0]

    server.kill9()
    # A fresh slurmctld (the cluster is restarted with its state cleared) knows no job of qm's.
    cluster.stop()
    try:
        wait_for(lambda: not pid_alive(first["pid"]), 10,
                 f"the job's process {first['pid']} to be gone with the cluster")
    finally:
        # Started again whatever happened: the module's other tests need it.
        cluster.start()
    # Jobs that are not qm's hold every node, so the job visibly waits once it is put back.
    external = {n: cluster.submit_external(n, name="not-qm") for n in cluster.names()}
    try:
        wait_for(lambda: {j["nodes"] for j in cluster.jobs() if j["state"] == "RUNNING"} == set(cluster.names()),
                 what=f"the other jobs to hold every node\n{cluster.describe()}")
        server.restart()
        batch = server.client()
        jobs.batch = batch
        job = wait_status(batch, jid, "RUNNABLE")
        still(batch, jid, "RUNNABLE", seconds=1)
        print(f"\n[e2e] after the restart: {line(job)}; attempts: {job.get('attempts')}")
        cluster.cancel(external.pop(cluster.names()[0]))
        wait_status(batch, jid, "RUNNING")
        second = jobs.wait_hosts("forgotten", 2)[1]
        assert second["host"] == cluster.names()[0] and second["attempt"] != first["attempt"], (first, second)
    finally:
        cluster.cancel(*external.values())
    wait_for(lambda: len(events(jobs.progress("forgotten"), "start")) == 2, what="the second start")
    assert events(jobs.progress("forgotten"), "start") == ["0", str(PAUSE)], jobs.progress("forgotten")
    gate.touch()
    job = wait_status(batch, jid, ("SUCCEEDED", "FAILED"), timeout=120)
    # retryStrategy allows one attempt: SUCCEEDED means the forgotten attempt used no retry.
    assert job["status"] == "SUCCEEDED", (line(job), job.get("attempts"))
    assert events(jobs.progress("forgotten"), "done") == [str(TARGET)]


def test_a_failing_slurm_job_is_failed_with_its_exit_code_as_retry_rules_expect_it(
        server, cluster, batch, jobs):
    q = make_queue(batch, "sfail", [ShareSpec("S", "RESERVE", 2)], env_max=2)
    three = jobs.submit(q, "S", "three", "exit_code.py", env={"EXIT_CODES": "3"}, retry={"attempts": 1})
    # The same reason as the local executor's, so a retry rule written for it matches.
    flaky = jobs.submit(q, "S", "flaky", "exit_code.py", env={"EXIT_CODES": "3,0"}, retry={
        "attempts": 2, "evaluateOnExit": [{"onStatusReason": EXITED + "3", "action": "RETRY"},
                                          {"onStatusReason": "*", "action": "EXIT"}]})
    failed = wait_status(batch, three, ("FAILED", "SUCCEEDED"), timeout=90)
    retried = wait_status(batch, flaky, ("FAILED", "SUCCEEDED"), timeout=90)
    print(f"\n[e2e] {line(failed)}\n[e2e] {line(retried)}: {retried.get('attempts')}")
    problems = []
    if (failed["status"], failed.get("statusReason")) != ("FAILED", EXITED + "3"):
        problems.append(f"exit 3 should fail with {EXITED + '3'!r}: {line(failed)}")
    if [a["statusReason"] for a in failed.get("attempts", [])] != [EXITED + "3"]:
        problems.append(f"its one attempt should say so: {failed.get('attempts')}")
    if [a["statusReason"] for a in retried.get("attempts", [])] != [EXITED + "3", "Training job completed"] \
            or retried["status"] != "SUCCEEDED":
        problems.append(f"the retry rule should have matched, then the second run succeeded: "
                        f"{line(retried)}: {retried.get('attempts')}")
    assert not problems, "\n".join(problems)
    assert jobs.hosts("three")[0]["host"] in cluster.names()
    runs = jobs.hosts("flaky")
    assert len(runs) == 2 and runs[0]["slurm_job"] != runs[1]["slurm_job"], runs


def test_a_job_waits_for_capacity_while_the_other_nodes_run_jobs_that_are_not_qms(
        server, cluster, batch, jobs):
    q = make_queue(batch, "scap", [ShareSpec("S", "RESERVE", NODES)], env_max=NODES)
    *held, free = cluster.names()
    external = {n: cluster.submit_external(n, name="not-qm") for n in held}
    try:
        wait_for(lambda: {j["nodes"] for j in cluster.jobs() if j["state"] == "RUNNING"} == set(held),
                 what=f"the other jobs to hold {held}\n{cluster.describe()}")
        # The first job takes the one free node; Slurm reports it running in the same poll that
        # shows qm the other jobs, so from then on qm knows no node is left.
        runner = jobs.sleeper(q, "S", "runner")
        wait_status(batch, runner, "RUNNING")
        assert jobs.wait_hosts("runner")[0]["host"] == free
        waiter = jobs.sleeper(q, "S", "waiter")
        job = wait_status(batch, waiter, "RUNNABLE", reason_prefix="CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
        still(batch, waiter, "RUNNABLE", seconds=2)
        print(f"\n[e2e] {line(job)}")
        assert not [j for j in cluster.jobs() if j["name"].startswith("qm-") and j["state"] == "PENDING"], (
            f"nothing was submitted to Slurm for the waiting job\n{cluster.describe()}")
        # One node is given back: the job runs there.
        cluster.cancel(external.pop(held[1]))
        wait_status(batch, waiter, "RUNNING")
        assert jobs.wait_hosts("waiter")[0]["host"] == held[1]
    finally:
        cluster.cancel(*external.values())


def test_a_slurm_job_gets_its_channel_at_opt_ml_and_its_model_is_uploaded(
        server, cluster, batch, jobs):
    # The server downloads before sbatch and uploads once the Slurm job is gone
    # (docs/sagemaker.md); the node sees the channel through the shared directory.
    # The nodes (this host) have /opt/ml, so each task gets its job directory there.
    if os.geteuid() == 0:
        os.makedirs("/opt/ml", exist_ok=True)
    q = make_queue(batch, "sstore", [ShareSpec("S", "RESERVE", 1)], env_max=1)
    train = STORAGE_ROOT / "channels" / "slurm-train"
    train.mkdir(parents=True, exist_ok=True)
    (train / "rows.csv").write_text("1,2\n3,4\n")
    opt_ml = {"USE_OPT_ML": "1"} if os.path.isdir("/opt/ml") else {}
    jid = jobs.submit(q, "S", "slurm_model", "channel_to_model.py", hps={"epochs": "2"}, env=opt_ml,
                      channels={"train": storage_uri("channels", "slurm-train")})
    done = wait_status(batch, jid, ("SUCCEEDED", "FAILED"), timeout=90)
    assert done["status"] == "SUCCEEDED", line(done)
    with tarfile.open(STORAGE_ROOT / "output" / "slurm-model" / "output" / "model.tar.gz") as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    assert files["rows.csv"] == b"1,2\n3,4\n", files
    assert json.loads(files["hps.json"]) == {"epochs": "2"}, files
    assert jobs.hosts("slurm_model")[0]["host"] in cluster.names()


def test_a_slurm_job_that_reports_its_steps_is_classified_resumed_after_a_reclaim(server, batch, jobs):
    # The executor reads QM_PROGRESS_FILE in the shared directory, as it reads checkpoints.
    _, record = preempt_by_owner_and_run_again(batch, server, jobs, "sresume", resume=True)
    assert record["outcome"] == "resumed", record
    assert (record["checkpointStep"], record["previousLastStep"], record["firstStep"]) == (10, 15, 10)
    assert record["recomputedSteps"] == 5


def test_a_reload_adds_an_instance_type_to_the_slurm_executor_and_its_waiting_job_runs(
        server, batch, jobs):
    """Issue 38, item 8: reload applies to the Slurm executor's options too. A type the
    executor does not offer is refused at submit; a reload that maps the partition to it makes
    the next poll report it, and a job of it runs there; a reload back restores the nodes."""
    other = "ml.g6.xlarge"
    q = make_queue(batch, "sreload", [ShareSpec("S", "RESERVE", 1, unit=other)], env_max=1, unit=other)
    with pytest.raises(batch.exceptions.ClientException, match="reload the config"):
        jobs.sleeper(q, "S", "refused", unit=other)
    original = server.config_path.read_text()
    # The partition's nodes provide the other type now (a node provides one type).
    server.config_path.write_text(original.replace(f'instance_type = "{UNIT}"', f'instance_type = "{other}"'))
    try:
        out = qm(server, "reload").stdout
        assert "applied executor.slurm" in out, out
        waiter = wait_for(lambda: submitted(jobs, q, other), what=f"the poll to offer {other}")
        wait_status(batch, waiter, "RUNNING")
        batch.terminate_service_job(jobId=waiter, reason="done")
        wait_status(batch, waiter, "FAILED")
    finally:
        server.config_path.write_text(original)
        qm(server, "reload")


def submitted(jobs, q, unit):
    try:
        return jobs.sleeper(q, "S", "waiter", unit=unit)
    except jobs.batch.exceptions.ClientException:
        return None
