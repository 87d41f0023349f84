#!/usr/bin/env python3
"""Time kllint on small files whose analysis used to explode (issue 14, item 4).

Usage:
    python bench/bench_pathological.py            # a markdown table on stdout
    python bench/bench_pathological.py --json
    python bench/bench_pathological.py --only k3chain20,k3chain40

Each input is written to a temporary folder and checked in this process with
`kllint.api.check_paths` and the default settings (a 60 s CPU time budget per file). The table
shows the CPU seconds of the check (all threads of this process), how the file was handled
(`analysed`, or `stopped by the time budget`), the number of functions abandoned, the number
of findings, and whether the CPU time is within the target (`TARGET_SECONDS`). The first input
is a warm-up (imports of libcst and sympy) and is not shown. Exit status 1 if an input missed
the target or was not analysed to the end.

`--checkout PATH` times the kllint of another checkout (e.g. one from before the change).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0  # a sixth of the default time budget
HEAD = "import torch\n\n\ndef loss_fn(logp, ref_logp, beta):\n    kl = ref_logp - logp\n"
LOSS = "    loss = kl.mean()\n    loss.backward()\n"
GOOD = ("\n\ndef loss_fn(logp, ref_logp):\n    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n" + LOSS)


def _k3_chain(length: int) -> str:
    return HEAD + "    kl = torch.exp(kl) - kl - 1\n" * length + LOSS


def _k3_then_chain(length: int) -> str:
    return (HEAD + "    kl = torch.exp(kl) - kl - 1\n    loss = beta * kl.mean()\n    chain = kl\n"
            + "    chain = torch.exp(chain) - chain - 1\n" * length + "    loss = loss + chain.mean()\n    loss.backward()\n")


def _nested(line: str, length: int) -> str:
    return HEAD + line * length + LOSS


def _findings(count: int) -> str:
    return "import torch\n" + "".join(GOOD.replace("loss_fn", f"loss_{i}") for i in range(count // 2))


def _nested_ifs(depth: int) -> str:
    text = "import torch\n\ndef f(logp, ref_logp, a):\n    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1\n"
    return text + "".join("    " * (i + 1) + "if a:\n" for i in range(depth)) + "    " * (depth + 1) + "kl.mean().backward()\n"


INPUTS = {
    **{f"k3chain{n}": (f"{n} chained `kl = torch.exp(kl) - kl - 1`", _k3_chain(n)) for n in (5, 10, 20, 40)},
    "k3then40": ("a k3 in the loss, then 40 chained k3 of it", _k3_then_chain(40)),
    "means20": ("20 chained `kl = kl.mean() + kl`", _nested("    kl = kl.mean() + kl\n", 20)),
    "means40": ("40 chained `kl = kl.mean() + kl`", _nested("    kl = kl.mean() + kl\n", 40)),
    "meanmul20": ("20 chained `kl = kl * kl.mean() + kl`", _nested("    kl = kl * kl.mean() + kl\n", 20)),
    "mulchain40": ("40 chained `kl = torch.exp(kl) * kl + kl`", _nested("    kl = torch.exp(kl) * kl + kl\n", 40)),
    "findings1000": ("1,000 findings in one file (500 loss functions)", _findings(1000)),
    "ifs90": ("90 nested `if`s", _nested_ifs(90)),
}


def measure(keys: list[str], checkout: Path = ROOT) -> list[dict]:
    """Check each input in a fresh folder with the kllint of `checkout`; one row per input."""
    sys.path.insert(0, str(checkout))
    from kllint.api import check_paths
    from kllint.config import Settings

    rows = []
    with tempfile.TemporaryDirectory(prefix="kllint-bench-") as base:
        warm = Path(base) / "warm.py"
        warm.write_text(_k3_chain(1))
        check_paths([str(warm)], Settings())
        for key in keys:
            label, text = INPUTS[key]
            path = Path(base) / f"{key}.py"
            path.write_text(text)
            started = time.process_time()
            result = check_paths([str(path)], Settings())
            seconds = time.process_time() - started
            status = result.file_status.get(str(path), "?")
            rows.append({"input": label, "bytes": len(text.encode()), "cpu_seconds": round(seconds, 2),
                         "status": status, "abandoned": len(result.abandoned),
                         "findings": len(result.diagnostics),
                         "ok": seconds <= TARGET_SECONDS and status == "analysed" and not result.abandoned})
    return rows


def table(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    lines = [f"| input | bytes | CPU s | handled | abandoned | findings | within {TARGET_SECONDS:g} s |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['input']} | {row['bytes']} | {row['cpu_seconds']:.2f} | {row['status']} | "
                     f"{row['abandoned']} | {row['findings']} | {'yes' if row['ok'] else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    """Command line: print the table (or JSON); exit 1 if an input missed the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--only", help="comma-separated input keys: " + ", ".join(INPUTS))
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the kllint checkout to time (default: this one)")
    options = parser.parse_args()
    keys = [k for k in INPUTS if not options.only or k in options.only.split(",")]
    rows = measure(keys, options.checkout.resolve())
    print(json.dumps(rows, indent=2) if options.json else table(rows))
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
