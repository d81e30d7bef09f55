"""A job that trains on its channel through SageMaker's variables only (no /opt/ml, as on a
Slurm node): copies every file of $SM_CHANNEL_TRAIN into $SM_MODEL_DIR, and writes the
hyperparameters it got to $SM_MODEL_DIR/hps.json and a line to $SM_OUTPUT_DATA_DIR/done."""

import json
import os
import shutil

channel = os.environ["SM_CHANNEL_TRAIN"]
model = os.environ["SM_MODEL_DIR"]
for name in sorted(os.listdir(channel)):
    shutil.copy(os.path.join(channel, name), os.path.join(model, name))
with open(os.path.join(model, "hps.json"), "w") as f:
    f.write(os.environ.get("SM_HPS", "{}"))
os.makedirs(os.environ["SM_OUTPUT_DATA_DIR"], exist_ok=True)
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "done"), "w") as f:
    f.write(json.dumps({"host": os.environ.get("SM_CURRENT_HOST")}))
