#!/usr/bin/env python3
"""Probe `kllint check` with special and hostile files, under a time and a memory limit.

Usage:
    python bench/probe_special_files.py              # a markdown table on stdout
    python bench/probe_special_files.py --json       # the rows as JSON (tests/test_probe.py)
    python bench/probe_special_files.py --only fifo,segfault --timeout 60 --memory-mb 3072
    python bench/probe_special_files.py --only tree,deep_unary500,deep_loops18   # issue 35 (bench/deep_inputs.py)

Each input is put in a fresh project folder next to `good.py`, a file with known findings
(KL102 and KL201), and `python -m kllint check --no-cache --output-format json .` runs there in
a child process with an address-space limit (`--memory-mb`, RLIMIT_AS) and a wall-clock limit
(`--timeout`). A last row puts every input in one folder with ten more copies of `good.py` and
runs with `-j 2`, so the worker pool sees them too. For each run the table shows the exit code,
the wall time, the peak RSS of the kllint process tree (RUSAGE_CHILDREN of a wrapper process),
whether `good.py`'s findings are intact, and what the input was reported as.

An input passes when the run ended by itself within the limit with exit 1 (findings remain: at
least good.py's), printed no traceback or internal error, and good.py's findings are intact.
POSIX only (FIFOs, devices, rlimits).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from deep_inputs import SHAPES  # noqa: E402
GOOD = ("import torch\n\n\ndef loss_fn(logp, ref_logp):\n"
        "    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n"
        "    loss = kl.mean()\n    loss.backward()\n")
GOOD_CODES = {"KL102", "KL201"}


def _fifo(folder: Path) -> str:
    os.mkfifo(folder / "x.py")
    return "x.py"


def _device_link(folder: Path) -> str:
    (folder / "zero.py").symlink_to("/dev/zero")
    return "zero.py"


def _symlink_loop(folder: Path) -> str:
    (folder / "loop1.py").symlink_to("loop2.py")
    (folder / "loop2.py").symlink_to("loop1.py")
    return "loop1.py"


def _huge_sparse(folder: Path) -> str:
    with open(folder / "huge.py", "wb") as handle:
        handle.truncate(3 * 1024 ** 3)
    return "huge.py"


def _deep_nesting(folder: Path) -> str:
    (folder / "deep.py").write_text("kl = " + "lambda: " * 2900 + "a\n")
    return "deep.py"


def _deep_blocks(folder: Path) -> str:
    text = "import torch\n\ndef f(logp, ref_logp, a):\n    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n"
    text += "".join("    " * (i + 1) + "if a:\n" for i in range(90)) + "    " * 91 + "kl.mean().backward()\n"
    (folder / "ifs.py").write_text(text)
    return "ifs.py"


def _segfault(folder: Path) -> str:
    (folder / "or_kl.py").write_text("kl = " + " or ".join(["a"] * 10000) + "\n")
    return "or_kl.py"


def _time_bomb(folder: Path) -> str:
    (folder / "k3chain.py").write_text("import torch\n\n\ndef loss_fn(logp, ref_logp):\n    kl = ref_logp - logp\n"
                                       + "    kl = torch.exp(kl) - kl - 1\n" * 20
                                       + "    loss = kl.mean()\n    loss.backward()\n")
    return "k3chain.py"


def _tree(folder: Path) -> str:
    """A KL file at the bottom of a tree 1,000 folders deep (os.walk of Python 3.11 recursed)."""
    home = os.getcwd()
    os.chdir(folder)
    try:
        os.mkdir("tree")
        os.chdir("tree")
        for _ in range(1000):
            os.mkdir("d")
            os.chdir("d")
        Path("bottom.py").write_text(GOOD.replace("loss_fn", "deep_loss"))
    finally:
        os.chdir(home)
    return "tree"


def _remove_trees(base: Path) -> None:
    """Remove the trees `_tree` made, bottom-up (shutil.rmtree of Python 3.11 recurses)."""
    for tree in base.glob("*/tree"):
        os.chdir(tree)
        levels = 0
        while os.path.isdir("d"):
            os.chdir("d")
            levels += 1
        for name in os.listdir("."):
            os.unlink(name)
        for _ in range(levels):
            os.chdir("..")
            os.rmdir("d")
    os.chdir(ROOT)


def _shape(name: str) -> Callable[[Path], str]:
    def write(folder: Path) -> str:
        shape = SHAPES[name]
        (folder / shape.file).write_text(shape.make())
        return shape.file
    return write


def _non_utf8_name(folder: Path) -> str:
    name = os.fsdecode(b"caf\xe9.py")
    (folder / name).write_text(GOOD.replace("loss_fn", "other_loss"))
    return name


INPUTS: dict[str, tuple[str, Callable[[Path], str]]] = {
    "fifo": ("FIFO named x.py", _fifo),
    "device": ("x.py symlink to /dev/zero", _device_link),
    "loop": ("symbolic link loop", _symlink_loop),
    "huge": ("3 GB sparse file", _huge_sparse),
    "deep": ("2,900 nested lambdas", _deep_nesting),
    "ifs": ("90 nested ifs", _deep_blocks),
    "segfault": ("10,000 chained `or` (libcst segfault)", _segfault),
    "k3chain": ("20 chained k3 reassignments (a time bomb before the size bound)", _time_bomb),
    "name": ("file name not valid UTF-8", _non_utf8_name),
    "tree": ("a KL file 1,000 folders deep", _tree),
    **{f"deep_{name}": (shape.label, _shape(name)) for name, shape in SHAPES.items()},  # issue 35
}

_WRAPPER = ("import json, resource, subprocess, sys, time\n"
            "limit = int(sys.argv[1]); timeout = float(sys.argv[2])\n"
            "def limits():\n"
            "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
            "start = time.monotonic()\n"
            "try:\n"
            "    done = subprocess.run(sys.argv[3:], capture_output=True, timeout=timeout, preexec_fn=limits)\n"
            "    code, out, err = done.returncode, done.stdout, done.stderr\n"
            "except subprocess.TimeoutExpired as exc:\n"
            "    code, out, err = 'timeout', exc.stdout or b'', exc.stderr or b''\n"
            "seconds = time.monotonic() - start\n"
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
            "print(json.dumps({'code': code, 'seconds': seconds, 'peak_kb': peak,\n"
            "                  'stdout': out.decode('utf-8', 'replace'), 'stderr': err.decode('utf-8', 'replace')}))\n")


def _measure(folder: Path, args: list[str], timeout: float, memory_mb: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-c", _WRAPPER, str(memory_mb * 1024 * 1024), str(timeout),
               sys.executable, "-m", "kllint", "check", "--output-format", "json", *args]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=env, timeout=timeout + 60)
    return json.loads(done.stdout)


def _row(label: str, files: list[str], run: dict, good: list[str]) -> dict:
    try:
        found = json.loads(run["stdout"])
    except ValueError:
        found = None
    intact = found is not None and all(
        GOOD_CODES <= {d["code"] for d in found if d["path"] == name} for name in good)
    sys.path.insert(0, str(ROOT))
    from kllint.report.paths import escape_path

    shown = {escape_path(name) for name in files}
    reported = "; ".join(sorted({f"{d['code']} {d['message'][:60]}" if d["code"] == "KL900" else d["code"]
                                 for d in found or [] if d["path"] in shown})) or "nothing"
    clean_stderr = "Traceback" not in run["stderr"] and "internal error" not in run["stderr"]
    ok = run["code"] == 1 and intact and clean_stderr
    return {"input": label, "exit": run["code"], "seconds": round(run["seconds"], 1),
            "peak_mb": round(run["peak_kb"] / 1024), "good_intact": intact, "traceback": not clean_stderr,
            "reported": reported, "ok": ok}


def probe(only: list[str] | None = None, timeout: float = 120, memory_mb: int = 3072) -> list[dict]:
    """Run every selected input (and the combined -j 2 run); returns one row per run."""
    rows = []
    chosen = [key for key in INPUTS if only is None or key in only]
    with tempfile.TemporaryDirectory(prefix="kllint-probe-") as base:
        try:
            rows.extend(_probe(Path(base), chosen, timeout, memory_mb))
        finally:
            _remove_trees(Path(base))
    return rows


def _probe(base: Path, chosen: list[str], timeout: float, memory_mb: int) -> list[dict]:
    """The runs of `probe`, in folders under `base`."""
    rows = []
    for key in chosen:
        label, make = INPUTS[key]
        folder = base / key
        folder.mkdir()
        (folder / "pyproject.toml").write_text("[project]\nname = 'probe'\n")
        (folder / "good.py").write_text(GOOD)
        name = make(folder)
        rows.append(_row(label, [name], _measure(folder, ["--no-cache", "-j", "1", "."], timeout, memory_mb),
                         ["good.py"]))
    folder = base / "all"
    folder.mkdir()
    (folder / "pyproject.toml").write_text("[project]\nname = 'probe'\n")
    good = []
    for index in range(10):
        (folder / f"good{index}.py").write_text(GOOD.replace("loss_fn", f"loss_{index}"))
        good.append(f"good{index}.py")
    names = [INPUTS[key][1](folder) for key in chosen]
    cache = folder / "cache"
    cache_run = _measure(folder, ["--cache-dir", str(cache), "-j", "2", "."], timeout * 2, memory_mb)
    rows.append(_row(f"all of them, -j 2 ({len(names) + 10} files)", names, cache_run, good))
    entries = sorted(cache.rglob("*.json"))
    if entries:  # the cache's own special files: a FIFO entry and one linked to /dev/zero
        entries[0].unlink()
        os.mkfifo(entries[0])
        if len(entries) > 1:
            entries[1].unlink()
            entries[1].symlink_to("/dev/zero")
        warm = _measure(folder, ["--cache-dir", str(cache), "-j", "2", "."], timeout * 2, memory_mb)
        row = _row("warm, cache entries FIFO and /dev/zero link", names, warm, good)
        row["ok"] = row["ok"] and warm["stdout"] == cache_run["stdout"]
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    lines = ["| input | exit | time (s) | peak RSS (MB) | good.py intact | traceback | reported as | ok |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['input']} | {row['exit']} | {row['seconds']} | {row['peak_mb']} | "
                     f"{'yes' if row['good_intact'] else 'NO'} | {'YES' if row['traceback'] else 'no'} | "
                     f"{row['reported'].replace('|', '/')} | {'yes' if row['ok'] else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    """Command line: print the table (or JSON); exit 1 if any input failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--only", default=None, help=f"comma-separated inputs: {','.join(INPUTS)}")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per run (default 120)")
    parser.add_argument("--memory-mb", type=int, default=3072, help="address-space limit (default 3072)")
    options = parser.parse_args()
    rows = probe(options.only.split(",") if options.only else None, options.timeout, options.memory_mb)
    print(json.dumps(rows, indent=2) if options.json else table(rows))
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
