#!/usr/bin/env python3
"""Benchmark `kllint check` on pinned releases of real RL libraries against parsing floors.

Usage:
    python bench/bench_releases.py            # the four releases the tests use
    python bench/bench_releases.py --all      # plus trl 1.16.0, openrlhf, nemo-aligner, ... (12 in all)
    python bench/bench_releases.py --releases trl==0.14.0 verl==0.9.1 --repeat 3

Releases are downloaded once into the release cache (`KLLINT_RELEASE_CACHE`, default
`~/.cache/kllint/releases`) by `tests/releases.py`; nothing is written into the repository.
Each release is checked as a whole unpacked tree (the wheel's contents, or an sdist's root).

Columns (seconds unless marked):
    files, MB      the .py files kllint discovers in the tree, and their size
    cand.          files the prefilter lets through (kllint's own prefilter if it has one)
    -j1, -j2       `kllint check TREE --output-format json` as a subprocess, cold, wall time
                   including interpreter start-up; -j2 only if `kllint check --help` offers -j
    warm           a re-run over a populated cache, if the CLI offers --cache-dir / --no-cache
    floor          in-process: read + decode every file, regex prefilter, libcst.parse_module
                   of the candidates only (a lower bound for any libcst-based linter)
    libcst all     in-process: read + decode + libcst.parse_module of every file
    ast all        in-process: read + decode + ast.parse of every file
    /floor, /parse kllint -j1 divided by floor, and by libcst all
    RSS MB         peak resident set size of the kllint -j1 subprocess and its workers (their
                   own rusage via a small launcher process, see run_timed)
    findings       number of JSON findings from the -j1 run (a `!` marks a -j2 count that differs)

The pre-commit lines run `kllint check` on 5 files of trl 0.14.0 (one with a finding), the way
the pre-commit hook does, timed including interpreter start-up (median of --repeat runs, >= 3):
cold (no cache) and, if the CLI has --cache-dir, warm (cache filled by an untimed run).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from releases import ALL_RELEASES, CORE_RELEASES, python_files, release_tree  # noqa: E402

# The floor's prefilter: kllint's own (`kllint.prefilter.might_matter`) when the package has
# one, else this regex of files that can hold a KL estimate at all; --prefilter forces a regex.
DEFAULT_PREFILTER = r"kl|log_?probs?|logps?\b|kl_div|KLDiv"

PRECOMMIT_RELEASE = "trl==0.14.0"
PRECOMMIT_FINDING = "trl/trainer/grpo_trainer.py"


@dataclass
class Timed:
    seconds: float
    exit_code: int
    stdout: str
    stderr: str
    maxrss_mb: float


@dataclass
class Row:
    spec: str
    files: int = 0
    mb: float = 0.0
    candidates: int = 0
    j1: Timed | None = None
    j2: Timed | None = None
    warm: Timed | None = None
    floor: float = 0.0
    libcst_all: float = 0.0
    ast_all: float = 0.0
    parse_failures: int = 0
    notes: list[str] = field(default_factory=list)


# --- subprocesses -------------------------------------------------------------------------------

def kllint_command() -> list[str]:
    return [sys.executable, "-m", "kllint"]


# A tiny launcher process runs the measured command. On Linux a child's ru_maxrss includes the
# resident size of the process that forked it (the memory image replaced at exec), so forking
# kllint straight from this benchmark (tens of MB after parsing a release) would report our RSS,
# not kllint's. The launcher (python -I -S, a few MB) forks it instead and reports the child's
# own rusage (kllint and any worker processes it waited for) and wall time.
_LAUNCHER = (
    "import os,sys,subprocess,time\n"
    "t=time.perf_counter()\n"
    "p=subprocess.Popen(sys.argv[2:])\n"
    "_,s,u=os.wait4(p.pid,0)\n"
    "d=time.perf_counter()-t\n"
    "open(sys.argv[1],'w').write(f'{d!r} {u.ru_maxrss}')\n"
    "sys.exit(os.waitstatus_to_exitcode(s))\n"
)


def run_timed(command: list[str], cwd: Path) -> Timed:
    """Run `command`; its wall time (interpreter start-up included) and its own peak RSS."""
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory(prefix="kllint-bench-") as scratch:
        report = Path(scratch) / "usage"
        if hasattr(os, "wait4"):
            proc = subprocess.run([sys.executable, "-I", "-S", "-c", _LAUNCHER, str(report), *command],
                                  cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            try:
                seconds_text, maxrss_text = report.read_text().split()
                elapsed, maxrss = float(seconds_text), int(maxrss_text)
            except (OSError, ValueError):
                elapsed, maxrss = float("nan"), 0
        else:  # pragma: no cover - not POSIX: wall time only
            start = time.perf_counter()
            proc = subprocess.run(command, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            elapsed = time.perf_counter() - start
            maxrss = 0  # no rusage here
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return Timed(elapsed, proc.returncode, stdout, stderr, maxrss / scale)


@dataclass(frozen=True)
class CliSupport:
    jobs_flag: str | None
    cache_dir: bool
    no_cache: bool
    force_exclude: bool


def detect_cli() -> CliSupport:
    text = subprocess.run([*kllint_command(), "check", "--help"], capture_output=True, text=True).stdout
    jobs = None
    if re.search(r"(^|[\s,])-j\b", text):
        jobs = "-j"
    elif "--jobs" in text:
        jobs = "--jobs"
    return CliSupport(jobs, "--cache-dir" in text, "--no-cache" in text, "--force-exclude" in text)


def kllint_runs(tree: Path, cli: CliSupport, repeat: int, row: Row) -> None:
    """Cold -j1 (and -j2), then warm if the CLI has a cache we can control."""
    base = [*kllint_command(), "check", str(tree), "--output-format", "json"]
    jobs1 = [cli.jobs_flag, "1"] if cli.jobs_flag else []
    caches: list[Path] = []

    def fresh_cache() -> list[str]:
        if cli.cache_dir:
            caches.append(Path(tempfile.mkdtemp(prefix="kllint-bench-cache-")))
            return ["--cache-dir", str(caches[-1])]
        return ["--no-cache"] if cli.no_cache else []

    def cold(jobs: list[str]) -> Timed:
        return min((run_timed(base + jobs + fresh_cache(), cwd=tree.parent) for _ in range(repeat)),
                   key=lambda t: t.seconds)

    try:
        row.j1 = cold(jobs1)
        if cli.jobs_flag:
            row.j2 = cold([cli.jobs_flag, "2"])
        if cli.cache_dir:
            warm_flags = ["--cache-dir", str(caches[0])]  # filled by the first cold -j1 run
        elif cli.no_cache:
            warm_flags = []
            run_timed(base + jobs1, cwd=tree.parent)  # prime the default cache, untimed
            row.notes.append("warm run used the default cache location")
        else:
            return
        row.warm = min((run_timed(base + jobs1 + warm_flags, cwd=tree.parent) for _ in range(repeat)),
                       key=lambda t: t.seconds)
    finally:
        for cache in caches:
            shutil.rmtree(cache, ignore_errors=True)


# --- in-process floors --------------------------------------------------------------------------

def discovered_files(tree: Path) -> list[Path]:
    """The files kllint would check (its own discovery), else every .py file."""
    try:
        from kllint.config import Settings
        from kllint.discovery import discover

        return sorted({item.path.resolve() for item in discover([str(tree)], Settings(), cwd=tree.parent)})
    except Exception:  # noqa: BLE001 - the bench must run against any state of the package
        return python_files(tree)


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def choose_prefilter(regex: str | None) -> tuple[Callable[[str], bool], str]:
    """kllint's own prefilter if it has one (and no regex was given), else the regex."""
    if regex is None:
        try:
            from kllint.prefilter import might_matter

            return might_matter, "kllint.prefilter.might_matter"
        except ImportError:
            regex = DEFAULT_PREFILTER
    pattern = re.compile(regex)
    return (lambda text: pattern.search(text) is not None), f"/{regex}/"


