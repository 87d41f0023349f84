#!/usr/bin/env python3
"""The engine's performance targets, measured in one run and printed as one table.

Usage:
    python bench/bench_targets.py               # every target once
    python bench/bench_targets.py --repeat 3    # the fastest of three runs per measurement

Each row is one target of the engine issue, measured on this machine in this run, with its
limit and whether it holds. The same files are given to every tool:
    nine releases  `kllint check .` over one folder holding ALL_RELEASES of tests/releases.py
                   (cold: a fresh empty --cache-dir), -j 2 and -j 1, against the libcst parse of
                   the prefiltered candidate files on one core in this process (the floor), and
                   against `ruff check --select ALL --no-cache` and semgrep with one pattern rule
                   (every file: an empty `.semgrepignore`, `--no-git-ignore`) on the same folder
    -j 2 == -j 1   the JSON reports of the two cold runs are identical
    verl 0.4.1     `verl/workers/actor/dp_actor.py` alone, and the whole package, cold
    warm           a re-run over the cache of the cold -j 1 run after one file was changed
    pre-commit     5 files of trl 0.14.0 (one with a finding), cold, start-up included (median)
    RSS            peak resident set size of the cold -j 2 nine-release run and its workers

ruff and semgrep are installed on first use into a virtual environment of the release cache
(`KLLINT_RELEASE_CACHE`, default `~/.cache/kllint/releases`, folder `bench-tools/`) from PyPI;
a tool that cannot be installed is reported as n/a. Nothing is written into the repository
but kllint's bytecode (`__pycache__`, as `pip install` writes it: no timed run compiles kllint).
bench/bench_floors.py gives the least time each target can take on this machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_releases import (  # noqa: E402
    ALL_RELEASES, compile_kllint, SEMGREP_RULE, Row, Timed, append_change, best_of, choose_prefilter, combined_folder,
    discovered_files, first_candidate, kllint_command, measure_files, precommit_run, detect_cli,
    release_tree, run_timed,
)
from releases import cache_dir  # noqa: E402

VERL = "verl==0.4.1"
VERL_FILE = "verl/workers/actor/dp_actor.py"
TOOLS = ("ruff", "semgrep")


@dataclass
class Target:
    """One printed row: what is measured, the value, and the limit it must not exceed."""

    name: str
    value: float | None
    limit: float | None
    unit: str = "s"
    note: str = ""

    def verdict(self) -> str:
        if self.value is None:
            return "n/a"
        if self.limit is None:
            return "-"
        return "yes" if self.value <= self.limit else "NO"


def tool_path(name: str) -> str | None:
    """`name` on PATH, else from the bench's own virtual environment (created on first use)."""
    found = shutil.which(name)
    if found:
        return found
    env = cache_dir() / "bench-tools"
    executable = env / "bin" / name
    if not executable.exists():
        try:
            if not (env / "bin" / "python").exists():
                venv.create(env, with_pip=True)
            subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", *TOOLS],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.CalledProcessError):
            return None
    return str(executable) if executable.exists() else None


def kllint_cold(target: str, cwd: Path, jobs: int, repeat: int) -> tuple[Timed, Path]:
    """A cold `kllint check` (a fresh cache folder, kept for a warm re-run): the fastest run."""
    caches: list[Path] = []

    def once() -> Timed:
        caches.append(Path(tempfile.mkdtemp(prefix="kllint-bench-cache-")))
        return run_timed([*kllint_command(), "check", target, "--output-format", "json", "-j", str(jobs),
                          "--cache-dir", str(caches[-1])], cwd=cwd)

    timed = best_of(repeat, once)
    for extra in caches[1:]:
        shutil.rmtree(extra, ignore_errors=True)
    return timed, caches[0]


def findings(timed: Timed) -> list | None:
    try:
        return json.loads(timed.stdout)
    except ValueError:
        return None


