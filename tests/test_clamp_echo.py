"""One finding per root cause: an estimate that reaches a sink clamped on one path and unclamped
on another is reported once, where it is formed, with the clamp as a trace step
(`RuleContext.report` with `root` / `clamped`); a finding that also has a path whose root cause
is not named keeps its place."""
from __future__ import annotations

from dataclasses import dataclass

from kllint.diagnostics import Span
from kllint.rules.base import RuleContext
from kllint.rules.trace import Step
from kllint.analysis.values import Anchor

PATH = "train.py"


@dataclass
class _Module:
    """A module stand-in: the display path and the line of each node (its id)."""

    display: str = PATH

    def span(self, node, root=None) -> Span:
        return Span(node, 1, node, 10)


def _anchor(line: int) -> Anchor:
    return Anchor(PATH, line, line, _Module(), (), "loss", None)


def _context() -> RuleContext:
    return RuleContext(entry=_Module(), algebra=None)


def _lines(ctx: RuleContext) -> list[tuple[str, int]]:
    return [(d.code, d.span.line) for d in ctx.diagnostics()]


def test_a_clamped_echo_is_merged_into_the_unclamped_finding():
    ctx = _context()
    formed, clamp = _anchor(3), _anchor(5)
    ctx.report("KL101", formed, "k1 loss", root=("estimate", "sink"))
    ctx.report("KL101", clamp, "k1 loss", root=("estimate", "sink"), clamped=Step(clamp, "also used clamped"))
    diagnostics = ctx.diagnostics()
    assert [(d.code, d.span.line) for d in diagnostics] == [("KL101", 3)]
    assert [(s.line, s.note) for s in diagnostics[0].trace] == [(5, "also used clamped")]


def test_a_clamp_of_an_estimate_reported_nowhere_else_is_kept():
    ctx = _context()
    clamp = _anchor(5)
    ctx.report("KL101", clamp, "k1 loss", root=("estimate", "sink"), clamped=Step(clamp, "also used clamped"))
    assert _lines(ctx) == [("KL101", 5)]


def test_another_sink_or_code_is_another_root_cause():
    ctx = _context()
    formed, clamp = _anchor(3), _anchor(5)
    ctx.report("KL101", formed, "k1 loss", root=("estimate", "sink"))
    ctx.report("KL101", clamp, "k1 loss", root=("estimate", "other sink"), clamped=Step(clamp, "clamped"))
    ctx.report("KL201", clamp, "per-token", root=("estimate", "sink"), clamped=Step(clamp, "clamped"))
    assert _lines(ctx) == [("KL101", 3), ("KL101", 5), ("KL201", 5)]


def test_a_finding_with_a_path_of_no_named_root_stays():
    ctx = _context()
    formed, clamp = _anchor(3), _anchor(5)
    ctx.report("KL101", formed, "k1 loss", root=("estimate", "sink"))
    ctx.report("KL101", clamp, "k1 loss", root=("estimate", "sink"), clamped=Step(clamp, "clamped"))
    ctx.report("KL101", clamp, "k1 loss")  # the same place reached by a path that names no root cause
    assert _lines(ctx) == [("KL101", 3), ("KL101", 5)]
