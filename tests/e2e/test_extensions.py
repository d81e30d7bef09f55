"""The server's own endpoints beside the AWS API: `/qm/v1/usage` (what each share owns, uses,
borrows and lends), `/qm/v1/jobs/<id>/logs` (attempt logs, followable), `/qm/v1/audit` and
`/metrics` (Prometheus text or OpenMetrics)."""

import json
import re

from qm_e2e import demo_setup, wait_for, wait_preempted, wait_status


def get(server, path, ok=True):
    status, headers, body = server.signed("GET", path)
    if ok:
        assert status == 200, f"GET {path}: HTTP {status}: {body[:500]!r}"
    return status, headers, body


def post(server, path, body):
    status, _, out = server.signed("POST", path, body)
    assert status == 200, f"POST {path}: HTTP {status}: {out[:500]!r}"
    return json.loads(out or b"{}")


def share_row(usage, queue, share):
    q = next(q for q in usage["queues"] if q["jobQueue"] == queue)
    return next(s for s in q["shares"] if s["quotaShareName"] == share)


def test_usage_shows_who_borrows_and_who_lends(server, batch, jobs):
    q = demo_setup(batch, "usage")
    high = jobs.sleeper(q, "QS1", "high", priority=3)
    med = jobs.sleeper(q, "QS1", "med", priority=2)
    wait_status(batch, high, "RUNNING")
    wait_status(batch, med, "RUNNING")
    _, _, body = get(server, "/qm/v1/usage")
    usage = json.loads(body)
    qs1 = share_row(usage, q.name, "QS1")
    qs2 = share_row(usage, q.name, "QS2")
    qs3 = share_row(usage, q.name, "QS3")
    assert (qs1["entitled"], qs1["used"], qs1["ownUse"], qs1["borrowed"]) == (1, 2, 1, 1), qs1
    assert qs2["lentOut"] == 1 and qs2["used"] == 0, qs2
    assert qs3["lentOut"] == 0, "RESERVE lends nothing"
    # The reclaim shows too: QS2's job makes med stop, and QS1 is back to its own instance.
    jobs.sleeper(q, "QS2", "owner")
    wait_preempted(batch, med)
    wait_for(lambda: share_row(json.loads(get(server, "/qm/v1/usage")[2]), q.name, "QS1")["borrowed"] == 0,
             what="QS1 to stop borrowing")


def test_logs_of_an_attempt_can_be_followed_by_offset(server, batch, jobs):
    q = demo_setup(batch, "logs")
    jid = jobs.submit(q, "QS2", "chatty", "exit_code.py", env={"EXIT_CODES": "0"})
    wait_status(batch, jid, "SUCCEEDED")
    status, headers, first = get(server, f"/qm/v1/jobs/{jid}/logs?stream=stdout")
    assert status == 200
    assert headers["x-qm-attempt"] == "1" and headers["x-qm-finished"] == "true"
    nxt = int(headers["x-qm-next-offset"])
    assert nxt == len(first)
    _, headers, rest = get(server, f"/qm/v1/jobs/{jid}/logs?offset={nxt}")
    assert rest == b"" and headers["x-qm-next-offset"] == str(nxt)
    status, _, body = get(server, f"/qm/v1/jobs/{jid}/logs?attempt=7", ok=False)
    assert status == 400 and "attempts 1 to 1" in json.loads(body)["message"], (status, body)
    status, _, body = get(server, "/qm/v1/jobs/..%2F..%2Fetc/logs", ok=False)
    assert status == 400, (status, body)


def test_audit_entries_are_recorded_with_the_servers_time_and_the_signers_name(server):
    before = json.loads(get(server, "/qm/v1/audit")[2])["entries"]
    post(server, "/qm/v1/audit", {"actor": "alice@host", "action": "apply", "summary": "2 changes",
                                  "details": "+ share X"})
    after = json.loads(get(server, "/qm/v1/audit")[2])["entries"]
    assert len(after) == len(before) + 1
    e = after[-1]
    # The actor is the principal that signed the request, not what the client says.
    assert (e["actor"], e["action"], e["summary"]) == ("qm-admin", "apply", "2 changes")
    assert e["at"] > 1_700_000_000_000


def test_metrics_are_prometheus_text_with_shares_preemptions_and_latency(server, batch, jobs):
    q = demo_setup(batch, "metrics")
    batch.describe_job_queues()
    _, headers, body = get(server, "/metrics")
    text = body.decode()
    assert headers["Content-Type"].startswith("text/plain")
    for family in ["qm_share_entitled_instances", "qm_share_used_instances",
                   "qm_share_borrowed_instances", "qm_share_runnable_jobs",
                   "qm_preemptions_total", "qm_scheduling_pass_seconds_bucket",
                   "qm_api_request_seconds_bucket"]:
        assert family in text, family
    assert f'qm_share_entitled_instances{{job_queue="{q.name}",quota_share="QS1",instance_type="ml.g5.xlarge"}} 1' in text
    assert 'operation="describejobqueues"' in text


def test_metrics_speak_openmetrics_with_request_id_exemplars_to_a_scraper_that_asks(server, batch):
    q = demo_setup(batch, "openmetrics")
    batch.describe_job_queues()
    status, headers, body = server.signed(
        "GET", "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200, body
    text = body.decode()
    assert headers["Content-Type"].startswith("application/openmetrics-text"), headers["Content-Type"]
    assert text.endswith("# EOF\n")
    assert "# TYPE qm_preemptions counter" in text and "# UNIT qm_api_request_seconds seconds" in text
    assert f'qm_pool_limit_instances{{job_queue="{q.name}",instance_type="ml.g5.xlarge"}} 3' in text
    # A latency bucket names the request that last fell in it.
    assert re.search(r'qm_api_request_seconds_bucket\{[^}]*operation="describejobqueues"[^}]*\} \d+ '
                     r'# \{request_id="[0-9a-f-]{36}"\}', text), text
