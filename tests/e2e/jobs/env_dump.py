"""A job that writes what it was given to the JSON file $DUMP_FILE: its environment, argv,
working directory and whether the SageMaker directories exist. It also prints a marker given as
$LOG_MARKER to stdout and stderr, so a test can find it in the attempt's log files.
"""

import json
import os
import sys

marker = os.environ.get("LOG_MARKER", "")
print(f"stdout {marker}", flush=True)
print(f"stderr {marker}", file=sys.stderr, flush=True)
dirs = {}
for name in ("SM_CHECKPOINT_DIR", "SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR"):
    path = os.environ.get(name)
    dirs[name] = bool(path) and os.path.isdir(path)
dump = {"env": dict(os.environ), "argv": sys.argv[1:], "cwd": os.getcwd(), "dirs_exist": dirs}
tmp = os.environ["DUMP_FILE"] + ".tmp"
with open(tmp, "w") as f:
    json.dump(dump, f, indent=1)
os.replace(tmp, os.environ["DUMP_FILE"])
