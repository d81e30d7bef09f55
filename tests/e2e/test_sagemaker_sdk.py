"""The real SageMaker Python SDK v3 (`sagemaker-train`, unmodified) against `qm serve`, with
moto's server as the S3 both of them use (issue 16).

`ModelTrainer` with `SourceCode` uploads the user's code and its own drivers (`sm_drivers`:
sm_train.sh, environment.py, basic_script_driver.py) to S3, and `TrainingQueue.submit` sends a
CreateTrainingJob payload whose entrypoint is `/bin/bash -c "chmod +x
/opt/ml/input/data/sm_drivers/sm_train.sh && /opt/ml/input/data/sm_drivers/sm_train.sh"`, with
three channels: the user's, `code` and `sm_drivers`. For that to run, the server downloads the
channels into /opt/ml/input/data/<channel>, gives the attempt /opt/ml as its own directory,
packs /opt/ml/model into <S3OutputPath>/<TrainingJobName>/output/model.tar.gz after success,
and keeps /opt/ml/checkpoints in step with CheckpointConfig.S3Uri (restored before each
attempt, uploaded while it runs and after it exits). The server's S3 is moto, through the
standard AWS environment of the server process (AWS_ENDPOINT_URL_S3 and a dummy key pair).

sm_train.sh runs `python3` and needs `pip3` (or `pip`) on the job's PATH (it only checks that
pip exists: without `SourceCode.requirements` it installs nothing); under scripts/e2e both are
the e2e venv's.

Needs `sagemaker-train` and `moto[server]` (tests/e2e/requirements.txt): without them the module
is skipped, unless CI=true or QM_REQUIRE_SAGEMAKER is set, where each test fails instead.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from qm_e2e import (ACCOUNT, DEADLINE, JOBS, REGION, TERMINAL, TOKEN_VAR, UNIT, ShareSpec,
                    describe_brief, events, make_queue, unique, wait_for, wait_preempted,
                    wait_status)
from sagemaker_e2e import MotoServer, s3_get, s3_keys, sdk_env, sdk_missing, untar

# Without the SDK or moto the module is skipped; under CI (CI=true, as .ci/run sets it) or with
# QM_REQUIRE_SAGEMAKER each of its tests fails instead (in the `moto` fixture).
_MISSING = sdk_missing()
_REQUIRED = os.environ.get("CI") == "true" or bool(os.environ.get("QM_REQUIRE_SAGEMAKER"))
if _MISSING and not _REQUIRED:
    pytest.skip(_MISSING, allow_module_level=True)

# The SDK's own model_trainer.py imports its deprecated `sagemaker.train.configs` shim.
pytestmark = pytest.mark.filterwarnings(
    "ignore:sagemaker.train.configs has been moved:DeprecationWarning")

SCRIPTS = JOBS / "sagemaker_sdk"
BUCKET = "qm-e2e-sdk"
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/qm-e2e-training:latest"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/qm-e2e-training"
# A job runs the SDK's bash driver, environment.py and basic_script_driver.py before the
# script: allow for that (and for the downloads and the upload) on a busy 2-core machine.
JOB_DEADLINE = max(DEADLINE, 120)


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    if _MISSING:
        pytest.fail(f"CI=true or QM_REQUIRE_SAGEMAKER is set but {_MISSING}", pytrace=False)
    m = MotoServer(tmp_path_factory.mktemp("moto"))
    try:
        m.start()
        yield m
    finally:
        m.stop()


@pytest.fixture(scope="module")
def server(start_server, moto):
    """`qm serve` whose S3 is moto, through the standard AWS environment of its process."""
    s = start_server(name="sagemaker_sdk", env=moto.server_env())
    yield s
    s.close()


@pytest.fixture(scope="module")
def sdk(server, moto, tmp_path_factory):
    """The SDK's environment (Batch at `server` as its admin; S3, IAM and STS at moto) for the
    whole module, an SDK Session with its default bucket in moto, and that bucket's client."""
    with sdk_env(server, moto, tmp_path_factory.mktemp("sdk")):
        import boto3
        from sagemaker.core.helper.session_helper import Session

        s3 = moto.s3()
        s3.create_bucket(Bucket=BUCKET)
        session = Session(boto_session=boto3.Session(region_name=REGION), default_bucket=BUCKET)
        yield SimpleNamespace(session=session, s3=s3, server=server, moto=moto)


