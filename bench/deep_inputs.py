"""The adversarial inputs of issue 35 (items 3 and 6): files that nest deeply, or whose analysis
used to be slow, each naming a KL and the reference so that the prefilter lets it through.

`SHAPES` maps a name to a `Shape`: the file name, a description, its text and what kllint must
make of it, `expect`: "KL900 <words>" (reported as not checked, the message holding the words),
or "analysed" (analysed to the end: no KL900, no internal error). Used by tests/test_deep_inputs.py
(every shape reports its own note while another file keeps its finding, in every mode) and by
bench/bench_pathological.py (the time of each).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

HEAD = "import torch\n\n\ndef loss_fn(logp, ref_logp, flags):\n    kl = ref_logp - logp\n"
LOSS = "    loss = kl.mean()\n    loss.backward()\n"


@dataclass(frozen=True)
class Shape:
    """One input: `make()` gives its text."""

    file: str
    label: str
    make: Callable[[], str]
    expect: str


def _in_loss(expression: str) -> Callable[[], str]:
    """A loss function that multiplies its KL by `expression`: analysed, so libcst positions it."""
    def make() -> str:
        return ("import torch\n\n\ndef loss_fn(logp, ref_logp):\n    kl = ref_logp - logp\n"
                f"    x = {expression}\n    loss = (kl * x).mean()\n    loss.backward()\n")
    return make


def _elif() -> str:
    return (HEAD + "    if flags == 0:\n        kl = kl * 0\n"
            + "".join(f"    elif flags == {i}:\n        kl = kl * {i}\n" for i in range(1, 500)) + LOSS)


def _doubling() -> str:  # the coefficient 2 ** 1100 overflowed a float (OverflowError)
    return HEAD + "    kl = kl + kl\n" * 1100 + LOSS


def _notebook() -> str:  # 2 KB: the `json` module recursed
    cells = json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": ["kl = ref_logp - logp\n"]}],
                        "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    return cells[:-1] + ', "x": ' + "[" * 1000 + "]" * 1000 + "}"


def _loops() -> str:  # 1,246 bytes: each loop ran its body twice, 2^18 times in all
    text = HEAD
    for depth in range(18):
        text += "    " * (depth + 1) + f"for item{depth} in flags:\n"
    return text + "    " * 19 + "kl = kl + (ref_logp - logp)\n" + LOSS


def _branches() -> str:  # 100 if/else reassignments of a KL value
    return HEAD + "".join(f"    if flags[{i}]:\n        kl = torch.exp(kl) - kl - 1\n    else:\n"
                          "        kl = kl * ref_logp\n" for i in range(100)) + LOSS


def _calls(depth: int) -> Callable[[], str]:
    def make() -> str:
        return ("import torch\n\n\ndef loss_fn(logp, ref_logp):\n    kl = " + "torch.log(" * depth + "ref_logp - logp"
                + ")" * depth + "\n" + LOSS)
    return make


def _chained_logs() -> str:  # a value 150 levels deep, built one statement at a time
    return HEAD + "    kl = torch.log(kl)\n" * 150 + LOSS


def _huge_power() -> str:  # Python computes 10 ** 10 ** 8 in one C call that holds the lock: minutes
    return HEAD + "    kl = kl * (10 ** 10 ** 8)\n    kl = kl * ('a' * 10 ** 10)\n" + LOSS


SHAPES: dict[str, Shape] = {
    # main: each of these ended the whole run (exit 2, "internal error: RecursionError"): libcst's
    # position pass ran out of stack and the error path printed the node it held, recursively
    "unary500": Shape("unary_kl.py", "500 unary minus signs (626 bytes)", _in_loss("-" * 500 + "1"),
                      "KL900 nesting deeper than"),
    "plus1000": Shape("plus_kl.py", "a 1,000-term `+` chain", _in_loss(" + ".join(["kl"] * 1000)),
                      "KL900 nesting deeper than"),
    "elif500": Shape("elif_kl.py", "a 500-branch `elif` chain", _elif, "KL900 nesting deeper than"),
    "and1000": Shape("and_kl.py", "a 1,000-operand `and`", _in_loss(" and ".join(["kl"] * 1000)),
                     "KL900 nesting deeper than"),
    "exp1000": Shape("exp_kl.py", "1,000 chained `.exp()`", _in_loss("kl" + ".exp()" * 1000),
                     "KL900 nesting deeper than"),
    "strings600": Shape("strings_kl.py", "600 implicitly concatenated strings", _in_loss(" ".join(['"kl"'] * 600)),
                        "KL900 nesting deeper than"),
    "calls180": Shape("calls_kl.py", "180 nested calls", _calls(180), "KL900 nesting deeper than"),
    "notebook1000": Shape("deep_kl.ipynb", "a 2 KB notebook of 1,000 nested JSON arrays", _notebook,
                          "KL900 JSON nested deeper than"),
    "doubling1100": Shape("doubling_kl.py", "`kl = kl + kl` 1,100 times", _doubling, "analysed"),
    "loops18": Shape("loops_kl.py", "18 nested `for` loops (1,246 bytes)", _loops, "analysed"),
    "branches100": Shape("branches_kl.py", "100 sequential if/else reassignments of a KL value", _branches,
                         "analysed"),
    "calls140": Shape("calls140_kl.py", "140 nested calls", _calls(140), "analysed"),
    "logs150": Shape("logs_kl.py", "150 chained `kl = torch.log(kl)`", _chained_logs, "analysed"),
    "power": Shape("power_kl.py", "`10 ** 10 ** 8` and `'a' * 10 ** 10` in the code", _huge_power, "analysed"),
}
