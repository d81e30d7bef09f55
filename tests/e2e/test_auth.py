"""Authentication (issue 12, /tmp/auth/CONTRACT.md) on the real server, with the real clients:
every request but `/healthz`, the static dashboard and the login is signed with SigV4 by a key
pair the server knows; what a refused request asked for never happens; the browser-reachable
holes (a form post, a foreign page, DNS rebinding) are closed; principals are managed by
admins only, with `qm principal`, and `--no-auth` is for loopback only.

A refused request is checked twice: by its AWS-shaped error (HTTP 403, `__type` and
`x-amzn-ErrorType`), and by looking, as the admin, at what it would have changed.
"""

from __future__ import annotations

import configparser
import datetime
import json
import os
import stat
import subprocess
import time

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from qm_e2e import (ADMIN_PROFILE, REGION, TOKEN_VAR, Keys, ShareSpec, aws_error, config_toml,
                    encode_body, error_of, free_port, make_queue, payload, qm_bin,
                    read_credentials, send, sign, unique, wait_for)

# How long a refused job is given to (wrongly) run before the test says it did not.
NEVER_RAN_SECONDS = 4


# -- helpers ------------------------------------------------------------------------------


def refused(status, headers, body, code: str, http: int = 403) -> str:
    """Assert an AWS-shaped refusal with `code`; returns its message."""
    got, message = aws_error(headers, body)
    assert (status, got) == (http, code), f"expected HTTP {http} {code}, got HTTP {status}: {body[:500]!r}"
    assert (headers.get("x-amzn-ErrorType") or "").split(":")[0] == code, dict(headers)
    assert message, "the message says what is wrong"
    return message


def unsigned(server, method: str, path: str, body=None, headers=None):
    data, headers = encode_body(body, headers)
    return send(method, server.url + path, data, headers)


def boto_client(server, keys: Keys, region: str = REGION):
    return boto3.client(
        "batch", region_name=region, endpoint_url=server.url,
        aws_access_key_id=keys.access_key_id, aws_secret_access_key=keys.secret_access_key,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5,
                      read_timeout=30))


def policy_exists(batch, name: str) -> bool:
    return any(p["arn"].endswith(f"/{name}") for page in batch.get_paginator("list_scheduling_policies").paginate()
               for p in page["schedulingPolicies"])


def submit_body(server, queue, name: str, marker) -> dict:
    """A SubmitServiceJob whose program writes `marker` when it runs."""
    return {
        "jobName": name, "jobQueue": queue.name, "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": "A",
        "serviceRequestPayload": json.dumps(payload(
            "env_dump.py", env={"DUMP_FILE": str(marker)}, token=server.token, name=name)),
    }


def jobs_named(batch, queue, name: str) -> list[dict]:
    return batch.list_service_jobs(jobQueue=queue.name, filters=[
        {"name": "JOB_NAME", "values": [name]}])["jobSummaryList"]


def assert_never_ran(batch, queue, attempts: dict) -> None:
    """None of `attempts` (job name -> marker file) ran, nor is known to the server, after the
    time a job on this idle queue needs to start."""
    time.sleep(NEVER_RAN_SECONDS)
    for name, marker in attempts.items():
        assert not marker.exists(), f"refused job {name} ran: {marker} exists"
        assert jobs_named(batch, queue, name) == [], f"refused job {name} was queued"


def assert_runs(batch, queue, name: str, marker) -> None:
    """The control: the same queue runs a job that was accepted."""
    wait_for(marker.exists, what=f"accepted job {name} to run and write {marker}")
    assert [j["jobName"] for j in jobs_named(batch, queue, name)] == [name]


@pytest.fixture(scope="module")
def idle_queue(server):
    """A queue with one free instance, where an accepted job starts at once."""
    return make_queue(server.client(), "auth", [ShareSpec("A", "RESERVE", 1)], env_max=1)


# -- signatures ---------------------------------------------------------------------------