def measure_floors(files: list[Path], prefilter: Callable[[str], bool], repeat: int, row: Row) -> None:
    import libcst

    for path in files:  # warm the page cache so every measurement reads from memory
        _read(path)

    def floor() -> tuple[float, int]:
        start = time.perf_counter()
        count = 0
        for path in files:
            text = _read(path)
            if text is None or not prefilter(text):
                continue
            count += 1
            try:
                libcst.parse_module(text)
            except Exception:  # noqa: BLE001
                pass
        return time.perf_counter() - start, count

    def parse_all(parse) -> tuple[float, int]:
        start = time.perf_counter()
        failures = 0
        for path in files:
            text = _read(path)
            if text is None:
                failures += 1
                continue
            try:
                parse(text)
            except Exception:  # noqa: BLE001
                failures += 1
        return time.perf_counter() - start, failures

    floors = [floor() for _ in range(repeat)]
    row.floor, row.candidates = min(f[0] for f in floors), floors[0][1]
    libcst_runs = [parse_all(libcst.parse_module) for _ in range(repeat)]
    row.libcst_all, row.parse_failures = min(r[0] for r in libcst_runs), libcst_runs[0][1]
    row.ast_all = min(parse_all(ast.parse)[0] for _ in range(repeat))
    if row.parse_failures:
        row.notes.append(f"{row.parse_failures} files do not decode or parse with libcst")


