"""Issue 35: checking a project never runs its code. A project may hold a module named like one
that kllint, or a process kllint starts, imports (`json.py`, `typing.py`, `pickle.py`, ...): no
command may import it, whatever the current folder, whether the file parses, with or without
worker processes, the cache, fixes or the language server. `--confirm` and `gradcheck
MODULE:FUNCTION` run the user's code by design and are not tested here.

Every hostile module writes a marker file (named after itself) into a folder outside the
project when it is imported; a test fails when any marker appears. The names are those the
processes import, read at test time with `-X importtime`, plus a fixed list of common ones.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kllint.config import OUTPUT_FORMATS

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
# an f-string (so the newer-grammar parser child runs) in a file that does not parse and names a
# KL (a file naming none is skipped unparsed)
BROKEN = 'kl = 1\nprint(f"{kl}")\nif :\n    pass\n'
COMMON = ("json", "typing", "re", "ast", "enum", "copy", "inspect", "warnings", "libcst", "os", "io", "abc",
          "codecs", "encodings", "site", "sitecustomize", "usercustomize", "types", "functools", "collections",
          "subprocess", "tempfile", "shutil", "pathlib", "signal", "resource", "selectors", "threading",
          "pickle", "runpy", "importlib", "multiprocessing", "concurrent", "queue", "socket", "struct",
          "weakref", "traceback", "linecache", "tokenize", "token", "dataclasses", "contextlib", "operator",
          "keyword", "heapq", "bisect", "random", "hashlib", "stat", "posixpath", "genericpath", "fnmatch",
          "string", "textwrap", "locale", "gettext", "platform", "uuid", "datetime", "difflib", "atexit",
          "errno", "time", "math", "yaml", "typing_extensions", "click", "rich", "pathspec", "tomli",
          "tomllib", "asyncio", "pygls", "lsprotocol", "attrs", "cattrs", "__future__")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def _imported(command: list[str], cwd: Path, stdin: str = "") -> list[str]:
    """The top-level names of the modules `command` (a Python command line) imports, in the
    order `-X importtime` reports them (a module after the modules it imports)."""
    proc = subprocess.run([command[0], "-X", "importtime", *command[1:]], input=stdin, cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=_env())
    names = [line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2]
    assert "libcst" in names or "click" in names, proc.stderr[-2000:]
    return [name for name in names if name not in ("imported package", "")]


def _before_kllint(cwd: Path) -> set[str]:
    """The modules `python -m kllint` imports before kllint's own code runs: the interpreter
    imports them (e.g. runpy on Python 3.10) once it has put the current folder on sys.path,
    which nothing in kllint can prevent; `python -P` / `-I` or the console script avoid it."""
    names = _imported([sys.executable, "-m", "kllint", "--version"], cwd)
    return set(names[:names.index("kllint")])


def _losses(folder: Path) -> None:
    """Ten files with findings: enough for `-j 2` to start workers."""
    for index, fixture in enumerate(sorted(FIXTURES.glob("KL102/*.py"))[:10]):
        shutil.copy(fixture, folder / f"loss{index}.py")


def _names(tmp_path: Path) -> list[str]:
    """Every module name imported by the parser child, a `kllint check -j 2` (its workers and
    multiprocessing's resource tracker inherit `-X importtime`) and `kllint server`, and the
    common ones."""
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "broken.py").write_text(BROKEN, encoding="utf-8")
    _losses(quiet)
    child = [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
                                          "from kllint.compat import _child; _child()"]
    names = {*_imported(child, quiet, BROKEN),
             *_imported([sys.executable, "-m", "kllint", "check", "-j", "2", "--no-cache", "."], quiet),
             *_imported([sys.executable, "-m", "kllint", "server"], quiet)}
    assert {"pygls", "libcst", "multiprocessing", "pickle"} <= names  # the server's, the child's, the workers'
    shutil.rmtree(quiet)
    return sorted((names | set(COMMON) | {"kllint"}) - {"__main__"})


def _plant(folder: Path, names: list[str], markers: Path) -> None:
    for name in names:  # nothing imported: the module may be named os or builtins' neighbours
        (folder / f"{name}.py").write_text(
            f"open({str(markers / name)!r}, 'w').close()\n", encoding="utf-8")


def _project(tmp_path: Path, spare_in_root: set[str]) -> tuple[Path, Path]:
    """(project, markers): a project whose `src` (the checked folder) holds a hostile module for
    every name, and its root (the current folder of the runs) for every name but `spare_in_root`;
    `src` has a broken f-string file and ten files with findings (enough for `-j 2` to start
    workers), the root a pyproject.toml."""
    markers = tmp_path / "markers"
    markers.mkdir()
    project = tmp_path / "project"
    src = project / "src"
    src.mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    names = _names(tmp_path)
    assert {"json", "libcst", "re", "typing"} <= set(names)
    _plant(project, [name for name in names if name not in spare_in_root], markers)
    _plant(src, names, markers)
    (src / "broken.py").write_text(BROKEN, encoding="utf-8")
    _losses(src)
    return project, markers


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """`_project` with every hostile module in both folders (for the console script)."""
    return _project(tmp_path, set())


@pytest.fixture
def hostile_for_m(tmp_path: Path) -> tuple[Path, Path]:
    """`_project` without, in the current folder, the modules `python -m` imports before kllint runs."""
    (tmp_path / "empty").mkdir()  # and kllint.py: `python -m kllint` runs it, as Python does
    return _project(tmp_path, _before_kllint(tmp_path / "empty") | {"kllint"})


def _marked(markers: Path) -> list[str]:
    return sorted(os.listdir(markers))


def _kllint(args: list[str], cwd: Path, stdin: str = "", launcher: list[str] | None = None):
    return subprocess.run([*(launcher or [sys.executable, "-m", "kllint"]), *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=300, env=_env(), errors="backslashreplace")


@pytest.fixture
def console_script(tmp_path: Path) -> list[str]:
    """A launcher like the `kllint` console script pip writes (its own folder first on sys.path)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "kllint").write_text("import sys\nfrom kllint.cli import main\nsys.exit(main())\n", encoding="utf-8")
    return [sys.executable, str(folder / "kllint")]


