"""The qm side of scripts/bench-slurm: the same measurements as the raw-Slurm sub-commands,
with the jobs going through `qm serve` and its Slurm executor.

    qm_bench.py throughput --qm BIN --work DIR --nodes N --jobs J [--poll S] [--out FILE]
        J trivial jobs (entrypoint `true`, one instance = one exclusive node with its GPU)
        submitted through boto3; jobs/s from the first submit to the moment every job is
        SUCCEEDED (the qm clock: first createdAt to last stoppedAt, and the client's clock).
    qm_bench.py reclaim --qm BIN --work DIR --nodes N --repeats R [--poll S] [--out FILE]
        A borrower share fills every node with jobs that exit at once on SIGTERM (--victim
        trap; `ignore`: they ignore it, `plain`: they die of it); the owner
        (whose quota is lent) submits one job; owner submit -> owner RUNNING, as qm reports it
        (the job's startedAt minus its createdAt) and as the client saw it (polling every
        0.05 s). R repeats; between them the owner's job is terminated and the preempted
        borrower job returns.

The cluster must already run (SLURM_CONF in the environment); qm runs with a fresh data dir
under DIR and is stopped at the end.
"""

import argparse
import datetime
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3

UNIT = "ml.g5.xlarge"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(url):
    return boto3.client("batch", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="local", aws_secret_access_key="local")


