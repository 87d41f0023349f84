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


def _usage(r: GradcheckResult) -> str:
    usage = r.usage + (" (reward-to-go)" if r.reward_to_go else "")
    return usage + (", off-policy" if r.sampling == "off-policy" else "")


def _wide_table(results: Sequence[GradcheckResult]) -> Table:
    table = Table(title="kllint gradcheck: exact expected gradients", title_justify="left")
    table.add_column("term", overflow="fold")
    table.add_column("V", justify="right", no_wrap=True)
    table.add_column("T", justify="right", no_wrap=True)
    table.add_column("usage")
    table.add_column("verdict", overflow="fold")
    for header in ("cos rev", "rel.err rev", "cos fwd", "rel.err fwd"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("extreme input", no_wrap=True)
    for r in results:
        table.add_row(r.term, str(r.vocab), str(r.horizon), _usage(r),
                      f"[{_STYLE.get(r.verdict, 'red')}]{r.verdict}[/]",
                      _num(r.cos_reverse), _num(r.rel_err_reverse), _num(r.cos_forward), _num(r.rel_err_forward),
                      _extreme(r.extreme_input_finite))
    return table


def _narrow_table(results: Sequence[GradcheckResult]) -> Table:
    """One block of `field  value` rows per result: nothing is cut on a narrow terminal."""
    table = Table(title="kllint gradcheck: exact expected gradients", title_justify="left",
                  show_header=False)
    table.add_column("field", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    for r in results:
        table.add_row("term", r.term)
        table.add_row("problem", f"V={r.vocab}, T={r.horizon}, {_usage(r)}")
        table.add_row("verdict", f"[{_STYLE.get(r.verdict, 'red')}]{r.verdict}[/]")
        table.add_row("reverse KL", f"cos {_num(r.cos_reverse)}, rel.err {_num(r.rel_err_reverse)}")
        table.add_row("forward KL", f"cos {_num(r.cos_forward)}, rel.err {_num(r.rel_err_forward)}")
        table.add_row("extreme input", _extreme(r.extreme_input_finite), end_section=True)
    return table


def render_table(results: Sequence[GradcheckResult], console: Console) -> None:
    """One row per problem: term, V, T, verdict, cosine and relative error vs reverse and
    forward KL, and the extreme-input (KL601) check; then one summary line per row. When the
    console is too narrow for the row layout (an 80-column terminal), each result becomes a
    block of `field  value` lines instead, so that no verdict or number is ever truncated."""
    from rich.measure import Measurement

    table = _wide_table(results)
    unbounded = console.options.update(width=10_000, max_width=10_000)
    if Measurement.get(console, unbounded, table).maximum > console.width:
        table = _narrow_table(results)
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
