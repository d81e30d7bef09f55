"""A service job's life with real processes: retries driven by evaluateOnExit, timeouts,
termination, clientToken replay, what the process is given, and its logs (spec §3, §5;
DESIGN.md §4)."""

import json
import uuid

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (ACCOUNT, REGION, STORAGE_ROOT, ShareSpec, events, make_queue, pid_alive, still, wait_for,
                    storage_uri, wait_status)

EXITED = "Received status from SageMaker: AlgorithmError: process exited with code "


@pytest.fixture(scope="module")
def q(server):
    batch = server.client()
    return make_queue(batch, "life", [ShareSpec("S", "RESERVE", 3)], env_max=3)


@pytest.fixture(scope="module")
def narrow(server):
    """A queue whose only share has one instance, to make a job wait."""
    batch = server.client()
    return make_queue(batch, "narrow", [ShareSpec("N", "RESERVE", 1)], env_max=1)


def runs(jobs, name):
    return events(jobs.progress(name), "run")


def exit_job(jobs, q, name, codes, **kw):
    return jobs.submit(q, "S", name, "exit_code.py",
                       env={"EXIT_CODES": codes, "PROGRESS_FILE": str(jobs.file(f"{name}.progress"))},
                       **kw)


def test_a_successful_job_reports_its_times_usage_and_training_job(batch, jobs, q):
    jid = exit_job(jobs, q, "ok", "0")
    job = wait_status(batch, jid, "SUCCEEDED")
    assert job["jobArn"] == f"arn:aws:batch:{REGION}:{ACCOUNT}:service-job/{jid}"
    assert job["jobQueue"] == q.arn
    assert job["quotaShareName"] == "S"
    assert job["serviceJobType"] == "SAGEMAKER_TRAINING"
    assert job["schedulingPriority"] == 0, "the default priority is 0"
    assert job["capacityUsage"] == [{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}]
    assert job["createdAt"] <= job["scheduledAt"] <= job["startedAt"] <= job["stoppedAt"]
    assert job["latestAttempt"]["serviceResourceId"]["name"] == "TrainingJobArn"
    assert job["latestAttempt"]["serviceResourceId"]["value"].startswith(
        f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/")
    assert len(job["attempts"]) == 1
    assert not job.get("isTerminated")
    assert "preemptionSummary" not in job or not job["preemptionSummary"].get("preemptedAttemptCount")
    assert json.loads(job["serviceRequestPayload"])["TrainingJobName"] == "ok"


def test_a_failure_matching_a_retry_rule_is_retried_and_the_checkpoint_directory_survives(batch, jobs, q):
    jid = exit_job(jobs, q, "flaky", "3,0", retry={"attempts": 3, "evaluateOnExit": [
        {"onStatusReason": EXITED + "3", "action": "RETRY"},
        {"onStatusReason": "*", "action": "EXIT"},
    ]})
    job = wait_status(batch, jid, "SUCCEEDED")
    attempts = job["attempts"]
    assert len(attempts) == 2, attempts
    assert attempts[0]["statusReason"] == EXITED + "3"
    assert attempts[0]["serviceResourceId"]["value"] != attempts[1]["serviceResourceId"]["value"]
    assert job["latestAttempt"]["serviceResourceId"] == attempts[1]["serviceResourceId"]
    r = runs(jobs, "flaky")
    assert len(r) == 2, r
    ckpt1, ckpt2 = (v.split("ckpt=")[1].split()[0] for v in r)
    assert ckpt1 == ckpt2, "SM_CHECKPOINT_DIR is per job"
    assert r[1].endswith("seen=run1"), f"the second attempt sees the first one's file: {r}"


def test_a_failure_matching_an_exit_rule_is_not_retried(batch, jobs, q):
    jid = exit_job(jobs, q, "broken", "4", retry={"attempts": 3, "evaluateOnExit": [
        {"onStatusReason": "*code 3", "action": "retry"},  # actions match case-insensitively
        {"onStatusReason": "*", "action": "exit"},
    ]})
    job = wait_status(batch, jid, "FAILED")
    assert job["statusReason"] == EXITED + "4"
    assert len(job["attempts"]) == 1
    assert len(runs(jobs, "broken")) == 1


def test_retries_stop_when_the_attempts_run_out(batch, jobs, q):
    jid = exit_job(jobs, q, "hopeless", "5", retry={"attempts": 2})
    job = wait_status(batch, jid, "FAILED")
    assert [a["statusReason"] for a in job["attempts"]] == [EXITED + "5"] * 2
    assert len(runs(jobs, "hopeless")) == 2


def test_the_first_line_of_the_failure_file_is_the_reason_that_retry_rules_match(batch, jobs, q):
    jid = jobs.submit(q, "S", "oom", "write_failure.py", args=["CUDA out of memory"],
                      retry={"attempts": 2, "evaluateOnExit": [
                          {"onStatusReason": "*AlgorithmError: CUDA out of memory*", "action": "EXIT"}]})
    job = wait_status(batch, jid, "FAILED")
    assert job["statusReason"] == "Received status from SageMaker: AlgorithmError: CUDA out of memory"
    assert len(job["attempts"]) == 1


@pytest.mark.parametrize("how", ["attemptDurationSeconds", "MaxRuntimeInSeconds"])
def test_an_attempt_that_runs_past_its_timeout_fails_and_is_not_retried(batch, jobs, q, how):
    name = f"slow_{how}"
    kw = {"timeout": 2} if how == "attemptDurationSeconds" else {"max_runtime": 2}
    jid = jobs.sleeper(q, "S", name, retry={"attempts": 3}, **kw)
    job = wait_status(batch, jid, "FAILED")
    assert job["statusReason"] == "Job attempt duration exceeded timeout"
    assert len(events(jobs.progress(name), "start")) == 1
    assert events(jobs.progress(name), "sigterm"), "the process is stopped with SIGTERM"


def test_terminating_a_runnable_job_fails_it_at_once(batch, jobs, narrow):
    holder = jobs.sleeper(narrow, "N", "holder")
    wait_status(batch, holder, "RUNNING")
    waiting = jobs.sleeper(narrow, "N", "waiting")
    wait_status(batch, waiting, "RUNNABLE")
    batch.terminate_service_job(jobId=waiting, reason="no longer needed")
    job = batch.describe_service_job(jobId=waiting)
    assert job["status"] == "FAILED"
    assert job["statusReason"] == "no longer needed"
    assert job["isTerminated"] is True
    assert not jobs.progress("waiting"), "it never ran"
    listed = batch.list_service_jobs(jobQueue=narrow.name, jobStatus="FAILED")["jobSummaryList"]
    assert [j.get("isTerminated") for j in listed if j["jobId"] == waiting] == [True]
    # Terminating a finished job again is a no-op success.
    batch.terminate_service_job(jobId=waiting, reason="again")
    assert batch.describe_service_job(jobId=waiting)["statusReason"] == "no longer needed"


def test_terminating_a_running_job_stops_its_process_and_frees_its_instance(batch, jobs, narrow):
    victim = jobs.sleeper(narrow, "N", "victim")
    wait_status(batch, victim, "RUNNING")
    pid = wait_for(lambda: jobs.pid("victim"), what="the pid file")
    nxt = jobs.sleeper(narrow, "N", "next")
    batch.terminate_service_job(jobId=victim, reason="stop it")
    assert batch.describe_service_job(jobId=victim)["isTerminated"] is True
    job = wait_status(batch, victim, "FAILED")
    assert job["statusReason"] == "stop it"
    assert events(jobs.progress("victim"), "sigterm")
    wait_for(lambda: not pid_alive(pid), what="the process to be gone")
    wait_status(batch, nxt, "RUNNING")


def test_terminate_service_jobs_counts_unknown_ids_as_successful(batch, jobs, narrow):
    a = jobs.sleeper(narrow, "N", "a")
    b = jobs.sleeper(narrow, "N", "b")
    unknown = str(uuid.uuid4())
    out = batch.terminate_service_jobs(jobs=[a, b, unknown], reason="bulk")
    assert sorted(out["successful"]) == sorted([a, b, unknown])
    assert out["errors"] == []
    for jid in (a, b):
        job = wait_status(batch, jid, "FAILED")
        assert job["statusReason"] == "bulk" and job["isTerminated"] is True


def test_a_replayed_client_token_returns_the_original_job(batch, jobs, narrow):
    token = uuid.uuid4().hex
    first = jobs.sleeper(narrow, "N", "tok", client_token=token)
    again = jobs.sleeper(narrow, "N", "tok", client_token=token)
    assert again == first
    listed = batch.list_service_jobs(jobQueue=narrow.name, filters=[
        {"name": "JOB_NAME", "values": ["tok"]}])["jobSummaryList"]
    assert [j["jobId"] for j in listed] == [first]


def test_a_client_token_reused_with_another_body_is_rejected(batch, jobs, narrow):
    token = uuid.uuid4().hex
    jobs.sleeper(narrow, "N", "tok2", client_token=token)
    with pytest.raises(ClientError) as e:
        jobs.sleeper(narrow, "N", "tok2", client_token=token, priority=7)
    assert e.value.response["Error"]["Code"] == "ClientException"
    assert "clientToken" in e.value.response["Error"]["Message"]


def test_the_process_gets_its_environment_hyperparameters_and_arguments(batch, jobs, q):
    dump = jobs.file("env.json")
    hps = {"epochs": "3", "learning_rate": "0.01"}
    train = STORAGE_ROOT / "channels" / "envjob-train"
    train.mkdir(parents=True, exist_ok=True)
    (train / "data.csv").write_text("1,2\n")
    jid = jobs.submit(q, "S", "envjob", "env_dump.py", args=["--flag", "value with space"],
                      env={"DUMP_FILE": str(dump), "MY_SETTING": "hello"}, hps=hps,
                      channels={"train": storage_uri("channels", "envjob-train")})
    wait_status(batch, jid, "SUCCEEDED")
    d = json.loads(dump.read_text())
    env = d["env"]
    assert d["argv"] == ["--flag", "value with space"]
    assert env["MY_SETTING"] == "hello"
    assert env["QM_JOB_ID"] == jid
    assert env["QM_ATTEMPT"]
    assert json.loads(env["SM_HPS"]) == hps
    assert env.get("SM_HP_EPOCHS", env.get("SM_HP_epochs")) == "3"
    assert env.get("SM_HP_LEARNING_RATE", env.get("SM_HP_learning_rate")) == "0.01"
    assert env["SM_NUM_GPUS"] == "0"
    assert "CUDA_VISIBLE_DEVICES" in env and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["SM_CURRENT_HOST"] in json.loads(env["SM_HOSTS"])
    for var in ("SM_CHECKPOINT_DIR", "SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR"):
        assert env[var].startswith("/"), f"{var}={env[var]!r} should be an absolute path"
    assert d["dirs_exist"]["SM_CHECKPOINT_DIR"], "the checkpoint directory exists when the job starts"
    # SageMaker's config files and channel directory (docs/sagemaker.md).
    assert env["TRAINING_JOB_NAME"] == "envjob"
    assert json.loads(env["SM_CHANNELS"]) == ["train"] and d["dirs_exist"]["SM_CHANNEL_TRAIN"]
    assert d["config"]["hyperparameters.json"] == hps
    assert d["config"]["inputdataconfig.json"]["train"]["TrainingInputMode"] == "File"
    assert d["config"]["resourceconfig.json"]["current_host"] == "algo-1"


def test_stdout_and_stderr_go_to_the_attempts_log_file(batch, jobs, q, server):
    marker = uuid.uuid4().hex
    jid = jobs.submit(q, "S", "logger", "env_dump.py",
                      env={"DUMP_FILE": str(jobs.file("logger.json")), "LOG_MARKER": marker})
    wait_status(batch, jid, "SUCCEEDED")
    logs = list((server.data_dir / "jobs" / jid / "attempts").glob("*/stdout.log"))
    assert len(logs) == 1, f"expected one attempt log under {server.data_dir}/jobs/{jid}/attempts"
    text = logs[0].read_text()
    others = [p.read_text() for p in logs[0].parent.glob("*.log")]
    assert f"stdout {marker}" in text
    assert any(f"stderr {marker}" in t for t in others), "stderr is logged too"


def test_a_disabled_share_still_runs_the_jobs_it_already_has(batch, jobs):
    q2 = make_queue(batch, "disable", [ShareSpec("D", "RESERVE", 1)], env_max=1)
    running = jobs.sleeper(q2, "D", "running")
    wait_status(batch, running, "RUNNING")
    queued = jobs.submit(q2, "D", "queued", "exit_code.py")
    batch.update_quota_share(quotaShareArn=q2.shares["D"], state="DISABLED")
    with pytest.raises(ClientError):
        jobs.sleeper(q2, "D", "refused")
    still(batch, running, "RUNNING", seconds=1)
    batch.terminate_service_job(jobId=running, reason="done")
    wait_status(batch, queued, "SUCCEEDED")
