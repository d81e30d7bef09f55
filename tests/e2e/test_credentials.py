"""An attempt acts as its job's role, never as the server (issue 40, item 6).

- With `[credentials] source = "assume_role"` the server assumes the job's `RoleArn` with STS
  (moto's here) and serves the credentials at the AWS SDKs' container credentials endpoint:
  a job's boto3, configured by nothing but the variables the server sets, finds them there
  and reads S3 with them; its channel is downloaded with them too. The endpoint answers only
  the attempt's own token, and only while the attempt holds capacity.
- Attempts under their own uids cannot reach the instance metadata service (169.254.169.254,
  played here by a listener on the loopback device): a REJECT rule by uid owner.
- Where moto enforces IAM policies (INITIAL_NO_AUTH_ACTION_COUNT, a moto of its own), the
  role's policy holds: a bucket it may not read is refused to the job."""

import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from qm_e2e import (ACCOUNT, UNIT, Server, ShareSpec, config_toml, make_queue, payload,
                    wait_for, wait_status)
from sagemaker_e2e import MotoServer, sdk_missing

ROLE = f"arn:aws:iam::{ACCOUNT}:role/team-a"
BUCKET = "qm-e2e-role"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    missing = sdk_missing()
    if missing and os.environ.get("CI") != "true":
        pytest.skip(missing)
    m = MotoServer(tmp_path_factory.mktemp("moto-role")).start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def server(start_server, moto):
    config = config_toml() + (f'[credentials]\nsource = "assume_role"\nsts_endpoint = "{moto.url}"\n'
                              '[credentials.shares]\n"A" = ["arn:aws:iam::*:role/team-a"]\n')
    s = start_server(config=config, name="credentials", env=moto.server_env())
    yield s
    s.close()


def submit(batch, q, name: str, script: str, env: dict, channels: dict | None = None,
           share: str = "A") -> str:
    p = payload(script, env=env, name=name, channels=channels)
    p["RoleArn"] = ROLE
    return batch.submit_service_job(
        jobName=name, jobQueue=q.name, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=share,
        serviceRequestPayload=json.dumps(p))["jobId"]


def test_a_job_s_sdk_finds_its_own_role_s_credentials_and_reads_s3_with_them(server, moto, tmp_path):
    import boto3
    s3 = boto3.client("s3", endpoint_url=moto.url, aws_access_key_id="x", aws_secret_access_key="y",
                      region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="data.txt", Body=b"the team's data")
    batch = server.client()
    q = make_queue(batch, "role", [ShareSpec("A", "RESERVE", 1)], env_max=1)
    out = tmp_path / "probe.json"
    job = submit(batch, q, "role-probe", "role_probe.py",
                 {"RESULT_FILE": str(out), "BUCKET": BUCKET, "KEY": "data.txt",
                  "AWS_ENDPOINT_URL_STS": moto.url},
                 channels={"train": f"s3://{BUCKET}/"})
    d = wait_status(batch, job, "SUCCEEDED")
    r = json.loads(out.read_text())
    # From the container endpoint, not the server's keys (which its environment holds).
    assert r["method"] == "container-role", r
    assert r["access_key"] != moto.server_env()["AWS_ACCESS_KEY_ID"], r
    assert r["arn"].endswith(":assumed-role/team-a/qm-role-probe"), r
    assert r["data"] == "the team's data", r
    assert "each attempt gets its job's RoleArn" in server.log_path.read_text()
    assert d["status"] == "SUCCEEDED"


# The requests moto lets through before it enforces IAM policies: the setup in `policed`.
POLICED_SETUP_REQUESTS = 9


