"""A SageMaker-style training script that knows nothing of Quartermaster: it uses only the
absolute /opt/ml paths a SageMaker training container gets (docs/sagemaker.md).

It reads its hyperparameters and the channel `train`, resumes from
/opt/ml/checkpoints/step, counts `steps` steps (hyperparameter), checkpointing after each,
and at the end writes /opt/ml/model/model.json and /opt/ml/output/data/metrics.txt. On
SIGTERM it writes its checkpoint and exits 143. Progress lines go to $PROGRESS_FILE
(`start <step>`, `sigterm <step>`, `done <step>`); its steps, for qm's verified resume, to
/opt/ml/output/progress.json (`{"step": n}` first, `{"step": n, "checkpoint_step": n}` after
every checkpoint).
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _progress import record  # noqa: E402

ML = "/opt/ml"
hps = json.load(open(f"{ML}/input/config/hyperparameters.json"))
train = sorted(os.listdir(f"{ML}/input/data/train"))
data = {name: open(f"{ML}/input/data/train/{name}").read() for name in train
        if os.path.isfile(f"{ML}/input/data/train/{name}")}
ckpt = f"{ML}/checkpoints/step"
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
steps = int(hps.get("steps", "3"))
step_seconds = float(hps.get("step_seconds", "0.1"))
stop = False


def on_sigterm(_signo, _frame):
    global stop
    stop = True


def report(**fields):
    with open(f"{ML}/output/progress.json", "a") as f:
        f.write(json.dumps(fields) + "\n")


def save(step):
    tmp = ckpt + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(step))
    os.replace(tmp, ckpt)
    report(step=step, checkpoint_step=step)


signal.signal(signal.SIGTERM, on_sigterm)
record("start", start)
report(step=start)
step = start
while step < steps:
    if stop:
        save(step)
        record("sigterm", step)
        sys.exit(143)
    time.sleep(step_seconds)
    step += 1
    save(step)

os.makedirs(f"{ML}/model", exist_ok=True)
with open(f"{ML}/model/model.json", "w") as f:
    json.dump({"resumed_from": start, "steps": step, "data": data, "hps": hps,
               "job": os.environ.get("TRAINING_JOB_NAME")}, f)
os.makedirs(f"{ML}/output/data", exist_ok=True)
with open(f"{ML}/output/data/metrics.txt", "w") as f:
    f.write("loss=0.1\n")
record("done", step)