def model_trainer(sdk, entry_script: str, base_job_name: str, *, hyperparameters: dict,
                  environment: dict | None = None, checkpoint_uri: str | None = None):
    from sagemaker.train import ModelTrainer
    from sagemaker.core.training.configs import (CheckpointConfig, Compute, SourceCode,
                                                  StoppingCondition)

    env = {TOKEN_VAR: sdk.server.token}
    env.update(environment or {})
    kw = {}
    if checkpoint_uri:
        kw["checkpoint_config"] = CheckpointConfig(s3_uri=checkpoint_uri)
    return ModelTrainer(
        training_image=IMAGE,
        source_code=SourceCode(source_dir=str(SCRIPTS), entry_script=entry_script),
        compute=Compute(instance_type=UNIT, instance_count=1),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=600),
        hyperparameters=hyperparameters,
        environment=env,
        role=ROLE,
        sagemaker_session=sdk.session,
        base_job_name=base_job_name,
        **kw,
    )


# -- what to say when a job does not do what it should -------------------------------------


def attempt_logs(server, job_id: str, chars: int = 3000) -> str:
    """The stdout and stderr of every attempt of the job, as the local executor keeps them
    (`<data-dir>/jobs/<job-id>/attempts/<n>/std{out,err}.log`)."""
    parts = []
    for log in sorted((server.data_dir / "jobs" / job_id / "attempts").glob("*/std*.log")):
        try:
            text = log.read_text(errors="replace")
        except OSError as e:
            text = repr(e)
        parts.append(f"--- {log} ---\n{text[-chars:]}")
    return "\n".join(parts) or f"(no attempt logs of {job_id})"


def explain(sdk, job: dict) -> str:
    return (json.dumps(describe_brief(job), indent=1, default=str) + "\n"
            + attempt_logs(sdk.server, job["jobId"]) + "\n" + sdk.server.log_tail())


def submitted_payload(queued) -> dict:
    return json.loads(queued.describe()["serviceRequestPayload"])


def model_files(sdk, payload: dict, job: dict) -> dict[str, bytes]:
    """The files of <S3OutputPath>/<TrainingJobName>/output/model.tar.gz."""
    uri = (f"{payload['OutputDataConfig']['S3OutputPath'].rstrip('/')}/"
           f"{payload['TrainingJobName']}/output/model.tar.gz")
    data = s3_get(sdk.s3, uri)
    bucket_keys = s3_keys(sdk.s3, payload["OutputDataConfig"]["S3OutputPath"])
    assert data is not None, (
        f"the job SUCCEEDED but {uri} is not in S3 (the server packs /opt/ml/model into it after "
        f"success); keys under the output path: {bucket_keys}\n{explain(sdk, job)}")
    return untar(data)


# -- tests --------------------------------------------------------------------------------