def other_tools(folder: Path, repeat: int) -> tuple[Timed | None, Timed | None]:
    """ruff (every rule) and semgrep (one pattern rule, every file) over `folder`."""
    ruff, semgrep = tool_path("ruff"), tool_path("semgrep")
    ruff_run = best_of(repeat, lambda: run_timed(
        [ruff, "check", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet", "."], cwd=folder)) if ruff else None
    semgrep_run = None
    if semgrep:
        with tempfile.TemporaryDirectory(prefix="kllint-bench-semgrep-") as scratch:
            rule = Path(scratch) / "rule.yaml"
            rule.write_text(SEMGREP_RULE, encoding="utf-8")
            ignore = folder / ".semgrepignore"
            ignore.write_text("", encoding="utf-8")
            try:
                semgrep_run = best_of(repeat, lambda: run_timed(
                    [semgrep, "scan", "--config", str(rule), "--metrics=off", "--quiet", "--json",
                     "--no-git-ignore", "."], cwd=folder, env={"SEMGREP_ENABLE_VERSION_CHECK": "0"}))
            finally:
                ignore.unlink()
    return ruff_run, semgrep_run


def measure(repeat: int) -> list[Target]:
    """Every target of the engine issue, in the order of the issue."""
    prefilter, _ = choose_prefilter(None)
    for spec in [*ALL_RELEASES, VERL]:
        release_tree(spec)  # downloads outside the timings
    targets: list[Target] = []
    with combined_folder(list(ALL_RELEASES)) as folder:
        row = Row("combined")
        files = discovered_files(folder, folder)
        measure_files(row, files, prefilter, repeat)
        j2, _ = kllint_cold(".", folder, 2, repeat)
        j1, cache = kllint_cold(".", folder, 1, repeat)
        changed = first_candidate(files, prefilter)
        warm = None
        if changed is not None:
            def warm_run() -> Timed:
                append_change(changed)
                return run_timed([*kllint_command(), "check", ".", "--output-format", "json", "-j", "1",
                                  "--cache-dir", str(cache)], cwd=folder)
            warm = best_of(repeat, warm_run)
        shutil.rmtree(cache, ignore_errors=True)
        ruff, semgrep = other_tools(folder, repeat)
    reported = findings(j1)
    same = reported is not None and reported == findings(j2)
    targets += [
        Target("nine releases, cold, -j 2", j2.seconds, 8.0),
        Target("  ... / libcst parse of the candidates (one core)", j2.seconds / row.floor, 0.8, "x",
               f"{row.candidates} candidates parsed in {row.floor:.2f} s"),
        Target("  ... / ruff check --select ALL", j2.seconds / ruff.seconds if ruff else None, None, "x",
               f"ruff {ruff.seconds:.2f} s" if ruff else "ruff not installed"),
        Target("  ... / semgrep, one pattern rule, every file", j2.seconds / semgrep.seconds if semgrep else None,
               None, "x", f"semgrep {semgrep.seconds:.2f} s" if semgrep else "semgrep not installed"),
        Target("nine releases, cold, -j 1", j1.seconds, None),
        Target("  -j 2 faster than -j 1 (ratio)", j2.seconds / j1.seconds, 1.0, "x"),
        Target("  -j 2 reports differing from -j 1 (0: identical)", 0.0 if same else 1.0, 0.0, "",
               f"{len(reported or [])} findings"),
        Target("warm re-run, one file changed", warm.seconds if warm else None, 0.5),
        Target("peak RSS, nine releases, -j 2", j2.maxrss_mb, 300.0, "MB"),
    ]
    verl = release_tree(VERL)
    one, one_cache = kllint_cold(VERL_FILE, verl, 1, repeat)
    package, package_cache = kllint_cold(".", verl, 2, repeat)
    for leftover in (one_cache, package_cache):
        shutil.rmtree(leftover, ignore_errors=True)
    cold, _, _ = precommit_run(detect_cli(), repeat)
    targets += [
        Target(f"{VERL} {VERL_FILE}, cold", one.seconds, 1.5),
        Target(f"{VERL} package, cold, -j 2", package.seconds, 5.0),
        Target("pre-commit, 5 files, cold", cold.seconds, 0.8),
    ]
    return targets


def print_targets(targets: list[Target]) -> None:
    """The targets as a markdown table."""
    print("| target | measured | limit | holds | note |")
    print("|---|---|---|---|---|")
    for t in targets:
        value = "n/a" if t.value is None else f"{t.value:.2f} {t.unit}".strip()
        limit = "-" if t.limit is None else f"<= {t.limit:g} {t.unit}".strip()
        print(f"| {t.name} | {value} | {limit} | {t.verdict()} | {t.note} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest is shown")
    args = parser.parse_args(argv)
    compile_kllint()
    version = subprocess.run([*kllint_command(), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{version}; python {sys.version.split()[0]}; cpus {os.cpu_count()}")
    print()
    print_targets(measure(max(1, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
