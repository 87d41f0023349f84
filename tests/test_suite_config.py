"""The test suite's own configuration: it runs without deprecation warnings from its plugins."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_pytest_asyncio_loop_scope_is_configured():
    """pytest-asyncio warns at start-up (a PytestDeprecationWarning, shown with `-W always`
    or by any runner that does not hide DeprecationWarning) while
    `asyncio_default_fixture_loop_scope` is unset."""
    pytest.importorskip("pytest_asyncio")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-W", "always", "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "tests/test_vocab.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "asyncio_default_fixture_loop_scope" not in proc.stdout + proc.stderr
