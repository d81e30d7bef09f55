"""Helpers of the end-to-end tests: a `Server` that runs the real `qm serve`, boto3 clients and
SigV4-signed raw requests (as the server's admin or as principals it creates), payload builders for the job programs in `jobs/`, a polling `wait_for`, the AWS demo resources
(spec/aws-batch-quota.md §8) and readers of the jobs' progress files.

Everything waits with a deadline and says what it was waiting for; no test asserts on timing.
"""

from __future__ import annotations

import atexit
import configparser
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from qm_cgroups import remove_cgroups

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
JOBS = HERE / "jobs"
REGION = "us-east-1"
ACCOUNT = "123456789012"
UNIT = "ml.g5.xlarge"
# Every job process gets this variable (through the payload's Environment) with its server's
# token, so that teardown can find and kill leftovers of that server only.
TOKEN_VAR = "QM_E2E_TOKEN"
# How long a test waits for something the server should do "soon". Generous: CI is a 2-core
# machine that may be building or running other things at the same time.
DEADLINE = float(os.environ.get("QM_E2E_DEADLINE", "60"))

# The profile of the admin key pair the server writes to `<data-dir>/credentials` on first start.
ADMIN_PROFILE = "qm-admin"

TERMINAL = ("SUCCEEDED", "FAILED")
DISPATCHED = ("SCHEDULED", "STARTING", "RUNNING")


def attempt_usage(server, job_id: str) -> list[dict]:
    """What each ended attempt of `job_id` used (`GET /qm/v1/jobs/{job}/attempt`, `usage`)."""
    status, _, body = server.signed("GET", f"/qm/v1/jobs/{job_id}/attempt")
    assert status == 200, body
    return json.loads(body).get("usage", [])


def qm_bin() -> Path:
    return Path(os.environ.get("QM_BIN", REPO / "target" / "debug" / "qm"))


def run_qm(server, *args: str, ok: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """`qm ARGS` as the server's admin; with `ok`, it must succeed."""
    cmd = [str(qm_bin()), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=server.cli_env())
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}"
    return r


# The file:// root every test server may read channels from and upload models and
# checkpoints to ([storage] file_roots): one per test process, readable by job uids.
STORAGE_ROOT = Path(tempfile.mkdtemp(prefix="qm-e2e-storage-"))
STORAGE_ROOT.chmod(0o755)
atexit.register(shutil.rmtree, STORAGE_ROOT, ignore_errors=True)


def storage_uri(*parts: str) -> str:
    """A file:// URI under STORAGE_ROOT."""
    return "file://" + str(STORAGE_ROOT.joinpath(*parts))


def config_toml(count: int = 3, unit: str = UNIT, grace: int = 2, gpus: int = 0,
                isolation: str = "none") -> str:
    """A local server's configuration. Jobs run as the server's user unless `isolation` says
    otherwise: most job programs are this checkout's scripts run by its venv's Python, which
    a job uid may not read, and a root server refuses to start rather than run jobs as root
    unasked (issue 40)."""
    return f"""region = "{REGION}"
account_id = "{ACCOUNT}"
[storage]
file_roots = ["{STORAGE_ROOT}"]
[executor]
kind = "local"
isolation = "{isolation}"
stop_grace_seconds = {grace}
[[executor.pool]]
instance_type = "{unit}"
count = {count}
gpus_per_instance = {gpus}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerError(RuntimeError):
    pass


@dataclass(frozen=True)
class Keys:
    """An access key pair, and the principal it belongs to."""
    name: str
    access_key_id: str
    secret_access_key: str

    def credentials(self) -> Credentials:
        return Credentials(self.access_key_id, self.secret_access_key)


def read_credentials(path: Path, profile: str = ADMIN_PROFILE) -> Keys:
    """A profile of an AWS shared-credentials file (INI), as the AWS SDKs read it."""
    ini = configparser.ConfigParser()
    if not ini.read(path):
        raise FileNotFoundError(path)
    section = ini[profile]
    return Keys(profile, section["aws_access_key_id"], section["aws_secret_access_key"])


def sign(method: str, url: str, keys: Keys, body: bytes | None = None,
         headers: dict | None = None, region: str = REGION, service: str = "batch",
         at: datetime.datetime | None = None) -> dict:
    """The headers of a request signed with SigV4 by botocore (as boto3 signs), at `at` (UTC,
    default now) for `region` and `service`: the given headers plus X-Amz-Date and
    Authorization."""
    req = AWSRequest(method=method, url=url, data=body or b"", headers=dict(headers or {}))
    signer = SigV4Auth(keys.credentials(), service, region)
    if at is None:
        signer.add_auth(req)
    else:
        # botocore reads the clock in one place; a signature of another moment is made by
        # moving that clock, not by re-implementing the signer.
        naive = at.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        with mock.patch("botocore.auth.get_current_datetime", lambda *a, **k: naive):
            signer.add_auth(req)
    return dict(req.headers.items())


def send(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
         timeout: float = 30) -> tuple[int, dict, bytes]:
    """One HTTP request with urllib; an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url, data=body if body else None, headers=dict(headers or {}),
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def encode_body(body, headers: dict | None) -> tuple[bytes | None, dict]:
    """A JSON-able body as JSON (with its Content-Type, unless `headers` name one); bytes and
    str as they are."""
    headers = dict(headers or {})
    if body is None or isinstance(body, bytes):
        return body, headers
    if isinstance(body, str):
        return body.encode(), headers
    if not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    return json.dumps(body).encode(), headers


