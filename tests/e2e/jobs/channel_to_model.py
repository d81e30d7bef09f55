"""A job that trains on its channel: copies every file of $SM_CHANNEL_TRAIN into $SM_MODEL_DIR
(with USE_OPT_ML=1: of /opt/ml/input/data/train into /opt/ml/model, SageMaker's absolute
paths), and writes the hyperparameters it got to hps.json there and a line to
$SM_OUTPUT_DATA_DIR/done."""

import json
import os
import shutil

if os.environ.get("USE_OPT_ML"):
    channel, model = "/opt/ml/input/data/train", "/opt/ml/model"
else:
    channel, model = os.environ["SM_CHANNEL_TRAIN"], os.environ["SM_MODEL_DIR"]
for name in sorted(os.listdir(channel)):
    shutil.copy(os.path.join(channel, name), os.path.join(model, name))
with open(os.path.join(model, "hps.json"), "w") as f:
    f.write(os.environ.get("SM_HPS", "{}"))
os.makedirs(os.environ["SM_OUTPUT_DATA_DIR"], exist_ok=True)
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "done"), "w") as f:
    f.write(json.dumps({"host": os.environ.get("SM_CURRENT_HOST")}))
