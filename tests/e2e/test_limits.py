"""Every bound of `[limits]` and the HTTP layer triggers its error (issue 13, item 4 and 5):
slow and idle clients are cut off while /healthz answers, one connection too many gets a 503
with Retry-After, oversized URIs, headers and bodies get 414/431/413 in the AWS shape, and
queued jobs, termination reasons, audit entries and job logs are bounded."""

import json
import select
import socket
import subprocess
import time

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (ShareSpec, config_toml, make_queue, qm_bin, send, storage_uri, wait_for,
                    wait_status)

LIMITS = """
[limits]
header_timeout_seconds = 2
body_timeout_seconds = 2
max_connections = 24
queued_jobs_per_share = 3
queued_jobs_per_queue = 5
log_bytes_per_attempt = 65536
"""


@pytest.fixture(scope="module")
def server(start_server):
    config = config_toml().replace('kind = "local"\n', 'kind = "local"\ncheckpoint_poll_seconds = 0.2\n')
    s = start_server(config=config + LIMITS, name="limits")
    yield s
    s.close()


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def aws_error(status: int, headers, body: bytes, expected_status: int) -> str:
    """The message of an AWS-shaped error answer, after checking its shape."""
    assert status == expected_status, (status, body[:300])
    assert headers["content-type"] == "application/json", dict(headers)
    out = json.loads(body)
    assert out["__type"] == headers["x-amzn-ErrorType"] == "ClientException", out
    return out["message"]


def test_slow_clients_are_cut_off_while_healthz_answers(server):
    slow = [connect(server) for _ in range(16)]
    for s in slow:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    cut_off: set[int] = set()
    started = time.monotonic()
    while len(cut_off) < len(slow) and time.monotonic() - started < 15:
        status, _, body = send("GET", server.url + "/healthz", timeout=2)
        assert (status, body) == (200, b"ok\n")
        for i, s in enumerate(slow):
            if i in cut_off:
                continue
            try:
                s.sendall(b"X-Slow: 1\r\n")
                s.settimeout(0.01)
                if closed_by_server(s):
                    cut_off.add(i)
            except (BrokenPipeError, ConnectionResetError):
                cut_off.add(i)
        time.sleep(0.3)
    assert len(cut_off) == len(slow), f"{len(slow) - len(cut_off)} slow clients still connected"
    # An idle keep-alive connection is closed after the same timeout.
    idle = connect(server)
    idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert b"200 OK" in idle.recv(4096)
    idle.settimeout(6)
    assert closed_by_server(idle), "an idle keep-alive connection stayed open"
    # So is one that never sends a byte, or stops inside what could be HTTP/2's preface
    # (before hyper knows the protocol, and starts its own timeout).
    silent, partial = connect(server), connect(server)
    partial.sendall(b"PRI * HTTP/2")
    for s, what in ((silent, "a silent connection"), (partial, "a stalled HTTP/2 preface")):
        s.settimeout(6)
        assert closed_by_server(s), f"{what} stayed open"
    # HTTP/2 is not served at all: the preface closes the connection.
    h2 = connect(server)
    h2.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    h2.settimeout(1)
    assert closed_by_server(h2), "an HTTP/2 connection was served"
    for s in slow + [idle, silent, partial, h2]:
        s.close()


