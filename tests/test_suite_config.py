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


def test_subprocesses_import_the_checkout_under_test(tmp_path: Path):
    """A test that starts `python -m kllint` in a scratch folder runs this checkout's code, even
    when another copy of kllint is installed (a worktree beside an editable install)."""
    proc = subprocess.run([sys.executable, "-c", "import kllint; print(kllint.__file__)"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).resolve() == ROOT / "kllint" / "__init__.py"