def test_an_unsigned_request_is_refused_as_missing_a_token_and_changes_nothing(server, batch):
    name = unique("unsigned")
    refused(*unsigned(server, "POST", "/v1/createschedulingpolicy", {
        "name": name, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        "MissingAuthenticationTokenException")
    assert not policy_exists(batch, name)
    # The server's own API and its metrics need a signature too.
    for path in ("/qm/v1/usage", "/qm/v1/audit", "/qm/v1/whoami", "/metrics"):
        refused(*unsigned(server, "GET", path), "MissingAuthenticationTokenException")
    # What stays open: the health check, the dashboard's static files.
    assert unsigned(server, "GET", "/healthz")[0] == 200
    status, headers, body = unsigned(server, "GET", "/")
    assert status == 200 and b"Quartermaster" in body, status


def test_an_authorization_header_that_does_not_parse_is_an_incomplete_signature(server, batch):
    name = unique("garbage")
    body = {"name": name, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}
    refused(*unsigned(server, "POST", "/v1/createschedulingpolicy", body,
                      {"Authorization": "garbage", "X-Amz-Date": "20250101T000000Z"}),
            "IncompleteSignatureException")
    # A well-formed signature without its X-Amz-Date is incomplete as well.
    data, headers = encode_body(body, None)
    url = server.url + "/v1/createschedulingpolicy"
    headers = {k: v for k, v in sign("POST", url, server.keys(), data, headers).items()
               if k.lower() != "x-amz-date"}
    refused(*send("POST", url, data, headers), "IncompleteSignatureException")
    assert not policy_exists(batch, name)


def test_boto3_with_an_unknown_access_key_is_an_unrecognized_client(server, batch):
    name = unique("unknown")
    stranger = boto_client(server, Keys("stranger", "QMAKNOTAKEYTHISSERVERKNOWS", "x" * 40))
    with pytest.raises(ClientError) as e:
        stranger.create_scheduling_policy(name=name, quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})
    code, message, status = error_of(e)
    assert (code, status) == ("UnrecognizedClientException", 403), message
    assert not policy_exists(batch, name)


def test_boto3_with_a_known_key_and_a_wrong_secret_is_an_invalid_signature_and_changes_nothing(
        server, batch):
    q = make_queue(batch, "wrongsecret", [ShareSpec("A", "RESERVE", 1)], env_max=2)
    arn = q.shares["A"]
    admin = server.keys()
    forger = boto_client(server, Keys("forger", admin.access_key_id, "not-" + admin.secret_access_key[4:]))
    with pytest.raises(ClientError) as e:
        forger.update_quota_share(quotaShareArn=arn, capacityLimits=[{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}])
    code, message, status = error_of(e)
    assert (code, status) == ("InvalidSignatureException", 403), message
    assert admin.secret_access_key not in message
    time.sleep(1)
    share = batch.describe_quota_share(quotaShareArn=arn)
    assert [c["maxCapacity"] for c in share["capacityLimits"]] == [1], share


def test_a_request_signed_twenty_minutes_ago_is_refused_for_clock_skew(server):
    url = server.url + "/v1/describejobqueues"
    data, headers = encode_body({}, None)
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)
    signed = sign("POST", url, server.keys(), data, headers, at=past)
    assert signed["X-Amz-Date"] == past.strftime("%Y%m%dT%H%M%SZ"), signed
    message = refused(*send("POST", url, data, signed), "InvalidSignatureException")
    assert "clock skew" in message.lower(), message
    # The same request signed now is fine: only the time was wrong.
    assert send("POST", url, data, sign("POST", url, server.keys(), data, headers))[0] == 200


def test_a_signature_scoped_to_another_region_is_invalid_and_names_the_expected_scope(server):
    elsewhere = boto_client(server, server.keys(), region="eu-west-1")
    with pytest.raises(ClientError) as e:
        elsewhere.describe_job_queues()
    code, message, status = error_of(e)
    assert (code, status) == ("InvalidSignatureException", 403), message
    assert REGION in message, message
    # And another service in the right region.
    url = server.url + "/v1/describejobqueues"
    data, headers = encode_body({}, None)
    message = refused(*send("POST", url, data, sign("POST", url, server.keys(), data, headers,
                                                    service="sagemaker")),
                      "InvalidSignatureException")
    assert "batch" in message, message


