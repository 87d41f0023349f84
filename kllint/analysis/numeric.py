"""Numeric identity testing of terms over the role symbols, at a few sample points with
plain-float evaluators (`kllint.analysis.terms.value_at`): robust to every spelling (expm1,
log(ratio), x * x, ...), and fast."""
from __future__ import annotations

import random

from kllint.analysis import terms as tm
from kllint.analysis.symbolic import LP, LPD, OLD, REF, ROLE_SYMBOLS

POINTS: list[dict[tm.Symbol, float]] = []
_rng = random.Random(20250609)
for _ in range(5):
    _lp = -_rng.uniform(0.2, 2.5)
    POINTS.append({LP: _lp, LPD: _lp, OLD: _lp - _rng.uniform(-0.4, 0.4), REF: -_rng.uniform(0.2, 2.5)})


def evaluate(expr: tm.Term, point: dict[tm.Symbol, float]) -> float | None:
    """`expr` at `point` as a real float; None if it is not real and finite there or has other symbols."""
    return tm.value_at(expr, point)


def proportional(expr: tm.Term, template: tm.Term, points: list[dict[tm.Symbol, float]] | None = None
                 ) -> float | None:
    """The constant `a` with `expr == a * template` on the sample points, or None."""
    ratio: float | None = None
    for point in points or POINTS:
        t = evaluate(template, point)
        e = evaluate(expr, point)
        if t is None or e is None:
            return None
        if abs(t) < 1e-9:
            if abs(e) > 1e-7:
                return None
            continue
        r = e / t
        if ratio is None:
            ratio = r
        elif abs(r - ratio) > 1e-7 * max(1.0, abs(ratio)):
            return None
    if ratio is None or abs(ratio) < 1e-12:
        return None
    return ratio


def affine(expr: tm.Term, template: tm.Term) -> float | None:
    """The slope `a` with `expr == a * template + b` (a != 0, b constant) on the sample points.

    A constant offset in a gradient coefficient vanishes in expectation (E[grad logp] = 0).
    """
    values = [(evaluate(template, p), evaluate(expr, p)) for p in POINTS]
    if any(t is None or e is None for t, e in values):
        return None
    (t0, e0), rest = values[0], values[1:]
    slope: float | None = None
    for t, e in rest:
        if abs(t - t0) < 1e-9:  # type: ignore[operator]
            return None
        s = (e - e0) / (t - t0)  # type: ignore[operator]
        if slope is None:
            slope = s
        elif abs(s - slope) > 1e-7 * max(1.0, abs(slope)):
            return None
    if slope is None or abs(slope) < 1e-12:
        return None
    return slope


def is_zero(expr: tm.Term) -> bool:
    """Zero, literally or numerically at every sample point."""
    if expr == 0:
        return True
    values = [evaluate(expr, p) for p in POINTS]
    return all(v is not None and abs(v) < 1e-9 for v in values)


def is_constant(expr: tm.Term) -> bool:
    """Free of the role symbols and numerically constant."""
    if expr.free_symbols & ROLE_SYMBOLS:
        values = [evaluate(expr, p) for p in POINTS]
        return all(v is not None for v in values) and max(values) - min(values) < 1e-9  # type: ignore[type-var]
    return not expr.free_symbols