def aws_error(headers, body: bytes) -> tuple[str, str]:
    """(code, message) of an AWS-shaped error answer."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        data = {}
    code = (data.get("__type") or headers.get("x-amzn-ErrorType") or "").split("#")[-1].split(":")[0]
    return code, data.get("message") or data.get("Message") or ""


def stop_process(proc: subprocess.Popen | None, grace: float) -> None:
    """SIGTERM to a process this test started, then SIGKILL after `grace` seconds."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


class Server:
    """One `qm serve` process on its own port and data directory.

    `kill9()` and `restart()` keep the data directory and the port; `close()` (teardown) stops
    the server and kills every job process it left behind.
    """

    def __init__(self, workdir: Path, config: str | None = None, name: str = "qm",
                 env: dict | None = None, args=()):
        self.workdir = Path(workdir)
        # Extra arguments of `qm serve` (e.g. --no-auth).
        self.args = [str(a) for a in args]
        # Extra environment of the server process (e.g. SLURM_CONF for the Slurm executor).
        self.env = dict(env or {})
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "config.toml"
        self.config_path.write_text(config if config is not None else config_toml())
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = f"{name}-{uuid.uuid4().hex[:12]}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log = None
        # The admin's key pair, read from `credentials_path` once the server is up; the key
        # pairs of the principals the tests created, by name.
        self.credentials_path = self.data_dir / "credentials"
        self.admin: Keys | None = None
        self.principals: dict[str, Keys] = {}

    @property
    def auth(self) -> bool:
        return "--no-auth" not in self.args

    @property
    def jobs_dir(self) -> Path:
        """Where the server keeps job directories: `<data dir>/jobs`, unless its banner says
        they went elsewhere (isolated jobs that could not reach the data dir, issue 40)."""
        text = Path(self.log_path).read_text(errors="replace")
        m = re.search(r"its directory under (\S+):", text)
        return Path(m.group(1)) if m else self.data_dir / "jobs"

    # -- process control ------------------------------------------------------------------

    def start(self, deadline: float = DEADLINE) -> "Server":
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        self.starts += 1
        self.log_path = self.workdir / f"server-{self.starts}.log"
        self._log = open(self.log_path, "wb")
        cmd = [
            str(qm_bin()), "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--data-dir", str(self.data_dir),
            "--config", str(self.config_path),
            *self.args,
        ]
        env = dict(os.environ, **self.env, **{TOKEN_VAR: self.token})
        env.setdefault("RUST_BACKTRACE", "1")
        print(f"[e2e] starting {' '.join(cmd)}", flush=True)
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )
        self.wait_healthy(deadline)
        if self.auth:
            self.admin = self.wait_credentials()
        return self

    def wait_credentials(self, deadline: float = 10) -> Keys:
        """The admin key pair the server wrote on its first start (and keeps afterwards)."""
        end = time.monotonic() + deadline
        while True:
            try:
                return read_credentials(self.credentials_path)
            except (OSError, KeyError, configparser.Error) as e:
                if time.monotonic() >= end:
                    raise ServerError(
                        f"qm serve answers /healthz but {self.credentials_path} has no "
                        f"[{ADMIN_PROFILE}] key pair ({e!r})\n{self.log_tail()}") from e
            time.sleep(0.1)

    def wait_healthy(self, deadline: float = DEADLINE) -> None:
        end = time.monotonic() + deadline
        last = None
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"qm serve exited with code {self.proc.returncode} before answering "
                    f"/healthz\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except (urllib.error.URLError, OSError) as e:
                last = repr(e)
            time.sleep(0.1)
        self.kill9()
        raise ServerError(
            f"qm serve did not answer 200 on {self.url}/healthz within {deadline:.0f}s "
            f"(last: {last})\n{self.log_tail()}"
        )

    def kill9(self) -> None:
        """SIGKILL the server alone (its job processes are left as orphans, as after a crash)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._close_log()

    def restart(self, deadline: float = DEADLINE) -> "Server":
        if self.proc and self.proc.poll() is None:
            self.kill9()
        return self.start(deadline)

    def stop(self, grace: float = 15) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds. Returns the exit code."""
        stop_process(self.proc, grace)
        self._close_log()
        return self.proc.returncode if self.proc else None

    def close(self) -> None:
        self.stop(grace=5)
        kill_job_processes(self.token)
        # Jobs outlive their server (their supervisors are killed above, by the token): a job
        # whose payload did not carry the token (a fixture's) is found by its data dir's marker.
        kill_marked_processes(self.data_dir)
        remove_cgroups(self.data_dir)
        # Job directories a root server kept outside its data dir (under /var/lib/qm-jobs,
        # where the test's temporary directory does not reach) go with the test's server.
        try:
            jobs = self.jobs_dir
        except (AttributeError, OSError):
            jobs = None
        if jobs is not None and jobs.parent.parent == Path("/var/lib/qm-jobs"):
            shutil.rmtree(jobs.parent, ignore_errors=True)

    def _close_log(self) -> None:
        if self._log:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            text = Path(self.log_path).read_text(errors="replace")
        except (OSError, AttributeError):
            return "(no server log)"
        return f"--- server log ({self.log_path}) ---\n{text[-chars:]}"

    # -- clients --------------------------------------------------------------------------

    def keys(self, principal: str | None = None) -> Keys:
        """The key pair of `principal` (default: the admin). A principal other than the admin is
        created through the admin API the first time it is asked for."""
        if not self.auth:
            return Keys("anonymous", "unused", "unused")
        if principal is None or principal == ADMIN_PROFILE:
            assert self.admin, "the server has not been started"
            return self.admin
        if principal not in self.principals:
            status, headers, body = self.signed("POST", "/qm/v1/principals", {"name": principal})
            if status != 200:
                raise ServerError(f"POST /qm/v1/principals {{name: {principal}}} answered "
                                  f"HTTP {status}: {body[:500]!r}")
            out = json.loads(body)
            assert out["name"] == principal, out
            self.principals[principal] = Keys(principal, out["accessKeyId"], out["secretAccessKey"])
        return self.principals[principal]

    def signed(self, method: str, path: str, body=None, headers: dict | None = None,
               principal: str | None = None, keys: Keys | None = None,
               timeout: float = 30) -> tuple[int, dict, bytes]:
        """A raw request to this server signed with SigV4 as `principal` (default: the admin),
        or with `keys`. A dict body is sent as JSON. Returns (status, headers, body); an HTTP
        error status is returned, not raised."""
        data, headers = encode_body(body, headers)
        url = self.url + path
        return send(method, url, data,
                    sign(method, url, keys or self.keys(principal), data, headers), timeout)

    def cli_env(self, **extra) -> dict:
        """The environment of a `qm` or `aws` command that talks to this server as its admin:
        the standard AWS chain pointed at the server's credentials file, nothing else."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") or k == "AWS_PAGER"}
        env.update(AWS_SHARED_CREDENTIALS_FILE=str(self.credentials_path),
                   AWS_PROFILE=ADMIN_PROFILE, AWS_CONFIG_FILE=str(self.workdir / "no-aws-config"),
                   AWS_DEFAULT_REGION=REGION, QM_ENDPOINT=self.url)
        env.update(extra)
        return env

    def client(self, validate: bool = True, principal: str | None = None,
               keys: Keys | None = None):
        """A boto3 Batch client for this server, signing as `principal` (default: the admin;
        created at first use; the name usage is accounted to) or with `keys`.
        `validate=False` turns botocore's own parameter validation off, so that invalid
        requests reach the server."""
        keys = keys or self.keys(principal)
        return boto3.client(
            "batch",
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=keys.access_key_id,
            aws_secret_access_key=keys.secret_access_key,
            config=Config(
                parameter_validation=validate,
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=5,
                read_timeout=30,
            ),
        )


def processes_with(variable: str) -> list[int]:
    """Pids of live (not zombie) processes whose environment holds `variable` (`NAME=value`)."""
    needle = variable.encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if needle in environ.split(b"\0") and ") Z" not in stat:
            pids.append(int(entry.name))
    return pids


def kill_all(pids: list[int]) -> list[int]:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def job_processes(token: str) -> list[int]:
    """Pids of live processes whose environment carries this server's token."""
    return processes_with(f"{TOKEN_VAR}={token}")


