"""ListServiceJobs latency with a deep queue (scripts/bench-load part 5): how long listing the
RUNNING jobs of a queue (what `qm jobs` and the dashboard ask first) takes when the server
holds many RUNNABLE ones.

Starts the `qm` at --qm on 64 simulated instances, fills them with sleepers, queues --jobs
more with wrk (bench/load/submit.lua), then times --calls ListServiceJobs requests for
RUNNING (64 jobs) and for the first page of RUNNABLE. Prints one JSON line.

    python bench/load/list.py --qm target/release/qm --work DIR [--jobs 300000] [--calls 200]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from longrun import Server, create_queue  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qm", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--jobs", type=int, default=300_000)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    # No [retention]: the same script measures builds from before it existed.
    s = Server(a.qm, a.work, retention=False)
    s.start()
    try:
        create_queue(s, "load", (("load", 64),), "LEND")
        queued = 0
        while queued < a.jobs:
            out = subprocess.run(["wrk", "-t2", "-c32", "-d3s", "-s", str(HERE / "submit.lua"), s.url],
                                 capture_output=True, text=True, check=True).stdout
            queued += int(next(l.split()[0] for l in out.splitlines() if "requests in" in l))
        time.sleep(2)
        timings = {}
        for status in ("RUNNING", "RUNNABLE"):
            ms = []
            for _ in range(a.calls):
                t0 = time.perf_counter()
                r = s.post("listservicejobs", {"jobQueue": "load-q", "jobStatus": status, "maxResults": 100})
                ms.append((time.perf_counter() - t0) * 1000)
            timings[status] = {"jobs_listed": len(r["jobSummaryList"]),
                               "median_ms": round(statistics.median(ms), 2),
                               "p99_ms": round(sorted(ms)[int(len(ms) * 0.99) - 1], 2)}
        print(json.dumps({"jobs_held": queued, "list": timings}), flush=True)
    finally:
        s.kill9()
        # The sleepers run in process groups of their own, marked with this data dir.
        marker = f"QM_DATA_DIR={s.data}".encode()
        for env in Path("/proc").glob("[0-9]*/environ"):
            try:
                if marker in env.read_bytes().split(b"\0"):
                    os.kill(int(env.parent.name), signal.SIGKILL)
            except OSError:
                pass


if __name__ == "__main__":
    main()
