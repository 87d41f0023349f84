"""The special-file probe (bench/probe_special_files.py) on a subset of its inputs: every run
ends by itself within its time and memory limits with exit 1, no traceback, and the other
files' findings intact (the full set: `python bench/probe_special_files.py`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="FIFOs, devices and rlimits")
def test_probe_subset():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "probe_special_files.py"), "--json",
                           "--only", "fifo,loop,segfault,name", "--timeout", "180", "--memory-mb", "3072"],
                          capture_output=True, text=True, timeout=1200)
    rows = json.loads(done.stdout)
    assert len(rows) == 6  # four inputs, all of them with -j 2, and the warm run over a damaged cache
    for row in rows:
        assert row["ok"], row
        assert row["exit"] == 1 and row["good_intact"] and not row["traceback"]
    assert done.returncode == 0