def kill_job_processes(token: str) -> list[int]:
    return kill_all(job_processes(token))


def kill_marked_processes(data_dir: Path) -> list[int]:
    """SIGKILL to every live process marked with this data dir (`QM_DATA_DIR`, as the server
    marks every job process)."""
    try:
        marker = f"QM_DATA_DIR={Path(data_dir).resolve()}"
    except OSError:
        return []
    return kill_all(processes_with(marker))


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return ") Z" not in stat  # a zombie has exited


# -- waiting ------------------------------------------------------------------------------


class WaitTimeout(AssertionError):
    pass


def wait_for(predicate, timeout: float = DEADLINE, what: str = "condition", batch=None,
             job_ids=(), interval: float = 0.2):
    """Poll `predicate()` until it returns a truthy value, which is returned. On timeout, fail
    with `what` and the last DescribeServiceJob of each of `job_ids` (when `batch` is given)."""
    end = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last_exc = None
        except ClientError as e:
            last_exc = e
        if time.monotonic() >= end:
            break
        time.sleep(interval)
    details = []
    if last_exc is not None:
        details.append(f"last error: {last_exc!r}")
    if batch is not None:
        for jid in ([job_ids] if isinstance(job_ids, str) else job_ids):
            try:
                details.append(json.dumps(describe_brief(batch.describe_service_job(jobId=jid)),
                                          indent=1, default=str))
            except ClientError as e:
                details.append(f"{jid}: {e!r}")
    raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}\n" + "\n".join(details))


