"""Long-run benchmark of `qm serve` (scripts/bench-load part 4): a server that has seen
millions of jobs must cost what its live jobs cost, not what its history cost.

Starts the release `qm` with `[retention] finished_jobs_days = 0` (every finished job is
archived and leaves the state at the next tick) on 64 simulated instances. Queues LIVE jobs
that stay RUNNABLE (a share of one instance, held by a sleeper), then churns TOTAL jobs
through a second share with wrk (bench/load/churn.lua): each fails at once (its entrypoint
does not exist), is retired and archived. Then it reports the server's RSS, kills it with
SIGKILL, and reports the time to healthy and the RSS after the restart, the store and the
archive sizes. Figures go to stdout as one JSON line (and progress to stderr).

    python bench/load/longrun.py --qm target/release/qm --work DIR [--total 2000000] [--live 10000]
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNIT = "ml.g5.xlarge"


def say(*a):
    print("[longrun]", *a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, qm, work: Path, retention: bool = True):
        self.qm, self.work = qm, work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = work / "data"
        self.config = work / "config.toml"
        self.config.write_text(
            'region = "us-east-1"\naccount_id = "123456789012"\n'
            '[executor]\nkind = "local"\nstop_grace_seconds = 1\n'
            f'[[executor.pool]]\ninstance_type = "{UNIT}"\ncount = 64\n'
            + ("[retention]\nfinished_jobs_days = 0\ndelete_job_dirs = true\n" if retention else "")
        )
        self.proc = None
        self.starts = 0

    def start(self) -> float:
        self.starts += 1
        log = open(self.work / f"server-{self.starts}.log", "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [self.qm, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data),
             "--config", str(self.config), "--no-auth"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"qm serve exited; see {log.name}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1):
                    return time.monotonic() - t0
            except OSError:
                time.sleep(0.01)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def kill9(self):
        # The server and the job processes it started share its session's process group.
        with_group = os.getpgid(self.proc.pid)
        os.killpg(with_group, signal.SIGKILL)
        self.proc.wait()

    def post(self, op, body):
        req = urllib.request.Request(f"{self.url}/v1/{op}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"{}")

    def metric(self, name, **labels) -> float:
        with urllib.request.urlopen(self.url + "/metrics", timeout=60) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


def payload(entrypoint):
    return json.dumps({
        "TrainingJobName": "longrun", "RoleArn": "arn:aws:iam::123456789012:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": entrypoint},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"}})


def create_queue(s: Server, prefix: str, shares, strategy: str):
    """A policy, a 64-instance environment and a queue `<prefix>-q` with `shares` as
    (name, limit) pairs, each with `strategy` and no in-share preemption."""
    s.post("createschedulingpolicy", {"name": f"{prefix}-p", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}})
    s.post("createserviceenvironment", {
        "serviceEnvironmentName": f"{prefix}-se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
        "capacityLimits": [{"maxCapacity": 64, "capacityUnit": UNIT}]})
    s.post("createjobqueue", {
        "jobQueueName": f"{prefix}-q", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
        "schedulingPolicyArn": f"arn:aws:batch:us-east-1:123456789012:scheduling-policy/{prefix}-p",
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": f"{prefix}-se"}]})
    for name, limit in shares:
        s.post("createquotashare", {
            "quotaShareName": name, "jobQueue": f"{prefix}-q",
            "capacityLimits": [{"maxCapacity": limit, "capacityUnit": UNIT}],
            "resourceSharingConfiguration": {"strategy": strategy},
            "preemptionConfiguration": {"inSharePreemption": "DISABLED"}})


def setup(s: Server, live: int):
    create_queue(s, "lr", (("live", 1), ("churn", 63)), "RESERVE")
    sleeper = payload(["sleep", "86399"])

    def submit(i):
        s.post("submitservicejob", {
            "jobName": f"live-{i}", "jobQueue": "lr-q", "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": "live", "serviceRequestPayload": sleeper})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(submit, range(live)))


def churn(s: Server, total: int, live: int):
    """wrk submits failing jobs in slices of a few seconds; between slices, wait until the
    backlog the executor has not launched yet is small, so memory reflects a steady state."""
    done = 0
    started = time.monotonic()
    while done < total:
        out = subprocess.run(
            ["wrk", "-t2", "-c32", "-d4s", "-s", str(HERE / "churn.lua"), s.url],
            capture_output=True, text=True, check=True).stdout
        sent = int(next(l.split()[0] for l in out.splitlines() if "requests in" in l))
        bad = next((int(l.split()[-1]) for l in out.splitlines() if "Non-2xx" in l), 0)
        done += sent - bad
        while s.metric("qm_jobs") - live > 20_000:
            time.sleep(0.5)
        rate = done / (time.monotonic() - started)
        say(f"{done:,} churn jobs submitted ({rate:,.0f}/s), RSS {s.rss_mb():.0f} MB")
    # Let the last ones fail and be retired: what is left is the live jobs.
    while s.metric("qm_jobs") > live:
        time.sleep(0.5)
    return done, time.monotonic() - started


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qm", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--total", type=int, default=2_000_000)
    ap.add_argument("--live", type=int, default=10_000)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    s = Server(a.qm, a.work)
    s.start()
    try:
        setup(s, a.live)
        rss_live = s.rss_mb()
        say(f"{a.live:,} live jobs queued; RSS {rss_live:.0f} MB")
        churned, seconds = churn(s, a.total, a.live)
        rss_end = s.rss_mb()
        s.kill9()
        restart = s.start()
        time.sleep(2)
        log = (a.work / "server-2.log").read_text(errors="replace")
        log = re.sub(r"\x1b\[[0-9;]*m", "", log)
        recovery = re.search(r"state recovered from the log batches=(\d+) jobs=\d+ ms=(\d+)", log)
        out = {
            "live_jobs": a.live, "churned_jobs": churned, "churn_seconds": round(seconds, 1),
            "rss_mb_with_live_jobs": round(rss_live), "rss_mb_after_churn": round(rss_end),
            "restart_to_healthy_s": round(restart, 3), "rss_mb_after_restart": round(s.rss_mb()),
            "recovery_batches": int(recovery.group(1)) if recovery else 0,
            "recovery_ms": int(recovery.group(2)) if recovery else 0,
            "store_mb": round(sum(f.stat().st_size for f in s.data.glob("qm.sqlite3*")) / 1e6, 1),
            "archive_mb": round(size_mb(s.data / "archive"), 1),
            "archive_bytes_per_job": round(size_mb(s.data / "archive") * 1e6 / max(churned, 1)),
            "jobs_after_restart": s.metric("qm_jobs"),
        }
        print(json.dumps(out), flush=True)
    finally:
        if s.proc and s.proc.poll() is None:
            s.kill9()


if __name__ == "__main__":
    main()
