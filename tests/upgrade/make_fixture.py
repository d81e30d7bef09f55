"""Makes an upgrade fixture: a data dir written by the `qm` binary at QM_BIN (a release), and
what that server answered about every resource and job just before it was killed.

    QM_BIN=/path/to/release/qm .venv-e2e/bin/python tests/upgrade/make_fixture.py OUT_DIR \
        [--snapshot-every N] [--queued]

OUT_DIR receives `qm.sqlite3` (the data dir's store, its WAL folded in) and `answers.json`
(each read as `[operation, request, response]`, the bodies exactly as the server sent them).
crates/server/tests/upgrade.rs recovers the store with the current code and asks the same
questions; every answer must come back the same, so no job, share or attempt is lost or
changed by an upgrade.

The server is killed with SIGKILL while attempts run (as in a crash before an upgrade), so the
fixture holds live attempts, a reclaimed borrower, an in-share preemption, a success, a
failure, a termination, a waiting job, tags and an audit entry.

`--queued` adds six short jobs q1..q6 above every research job but r4: q1 preempts r3 in the
share and succeeds at once, q2 runs when the server is killed, q3..q6 wait. q2..q6 wait for
the file `gate` their payload names (its path is in `answers.json` as `gate`); a test creates
it to let them end after the upgrade.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from qm_e2e import ACCOUNT, REGION, Server, config_toml, kill_job_processes, qm_bin  # noqa: E402

UNIT = "ml.g5.xlarge"


class PreAuthServer(Server):
    """A release from before authentication: no credentials to wait for, requests unsigned."""

    @property
    def auth(self) -> bool:
        return False


def request(server: Server, method: str, path: str, body: dict | None = None) -> dict:
    """A request as the admin: signed where the release authenticates, bare where it predates
    authentication."""
    if server.auth:
        status, _, answer = server.signed(method, path, body)
        if status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {answer[:500]!r}")
        return json.loads(answer or b"{}")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data,
                                 headers={"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"{}")


def call(server: Server, operation: str, body: dict) -> dict:
    return request(server, "POST", f"/v1/{operation}", body)


def get(server: Server, path: str) -> dict:
    return request(server, "GET", path)


def job(name: str, share: str, command: list[str], priority: int = 0) -> dict:
    payload = {
        "TrainingJobName": name,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/fixture",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": command},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://fixture/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
    }
    return {"jobName": name, "jobQueue": "fx-queue", "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": share, "schedulingPriority": priority,
            "serviceRequestPayload": json.dumps(payload), "tags": {"fixture": name}}


def wait(server: Server, job_id: str, statuses: set[str], preempted: int = 0) -> dict:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        d = call(server, "describeservicejob", {"jobId": job_id})
        count = d.get("preemptionSummary", {}).get("preemptedAttemptCount", 0)
        if d["status"] in statuses and count >= preempted:
            return d
        time.sleep(0.1)
    raise TimeoutError(f"job {job_id} never reached {statuses}: {d}")


def setup(server: Server) -> dict[str, str]:
    policy = call(server, "createschedulingpolicy", {
        "name": "fx-policy", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
        "tags": {"team": "platform"}})["arn"]
    call(server, "createserviceenvironment", {
        "serviceEnvironmentName": "fx-env", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
        "capacityLimits": [{"maxCapacity": 3, "capacityUnit": UNIT}]})
    call(server, "createjobqueue", {
        "jobQueueName": "fx-queue", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
        "schedulingPolicyArn": policy,
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "fx-env"}]})
    call(server, "createquotashare", {
        "quotaShareName": "research", "jobQueue": "fx-queue",
        "capacityLimits": [{"maxCapacity": 2, "capacityUnit": UNIT}],
        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 100},
        "preemptionConfiguration": {"inSharePreemption": "ENABLED"}, "tags": {"team": "research"}})
    call(server, "createquotashare", {
        "quotaShareName": "prod", "jobQueue": "fx-queue",
        "capacityLimits": [{"maxCapacity": 1, "capacityUnit": UNIT}],
        "resourceSharingConfiguration": {"strategy": "LEND"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"}})

    ids = {}

    def submit(name, share, command, priority=0):
        ids[name] = call(server, "submitservicejob", job(name, share, command, priority))["jobId"]

    submit("done", "research", ["true"])
    wait(server, ids["done"], {"SUCCEEDED"})
    submit("fails", "research", ["sh", "-c", "exit 3"])
    wait(server, ids["fails"], {"FAILED"})
    submit("terminated", "research", ["sleep", "3600"])
    wait(server, ids["terminated"], {"RUNNING"})
    call(server, "terminateservicejob", {"jobId": ids["terminated"], "reason": "fixture: not needed"})
    wait(server, ids["terminated"], {"FAILED"})
    # Research fills the environment, borrowing prod's idle instance.
    for name, priority in (("r1", 1), ("r2", 2), ("r3", 3)):
        submit(name, "research", ["sleep", "3600"], priority)
        wait(server, ids[name], {"RUNNING"})
    # Prod's work returns: its instance is reclaimed from the lowest-priority borrower.
    submit("p1", "prod", ["sleep", "3600"])
    wait(server, ids["p1"], {"RUNNING"})
    wait(server, ids["r1"], {"RUNNABLE"}, preempted=1)
    # A waiting research job raised above a running one preempts it inside the share.
    submit("r4", "research", ["sleep", "3600"], 0)
    call(server, "updateservicejob", {"jobId": ids["r4"], "schedulingPriority": 9})
    wait(server, ids["r4"], {"RUNNING"})
    wait(server, ids["r2"], {"RUNNABLE"}, preempted=1)
    # And one that waits behind them all.
    submit("waits", "research", ["true"], 0)
    req = urllib.request.Request(
        f"{server.url}/qm/v1/audit",
        data=json.dumps({"actor": "fixture@host", "action": "apply", "summary": "fixture"}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(req, timeout=30).read()
    return ids


def queue_short_jobs(server: Server, ids: dict[str, str], gate: Path) -> None:
    """q1..q6 (see the module docs): q1 preempts r3 and succeeds, q2 runs, q3..q6 wait."""
    waits = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.2; done"]
    for n in range(1, 7):
        name = f"q{n}"
        ids[name] = call(server, "submitservicejob",
                         job(name, "research", ["true"] if n == 1 else waits, 8))["jobId"]
    wait(server, ids["r3"], {"RUNNABLE"}, preempted=1)
    wait(server, ids["q1"], {"SUCCEEDED"})
    wait(server, ids["q2"], {"RUNNING"})


def answers(server: Server, ids: dict[str, str]) -> list:
    queue_arn = call(server, "describejobqueues", {"jobQueues": ["fx-queue"]})["jobQueues"][0]["jobQueueArn"]
    reads = [("describeserviceenvironments", {}), ("describejobqueues", {}),
             ("listschedulingpolicies", {}), ("describeschedulingpolicies", {
                 "arns": [p["arn"] for p in call(server, "listschedulingpolicies", {})["schedulingPolicies"]]}),
             ("listquotashares", {"jobQueue": "fx-queue"})]
    for share in ("research", "prod"):
        reads.append(("describequotashare", {"quotaShareArn": f"{queue_arn}/quota-share/{share}"}))
    for status in ("RUNNABLE", "RUNNING", "SUCCEEDED", "FAILED"):
        reads.append(("listservicejobs", {"jobQueue": "fx-queue", "jobStatus": status}))
    for job_id in ids.values():
        reads.append(("describeservicejob", {"jobId": job_id}))
    out = [[op, body, call(server, op, body)] for op, body in reads]
    out.append(["usage", {}, get(server, "/qm/v1/usage")])
    out.append(["audit", {}, get(server, "/qm/v1/audit")])
    return out


def settled(server: Server, ids: dict[str, str]) -> list:
    """The answers, once two reads a second apart agree (no report still on its way)."""
    last = None
    for _ in range(30):
        now = answers(server, ids)
        if now == last:
            return now
        last = now
        time.sleep(1)
    raise TimeoutError("the server's answers kept changing")


def main() -> None:
    out = Path(sys.argv[1])
    # `--snapshot-every N`: a release with snapshots writes them every N commands, so that the
    # fixture holds snapshots and batches after them (what a later release must read).
    extra = ""
    if len(sys.argv) > 3 and sys.argv[2] == "--snapshot-every":
        extra = f"[state]\nsnapshot_every_commands = {int(sys.argv[3])}\n"
    queued = "--queued" in sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run([str(qm_bin()), "--version"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="qm-fixture-"))
    # A release before authentication has no --no-auth and writes no credentials.
    help_text = subprocess.run([str(qm_bin()), "serve", "--help"], capture_output=True, text=True).stdout
    config = config_toml(count=3)
    kind = Server
    if "--no-auth" not in help_text:
        # Nor does it know the sections added since ([storage]).
        kind = PreAuthServer
        config = re.sub(r"\[storage\]\n(?:[^\[].*\n)*", "", config)
    server = kind(work, config + extra)
    gate = Path(tempfile.gettempdir()) / f"qm-fixture-gate-{server.token}"
    try:
        server.start()
        ids = setup(server)
        if queued:
            queue_short_jobs(server, ids, gate)
        recorded = settled(server, ids)
        server.kill9()
    finally:
        server.close()
        kill_job_processes(server.token)
    db = work / "data" / "qm.sqlite3"
    # Fold the WAL into the one file, as SQLite would on its next open.
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    shutil.copy(db, out / "qm.sqlite3")
    (out / "answers.json").write_text(json.dumps(
        {"written_by": commit, "region": REGION, "account_id": ACCOUNT, "jobs": ids,
         "answers": recorded} | ({"gate": str(gate)} if queued else {}), indent=1, sort_keys=True) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"fixture in {out}: {len(recorded)} answers, jobs {sorted(ids)}")


if __name__ == "__main__":
    main()
