"""Run `python -m kllint ARGS...` and keep a copy of what it printed.

tests/test_dev_set.py gives this script to the development set's scorer as its kllint command,
so that the findings of the scorer's one run are also snapshotted (tests/snapshot.py) without
running the corpus twice. The scorer calls it as

    devset_tee.py OUTDIR check ROOT --output-format json

and it writes `OUTDIR/<name of ROOT>.json` = `{"root", "exit", "stdout", "stderr_tail"}`; kllint's
stdout, stderr and exit code pass through unchanged.
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
    done = subprocess.run([sys.executable, "-m", "kllint", *arguments], capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    root = checked_root(arguments)
    outdir.mkdir(parents=True, exist_ok=True)
    record = {"root": root, "exit": done.returncode, "stdout": done.stdout, "stderr_tail": done.stderr[-2000:]}
    (outdir / f"{Path(root).name}.json").write_text(json.dumps(record), encoding="utf-8")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