def describe_brief(job: dict) -> dict:
    keep = ("jobId", "jobName", "status", "statusReason", "schedulingPriority", "quotaShareName",
            "isTerminated", "attempts", "latestAttempt", "preemptionSummary", "capacityUsage",
            "createdAt", "scheduledAt", "startedAt", "stoppedAt")
    return {k: job[k] for k in keep if k in job}


def wait_status(batch, job_id: str, statuses, timeout: float = DEADLINE, reason_prefix=None):
    """Wait until the job has one of `statuses` (and, if given, a statusReason starting with one
    of `reason_prefix`); returns its DescribeServiceJob."""
    statuses = (statuses,) if isinstance(statuses, str) else tuple(statuses)
    prefixes = (reason_prefix,) if isinstance(reason_prefix, str) else reason_prefix

    def check():
        job = batch.describe_service_job(jobId=job_id)
        if job["status"] not in statuses:
            return None
        if prefixes and not (job.get("statusReason") or "").startswith(tuple(prefixes)):
            return None
        return job

    what = f"job {job_id} to be {'/'.join(statuses)}"
    if prefixes:
        what += f" with a reason starting {' or '.join(prefixes)}"
    return wait_for(check, timeout, what, batch=batch, job_ids=[job_id])


def wait_preempted(batch, job_id: str, count: int = 1, statuses=("RUNNABLE",),
                   timeout: float = DEADLINE) -> dict:
    """Wait until the job is back in `statuses` and its preemptionSummary counts `count`
    preemptions (the summary may lag the status until the preempted process has exited)."""
    statuses = (statuses,) if isinstance(statuses, str) else tuple(statuses)

    def check():
        job = batch.describe_service_job(jobId=job_id)
        done = (job.get("preemptionSummary") or {}).get("preemptedAttemptCount", 0)
        return job if job["status"] in statuses and done >= count else None

    return wait_for(check, timeout, f"job {job_id} to be {'/'.join(statuses)} after {count} preemption(s)",
                    batch=batch, job_ids=[job_id])


def still(batch, job_id: str, status: str, seconds: float = 3.0) -> dict:
    """Assert the job stays in `status` for `seconds` (for things that must NOT happen)."""
    end = time.monotonic() + seconds
    while True:
        job = batch.describe_service_job(jobId=job_id)
        assert job["status"] == status, (
            f"job {job['jobName']} should have stayed {status}:\n"
            + json.dumps(describe_brief(job), indent=1, default=str)
        )
        if time.monotonic() >= end:
            return job
        time.sleep(0.25)


def wait_valid(describe, what: str, timeout: float = DEADLINE) -> dict:
    """Poll a Describe call until the resource's status is VALID, as the AWS notebook does;
    INVALID fails at once."""
    def check():
        item = describe()
        if item is None:
            return None
        status = item.get("status")
        if status == "INVALID":
            raise AssertionError(f"{what} became INVALID: {item}")
        return item if status == "VALID" else None

    return wait_for(check, timeout, f"{what} to be VALID")


