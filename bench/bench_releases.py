#!/usr/bin/env python3
"""Benchmark `kllint check` on pinned releases of real RL libraries against parsing floors.

Usage:
    python bench/bench_releases.py                  # the nine releases of issue #6, audited as one
    python bench/bench_releases.py --per-release    # plus one row per release (twice the run time)
    python bench/bench_releases.py --core           # the four releases the tests use instead
    python bench/bench_releases.py --releases trl==0.14.0 verl==0.9.1 --repeat 3

Releases are downloaded once into the release cache (`KLLINT_RELEASE_CACHE`, default
`~/.cache/kllint/releases`) by `tests/releases.py`; nothing is written into the repository.
Each release is a whole unpacked tree (the wheel's contents, or an sdist's root). By default
these are `ALL_RELEASES` of tests/releases.py (trl 1.16.0, verl, openrlhf, nemo-aligner, areal,
skyrl, torchtune, deepspeed, roll).

The main result is the combined audit row: the release trees are copied (untimed, symlinks kept
as links) into one temporary folder, one sub-folder per release, and `kllint check .
--output-format json` runs from that folder, as on one large checkout. Per-release rows (the
same columns for each tree on its own) only come with --per-release.

Columns (seconds unless marked):
    files, MB      the .py files kllint discovers in the tree, and their size
    cand.          files the prefilter lets through (kllint's own prefilter if it has one)
    -j1, -j2       `kllint check TREE --output-format json` as a subprocess, cold (a fresh empty
                   --cache-dir each, else --no-cache), wall time including interpreter start-up;
                   -j2 only if `kllint check --help` offers -j
    warm           a -j1 re-run over the cache the first cold -j1 run filled, if the CLI offers
                   --cache-dir / --no-cache; "unchanged" in the combined table
    warm (1 changed)  combined only: the same re-run after appending `# bench: changed` to one
                   candidate file (the first, in sorted order, that kllint's prefilter accepts),
                   appended again before each repeat so every run sees exactly one changed file
    floor          in-process: read + decode every file, prefilter, libcst.parse_module of the
                   candidates only (a lower bound for any libcst-based linter)
    libcst all     in-process: read + decode + libcst.parse_module of every file
    ast all        in-process: read + decode + ast.parse of every file
    kllint -j1/floor, kllint -j2/floor   (combined) the cold runs divided by floor
    kllint/floor, kllint/parse-all       (per release) kllint -j1 divided by floor, by libcst all
    RSS MB         peak resident set size of the kllint -j1 subprocess and its workers (their
                   own rusage via a small launcher process, see run_timed)
    findings       number of JSON findings from the -j1 run (a `!` marks a -j2 count that differs)

If `semgrep` is on PATH, `semgrep scan` with one pattern rule (SEMGREP_RULE) is timed over the
same combined folder for comparison; otherwise the line says it is not installed.

The pre-commit lines run `kllint check` on 5 files of trl 0.14.0 (one with a finding), the way
the pre-commit hook does, timed including interpreter start-up (median of --repeat runs, >= 3):
cold (no cache) and, if the CLI has --cache-dir, warm (cache filled by an untimed run).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
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
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from releases import ALL_RELEASES, CORE_RELEASES, parse_spec, python_files, release_tree  # noqa: E402

# The floor's prefilter: kllint's own (`kllint.pipeline.prefilter.might_matter`) when the
# package has one, else this regex of files that can hold a KL estimate at all; --prefilter
# forces a regex.
DEFAULT_PREFILTER = r"kl|log_?probs?|logps?\b|kl_div|KLDiv"

PRECOMMIT_RELEASE = "trl==0.14.0"
PRECOMMIT_FINDING = "trl/trainer/grpo_trainer.py"

# The warm (1 changed) run of the combined audit appends this line to one candidate file.
CHANGE_LINE = "# bench: changed\n"

# The semgrep comparison: one simple pattern rule, written to a temporary YAML file.
SEMGREP_RULE = """\
rules:
  - id: bench-kl-div-call
    pattern: torch.nn.functional.kl_div(...)
    message: call of torch.nn.functional.kl_div
    languages: [python]
    severity: INFO
