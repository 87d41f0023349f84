"""Issue 14, how a run ends: signals terminate and reap the worker pool with 130 / 143, and
configuration errors are one line naming the file and the key (exit 2), never an internal error.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_hostile_files import GOOD, ROOT, SLOW, kllint


def _children(pid: int) -> set[int]:
    """The live child processes of `pid` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def _started_pool(process: subprocess.Popen) -> set[int]:
    """The child processes of a `-j 2` run once its pool is up (two workers and the resource
    tracker), waiting at most two minutes."""
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 3:
        workers = _children(process.pid)
        time.sleep(0.5)
    assert len(workers) >= 2, "the pool did not start"
    return workers


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_terminates_and_reaps_the_pool(tmp_path, signum, status):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for index in range(10):
        (tmp_path / f"m{index}.py").write_text(GOOD.replace("loss_fn", f"loss_{index}"))
    (tmp_path / "slow.py").write_text(SLOW)  # keeps a worker busy: no time budget
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # an ignored SIGINT is inherited across exec: a test earlier in the same session may have left
    # the test process ignoring it (as pool workers do), and the child would then never see Ctrl+C
    process = subprocess.Popen([sys.executable, "-m", "kllint", "check", "--no-cache", "-j", "2",
                                "--time-budget", "0", "."], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        workers = _started_pool(process)
        time.sleep(2)
        process.send_signal(signum)
        assert process.wait(60) == status  # Ctrl+C was 1, the "findings remain" code
        stderr = process.stderr.read().decode()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived the run"
        assert "Traceback" not in stderr and "leaked semaphore" not in stderr, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_end_when_the_parent_is_killed(tmp_path):
    """SIGKILL leaves the parent no chance to end the pool: the workers notice that they are
    orphans (kllint.pipeline.parallel._watch_parent) and end, also one in the middle of a long file."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for index in range(10):
        (tmp_path / f"m{index}.py").write_text(GOOD.replace("loss_fn", f"loss_{index}"))
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "slow2.py").write_text(SLOW)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "kllint", "check", "--no-cache", "-j", "2",
                                "--time-budget", "0", "."], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workers = _started_pool(process)
        time.sleep(2)
        assert all(_alive(pid) for pid in workers)  # busy with the slow files
        process.kill()
        process.wait(10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their killed parent"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in workers if "workers" in locals() else ():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


CONFIG_ERRORS = [
    ('[tool.kllint]\nignore = [""]\n', "`ignore` has an empty selector"),
    ('[tool.kllint]\nignore = [" "]\n', "`ignore` has an empty selector"),
    ('[tool.kllint]\nselect = ["KL1", ""]\n', "`select` has an empty selector"),
    ('[tool.kllint]\nper-file-ignores = {"a.py" = [""]}\n', "`per-file-ignores.'a.py'` has an empty selector"),
    ("[tool]\nkllint = 5\n", "`tool.kllint` must be a table ([tool.kllint]), not int 5"),
    ("[[tool.kllint]]\nselect = ['KL1']\n", "`tool.kllint` must be a table ([tool.kllint]), not an array"),
    ("tool = 3\n", "`tool` must be a table"),
    ('[tool.kllint]\nexclude = ["!"]\n', "`exclude`: invalid pattern '!'"),
    ('[tool.kllint]\nextend-exclude = ["[z-a]"]\n', "`extend-exclude`: invalid pattern '[z-a]'"),
    ("[tool.kllint]\ntime-budget = -1\n", "`time-budget` must be a number of seconds"),
]


@pytest.mark.parametrize("text, words", CONFIG_ERRORS)
def test_configuration_errors_are_one_line_naming_file_and_key(tmp_path, text, words):
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "m.py").write_text("x = 1\n")
    result = kllint(["check", "--no-cache", "."], tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"kllint: error: {tmp_path / 'pyproject.toml'}: ") and words in line, line
    assert "internal error" not in line


def test_deeply_nested_baseline_is_one_line(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    (tmp_path / "base.json").write_text("[" * 100_000 + "]" * 100_000)
    result = kllint(["check", "--no-cache", "--baseline", "base.json", "."], tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line == "kllint: error: base.json: not a kllint baseline (JSON nested too deeply)"


@pytest.mark.skipif(os.name != "posix", reason="closes stdout with the shell")
def test_closed_stdout_is_one_line(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(f"'{sys.executable}' -m kllint check --no-cache . >&-", shell=True, cwd=tmp_path,
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("kllint: error: standard output is closed")