def test_the_admin_credentials_file_is_private_and_the_banner_says_how_to_use_it(server):
    path = server.credentials_path
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o600, f"{path} has mode {mode:o}"
    keys = read_credentials(path)
    assert keys.access_key_id.startswith("QMAK"), keys.access_key_id
    ini = configparser.ConfigParser()
    ini.read(path)
    assert ini[ADMIN_PROFILE].get("region") == REGION, dict(ini[ADMIN_PROFILE])
    log = server.log_path.read_text(errors="replace")
    wanted = [f"export AWS_SHARED_CREDENTIALS_FILE={p}/credentials AWS_PROFILE={ADMIN_PROFILE}"
              for p in {str(server.data_dir), str(server.data_dir.resolve())}]
    assert any(w in log for w in wanted), f"none of {wanted} in the banner:\n{server.log_tail()}"
    assert keys.secret_access_key not in log, "the secret is never printed"


def test_the_credentials_file_survives_a_restart_with_the_same_keys(start_server):
    s = start_server(name="auth-restart")
    try:
        before = read_credentials(s.credentials_path)
        s.restart()
        assert read_credentials(s.credentials_path) == before
        s.client().describe_job_queues()
    finally:
        s.close()


# -- what a browser can send without asking -----------------------------------------------


def test_a_signed_job_sent_as_a_form_or_text_is_refused_and_never_runs(server, batch, idle_queue, tmp_path):
    attempts = {}
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        name = unique("form")
        attempts[name] = tmp_path / f"{name}.json"
        body = json.dumps(submit_body(server, idle_queue, name, attempts[name])).encode()
        status, headers, raw = server.signed("POST", "/v1/submitservicejob", body,
                                             headers={"Content-Type": ctype})
        refused(status, headers, raw, "UnsupportedMediaTypeException", http=415)
    assert_never_ran(batch, idle_queue, attempts)
    name = unique("json")
    marker = tmp_path / f"{name}.json"
    status, _, raw = server.signed("POST", "/v1/submitservicejob",
                                   submit_body(server, idle_queue, name, marker))
    assert status == 200, raw
    assert_runs(batch, idle_queue, name, marker)


def test_a_signed_job_from_a_foreign_origin_is_refused_and_never_runs(server, batch, idle_queue, tmp_path):
    name = unique("evil")
    marker = tmp_path / f"{name}.json"
    message = refused(*server.signed("POST", "/v1/submitservicejob",
                                     submit_body(server, idle_queue, name, marker),
                                     headers={"Origin": "http://evil.example"}),
                      "AccessDeniedException")
    assert "cross-origin" in message, message
    assert_never_ran(batch, idle_queue, {name: marker})
    # The server's own origin (its dashboard) is not foreign.
    name = unique("own")
    marker = tmp_path / f"{name}.json"
    status, _, raw = server.signed("POST", "/v1/submitservicejob",
                                   submit_body(server, idle_queue, name, marker),
                                   headers={"Origin": server.url})
    assert status == 200, raw
    assert_runs(batch, idle_queue, name, marker)


def test_a_request_for_a_host_that_is_not_this_server_is_refused(server):
    message = refused(*server.signed("GET", "/qm/v1/whoami", headers={"Host": "evil.example"}),
                      "AccessDeniedException")
    assert "evil.example" in message, message
    refused(*server.signed("POST", "/v1/describejobqueues", {},
                           headers={"Host": f"evil.example:{server.port}"}),
            "AccessDeniedException")
    # Loopback names are this server.
    status, _, body = server.signed("GET", "/qm/v1/whoami", headers={"Host": f"localhost:{server.port}"})
    assert status == 200, body


