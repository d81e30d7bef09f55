"""The entry script of test_sagemaker_sdk.py's preemption job, run by the SDK's own sm_train.sh
and basic_script_driver.py.

State: /opt/ml/checkpoints/step.json (`{"step": n}`), written atomically after every step; on
start the script resumes from it. A first attempt (nothing to resume) steps until SIGTERM,
writes its checkpoint and exits 143 (or, after --max_seconds without a SIGTERM, gives up and
finishes so that the test fails on its result instead of hanging). An attempt that resumed
takes --resume_steps more steps and finishes. The result, /opt/ml/model/result.json, records
the step it resumed from and the content of /opt/ml/checkpoints/planted.txt (a file the test
puts into the checkpoint S3 prefix between the attempts, so it can only come from S3).

PROGRESS_FILE (a host path from the payload's Environment) gets `start <step>`, `step <n>`,
`sigterm <step>` and `done <step>` lines for the test to follow.
"""

import argparse
import json
import os
import signal
import time

CKPT_DIR = "/opt/ml/checkpoints"
STATE = os.path.join(CKPT_DIR, "step.json")
PLANTED = os.path.join(CKPT_DIR, "planted.txt")

parser = argparse.ArgumentParser()
parser.add_argument("--step_seconds", type=float, default=0.2)
parser.add_argument("--resume_steps", type=int, default=3)
parser.add_argument("--max_seconds", type=float, default=120)
args = parser.parse_args()

stop = False


def on_sigterm(_signo, _frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_sigterm)


def record(event, value=""):
    path = os.environ.get("PROGRESS_FILE")
    if not path:
        return
    line = f"{event} {value} pid={os.getpid()} attempt={os.environ.get('QM_ATTEMPT', '?')}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def save(step):
    tmp = STATE + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, STATE)


os.makedirs(CKPT_DIR, exist_ok=True)
step = 0
if os.path.exists(STATE):
    with open(STATE) as f:
        step = int(json.load(f)["step"])
planted = None
if os.path.exists(PLANTED):
    with open(PLANTED) as f:
        planted = f.read().strip()
resumed_from = step
record("start", step)

if resumed_from == 0:
    end = time.monotonic() + args.max_seconds
    while not stop and time.monotonic() < end:
        time.sleep(args.step_seconds)
        if stop:
            break
        step += 1
        save(step)
        record("step", step)
    if stop:
        save(step)
        record("sigterm", step)
        # Not sys.exit: the driver that read this process's stdout was stopped with it, and
        # flushing into its closed pipe at exit would fail.
        os._exit(143)
else:
    for _ in range(args.resume_steps):
        time.sleep(args.step_seconds)
        step += 1
        save(step)
        record("step", step)

os.makedirs("/opt/ml/model", exist_ok=True)
with open("/opt/ml/model/result.json", "w") as f:
    json.dump({"resumed_from": resumed_from, "final_step": step, "planted": planted}, f)
record("done", step)