# --- one release --------------------------------------------------------------------------------

def findings_count(timed: Timed | None) -> int | None:
    if timed is None or timed.exit_code not in (0, 1):
        return None
    try:
        return len(json.loads(timed.stdout))
    except ValueError:
        return None


def bench_release(spec: str, cli: CliSupport, prefilter: Callable[[str], bool], repeat: int) -> Row:
    row = Row(spec)
    tree = release_tree(spec)
    files = discovered_files(tree)
    row.files = len(files)
    row.mb = sum(p.stat().st_size for p in files) / 1e6
    measure_floors(files, prefilter, repeat, row)
    kllint_runs(tree, cli, repeat, row)
    for label, timed in (("-j1", row.j1), ("-j2", row.j2), ("warm", row.warm)):
        if timed is not None and timed.exit_code not in (0, 1):
            last = timed.stderr.strip().splitlines()[-1:] or [""]
            row.notes.append(f"kllint {label} exited {timed.exit_code}: {last[0][:160]}")
        elif timed is not None and "internal error" in timed.stderr:
            row.notes.append(f"kllint {label} reported internal errors")
    return row


def precommit_run(cli: CliSupport, repeat: int) -> tuple[Timed, Timed | None, list[str]]:
    """5 files as the pre-commit hook passes them: cold (no cache) and, if possible, warm."""
    tree = release_tree(PRECOMMIT_RELEASE)
    trainer = tree / "trl" / "trainer"
    finding = tree / PRECOMMIT_FINDING
    others = [p for p in sorted(trainer.glob("*.py")) if p != finding and p.name != "__init__.py"][:4]
    names = [str(p.relative_to(tree)) for p in (finding, *others)]
    command = [*kllint_command(), "check", *(["--force-exclude"] if cli.force_exclude else []),
               "--output-format", "json", *names]

    def median(extra: Callable[[int], list[str]]) -> Timed:
        runs = sorted((run_timed(command + extra(i), cwd=tree) for i in range(max(repeat, 3))),
                      key=lambda t: t.seconds)
        return runs[len(runs) // 2]

    if not (cli.cache_dir or cli.no_cache):
        return median(lambda i: []), None, names
    with tempfile.TemporaryDirectory(prefix="kllint-bench-cache-") as cache:
        if cli.no_cache:
            cold = median(lambda i: ["--no-cache"])
        else:  # a new, empty cache folder for every cold run
            cold = median(lambda i: ["--cache-dir", str(Path(cache) / f"cold-{i}")])
        if not cli.cache_dir:
            return cold, None, names
        warm_dir = str(Path(cache) / "warm")
        run_timed(command + ["--cache-dir", warm_dir], cwd=tree)  # fill the cache, untimed
        warm = median(lambda i: ["--cache-dir", warm_dir])
    return cold, warm, names


# --- output -------------------------------------------------------------------------------------

def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def secs(timed: Timed | None) -> str:
    if timed is None:
        return "n/a"
    return f"{timed.seconds:.2f}" + ("" if timed.exit_code in (0, 1) else " (err)")


def ratio(timed: Timed | None, base: float) -> str:
    return "n/a" if timed is None or base <= 0 else f"{timed.seconds / base:.2f}"


def print_table(rows: list[Row]) -> None:
    header = ["release", "files", "MB", "cand.", "kllint -j1", "kllint -j2", "warm", "floor",
              "libcst all", "ast all", "kllint/floor", "kllint/parse-all", "RSS MB", "findings"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        n1, n2 = findings_count(row.j1), findings_count(row.j2)
        found = "n/a" if n1 is None else str(n1) + ("!" if row.j2 is not None and n2 != n1 else "")
        cells = [row.spec, str(row.files), f"{row.mb:.2f}", str(row.candidates), secs(row.j1), secs(row.j2),
                 secs(row.warm), fmt(row.floor), fmt(row.libcst_all), fmt(row.ast_all),
                 ratio(row.j1, row.floor), ratio(row.j1, row.libcst_all),
                 fmt(row.j1.maxrss_mb if row.j1 else None), found]
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="also trl 1.16.0, openrlhf, nemo-aligner, areal, skyrl, torchtune, deepspeed, roll")
    parser.add_argument("--releases", nargs="+", metavar="NAME==VERSION", help="exactly these releases")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement; the minimum is shown")
    parser.add_argument("--prefilter", default=None, metavar="REGEX",
                        help="regex of the floor's prefilter (default: kllint's own prefilter if it has one, "
                             f"else {DEFAULT_PREFILTER!r})")
    args = parser.parse_args(argv)

    if args.releases:
        specs = list(args.releases)
    else:
        specs = list(CORE_RELEASES) + ([s for s in ALL_RELEASES if s not in CORE_RELEASES] if args.all else [])
    repeat = max(1, args.repeat)
    prefilter, prefilter_name = choose_prefilter(args.prefilter)
    cli = detect_cli()

    from importlib.metadata import version as dist_version

    kllint_version = subprocess.run([*kllint_command(), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{kllint_version or 'kllint ?'}; python {sys.version.split()[0]}; libcst {dist_version('libcst')}; "
          f"cpus {os.cpu_count()}")
    print(f"CLI support: jobs={cli.jobs_flag or 'no'}, cache-dir={'yes' if cli.cache_dir else 'no'}, "
          f"no-cache={'yes' if cli.no_cache else 'no'}; prefilter {prefilter_name}; repeat {repeat}")
    for spec in specs:  # download everything first, so no timing includes a download
        release_tree(spec)

    startup = min(run_timed([sys.executable, "-c", "pass"], cwd=REPO).seconds for _ in range(3))
    imports = min(run_timed([*kllint_command(), "--version"], cwd=REPO).seconds for _ in range(3))
    print(f"interpreter start-up {startup:.2f} s; `kllint --version` {imports:.2f} s")
    print()

    rows = []
    for spec in specs:
        print(f"... {spec}", file=sys.stderr, flush=True)
        rows.append(bench_release(spec, cli, prefilter, repeat))
    print_table(rows)

    cold, warm, files = precommit_run(cli, repeat)
    print()
    print(f"pre-commit-sized run (5 files of {PRECOMMIT_RELEASE}, one with a finding), "
          "median, interpreter start-up included:")
    for label, timed in (("cold", cold), ("warm", warm)):
        if timed is None:
            continue
        n = findings_count(timed)
        print(f"  {label}: {timed.seconds:.2f} s, exit {timed.exit_code}, "
              f"{'n/a' if n is None else n} findings, peak RSS {timed.maxrss_mb:.2f} MB")
    print("  files: " + " ".join(files))
    notes = [(row.spec, note) for row in rows for note in row.notes]
    if notes:
        print()
        for spec, note in notes:
            print(f"note: {spec}: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
