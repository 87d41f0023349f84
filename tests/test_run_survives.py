"""Issue 35, items 3 and 4: what could still stop a whole run. The depth measure taken before
anything recursive sees a module (kllint.nesting), the bounded error path (kllint.pipeline.failure),
notebooks of deeply nested JSON, folders that cannot be searched or are 1,000 levels deep, and a
standard input without end.
"""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kllint.config import Settings
from kllint.notebook import Notebook, NotebookError
from kllint.pipeline.discovery import Discovered
from kllint.pipeline.file import analyse_file
from kllint.stdin import StdinUsageError

ROOT = Path(__file__).resolve().parents[1]
NORMAL = (ROOT / "fixtures" / "KL101" / "grpo_token_log_ratio_penalty.py").read_text()  # KL101 at line 25
posix_only = pytest.mark.skipif(os.name != "posix", reason="signals, rlimits")


def kllint(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kllint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, errors="backslashreplace", **kwargs)


def depth_of(text: str, limit: int = 150) -> tuple[int, int] | None:
    from kllint.nesting import deepest

    return deepest(ast.parse(text), text, limit)


# -- the depth measure ---------------------------------------------------------------------------

def test_the_depth_limit_is_measured_where_libcst_nests() -> None:
    from kllint.nesting import MAX_NESTING

    assert MAX_NESTING == 150  # as documented
    assert depth_of(NORMAL) is None and depth_of("") is None
    # the module, the assignment, then one level per sign: 146 signs are 149 levels with the constant
    assert depth_of("kl = 1\nx = " + "-" * 146 + "1\n") is None
    assert depth_of("kl = 1\nx = " + "-" * 148 + "1\n") == (MAX_NESTING + 1, 2)
    # flat in `ast`, nested in libcst: `and` chains and implicitly concatenated strings
    assert depth_of("x = " + " and ".join(["a"] * 200) + "\n") is not None
    assert depth_of("x = " + " and ".join(["a"] * 100) + "\n") is None
    assert depth_of("x = (" + " ".join(['"a"'] * 200) + ")\n") is not None
    assert depth_of("x = [" + ", ".join(['"a"'] * 2000) + "]\n") is None  # many strings, each alone
    assert depth_of('x = """' + "'a' " * 500 + '"""\n') is None  # quotes inside one string
    # the long lines that are not deep are not deep; deep code under a short `def` line is found
    assert depth_of("x = [" + ", ".join(["1"] * 5000) + "]\n") is None
    assert depth_of("@decorate(" + "-" * 200 + "1)\ndef f(): pass\n") is not None
    assert depth_of("def f():\n    if a:\n        pass\n" + "    elif a:\n        pass\n" * 200) is not None


def test_describe_never_formats_what_an_exception_holds() -> None:
    from kllint.pipeline.failure import describe

    class Deep:
        def __repr__(self) -> str:
            return repr(self)  # as a libcst node 500 levels deep: recursion

    message = describe(KeyError(Deep()))
    assert message == "KeyError: <Deep>"
    assert describe(ValueError("x" * 5000)).startswith("ValueError: xxx") and len(describe(ValueError("x" * 5000))) < 230
    assert describe(OverflowError(10 ** 5000)) == "OverflowError: <int>"
    assert describe(PermissionError(13, "Permission denied", "/a/b")) == "PermissionError: Permission denied: /a/b"


def test_which_failures_come_from_the_input() -> None:
    from kllint.pipeline.failure import failed

    assert [d.message for d in failed("f.py", OverflowError("x")).diagnostics] == [
        "a number too large to analyse (OverflowError); not checked"]
    assert [d.message for d in failed("f.py", MemoryError()).diagnostics] == ["out of memory while analysing; not checked"]
    try:
        try:
            raise OSError(2, "No such file or directory")
        except OSError:
            raise ValueError("a bug while handling it")
    except ValueError as exc:
        outcome = failed("f.py", exc)  # a bug, whatever it was handling
    assert outcome.errors == ["f.py: internal error: ValueError: a bug while handling it"] and not outcome.diagnostics