def error_of(excinfo) -> tuple[str, str, int]:
    e = excinfo.value
    return (e.response["Error"]["Code"], e.response["Error"].get("Message", ""),
            e.response["ResponseMetadata"]["HTTPStatusCode"])


# -- resources ----------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def share_arn(queue_arn: str, share: str) -> str:
    return f"{queue_arn}/quota-share/{share}"


@dataclass
class ShareSpec:
    name: str
    strategy: str = "LEND_AND_BORROW"
    limit: int = 1
    borrow_limit: int | None = None
    in_share_preemption: str = "DISABLED"
    unit: str = UNIT
    tags: dict | None = None

    def request(self, queue: str) -> dict:
        sharing = {"strategy": self.strategy}
        if self.borrow_limit is not None:
            sharing["borrowLimit"] = self.borrow_limit
        req = {
            "quotaShareName": self.name,
            "jobQueue": queue,
            "capacityLimits": [{"maxCapacity": self.limit, "capacityUnit": self.unit}],
            "resourceSharingConfiguration": sharing,
            "preemptionConfiguration": {"inSharePreemption": self.in_share_preemption},
        }
        if self.tags:
            req["tags"] = self.tags
        return req


@dataclass
class Queue:
    """A scheduling policy + service environment + job queue + shares, with unique names."""
    name: str
    arn: str
    env_name: str
    env_arn: str
    policy_name: str
    policy_arn: str
    shares: dict = field(default_factory=dict)  # share name -> ARN


def create_environment(batch, name: str, max_capacity: int = 3, unit: str = UNIT) -> str:
    arn = batch.create_service_environment(
        serviceEnvironmentName=name,
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": max_capacity, "capacityUnit": unit}],
    )["serviceEnvironmentArn"]
    wait_valid(lambda: (batch.describe_service_environments(serviceEnvironments=[name])
                        ["serviceEnvironments"] or [None])[0], f"service environment {name}")
    return arn


def create_policy(batch, name: str) -> str:
    return batch.create_scheduling_policy(
        name=name, quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})["arn"]


def create_queue(batch, name: str, env_name: str, policy_arn: str) -> str:
    arn = batch.create_job_queue(
        jobQueueName=name,
        jobQueueType="SAGEMAKER_TRAINING",
        priority=1,
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": env_name}],
        schedulingPolicyArn=policy_arn,
    )["jobQueueArn"]
    wait_valid(lambda: (batch.describe_job_queues(jobQueues=[name])["jobQueues"] or [None])[0],
               f"job queue {name}")
    return arn


def create_share(batch, queue: str, spec: ShareSpec) -> str:
    arn = batch.create_quota_share(**spec.request(queue))["quotaShareArn"]
    wait_valid(lambda: batch.describe_quota_share(quotaShareArn=arn), f"quota share {spec.name}")
    return arn


def make_queue(batch, prefix: str, shares: list[ShareSpec], env_max: int = 3,
               unit: str = UNIT) -> Queue:
    base = unique(prefix)
    env_name, policy_name, queue_name = f"{base}-se", f"{base}-sp", f"{base}-jq"
    env_arn = create_environment(batch, env_name, env_max, unit)
    policy_arn = create_policy(batch, policy_name)
    queue_arn = create_queue(batch, queue_name, env_name, policy_arn)
    q = Queue(queue_name, queue_arn, env_name, env_arn, policy_name, policy_arn)
    for spec in shares:
        q.shares[spec.name] = create_share(batch, queue_name, spec)
    return q


def demo_setup(batch, prefix: str = "demo") -> Queue:
    """The AWS demo's resources (spec §8): SE max 3 × ml.g5.xlarge; QS1 LEND_AND_BORROW borrow
    200 % with in-share preemption; QS2 LEND; QS3 RESERVE; each 1 × ml.g5.xlarge."""
    return make_queue(batch, prefix, [
        ShareSpec("QS1", "LEND_AND_BORROW", 1, borrow_limit=200, in_share_preemption="ENABLED"),
        ShareSpec("QS2", "LEND", 1),
        ShareSpec("QS3", "RESERVE", 1),
    ], env_max=3)


# -- jobs ---------------------------------------------------------------------------------


