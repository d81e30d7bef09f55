"""A job that fails the SageMaker way: it writes its reason to `$SM_OUTPUT_DATA_DIR/../failure`
(SageMaker's /opt/ml/output/failure) and exits 1. The reason is argv[1]; a second line is
written too, which the server must not use.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _progress import record  # noqa: E402

reason = sys.argv[1] if len(sys.argv) > 1 else "something went wrong"
out = os.environ["SM_OUTPUT_DATA_DIR"]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "..", "failure"), "w") as f:
    f.write(reason + "\nsecond line with details\n")
record("failed", reason)
sys.exit(1)