def test_a_failure_holding_a_deep_node_is_that_files_note(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As libcst's position pass fails when it runs out of stack: a KeyError of a node during a
    RecursionError. On main formatting it recursed again and the run ended (exit 2)."""
    import kllint.rules.dispatch as dispatch

    class Node:
        def __repr__(self) -> str:
            return repr(self)

    def fails(*args: object, **kwargs: object) -> None:
        try:
            raise RecursionError("maximum recursion depth exceeded")
        except RecursionError:
            raise KeyError(Node())

    monkeypatch.setattr(dispatch, "check_source", fails)
    path = tmp_path / "loss.py"
    path.write_text(NORMAL)
    outcome = analyse_file(Discovered(path, "loss.py"), Settings())
    assert [d.message for d in outcome.diagnostics] == ["expression nesting too deep to analyse; not checked"]
    assert not outcome.errors

    def bug(*args: object, **kwargs: object) -> None:
        raise TypeError(Node())

    monkeypatch.setattr(dispatch, "check_source", bug)
    outcome = analyse_file(Discovered(path, "loss.py"), Settings())
    assert outcome.errors == ["loss.py: internal error: TypeError: <Node>"] and not outcome.diagnostics


def test_notebook_json_nested_too_deeply_is_not_a_notebook() -> None:
    cells = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5, "x": '
    with pytest.raises(NotebookError, match="JSON nested deeper than 100 levels"):
        Notebook.parse(cells + "[" * 1000 + "]" * 1000 + "}")  # 2 KB; the json module recursed (main)
    assert Notebook.parse(cells + "[" * 90 + "]" * 90 + "}") is not None
    assert Notebook.parse(cells + '"' + "[" * 1000 + '"}') is not None  # brackets in a string


# -- folders ---------------------------------------------------------------------------------------

NO_SEARCH = '''
import errno, os, sys

def inside(path):
    try:
        return "locked" in os.fsdecode(os.fspath(path)).split(os.sep)[:-1]
    except TypeError:
        return False

def guard(function):
    def guarded(path, *args, **kwargs):
        if not isinstance(path, int) and inside(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(os.fspath(path)))
        return function(path, *args, **kwargs)
    return guarded

for name in ("stat", "lstat", "open", "scandir", "listdir", "access"):
    setattr(os, name, guard(getattr(os, name)))
import builtins, io
builtins.open = io.open = guard(io.open)
sys.argv = ["kllint", *sys.argv[1:]]
from kllint.cli import main
main()
'''


def test_a_folder_that_cannot_be_searched(tmp_path: Path) -> None:
    """chmod a-x: its names can be listed, nothing in it looked up. Root ignores the mode bits, so
    a wrapper makes every lookup inside `locked` fail as it would. On main the configuration
    lookup raised PermissionError and the run ended (exit 2)."""
    (tmp_path / "locked" / "sub").mkdir(parents=True)
    (tmp_path / "normal.py").write_text(NORMAL)
    (tmp_path / "locked" / "a.py").write_text(NORMAL)
    (tmp_path / "locked" / "sub" / "b.py").write_text(NORMAL)
    (tmp_path / "no_search.py").write_text(NO_SEARCH)
    run = subprocess.run([sys.executable, "no_search.py", "check", "--no-cache", "--output-format", "json", "."],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    found = {(d["path"], d["code"], d["message"]) for d in json.loads(run.stdout)}
    assert ("locked/a.py", "KL900", "cannot read file: Permission denied") in found
    assert "normal.py" in {path for path, code, _ in found if code == "KL101"}
    assert "locked/sub: cannot read folder: Permission denied; skipped" in run.stderr
    named = subprocess.run([sys.executable, "no_search.py", "check", "--no-cache", "--output-format", "json",
                            "normal.py", "locked/sub/b.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert named.returncode == 1, named.stderr  # not "no such file": a file that cannot be read
    assert ("locked/sub/b.py", "KL900") in {(d["path"], d["code"]) for d in json.loads(named.stdout)}


def test_a_tree_a_thousand_folders_deep(tmp_path: Path) -> None:
    """Python 3.11's os.walk recursed once per folder: on main the run ended with 'internal
    error: RecursionError'."""
    (tmp_path / "normal.py").write_text(NORMAL)
    folder = tmp_path / "tree"
    folder.mkdir()
    os.chdir(folder)  # paths relative to the last folder made: a long absolute path is slow to make
    try:
        for _ in range(1000):
            os.mkdir("d")
            os.chdir("d")
        Path("bottom.py").write_text(NORMAL)
    finally:
        os.chdir(ROOT)
    try:
        run = kllint(["check", "--no-cache", "--output-format", "json", "."], tmp_path)
    finally:
        _remove_tree(folder)
    assert run.returncode == 1, run.stderr[-2000:]
    found = [d for d in json.loads(run.stdout) if d["code"] == "KL101"]
    assert sorted(len(Path(d["path"]).parts) for d in found) == [1, 1002]


def _remove_tree(folder: Path) -> None:
    """Remove a deep tree bottom-up without recursion (shutil.rmtree of Python 3.11 recurses)."""
    deepest = folder
    while (deepest / "d").is_dir():
        deepest = deepest / "d"
    (deepest / "bottom.py").unlink(missing_ok=True)
    os.chdir(folder)
    try:
        relative = Path(os.path.relpath(deepest, folder))
        while relative != Path("."):
            os.rmdir(relative)
            relative = relative.parent
    finally:
        os.chdir(ROOT)


# -- standard input ----------------------------------------------------------------------------

def test_standard_input_is_read_up_to_the_limit_of_a_file() -> None:
    from kllint.stdin import read_bounded

    class Endless:
        read_bytes = 0

        def read(self, size: int = -1) -> bytes:
            assert size > 0  # never "all of it"
            self.read_bytes += size
            return b"\0" * size

    stream = Endless()
    with pytest.raises(StdinUsageError, match="standard input is larger than 1 MB"):
        read_bounded(stream, 1024 * 1024)  # type: ignore[arg-type]
    assert stream.read_bytes == 1024 * 1024 + 1
    assert read_bounded(__import__("io").BytesIO(b"kl = 1\n")) == b"kl = 1\n"


@posix_only
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_kllint_check_dash_on_dev_zero(tmp_path: Path) -> None:
    """On main this grew to 5.7 GB in 3 s (here: MemoryError under a 2 GB address space, set in
    the child itself: no preexec_fn in a test process that may hold threads)."""
    limited = ("import resource, runpy, sys\n"
               "resource.setrlimit(resource.RLIMIT_AS, (2 * 1024 ** 3, 2 * 1024 ** 3))\n"
               "sys.argv = ['kllint', 'check', '-']\n"
               "runpy.run_module('kllint', run_name='__main__')\n")
    with open("/dev/zero", "rb") as zero:
        run = subprocess.run([sys.executable, "-c", limited], cwd=tmp_path, stdin=zero, capture_output=True,
                             text=True, timeout=300)
    assert run.returncode == 2
    assert run.stderr.strip() == "kllint: error: standard input is larger than 20 MB (the limit of a file); not checked"
    assert run.stdout == ""


@posix_only
def test_ctrl_c_while_standard_input_is_read(tmp_path: Path) -> None:
    """Ctrl+C between two chunks of a slow stream (passes on main too, where a read from a pipe
    that waits is interrupted; /dev/zero never waits: test_kllint_check_dash_on_dev_zero)."""
    process = subprocess.Popen([sys.executable, "-m", "kllint", "check", "-"], cwd=tmp_path, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stop = threading.Event()

    def feed() -> None:  # a producer that never ends
        try:
            while not stop.is_set():
                process.stdin.write(b"# kl\n" * 1000)
                process.stdin.flush()
                time.sleep(0.05)
        except (BrokenPipeError, OSError, ValueError):
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(3)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    finally:
        stop.set()
        process.kill()
        process.wait()


# -- the memory budget -----------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="resident memory from /proc")
def test_an_analysis_that_keeps_allocating_is_stopped_by_the_memory_budget(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    """The budget is hit in seconds: here 200 MB of growth, allocated 10 MB at a time."""
    import kllint.guard as guard
    import kllint.rules.dispatch as dispatch

    monkeypatch.setattr(guard, "MEMORY_BUDGET_BYTES", 200 * 1024 ** 2)
    held: list[bytearray] = []

    def allocates(*args: object, **kwargs: object) -> list:
        while len(held) < 1000:  # 10 GB if nothing stopped it
            held.append(bytearray(10 * 1024 ** 2))
            time.sleep(0.01)
        return []

    monkeypatch.setattr(dispatch, "check_source", allocates)
    path = tmp_path / "loss.py"
    path.write_text(NORMAL)
    started = time.monotonic()
    try:
        outcome = analyse_file(Discovered(path, "loss.py"), Settings())
    finally:
        seconds, allocated = time.monotonic() - started, len(held)
        held.clear()
    assert outcome.stopped and seconds < 30 and allocated < 100
    assert [d.message for d in outcome.diagnostics] == [
        "analysis stopped after using 0.195 GB of memory (the memory budget); not checked"]
    assert outcome.notes == ["analysis of loss.py stopped after using 0.195 GB of memory (memory budget)"]
    assert guard.memory_budget() == "0.195 GB" and outcome.stop_reason == "memory budget"