def payload(script: str, *, args=(), env: dict | None = None, hps: dict | None = None,
            count: int = 1, unit: str = UNIT, max_runtime: int = 300, name: str = "job",
            token: str | None = None, entrypoint: bool = True, channels: dict | None = None) -> dict:
    """A SageMaker CreateTrainingJob request that runs `jobs/<script>` with this interpreter."""
    environment = dict(env or {})
    if token:
        environment[TOKEN_VAR] = token
    algo = {"TrainingInputMode": "File", "TrainingImage": "unused"}
    if entrypoint:
        algo["ContainerEntrypoint"] = [sys.executable, str(JOBS / script)]
        if args:
            algo["ContainerArguments"] = [str(a) for a in args]
    p = {
        "TrainingJobName": name,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/x",
        "AlgorithmSpecification": algo,
        "ResourceConfig": {"InstanceType": unit, "InstanceCount": count, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": storage_uri("output")},
        "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime},
        "Environment": environment,
    }
    if hps:
        p["HyperParameters"] = hps
    if channels:
        p["InputDataConfig"] = [
            {"ChannelName": n, "DataSource": {"S3DataSource": {"S3Uri": uri, "S3DataType": "S3Prefix"}}}
            for n, uri in channels.items()]
    return p


def submit_training(batch, jobs, q, share: str, name: str, *, algorithm: dict, hps: dict,
                    train_uri: str, checkpoint_uri: str | None = None, env: dict | None = None,
                    priority: int = 0) -> str:
    """Submits a SageMaker training job with one channel `train`, its model going to
    storage_uri("models"), and checkpoints to `checkpoint_uri` if given; `jobs` terminates it
    at teardown."""
    p = {
        "TrainingJobName": name,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", **algorithm},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3Uri": train_uri, "S3DataType": "S3Prefix"}}}],
        "OutputDataConfig": {"S3OutputPath": storage_uri("models")},
        "HyperParameters": hps,
        "Environment": dict(env or {}),
        "StoppingCondition": {"MaxRuntimeInSeconds": 300},
    }
    if checkpoint_uri:
        p["CheckpointConfig"] = {"S3Uri": checkpoint_uri}
    out = batch.submit_service_job(
        jobName=name, jobQueue=q.name, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=share,
        schedulingPriority=priority, serviceRequestPayload=json.dumps(p))
    jobs.ids.append(out["jobId"])
    return out["jobId"]


class Jobs:
    """Submits jobs for one test and cleans up after it: at teardown every job it submitted that
    is not finished is terminated, and the test waits until they are, so the next test on the
    same server starts with the executor's pool free."""

    def __init__(self, batch, server: Server, tmp: Path):
        self.batch = batch
        self.server = server
        self.tmp = Path(tmp)
        self.ids: list[str] = []

    def file(self, name: str) -> Path:
        return self.tmp / name

    def submit(self, queue: Queue | str, share: str | None, name: str, script: str = "sleep_forever.py",
               *, priority: int | None = None, args=(), env=None, hps=None, count: int = 1,
               unit: str = UNIT, max_runtime: int = 300, retry=None, timeout=None,
               preemption_retries=None, client_token=None, extra=None, channels=None) -> str:
        req = {
            "jobName": name,
            "jobQueue": queue.name if isinstance(queue, Queue) else queue,
            "serviceJobType": "SAGEMAKER_TRAINING",
            "serviceRequestPayload": json.dumps(payload(
                script, args=args, env=env, hps=hps, count=count, unit=unit,
                max_runtime=max_runtime, name=name.replace("_", "-"), token=self.server.token,
                channels=channels)),
        }
        if share is not None:
            req["quotaShareName"] = share
        if priority is not None:
            req["schedulingPriority"] = priority
        if retry is not None:
            req["retryStrategy"] = retry
        if timeout is not None:
            req["timeoutConfig"] = {"attemptDurationSeconds": timeout}
        if preemption_retries is not None:
            req["preemptionConfiguration"] = {"preemptionRetriesBeforeTermination": preemption_retries}
        if client_token is not None:
            req["clientToken"] = client_token
        req.update(extra or {})
        out = self.batch.submit_service_job(**req)
        self.ids.append(out["jobId"])
        return out["jobId"]

    def checkpointing(self, queue, share, name, *, priority=None, target=10, pause_at=3,
                      gate: Path | None = None, step_seconds=0.1, lock=True, **kw) -> str:
        env = {
            "PROGRESS_FILE": str(self.file(f"{name}.progress")),
            "TARGET_STEPS": str(target),
            "STEP_SECONDS": str(step_seconds),
        }
        if gate is not None and pause_at is not None:
            env["PAUSE_AT"] = str(pause_at)
            env["GATE_FILE"] = str(gate)
        if lock:
            env["LOCK_FILE"] = str(self.file(f"{name}.lock"))
        return self.submit(queue, share, name, "checkpointing.py", priority=priority, env=env, **kw)

    def sleeper(self, queue, share, name, *, priority=None, ignore_sigterm=False, **kw) -> str:
        env = {"PROGRESS_FILE": str(self.file(f"{name}.progress")),
               "PID_FILE": str(self.file(f"{name}.pid"))}
        env.update(kw.pop("env", None) or {})
        return self.submit(queue, share, name, "sleep_forever.py", priority=priority, env=env,
                           args=["--ignore-sigterm"] if ignore_sigterm else (), **kw)

    def progress(self, name: str) -> list[tuple[str, str, int]]:
        return read_progress(self.file(f"{name}.progress"))

    def wait_started(self, name: str, times: int = 1) -> None:
        """Wait until the job's program has recorded its `times`-th start (a RUNNING status only
        says the process was spawned, not that the script runs and handles SIGTERM yet)."""
        wait_for(lambda: len(events(self.progress(name), "start")) >= times,
                 what=f"{name} to start {times} time(s): {self.progress(name)}")

    def pid(self, name: str) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int(self.file(f"{name}.pid").read_text())
        return None

    def cleanup(self) -> None:
        if not self.ids:
            return
        try:
            live = [j for j in self.ids
                    if self.batch.describe_service_job(jobId=j)["status"] not in TERMINAL]
            for i in range(0, len(live), 50):
                self.batch.terminate_service_jobs(jobs=live[i:i + 50], reason="test teardown")
            for j in live:
                wait_status(self.batch, j, TERMINAL)
        except Exception as e:  # teardown must not hide the test's own failure
            print(f"[e2e] cleanup of jobs failed: {e!r}", flush=True)


