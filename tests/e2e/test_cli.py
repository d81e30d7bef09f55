"""Smoke test of the real AWS CLI (`aws batch ... --endpoint-url`), signing with the admin key
pair the server wrote to `<data-dir>/credentials`, found by the CLI's standard chain
(`AWS_SHARED_CREDENTIALS_FILE`, `AWS_PROFILE=qm-admin`) as the server's banner says."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qm_e2e import UNIT, payload, unique, wait_for


def aws_cli() -> str:
    beside = Path(sys.executable).parent / "aws"
    return str(beside) if beside.exists() else (shutil.which("aws") or "aws")


@pytest.fixture
def aws(server):
    env = server.cli_env(AWS_PAGER="")

    def run(*args, ok=True):
        cmd = [aws_cli(), "batch", *args, "--endpoint-url", server.url, "--output", "json"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        if ok:
            assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}"
            return json.loads(r.stdout) if r.stdout.strip() else {}
        return r

    return run


def test_the_aws_cli_drives_the_server(aws, server, tmp_path):
    base = unique("cli")
    policy = aws("create-scheduling-policy", "--name", f"{base}-sp",
                 "--quota-share-policy", "idleResourceAssignmentStrategy=FIFO")
    assert policy["name"] == f"{base}-sp"

    env = aws("create-service-environment", "--service-environment-name", f"{base}-se",
              "--service-environment-type", "SAGEMAKER_TRAINING",
              "--capacity-limits", f"maxCapacity=1,capacityUnit={UNIT}")
    assert env["serviceEnvironmentName"] == f"{base}-se"
    wait_for(lambda: aws("describe-service-environments", "--service-environments", f"{base}-se")
             ["serviceEnvironments"][0]["status"] == "VALID", what="the environment to be VALID")

    aws("create-job-queue", "--job-queue-name", f"{base}-jq", "--job-queue-type", "SAGEMAKER_TRAINING",
        "--priority", "1", "--scheduling-policy-arn", policy["arn"],
        "--service-environment-order", f"order=1,serviceEnvironment={base}-se")
    wait_for(lambda: aws("describe-job-queues", "--job-queues", f"{base}-jq")["jobQueues"][0]["status"] == "VALID",
             what="the queue to be VALID")

    share = aws("create-quota-share", "--cli-input-json", json.dumps({
        "quotaShareName": "team", "jobQueue": f"{base}-jq",
        "capacityLimits": [{"maxCapacity": 1, "capacityUnit": UNIT}],
        "resourceSharingConfiguration": {"strategy": "RESERVE"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}))
    assert share["quotaShareArn"].endswith(f"job-queue/{base}-jq/quota-share/team")
    listed = aws("list-quota-shares", "--job-queue", f"{base}-jq")
    assert [s["quotaShareName"] for s in listed["quotaShares"]] == ["team"]
    wait_for(lambda: aws("describe-quota-share", "--quota-share-arn", share["quotaShareArn"])["status"] == "VALID",
             what="the share to be VALID")

    out = tmp_path / "env.json"
    job = aws("submit-service-job", "--job-name", "cli-job", "--job-queue", f"{base}-jq",
              "--service-job-type", "SAGEMAKER_TRAINING", "--quota-share-name", "team",
              "--scheduling-priority", "5",
              "--service-request-payload", json.dumps(payload(
                  "env_dump.py", env={"DUMP_FILE": str(out)}, token=server.token, name="cli-job")))
    assert job["jobName"] == "cli-job"
    done = wait_for(lambda: (lambda d: d if d["status"] in ("SUCCEEDED", "FAILED") else None)(
        aws("describe-service-job", "--job-id", job["jobId"])), what="the CLI's job to finish")
    assert done["status"] == "SUCCEEDED", done
    assert done["schedulingPriority"] == 5
    assert json.loads(out.read_text())["env"]["QM_JOB_ID"] == job["jobId"]

    r = aws("describe-service-job", "--job-id", "00000000-0000-0000-0000-000000000000", ok=False)
    assert r.returncode != 0 and "ClientException" in r.stderr, r.stderr


def test_the_aws_cli_is_refused_with_a_wrong_secret_an_unknown_key_or_no_credentials(server, tmp_path):
    admin = server.keys()
    base = {k: v for k, v in server.cli_env(AWS_PAGER="").items()
            if k not in ("AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE")}
    base["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "none")

    def refused(env, *extra):
        cmd = [aws_cli(), "batch", "describe-service-environments", "--endpoint-url", server.url,
               *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode != 0, r.stdout
        return r.stderr

    wrong = dict(base, AWS_ACCESS_KEY_ID=admin.access_key_id, AWS_SECRET_ACCESS_KEY="wrong")
    assert "InvalidSignatureException" in refused(wrong)
    unknown = dict(base, AWS_ACCESS_KEY_ID="QMAKNOSUCHKEY0000000", AWS_SECRET_ACCESS_KEY="x")
    assert "UnrecognizedClientException" in refused(unknown)
    assert "MissingAuthenticationTokenException" in refused(base, "--no-sign-request")
