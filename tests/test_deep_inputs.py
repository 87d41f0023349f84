"""Issue 35, items 3 and 6: no single file stops a run, in any mode. Each adversarial input of
bench/deep_inputs.py (deep nesting, huge constants, nested loops, a notebook of nested JSON)
reports its own note, or is analysed to the end, while a normal file in the same run keeps its
finding: a small run (the in-process path of every pre-commit run), one job, two workers,
standard input and the language server's buffer check.

The runs are child processes with a generous timeout, a guard against hangs only: the time of
each input is measured by bench/bench_pathological.py (`--only` the `deep_*` inputs).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from deep_inputs import SHAPES, Shape  # noqa: E402

NORMAL = ROOT / "fixtures" / "KL101" / "grpo_token_log_ratio_penalty.py"  # KL101 at line 25
GUARD = 300  # seconds


def kllint(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kllint", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=GUARD, errors="backslashreplace")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("deep")
    (base / "pyproject.toml").write_text("[project]\nname = 'deep'\n")
    (base / "normal.py").write_text(NORMAL.read_text())
    for shape in SHAPES.values():
        (base / shape.file).write_text(shape.make())
    return base


def check_shape(found: list[dict], shape: Shape, path: str) -> None:
    """The findings of one input are what `shape.expect` says."""
    mine = [d for d in found if d["path"] == path]
    notes = [d["message"] for d in mine if d["code"] == "KL900"]
    if shape.expect == "analysed":
        assert not notes, (shape.label, notes)
    else:
        assert len(notes) == 1 and shape.expect.removeprefix("KL900 ") in notes[0], (shape.label, mine)


def check_run(run: subprocess.CompletedProcess, normal: str = "normal.py") -> list[dict]:
    """A run that reported as usual: exit 1, JSON on stdout, no traceback or internal error, and
    the normal file's KL101."""
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr[-2000:]
    found = json.loads(run.stdout)
    assert ("KL101", 25) in {(d["code"], d["line"]) for d in found if d["path"] == normal}
    return found


SMALL = 7  # inputs per small run: with the normal file, at most the 8 files a run keeps in its process


@pytest.mark.parametrize("part", range(0, len(SHAPES), SMALL))
def test_the_inputs_in_small_runs(folder: Path, part: int) -> None:
    shapes = list(SHAPES.values())[part:part + SMALL]  # analysed in this process, as by every pre-commit run
    run = kllint(["check", "--no-cache", "--output-format", "json", *(s.file for s in shapes), "normal.py"], folder)
    found = check_run(run)
    for shape in shapes:
        check_shape(found, shape, shape.file)


def test_every_input_with_one_job_and_with_two_workers(folder: Path) -> None:
    files = [shape.file for shape in SHAPES.values()]
    assert len(files) > 8  # more than the pool's threshold: -j 2 hands them to worker processes
    for jobs in ("1", "2"):
        run = kllint(["check", "--no-cache", "-v", "-j", jobs, "--output-format", "json", *files, "normal.py"], folder)
        found = check_run(run)
        for shape in SHAPES.values():
            check_shape(found, shape, shape.file)
        # -v says why a file was not analysed, and the summary counts the notes as findings
        assert f"kllint: {SHAPES['unary500'].file}: not analysed: nesting deeper than 150 levels" in run.stderr
        assert f"kllint: analysed: {SHAPES['loops18'].file}" in run.stderr


@pytest.mark.parametrize("name", ["unary500", "strings600", "doubling1100", "notebook1000"])
def test_inputs_on_standard_input(folder: Path, name: str) -> None:
    shape = SHAPES[name]  # the path of an editor's buffer (all inputs: test_the_language_server_check_of_a_buffer)
    run = kllint(["check", "-", "--stdin-filename", shape.file, "--output-format", "json"], folder,
                 stdin=shape.make())
    assert run.returncode in (0, 1), run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr[-2000:]
    check_shape(json.loads(run.stdout), shape, shape.file)


def test_the_language_server_check_of_a_buffer(folder: Path) -> None:
    """`check_buffer` (the analysis of an editor's buffer, kllint.server.documents) of every
    input, in one child process: a note or findings, never only an internal error."""
    script = ("import json, sys\nfrom pathlib import Path\nfrom kllint.server.documents import check_buffer\n"
              "out = {}\nfor name in sys.argv[1:]:\n"
              "    checked = check_buffer(Path(name).resolve(), Path(name).read_text())\n"
              "    out[name] = [[d.code, d.message] for d in checked.diagnostics], list(checked.errors)\n"
              "print(json.dumps(out))\n")
    names = [shape.file for shape in SHAPES.values()] + ["normal.py"]
    done = subprocess.run([sys.executable, "-c", script, *names], cwd=folder, capture_output=True, text=True,
                          timeout=GUARD)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    for shape in SHAPES.values():
        diagnostics, errors = results[shape.file]
        assert not errors, (shape.label, errors)
        check_shape([{"path": shape.file, "code": code, "message": message} for code, message in diagnostics],
                    shape, shape.file)
    assert ["KL101"] == [code for code, _ in results["normal.py"][0]]


def test_gradcheck_refuses_huge_integer_powers_before_evaluating() -> None:
    from kllint.gradcheck.allowed import check_allowed
    from kllint.gradcheck.errors import GradcheckError

    for expression, setup, reason in [("logp * (10**10**8 > 0)", (), "an exponent or shift above 1,024"),
                                      ("pow(10, 10**8) * logp", (), "an exponent or shift above 1,024"),
                                      ("logp * (1 << 10**9)", (), "an exponent or shift above 1,024"),
                                      ("(10**1000) ** 1000 * logp", (), "a constant beyond 65,536 bits"),
                                      ("logp * ('a' * 10**10 == 'a')", (), "a string repeated past"),
                                      ("logp * (10 ** n > 0)", ("n = 10 ** 8",), "an exponent or shift above")]:
        with pytest.raises(GradcheckError, match=reason):
            check_allowed(expression, setup)
    check_allowed("0.5 * (logp - ref) ** 2 + 2 ** 0.5 * logp ** 10", ("d = 10 ** 3",))  # ordinary powers pass


def test_gradcheck_huge_integer_powers_end_at_once(tmp_path: Path) -> None:
    """Python computes `10**10**8` in one C call that holds the interpreter lock: on main the
    command ran past a minute and ignored Ctrl+C (here it would meet the guard's timeout)."""
    run = kllint(["gradcheck", "--expr", "logp * (10**10**8 > 0)"], tmp_path)
    assert run.returncode == 2 and "an exponent or shift above 1,024" in run.stderr, run.stderr
    run = kllint(["gradcheck", "--expr", "logp * (10 ** int(1e8) > 0)"], tmp_path)  # computed at run time
    assert run.returncode == 2 and "OverflowError" in run.stderr, run.stderr
