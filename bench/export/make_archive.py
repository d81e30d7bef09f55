"""Writes an archive of retired jobs (docs/server.md, "Retention and archive") for the
workload-export benchmark (scripts/bench-export): JOBS jobs of 8 shares submitted one a second
from 2026-11-01T00:00Z, each one or two attempts on 1 to 8 instances; one job in ten preempted
once, with steps and checkpoints, and one in twenty of a named class. Deterministic (seeded).

Usage: make_archive.py DATA_DIR JOBS
"""

import json
import random
import sys
import uuid
from pathlib import Path

START_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z
UNIT = "ml.g5.xlarge"


def attempt(number, start, run_ms, count, preempted, steps, checkpoints):
    a = {"number": number, "instanceType": UNIT, "count": count, "startedAt": start,
         "runningAt": start + 2_000, "stoppedAt": start + 2_000 + run_ms, "preempted": preempted,
         "statusReason": "Preempted" if preempted else "Training job completed"}
    if checkpoints:
        a["checkpointAt"] = start + 2_000 + run_ms - 60_000
        a["checkpoints"] = checkpoints
    if steps:
        a["steps"] = steps
    return a


def job(i, rng):
    created = START_MS + i * 1_000
    count = rng.choice([1, 1, 1, 2, 2, 4, 8])
    run_ms = rng.randint(60, 36_000) * 1_000
    share = f"t{i % 8}"
    if i % 10 == 0:
        first = attempt(1, created + 5_000, run_ms // 2, count, True,
                        {"first": 0, "last": 1000, "checkpoint": 900}, 9)
        second = attempt(2, first["stoppedAt"] + 30_000, run_ms // 2 + 60_000, count, False,
                         {"first": 901, "last": 2000}, 10)
        attempts = [first, second]
    else:
        attempts = [attempt(1, created + 5_000, run_ms, count, False, None, 0)]
    tags = {"qm:class": "urgent"} if i % 20 == 1 else {}
    return {"jobId": str(uuid.UUID(int=rng.getrandbits(128))), "jobName": f"job-{i}",
            "jobQueue": "training", "quotaShareName": share, "status": "SUCCEEDED",
            "statusReason": "Training job completed", "schedulingPriority": i % 3,
            "createdAt": created, "stoppedAt": attempts[-1]["stoppedAt"],
            "attempts": attempts, "preemptedCount": len(attempts) - 1, "tags": tags}


def main():
    data, jobs = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(19)
    (data / "archive").mkdir(parents=True, exist_ok=True)
    files = {}
    try:
        for i in range(jobs):
            j = job(i, rng)
            # The month the job finished in (all of them in November or December 2026).
            month = "2026-11" if j["stoppedAt"] < 1_796_083_200_000 else "2026-12"
            if month not in files:
                files[month] = open(data / "archive" / f"jobs-{month}.jsonl", "w")
            files[month].write(json.dumps(j, separators=(",", ":")) + "\n")
    finally:
        for f in files.values():
            f.close()


if __name__ == "__main__":
    main()