def test_a_body_that_does_not_arrive_in_time_is_answered_408(server):
    s = connect(server)
    s.sendall(b"POST /v1/listservicejobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    s.settimeout(6)
    answer = s.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 408"), answer
    assert "body_timeout_seconds" in answer and '"__type":"ClientException"' in answer, answer


@pytest.fixture
def crowded(start_server):
    """A server of its own: no connection of another test holds a place, and connections stay
    open long enough (header_timeout_seconds 30) to be counted one by one."""
    s = start_server(config=config_toml() + "[limits]\nmax_connections = 24\nheader_timeout_seconds = 30\n",
                     name="limits-crowded")
    yield s
    s.close()


def test_one_connection_beyond_the_limit_gets_503_with_retry_after(crowded):
    # Exactly 6 of 30 are refused once nobody else is connected. The harness's readiness probe
    # may still hold its place for a moment after it closed (the server drops a connection's
    # permit when its task ends, which a loaded machine can schedule after the next accepts),
    # so a round that sees more than 6 answered is tried again; a permit that is never given back
    # fails, and so does a round with fewer (more than 24 let in).
    def one_round():
        held = [connect(crowded) for _ in range(30)]
        time.sleep(1)
        readable, _, _ = select.select(held, [], [], 2)
        return held, sorted(held.index(s) for s in readable)

    rounds = []
    deadline = time.time() + 20
    while True:
        held, answered = one_round()
        rounds.append(answered)
        # Fewer answered than refused-by-limit would mean more than 24 let in: fail at once.
        if len(answered) <= 30 - 24 or time.time() > deadline:
            break
        for s in held:
            s.close()
        time.sleep(0.5)
    try:
        assert len(answered) == 30 - 24, f"answered at once, round by round: {rounds} of 30 with max_connections = 24"
        refused = held[answered[0]].recv(65536).decode()
        head, _, body = refused.partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 503"), refused
        assert "retry-after: 1" in head.lower(), head
        out = json.loads(body)
        assert out["__type"] == "ServerException" and "max_connections" in out["message"], out
    finally:
        for s in held:
            s.close()
    wait_for(lambda: send("GET", crowded.url + "/healthz", timeout=2)[0] == 200,
             what="the server to accept connections again")


def test_oversized_uris_headers_and_bodies_and_wrong_methods_get_the_aws_shape(server):
    url = server.url
    m = aws_error(*send("GET", url + "/qm/v1/usage?x=" + "a" * 9000), 414)
    assert "8192" in m, m
    m = aws_error(*send("GET", url + "/healthz", headers={"X-Big": "b" * 17000}), 431)
    assert "16384" in m, m
    many = {f"X-H{i}": "1" for i in range(120)}
    aws_error(*send("GET", url + "/healthz", headers=many), 431)
    # Refused on its Content-Length, before a byte of it is read (a client still sending
    # would see the connection close under it, so this one sends the headers only).
    s = connect(server)
    s.sendall(b"POST /v1/listservicejobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: 5242880\r\n\r\n")
    answer = s.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 413"), answer
    assert '"__type":"ClientException"' in answer and "4 MiB" in answer, answer
    s.close()
    # A body without a length is cut at the limit as it is read.
    s = connect(server)
    s.sendall(b"POST /v1/listservicejobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b" " * 65536
    try:
        for _ in range(65):
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = s.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 413") and "4 MiB" in answer, answer
    s.close()
    m = aws_error(*server.signed("PUT", "/v1/listservicejobs", {}), 400)
    assert "PUT is not allowed" in m, m
    status, headers, body = server.signed("GET", "/qm/v1/audit?maxResults=banana")
    assert "the query string" in aws_error(status, headers, body, 400)


def test_queued_jobs_are_bounded_per_share_and_per_queue(server, jobs, batch):
    q = make_queue(batch, "bounded", [ShareSpec("A", "RESERVE", 1), ShareSpec("B", "RESERVE", 1)],
                   env_max=1)
    first = jobs.sleeper(q, "A", "runs")
    wait_status(batch, first, "RUNNING")
    for i in range(3):
        jobs.submit(q, "A", f"a{i}")
    with pytest.raises(ClientError) as e:
        jobs.submit(q, "A", "a3")
    m = e.value.response["Error"]["Message"]
    assert "queued_jobs_per_share = 3" in m and "'A'" in m, m
    jobs.submit(q, "B", "b0")
    jobs.submit(q, "B", "b1")
    with pytest.raises(ClientError) as e:
        jobs.submit(q, "B", "b2")
    m = e.value.response["Error"]["Message"]
    assert m.startswith("jobQueue:") and "queued_jobs_per_queue = 5" in m, m
    # A job that leaves RUNNABLE makes room.
    batch.terminate_service_job(jobId=jobs.ids[1], reason="room")
    wait_status(batch, jobs.ids[1], "FAILED")
    jobs.submit(q, "A", "a4")


def test_a_termination_reason_is_bounded(server, jobs, batch):
    q = make_queue(batch, "reason", [ShareSpec("A", "RESERVE", 1)], env_max=1)
    job = jobs.sleeper(q, "A", "long-reason")
    with pytest.raises(ClientError) as e:
        batch.terminate_service_job(jobId=job, reason="r" * 1025)
    assert "at most 1024" in e.value.response["Error"]["Message"]
    batch.terminate_service_job(jobId=job, reason="r" * 1024)
    assert wait_status(batch, job, "FAILED")["statusReason"] == "r" * 1024


def test_audit_entries_are_bounded_and_read_page_by_page(server):
    def post(entry):
        return server.signed("POST", "/qm/v1/audit", entry)

    status, headers, body = post({"action": "apply", "summary": "s", "details": "d" * (256 * 1024 + 1)})
    assert "details is 262145 bytes" in aws_error(status, headers, body, 400)
    status, headers, body = post({"action": "apply", "summary": "x" * 1025})
    assert "summary is 1025 characters" in aws_error(status, headers, body, 400)
    for i in range(5):
        assert post({"action": "apply", "summary": f"page-{i}"})[0] == 200
    seen, token = [], None
    while True:
        path = "/qm/v1/audit?maxResults=2" + (f"&nextToken={token}" if token else "")
        status, _, body = server.signed("GET", path)
        assert status == 200, body
        page = json.loads(body)
        assert len(page["entries"]) <= 2
        seen += [e["summary"] for e in page["entries"]]
        token = page.get("nextToken")
        if token is None:
            break
    assert [s for s in seen if s.startswith("page-")] == [f"page-{i}" for i in range(5)]
    status, headers, body = server.signed("GET", "/qm/v1/audit?maxResults=1001")
    assert "give 1 to 1000" in aws_error(status, headers, body, 400)
    # `qm audit` reads every page.
    out = subprocess.run([str(qm_bin()), "audit"], env=server.cli_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert all(f"page-{i}" in out.stdout for i in range(5)), out.stdout


def test_a_log_past_its_limit_is_rotated_and_qm_logs_says_so(server, jobs, batch):
    q = make_queue(batch, "chatty", [ShareSpec("A", "RESERVE", 1)], env_max=1)
    # 4 x 64 KiB of output, a quarter at a time, so the scanner sees it grow past the limit.
    script = ("import sys, time\n"
              "for i in range(4):\n"
              "    sys.stdout.write(('x' * 1023 + '\\n') * 64); sys.stdout.flush(); time.sleep(0.6)\n"
              "print('the end')\n")
    job = batch.submit_service_job(
        jobName="chatty", jobQueue=q.name, serviceJobType="SAGEMAKER_TRAINING", quotaShareName="A",
        serviceRequestPayload=json.dumps({
            "TrainingJobName": "chatty", "RoleArn": "arn:aws:iam::123456789012:role/x",
            "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "unused",
                                       "ContainerEntrypoint": [__import__("sys").executable, "-c", script]},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
            "OutputDataConfig": {"S3OutputPath": storage_uri("output")},
            "StoppingCondition": {"MaxRuntimeInSeconds": 300}}))["jobId"]
    jobs.ids.append(job)
    wait_status(batch, job, "SUCCEEDED")
    attempt = server.data_dir / "jobs" / job / "attempts" / "1"
    log = (attempt / "stdout.log").read_text()
    assert log.startswith("[qm] this log reached 65536 bytes ([limits] log_bytes_per_attempt)"), log[:200]
    assert log.endswith("the end\n")
    assert (attempt / "stdout.log").stat().st_size < 3 * 65536
    assert 65536 < (attempt / "stdout.log.1").stat().st_size <= 3 * 65536
    out = subprocess.run([str(qm_bin()), "logs", job], env=server.cli_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "log_bytes_per_attempt" in out.stdout and out.stdout.endswith("the end\n"), out.stdout[-300:]


def test_an_instance_type_no_pool_provides_is_refused_at_submit(server, jobs, batch):
    q = make_queue(batch, "p4d", [ShareSpec("A", "RESERVE", 1)], env_max=1)
    with pytest.raises(ClientError) as e:
        jobs.submit(q, "A", "nowhere", unit="ml.p4d.24xlarge")
    m = e.value.response["Error"]["Message"]
    assert m.startswith("serviceRequestPayload.ResourceConfig.InstanceType: no pool of this server "
                        "provides 'ml.p4d.24xlarge' (it offers ml.g5.xlarge)"), m
