"""The podman runtime with a real podman and an image the test builds offline (issue 16;
docs/sagemaker.md "Runtimes"): a payload without ContainerEntrypoint runs its TrainingImage,
mapped by [executor.images] to a local image, as `IMAGE train`, with /opt/ml mounted, its
channel downloaded, its model uploaded, and SIGTERM, checkpoint and resume across a
preemption. The image is busybox's static binary and tests/e2e/images/train/train, imported
with `podman import` (no registry is reachable from these machines).

Skipped where podman or busybox is missing, or where podman cannot run a container here
(saying why); under CI=true (.ci/run installs them) those are failures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (HERE, STORAGE_ROOT, Server, ShareSpec, config_toml, make_queue, storage_uri,
                    submit_training, wait_for, wait_preempted, wait_status)

IMAGE = "localhost/qm-e2e-train:1"
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/qm-e2e-train:latest"
BUSYBOX = Path("/bin/busybox")


def unavailable(message: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {message} (.ci/run installs podman, runc and busybox-static)")
    pytest.skip(message)


def podman(*args, check=True, timeout=120) -> subprocess.CompletedProcess:
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def ulimits() -> list[str]:
    """The --ulimit arguments the executor passes (crates/executor/src/container.rs): the
    server's own limits, nproc at most pid_max."""
    import resource
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    out = []
    for name, res, cap in (("nofile", resource.RLIMIT_NOFILE, None),
                           ("nproc", resource.RLIMIT_NPROC, pid_max)):
        soft, hard = resource.getrlimit(res)
        hard = hard if hard != resource.RLIM_INFINITY else (cap or hard)
        hard = min(hard, cap) if cap else hard
        soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
        out += ["--ulimit", f"{name}={soft}:{hard}"]
    return out


@pytest.fixture(scope="module")
def podman_args(tmp_path_factory) -> list[str]:
    """Builds the image and finds the podman arguments that run it here: the default OCI
    runtime, else runc (crun refuses hybrid cgroup hierarchies, which some hosts have)."""
    if os.geteuid() != 0:
        pytest.skip("the podman runtime is tested with a root server (rootful podman)")
    if not shutil.which("podman"):
        unavailable("podman is not installed (apt-get install podman runc)")
    if not BUSYBOX.is_file():
        unavailable(f"{BUSYBOX} is missing (apt-get install busybox-static)")
    root = tmp_path_factory.mktemp("rootfs")
    for d in ("bin", "usr/bin", "tmp", "opt/ml"):
        (root / d).mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin/busybox")
    for tool in ("sh", "cat", "sed", "sleep", "id", "mv", "echo"):
        (root / "bin" / tool).symlink_to("busybox")
    shutil.copy(HERE / "images/train/train", root / "usr/bin/train")
    (root / "usr/bin/train").chmod(0o755)
    (root / "tmp").chmod(0o1777)
    archive = root.parent / "rootfs.tar"
    with tarfile.open(archive, "w") as t:
        t.add(root, arcname=".")
    podman("import", "--change", 'ENTRYPOINT ["/usr/bin/train"]', str(archive), IMAGE)
    tried = []
    for args in ([], ["--runtime", "runc"]):
        r = podman(*args, "run", "--rm", "--pull", "never", "--network", "host",
                   *ulimits(), "--entrypoint", "/bin/sh", IMAGE, "-c", "echo ok",
                   check=False)
        if r.returncode == 0 and r.stdout.strip() == "ok":
            return args
        tried.append(f"podman {' '.join(args)} run: {r.stderr.strip()}")
    unavailable("podman cannot run a container here: " + " | ".join(tried))


@pytest.fixture(scope="module")
def server(podman_args):
    """A root server running images, each attempt under a uid of its own (its data dir where
    those uids may traverse to it: pytest's temporary directories are closed to them)."""
    images = f'[executor.images]\n"123456789012.dkr.ecr.*.amazonaws.com/qm-e2e-train:*" = "{IMAGE}"\n'
    podman_section = f"[executor.podman]\nglobal_args = {json.dumps(podman_args)}\n"
    config = config_toml(count=3, isolation="uid").replace(
        'kind = "local"\n', 'kind = "local"\nruntime = "podman"\n')
    workdir = Path(tempfile.mkdtemp(prefix="qm-podman-", dir="/tmp"))
    workdir.chmod(0o711)
    s = Server(workdir, config + images + podman_section, name="podman").start()
    yield s
    s.close()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def batch(server):
    return server.client()


