"""A training job that reports its steps in $QM_PROGRESS_FILE, the way a real one would.

It makes one step every STEP_SECONDS (default 0.05), reporting `{"step": n}` after each; at
step CHECKPOINT_AT (default 10) it writes `$SM_CHECKPOINT_DIR/step` and reports
`{"step": n, "checkpoint_step": n}`; at step PAUSE_AT (default 15) it idles until stopped, so
that a test preempts it at a known step with work since its checkpoint. Its first report is the
step it starts from: the checkpoint's with RESUME=1 (default), 0 with RESUME=0 (a job that
ignores its checkpoint). On SIGTERM it exits 143 without checkpointing, as a job that
checkpoints on a schedule does, so the steps since the checkpoint are lost.

Also records `start <step>` in $PROGRESS_FILE (the tests' own file, see _progress.py), and one
malformed line in $QM_PROGRESS_FILE, which qm must ignore.
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _progress import record  # noqa: E402

signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

ckpt = os.path.join(os.environ["SM_CHECKPOINT_DIR"], "step")
step_seconds = float(os.environ.get("STEP_SECONDS", "0.05"))
checkpoint_at = int(os.environ.get("CHECKPOINT_AT", "10"))
pause_at = int(os.environ.get("PAUSE_AT", "15"))
resume = os.environ.get("RESUME", "1") == "1"


def report(**fields):
    with open(os.environ["QM_PROGRESS_FILE"], "a") as f:
        f.write(json.dumps(fields) + "\n")


step = 0
if resume and os.path.exists(ckpt):
    with open(ckpt) as f:
        step = int(f.read().strip() or "0")
report(step=step)
with open(os.environ["QM_PROGRESS_FILE"], "a") as f:
    f.write("this line is not JSON\n")
record("start", step)
print(f"starting at step {step}", flush=True)

while True:
    if step >= pause_at:
        time.sleep(0.1)
        continue
    time.sleep(step_seconds)
    step += 1
    if step == checkpoint_at:
        os.makedirs(os.path.dirname(ckpt), exist_ok=True)
        # Each host of a multi-host job writes the shared checkpoint: a temporary file of its
        # own, or one host's rename would take the other's from under it.
        tmp = f"{ckpt}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(step))
        os.replace(tmp, ckpt)
        report(step=step, checkpoint_step=step)
    else:
        report(step=step)
