"""Makes an upgrade fixture: a data dir written by the `qm` binary at QM_BIN (a release), and
what that server answered about every resource and job just before it was killed.

    QM_BIN=/path/to/release/qm .venv-e2e/bin/python tests/upgrade/make_fixture.py OUT_DIR \
        [--snapshot-every N] [--queued] [--full]

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

`--full` (a release with authentication, groups of shares, classes, drills and retention:
0805b08 and later; it implies `--queued`) adds a second queue, `fs-queue`, on what else such
a release has (see `full`): principals (`alice`, `bob`, `carol`, the admin `ops`) whose
submits, drill and termination are signed with their own keys, a share's `qm:submitters`,
`qm:leads` and `qm:max-priority`, the queue's job classes (a non-interruptible job), a group
of shares with a limit under a `FAIR_SHARE` policy, an owner's reclaim, a drill, terminations,
and finished jobs moved to the archive by a one-minute `[retention]` before the others finish.
`answers.json` then also holds the principals with their keys (`principals`), what each one's
`whoami` answered, the requests they were refused (`refused`), the retired jobs (`retired`)
and, as answers with a fourth member, reads signed by the principals.
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
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from qm_e2e import (ACCOUNT, REGION, Keys, Server, config_toml, kill_job_processes,  # noqa: E402
                    qm_bin)

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


def job(name: str, share: str, command: list[str], priority: int = 0, queue: str = "fx-queue",
        tags: dict | None = None) -> dict:
    payload = {
        "TrainingJobName": name,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/fixture",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": command},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://fixture/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
    }
    return {"jobName": name, "jobQueue": queue, "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": share, "schedulingPriority": priority,
            "serviceRequestPayload": json.dumps(payload), "tags": {"fixture": name} | (tags or {})}


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
    request(server, "POST", "/qm/v1/audit",
            {"actor": "fixture@host", "action": "apply", "summary": "fixture"})
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


# -- --full: what an auth-capable release (0805b08 and later) has -----------------------------

SLEEP = ["sleep", "3600"]
# The principals of `--full`: (name, groups, admin).
PRINCIPALS = (("alice", ["vision"], False), ("bob", ["nlp"], False), ("carol", ["leads"], False),
              ("ops", ["platform"], True))
# The job classes fs-queue defines, and the permission tags of its shares.
CLASSES = {"qm:class.batch": "interruptible",
           "qm:class.critical": "non-interruptible,max-priority=50"}
VISION_PERMISSIONS = {"qm:submitters": "alice,group:vision", "qm:leads": "carol",
                      "qm:max-priority": "5"}
NLP_PERMISSIONS = {"qm:submitters": "group:nlp"}
GROUPS = {"groups": [{"name": "labs", "limits": {UNIT: 3}, "weight": 2}]}
# How long a finished job stays before it moves to the archive (`[retention]`): the jobs that
# finish before the last phase are retired, those of the last phase are still there at the kill.
RETENTION_SECONDS = 60


def as_principal(server: Server, name: str, method: str, path: str, body: dict | None = None
                 ) -> tuple[int, dict]:
    """A request signed with the keys of principal `name`: (HTTP status, answer)."""
    status, _, answer = server.signed(method, path, body, principal=name)
    return status, json.loads(answer or b"{}")


def signed_ok(server: Server, name: str, method: str, path: str, body: dict | None = None) -> dict:
    status, answer = as_principal(server, name, method, path, body)
    if status != 200:
        raise RuntimeError(f"{name}: {method} {path}: HTTP {status}: {answer}")
    return answer


def tag(server: Server, arn: str, tags: dict) -> None:
    request(server, "POST", f"/v1/tags/{urllib.parse.quote(arn, safe='')}", {"tags": tags})


def gone(server: Server, job_id: str) -> bool:
    """Whether the job left the server (retired to the archive)."""
    status, _, answer = server.signed("POST", "/v1/describeservicejob", {"jobId": job_id})
    if status == 200:
        return False
    if status == 400 and b"ClientException" in answer:
        return True
    raise RuntimeError(f"describe {job_id}: HTTP {status}: {answer[:500]!r}")


def full(server: Server, ids: dict[str, str], gate: Path) -> dict:
    """fs-queue (see the module docs). Jobs that run at the kill sleep or wait for `gate`.
    Returns what answers.json keeps beside the answers."""
    extra: dict = {"principals": {}, "refused": [], "retired": {}}
    for name, groups, admin in PRINCIPALS:
        out = request(server, "POST", "/qm/v1/principals",
                      {"name": name, "groups": groups, "admin": admin})
        server.principals[name] = Keys(name, out["accessKeyId"], out["secretAccessKey"])
        extra["principals"][name] = {"groups": out["groups"], "admin": admin,
                                     "accessKeyId": out["accessKeyId"],
                                     "secretAccessKey": out["secretAccessKey"]}

    # A queue under FAIR_SHARE with two job classes; owner lends, vision (weight 3) and nlp
    # borrow, both in the group labs, which may hold 3 of the 4 instances.
    policy = call(server, "createschedulingpolicy", {
        "name": "fs-policy", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
        "tags": {"qm:idle-assignment": "FAIR_SHARE"}})["arn"]
    call(server, "createserviceenvironment", {
        "serviceEnvironmentName": "fs-env", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
        "capacityLimits": [{"maxCapacity": 4, "capacityUnit": UNIT}]})
    queue_arn = call(server, "createjobqueue", {
        "jobQueueName": "fs-queue", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 2,
        "schedulingPolicyArn": policy, "tags": CLASSES,
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "fs-env"}]})["jobQueueArn"]
    for share, strategy, limit, tags, in_share in (
            ("owner", {"strategy": "LEND"}, 2, {"team": "owner"}, "DISABLED"),
            ("vision", {"strategy": "LEND_AND_BORROW", "borrowLimit": -1}, 1,
             {"qm:weight": "3", "qm:group": "labs"}, "ENABLED"),
            ("nlp", {"strategy": "LEND_AND_BORROW", "borrowLimit": -1}, 1,
             {"qm:group": "labs", "qm:default-class": "batch", "qm:classes": "batch,critical"},
             "DISABLED")):
        call(server, "createquotashare", {
            "quotaShareName": share, "jobQueue": "fs-queue",
            "capacityLimits": [{"maxCapacity": limit, "capacityUnit": UNIT}],
            "resourceSharingConfiguration": strategy,
            "preemptionConfiguration": {"inSharePreemption": in_share}, "tags": tags})
    request(server, "PUT", "/qm/v1/queues/fs-queue/groups", GROUPS)
    tag(server, f"{queue_arn}/quota-share/vision", VISION_PERMISSIONS)
    tag(server, f"{queue_arn}/quota-share/nlp", NLP_PERMISSIONS)

    def submit(who, name, share, command, priority=0, tags=None):
        body = job(name, share, command, priority, queue="fs-queue", tags=tags)
        if who is None:
            ids[name] = call(server, "submitservicejob", body)["jobId"]
        else:
            ids[name] = signed_ok(server, who, "POST", "/v1/submitservicejob", body)["jobId"]

    def refuse(who, method, path, body, status):
        got, answer = as_principal(server, who, method, path, body)
        if got != status:
            raise RuntimeError(f"{who}: {method} {path} answered {got}, not {status}: {answer}")
        extra["refused"].append({"principal": who, "method": method, "path": path,
                                 "body": body, "status": got, "answer": answer})

    # bob's non-interruptible job runs on nlp's own instance, alice's on vision's; bob's
    # interruptible one borrows owner's idle instance (the group now holds its limit, 3).
    submit("bob", "n-crit", "nlp", SLEEP, 20, {"qm:class": "critical"})
    wait(server, ids["n-crit"], {"RUNNING"})
    submit("alice", "a1", "vision", SLEEP, 3)
    wait(server, ids["a1"], {"RUNNING"})
    submit("bob", "n-batch", "nlp", SLEEP)
    wait(server, ids["n-batch"], {"RUNNING"})
    submit(None, "o1", "owner", SLEEP)
    wait(server, ids["o1"], {"RUNNING"})
    # What the permissions refuse: bob is no submitter of vision, alice may not go above
    # vision's max priority nor drill (leads and admins only), a class caps the priority.
    refuse("bob", "POST", "/v1/submitservicejob",
           job("bob-denied", "vision", SLEEP, queue="fs-queue"), 403)
    refuse("alice", "POST", "/v1/submitservicejob",
           job("alice-too-high", "vision", SLEEP, 7, queue="fs-queue"), 403)
    refuse("alice", "POST", f"/qm/v1/jobs/{ids['a1']}/preempt", {"reason": "not hers to drill"},
           403)
    refuse("bob", "POST", "/v1/submitservicejob",
           job("bob-over-class", "nlp", SLEEP, 60, queue="fs-queue", tags={"qm:class": "critical"}),
           400)
    # vision's lead drills alice's job: it stops, waits and runs again.
    signed_ok(server, "carol", "POST", f"/qm/v1/jobs/{ids['a1']}/preempt",
              {"reason": "fixture drill"})
    wait(server, ids["a1"], {"RUNNING"}, preempted=1)
    # alice terminates her own waiting job (below a1, so that it waits).
    submit("alice", "a-term", "vision", SLEEP, 2)
    wait(server, ids["a-term"], {"RUNNABLE"})
    signed_ok(server, "alice", "POST", "/v1/terminateservicejob",
              {"jobId": ids["a-term"], "reason": "fixture: alice changed her mind"})
    wait(server, ids["a-term"], {"FAILED"})
    # owner's work returns: nlp's borrower is reclaimed and waits, then a vision job of the
    # same priority. The owner's job is terminated while it runs, and FAIR_SHARE hands the
    # freed instance to vision (weight 3), where first come, first served would give it to nlp.
    submit(None, "o-term", "owner", SLEEP)
    wait(server, ids["o-term"], {"RUNNING"})
    wait(server, ids["n-batch"], {"RUNNABLE"}, preempted=1)
    submit(None, "v-wait", "vision", SLEEP)
    wait(server, ids["v-wait"], {"RUNNABLE"})
    call(server, "terminateservicejob", {"jobId": ids["o-term"], "reason": "fixture: owner done"})
    wait(server, ids["o-term"], {"FAILED"})
    wait(server, ids["v-wait"], {"RUNNING"})

    # Every job finished so far moves to the archive.
    finished = [n for n, i in ids.items() if gone(server, i) or call(
        server, "describeservicejob", {"jobId": i})["status"] in ("SUCCEEDED", "FAILED")]
    end = time.monotonic() + RETENTION_SECONDS * 3
    while not all(gone(server, ids[n]) for n in finished):
        if time.monotonic() > end:
            raise TimeoutError(f"finished jobs never retired: {finished}")
        time.sleep(1)
    for n in finished:
        extra["retired"][n] = ids.pop(n)

    # The last phase: its finished jobs are still there at the kill.
    call(server, "terminateservicejob", {"jobId": ids["o1"], "reason": "fixture: owner done"})
    wait(server, ids["o1"], {"FAILED"})
    submit(None, "o-ok", "owner", ["true"])
    wait(server, ids["o-ok"], {"SUCCEEDED"})
    submit(None, "o-fail", "owner", ["sh", "-c", "exit 7"])
    wait(server, ids["o-fail"], {"FAILED"})
    submit("alice", "a-late", "vision", SLEEP)  # v-wait's priority: no in-share preemption
    wait(server, ids["a-late"], {"RUNNABLE"})
    signed_ok(server, "alice", "POST", "/v1/terminateservicejob",
              {"jobId": ids["a-late"], "reason": "fixture: too late"})
    wait(server, ids["a-late"], {"FAILED"})
    # Short jobs at the kill: owner's runs, nlp's wait behind the group's limit.
    waits = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.2; done"]
    submit(None, "o-gate", "owner", waits)
    wait(server, ids["o-gate"], {"RUNNING"})
    for n in (1, 2):
        submit("bob", f"g{n}", "nlp", waits, 1)
    return extra


def answers(server: Server, ids: dict[str, str], full_run: bool = False) -> list:
    queue_arn = call(server, "describejobqueues", {"jobQueues": ["fx-queue"]})["jobQueues"][0]["jobQueueArn"]
    reads = [("describeserviceenvironments", {}), ("describejobqueues", {}),
             ("listschedulingpolicies", {}), ("describeschedulingpolicies", {
                 "arns": [p["arn"] for p in call(server, "listschedulingpolicies", {})["schedulingPolicies"]]}),
             ("listquotashares", {"jobQueue": "fx-queue"})]
    for share in ("research", "prod"):
        reads.append(("describequotashare", {"quotaShareArn": f"{queue_arn}/quota-share/{share}"}))
    for status in ("RUNNABLE", "RUNNING", "SUCCEEDED", "FAILED"):
        reads.append(("listservicejobs", {"jobQueue": "fx-queue", "jobStatus": status}))
    signed_reads = []
    if full_run:
        fs = call(server, "describejobqueues", {"jobQueues": ["fs-queue"]})["jobQueues"][0]
        shares = [f"{fs['jobQueueArn']}/quota-share/{s}" for s in ("owner", "vision", "nlp")]
        reads.append(("listquotashares", {"jobQueue": "fs-queue"}))
        reads += [("describequotashare", {"quotaShareArn": arn}) for arn in shares]
        for status in ("RUNNABLE", "RUNNING", "SUCCEEDED", "FAILED"):
            reads.append(("listservicejobs", {"jobQueue": "fs-queue", "jobStatus": status}))
        signed_reads = [("describeservicejob", {"jobId": ids["a1"]}, "alice"),
                        ("describeservicejob", {"jobId": ids["n-crit"]}, "bob"),
                        ("listservicejobs", {"jobQueue": "fs-queue", "jobStatus": "RUNNING"},
                         "carol")]
    for job_id in ids.values():
        reads.append(("describeservicejob", {"jobId": job_id}))
    out = [[op, body, call(server, op, body)] for op, body in reads]
    out += [[op, body, signed_ok(server, who, "POST", f"/v1/{op}", body), who]
            for op, body, who in signed_reads]
    if full_run:
        for arn in (fs["jobQueueArn"], fs["schedulingPolicyArn"], *shares):
            out.append(["listtagsforresource", {"resourceArn": arn},
                        get(server, f"/v1/tags/{urllib.parse.quote(arn, safe='')}")])
        out.append(["groups", {"jobQueue": "fs-queue"},
                    get(server, "/qm/v1/queues/fs-queue/groups")])
    out.append(["usage", {}, get(server, "/qm/v1/usage")])
    out.append(["audit", {}, get(server, "/qm/v1/audit")])
    return out


def settled(server: Server, ids: dict[str, str], full_run: bool = False) -> list:
    """The answers, once two reads a second apart agree (no report still on its way)."""
    last = None
    for _ in range(30):
        now = answers(server, ids, full_run)
        if now == last:
            return now
        if last is not None:
            # Say what moved, so that a read that never settles can be told apart.
            changed = ([a[:2] for a, b in zip(now, last) if a != b]
                       if len(now) == len(last) else "all")
            print(f"answers changed: {json.dumps(changed)[:2000]}", file=sys.stderr, flush=True)
            if changed != "all" and len(changed) <= 3:
                for a, b in zip(now, last):
                    if a != b:
                        print(f"  before: {json.dumps(b[2])[:1000]}\n"
                              f"  after:  {json.dumps(a[2])[:1000]}", file=sys.stderr, flush=True)
        last = now
        time.sleep(1)
    raise TimeoutError("the server's answers kept changing")


def main() -> None:
    out = Path(sys.argv[1])
    # `--snapshot-every N`: a release with snapshots writes them every N commands, so that the
    # fixture holds snapshots and batches after them (what a later release must read).
    extra = ""
    if "--snapshot-every" in sys.argv[2:]:
        every = int(sys.argv[sys.argv.index("--snapshot-every") + 1])
        extra = f"[state]\nsnapshot_every_commands = {every}\n"
    full_run = "--full" in sys.argv[2:]
    queued = full_run or "--queued" in sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run([str(qm_bin()), "--version"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="qm-fixture-"))
    # A release before authentication has no --no-auth and writes no credentials.
    help_text = subprocess.run([str(qm_bin()), "serve", "--help"], capture_output=True, text=True).stdout
    # --full: fs-env's 4 instances beside fx-env's 3, and a retention short enough that the
    # jobs finished before its last phase are in the archive at the kill.
    config = config_toml(count=7 if full_run else 3)
    if full_run:
        extra += f"[retention]\nfinished_jobs_days = {RETENTION_SECONDS / 86400!r}\n"
    kind = Server
    if "--no-auth" not in help_text:
        if full_run:
            raise SystemExit("--full needs a release with authentication (0805b08 or later)")
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
        kept = full(server, ids, gate) if full_run else {}
        recorded = settled(server, ids, full_run)
        if full_run:
            kept["whoami"] = {name: signed_ok(server, name, "GET", "/qm/v1/whoami")
                              for name, _, _ in PRINCIPALS}
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
         "answers": recorded} | ({"gate": str(gate)} if queued else {}) | kept,
        indent=1, sort_keys=True) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"fixture in {out}: {len(recorded)} answers, jobs {sorted(ids)}")


if __name__ == "__main__":
    main()
