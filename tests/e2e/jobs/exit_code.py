"""A job whose n-th run exits with the n-th code of $EXIT_CODES (comma separated; the last
one repeats), e.g. EXIT_CODES=3,0 fails once and then succeeds.

With $WAIT_FOR set, it first waits until that file exists (a test holds it running).

The run number is counted in $SM_CHECKPOINT_DIR/runs, which survives attempts. Each run records
`run <n> code=<c> ckpt=<SM_CHECKPOINT_DIR>` in $PROGRESS_FILE and leaves a marker file
`run<n>` in the checkpoint directory.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _progress import record  # noqa: E402

while os.environ.get("WAIT_FOR") and not os.path.exists(os.environ["WAIT_FOR"]):
    time.sleep(0.05)
ckpt_dir = os.environ["SM_CHECKPOINT_DIR"]
os.makedirs(ckpt_dir, exist_ok=True)
counter = os.path.join(ckpt_dir, "runs")
runs = 0
if os.path.exists(counter):
    with open(counter) as f:
        runs = int(f.read().strip() or "0")
runs += 1
with open(counter, "w") as f:
    f.write(str(runs))
seen = sorted(n for n in os.listdir(ckpt_dir) if n.startswith("run") and n != "runs")
open(os.path.join(ckpt_dir, f"run{runs}"), "w").close()

codes = [int(c) for c in os.environ.get("EXIT_CODES", "0").split(",")]
code = codes[min(runs, len(codes)) - 1]
record("run", f"{runs} code={code} ckpt={ckpt_dir} seen={','.join(seen)}")
print(f"run {runs}: exiting with {code}", flush=True)
sys.exit(code)