def test_checking_a_broken_f_string_file_imports_nothing_from_the_project(hostile, console_script):
    project, markers = hostile
    for jobs in ("1", "2"):  # the parser child in this process, then in worker processes
        done = _kllint(["check", "-j", jobs, "--no-cache", "--output-format", "json", "src"], project,
                       launcher=console_script)
        assert _marked(markers) == [], done.stderr[-3000:]
        assert done.returncode == 1 and "Traceback" not in done.stderr
        found = json.loads(done.stdout)
        assert any(d["path"] == "src/broken.py" and d["code"] == "KL900" for d in found)  # the syntax error
        assert any(d["path"].startswith("src/loss") for d in found)


COMMANDS = [
    *(["check", "--no-cache", "--output-format", fmt, "src"] for fmt in OUTPUT_FORMATS),
    ["check", "src"],  # writes the cache
    ["check", "src"],  # reads it
    ["check", "-j", "2", "--no-cache", "src"],
    ["check", "-j", "2", "src"],
    ["check", "--statistics", "src"],
    ["check", "--show-files", "src"],
    ["check", "--show-settings", "src"],
    ["check", "--diff", "src"],
    ["check", "--diff", "--unsafe-fixes", "src"],
    ["check", "--write-baseline", "baseline.json", "src"],
    ["check", "--baseline", "baseline.json", "src"],
    ["check", "--fix", "src"],
    ["check", "--fix", "--unsafe-fixes", "src"],
    ["check", "--add-noqa", "src"],
    ["--version"],
    ["rule", "KL102"],
    ["rules"],
    ["rules", "--output-format", "json"],
    ["gradcheck", "--expr", "torch.exp(ref - logp) - (ref - logp) - 1"],
    ["clean"],
]


def test_no_command_imports_anything_from_the_project(hostile_for_m, console_script):
    project, markers = hostile_for_m
    ran = []
    for args in COMMANDS:
        done = _kllint(args, project)
        ran.append((args, done.returncode, done.stderr[-500:]))
        assert _marked(markers) == [], ran
    for stdin_args in (["check", "-", "--stdin-filename", "src/broken.py"],
                       ["check", "--fix", "-", "--stdin-filename", "src/broken.py"]):
        done = _kllint(stdin_args, project, stdin=BROKEN)
        assert _marked(markers) == [], (stdin_args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr
    for args in (["check", "-j", "2", "--no-cache", "src"], ["check", "--no-cache", "src"]):
        done = _kllint(args, project, launcher=console_script)
        assert _marked(markers) == [], done.stderr[-2000:]
        assert "Traceback" not in done.stderr


def test_the_language_server_imports_nothing_from_the_project(hostile_for_m):
    pytest.importorskip("pygls")
    pytest_lsp = pytest.importorskip("pytest_lsp")
    from lsprotocol import types

    project, markers = hostile_for_m
    unsaved = project / "src" / "unsaved.py"

    async def session() -> list[types.Diagnostic]:
        client = pytest_lsp.make_test_lsp_client()
        await client.start_io(sys.executable, "-m", "kllint", "server", cwd=str(project), env=_env())
        try:
            await client.initialize_session(types.InitializeParams(
                capabilities=pytest_lsp.client_capabilities("visual-studio-code"), root_uri=project.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=project.as_uri(), name="p")]))
            client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
                uri=unsaved.as_uri(), language_id="python", version=1, text=BROKEN)))
            while True:
                params = await asyncio.wait_for(
                    client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 120)
                if params.uri == unsaved.as_uri():
                    return list(params.diagnostics)
        finally:
            await client.shutdown_session()
            await client.stop()

    try:
        published = asyncio.run(session())
    finally:  # a server that imported a hostile module may have died of it: the markers first
        assert _marked(markers) == []
    assert [d.code for d in published] == ["KL900"]
