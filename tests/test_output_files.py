"""Every option that writes a file (`-o/--output-file`, `--report FORMAT:PATH`,
`--write-baseline PATH`) behaves the same: a missing parent folder is created (as Ruff's
`--output-file`), the file is replaced atomically, and a failure is one line naming the
option, exit code 2, never a traceback."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli_support import fake_analysis, run_cli, write  # noqa: F401 - fixture

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX modes and links")

# (option, arguments writing to PATH, exit code of a run with one finding)
WRITERS = [
    ("--output-file", lambda path: ["--output-format", "json", "-o", path], 1),
    ("--report", lambda path: ["--report", f"json:{path}"], 1),
    ("--write-baseline", lambda path: ["--write-baseline", path], 0),
]


@pytest.fixture
def project(tmp_path, monkeypatch, fake_analysis):
    write(tmp_path / "pkg" / "loss.py", "import torch\n\ndef loss(x):\n    return BAD(x)\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _check(args: list[str]):
    return run_cli(["check", "--no-cache", *args, "pkg"])


def _one_line_error(result, option: str) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"kllint: error: {option} ") and "Traceback" not in result.stderr
    return lines[0]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.kllint.tmp"))


@pytest.mark.parametrize("option,args,code", WRITERS, ids=[w[0] for w in WRITERS])
def test_missing_parent_folders_are_created(project, option, args, code):
    result = _check(args("out/nested/findings.json"))
    assert result.exit_code == code, result.stderr
    data = json.loads((project / "out" / "nested" / "findings.json").read_text(encoding="utf-8"))
    found = data if isinstance(data, list) else data["findings"]
    assert [d["code"] for d in found] == ["KL102"]
    assert _leftovers(project) == []


@pytest.mark.parametrize("option,args,code", WRITERS, ids=[w[0] for w in WRITERS])
def test_a_file_in_the_way_of_the_folder_is_one_line_exit_2(project, option, args, code):
    write(project / "out", "a file, not a folder\n")
    line = _one_line_error(_check(args("out/findings.json")), option)
    assert "out/findings.json: cannot create the folder out" in line


@pytest.mark.parametrize("option,args,code", WRITERS, ids=[w[0] for w in WRITERS])
def test_a_folder_as_the_path_is_one_line_exit_2(project, option, args, code):
    (project / "out").mkdir()
    line = _one_line_error(_check(args("out")), option)
    assert line.endswith("out: is a folder, not a file")


@pytest.mark.parametrize("option,args,code", WRITERS[1:], ids=[w[0] for w in WRITERS[1:]])
def test_a_path_that_cannot_be_written_stops_the_run_before_any_analysis(project, monkeypatch, option, args, code):
    import kllint.rules.dispatch as dispatch

    analysed: list[str] = []
    original = dispatch.check_source
    monkeypatch.setattr(dispatch, "check_source", lambda text, display, *a, **k: analysed.append(display)
                        or original(text, display, *a, **k))
    (project / "out").mkdir()
    result = _check(args("out"))
    _one_line_error(result, option)
    assert result.stdout == "" and analysed == []  # not a whole run first, then the error


@posix_only
@pytest.mark.parametrize("option,args,code", WRITERS, ids=[w[0] for w in WRITERS])
def test_existing_file_keeps_its_mode_and_a_link_is_followed(project, option, args, code):
    target = write(project / "reports" / "real.json", "old\n")
    target.chmod(0o640)
    (project / "link.json").symlink_to(target)
    assert _check(args("link.json")).exit_code == code
    assert (project / "link.json").is_symlink()
    assert "KL102" in target.read_text(encoding="utf-8")
    assert target.stat().st_mode & 0o777 == 0o640
    assert _leftovers(project) == []


def test_output_file_is_untouched_when_the_run_fails(project):
    previous = write(project / "out" / "findings.json", "[]\n")
    write(project / "bad-baseline.json", "not json")
    result = _check(["--output-format", "json", "-o", "out/findings.json", "--baseline", "bad-baseline.json"])
    assert result.exit_code == 2 and "not a kllint baseline" in result.stderr
    assert previous.read_text(encoding="utf-8") == "[]\n"  # never truncated by a failed run
    assert _leftovers(project) == []


# -- issue 35, item 8b: a full disk names the file the output went to ------------------------------

class _FullDisk:
    """The handle of a file on a full disk: `write` or `flush` fails with ENOSPC."""

    def __init__(self, handle, failing: str) -> None:
        self._handle, self._failing = handle, failing

    def _maybe_fail(self, what: str) -> None:
        if what == self._failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, text: str) -> int:
        self._maybe_fail("write")
        return self._handle.write(text)

    def flush(self) -> None:
        self._maybe_fail("flush")
        self._handle.flush()

    def __getattr__(self, name: str):
        return getattr(self._handle, name)


@pytest.mark.parametrize("failing", ["write", "flush"])
@pytest.mark.parametrize("args", [["--output-format", "json"], ["--output-format", "full"], ["--statistics"],
                                  ["--diff"], ["--show-files"]], ids=["json", "full", "statistics", "diff", "files"])
def test_a_full_disk_under_output_file_names_the_file(project, monkeypatch, args, failing):
    import kllint.outfiles

    real = kllint.outfiles.replacing

    @contextlib.contextmanager
    def full_disk(target, **kwargs):
        with real(target, **kwargs) as handle:
            disk = _FullDisk(handle, failing)
            yield disk
            disk.flush()  # as `replacing` flushes what is buffered before the rename

    monkeypatch.setattr(kllint.outfiles, "replacing", full_disk)
    previous = write(project / "out" / "findings.txt", "previous\n")
    result = _check([*args, "-o", "out/findings.txt"])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    # the last line (a summary such as "Would fix 1 finding." may come before a failed final flush)
    assert result.stderr.strip().splitlines()[-1] == ("kllint: error: --output-file out/findings.txt: "
                                                      "cannot write: No space left on device")
    assert "standard output" not in result.stderr and "Traceback" not in result.stderr
    assert previous.read_text() == "previous\n" and _leftovers(project) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [[], ["--diff", "--unsafe-fixes"], ["--show-files"]], ids=["findings", "diff", "files"])
def test_a_full_standard_output_is_one_line_naming_it(tmp_path, args):
    from test_hostile_files import GOOD, ROOT

    (tmp_path / "good.py").write_text(GOOD, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "kllint", "check", "--no-cache", *args, "good.py"], cwd=tmp_path,
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "kllint: error: cannot write to standard output: No space left on device"
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
