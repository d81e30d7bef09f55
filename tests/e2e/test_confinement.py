"""Each attempt gets only what it was granted (issue 40): every host of a local attempt runs in
its instance's control group, taken by its supervisor, holding it to the instance's memory,
CPUs, processes and GPUs, and left empty when its last process ended.

These tests need a root server on a machine whose control groups it may write (cgroup v1 with
memory, pids, cpu, devices and freezer, or v2 with memory, cpu and pids); elsewhere they skip,
saying why. The pool is small on purpose: 256 MiB, half a CPU and 64 processes per instance."""

import json
import os
import stat
from pathlib import Path

import pytest

from qm_e2e import (UNIT, Jobs, attempt_usage, run_qm, ShareSpec, config_toml, make_queue, pid_alive, wait_for,
                    wait_status)

MEMORY_GIB = 0.25
MAX_PIDS = 64


def usable() -> str | None:
    """Why control groups cannot be tested here, or None."""
    if os.geteuid() != 0:
        return "not root: the server cannot make control groups"
    v1 = all(Path(f"/sys/fs/cgroup/{c}").is_dir()
             for c in ("memory", "pids", "devices", "freezer"))
    unified = Path("/sys/fs/cgroup/cgroup.controllers")
    v2 = unified.exists() and {"memory", "cpu", "pids"} <= set(unified.read_text().split())
    if not (v1 or v2):
        return "neither cgroup v1 (memory, pids, devices, freezer) nor v2 (memory, cpu, pids)"
    return None


pytestmark = pytest.mark.skipif(usable() is not None, reason=f"control groups: {usable()}")


@pytest.fixture(scope="module")
def server(start_server):
    config = config_toml(count=3, gpus=1).replace(
        'kind = "local"\n', 'kind = "local"\nconfinement = "cgroup"\n')
    config += f"memory_gib = {MEMORY_GIB}\nvcpus = 0.5\nmax_pids = {MAX_PIDS}\n"
    s = start_server(config=config, name="confinement")
    yield s
    s.close()


@pytest.fixture
def queue(batch):
    return make_queue(batch, "confined", [ShareSpec("A", "RESERVE", 3)], env_max=3)


def result(path: Path, key: str | None = None) -> dict:
    """The job's result file once written (and holding `key`, if given)."""
    def read():
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return r if key is None or key in r else None
    return wait_for(read, what=f"{path.name} to hold {key or 'a result'}")


def probe(jobs, queue, name: str, mode: str, **env) -> tuple[str, Path]:
    out = jobs.file(f"{name}.json")
    env = {"MODE": mode, "RESULT_FILE": str(out), **{k: str(v) for k, v in env.items()}}
    return jobs.submit(queue, "A", name, "confined.py", env=env), out


def instance_groups() -> list[Path]:
    """The instances' control groups of every server here (a host runs in its instance's
    group, which outlives the attempt, empty, for the instance's next attempt)."""
    found = []
    root = Path("/sys/fs/cgroup/pids")
    root = root if root.is_dir() else Path("/sys/fs/cgroup")
    for dirpath, dirnames, _ in os.walk(root):
        found += [Path(dirpath) / d for d in dirnames if d.startswith("qm-instance-")]
        if len(Path(dirpath).relative_to(root).parts) > 6:
            dirnames.clear()
    return found


def group_of(pid: int) -> str | None:
    """The instance group process `pid` runs in."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if "qm-instance-" in line:
            return line.rsplit("/", 1)[1]
    return None


def group_dir(pid: int) -> Path:
    """The directory of the instance group process `pid` runs in (its pids group under v1)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        v1 = "pids" in controllers.split(",") and Path("/sys/fs/cgroup/pids").is_dir()
        if "qm-instance-" in path and (v1 or controllers == ""):
            return Path("/sys/fs/cgroup/pids" if v1 else "/sys/fs/cgroup") / path.lstrip("/")
    raise AssertionError(f"{pid} runs in no instance group")


