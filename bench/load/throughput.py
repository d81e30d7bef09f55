"""End-to-end throughput of trivial jobs through `qm serve` and the local executor.

Creates a queue on N simulated instances, submits JOBS jobs whose entrypoint is `true` from
several client threads, waits until every job has SUCCEEDED, and reports jobs per second from
the server's own timestamps (first createdAt to last stoppedAt) and from the client's clock.
Used by scripts/bench-load; run it against a server started with enough instances.
"""

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3


def client(endpoint):
    return boto3.client(
        "batch",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def setup(b, instances, prefix, share_limit):
    policy = b.create_scheduling_policy(
        name=f"{prefix}-policy", quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}
    )["arn"]
    b.create_service_environment(
        serviceEnvironmentName=f"{prefix}-se",
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": instances, "capacityUnit": "ml.g5.xlarge"}],
    )
    b.create_job_queue(
        jobQueueName=f"{prefix}-q",
        jobQueueType="SAGEMAKER_TRAINING",
        priority=1,
        schedulingPolicyArn=policy,
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": f"{prefix}-se"}],
    )
    return b.create_quota_share(
        quotaShareName="all",
        jobQueue=f"{prefix}-q",
        capacityLimits=[{"maxCapacity": share_limit, "capacityUnit": "ml.g5.xlarge"}],
        resourceSharingConfiguration={"strategy": "LEND"},
        preemptionConfiguration={"inSharePreemption": "DISABLED"},
    )["quotaShareArn"]


PAYLOAD = json.dumps(
    {
        "TrainingJobName": "trivial",
        "RoleArn": "arn:aws:iam::123456789012:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
    }
)


def all_jobs(b, queue, status):
    out, token = [], None
    while True:
        kw = {"jobQueue": queue, "jobStatus": status, "maxResults": 100}
        if token:
            kw["nextToken"] = token
        r = b.list_service_jobs(**kw)
        out += r["jobSummaryList"]
        token = r.get("nextToken")
        if not token:
            return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--instances", type=int, default=64)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--prefix", default="tput")
    p.add_argument(
        "--drain",
        action="store_true",
        help="submit every job to a share with a limit of 0 first, then raise it to --instances: "
        "measures scheduling and execution without the client's submit rate",
    )
    a = p.parse_args()

    share_arn = setup(client(a.endpoint), a.instances, a.prefix, 0 if a.drain else a.instances)
    queue = f"{a.prefix}-q"
    local = threading.local()

    def submit(i):
        if not hasattr(local, "b"):
            local.b = client(a.endpoint)
        local.b.submit_service_job(
            jobName=f"trivial-{i}",
            jobQueue=queue,
            serviceJobType="SAGEMAKER_TRAINING",
            quotaShareName="all",
            serviceRequestPayload=PAYLOAD,
        )

    t0 = time.time()
    with ThreadPoolExecutor(a.threads) as pool:
        list(pool.map(submit, range(a.jobs)))
    t_submitted = time.time()
    print(f"submitted {a.jobs} jobs in {t_submitted - t0:.2f} s", file=sys.stderr)

    b = client(a.endpoint)
    released_ms = None
    if a.drain:
        released_ms = int(time.time() * 1000)
        b.update_quota_share(
            quotaShareArn=share_arn,
            capacityLimits=[{"maxCapacity": a.instances, "capacityUnit": "ml.g5.xlarge"}],
        )
    deadline = time.time() + 600
    while True:
        done = all_jobs(b, queue, "SUCCEEDED")
        failed = all_jobs(b, queue, "FAILED")
        if failed:
            print(f"{len(failed)} jobs FAILED, e.g. {failed[0]}", file=sys.stderr)
            sys.exit(1)
        if len(done) >= a.jobs:
            break
        if time.time() > deadline:
            print(f"timed out with {len(done)} of {a.jobs} done", file=sys.stderr)
            sys.exit(1)
        print(f"  {len(done)}/{a.jobs} succeeded", file=sys.stderr)
        time.sleep(0.5)
    t_done = time.time()
    first = released_ms if a.drain else min(j["createdAt"] for j in done)
    last = max(j["stoppedAt"] for j in done)
    server_s = (last - first) / 1000
    print(
        json.dumps(
            {
                "jobs": a.jobs,
                "instances": a.instances,
                "mode": "drain (share raised from 0 after all submits)" if a.drain else "submit and run",
                "seconds_first_submit_or_release_to_last_exit": round(server_s, 3),
                "jobs_per_second_server_clock": round(a.jobs / server_s, 1),
                "client_seconds_including_polling": round(t_done - t0, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
