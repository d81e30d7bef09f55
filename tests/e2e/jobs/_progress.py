"""Shared by the job programs: append one line to the progress file named by $PROGRESS_FILE.

Each line is `<event> <value> pid=<pid> attempt=<QM_ATTEMPT>`; the tests read these lines to
see what every attempt did (started at which step, was stopped, finished).
"""

import os


def record(event, value=""):
    path = os.environ.get("PROGRESS_FILE")
    if not path:
        return
    line = f"{event} {value} pid={os.getpid()} attempt={os.environ.get('QM_ATTEMPT', '?')}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
