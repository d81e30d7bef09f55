"""The SageMaker training contract with real processes and a real file:// store (issue 16;
docs/sagemaker.md): channels downloaded before the entrypoint, /opt/ml as each attempt's own
directory, model.tar.gz and output.tar.gz uploaded after a success, checkpoints restored from
CheckpointConfig.S3Uri before every attempt and uploaded when a preempted attempt stops, and
storage errors failing the attempt before the entrypoint runs. The same code paths against S3
(moto's server) and the SageMaker SDK: test_sagemaker_sdk.py."""

from __future__ import annotations

import json
import sys
import tarfile
import uuid

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (JOBS, STORAGE_ROOT, TOKEN_VAR, ShareSpec, events, make_queue, read_progress,
                    storage_uri, submit_training, wait_for, wait_preempted, wait_status)

pytestmark = pytest.mark.skipif(
    not __import__("os").geteuid() == 0,
    reason="/opt/ml per attempt needs a root server (a mount namespace); the suite runs as root in CI")


def channel(name: str, files: dict[str, str]) -> str:
    d = STORAGE_ROOT / "channels" / name
    d.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return storage_uri("channels", name)


def submit(batch, jobs, q, share, name, *, hps, train_uri, checkpoint_uri=None, priority=0):
    """The opt_ml_job.py script as a host process."""
    return submit_training(
        batch, jobs, q, share, name, hps=hps, train_uri=train_uri, checkpoint_uri=checkpoint_uri,
        priority=priority,
        algorithm={"TrainingImage": "unused",
                   "ContainerEntrypoint": [sys.executable, str(JOBS / "opt_ml_job.py")]},
        env={"PROGRESS_FILE": str(jobs.file(f"{name}.progress")), TOKEN_VAR: jobs.server.token})


def archive(name: str, which: str) -> dict[str, bytes]:
    path = STORAGE_ROOT / "models" / name / "output" / which
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def stderr_log(server, job_id: str, attempt: int = 1) -> str:
    return (server.data_dir / "jobs" / job_id / "attempts" / str(attempt) / "stderr.log").read_text()


@pytest.fixture
def q(batch):
    return make_queue(batch, "contract", [
        ShareSpec("A", "LEND_AND_BORROW", 1, borrow_limit=-1),
        ShareSpec("B", "LEND", 2),
    ], env_max=3)


def test_a_script_using_only_opt_ml_gets_its_channel_and_its_model_is_uploaded(batch, jobs, q, server):
    # Two jobs at once: each sees its own /opt/ml.
    names = [f"contract-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    ids = []
    for i, name in enumerate(names):
        uri = channel(name, {"data.csv": f"rows of {name}\n", "sub/extra.txt": "x"})
        ids.append(submit(batch, jobs, q, "B", name, hps={"steps": "5", "lr": str(i)}, train_uri=uri))
    for jid in ids:
        wait_status(batch, jid, "SUCCEEDED")
    for i, (name, jid) in enumerate(zip(names, ids)):
        model = json.loads(archive(name, "model.tar.gz")["model.json"])
        assert model["job"] == name, model
        assert model["data"] == {"data.csv": f"rows of {name}\n"}, "the channel reached the script"
        assert model["hps"] == {"steps": "5", "lr": str(i)}, "the hyperparameters reached it"
        assert archive(name, "output.tar.gz") == {"metrics.txt": b"loss=0.1\n"}
        log = stderr_log(server, jid)
        assert f"[qm] downloading channel train from {storage_uri('channels', name)}" in log, log
        assert "[qm] uploaded model.tar.gz" in log, log
    # The server logs to a file here: its lines say the same, without colour codes.
    server_log = server.log_path.read_text()
    assert "INFO" in server_log and "downloading channel train" in server_log
    assert "\x1b[" not in server_log, "colour codes in a log file"


def test_a_preempted_job_resumes_from_the_checkpoint_in_storage_not_from_local_files(batch, jobs, q, server):
    name = f"resume-{uuid.uuid4().hex[:6]}"
    ckpt = STORAGE_ROOT / "checkpoints" / name
    # A's own instance is taken, so the job borrows one of B's.
    filler = jobs.sleeper(q, "A", "filler", priority=9)
    wait_status(batch, filler, "RUNNING")
    jid = submit(batch, jobs, q, "A", name, hps={"steps": "2000", "step_seconds": "0.05"},
                 train_uri=channel(name, {"data.csv": "d"}), checkpoint_uri=storage_uri("checkpoints", name))
    wait_for(lambda: events(read_progress(jobs.file(f"{name}.progress")), "start"),
             what="the borrower to start")
    # B reclaims both of its instances: A's job borrowed one of them.
    owners = [jobs.sleeper(q, "B", f"owner{i}") for i in range(2)]
    wait_preempted(batch, jid)
    stopped = wait_for(lambda: events(read_progress(jobs.file(f"{name}.progress")), "sigterm"),
                       what="the job to get SIGTERM and checkpoint")
    step = int(stopped[0])
    # The last checkpoint was uploaded after the process exited...
    wait_for(lambda: (ckpt / "step").exists() and (ckpt / "step").read_text() == str(step),
             what=f"checkpoint step {step} in storage")
    # ...and the next attempt restores what storage holds, wherever it runs: change it there.
    (ckpt / "step").write_text("1990")
    for o in owners:
        batch.terminate_service_job(jobId=o, reason="done")
    wait_status(batch, jid, "SUCCEEDED", timeout=120)
    starts = events(read_progress(jobs.file(f"{name}.progress")), "start")
    assert starts == ["0", "1990"], starts
    model = json.loads(archive(name, "model.tar.gz")["model.json"])
    assert model["resumed_from"] == 1990
    # The steps it wrote to /opt/ml/output/progress.json: resumed, past where it stopped.
    status, _, body = server.signed("GET", f"/qm/v1/jobs/{jid}/attempt")
    assert status == 200, body
    [record] = json.loads(body)["resumes"]
    assert record["outcome"] == "resumed", record
    assert (record["checkpointStep"], record["previousLastStep"], record["firstStep"]) == (step, step, 1990)
    assert record["recomputedSteps"] == 0


def test_a_missing_channel_fails_the_attempt_before_the_entrypoint_runs(batch, jobs, q, server):
    name = f"missing-{uuid.uuid4().hex[:6]}"
    jid = submit(batch, jobs, q, "B", name, hps={}, train_uri=storage_uri("channels", "nothing-here"))
    job = wait_status(batch, jid, "FAILED")
    assert "downloading channel train" in job["statusReason"], job["statusReason"]
    assert "no objects found" in job["statusReason"], job["statusReason"]
    assert not jobs.file(f"{name}.progress").exists(), "the entrypoint never ran"


def test_a_file_uri_outside_the_allowed_roots_is_refused_at_submit(batch, jobs, q):
    # The executor refuses it again at launch, links included (crates/storage/tests).
    for uri in ("file:///etc", storage_uri("channels", "..", "..", "etc")):
        with pytest.raises(ClientError) as e:
            submit(batch, jobs, q, "B", f"escape-{uuid.uuid4().hex[:6]}", hps={}, train_uri=uri)
        err = e.value.response["Error"]
        assert err["Code"] == "ClientException", err
        assert "InputDataConfig[0].DataSource.S3DataSource.S3Uri" in err["Message"], err
        assert "file_roots" in err["Message"], err