# -- principals ---------------------------------------------------------------------------


def test_an_audit_entry_records_the_principal_that_signed_not_the_actor_it_claims(server):
    status, _, body = server.signed("POST", "/qm/v1/audit", {
        "actor": "mallory", "action": "apply", "summary": "claims to be mallory",
        "tags": {"resource": "arn:forged", "before": {}, "after": {"qm:submitters": "mallory"}}},
        principal="alice")
    assert status == 200, body
    status, _, body = server.signed("GET", "/qm/v1/audit")
    entries = [e for e in json.loads(body)["entries"] if e["summary"] == "claims to be mallory"]
    assert [e["actor"] for e in entries] == ["alice"], entries
    # Nor can it claim a change of tags: only the server records those.
    assert all("tags" not in e for e in entries), entries


def whoami(server, **who) -> dict:
    status, _, body = server.signed("GET", "/qm/v1/whoami", **who)
    assert status == 200, body
    out = json.loads(body)
    return {k: out.get(k) for k in ("name", "groups", "admin")}


def test_only_an_admin_creates_principals(server):
    name = unique("carol")
    assert whoami(server, principal="alice") == {"name": "alice", "groups": [], "admin": False}
    message = refused(*server.signed("POST", "/qm/v1/principals", {"name": name}, principal="alice"),
                      "AccessDeniedException")
    assert "alice" in message, message
    listed = json.loads(server.signed("GET", "/qm/v1/principals")[2])["principals"]
    assert name not in [p["name"] for p in listed]

    status, _, body = server.signed("POST", "/qm/v1/principals", {"name": name, "groups": ["research"]})
    assert status == 200, body
    created = json.loads(body)
    assert created["name"] == name and created["groups"] == ["research"], created
    assert created["accessKeyId"].startswith("QMAK") and created["secretAccessKey"], created
    carol = Keys(name, created["accessKeyId"], created["secretAccessKey"])
    assert server.client(keys=carol).describe_job_queues()["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert whoami(server, keys=carol) == {"name": name, "groups": ["research"], "admin": False}

    status, _, body = server.signed("GET", "/qm/v1/principals")
    assert status == 200, body
    listed = {p["name"]: p for p in json.loads(body)["principals"]}
    assert listed[name]["accessKeyId"] == carol.access_key_id
    assert listed[ADMIN_PROFILE]["admin"] is True and listed[name]["admin"] is False
    assert b"secretAccessKey" not in body and carol.secret_access_key.encode() not in body

    refused(*server.signed("POST", "/qm/v1/principals", {"name": name}), "ClientException", http=400)
    refused(*server.signed("POST", "/qm/v1/principals", {"name": "anonymous"}), "ClientException", http=400)
    refused(*server.signed("DELETE", f"/qm/v1/principals/{name}", principal="alice"), "AccessDeniedException")


def qm(server, *args) -> subprocess.CompletedProcess:
    cmd = [str(qm_bin()), *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=server.cli_env())
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}"
    return r


def profile_client(server, credentials_file, profile: str):
    """boto3 as a user has it: a named profile of a shared-credentials file (an explicit profile
    also keeps boto3 from taking keys from the environment)."""
    session = botocore.session.Session()
    session.set_config_variable("credentials_file", str(credentials_file))
    session.set_config_variable("config_file", str(server.workdir / "no-aws-config"))
    session.set_config_variable("profile", profile)
    return boto3.Session(botocore_session=session).client(
        "batch", region_name=REGION, endpoint_url=server.url,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}))


