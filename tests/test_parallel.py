"""Parallel workers (`-j/--jobs`, kllint.pipeline.parallel): the output does not depend on the number of
jobs, and a worker that dies on one file costs only that file.

Worker crashes are simulated with the test-only environment variable `KLLINT_TEST_CRASH_ON`
(read by the workers, which are spawned processes: a monkeypatch would not reach them).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from extra_cases import SKIP_REASON, extra_cases_dir

from kllint.pipeline import parallel
from kllint.config import Settings
from kllint.pipeline.discovery import discover
from kllint.pipeline.run import run
from kllint.report import json as report_json

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
EXTRA_CASES = extra_cases_dir()


def kllint(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "kllint", *args], cwd=cwd, capture_output=True, text=True,
                          env=full_env, timeout=600)


def _json(paths: list[Path], jobs: int) -> tuple[str, list[str]]:
    settings = Settings()
    files = list(discover([str(p) for p in paths], settings))
    result = run(files, settings, jobs=jobs)
    return report_json.render(result.diagnostics), result.internal_errors


def test_fixtures_same_output_with_one_and_two_jobs():
    files = list(discover([str(FIXTURES)], Settings()))
    assert len(files) > parallel.THRESHOLD
    one, errors_one = _json([FIXTURES], 1)
    two, errors_two = _json([FIXTURES], 2)
    assert errors_one == errors_two == []
    assert one == two
    assert json.loads(one)  # the fixtures have findings


@pytest.mark.skipif(EXTRA_CASES is None, reason=SKIP_REASON)
def test_extra_cases_same_output_with_one_and_two_jobs():
    one, errors_one = _json([EXTRA_CASES], 1)
    two, errors_two = _json([EXTRA_CASES], 2)
    assert errors_one == errors_two
    assert one == two


def test_command_line_jobs_give_identical_json(tmp_path):
    base = ["check", "--output-format", "json", "--no-cache", str(FIXTURES)]
    one = kllint([*base, "-j", "1"], cwd=tmp_path)
    two = kllint([*base, "--jobs", "2"], cwd=tmp_path)
    assert one.returncode == two.returncode == 1
    assert one.stdout == two.stdout
    assert "Traceback" not in two.stderr
    assert not (tmp_path / ".kllint_cache").exists()


def test_jobs_must_be_positive(tmp_path):
    proc = kllint(["check", "-j", "0", str(FIXTURES / "negative")], cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def _project(tmp_path: Path, count: int = 12) -> list[Path]:
    """A package of `count` fixture files (some with findings) under tmp_path/proj/pkg."""
    pkg = tmp_path / "proj" / "pkg"
    pkg.mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    sources = sorted(FIXTURES.glob("KL*/*.py"))[:count]
    copied = []
    for index, source in enumerate(sources):
        target = pkg / f"m{index:02d}_{source.name}"
        shutil.copy(source, target)
        copied.append(target)
    return copied


def test_worker_crash_costs_only_that_file(tmp_path):
    files = _project(tmp_path)
    victim = files[3].name
    args = ["check", "--output-format", "json", "--no-cache", "-j", "2", "pkg"]
    reference = kllint(args[:-3] + ["-j", "1", "pkg"], cwd=tmp_path / "proj")
    crashed = kllint(args, cwd=tmp_path / "proj", env={parallel.CRASH_ENV: victim})
    assert crashed.returncode == 2  # an internal error
    assert "Traceback" not in crashed.stderr
    assert f"pkg/{victim}: internal error: the worker process crashed" in crashed.stderr
    assert crashed.stderr.count("internal error") == 1
    expected = [d for d in json.loads(reference.stdout) if d["path"] != f"pkg/{victim}"]
    assert json.loads(crashed.stdout) == expected
    assert expected  # other files still have their findings


def test_two_crashing_files_in_one_run(tmp_path):
    files = _project(tmp_path, count=14)
    victims = [files[0].name, files[9].name]
    proc = kllint(["check", "--output-format", "json", "--no-cache", "-j", "2", "pkg"], cwd=tmp_path / "proj",
                  env={parallel.CRASH_ENV: ",".join(victims)})
    assert proc.returncode == 2
    for victim in victims:
        assert f"pkg/{victim}: internal error: the worker process crashed" in proc.stderr
    assert proc.stderr.count("internal error") == 2
    reported = {d["path"] for d in json.loads(proc.stdout)}
    assert not reported & {f"pkg/{v}" for v in victims}
    assert reported


def test_crash_variable_is_ignored_without_workers(tmp_path):
    files = _project(tmp_path)
    proc = kllint(["check", "--output-format", "json", "--no-cache", "-j", "1", "pkg"], cwd=tmp_path / "proj",
                  env={parallel.CRASH_ENV: files[3].name})
    assert proc.returncode == 1
    assert "internal error" not in proc.stderr


def test_pool_that_cannot_start_falls_back_to_this_process(tmp_path, monkeypatch):
    _project(tmp_path)
    expected, _ = _json([tmp_path / "proj" / "pkg"], 1)

    def broken_executor(workers, status, home):  # every worker dies before it takes a file
        return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                   initializer=os._exit, initargs=(3,))

    monkeypatch.setattr(parallel, "_executor", broken_executor)
    got, errors = _json([tmp_path / "proj" / "pkg"], 2)
    assert errors == []
    assert got == expected


def test_progress_is_called_once_per_file(tmp_path):
    _project(tmp_path)
    settings = Settings()
    files = list(discover([str(tmp_path / "proj" / "pkg")], settings))
    seen = []
    run(files, settings, progress=lambda item: seen.append(item.display), jobs=2)
    assert sorted(seen) == sorted(item.display for item in files)


def test_chunks_group_by_folder_and_cover_every_file(tmp_path):
    tasks = []
    for folder in ("a", "b", "c"):
        for index in range(5):
            path = tmp_path / folder / f"f{index}.py"
            path.parent.mkdir(exist_ok=True)
            path.write_text("x = 1\n" * (10 if folder != "c" else 400))
            tasks.append(parallel.Task(len(tasks), parallel.Discovered(path, path.name), Settings()))
    parts = parallel.chunks(tasks, jobs=2)
    positions = sorted(task.position for part in parts for task in part)
    assert positions == list(range(len(tasks)))
    for part in parts:
        assert len({task.item.path.parent for task in part}) == 1  # one folder per chunk
    small = [part for part in parts if part[0].item.path.parent.name in ("a", "b")]
    assert sorted(len(part) for part in small) == [5, 5]  # small packages stay whole
    assert len([part for part in parts if part[0].item.path.parent.name == "c"]) > 1  # big ones are cut
    assert parts == parallel.chunks(list(reversed(tasks)), jobs=2)  # deterministic


def test_chunks_keep_each_import_root_together_costliest_first(tmp_path):
    tasks = []
    for project, size in (("small", 5), ("large", 300), ("middle", 60)):
        for folder in ("pkg", "pkg/sub"):
            (tmp_path / project / folder).mkdir(parents=True, exist_ok=True)
            (tmp_path / project / folder / "__init__.py").write_text("")
            for index in range(4):
                path = tmp_path / project / folder / f"f{index}.py"
                path.write_text("x = 1\n" * (size if folder == "pkg" else 1))  # each root has a small folder
                tasks.append(parallel.Task(len(tasks), parallel.Discovered(path, path.name), Settings()))
    parts = parallel.chunks(tasks, jobs=2)
    projects = [part[0].item.path.relative_to(tmp_path).parts[0] for part in parts]
    order = list(dict.fromkeys(projects))
    assert order == ["large", "middle", "small"]  # the costliest root first
    assert projects == sorted(projects, key=order.index)  # a root's chunks are never interleaved
    weights = [sum(task.item.path.stat().st_size for task in part) for part in parts if projects[parts.index(part)] == "large"]
    assert weights == sorted(weights, reverse=True)
    # a root of at most half the bytes goes to one worker whole, across its folders; the large one is cut
    assert projects.count("middle") == 1 and projects.count("small") == 1 and projects.count("large") > 1
    assert len(parts[projects.index("middle")]) == 8


def test_replaced_analysis_stays_in_process(monkeypatch):
    import kllint.rules.dispatch as dispatch

    assert parallel.usable()
    monkeypatch.setattr(dispatch, "check_source", lambda *args, **kwargs: [])
    assert not parallel.usable()


def test_considering_a_pool_imports_no_analysis():
    # the parent of a pool only hands out files: libcst and the term algebra are the workers' business
    code = ("import sys; from kllint.pipeline import parallel; assert parallel.usable(); "
            "print(sorted(m for m in ('kllint.rules.dispatch', 'kllint.analysis.terms', 'libcst') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_pool_only_for_enough_candidate_files(tmp_path):
    plain = []
    for index in range(parallel.THRESHOLD * 3):
        path = tmp_path / f"plain{index}.py"
        path.write_text("x = 1\n")
        plain.append(parallel.Discovered(path, path.name))
    assert not parallel.worth_it(plain)
    fixtures = list(discover([str(FIXTURES / "KL102")], Settings()))
    many = fixtures * (parallel.THRESHOLD // len(fixtures) + 1)
    assert parallel.worth_it(plain + many)