def read_progress(path: Path) -> list[tuple[str, str, int]]:
    """Lines of a job's progress file as (event, value, pid)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        pid = next((int(p[4:]) for p in parts if p.startswith("pid=")), -1)
        value = " ".join(p for p in parts[1:] if not p.startswith(("pid=", "attempt=")))
        out.append((parts[0], value, pid))
    return out


def events(progress, kind: str) -> list[str]:
    return [v for e, v, _ in progress if e == kind]


def line(job: dict) -> str:
    """`jobName (priority: n): STATUS (reason)`, as the AWS notebook prints a job, plus the
    newest preemption when there was one."""
    reason = job.get("statusReason") or ""
    s = f"{job['jobName']} (priority: {job.get('schedulingPriority', 0)}): {job['status']}"
    if reason:
        s += f" ({reason})"
    summary = job.get("preemptionSummary") or {}
    recent = summary.get("recentPreemptedAttempts") or []
    if recent:
        s += (f" [preempted {summary.get('preemptedAttemptCount')}x; latest: "
              f"{recent[0].get('statusReason')}]")
    return s


# -- Slurm --------------------------------------------------------------------------------

SLURM_SCRIPT = REPO / "scripts" / "slurm" / "cluster"
# The daemons scripts/slurm/cluster starts (it runs them from /usr/sbin) and the client
# commands the tests and the executor call.
SLURM_DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
SLURM_CLIENTS = ("sbatch", "squeue", "sinfo", "scancel", "scontrol", "srun", "munge")


def slurm_missing() -> str | None:
    """Why the Slurm test cluster cannot run here, or None when it can."""
    missing = [d for d in SLURM_DAEMONS if not os.access(d, os.X_OK)]
    missing += [c for c in SLURM_CLIENTS if not shutil.which(c)]
    if missing:
        return (f"Slurm is not installed (missing: {', '.join(missing)}); "
                "install it with `scripts/slurm/cluster install` (Debian: slurm-wlm, munge)")
    return None


def _ports_free(first: int, count: int) -> bool:
    for port in range(first, first + count):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


class SlurmCluster:
    """A real single-host Slurm cluster started by scripts/slurm/cluster in `dir`: nodes
    qm-node1..N in partition `gpu`, `gpus` fake GPUs each. `stop()` kills only what the script
    recorded under `dir` (teardown calls it even when a test failed)."""

    def __init__(self, dir: Path, nodes: int = 4, gpus: int = 1, port_base: int | None = None):
        self.dir = Path(dir)
        self.nodes = nodes
        self.gpus = gpus
        base = port_base or int(os.environ.get("QM_E2E_SLURM_PORT_BASE", "18817"))
        # Not the script's default base, so a developer's own cluster keeps running; move on
        # when another cluster (another test run) holds the ports.
        for _ in range(20):
            if _ports_free(base, nodes + 1):
                break
            base += 100
        self.port_base = base
        self.conf = self.dir / "slurm.conf"
        self.started = False

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}

    def names(self) -> list[str]:
        return [f"qm-node{k}" for k in range(1, self.nodes + 1)]

    def _script(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(os.environ, QM_SLURM_PORT_BASE=str(self.port_base), SLURM_CONF=str(self.conf))
        r = subprocess.run([str(SLURM_SCRIPT), *map(str, args)], capture_output=True, text=True,
                           env=env, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"scripts/slurm/cluster {' '.join(map(str, args))} failed "
                               f"(exit {r.returncode}):\n{r.stdout}{r.stderr}")
        return r

    def start(self) -> "SlurmCluster":
        self.started = True  # stop() cleans up after a failed start too
        self._script("start", self.dir, self.nodes, self.gpus)
        return self

    def stop(self) -> None:
        if not self.started or not self.dir.exists():
            return
        # The script stops the daemons one after the other, ~2 s each; SIGTERM every slurmd
        # at once first, then let it stop the rest and the job steps.
        pids = []
        for f in self.dir.glob("run/slurmd-*.pid"):
            with contextlib.suppress(OSError, ValueError, ProcessLookupError, PermissionError):
                pid = int(f.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
        end = time.monotonic() + 10
        while time.monotonic() < end and any(pid_alive(p) for p in pids):
            time.sleep(0.1)
        self._script("stop", self.dir)
        self.started = False

    def stop_node(self, k: int) -> None:
        self._script("stop-node", self.dir, k)

    def start_node(self, k: int) -> None:
        self._script("start-node", self.dir, k)

    def run(self, *cmd, check: bool = True, timeout: float = 30) -> str:
        """A Slurm client command against this cluster; returns its stdout."""
        r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **self.env))
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, cmd))} failed (exit {r.returncode}): "
                               f"{r.stdout}{r.stderr}")
        return r.stdout

    def node_states(self) -> dict[str, str]:
        """sinfo's state of every node, e.g. {'qm-node1': 'idle', 'qm-node2': 'down*'}."""
        out = self.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t")
        return dict(line.split() for line in out.splitlines() if line.strip())

    def jobs(self) -> list[dict]:
        """Jobs slurmctld knows that are not finished: id, name, state, nodes, comment."""
        out = self.run("squeue", "-h", "-a", "-o", "%i|%j|%T|%N|%k")
        rows = []
        for line in out.splitlines():
            if line.strip():
                jid, name, state, nodes, comment = line.split("|", 4)
                rows.append({"id": jid, "name": name, "state": state, "nodes": nodes,
                             "comment": comment})
        return rows

    def submit_external(self, node: str, name: str = "not-qm", seconds: int = 600) -> str:
        """A job that is not qm's, holding `node` exclusively; returns its Slurm job id."""
        return self.run("sbatch", "--parsable", "--exclusive", "-N", "1", "-w", node, "-J", name,
                        "-o", "/dev/null", "--wrap", f"sleep {seconds}").strip().split(";")[0]

    def cancel(self, *job_ids: str) -> None:
        if job_ids:
            self.run("scancel", *job_ids, check=False)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.dir / "log" / "slurmctld.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return "(no slurmctld log)"
        return f"--- {path} ---\n{text[-chars:]}"

    def describe(self) -> str:
        """sinfo and squeue, for failure messages."""
        parts = []
        for cmd in (("sinfo", "-N"), ("squeue", "-a", "-o", "%i %j %T %N %r %k")):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                               env=dict(os.environ, **self.env))
            parts.append(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        return "\n".join(parts)


def slurm_config_toml(shared_dir: Path | str | None = None, nodes_unit: str = UNIT,
                      gpus: int = 1, grace: int = 2, poll: float = 0.5,
                      partition: str = "gpu") -> str:
    """A server configuration with the Slurm executor: `nodes_unit` instances are the nodes of
    `partition`, `gpus` GPUs each."""
    shared = f'shared_dir = "{shared_dir}"\n' if shared_dir is not None else ""
    return f"""region = "{REGION}"
account_id = "{ACCOUNT}"
[storage]
file_roots = ["{STORAGE_ROOT}"]
[executor]
kind = "slurm"
stop_grace_seconds = {grace}
[executor.slurm]
{shared}poll_seconds = {poll}
[[executor.slurm.instance]]
instance_type = "{nodes_unit}"
partition = "{partition}"
gpus_per_instance = {gpus}
"""


def archived(server) -> dict:
    """The server's archive of retired jobs (`<data-dir>/archive/jobs-YYYY-MM.jsonl`), one record
    per job id, the last written."""
    out = {}
    for f in sorted((server.data_dir / "archive").glob("jobs-*.jsonl")):
        for line in f.read_text().splitlines():
            job = json.loads(line)
            out[job["jobId"]] = job
    return out
