"""The control groups of a qm server, found by its data dir: for the e2e suite's servers and
`scripts/bench`'s, which stop or are killed with attempts running and never start again (a
server of the same data dir would remove what its predecessor left). Standard library only,
so that `scripts/bench` can run it with any python3."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def cgroup_key(data_dir: Path) -> str:
    """The key of a server's control groups (`qm-<key>`): FNV-1a 64 of its canonical data dir,
    as `cgroup::key_for` computes it."""
    h = 0xCBF29CE484222325
    for b in os.fsencode(Path(data_dir).resolve()):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def remove_cgroups(data_dir: Path, root: Path = Path("/sys/fs/cgroup")) -> None:
    """Removes the control groups of the server of `data_dir` (`qm-<key>` and `qm-<key>-server`
    in every hierarchy, their groups first), once its processes are gone: a server that stops
    with attempts running leaves them for its next start, which a test's server never has, and
    every such tree left behind slows the machine's later runs. Only empty groups go (`rmdir`
    refuses the others)."""
    names = {f"qm-{cgroup_key(data_dir)}", f"qm-{cgroup_key(data_dir)}-server"}
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        found += [Path(dirpath) / d for d in dirnames if d in names]
        # The server's group is at most a few levels down (v1: memory/process_api/<id>/).
        dirnames[:] = [d for d in dirnames if d not in names and depth < 4 and not d.startswith("qm-")]
    for tree in found:
        for sub in sorted(tree.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if sub.is_dir():
                try:
                    sub.rmdir()
                except OSError:
                    pass
        for _ in range(20):  # processes SIGKILLed just now may take a moment to leave it
            try:
                tree.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


if __name__ == "__main__":
    # python3 qm_cgroups.py DATA_DIR...: removes the groups of the servers of those data dirs.
    for arg in sys.argv[1:]:
        remove_cgroups(Path(arg))