def test_qm_principal_creates_rotates_and_deletes_a_key_pair_that_boto3_uses(server, tmp_path):
    name = unique("bob")
    creds = tmp_path / "bob-credentials"
    qm(server, "principal", "create", name, "--credentials-file", creds)
    first = read_credentials(creds, name)
    assert first.access_key_id.startswith("QMAK")
    bob = profile_client(server, creds, name)
    bob.describe_job_queues()
    assert whoami(server, keys=first)["name"] == name

    qm(server, "principal", "rotate", name, "--credentials-file", creds)
    second = read_credentials(creds, name)
    assert second.access_key_id != first.access_key_id
    with pytest.raises(ClientError) as e:
        boto_client(server, first).describe_job_queues()
    assert error_of(e)[0] == "UnrecognizedClientException", error_of(e)
    profile_client(server, creds, name).describe_job_queues()

    qm(server, "principal", "delete", name)
    with pytest.raises(ClientError) as e:
        profile_client(server, creds, name).describe_job_queues()
    assert error_of(e)[0] == "UnrecognizedClientException", error_of(e)


# -- dashboard sessions -------------------------------------------------------------------


def test_a_dashboard_session_reads_but_never_writes_and_ends_at_sign_out(server, batch):
    alice = server.keys("alice")
    # Change the first character to one it is not ("x" alone matched a secret that began with x).
    first = "y" if alice.secret_access_key.startswith("x") else "x"
    wrong = dict(accessKeyId=alice.access_key_id, secretAccessKey=first + alice.secret_access_key[1:])
    refused(*unsigned(server, "POST", "/qm/v1/session", wrong), "InvalidSignatureException")
    refused(*unsigned(server, "POST", "/qm/v1/session", dict(wrong, accessKeyId="QMAKNOSUCHKEY")),
            "UnrecognizedClientException")

    status, headers, body = unsigned(server, "POST", "/qm/v1/session", {
        "accessKeyId": alice.access_key_id, "secretAccessKey": alice.secret_access_key})
    assert status == 200 and json.loads(body)["name"] == "alice", body
    cookie = headers["Set-Cookie"]
    attrs = [a.strip().lower() for a in cookie.split(";")]
    assert attrs[0].startswith("qm_session=") and "httponly" in attrs and "samesite=strict" in attrs, cookie
    session = {"Cookie": cookie.split(";")[0]}

    status, _, body = unsigned(server, "GET", "/qm/v1/whoami", headers=session)
    assert status == 200 and json.loads(body)["name"] == "alice", body
    assert unsigned(server, "GET", "/qm/v1/usage", headers=session)[0] == 200
    name = unique("bycookie")
    status, headers, body = unsigned(server, "POST", "/v1/createschedulingpolicy", {
        "name": name, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}, headers=session)
    assert status == 403, body
    assert not policy_exists(batch, name)

    status, _, body = unsigned(server, "DELETE", "/qm/v1/session", headers=session)
    assert status == 200, body
    refused(*unsigned(server, "GET", "/qm/v1/whoami", headers=session), "MissingAuthenticationTokenException")


# -- --no-auth ----------------------------------------------------------------------------


def test_no_auth_on_an_address_other_than_loopback_is_refused_at_start(tmp_path):
    (tmp_path / "config.toml").write_text(config_toml())
    cmd = [str(qm_bin()), "serve", "--no-auth", "--listen", f"0.0.0.0:{free_port()}",
           "--data-dir", str(tmp_path / "data"), "--config", str(tmp_path / "config.toml")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, **{TOKEN_VAR: "no-auth-refused"}))
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"`{' '.join(cmd)}` kept running: it serves without authentication on 0.0.0.0\n{out}")
    assert proc.returncode != 0, out
    assert "loopback" in out.lower(), out


def test_no_auth_on_loopback_serves_unsigned_requests_as_anonymous(start_server):
    s = start_server(name="noauth", args=["--no-auth"])
    try:
        status, _, body = unsigned(s, "POST", "/v1/describejobqueues", {})
        assert status == 200, body
        status, _, body = unsigned(s, "GET", "/qm/v1/whoami")
        assert status == 200 and json.loads(body)["name"] == "anonymous", body
        # The hardening stays on: a foreign page still cannot post.
        refused(*unsigned(s, "POST", "/v1/describejobqueues", {}, {"Origin": "http://evil.example"}),
                "AccessDeniedException")
    finally:
        s.close()
