"""Records where this attempt runs, then becomes another job program (or exits).

Appends one JSON line to $HOSTS_FILE: {"host": $SM_CURRENT_HOST, "hosts": $SM_HOSTS (parsed),
"attempt": $QM_ATTEMPT, "slurm_job": $SLURM_JOB_ID, "slurm_node": $SLURMD_NODENAME,
"gpus": $CUDA_VISIBLE_DEVICES, "checkpoint": $SM_CHECKPOINT_DIR, "pid": ...}, and prints
`host <SM_CURRENT_HOST>` to stdout and stderr (so a test can find each host's log file).

  on_host.py PROGRAM [ARGS...]   then exec jobs/PROGRAM with ARGS in this process (same pid,
                                 so signals reach PROGRAM)
  on_host.py                     with WAIT_FOR_HOSTS=1: wait (up to 60 s) until every host of
                                 $SM_HOSTS has recorded this attempt, then exit 0 (exit 7 if
                                 they never all do: the hosts did not run at the same time)
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_hosts(raw):
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def read(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


host = os.environ.get("SM_CURRENT_HOST", "")
hosts = parse_hosts(os.environ.get("SM_HOSTS"))
attempt = os.environ.get("QM_ATTEMPT", "?")
entry = {
    "host": host,
    "hosts": hosts,
    "attempt": attempt,
    "slurm_job": os.environ.get("SLURM_JOB_ID"),
    "slurm_node": os.environ.get("SLURMD_NODENAME"),
    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "checkpoint": os.environ.get("SM_CHECKPOINT_DIR"),
    "pid": os.getpid(),
}
path = os.environ.get("HOSTS_FILE")
if path:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
print(f"host {host}", flush=True)
print(f"host {host}", file=sys.stderr, flush=True)

if len(sys.argv) > 1:
    program = os.path.join(HERE, sys.argv[1])
    os.execv(sys.executable, [sys.executable, program, *sys.argv[2:]])

if os.environ.get("WAIT_FOR_HOSTS") == "1" and path and isinstance(hosts, list):
    end = time.monotonic() + 60
    while time.monotonic() < end:
        seen = {e["host"] for e in read(path) if e.get("attempt") == attempt}
        if set(hosts) <= seen:
            sys.exit(0)
        time.sleep(0.1)
    print(f"not every host of {hosts} ran attempt {attempt}", file=sys.stderr, flush=True)
    sys.exit(7)