"""


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
    warm_changed: Timed | None = None
    changed_file: str | None = None
    floor: float = 0.0
    libcst_all: float = 0.0
    ast_all: float = 0.0
    parse_failures: int = 0
    notes: list[str] = field(default_factory=list)


# --- subprocesses -------------------------------------------------------------------------------

def kllint_command() -> list[str]:
    return [sys.executable, "-m", "kllint"]


def compile_kllint() -> None:
    """Write the bytecode of kllint's modules, as `pip install` does, so that no timed run
    compiles them from source (an editable checkout under PYTHONDONTWRITEBYTECODE=1 never
    writes it, and each start-up would pay about 0.1 s for it)."""
    import compileall

    compileall.compile_dir(str(REPO / "kllint"), quiet=1)


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


def run_timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> Timed:
    """Run `command` (with `env` added to the environment); its wall time (interpreter start-up
    included) and its own peak RSS."""
    environ = {**os.environ, **env} if env else None
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory(prefix="kllint-bench-") as scratch:
        report = Path(scratch) / "usage"
        if hasattr(os, "wait4"):
            proc = subprocess.run([sys.executable, "-I", "-S", "-c", _LAUNCHER, str(report), *command],
                                  cwd=cwd, env=environ, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            try:
                seconds_text, maxrss_text = report.read_text().split()
                elapsed, maxrss = float(seconds_text), int(maxrss_text)
            except (OSError, ValueError):
                elapsed, maxrss = float("nan"), 0
        else:  # pragma: no cover - not POSIX: wall time only
            start = time.perf_counter()
            proc = subprocess.run(command, cwd=cwd, env=environ, stdout=out, stderr=err,
                                  stdin=subprocess.DEVNULL)
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


def best_of(repeat: int, run: Callable[[], Timed]) -> Timed:
    """The fastest of `repeat` calls of `run`."""
    return min((run() for _ in range(repeat)), key=lambda t: t.seconds)


def kllint_runs(target: str, cwd: Path, cli: CliSupport, repeat: int, row: Row,
                change: Callable[[], None] | None = None) -> None:
    """`kllint check target` from `cwd`: cold -j1 (and -j2), then warm if the CLI has a cache we
    can control; with `change`, also warm after `change()` edited one file before each run."""
    base = [*kllint_command(), "check", target, "--output-format", "json"]
    jobs1 = [cli.jobs_flag, "1"] if cli.jobs_flag else []
    caches: list[Path] = []

    def fresh_cache() -> list[str]:
        if cli.cache_dir:
            caches.append(Path(tempfile.mkdtemp(prefix="kllint-bench-cache-")))
            return ["--cache-dir", str(caches[-1])]
        return ["--no-cache"] if cli.no_cache else []

    def cold(jobs: list[str]) -> Timed:
        return best_of(repeat, lambda: run_timed(base + jobs + fresh_cache(), cwd=cwd))

    try:
        row.j1 = cold(jobs1)
        if cli.jobs_flag:
            row.j2 = cold([cli.jobs_flag, "2"])
        if cli.cache_dir:
            warm_flags = ["--cache-dir", str(caches[0])]  # filled by the first cold -j1 run
        elif cli.no_cache:
            warm_flags = []
            run_timed(base + jobs1, cwd=cwd)  # prime the default cache, untimed
            row.notes.append("warm runs used the default cache location")
        else:
            return
        warm = base + jobs1 + warm_flags
        row.warm = best_of(repeat, lambda: run_timed(warm, cwd=cwd))
        if change is None:
            return

        def changed() -> Timed:
            change()
            return run_timed(warm, cwd=cwd)

        row.warm_changed = best_of(repeat, changed)
    finally:
        for cache in caches:
            shutil.rmtree(cache, ignore_errors=True)


# --- in-process floors --------------------------------------------------------------------------

def discovered_files(tree: Path, cwd: Path) -> list[Path]:
    """The files `kllint check TREE` run from `cwd` would check (its own discovery), else every
    .py file; sorted."""
    try:
        from kllint.config import Settings
        from kllint.pipeline.discovery import discover

        return sorted({item.path.resolve() for item in discover([str(tree)], Settings(), cwd=cwd)})
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
            from kllint.pipeline.prefilter import might_matter

            return might_matter, "kllint.pipeline.prefilter.might_matter"
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


# --- one release, and the combined audit -------------------------------------------------------

def findings_count(timed: Timed | None) -> int | None:
    if timed is None or timed.exit_code not in (0, 1):
        return None
    try:
        return len(json.loads(timed.stdout))
    except ValueError:
        return None


def note_failures(row: Row) -> None:
    """Add a note for each kllint run that failed or reported internal errors."""
    runs = (("-j1", row.j1), ("-j2", row.j2), ("warm", row.warm), ("warm (1 changed)", row.warm_changed))
    for label, timed in runs:
        if timed is not None and timed.exit_code not in (0, 1):
            last = timed.stderr.strip().splitlines()[-1:] or [""]
            row.notes.append(f"kllint {label} exited {timed.exit_code}: {last[0][:160]}")
        elif timed is not None and "internal error" in timed.stderr:
            row.notes.append(f"kllint {label} reported internal errors")


def measure_files(row: Row, files: list[Path], prefilter: Callable[[str], bool], repeat: int) -> None:
    """The row's file count and size, and the in-process floors over `files`."""
    row.files = len(files)
    row.mb = sum(p.stat().st_size for p in files) / 1e6
    measure_floors(files, prefilter, repeat, row)


