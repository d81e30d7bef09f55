"""A job that writes what it was given to the JSON file $DUMP_FILE: its environment, argv,
working directory, whether the SageMaker directories (channels included) exist, and the
config files of $SM_INPUT_CONFIG_DIR. It also prints a marker given as
$LOG_MARKER to stdout and stderr, so a test can find it in the attempt's log files.
"""

import json
import os
import sys

marker = os.environ.get("LOG_MARKER", "")
print(f"stdout {marker}", flush=True)
print(f"stderr {marker}", file=sys.stderr, flush=True)
dirs = {}
channel_vars = [f"SM_CHANNEL_{c.upper()}" for c in json.loads(os.environ.get("SM_CHANNELS", "[]"))]
for name in ["SM_CHECKPOINT_DIR", "SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR"] + channel_vars:
    path = os.environ.get(name)
    dirs[name] = bool(path) and os.path.isdir(path)
config = {}
for name in ("hyperparameters.json", "inputdataconfig.json", "resourceconfig.json"):
    path = os.path.join(os.environ.get("SM_INPUT_CONFIG_DIR", "/nonexistent"), name)
    if os.path.exists(path):
        with open(path) as f:
            config[name] = json.load(f)
dump = {"env": dict(os.environ), "argv": sys.argv[1:], "cwd": os.getcwd(), "dirs_exist": dirs,
        "config": config}
tmp = os.environ["DUMP_FILE"] + ".tmp"
with open(tmp, "w") as f:
    json.dump(dump, f, indent=1)
os.replace(tmp, os.environ["DUMP_FILE"])
