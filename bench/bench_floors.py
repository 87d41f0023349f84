#!/usr/bin/env python3
"""The least time each engine target can take on this machine, whatever the analysis does.

Usage:
    python bench/bench_floors.py               # every floor once (start-up: the fastest of 7)
    python bench/bench_floors.py --repeat 3    # the fastest of three runs per parse measurement

A floor counts only work that no implementation of the issue can skip:
    start-up       a fresh interpreter importing what every `kllint check` imports (the CLI:
                   click, rich, pathspec, the run and its cache), then also libcst, which a run
                   that analyses a file needs (the analysis is a libcst pass: the engine issue,
                   item 4); the fastest of 7 runs, launched the way the bench launches kllint
    parsing        on one core: `ast` of each candidate file (the text prefilter of
                   `kllint.pipeline.prefilter` lets it through; the entry points are chosen
                   from its outline) and libcst of the definitions whose own code names a KL or
                   the reference (`names_matter` of `kllint.analysis.outline.identifiers`): the
                   entry points, which any libcst analysis must parse. Callers, callees and
                   every other file are left out, and so is the syntax check (KL900) of the
                   files the prefilter rejects.
With two cores the parsing is halved (perfect sharing, no worker start-up), so the floor of a
`-j 2` target is start-up plus half its parsing. Each row prints the limit of bench_targets.py
next to the floor; a floor above its limit means no implementation can meet that limit here.
kllint's bytecode is written first, as `pip install` writes it.
"""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_releases import (  # noqa: E402
    ALL_RELEASES, compile_kllint, PRECOMMIT_FINDING, PRECOMMIT_RELEASE, combined_folder, discovered_files, first_candidate,
    release_tree,
)
from bench_targets import VERL, VERL_FILE  # noqa: E402

CLI_IMPORTS = "import kllint.cli, kllint.session, kllint.pipeline.run"
START_RUNS = 7


def startup(code: str) -> float:
    """The fastest of START_RUNS fresh interpreters running `code` (seconds, wall)."""
    runs = []
    for _ in range(START_RUNS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        runs.append(time.perf_counter() - start)
    return min(runs)


def kl_definitions(text: str, tree: ast.Module) -> list[str]:
    """The source of each top-level function and method whose own code names a KL or the
    reference, dedented so that libcst parses it alone."""
    from kllint.analysis.outline import FUNCTION_DEFS, identifiers
    from kllint.pipeline.prefilter import names_matter

    definitions = [node for node in tree.body if isinstance(node, FUNCTION_DEFS)]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            definitions += [item for item in node.body if isinstance(item, FUNCTION_DEFS)]
    lines = text.splitlines(keepends=True)
    sources = []
    for node in definitions:
        if names_matter(identifiers(node)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            sources.append(textwrap.dedent("".join(lines[first - 1:node.end_lineno])))
    return sources


def parsing(files: list[Path], repeat: int) -> tuple[float, int, int]:
    """(seconds on one core, candidates, definitions) of the parsing floor over `files`: only
    the parses are timed, not the reading, the prefilter or the choice of the definitions."""
    import libcst

    from kllint.pipeline.prefilter import might_matter

    candidates: list[str] = []
    definitions: list[str] = []
    for path in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if might_matter(text):
            candidates.append(text)
            try:
                definitions += kl_definitions(text, ast.parse(text))
            except (SyntaxError, ValueError):
                continue
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in candidates:
            try:
                ast.parse(text)
            except (SyntaxError, ValueError):
                pass
        for source in definitions:
            try:
                libcst.parse_module(source)
            except Exception:  # noqa: BLE001 - a definition libcst rejects costs its attempt
                pass
        best = min(best, time.perf_counter() - start)
    return best, len(candidates), len(definitions)


def analysed(path: Path) -> bool:
    """Whether a run analyses `path` (so must import libcst): its code names a KL or the reference."""
    from kllint.pipeline.prefilter import code_might_matter, might_matter, parse_or_error

    text = path.read_text(encoding="utf-8")
    outline, error = parse_or_error(text)
    return error is None and might_matter(text) and code_might_matter(outline)


def measure(repeat: int) -> list[tuple[str, float, float, str]]:
    """(target, limit, floor, how the floor is made) for each target of bench_targets.py."""
    cli = startup(CLI_IMPORTS)
    cli_cst = startup(CLI_IMPORTS + ", libcst")
    rows = [("start-up: the CLI (click, rich, pathspec)", float("nan"), cli, "fastest of 7"),
            ("start-up: the CLI and libcst", float("nan"), cli_cst, "fastest of 7")]
    with combined_folder(list(ALL_RELEASES)) as folder:
        files = discovered_files(folder, folder)
        seconds, candidates, definitions = parsing(files, repeat)
        rows.append(("nine releases, cold, -j 2", 8.0, cli_cst + seconds / 2,
                     f"start-up + {seconds:.2f} s / 2 ({candidates} candidates, {definitions} KL definitions)"))
        from kllint.pipeline.prefilter import might_matter

        changed = first_candidate(files, might_matter)  # the file bench_targets.py changes
        if changed is not None and analysed(changed):
            rows.append(("warm re-run, one file changed", 0.5, cli_cst,
                         f"start-up with libcst: the changed file ({changed.relative_to(folder)}) is analysed"))
        elif changed is not None:
            rows.append(("warm re-run, one file changed", 0.5, cli,
                         f"start-up: the changed file ({changed.relative_to(folder)}) is not analysed"))
    verl = release_tree(VERL)
    seconds, _, definitions = parsing([verl / VERL_FILE], repeat)
    rows.append((f"{VERL} {VERL_FILE}, cold", 1.5, cli_cst + seconds, f"start-up + {seconds:.2f} s ({definitions} KL definitions)"))
    seconds, candidates, definitions = parsing(discovered_files(verl, verl.parent), repeat)
    rows.append((f"{VERL} package, cold, -j 2", 5.0, cli_cst + seconds / 2,
                 f"start-up + {seconds:.2f} s / 2 ({candidates} candidates, {definitions} KL definitions)"))
    tree = release_tree(PRECOMMIT_RELEASE)
    finding = tree / PRECOMMIT_FINDING
    others = [p for p in sorted((tree / "trl" / "trainer").glob("*.py")) if p != finding and p.name != "__init__.py"][:4]
    seconds, _, definitions = parsing([finding, *others], repeat)
    rows.append(("pre-commit, 5 files, cold", 0.8, cli_cst + seconds, f"start-up + {seconds:.2f} s ({definitions} KL definitions)"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per parse measurement; the fastest is shown")
    args = parser.parse_args(argv)
    compile_kllint()
    print(f"python {sys.version.split()[0]}; cpus {os.cpu_count()}")
    print()
    print("| target | limit | floor | floor / limit | floor made of |")
    print("|---|---|---|---|---|")
    for name, limit, floor, how in measure(max(1, args.repeat)):
        shown = "-" if limit != limit else f"{limit:g} s"
        share = "-" if limit != limit else f"{floor / limit:.2f}"
        print(f"| {name} | {shown} | {floor:.2f} s | {share} | {how} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