def bench_release(spec: str, cli: CliSupport, prefilter: Callable[[str], bool], repeat: int) -> Row:
    """One per-release row: `kllint check TREE` from the tree's parent folder."""
    row = Row(spec)
    tree = release_tree(spec)
    measure_files(row, discovered_files(tree, tree.parent), prefilter, repeat)
    kllint_runs(str(tree), tree.parent, cli, repeat, row)
    note_failures(row)
    return row


@contextlib.contextmanager
def combined_folder(specs: list[str]) -> Iterator[Path]:
    """A temporary folder holding a copy of each release tree in `<name>-<version>/`."""
    with tempfile.TemporaryDirectory(prefix="kllint-bench-combined-") as scratch:
        folder = Path(scratch)
        for spec in specs:
            name, version = parse_spec(spec)
            shutil.copytree(release_tree(spec), folder / f"{name}-{version}", symlinks=True)
        yield folder


def first_candidate(files: list[Path], accepts: Callable[[str], bool]) -> Path | None:
    """The first of `files` (sorted) whose text `accepts` lets through."""
    for path in files:
        text = _read(path)
        if text is not None and accepts(text):
            return path
    return None


def append_change(path: Path) -> None:
    """Append CHANGE_LINE to `path` (after a newline if the file does not end with one)."""
    data = path.read_bytes()
    with path.open("ab") as handle:
        handle.write((b"" if not data or data.endswith(b"\n") else b"\n") + CHANGE_LINE.encode())


def bench_combined(folder: Path, cli: CliSupport, prefilter: Callable[[str], bool], repeat: int) -> Row:
    """The combined audit row: `kllint check .` run from `folder`, which holds all the releases.

    The warm (1 changed) runs append to the first file that kllint's own prefilter accepts (the
    default regex if kllint has none), so they modify `folder`.
    """
    row = Row("combined")
    files = discovered_files(folder, folder)
    measure_files(row, files, prefilter, repeat)
    changed = first_candidate(files, choose_prefilter(None)[0])
    if changed is None:
        row.notes.append("no candidate file to change: no warm (1 changed) run")
        kllint_runs(".", folder, cli, repeat, row)
    else:
        row.changed_file = changed.relative_to(folder.resolve()).as_posix()
        kllint_runs(".", folder, cli, repeat, row, change=lambda: append_change(changed))
    note_failures(row)
    return row


