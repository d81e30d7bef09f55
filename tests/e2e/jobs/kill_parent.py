"""A hostile job: records its start in $PROGRESS_FILE, then SIGKILLs its parent (its
supervisor, for the local executor) and waits to be stopped."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _progress import record  # noqa: E402

record("start", str(os.getpid()))
os.kill(os.getppid(), signal.SIGKILL)
time.sleep(600)
