"""Probes what its control group lets it do, by $MODE, and writes what it found as JSON to
$RESULT_FILE (written once the probe is done; `daemon` writes before it exits):

- `oom`: allocates $ALLOC_MIB MiB, touching every page (the kernel should kill it first).
- `fork`: forks children that sleep until 200 are running or a fork fails; the count.
- `devices`: opens each path of $DEVICES (comma separated); each one's errno name or "ok".
- `quota`: its CPU quota and period, from its own group's files, and the CPU weight of its
  parent (all the server's attempts together).
- `daemon`: starts a `setsid` daemon (a double fork) that sleeps, records its pid, exits 0
  (or, with $HOLD set, sleeps until stopped).
- `orphan`: kills its supervisor (its parent), then sleeps until stopped.
- `sleep`: sleeps until stopped, having written its pid (a neighbour).
- `burn`: holds $ALLOC_MIB MiB (every page touched) and spins for $SPIN_SECONDS of CPU time,
  then exits 0: what its attempt used is known."""

import errno
import json
import os
import sys
import time

mode = os.environ["MODE"]
result_file = os.environ["RESULT_FILE"]


def own_group(controller):
    """This process's group path for `controller` (v1), or its v2 path."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(",") or (controllers == "" and controller == ""):
                return path
    return None


def write(result):
    """Writes `result`, with the control group the job runs in (its pids group under v1) and
    that group directory's inode (the same inode: the same group, taken over)."""
    for root, controller in (("/sys/fs/cgroup/pids", "pids"), ("/sys/fs/cgroup", "")):
        path = own_group(controller)
        if path is not None and os.path.isdir(root + path):
            result.update(group=os.path.basename(path), group_ino=os.stat(root + path).st_ino)
            break
    tmp = result_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.rename(tmp, result_file)


if mode == "oom":
    write({"pid": os.getpid(), "allocating": True})
    chunks = []
    for _ in range(int(os.environ["ALLOC_MIB"])):
        chunks.append(b"\x01" * (1 << 20))
    write({"survived": True})
elif mode == "fork":
    children, error = [], None
    while len(children) < 200:
        try:
            pid = os.fork()
        except OSError as e:
            error = errno.errorcode.get(e.errno, str(e.errno))
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    write({"forked": len(children), "error": error})
    for pid in children:
        os.kill(pid, 9)
elif mode == "devices":
    found = {}
    for path in os.environ["DEVICES"].split(","):
        try:
            os.close(os.open(path, os.O_RDWR))
            found[path] = "ok"
        except OSError as e:
            found[path] = errno.errorcode.get(e.errno, str(e.errno))
    write({"opened": found, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")})
elif mode == "quota":
    result = {}
    v1 = own_group("cpu")
    if v1 is not None:
        for root in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
            base = root + v1
            if os.path.exists(base + "/cpu.cfs_quota_us"):
                with open(base + "/cpu.cfs_quota_us") as f:
                    result["quota_us"] = int(f.read())
                with open(base + "/cpu.cfs_period_us") as f:
                    result["period_us"] = int(f.read())
                # The weight of the server's attempts together: their parent, `qm-<key>`.
                with open(os.path.dirname(base) + "/cpu.shares") as f:
                    result["parent_weight"] = int(f.read())
                result["interface"] = "v1"
                break
    if "quota_us" not in result:
        base = "/sys/fs/cgroup" + own_group("")
        with open(base + "/cpu.max") as f:
            quota, period = f.read().split()
            result = {"quota_us": int(quota), "period_us": int(period), "interface": "v2"}
        with open(os.path.dirname(base) + "/cpu.weight") as f:
            result["parent_weight"] = int(f.read())
    write(result)
elif mode == "daemon":
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    os.waitpid(pid, 0)
    # The grandchild: the other process with this job's $RESULT_FILE in its environment.
    time.sleep(0.2)
    daemons = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"RESULT_FILE={result_file}".encode() in f.read().split(b"\0"):
                    daemons.append(int(entry))
        except OSError:
            continue
    write({"daemons": daemons, "me": os.getpid()})
    if os.environ.get("HOLD"):
        time.sleep(600)
elif mode == "orphan":
    write({"pid": os.getpid()})
    os.kill(os.getppid(), 9)
    time.sleep(600)
elif mode == "burn":
    held = [b"\x01" * (1 << 20) for _ in range(int(os.environ["ALLOC_MIB"]))]
    spin = float(os.environ["SPIN_SECONDS"])
    while time.process_time() < spin:
        pass
    write({"cpu": time.process_time(), "held_mib": len(held)})
elif mode == "sleep":
    write({"pid": os.getpid()})
    time.sleep(600)
else:
    sys.exit(f"unknown MODE {mode}")
