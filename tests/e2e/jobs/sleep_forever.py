"""A job that runs until it is stopped.

Records `start` (and `sigterm` when it is asked to stop) in $PROGRESS_FILE and writes its pid
to $PID_FILE when set. With `--ignore-sigterm` it ignores SIGTERM, so only SIGKILL (after the
server's grace period) ends it.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _progress import record  # noqa: E402

ignore = "--ignore-sigterm" in sys.argv[1:]


def on_sigterm(_signo, _frame):
    record("sigterm", "ignored" if ignore else "")
    if not ignore:
        sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)
if os.environ.get("PID_FILE"):
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(str(os.getpid()))
record("start")
print("sleeping until stopped", flush=True)
while True:
    time.sleep(0.1)