def semgrep_run(folder: Path, repeat: int) -> tuple[str, Timed] | None:
    """`semgrep scan` of `folder` with SEMGREP_RULE: (its version, the fastest run); None when
    semgrep is not installed."""
    semgrep = shutil.which("semgrep")
    if semgrep is None:
        return None
    env = {"SEMGREP_ENABLE_VERSION_CHECK": "0"}  # no network round trip inside the timing
    version = subprocess.run([semgrep, "--version"], capture_output=True, text=True,
                             env={**os.environ, **env}).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="kllint-bench-semgrep-") as scratch:
        rule = Path(scratch) / "rule.yaml"
        rule.write_text(SEMGREP_RULE, encoding="utf-8")
        command = [semgrep, "scan", "--config", str(rule), "--metrics=off", "--quiet", "--json", "."]
        timed = best_of(repeat, lambda: run_timed(command, cwd=folder, env=env))
    return version, timed


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


def findings_cell(row: Row) -> str:
    """The -j1 findings count, with `!` when the -j2 run found a different number."""
    n1, n2 = findings_count(row.j1), findings_count(row.j2)
    return "n/a" if n1 is None else str(n1) + ("!" if row.j2 is not None and n2 != n1 else "")


def rss_cell(row: Row) -> str:
    """Peak RSS of the -j1 run, in MB."""
    return fmt(row.j1.maxrss_mb if row.j1 else None)