def test_a_job_is_refused_a_bucket_its_role_may_not_read(start_server, tmp_path_factory, tmp_path):
    """moto enforcing IAM policies: the server's keys (an IAM user allowed sts:AssumeRole, no
    S3) assume team-a, whose policy reads one bucket; the job reads that one and is refused
    the other, which the server's own keys could not have read either."""
    import boto3
    missing = sdk_missing()
    if missing and os.environ.get("CI") != "true":
        pytest.skip(missing)
    moto = MotoServer(tmp_path_factory.mktemp("moto-policed"),
                      env={"INITIAL_NO_AUTH_ACTION_COUNT": str(POLICED_SETUP_REQUESTS)}).start()
    try:
        # No retry: moto counts every request it lets through unchecked.
        from botocore.config import Config
        kw = dict(endpoint_url=moto.url, region_name="us-east-1",
                  aws_access_key_id="AKIAQMSETUP000000000", aws_secret_access_key="setup",
                  config=Config(retries={"total_max_attempts": 1}))
        iam, s3 = boto3.client("iam", **kw), boto3.client("s3", **kw)
        allow = lambda actions, resources: json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": actions, "Resource": resources}]})
        iam.create_user(UserName="qm-server")
        iam.put_user_policy(UserName="qm-server", PolicyName="assume",
                            PolicyDocument=allow("sts:AssumeRole", "*"))
        key = iam.create_access_key(UserName="qm-server")["AccessKey"]
        iam.create_role(RoleName="team-a", AssumeRolePolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                     "Action": "sts:AssumeRole"}]}))
        iam.put_role_policy(RoleName="team-a", PolicyName="data", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:GetObject",
                 "Resource": "arn:aws:s3:::qm-e2e-ours/*"},
                {"Effect": "Allow", "Action": "sts:GetCallerIdentity", "Resource": "*"}]}))
        for bucket in ("qm-e2e-ours", "qm-e2e-theirs"):
            s3.create_bucket(Bucket=bucket)
            s3.put_object(Bucket=bucket, Key="data.txt", Body=f"{bucket} data".encode())
        env = dict(moto.server_env(), AWS_ACCESS_KEY_ID=key["AccessKeyId"],
                   AWS_SECRET_ACCESS_KEY=key["SecretAccessKey"])
        config = config_toml() + (
            f'[credentials]\nsource = "assume_role"\nsts_endpoint = "{moto.url}"\n'
            '[credentials.shares]\n"A" = ["arn:aws:iam::*:role/team-a"]\n')
        server = start_server(config=config, name="credentials-policed", env=env)
        try:
            batch = server.client()
            q = make_queue(batch, "policed", [ShareSpec("A", "RESERVE", 1)], env_max=1)
            out = tmp_path / "probe.json"
            job = submit(batch, q, "policed-probe", "role_probe.py",
                         {"RESULT_FILE": str(out), "BUCKET": "qm-e2e-ours", "KEY": "data.txt",
                          "REFUSED_BUCKET": "qm-e2e-theirs", "AWS_ENDPOINT_URL_STS": moto.url})
            wait_status(batch, job, "SUCCEEDED")
            r = json.loads(out.read_text())
            assert r["method"] == "container-role", r
            assert ":assumed-role/team-a/" in r["arn"], r
            assert r["data"] == "qm-e2e-ours data", r
            assert r["refused"] == "AccessDenied", r
        finally:
            server.close()
    finally:
        moto.stop()


