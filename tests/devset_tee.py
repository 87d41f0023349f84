"""Run `python -m kllint ARGS...` and keep a copy of what it printed.

tests/test_dev_set.py gives this script to the development set's scorer as its kllint command,
so that the findings of the scorer's one run are also snapshotted (tests/snapshot.py) without
running the corpus twice. The scorer calls it as

    devset_tee.py OUTDIR check ROOT --output-format json

and it writes `OUTDIR/<name of ROOT>.json` = `{"root", "exit", "stdout", "stderr_tail", "sites"}`;
kllint's stdout, stderr and exit code pass through unchanged. A JSON run is made with
`--show-sites`: the findings pass through as the plain array, and `sites` keeps the summary of
the KL estimates seen (how many roles a name decided, how many dataflow), which
tests/test_dev_set.py prints (`sites_line`).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def checked_root(arguments: list[str]) -> str:
    """The path after `check` in kllint's arguments (the tree the scorer checks)."""
    index = arguments.index("check")
    return arguments[index + 1]


def main(argv: list[str]) -> int:
    """Run kllint with `argv[1:]`, record its output in the folder `argv[0]`; its exit code."""
    outdir, arguments = Path(argv[0]), argv[1:]
    listing = "check" in arguments and "json" in arguments and "--show-sites" not in arguments
    done = subprocess.run([sys.executable, "-m", "kllint", *arguments, *(["--show-sites"] if listing else [])],
                          capture_output=True, text=True)
    stdout, sites = done.stdout, None
    if listing:
        try:
            document = json.loads(done.stdout)
            stdout, sites = json.dumps(document["findings"], indent=2) + "\n", document["summary"]
        except (ValueError, KeyError, TypeError):
            pass  # not the object form (a usage error): passed through as printed
    sys.stdout.write(stdout)
    sys.stderr.write(done.stderr)
    root = checked_root(arguments)
    outdir.mkdir(parents=True, exist_ok=True)
    record = {"root": root, "exit": done.returncode, "stdout": stdout, "stderr_tail": done.stderr[-2000:],
              "sites": sites}
    (outdir / f"{Path(root).name}.json").write_text(json.dumps(record), encoding="utf-8")
    return done.returncode


def sites_line(outdir: Path) -> str:
    """The KL estimates seen over the runs recorded in `outdir`, and how their roles were decided."""
    totals = {"sites": 0, "roles_by_dataflow": 0, "roles_by_name": 0, "roles_without_evidence": 0}
    for path in sorted(outdir.glob("*.json")):
        summary = json.loads(path.read_text(encoding="utf-8")).get("sites") or {}
        for key in totals:
            totals[key] += summary.get(key, 0)
    return (f"KL estimates seen: {totals['sites']}; roles decided by dataflow: {totals['roles_by_dataflow']}, "
            f"by a name: {totals['roles_by_name']}, without evidence: {totals['roles_without_evidence']}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