def print_markdown(header: list[str], rows: list[list[str]]) -> None:
    """Print a markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    print("\n".join(lines))


def print_table(rows: list[Row]) -> None:
    """The per-release table."""
    header = ["release", "files", "MB", "cand.", "kllint -j1", "kllint -j2", "warm", "floor",
              "libcst all", "ast all", "kllint/floor", "kllint/parse-all", "RSS MB", "findings"]
    print_markdown(header, [
        [row.spec, str(row.files), f"{row.mb:.2f}", str(row.candidates), secs(row.j1), secs(row.j2),
         secs(row.warm), fmt(row.floor), fmt(row.libcst_all), fmt(row.ast_all),
         ratio(row.j1, row.floor), ratio(row.j1, row.libcst_all), rss_cell(row), findings_cell(row)]
        for row in rows])


def print_combined(row: Row, specs: list[str]) -> None:
    """The combined audit table (one row) and the file its warm (1 changed) run edited."""
    releases = f"{len(specs)} release{'' if len(specs) == 1 else 's'}"
    print(f"combined audit: `kllint check .` over one folder holding {releases} ({', '.join(specs)}):")
    print()
    header = ["files", "MB", "cand.", "kllint -j1", "kllint -j2", "warm (unchanged)", "warm (1 changed)",
              "floor", "libcst all", "ast all", "kllint -j1/floor", "kllint -j2/floor", "RSS MB", "findings"]
    print_markdown(header, [[
        str(row.files), f"{row.mb:.2f}", str(row.candidates), secs(row.j1), secs(row.j2), secs(row.warm),
        secs(row.warm_changed), fmt(row.floor), fmt(row.libcst_all), fmt(row.ast_all),
        ratio(row.j1, row.floor), ratio(row.j2, row.floor), rss_cell(row), findings_cell(row)]])
    if row.changed_file:
        print()
        print(f"warm (1 changed): {CHANGE_LINE.strip()!r} appended to {row.changed_file} before each run")


def print_semgrep(result: tuple[str, Timed] | None) -> None:
    """The semgrep comparison line: time, exit code, matches, peak RSS; or "not installed"."""
    if result is None:
        print("semgrep: not installed (n/a)")
        return
    version, timed = result
    try:
        matches = str(len(json.loads(timed.stdout)["results"]))
    except (ValueError, KeyError, TypeError):
        matches = "n/a"
    print(f"semgrep {version or '?'} (one pattern rule, same folder): {secs(timed)} s, exit {timed.exit_code}, "
          f"{matches} matches, peak RSS {timed.maxrss_mb:.2f} MB")


def print_precommit(cold: Timed, warm: Timed | None, files: list[str]) -> None:
    """The pre-commit-sized run's lines."""
    print(f"pre-commit-sized run (5 files of {PRECOMMIT_RELEASE}, one with a finding), "
          "median, interpreter start-up included:")
    for label, timed in (("cold", cold), ("warm", warm)):
        if timed is None:
            continue
        n = findings_count(timed)
        print(f"  {label}: {timed.seconds:.2f} s, exit {timed.exit_code}, "
              f"{'n/a' if n is None else n} findings, peak RSS {timed.maxrss_mb:.2f} MB")
    print("  files: " + " ".join(files))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; --releases and --core choose other releases than ALL_RELEASES."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--releases", nargs="+", metavar="NAME==VERSION",
                        help="exactly these releases (default: the nine of ALL_RELEASES in tests/releases.py)")
    chosen.add_argument("--core", action="store_true",
                        help="the four releases the tests use: " + ", ".join(CORE_RELEASES))
    parser.add_argument("--per-release", action="store_true",
                        help="also one row per release (about doubles the run time)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement; the minimum is shown")
    parser.add_argument("--prefilter", default=None, metavar="REGEX",
                        help="regex of the floor's prefilter (default: kllint's own prefilter if it has one, "
                             f"else {DEFAULT_PREFILTER!r})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    specs = list(args.releases or (CORE_RELEASES if args.core else ALL_RELEASES))
    repeat = max(1, args.repeat)
    prefilter, prefilter_name = choose_prefilter(args.prefilter)
    cli = detect_cli()
    compile_kllint()

    from importlib.metadata import version as dist_version

    kllint_version = subprocess.run([*kllint_command(), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{kllint_version or 'kllint ?'}; python {sys.version.split()[0]}; libcst {dist_version('libcst')}; "
          f"cpus {os.cpu_count()}")
    print(f"CLI support: jobs={cli.jobs_flag or 'no'}, cache-dir={'yes' if cli.cache_dir else 'no'}, "
          f"no-cache={'yes' if cli.no_cache else 'no'}; prefilter {prefilter_name}; repeat {repeat}")
    for spec in [*specs, PRECOMMIT_RELEASE]:  # download everything first, so no timing includes a download
        release_tree(spec)

    startup = min(run_timed([sys.executable, "-c", "pass"], cwd=REPO).seconds for _ in range(3))
    imports = min(run_timed([*kllint_command(), "--version"], cwd=REPO).seconds for _ in range(3))
    print(f"interpreter start-up {startup:.2f} s; `kllint --version` {imports:.2f} s")
    print()

    print(f"... combined ({', '.join(specs)})", file=sys.stderr, flush=True)
    with combined_folder(specs) as folder:
        combined = bench_combined(folder, cli, prefilter, repeat)
        semgrep = semgrep_run(folder, repeat)
    print_combined(combined, specs)
    print()
    print_semgrep(semgrep)

    rows: list[Row] = []
    if args.per_release:
        for spec in specs:
            print(f"... {spec}", file=sys.stderr, flush=True)
            rows.append(bench_release(spec, cli, prefilter, repeat))
        print()
        print_table(rows)

    print()
    print_precommit(*precommit_run(cli, repeat))
    notes = [(row.spec, note) for row in [combined, *rows] for note in row.notes]
    if notes:
        print()
        for spec, note in notes:
            print(f"note: {spec}: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
