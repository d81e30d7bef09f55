"""README.md's transcripts are what the commands print: scripts/readme-transcripts runs the
tour against a fresh `qm serve` and `qm check` on the README's policy example, and fails where
the README differs (after normalising ids, times and ages)."""

import subprocess
import sys
from pathlib import Path

from qm_e2e import qm_bin

ROOT = Path(__file__).resolve().parents[2]


def test_the_readmes_transcripts_are_what_the_commands_print():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme-transcripts"), "--check", "--qm", str(qm_bin())],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-6000:]
    assert "transcripts match" in out.stderr
