"""Backup and restore (issue 15, item 7): `qm backup` copies the store of a running server
while clients keep submitting, and a second server started on a fresh data dir holding only
that copy knows every job the first one had answered before the backup began, and of those
answered during it, an unbroken run in submit order (docs/server.md, "Backup and restore")."""

import contextlib
import shutil
import subprocess
import threading
from pathlib import Path

from botocore.exceptions import ClientError

from qm_e2e import Jobs, Server, ShareSpec, make_queue, qm_bin, wait_for, wait_status


def qm_backup(data_dir: Path, to: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [str(qm_bin()), "backup", "--data-dir", str(data_dir), "--to", str(to), *extra]
    print(f"[e2e] {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print(r.stderr, end="", flush=True)
    return r


@contextlib.contextmanager
def restored(backup: Path, credentials: Path, workdir: Path, config: str):
    """A server whose data dir is empty but for the backup and the admin's credentials file, as
    the restore procedure says (the backup holds the principals; the file is the admin's copy
    of its key pair, which the server writes only on a first start)."""
    server = Server(workdir, config, name="restored")
    server.data_dir.mkdir(parents=True)
    shutil.copyfile(backup, server.data_dir / "qm.sqlite3")
    shutil.copyfile(credentials, server.credentials_path)
    try:
        yield server.start()
    finally:
        server.close()


def known(batch, job_id: str) -> bool:
    try:
        batch.describe_service_job(jobId=job_id)
        return True
    except ClientError as e:
        assert "does not exist" in e.response["Error"]["Message"], e
        return False


def same_job(old: dict, new: dict) -> None:
    for key in ("jobId", "jobName", "jobArn", "jobQueue", "createdAt", "status"):
        assert new.get(key) == old.get(key), (key, old.get(key), new.get(key))


def test_a_backup_of_a_running_server_restores_every_job_it_had_answered(
        start_server, tmp_path):
    server = start_server(name="backup")
    try:
        batch = server.client()
        jobs = Jobs(batch, server, tmp_path)
        q = make_queue(batch, "backup", [ShareSpec("X", "RESERVE", 1)], env_max=1)
        finished = jobs.submit(q, "X", "finished", "exit_code.py")
        wait_status(batch, finished, "SUCCEEDED")
        # Two instances against a one-instance share: they wait, and no process runs.
        waiting = [jobs.submit(q, "X", f"waiting-{i}", "exit_code.py", count=2)
                   for i in range(20)]
        before = {jid: batch.describe_service_job(jobId=jid) for jid in [finished, *waiting]}

        # One client submits without a pause for as long as the backup runs.
        during: list[str] = []
        stop = threading.Event()

        def keep_submitting():
            submitter = Jobs(server.client(), server, tmp_path)
            while not stop.is_set():
                during.append(submitter.submit(q, "X", f"during-{len(during)}",
                                               "exit_code.py", count=2))

        thread = threading.Thread(target=keep_submitting)
        thread.start()
        try:
            wait_for(lambda: len(during) >= 5, what="submits to run beside the backup")
            backup = tmp_path / "qm-backup.sqlite3"
            r = qm_backup(server.data_dir, backup)
            in_flight_until = len(during)
        finally:
            stop.set()
            thread.join(timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"wrote {backup}" in r.stderr and " batches" in r.stderr, r.stderr
        print(f"[e2e] {in_flight_until} submits answered by the end of the backup, "
              f"{len(during)} in all")

        with restored(backup, server.credentials_path, tmp_path / "restored",
                      server.config_path.read_text()) as copy:
            new = copy.client()
            for jid, old in before.items():
                same_job(old, new.describe_service_job(jobId=jid))
            present = [known(new, jid) for jid in during]
            k = present.count(True)
            assert present == [True] * k + [False] * (len(present) - k), (
                "the backup holds the submits of one moment: a run from the first, no gaps")
            assert 5 <= k <= in_flight_until + 1, (
                f"{k} of the submits made during the backup are in it; the 5 made before it "
                f"started must be, and none answered after it ended ({in_flight_until})")
            # The restored server is a working server, not a read-only view.
            Jobs(new, copy, tmp_path).submit(q, "X", "after-restore", "exit_code.py", count=2)
    finally:
        server.close()


def test_a_backup_of_a_stopped_server_restores_everything_and_is_never_overwritten_unasked(
        start_server, tmp_path):
    server = start_server(name="backup-stopped")
    try:
        batch = server.client()
        jobs = Jobs(batch, server, tmp_path)
        q = make_queue(batch, "stopped", [ShareSpec("X", "RESERVE", 1)], env_max=1)
        ids = [jobs.submit(q, "X", f"job-{i}", "exit_code.py", count=2) for i in range(5)]
        before = {jid: batch.describe_service_job(jobId=jid) for jid in ids}
        assert server.stop() == 0
        backup = tmp_path / "qm-backup.sqlite3"
        assert qm_backup(server.data_dir, backup).returncode == 0

        again = qm_backup(server.data_dir, backup)
        assert again.returncode == 2 and "--force" in again.stderr, again.stderr
        assert qm_backup(server.data_dir, backup, "--force").returncode == 0

        with restored(backup, server.credentials_path, tmp_path / "restored",
                      server.config_path.read_text()) as copy:
            new = copy.client()
            for jid, old in before.items():
                same_job(old, new.describe_service_job(jobId=jid))
        # The backup left the stopped server's data dir able to start again as it was.
        server.start()
        for jid, old in before.items():
            same_job(old, server.client().describe_service_job(jobId=jid))
    finally:
        server.close()
