"""A job cannot hurt the server or other jobs (issue 13).

- Where jobs run as the server's user (`[executor] isolation = "none"`, or a server that is not
  root), a job that kills its supervisor is queued again for free only `max_lost_attempts`
  times in a row; the next lost attempt FAILS it, and the other jobs run (issue 38: the
  server itself is never the job's parent).
- Where the server is root, each attempt runs under a uid of its own: it cannot kill the
  server, signal another job, or read the database or another job's directory.
- A checkpoint path that climbs out of the job is refused at submit.
- Isolation fails closed (issue 40): a root server whose data dir lies under a directory closed
  to other users keeps job directories where job uids can reach them (`/var/lib/qm-jobs/<key>`)
  instead of running jobs as root; one told to put them where they cannot be reached refuses
  to start and says how to fix it. Isolated attempts outlive a kill -9 of the server."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (ACCOUNT, TOKEN_VAR, UNIT, Server, ShareSpec, config_toml, free_port,
                    make_queue, pid_alive, qm_bin, storage_uri, wait_for, wait_status)

MAX_LOST = 2


@pytest.fixture
def server(start_server):
    """A server of its own: the hostile job kills it."""
    config = config_toml().replace(
        'kind = "local"\n', f'kind = "local"\nmax_lost_attempts = {MAX_LOST}\n')
    s = start_server(config=config, name="isolation")
    yield s
    s.close()


def test_a_job_that_kills_its_supervisor_ends_failed_after_max_lost_attempts_and_others_run(
        server, jobs, tmp_path):
    batch = server.client()
    jobs.batch = batch
    q = make_queue(batch, "hostile", [ShareSpec("H", "RESERVE", 1), ShareSpec("O", "RESERVE", 1)],
                   env_max=2)
    progress = tmp_path / "killer.progress"
    killer = jobs.submit(q, "H", "killer", "kill_parent.py", env={"PROGRESS_FILE": str(progress)})
    # Each attempt kills its supervisor: lost, queued again for free MAX_LOST times, then
    # FAILED. The server is no process's parent but the supervisors': it never dies.
    job = wait_status(batch, killer, "FAILED")
    assert f"lost {MAX_LOST + 1} times in a row" in job["statusReason"], job["statusReason"]
    assert f"max_lost_attempts ({MAX_LOST})" in job["statusReason"], job["statusReason"]
    assert "supervisor" in job["statusReason"], job["statusReason"]
    starts = [line for line in progress.read_text().splitlines() if line.startswith("start ")]
    assert len(starts) == MAX_LOST + 1, progress.read_text()
    # What the killed supervisors left (the job itself) was stopped.
    for line in starts:
        pid = int(line.split()[1])
        wait_for(lambda p=pid: not pid_alive(p), what=f"the orphaned job process {pid} to be stopped")
    # Everything else runs: another share's job succeeds on the same server.
    other = jobs.submit(q, "O", "other", "exit_code.py", env={"EXIT_CODES": "0"})
    wait_status(batch, other, "SUCCEEDED")
    assert server.proc.poll() is None
    assert server.starts == 1


def sh_payload(script: str, name: str, env: dict | None = None, checkpoint: str | None = None) -> str:
    """A training job that runs `/bin/sh -c script`: isolated jobs run under a uid that may not
    read this checkout or its venv."""
    p = {
        "TrainingJobName": name,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "unused",
                                   "ContainerEntrypoint": ["/bin/sh", "-c", script]},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": storage_uri("output")},
        "StoppingCondition": {"MaxRuntimeInSeconds": 300},
        "Environment": env or {},
    }
    if checkpoint is not None:
        p["CheckpointConfig"] = {"LocalPath": checkpoint}
    return json.dumps(p)


@pytest.fixture
def isolated():
    """A root server with `isolation = "uid"`, its data dir where other users may traverse to
    it (pytest's own temporary directories are closed to them)."""
    if os.geteuid() != 0:
        pytest.skip("isolation runs jobs under their own uids only when the server is root")
    workdir = Path(tempfile.mkdtemp(prefix="qm-isolation-", dir="/tmp"))
    workdir.chmod(0o711)
    config = config_toml(isolation="uid")
    server = Server(workdir, config, name="isolated").start()
    try:
        yield server
    finally:
        server.close()
        # Outside pytest's own temporary directories, which it prunes: gone with the test.
        shutil.rmtree(workdir, ignore_errors=True)


def submit_sh(batch, q, share, name, script, env=None, checkpoint=None):
    return batch.submit_service_job(
        jobName=name, jobQueue=q.name, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=share,
        serviceRequestPayload=sh_payload(script, name, env, checkpoint))["jobId"]


def test_an_isolated_job_cannot_kill_the_server_signal_others_or_read_their_files(isolated):
    batch = isolated.client()
    q = make_queue(batch, "iso", [ShareSpec("A", "RESERVE", 1), ShareSpec("B", "RESERVE", 1)],
                   env_max=2)
    data = isolated.data_dir
    other = submit_sh(batch, q, "A", "victim",
                      'echo "$$" > "$SM_OUTPUT_DIR/pid"; echo secret > "$SM_OUTPUT_DIR/secret"; exec sleep 300')
    wait_status(batch, other, "RUNNING")
    pid_file = data / "jobs" / other / "output" / "pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the victim never wrote its pid"
        time.sleep(0.1)
    victim_pid = int(pid_file.read_text())
    probe = (
        'id -u; '
        'cat "$DB" >/dev/null && echo READ-DB; '
        'cat "$CREDS" >/dev/null && echo READ-KEYS; '
        'ls "$DATA" >/dev/null && echo LISTED-DATA; '
        'cat "$OTHER/output/secret" && echo READ-OTHER; '
        'kill -0 "$VICTIM" && echo SIGNALLED-OTHER; '
        'kill -9 "$PPID" && echo KILLED-SERVER; '
        'echo mine > "$SM_OUTPUT_DIR/mine" && echo WROTE-OWN'
    )
    env = {"DB": str(data / "qm.sqlite3"), "CREDS": str(data / "credentials"), "DATA": str(data),
           "OTHER": str(data / "jobs" / other), "VICTIM": str(victim_pid)}
    prober = submit_sh(batch, q, "B", "prober", probe, env)
    wait_status(batch, prober, "SUCCEEDED")
    out = (data / "jobs" / prober / "attempts" / "1" / "stdout.log").read_text()
    uid = int(out.splitlines()[0])
    assert uid != 0 and uid >= 1000, out
    for refused in ["READ-DB", "READ-KEYS", "LISTED-DATA", "READ-OTHER", "SIGNALLED-OTHER", "KILLED-SERVER"]:
        assert refused not in out, f"{refused}:\n{out}"
    assert "WROTE-OWN" in out, out
    assert isolated.proc.poll() is None, isolated.log_tail()
    assert os.path.exists(f"/proc/{victim_pid}"), "the other job was killed"
    assert batch.describe_service_job(jobId=other)["status"] == "RUNNING"
    assert "each attempt runs under a uid of its own" in Path(isolated.log_path).read_text()
    batch.terminate_service_job(jobId=other, reason="done")
    wait_status(batch, other, "FAILED")


@pytest.mark.parametrize("path", ["../../../../x", "../../0b9d7c1e/checkpoints", "/../../etc/cron.d"])
def test_a_checkpoint_path_that_leaves_the_job_is_refused_at_submit(server, path):
    batch = server.client()
    q = make_queue(batch, "paths", [ShareSpec("A", "RESERVE", 1)], env_max=1)
    with pytest.raises(ClientError) as e:
        submit_sh(batch, q, "A", "escape", "true", checkpoint=path)
    err = e.value.response["Error"]
    assert err["Code"] == "ClientException", err
    assert "CheckpointConfig.LocalPath" in err["Message"] and "'..'" in err["Message"], err


def need_root():
    if os.geteuid() != 0:
        pytest.skip("isolation runs jobs under their own uids only when the server is root")


def test_a_data_dir_under_a_closed_directory_keeps_jobs_apart_not_run_as_root():
    """Before issue 40 this setup (a root server's data dir under /root, say) ran every job as
    root, and a job could read the database."""
    need_root()
    closed = Path(tempfile.mkdtemp(prefix="qm-closed-", dir="/tmp"))
    closed.chmod(0o700)
    server = Server(closed / "srv", config_toml(isolation="auto"), name="closed").start()
    try:
        jobs_dir = server.jobs_dir
        assert not jobs_dir.is_relative_to(closed), server.log_tail()
        assert str(jobs_dir).startswith("/var/lib/qm-jobs/"), jobs_dir
        assert "each attempt runs under a uid of its own" in server.log_path.read_text()
        batch = server.client()
        q = make_queue(batch, "closed", [ShareSpec("A", "RESERVE", 1)], env_max=1)
        data = server.data_dir
        probe = ('id -u; cat "$DB" >/dev/null && echo READ-DB; ls "$DATA" >/dev/null && echo LISTED-DATA; '
                 'echo mine > "$SM_OUTPUT_DIR/mine" && echo WROTE-OWN')
        job = submit_sh(batch, q, "A", "probe", probe, {"DB": str(data / "qm.sqlite3"), "DATA": str(data)})
        wait_status(batch, job, "SUCCEEDED")
        out = (jobs_dir / job / "attempts" / "1" / "stdout.log").read_text()
        assert int(out.splitlines()[0]) >= 1000, out
        assert "READ-DB" not in out and "LISTED-DATA" not in out, out
        assert "WROTE-OWN" in out, out
        assert (closed.stat().st_mode & 0o777) == 0o700, "the server opened the closed directory"
    finally:
        server.close()
        if "jobs_dir" in locals():
            shutil.rmtree(jobs_dir.parent, ignore_errors=True)
        shutil.rmtree(closed, ignore_errors=True)


def test_isolation_uid_with_a_work_dir_job_uids_cannot_reach_refuses_to_start():
    need_root()
    closed = Path(tempfile.mkdtemp(prefix="qm-closed-", dir="/tmp"))
    closed.chmod(0o700)
    try:
        config = config_toml(isolation="uid").replace(
            'kind = "local"\n', f'kind = "local"\nwork_dir = "{closed}/work"\n')
        (closed / "config.toml").write_text(config)
        cmd = [str(qm_bin()), "serve", "--listen", f"127.0.0.1:{free_port()}",
               "--data-dir", str(closed / "data"), "--config", str(closed / "config.toml")]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=60, env=dict(os.environ, **{TOKEN_VAR: "closed-work-dir"}))
        out = proc.stdout
        assert proc.returncode != 0, out
        assert "executor.isolation" in out and str(closed) in out, out
        assert "[executor] work_dir" in out and "isolation = " in out and "none" in out, out
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_an_isolated_attempt_outlives_a_kill_9_of_the_server_and_keeps_its_uid(isolated):
    batch = isolated.client()
    q = make_queue(batch, "iso-adopt", [ShareSpec("A", "RESERVE", 1)], env_max=1)
    script = ('id -u > "$SM_OUTPUT_DIR/uid"; i=0; '
              'while :; do i=$((i+1)); echo $i > "$SM_OUTPUT_DIR/step"; sleep 0.2; done')
    job = submit_sh(batch, q, "A", "adopted", script)
    wait_status(batch, job, "RUNNING")
    out = isolated.jobs_dir / job / "output"
    wait_for(lambda: (out / "step").exists(), what="the job to step")
    started = batch.describe_service_job(jobId=job)["startedAt"]
    isolated.kill9()
    isolated.start()
    batch = isolated.client()
    seen = int((out / "step").read_text() or 0)
    wait_for(lambda: int((out / "step").read_text() or 0) > seen + 2, what="the adopted job to go on")
    d = batch.describe_service_job(jobId=job)
    assert d["status"] == "RUNNING" and d["startedAt"] == started, d
    assert "adopted 1 running attempt(s)" in isolated.log_path.read_text()
    batch.terminate_service_job(jobId=job, reason="done")
    wait_status(batch, job, "FAILED")
    assert int((out / "uid").read_text()) >= 1000
