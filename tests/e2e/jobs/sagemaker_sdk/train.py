"""The entry script of test_sagemaker_sdk.py's first job, run by the SDK's own sm_train.sh and
basic_script_driver.py (`python3 train.py --epochs 3 --greeting ... --scale 0.5`).

It reads its channel and its hyperparameters the three ways a SageMaker script can (the
command line the SDK's driver builds, `SM_HPS`, /opt/ml/input/config/hyperparameters.json) and
writes what it saw into /opt/ml/model, which the server packs into model.tar.gz.
"""

import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
parser.add_argument("--greeting", required=True)
parser.add_argument("--scale", type=float, required=True)
args = parser.parse_args()

with open("/opt/ml/input/config/hyperparameters.json") as f:
    hyperparameters_json = json.load(f)
with open("/opt/ml/input/data/train/numbers.txt") as f:
    numbers = [int(x) for x in f.read().split()]
channel_files = sorted(os.listdir("/opt/ml/input/data/train"))

result = {
    "numbers": numbers,
    "total": sum(numbers) * args.epochs * args.scale,
    "greeting": args.greeting,
    "argv": sys.argv[1:],
    "hyperparameters.json": hyperparameters_json,
    "SM_HPS": json.loads(os.environ["SM_HPS"]),
    "SM_CHANNEL_TRAIN": os.environ.get("SM_CHANNEL_TRAIN"),
    "SM_MODEL_DIR": os.environ.get("SM_MODEL_DIR"),
    "channel_files": channel_files,
    "cwd": os.getcwd(),
    "training_job_name": os.environ.get("TRAINING_JOB_NAME"),
}
print(json.dumps(result), flush=True)

os.makedirs("/opt/ml/model/nested", exist_ok=True)
with open("/opt/ml/model/result.json", "w") as f:
    json.dump(result, f)
with open("/opt/ml/model/nested/epochs.txt", "w") as f:
    f.write(f"{args.epochs}\n")