def test_a_model_trainer_job_gets_its_channel_and_hyperparameters_and_its_model_is_uploaded(
        sdk, batch, jobs):
    from sagemaker.train.aws_batch.training_queue import TrainingQueue
    from sagemaker.core.training.configs import InputData

    q = make_queue(batch, "sdk", [ShareSpec("research", "RESERVE", 1)], env_max=1)
    data_prefix = f"datasets/{unique('numbers')}/"
    sdk.s3.put_object(Bucket=BUCKET, Key=data_prefix + "numbers.txt", Body=b"3 4 5\n")
    trainer = model_trainer(sdk, "train.py", unique("sdk-train"),
                            hyperparameters={"epochs": 3, "greeting": "hello qm", "scale": 0.5})

    queue = TrainingQueue(q.name)
    queued = queue.submit(
        trainer, [InputData(channel_name="train", data_source=f"s3://{BUCKET}/{data_prefix}")],
        quota_share_name="research", priority=5)

    jobs.ids.append(queued.describe()["jobId"])  # terminated at teardown if left unfinished
    payload = submitted_payload(queued)
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"]
                for c in payload["InputDataConfig"]}
    assert set(channels) == {"train", "code", "sm_drivers"}, (
        f"the SDK should submit the user's channel plus `code` and `sm_drivers`: {channels}")
    assert channels["train"] == f"s3://{BUCKET}/{data_prefix}", channels
    assert payload["AlgorithmSpecification"]["ContainerEntrypoint"] == ["/bin/bash"], payload
    assert payload["HyperParameters"] == {"epochs": "3", "greeting": "hello qm", "scale": "0.5"}
    drivers = s3_keys(sdk.s3, channels["sm_drivers"])
    assert any(k.endswith("/sm_train.sh") for k in drivers), (
        f"the SDK should have uploaded sm_train.sh to {channels['sm_drivers']}: {drivers}")

    listed = queue.list_jobs(job_name=queued.job_name)
    assert [j.job_arn for j in listed] == [queued.job_arn], (
        f"TrainingQueue.list_jobs(job_name={queued.job_name!r}) should find the job "
        f"{queued.job_arn}: {[(j.job_name, j.job_arn) for j in listed]}")
    assert listed[0].quota_share_name == "research", vars(listed[0])

    job = queued.wait(timeout=JOB_DEADLINE)
    assert job["status"] == "SUCCEEDED", (
        f"the SDK's job should succeed (sm_train.sh, its drivers and train.py, with the channels "
        f"downloaded from S3):\n{explain(sdk, job)}")
    assert job["quotaShareName"] == "research" and job["schedulingPriority"] == 5, job
    done = queue.list_jobs_by_share(status="SUCCEEDED", quota_share_name="research")
    assert queued.job_arn in [j.job_arn for j in done], (
        f"list_jobs_by_share(SUCCEEDED, research) should list the job: "
        f"{[(j.job_name, j.job_arn) for j in done]}")

    files = model_files(sdk, payload, job)
    assert set(files) >= {"result.json", "nested/epochs.txt"}, (
        f"model.tar.gz should hold /opt/ml/model's files at its root: {sorted(files)}")
    result = json.loads(files["result.json"])
    assert result["numbers"] == [3, 4, 5], (
        f"the script should have read the `train` channel downloaded from "
        f"s3://{BUCKET}/{data_prefix}: {result}")
    assert result["channel_files"] == ["numbers.txt"], result
    assert result["total"] == 18.0, f"(3+4+5) * epochs 3 * scale 0.5: {result}"
    assert result["hyperparameters.json"] == {"epochs": "3", "greeting": "hello qm",
                                              "scale": "0.5"}, result
    assert result["SM_HPS"] == {"epochs": 3, "greeting": "hello qm", "scale": 0.5}, result
    assert result["argv"] == ["--epochs", "3", "--greeting", "hello qm", "--scale", "0.5"], result
    assert result["cwd"] == "/opt/ml/input/data/code", result
    assert result["training_job_name"] == payload["TrainingJobName"], result
    assert files["nested/epochs.txt"] == b"3\n", files["nested/epochs.txt"]


