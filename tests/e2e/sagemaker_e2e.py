"""Helpers of the SageMaker Python SDK end-to-end test (test_sagemaker_sdk.py): a local S3
(moto's server, run as its own process) and the environment under which the real, unmodified
SDK (`sagemaker-train`, module `sagemaker.train`) submits through `qm serve` and stages its
files in that S3.

What the SDK needs to run without AWS (none of it is a patch of the SDK):

* an explicit `Session(boto_session=boto3.Session(region_name=...), default_bucket=...)`: the
  default `Session()` resolves the default bucket name from STS at a hard-coded regional URL;
* an explicit role ARN and `SAGEMAKER_VALIDATE_ROLE=false` (otherwise IAM is asked whether the
  role may train);
* `AWS_ENDPOINT_URL_IAM` (and `_STS`) at moto: uploading a channel asks IAM
  (`SimulatePrincipalPolicy`) whether the role can write the default bucket, and swallows the
  error, but only after botocore's retries against an unreachable endpoint;
* `AWS_ENDPOINT_URL_BATCH` at `qm serve` and the admin's key pair in `AWS_ACCESS_KEY_ID`/
  `AWS_SECRET_ACCESS_KEY`: `TrainingQueue` makes its Batch clients with
  `boto3.client("batch")` and nothing else (moto accepts any key pair, so the same one serves
  S3);
* telemetry opted out through a SageMaker user config (`SAGEMAKER_USER_CONFIG_OVERRIDE`): the
  SDK otherwise sends a request per call from a background thread.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
from botocore.config import Config

from qm_e2e import DEADLINE, REGION, ServerError, free_port, stop_process


def sdk_missing() -> str | None:
    """Why the SDK test cannot run here (a module that is not installed), or None.

    Asks the import system where the modules are without importing them (importing the SDK
    takes seconds and sets the root logger to INFO): a module that is installed but fails to
    import fails the test that imports it, instead of skipping it."""
    missing = []
    for module, package in (("sagemaker.train.aws_batch", "sagemaker-train"),
                            ("moto.server", "moto[server]"), ("flask", "moto[server]")):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            missing.append(f"{module} (from {package})")
    if missing:
        return ("the SageMaker SDK test needs sagemaker-train and moto[server] "
                "(tests/e2e/requirements.txt; scripts/e2e installs them); not installed: "
                + ", ".join(missing))
    return None


class MotoServer:
    """moto's server (S3, IAM, STS and the rest of its mocks) on a free loopback port, as a
    process of its own; `stop()` ends that process by its pid."""

    def __init__(self, workdir: Path, env: dict | None = None):
        self.workdir = Path(workdir)
        # Added to its environment (INITIAL_NO_AUTH_ACTION_COUNT: moto enforces IAM policies
        # after that many requests).
        self.extra_env = dict(env or {})
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / "moto.log"
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self, deadline: float = DEADLINE) -> "MotoServer":
        self._log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        print(f"[e2e] starting {' '.join(cmd)}", flush=True)
        # Its own credentials, so that nothing of the caller's AWS environment reaches it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(self.extra_env)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        end = time.monotonic() + deadline
        last = None
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise ServerError(f"moto's server exited with code {self.proc.returncode} "
                                  f"before answering\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/moto-api/", timeout=2) as r:
                    if r.status == 200:
                        return self
                    last = f"HTTP {r.status}"
            except (urllib.error.URLError, OSError) as e:
                last = repr(e)
            time.sleep(0.1)
        self.stop()
        raise ServerError(f"moto's server did not answer on {self.url} within {deadline:.0f}s "
                          f"(last: {last})\n{self.log_tail()}")

    def stop(self, grace: float = 5) -> None:
        stop_process(self.proc, grace)
        if self._log:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no moto log)"
        return f"--- moto log ({self.log_path}) ---\n{text[-chars:]}"

    def server_env(self) -> dict:
        """The environment of a `qm serve` whose S3 is this moto: the standard AWS variables."""
        return {
            "AWS_ENDPOINT_URL_S3": self.url,
            "AWS_ACCESS_KEY_ID": "qm-e2e-s3",
            "AWS_SECRET_ACCESS_KEY": "qm-e2e-s3-secret",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
        }

    def s3(self):
        """A boto3 S3 client of this moto (any key pair is accepted)."""
        return boto3.client("s3", region_name=REGION, endpoint_url=self.url,
                            aws_access_key_id="qm-e2e-test", aws_secret_access_key="unused",
                            config=Config(retries={"max_attempts": 2, "mode": "standard"}))


# -- S3 -----------------------------------------------------------------------------------


def split_s3(uri: str) -> tuple[str, str]:
    assert uri.startswith("s3://"), uri
    bucket, _, key = uri[len("s3://"):].partition("/")
    return bucket, key


def s3_keys(s3, uri: str) -> list[str]:
    """Every key under `uri` (a prefix)."""
    bucket, prefix = split_s3(uri)
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def s3_get(s3, uri: str) -> bytes | None:
    """The object at `uri`, or None when there is none."""
    bucket, key = split_s3(uri)
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


def untar(data: bytes) -> dict[str, bytes]:
    """The regular files of a (gzipped) tar archive, by their path without a leading `./`."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for member in tar.getmembers():
            if member.isfile():
                name = member.name[2:] if member.name.startswith("./") else member.name
                out[name] = tar.extractfile(member).read()
    return out


# -- the SDK's environment ----------------------------------------------------------------


SAGEMAKER_USER_CONFIG = """SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
"""


def sdk_environment(server, moto: MotoServer, workdir: Path) -> dict:
    """Environment variables under which the SDK's own clients reach `server` (Batch, as its
    admin) and `moto` (S3, IAM, STS) and nothing of AWS."""
    workdir = Path(workdir)
    config = workdir / "sagemaker-user-config.yaml"
    config.write_text(SAGEMAKER_USER_CONFIG)
    keys = server.keys()
    return {
        "AWS_ACCESS_KEY_ID": keys.access_key_id,
        "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL_BATCH": server.url,
        "AWS_ENDPOINT_URL_S3": moto.url,
        "AWS_ENDPOINT_URL_IAM": moto.url,
        "AWS_ENDPOINT_URL_STS": moto.url,
        # No shared config or credentials file of whoever runs the tests.
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        "AWS_MAX_ATTEMPTS": "2",
        "SAGEMAKER_VALIDATE_ROLE": "false",
        "SAGEMAKER_USER_CONFIG_OVERRIDE": str(config),
    }


@contextlib.contextmanager
def sdk_env(server, moto: MotoServer, workdir: Path):
    """`sdk_environment` in os.environ for the duration (AWS_PROFILE and the other AWS_
    variables removed), with boto3's default session made afresh on the way in and out."""
    saved = dict(os.environ)
    for k in list(os.environ):
        if k.startswith("AWS_"):
            del os.environ[k]
    os.environ.update(sdk_environment(server, moto, workdir))
    boto3.DEFAULT_SESSION = None
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        boto3.DEFAULT_SESSION = None