def occupied(pids: list[int]) -> list[str]:
    """The instance groups that hold one of `pids`."""
    held = []
    for group in instance_groups():
        procs = (group / "cgroup.procs").read_text().split()
        held += [f"{group.name}: {p}" for p in procs if int(p) in pids]
    return held


def test_the_banner_says_which_control_groups_attempts_run_in(server):
    log = server.log_path.read_text()
    assert "confinement: each host of an attempt runs in a control group of its own (cgroup v" in log, log
    if "cgroup v2" not in log:
        print("[e2e] cgroup v2 is not offered with memory, cpu and pids here: its paths are "
              "covered by the unit tests over a fake tree (crates/executor/src/cgroup/tests.rs)")


def test_a_job_over_its_memory_fails_out_of_memory_and_its_neighbour_runs_on(jobs, queue):
    neighbour, n_out = probe(jobs, queue, "neighbour", "sleep")
    n_pid = result(n_out, "pid")["pid"]
    hog, _ = probe(jobs, queue, "hog", "oom", ALLOC_MIB=int(MEMORY_GIB * 1024 * 2))
    job = wait_status(jobs.batch, hog, "FAILED")
    reason = job["statusReason"]
    assert reason.startswith("OutOfMemory: algo-1 went over its memory limit of 256 MiB"), reason
    assert pid_alive(n_pid)
    assert group_of(n_pid) is not None
    assert jobs.batch.describe_service_job(jobId=neighbour)["status"] == "RUNNING"