def test_a_preempted_model_trainer_job_resumes_from_its_s3_checkpoint(sdk, batch, jobs):
    from sagemaker.train.aws_batch.training_queue import TrainingQueue

    # A's own instance is held by a filler of higher priority, so the SDK job borrows B's idle
    # one; B's owner job then reclaims it from the SDK job (the lowest-priority borrower).
    q = make_queue(batch, "sdkckpt", [
        ShareSpec("A", "LEND_AND_BORROW", 1, borrow_limit=-1),
        ShareSpec("B", "LEND", 1),
    ], env_max=2)
    filler = jobs.sleeper(q, "A", "a_filler", priority=9)
    wait_status(batch, filler, "RUNNING")

    checkpoint_uri = f"s3://{BUCKET}/checkpoints/{unique('ckpt')}"
    progress = jobs.file("sdk.progress")
    trainer = model_trainer(sdk, "checkpointing.py", unique("sdk-ckpt"),
                            hyperparameters={"step_seconds": 0.2, "resume_steps": 3,
                                             "max_seconds": JOB_DEADLINE},
                            environment={"PROGRESS_FILE": str(progress)},
                            checkpoint_uri=checkpoint_uri)
    queued = TrainingQueue(q.name).submit(trainer, None, quota_share_name="A", priority=1)
    payload = submitted_payload(queued)
    assert payload["CheckpointConfig"] == {"S3Uri": checkpoint_uri,
                                           "LocalPath": "/opt/ml/checkpoints"}, payload
    job_id = queued.describe()["jobId"]
    jobs.ids.append(job_id)  # terminated at teardown if it is left unfinished

    def steps():
        return [int(v) for v in events(jobs.progress("sdk"), "step")]

    def three_steps():
        if len(steps()) >= 3:
            return True
        job = batch.describe_service_job(jobId=job_id)
        if job["status"] in TERMINAL:
            raise AssertionError(f"the SDK job ended before its script took 3 steps "
                                 f"({progress}):\n{explain(sdk, job)}")
        return False

    wait_for(three_steps, JOB_DEADLINE, f"the SDK job's first attempt to take 3 steps ({progress})",
             batch=batch, job_ids=[job_id])
    owner = jobs.sleeper(q, "B", "b_owner", priority=0)
    job = wait_preempted(batch, job_id)
    reason = job["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"]
    assert reason == "Preempted: capacity reclaimed by quota share B", reason
    # The attempt is over (the job is RUNNABLE again): its script must have had its SIGTERM and
    # the grace period to save. The process group's leader is the SDK's /bin/bash, which dies at
    # once on SIGTERM, while train.py (under basic_script_driver.py) is still saving.
    try:
        sigterm = wait_for(lambda: events(jobs.progress("sdk"), "sigterm"), 10,
                           "the preempted attempt's script to record its SIGTERM")
    except AssertionError:
        raise AssertionError(
            "the preempted attempt's checkpointing.py never finished its SIGTERM handler (no "
            "`sigterm` line in its progress): it must get SIGTERM and up to the stop grace "
            "period to save and exit, even after the process group's leader (the SDK's "
            f"/bin/bash, which SIGTERM ends at once) has exited. Progress: "
            f"{jobs.progress('sdk')[-5:]}\n"
            f"{explain(sdk, batch.describe_service_job(jobId=job_id))}") from None
    final_step = int(sigterm[0])
    assert final_step >= 3, jobs.progress("sdk")

    state_uri = f"{checkpoint_uri}/step.json"

    def uploaded_step():
        data = s3_get(sdk.s3, state_uri)
        return json.loads(data)["step"] if data else None

    try:
        wait_for(lambda: uploaded_step() == final_step, DEADLINE,
                 f"{state_uri} to hold the step the preempted attempt saved on SIGTERM "
                 f"({final_step})")
    except AssertionError as e:
        raise AssertionError(
            f"{e}\nlast uploaded: {uploaded_step()}; keys: {s3_keys(sdk.s3, checkpoint_uri)}\n"
            f"{explain(sdk, batch.describe_service_job(jobId=job_id))}") from None

    # Only a restore from S3 can bring this file into the next attempt's /opt/ml/checkpoints.
    planted = unique("planted")
    bucket, key = checkpoint_uri[len("s3://"):].split("/", 1)
    sdk.s3.put_object(Bucket=bucket, Key=f"{key}/planted.txt", Body=planted.encode())
    assert batch.describe_service_job(jobId=job_id)["status"] == "RUNNABLE", (
        "the SDK job must still wait while B's owner and A's filler hold both instances")

    batch.terminate_service_job(jobId=owner, reason="the owner is done")
    job = queued.wait(timeout=JOB_DEADLINE)
    assert job["status"] == "SUCCEEDED", (
        f"the SDK job should resume and succeed after the owner's job ended:\n{explain(sdk, job)}")
    starts = [int(v) for v in events(jobs.progress("sdk"), "start")]
    assert starts == [0, final_step], (
        f"the second attempt should start from the checkpoint the first left in S3 "
        f"(step {final_step}): starts {starts}\n{attempt_logs(sdk.server, job_id)}")

    result = json.loads(model_files(sdk, payload, job)["result.json"])
    assert result["resumed_from"] == final_step, (
        f"the model should record the step it resumed from ({final_step}): {result}")
    assert result["planted"] == planted, (
        f"{checkpoint_uri}/planted.txt, put there between the attempts, should have been "
        f"restored into /opt/ml/checkpoints before the second attempt: {result}")
    assert result["final_step"] == final_step + 3, result
    final_state = s3_get(sdk.s3, state_uri)
    assert final_state and json.loads(final_state)["step"] == final_step + 3, (
        f"the last checkpoint should be uploaded after the process exits: {final_state!r}")
