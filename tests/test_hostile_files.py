"""Issue 14, hostile and special input: no input takes the run down, hangs it or hides the
other files' findings (segfault input, FIFOs, devices, huge files, symbolic link loops,
analysis-time bombs, unreadable folders, Python 3.12+ grammar on an older Python).

Tests that could hang or crash the interpreter run kllint in a child process with a timeout.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kllint.api import check_paths
from kllint.compat import NewerSyntaxError, newer_syntax_outline
from kllint.config import Settings
from kllint.pipeline.discovery import discover
from kllint.pipeline.file import parse_failure
from kllint.guard import MAX_CHAIN_OPERANDS, guarded_parse_module, too_long_chain

ROOT = Path(__file__).resolve().parents[1]
GOOD = ("import torch\n\n\ndef loss_fn(logp, ref_logp):\n"
        "    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n"
        "    loss = kl.mean()\n    loss.backward()\n")
# Several seconds of analysis (1,000 loss functions, 2,000 findings). It used to be 20 chained
# k3 reassignments (703 bytes, exponential in the chain), which are now analysed in about 1 s
# (tests/test_bounded.py).
SLOW = "import torch\n" + "".join(GOOD.split("\n", 1)[1].replace("loss_fn", f"loss_{i}") for i in range(1000))
posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs, devices and signals are POSIX")


def kllint(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m kllint ARGS` in `cwd` (this checkout first on the path), with a timeout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "kllint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, errors="backslashreplace")


def findings(result: subprocess.CompletedProcess) -> dict[str, set[str]]:
    """Codes per path of a `--output-format json` run."""
    by_path: dict[str, set[str]] = {}
    for item in json.loads(result.stdout):
        by_path.setdefault(item["path"], set()).add(item["code"])
    return by_path


def message_of(result: subprocess.CompletedProcess, path: str) -> str:
    return next(d["message"] for d in json.loads(result.stdout) if d["path"] == path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "good.py").write_text(GOOD)
    return tmp_path


# -- item 1: the segfault input ------------------------------------------------------------------

def test_or_chain_that_crashed_libcst_is_kl900_and_the_run_goes_on(project):
    (project / "or_kl.py").write_text("kl = " + " or ".join(["a"] * 10000) + "\n")
    result = kllint(["check", "--no-cache", "-j", "1", "--output-format", "json", "."], project)
    assert result.returncode == 1, result.stderr  # was 139 (SIGSEGV)
    assert findings(result) == {"good.py": {"KL102", "KL201"}, "or_kl.py": {"KL900"}}
    assert "too deeply nested to check" in message_of(result, "or_kl.py")
    assert "Traceback" not in result.stderr


def test_chain_screen():
    assert too_long_chain("x = a or b\n") is None
    long_text = "x = " + " and ".join(["a"] * (MAX_CHAIN_OPERANDS + 1)) + "\n"
    assert "too deeply nested" in too_long_chain(long_text)
    with pytest.raises(RecursionError):
        guarded_parse_module(long_text)
    # many short chains are not one long chain
    many = "".join(f"x{i} = a or b\n" for i in range(MAX_CHAIN_OPERANDS))
    assert too_long_chain(many) is None
    assert too_long_chain("f = " + "lambda: " * 600 + "a\n") == "600 nested lambdas are too deeply nested to check"
    assert too_long_chain("".join(f"f{i} = lambda: {i}\n" for i in range(600))) is None
    assert len(guarded_parse_module(many).body) == MAX_CHAIN_OPERANDS


def test_deepest_nesting_python_accepts_is_checked(project):
    depth = 2900  # CPython's parser stops near 3,000 levels; libcst on the main stack crashed near 5,000
    (project / "deep.py").write_text("kl = " + "lambda: " * depth + "a\n")
    accepts = subprocess.run([sys.executable, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())",
                              str(project / "deep.py")], capture_output=True)
    assert accepts.returncode == 0  # a fresh interpreter's parser takes it
    result = kllint(["check", "--no-cache", "--output-format", "json", "."], project)
    assert result.returncode == 1, result.stderr  # libcst on the main thread's stack crashed near 5,000
    assert findings(result)["good.py"] == {"KL102", "KL201"}
    assert findings(result)["deep.py"] == {"KL900"}  # libcst took 42 s and 1.6 GB on it
    assert "2900 nested lambdas are too deeply nested to check" in message_of(result, "deep.py")


# -- item 3: special files -----------------------------------------------------------------------

@posix_only
def test_fifo_named_x_py_does_not_hang(project):
    os.mkfifo(project / "x.py")
    for args in (["."], ["x.py", "good.py"]):
        result = kllint(["check", "--no-cache", "--output-format", "json", *args], project, timeout=60)
        assert result.returncode == 1, result.stderr
        assert findings(result) == {"good.py": {"KL102", "KL201"}, "x.py": {"KL900"}}
        assert "FIFO" in message_of(result, "x.py")


@posix_only
def test_fifo_named_alone_is_not_zero_files(project):
    os.mkfifo(project / "x.py")
    result = kllint(["check", "--no-cache", "x.py"], project, timeout=60)
    assert result.returncode == 1
    assert "not a regular file" in result.stdout and "Found 1 finding in 1 file (1 checked)." in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_symlink_to_dev_zero_is_not_read(project):
    (project / "zero.py").symlink_to("/dev/zero")
    result = kllint(["check", "--no-cache", "--output-format", "json", "."], project, timeout=60)
    assert result.returncode == 1, result.stderr
    assert findings(result) == {"good.py": {"KL102", "KL201"}, "zero.py": {"KL900"}}
    assert "character device" in message_of(result, "zero.py")


def test_huge_sparse_file_is_not_read(project):
    with open(project / "huge.py", "wb") as handle:
        handle.truncate(3 * 1024 ** 3)  # 3 GB, sparse: nothing on disk
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True);"
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "kllint", "check", "--no-cache", "."],
                          cwd=project, capture_output=True, text=True, timeout=120, env=env)
    code, peak_kb = map(int, done.stdout.split())
    assert code == 1
    assert peak_kb < 400 * 1024, f"peak RSS {peak_kb} KB"  # was 3.2 GB
    result = check_paths([str(project / "huge.py")])
    assert [d.code for d in result.diagnostics] == ["KL900"]
    assert "larger than 20 MB" in result.diagnostics[0].message


@posix_only
def test_cache_entries_that_are_fifos_or_device_links_are_misses(project):
    cache = project / "cache"
    first = kllint(["check", "--cache-dir", str(cache), "--output-format", "json", "."], project)
    entries = sorted(cache.rglob("*.json"))
    assert entries
    entries[0].unlink()
    os.mkfifo(entries[0])
    if len(entries) > 1 and os.path.exists("/dev/zero"):
        entries[1].unlink()
        entries[1].symlink_to("/dev/zero")
    second = kllint(["check", "--cache-dir", str(cache), "--output-format", "json", "."], project, timeout=60)
    assert second.returncode == first.returncode == 1
    assert second.stdout == first.stdout


# -- item 5: symbolic link loops -----------------------------------------------------------------

def test_symlink_loop_is_one_files_note(project):
    (project / "loop1.py").symlink_to("loop2.py")
    (project / "loop2.py").symlink_to("loop1.py")
    for paths in ([str(project)], [str(project / "loop1.py"), str(project / "good.py")]):
        result = check_paths(paths)
        codes = {(Path(d.path).name, d.code) for d in result.diagnostics}
        assert ("loop1.py", "KL900") in codes and ("good.py", "KL102") in codes
        assert not result.internal_errors
    assert "symbolic links" in next(d.message for d in result.diagnostics if d.path.endswith("loop1.py"))


# -- item 4: the time budget ---------------------------------------------------------------------

def test_time_budget_stops_one_file_and_the_run_goes_on(project):
    (project / "slow.py").write_text(SLOW)
    started = time.monotonic()
    result = kllint(["check", "--no-cache", "--time-budget", "1", "--output-format", "json", "."], project)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert findings(result) == {"good.py": {"KL102", "KL201"}, "slow.py": {"KL900"}}
    assert "kllint: analysis of slow.py stopped after 1 s" in result.stderr
    assert "analysis stopped after 1 s" in message_of(result, "slow.py")
    assert elapsed < 60
    summary = kllint(["check", "--no-cache", "--time-budget", "1", "slow.py"], project)
    assert "1 file not checked: the analysis ran past the time budget (slow.py)" in summary.stderr


def test_cpu_clock_of_an_ended_thread_is_safe():
    """The budget's CPU clock is taken by the analysing thread itself: asking for the clock of
    a thread that has just ended read its unmapped thread structure (a segmentation fault of the
    whole run, seen once in the test suite)."""
    import threading

    from kllint import guard

    clock: dict = {}
    thread = threading.Thread(target=lambda: clock.setdefault("id", guard._own_clock()))
    thread.start()
    thread.join()
    time.sleep(0.05)
    if clock["id"] is not None:  # a platform with per-thread clocks
        assert guard._cpu_seconds(clock["id"]) is None  # the thread is gone: no time, no crash
    assert guard.call_with_limits(sum, [1, 2], budget=5) == 3


def test_time_budget_from_configuration(project):
    (project / "pyproject.toml").write_text("[tool.kllint]\ntime-budget = 1\n")
    (project / "slow.py").write_text(SLOW)
    result = kllint(["check", "--no-cache", "slow.py"], project)
    assert "stopped after 1 s" in result.stderr
    (project / "pyproject.toml").write_text("[tool.kllint]\ntime-budget = 'soon'\n")
    bad = kllint(["check", "--no-cache", "slow.py"], project)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"kllint: error: {project / 'pyproject.toml'}: `time-budget` must be a number of seconds "
        "(0: no limit), not 'soon'"]


# -- item 13: silent skips -----------------------------------------------------------------------

def test_unreadable_folder_is_a_note(tmp_path, monkeypatch):
    (tmp_path / "locked").mkdir()
    (tmp_path / "ok.py").write_text("x = 1\n")
    real_scandir = os.scandir

    def scandir(path="."):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    notes: list[str] = []
    found = list(discover([str(tmp_path)], Settings(), notes=notes))
    assert [item.path.name for item in found] == ["ok.py"]
    assert notes == [f"{tmp_path / 'locked'}: cannot read folder: Permission denied; skipped"]


# -- item 10: newer grammar ----------------------------------------------------------------------

NEW_GRAMMAR = '''import torch

type Vector[T] = list[T]


def first[T](items: list[T]) -> T:
    return items[0]


class Box[T]:
    pass


def loss_fn(logp, ref_logp, batch):
    name = f"{batch["name"]}"
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    loss = kl.mean()
    loss.backward()
'''


def test_python_312_grammar_is_checked(project):
    (project / "new.py").write_text(NEW_GRAMMAR)
    result = check_paths([str(project / "new.py")])
    assert {d.code for d in result.diagnostics} == {"KL102", "KL201"}  # was KL900 "syntax error" on 3.11
    assert {d.span.line for d in result.diagnostics} == {16}
    assert not result.internal_errors


def test_only_valid_newer_python_needs_a_newer_python(project):
    broken = "def kl_loss(:\n    return f'{x}'\n"  # names a KL: parsed, not skipped unread
    error = SyntaxError("invalid syntax")
    assert newer_syntax_outline(broken, error) == (None, error)
    if sys.version_info < (3, 12):
        multi_line_parameters = "def f[\n    T,\n](x: T) -> T:\n    return x\n"
        outline, reason = newer_syntax_outline(multi_line_parameters, error)
        assert outline is None and isinstance(reason, NewerSyntaxError)
        assert reason.msg.endswith("needs a newer Python to check")
        assert parse_failure(reason) == reason.msg
    (project / "broken.py").write_text(broken)
    [diagnostic] = check_paths([str(project / "broken.py")]).diagnostics
    assert diagnostic.message == "cannot parse: invalid syntax"


def test_kl900_always_has_a_reason(project):
    assert parse_failure(SyntaxError()) == "cannot parse: SyntaxError"
    (project / "nul.py").write_bytes(b"kl = 1\x00\n")  # names a KL: parsed, not skipped unread
    [diagnostic] = check_paths([str(project / "nul.py")]).diagnostics
    assert diagnostic.code == "KL900" and diagnostic.message.removeprefix("cannot parse: ").strip()
    (project / "nul.py").write_bytes(b"x = 1\x00\n")  # names no KL nor reference: never parsed
    assert check_paths([str(project / "nul.py")]).diagnostics == []