def test_the_endpoint_answers_an_attempt_s_own_token_only_while_it_runs(server, moto, tmp_path):
    batch = server.client()
    q = make_queue(batch, "role-token", [ShareSpec("A", "RESERVE", 1), ShareSpec("B", "RESERVE", 1)],
                   env_max=2)
    job = submit(batch, q, "role-holder", "sleep_forever.py", {})
    wait_status(batch, job, "RUNNING")
    environ = job_environment(server, job)
    url, token = environ["AWS_CONTAINER_CREDENTIALS_FULL_URI"], environ["AWS_CONTAINER_AUTHORIZATION_TOKEN"]

    def get(u: str, t: str | None) -> tuple[int, dict]:
        req = urllib.request.Request(u, headers={"Authorization": t} if t is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    status, body = get(url, token)
    assert status == 200 and body["AccessKeyId"] and body["Token"] and body["Expiration"], body
    assert body["RoleArn"] == ROLE
    attempt = int(url.rsplit("/", 1)[1])
    other = url.rsplit("/", 1)[0] + f"/{attempt + 1000}"
    # A token one hex digit off (never the same digit: a token ending in "0" stays itself).
    tampered = token[:-1] + ("1" if token.endswith("0") else "0")
    for u, t in [(url, None), (url, tampered), (other, token)]:
        status, body = get(u, t)
        assert status == 403, (u, status, body)
    # Share B may not act as team-a: anyone who may submit could otherwise name any role.
    other_job = submit(batch, q, "role-thief", "sleep_forever.py", {}, share="B")
    wait_status(batch, other_job, "RUNNING")
    theirs = job_environment(server, other_job)
    status, body = get(theirs["AWS_CONTAINER_CREDENTIALS_FULL_URI"], theirs["AWS_CONTAINER_AUTHORIZATION_TOKEN"])
    assert status == 403 and "may not act as" in body.get("message", ""), body
    for j in (job, other_job):
        batch.terminate_service_job(jobId=j, reason="done")
        wait_status(batch, j, "FAILED")
    status, body = get(url, token)
    assert status == 403 and "holds no capacity" in body.get("message", ""), body


def job_environment(server, job_id: str) -> dict:
    """The environment of the running job's first process (the test runs as its user, or
    root)."""
    def pid():
        status, _, body = server.signed("GET", f"/qm/v1/jobs/{job_id}/attempt")
        hosts = json.loads(body).get("running", {}).get("hosts", []) if status == 200 else []
        return hosts[0].get("pid") if hosts else None
    raw = Path(f"/proc/{wait_for(pid, what='the job to run')}/environ").read_bytes()
    return dict(kv.split("=", 1) for kv in raw.decode().split("\0") if "=" in kv)


class _Metadata(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"the machine's role")

    def log_message(self, *args):
        pass


@pytest.fixture
def metadata_service():
    """A listener at 169.254.169.254:80 (an address added to the loopback device), as a cloud
    machine's metadata service would be; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root: adds 169.254.169.254 to the loopback device")
    added = subprocess.run(["ip", "addr", "add", "169.254.169.254/32", "dev", "lo"],
                           capture_output=True, text=True)
    if added.returncode != 0 and "File exists" not in added.stderr:
        pytest.skip(f"cannot add 169.254.169.254 to lo: {added.stderr.strip()}")
    httpd = http.server.HTTPServer(("169.254.169.254", 80), _Metadata)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield
    httpd.shutdown()
    httpd.server_close()
    if added.returncode == 0:
        subprocess.run(["ip", "addr", "del", "169.254.169.254/32", "dev", "lo"], check=False)


def test_a_job_under_its_own_uid_cannot_reach_the_metadata_service(metadata_service):
    with urllib.request.urlopen("http://169.254.169.254/", timeout=5) as r:
        assert r.read() == b"the machine's role"  # the server's user (root) can
    workdir = Path(tempfile.mkdtemp(prefix="qm-metadata-", dir="/tmp"))
    workdir.chmod(0o711)
    server = Server(workdir, config_toml(isolation="uid"), name="metadata").start()
    try:
        assert "cannot reach 169.254.169.254" in server.log_path.read_text(), server.log_tail()
        batch = server.client()
        q = make_queue(batch, "metadata", [ShareSpec("A", "RESERVE", 1)], env_max=1)
        probe = ("if exec 3<>/dev/tcp/169.254.169.254/80; then echo REACHED; else echo REFUSED; fi; "
                 "id -u")
        p = {"TrainingJobName": "metadata-probe", "RoleArn": ROLE,
             "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "unused",
                                        "ContainerEntrypoint": ["/bin/bash", "-c", probe]},
             "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
             "StoppingCondition": {"MaxRuntimeInSeconds": 60}}
        job = batch.submit_service_job(jobName="metadata-probe", jobQueue=q.name,
                                       serviceJobType="SAGEMAKER_TRAINING", quotaShareName="A",
                                       serviceRequestPayload=json.dumps(p))["jobId"]
        wait_status(batch, job, "SUCCEEDED")
        out = (server.jobs_dir / job / "attempts" / "1" / "stdout.log").read_text()
        assert out.splitlines()[0] == "REFUSED", out
        assert int(out.splitlines()[1]) >= 1000, out
    finally:
        try:
            server.close()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