def test_a_job_sees_its_cpu_quota_and_the_jobs_weigh_by_the_machines_cpus(jobs, queue):
    job, out = probe(jobs, queue, "quota", "quota")
    wait_status(jobs.batch, job, "SUCCEEDED")
    r = result(out)
    assert (r["quota_us"], r["period_us"]) == (50_000, 100_000), r
    # All the server's attempts together weigh in proportion to the machine's CPUs, not as
    # one task (v1) or group (v2), the kernel's default, against the server and its
    # supervisors. The server counts the CPUs it may use (affinity, and any CPU quota above
    # it), at most this process's affinity.
    w, cpus = r["parent_weight"], len(os.sched_getaffinity(0))
    if r["interface"] == "v1":
        assert w == 262_144 or (w % 4096 == 0 and 1 <= w // 4096 <= cpus), r
    else:
        assert w == 10_000 or (w % 100 == 0 and 1 <= w // 100 <= cpus), r


def test_a_fork_bomb_stops_at_the_pids_limit(jobs, queue):
    job, out = probe(jobs, queue, "bomb", "fork")
    wait_status(jobs.batch, job, "SUCCEEDED")
    r = result(out)
    assert r["error"] == "EAGAIN", r
    assert 0 < r["forked"] < MAX_PIDS, r


def test_a_setsid_daemon_ends_with_its_job(jobs, queue):
    job, out = probe(jobs, queue, "daemon", "daemon")
    wait_status(jobs.batch, job, "SUCCEEDED")
    daemons = result(out)["daemons"]
    assert daemons, "the job started no daemon"
    for pid in daemons:
        wait_for(lambda p=pid: not pid_alive(p), what=f"the daemon {pid} to be gone")
    assert not occupied(daemons)


def test_a_setsid_daemon_ends_with_its_terminated_job(jobs, queue):
    job, out = probe(jobs, queue, "held", "daemon", HOLD=1)
    daemons = result(out)["daemons"]
    assert daemons, "the job started no daemon"
    assert all(group_of(pid) for pid in daemons), "the daemon left its control group"
    jobs.batch.terminate_service_job(jobId=job, reason="test")
    wait_status(jobs.batch, job, "FAILED")
    for pid in daemons:
        assert not pid_alive(pid), f"the daemon {pid} outlived its job"


def test_a_host_opens_only_its_own_gpu_nodes(jobs, queue, tmp_path):
    nodes = tmp_path / "dev"
    nodes.mkdir()
    paths = []
    for minor in (0, 1, 2, 255):
        path = nodes / ("nvidiactl" if minor == 255 else f"nvidia{minor}")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
        paths.append(str(path))
    job, out = probe(jobs, queue, "gpus", "devices", DEVICES=",".join(paths))
    wait_status(jobs.batch, job, "SUCCEEDED")
    r = result(out)
    own = int(r["cuda"])
    for minor, path in zip((0, 1, 2, 255), paths):
        # No driver here: a node the group allows fails with "no such device or address",
        # one it denies with "operation not permitted".
        want = "ENXIO" if minor in (own, 255) else "EPERM"
        assert r["opened"][path] == want, (minor, own, r)


def test_jobs_in_a_row_take_over_their_instances_groups_empty(jobs, queue):
    """Four jobs in a row on three instances: each runs in an instance's group, a group a later
    job lands in again is the same group (not made anew), and each job leaves it empty."""
    pids, seen = [], {}
    for i in range(4):
        job, out = probe(jobs, queue, f"row{i}", "daemon")
        wait_status(jobs.batch, job, "SUCCEEDED")
        r = result(out)
        assert r["group"].startswith("qm-instance-"), r
        assert seen.setdefault(r["group"], r["group_ino"]) == r["group_ino"], (r, seen)
        pids += r["daemons"] + [r["me"]]
        assert not occupied(pids)
    assert len(seen) < 4, seen


def test_the_group_of_a_job_whose_supervisor_died_is_emptied(jobs, queue):
    job, out = probe(jobs, queue, "orphan", "orphan")
    pid = result(out, "pid")["pid"]
    # Every attempt kills its supervisor: lost, queued again, until max_lost_attempts FAILS it.
    failed = wait_status(jobs.batch, job, "FAILED")
    assert "lost" in failed["statusReason"], failed["statusReason"]
    assert not pid_alive(pid)
    assert not occupied([pid])


def test_an_adopted_job_keeps_its_group_when_the_pools_changed_across_a_restart(
        start_server, tmp_path):
    """Instance ids are positions in the pools: a pool added in front renumbers them. The
    adopted job goes on in the group it was launched in (a restart removes only the groups no
    live attempt runs in), a new job gets a group of its own, and the old group goes with the
    adopted job."""
    def config(front: str) -> str:
        base = config_toml(count=3, gpus=1).replace(
            'kind = "local"\n', 'kind = "local"\nconfinement = "cgroup"\n')
        pool = base.index("[[executor.pool]]")
        return base[:pool] + front + base[pool:] + f"memory_gib = {MEMORY_GIB}\n"
    s = start_server(config=config(""), name="renumbered")
    try:
        batch = s.client()
        jobs = Jobs(batch, s, tmp_path)
        q = make_queue(batch, "renumbered", [ShareSpec("A", "RESERVE", 3)], env_max=3)
        old, out = probe(jobs, q, "old", "sleep")
        first = result(out, "pid")
        s.stop()
        s.config_path.write_text(config(
            '[[executor.pool]]\ninstance_type = "ml.m5.large"\ncount = 2\ngpus_per_instance = 0\n'))
        s.start()
        assert pid_alive(first["pid"])
        assert group_of(first["pid"]) == first["group"]
        old_group = group_dir(first["pid"])
        new, new_out = probe(jobs, q, "new", "sleep")
        second = result(new_out, "pid")
        assert second["group"] != first["group"], (first, second)
        assert batch.describe_service_job(jobId=old)["status"] == "RUNNING"
        batch.terminate_service_job(jobId=old, reason="test")
        wait_status(batch, old, "FAILED")
        assert not old_group.exists(), old_group
        jobs.cleanup()
    finally:
        s.close()


def test_what_an_attempt_used_is_counted_from_its_take_and_shown(server, jobs, queue):
    """Issue 40, item 5: CPU time (summed by the supervisor as it reaps the attempt's
    processes) and the host's peak memory (from the instance's group as the attempt left it,
    counted from its take: the group outlives attempts)."""
    job, out = probe(jobs, queue, "burn", "burn", ALLOC_MIB=120, SPIN_SECONDS=1.0)
    wait_status(jobs.batch, job, "SUCCEEDED")
    assert result(out)["held_mib"] == 120
    [used] = attempt_usage(server, job)
    assert used["attempt"] == 1
    # The spin, plus the interpreter's start; the quota (half a CPU) does not shrink CPU time.
    assert 1.0 <= used["cpuSeconds"] < 20, used
    assert 120 << 20 <= used["peakMemoryBytes"] <= int(MEMORY_GIB * (1 << 30)), used
    shown = run_qm(server, "job", job).stdout
    assert "usage per attempt" in shown and "peak memory" in shown.lower(), shown
    # A second attempt on the same instance group counts from its own take, not the first's.
    again, _ = probe(jobs, queue, "idle", "quota")
    wait_status(jobs.batch, again, "SUCCEEDED")
    [small] = attempt_usage(server, again)
    assert small["cpuSeconds"] < used["cpuSeconds"], (small, used)
    assert small["peakMemoryBytes"] < 120 << 20, small


def confined_config(count: int, pool: str) -> str:
    """A confined server's config with `count` instances and the pool lines `pool`."""
    config = config_toml(count=count, gpus=0).replace(
        'kind = "local"\n', 'kind = "local"\nconfinement = "cgroup"\n')
    return config + f"memory_gib = {MEMORY_GIB}\n" + pool


def test_a_server_stopped_with_nothing_running_leaves_no_control_group(start_server, tmp_path):
    """A server stopped while no attempt runs removes its instances' groups and its own
    `qm-<key>` directories: servers come and go (a test's, a data dir removed) and the
    kernel's groups would otherwise pile up, each one a step of every CFS quota write."""
    s = start_server(config=confined_config(2, ""), name="leaves")
    try:
        batch = s.client()
        jobs = Jobs(batch, s, tmp_path)
        q = make_queue(batch, "leaves", [ShareSpec("A", "RESERVE", 2)], env_max=2)
        job, out = probe(jobs, q, "last", "sleep")
        group = group_dir(result(out, "pid")["pid"])
        server_dir = group.parent
        assert server_dir.name.startswith("qm-"), server_dir
        batch.terminate_service_job(jobId=job, reason="test")
        wait_status(batch, job, "FAILED")
        assert group.exists(), "kept for the instance's next attempt while the server runs"
        s.stop()
        assert not server_dir.exists(), sorted(p.name for p in server_dir.iterdir())
        # The next start makes them again as attempts take them.
        s.start()
        again, again_out = probe(jobs, q, "again", "sleep")
        assert group_dir(result(again_out, "pid")["pid"]).parent == server_dir
        batch.terminate_service_job(jobId=again, reason="test")
        wait_status(batch, again, "FAILED")
        jobs.cleanup()
    finally:
        s.close()


def test_a_reload_that_changes_the_share_reaches_the_next_attempt_in_a_kept_group(
        start_server, tmp_path):
    """A supervisor leaves the limits of a group as they are when its server knows the group
    holds them (the last attempt there ran, under the same share and a uid of its own): two
    jobs in a row on the one instance see its CPU quota, and after a reload that halves the
    instance's CPUs the next job in the same group sees the new quota."""
    s = start_server(config=confined_config(1, "vcpus = 0.5\n"), name="kept")
    try:
        batch = s.client()
        jobs = Jobs(batch, s, tmp_path)
        q = make_queue(batch, "kept", [ShareSpec("A", "RESERVE", 1)], env_max=1)
        seen = []
        for i in range(2):
            job, out = probe(jobs, q, f"kept{i}", "quota")
            wait_status(batch, job, "SUCCEEDED")
            r = result(out)
            seen.append((r["group"], r["group_ino"], r["quota_us"]))
        assert seen[0] == seen[1] and seen[0][2] == 50_000, seen
        s.config_path.write_text(confined_config(1, "vcpus = 0.25\n"))
        run_qm(s, "reload")
        job, out = probe(jobs, q, "halved", "quota")
        wait_status(batch, job, "SUCCEEDED")
        r = result(out)
        assert (r["group"], r["group_ino"]) == seen[0][:2], (r, seen)
        assert r["quota_us"] == 25_000, r
    finally:
        s.close()
