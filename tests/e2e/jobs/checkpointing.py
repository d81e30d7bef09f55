"""A training job that checkpoints every step and resumes from its last checkpoint.

Environment:
  PROGRESS_FILE  where to append `start <step>`, `paused <step>`, `sigterm <step>`, `done <step>`
  TARGET_STEPS   steps to reach (default 10)
  STEP_SECONDS   sleep per step (default 0.1)
  PAUSE_AT, GATE_FILE  optional: at step PAUSE_AT wait until GATE_FILE exists, so a test can hold
                 the job running with a known checkpoint and release it later
  LOCK_FILE      optional: hold an exclusive flock on it for the whole attempt; if another
                 process holds it (the same job running twice) record `VIOLATION`

The checkpoint is `$SM_CHECKPOINT_DIR/step`, written atomically after every step. On SIGTERM
the job writes its checkpoint, records `sigterm <step>` and exits 143.
"""

import fcntl
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _progress import record  # noqa: E402

ckpt_dir = os.environ["SM_CHECKPOINT_DIR"]
ckpt = os.path.join(ckpt_dir, "step")
target = int(os.environ.get("TARGET_STEPS", "10"))
step_seconds = float(os.environ.get("STEP_SECONDS", "0.1"))
pause_at = int(os.environ["PAUSE_AT"]) if os.environ.get("PAUSE_AT") else None
gate = os.environ.get("GATE_FILE")
stop = False


def on_sigterm(_signo, _frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_sigterm)

lock_fd = None
if os.environ.get("LOCK_FILE"):
    lock_fd = os.open(os.environ["LOCK_FILE"], os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        record("VIOLATION", "lock-held")
        fcntl.flock(lock_fd, fcntl.LOCK_EX)

os.makedirs(ckpt_dir, exist_ok=True)
step = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        step = int(f.read().strip() or "0")
record("start", step)
print(f"starting at step {step} of {target}", flush=True)


def save(n):
    tmp = ckpt + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(n))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt)


def nap(seconds):
    end = time.monotonic() + seconds
    while not stop and time.monotonic() < end:
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))


def stop_now():
    save(step)
    record("sigterm", step)
    print(f"SIGTERM at step {step}", flush=True)
    sys.exit(143)


paused = False
while step < target:
    if stop:
        stop_now()
    if pause_at is not None and step >= pause_at and gate and not os.path.exists(gate):
        if not paused:
            record("paused", step)
            paused = True
        nap(0.1)
        continue
    nap(step_seconds)
    if stop:
        stop_now()
    step += 1
    save(step)

record("done", step)
model_dir = os.environ.get("SM_MODEL_DIR")
if model_dir:
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "model.txt"), "w") as f:
        f.write(f"trained {step} steps\n")
print(f"done at step {step}", flush=True)