class Qm:
    def __init__(self, binary, work, poll, grace):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = self.work / "qm.toml"
        cfg.write_text(f"""[executor]
kind = "slurm"
stop_grace_seconds = {grace}
[executor.slurm]
poll_seconds = {poll}
[[executor.slurm.instance]]
instance_type = "{UNIT}"
partition = "gpu"
gpus_per_instance = 1
""")
        self.log = open(self.work / "qm.log", "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", str(cfg), "--data-dir", str(self.work / "data"),
             "--listen", f"127.0.0.1:{self.port}",
             # Loopback and a benchmark's own clients: Slurm's figures, not SigV4's.
             "--no-auth"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"qm did not start; see {self.work / 'qm.log'}")
                time.sleep(0.1)
        self.batch = client(self.url)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def setup(b, prefix, nodes, shares):
    policy = b.create_scheduling_policy(
        name=f"{prefix}-sp", quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})["arn"]
    b.create_service_environment(
        serviceEnvironmentName=f"{prefix}-se", serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": nodes, "capacityUnit": UNIT}])
    b.create_job_queue(
        jobQueueName=f"{prefix}-q", jobQueueType="SAGEMAKER_TRAINING", priority=1,
        schedulingPolicyArn=policy,
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": f"{prefix}-se"}])
    for name, strategy, limit, borrow in shares:
        sharing = {"strategy": strategy}
        if borrow is not None:
            sharing["borrowLimit"] = borrow
        b.create_quota_share(
            quotaShareName=name, jobQueue=f"{prefix}-q",
            capacityLimits=[{"maxCapacity": limit, "capacityUnit": UNIT}],
            resourceSharingConfiguration=sharing,
            preemptionConfiguration={"inSharePreemption": "DISABLED"})
    return f"{prefix}-q"


def payload(name, entrypoint):
    return json.dumps({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": entrypoint},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
    })


def submit(b, queue, share, name, entrypoint):
    return b.submit_service_job(jobName=name, jobQueue=queue, quotaShareName=share,
                                serviceJobType="SAGEMAKER_TRAINING",
                                serviceRequestPayload=payload(name, entrypoint))["jobId"]


def count(b, queue, status):
    n, token = 0, None
    while True:
        kw = {"jobQueue": queue, "jobStatus": status, "maxResults": 100}
        if token:
            kw["nextToken"] = token
        r = b.list_service_jobs(**kw)
        n += len(r["jobSummaryList"])
        token = r.get("nextToken")
        if not token:
            return n


def throughput(a):
    qm = Qm(a.qm, a.work, a.poll, a.grace)
    try:
        b = qm.batch
        queue = setup(b, "tp", a.nodes, [("all", "RESERVE", a.nodes, None)])
        t0 = time.time()
        ids = []
        # Several client threads, as a real submitter would; boto3 clients are thread-safe.
        with ThreadPoolExecutor(8) as pool:
            command = ["sleep", str(a.job_seconds)] if a.job_seconds else ["true"]
            ids = list(pool.map(lambda i: submit(b, queue, "all", f"t{i}", command),
                                range(a.jobs)))
        submitted = time.time() - t0
        print(f"submitted {a.jobs} jobs in {submitted:.1f} s ({a.jobs / submitted:.0f}/s)",
              file=sys.stderr)
        last = -1
        while True:
            done = count(b, queue, "SUCCEEDED")
            failed = count(b, queue, "FAILED")
            if done != last:
                print(f"  {time.time() - t0:6.1f} s  {done} succeeded, {failed} failed",
                      file=sys.stderr)
                last = done
            if done + failed >= a.jobs:
                break
            time.sleep(1)
        client_s = time.time() - t0
        created, stopped = [], []
        # The server's clock: first createdAt to last stoppedAt.
        for jid in ids:
            d = b.describe_service_job(jobId=jid)
            created.append(d["createdAt"])
            if d.get("stoppedAt"):
                stopped.append(d["stoppedAt"])
        server_s = (max(stopped) - min(created)) / 1000
        result = {
            "jobs": a.jobs, "nodes": a.nodes, "poll_seconds": a.poll, "failed": failed,
            "job_seconds": a.job_seconds,
            "submit_seconds": round(submitted, 2),
            "server_seconds": round(server_s, 2),
            "client_seconds": round(client_s, 2),
            "jobs_per_second": round(a.jobs / server_s, 3),
        }
        return result
    finally:
        qm.stop()


def wait_status(b, jid, statuses, timeout=300, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        d = b.describe_service_job(jobId=jid)
        if d["status"] in statuses:
            return d
        time.sleep(step)
    raise SystemExit(f"job {jid} not in {statuses} after {timeout} s: {d['status']}")


def reclaim(a):
    qm = Qm(a.qm, a.work, a.poll, a.grace)
    half = a.nodes // 2
    try:
        b = qm.batch
        queue = setup(b, "rc", a.nodes, [("owner", "LEND", half, None),
                                        ("borrower", "LEND_AND_BORROW", a.nodes - half, 100)])
        victim = {
            # Exits at once on SIGTERM, like the raw benchmark's trapping victim.
            "trap": ["bash", "-c", "trap 'exit 0' TERM; while :; do sleep 0.2; done"],
            # Ignores SIGTERM: the grace is spent, then SIGKILL.
            "ignore": ["bash", "-c", "trap '' TERM; while :; do sleep 0.2; done"],
            # Dies of SIGTERM (the default action).
            "plain": ["sleep", "3600"],
        }[a.victim]
        borrowers = [submit(b, queue, "borrower", f"b{i}", victim) for i in range(a.nodes)]
        samples = []
        for r in range(a.repeats):
            for jid in borrowers:
                wait_status(b, jid, {"RUNNING"})
            time.sleep(1)
            t0 = time.time()
            owner = submit(b, queue, "owner", f"o{r}", ["sleep", "3600"])
            wait_status(b, owner, {"RUNNING"})
            client_s = time.time() - t0
            d = b.describe_service_job(jobId=owner)
            server_s = (d["startedAt"] - d["createdAt"]) / 1000
            samples.append({"client_seconds": round(client_s, 3),
                            "server_seconds": round(server_s, 3)})
            print(f"  repeat {r + 1}: owner running after {client_s:.2f} s "
                  f"(qm: {server_s:.2f} s)", file=sys.stderr)
            b.terminate_service_job(jobId=owner, reason="bench")
            wait_status(b, owner, {"FAILED", "SUCCEEDED"})
        for jid in borrowers:
            b.terminate_service_job(jobId=jid, reason="bench")
        c = [s["client_seconds"] for s in samples]
        return {"nodes": a.nodes, "repeats": a.repeats, "poll_seconds": a.poll,
                "grace_seconds": a.grace, "victim": a.victim, "samples": samples,
                "median_seconds": round(statistics.median(c), 3),
                "min_seconds": min(c), "max_seconds": max(c)}
    finally:
        qm.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["throughput", "reclaim"])
    p.add_argument("--qm", required=True, help="the qm binary")
    p.add_argument("--work", required=True, help="a fresh directory for qm's data and log")
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--poll", type=float, default=1.0, help="executor.slurm.poll_seconds")
    p.add_argument("--job-seconds", type=float, default=0, help="jobs run `sleep S`, not `true`")
    p.add_argument("--grace", type=float, default=5, help="executor.stop_grace_seconds")
    p.add_argument("--victim", choices=["trap", "ignore", "plain"], default="trap",
                   help="how the borrowers' jobs take SIGTERM (reclaim)")
    p.add_argument("--out")
    a = p.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit("SLURM_CONF is not set: start a cluster with scripts/slurm/cluster first")
    result = throughput(a) if a.mode == "throughput" else reclaim(a)
    result["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    result["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
