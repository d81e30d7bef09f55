"""`qm drain` (issue 38, item 4): stopping the server never stops jobs; draining its executor
does. A drain starts nothing until `qm drain --cancel`; `--requeue` stops the running attempts
as a preemption would and queues their jobs again without using a retry or a preemption. The
drain is in the log: a restart keeps it."""

import json

from qm_e2e import ShareSpec, config_toml, make_queue, pid_alive, wait_for, wait_status
from qm_e2e import run_qm as qm


def drain_status(server) -> dict:
    return json.loads(qm(server, "drain", "--status", "--output", "json").stdout)


def test_drain_requeue_stops_and_requeues_running_jobs_and_cancel_starts_them(start_server, jobs):
    server = start_server(config=config_toml(count=3, grace=2), name="drain")
    batch = jobs.batch = server.client()
    q = make_queue(batch, "drain", [ShareSpec("team", limit=3)])
    ids = {f"run_{k}": jobs.sleeper(q, "team", f"run_{k}", retry={"attempts": 1})
           for k in range(2)}
    for name, jid in ids.items():
        wait_status(batch, jid, "RUNNING")
        jobs.wait_started(name)
    pids = {name: jobs.pid(name) for name in ids}

    # Only admins drain.
    status, _, body = server.signed("POST", "/qm/v1/drain", {"requeue": True}, principal="alice")
    assert status == 403 and b"admins" in body, body

    out = qm(server, "drain", "--requeue", "--reason", "kernel upgrade").stdout
    assert out.count("requeued ") == 2, out
    assert "drained (qm drain by qm-admin: kernel upgrade)" in out, out
    for name, jid in ids.items():
        wait_for(lambda: not pid_alive(pids[name]), what=f"{name}'s process to stop")
        # Its process gone, the exit is logged a moment later (the supervisor writes the
        # outcome durably first): until then it waits for its previous attempt, not the drain.
        job = wait_status(batch, jid, "RUNNABLE", reason_prefix="DRAINED")
        assert job["statusReason"].startswith("DRAINED"), job["statusReason"]
    late = jobs.sleeper(q, "team", "late")
    assert wait_status(batch, late, "RUNNABLE")["statusReason"].startswith("DRAINED")

    # The drain is logged: a restart keeps it, and starts nothing.
    assert server.stop() == 0
    server.start()
    batch = jobs.batch = server.client()
    assert drain_status(server)["drained"] is True
    assert batch.describe_service_job(jobId=late)["status"] == "RUNNABLE"

    assert "not drained" in qm(server, "drain", "--cancel").stdout
    for name, jid in [*ids.items(), ("late", late)]:
        job = wait_status(batch, jid, "RUNNING")
        jobs.wait_started(name, times=2 if name != "late" else 1)
    for name, jid in ids.items():
        job = batch.describe_service_job(jobId=jid)
        # The requeue used no retry and no preemption: one ended attempt, saying why.
        assert "preemptionSummary" not in job, job.get("preemptionSummary")
        assert len(job["attempts"]) == 1, job["attempts"]
        assert job["attempts"][0]["statusReason"].startswith("Requeued: qm drain by qm-admin")
    refused = qm(server, "drain", "--cancel", ok=False)
    assert refused.returncode == 1 and "not drained" in refused.stderr, refused.stderr
    audit = json.loads(server.signed("GET", "/qm/v1/audit")[2])
    actions = [e["action"] for e in audit["entries"]]
    assert "drain" in actions and "drain-cancel" in actions, actions
    server.close()
