"""Rendering gradcheck results: a rich table for people, JSON for machines."""
from __future__ import annotations

import json
import math
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from kllint.gradcheck.verdict import CORRECT, GradcheckResult

_STYLE = {CORRECT: "green"}


def _num(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.3f}"


def _extreme(value: bool | None) -> str:
    return {True: "finite", False: "NaN/inf", None: "-"}[value]


def render_table(results: Sequence[GradcheckResult], console: Console) -> None:
    """One row per problem: term, V, T, verdict, cosine and relative error vs reverse and
    forward KL, and the extreme-input (KL601) check; then one summary line per row."""
    table = Table(title="kllint gradcheck: exact expected gradients", title_justify="left")
    table.add_column("term", overflow="fold")
    table.add_column("V", justify="right")
    table.add_column("T", justify="right")
    table.add_column("usage")
    table.add_column("verdict")
    table.add_column("cos rev", justify="right")
    table.add_column("rel.err rev", justify="right")
    table.add_column("cos fwd", justify="right")
    table.add_column("rel.err fwd", justify="right")
    table.add_column("extreme input")
    for r in results:
        usage = r.usage + (" (reward-to-go)" if r.reward_to_go else "")
        if r.sampling == "off-policy":
            usage += ", off-policy"
        table.add_row(r.term, str(r.vocab), str(r.horizon), usage,
                      f"[{_STYLE.get(r.verdict, 'red')}]{r.verdict}[/]",
                      _num(r.cos_reverse), _num(r.rel_err_reverse), _num(r.cos_forward), _num(r.rel_err_forward),
                      _extreme(r.extreme_input_finite))
    console.print(table)
    for r in results:
        console.print(f"V={r.vocab}, T={r.horizon}: {r.summary}", markup=False, highlight=False)


def to_json(results: Sequence[GradcheckResult], stubbed: Sequence[str] = ()) -> dict[str, Any]:
    """`{"results": [...], "stubbed": [...], "correct": bool}` (see `GradcheckResult.to_json`)."""
    return {
        "results": [r.to_json() for r in results],
        "stubbed": list(stubbed),
        "correct": all(r.verdict == CORRECT for r in results),
    }


def render_json(results: Sequence[GradcheckResult], stubbed: Sequence[str] = ()) -> str:
    """`to_json` as indented text with a final newline (what `--output-format json` prints)."""
    return json.dumps(to_json(results, stubbed), indent=2) + "\n"