def submit(batch, jobs, q, share, name, *, steps, checkpoint_uri=None, priority=0):
    """The image's own entrypoint (no ContainerEntrypoint), with a channel of its own."""
    train = STORAGE_ROOT / "channels" / name
    train.mkdir(parents=True, exist_ok=True)
    (train / "data.txt").write_text(f"data of {name}\n")
    return submit_training(
        batch, jobs, q, share, name, hps={"steps": str(steps)},
        train_uri=storage_uri("channels", name), checkpoint_uri=checkpoint_uri, priority=priority,
        algorithm={"TrainingImage": ECR})


def progress(server, job_id: str) -> list[list[str]]:
    path = server.data_dir / "jobs" / job_id / "output" / "data" / "progress"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def model(name: str) -> str:
    with tarfile.open(STORAGE_ROOT / "models" / name / "output" / "model.tar.gz") as t:
        return t.extractfile("model.txt").read().decode()


def test_an_image_without_an_entrypoint_runs_as_image_train_with_opt_ml(batch, jobs, server):
    q = make_queue(batch, "podman", [ShareSpec("S", "RESERVE", 1)], env_max=1)
    name = f"image-{uuid.uuid4().hex[:6]}"
    jid = submit(batch, jobs, q, "S", name, steps=3)
    wait_status(batch, jid, "SUCCEEDED", timeout=120)
    text = model(name)
    assert f"data of {name}" in text and "resumed_from=0 steps=3" in text, text
    start = progress(server, jid)[0]
    assert start[0] == "start" and "model_dir=/opt/ml/model" in start, start
    assert start[2] != "uid=0", f"the container runs as the attempt's own uid: {start}"


def test_an_image_that_reads_as_an_option_is_refused_at_submit(batch, jobs, server):
    q = make_queue(batch, "podbad", [ShareSpec("S", "RESERVE", 1)], env_max=1)
    with pytest.raises(ClientError) as e:
        submit_training(batch, jobs, q, "S", "badimage", hps={}, train_uri=storage_uri("x"),
                        algorithm={"TrainingImage": "--volume=/:/host"})
    err = e.value.response["Error"]
    assert err["Code"] == "ClientException" and "TrainingImage" in err["Message"], err


def test_a_preempted_container_gets_sigterm_and_resumes_from_storage(batch, jobs, server):
    q = make_queue(batch, "podpre", [
        ShareSpec("A", "LEND_AND_BORROW", 1, borrow_limit=-1),
        ShareSpec("B", "LEND", 2),
    ], env_max=3)
    # Jobs that run until they are stopped: A's own instance taken, then B's two owners.
    filler = submit(batch, jobs, q, "A", f"filler-{uuid.uuid4().hex[:6]}", steps=100000, priority=9)
    wait_status(batch, filler, "RUNNING")
    name = f"podresume-{uuid.uuid4().hex[:6]}"
    ckpt = STORAGE_ROOT / "checkpoints" / name
    jid = submit(batch, jobs, q, "A", name, steps=3000, checkpoint_uri=storage_uri("checkpoints", name))
    wait_for(lambda: progress(server, jid), what="the container to start", timeout=120)
    owners = [submit(batch, jobs, q, "B", f"owner-{uuid.uuid4().hex[:6]}", steps=100000)
              for _ in range(2)]
    wait_preempted(batch, jid)
    stopped = wait_for(lambda: [p for p in progress(server, jid) if p[0] == "sigterm"],
                       what="the container's SIGTERM handler to save its step")
    step = stopped[0][1]
    wait_for(lambda: (ckpt / "step").exists() and (ckpt / "step").read_text().strip() == step,
             what=f"checkpoint step {step} in storage")
    (ckpt / "step").write_text("2995\n")
    for o in owners:
        batch.terminate_service_job(jobId=o, reason="done")
    wait_status(batch, jid, "SUCCEEDED", timeout=120)
    starts = [p[1] for p in progress(server, jid) if p[0] == "start"]
    assert starts == ["0", "2995"], starts
    assert "resumed_from=2995" in model(name)
    assert not podman("ps", "--all", "--quiet", "--filter", f"name=qm-{jid}").stdout.strip(), \
        "no container of the job is left"
