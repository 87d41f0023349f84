"""Numeric identity testing of sympy expressions over the role symbols, at a few sample points
with plain-float evaluators: robust to every spelling (expm1, log(ratio), x * x, ...), and fast."""
from __future__ import annotations

import math
import random

import sympy as sp
from sympy.core.function import AppliedUndef

from kllint.analysis.symbolic import LP, LPD, OLD, REF, ROLE_SYMBOLS, Clamp

POINTS: list[dict[sp.Symbol, float]] = []
_rng = random.Random(20250609)
for _ in range(5):
    _lp = -_rng.uniform(0.2, 2.5)
    POINTS.append({LP: _lp, LPD: _lp, OLD: _lp - _rng.uniform(-0.4, 0.4), REF: -_rng.uniform(0.2, 2.5)})


def evaluate(expr: sp.Expr, point: dict[sp.Symbol, float]) -> float | None:
    """`expr` at `point` as a real float; None if it is not real and finite there or has other symbols."""
    compiled = _COMPILED.get(expr, _MISSING)
    if compiled is _MISSING:
        compiled = _COMPILED[expr] = _compile(expr)
    try:
        value = compiled(point) if compiled is not None else _evaluate_slowly(expr, point)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError):
        return None
    if value is None or isinstance(value, complex) or not math.isfinite(value):
        return None
    return value


def _evaluate_slowly(expr: sp.Expr, point: dict[sp.Symbol, float]) -> float | None:
    value = complex(expr.evalf(subs=point))
    return value.real if abs(value.imag) <= 1e-9 else None


_MISSING = object()
_NEVER_NUMERIC = (AppliedUndef, sp.Derivative, sp.Subs, Clamp)
_COMPILED: dict[sp.Expr, object] = {}
_UNARY = {sp.exp: math.exp, sp.log: math.log, sp.Abs: abs, sp.tanh: math.tanh, sp.sign: lambda x: float((x > 0) - (x < 0))}


def _compile(expr: sp.Expr):
    """A plain-float evaluator of `expr` (closures over `math`), or None for anything else
    (unknown functions such as `Clamp` never evaluate to a number, as with `evalf`)."""
    if expr.is_Symbol:
        return lambda point, s=expr: point[s]
    if expr.is_Number:
        if not expr.is_real or not expr.is_finite:
            return lambda point: None
        value = float(expr)
        return lambda point: value
    if isinstance(expr, _NEVER_NUMERIC):
        return _never
    parts = [_compile(arg) for arg in expr.args]
    if any(p is _never for p in parts):
        return _never  # a function of a value that is never a number is never one (as with evalf)
    if any(p is None for p in parts):
        return None
    if expr.is_Add:
        return lambda point: math.fsum(p(point) for p in parts)
    if expr.is_Mul:
        def product(point):
            result = 1.0
            for p in parts:
                result *= p(point)
            return result
        return product
    if expr.is_Pow:
        base, exponent = parts
        return lambda point: _power(base(point), exponent(point))
    function = _UNARY.get(type(expr))
    if function is not None and len(parts) == 1:
        inner = parts[0]
        return lambda point: function(inner(point))
    if isinstance(expr, (sp.Max, sp.Min)):
        pick = max if isinstance(expr, sp.Max) else min
        return lambda point: pick(p(point) for p in parts)
    return None


def _never(point: dict) -> None:
    return None


def _power(base: float, exponent: float) -> float | None:
    if base < 0 and not float(exponent).is_integer():
        return None
    return base ** exponent


def proportional(expr: sp.Expr, template: sp.Expr, points: list[dict[sp.Symbol, float]] | None = None
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


def affine(expr: sp.Expr, template: sp.Expr) -> float | None:
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


def is_zero(expr: sp.Expr) -> bool:
    """Zero, literally or numerically at every sample point."""
    if expr == 0:
        return True
    values = [evaluate(expr, p) for p in POINTS]
    return all(v is not None and abs(v) < 1e-9 for v in values)


def is_constant(expr: sp.Expr) -> bool:
    """Free of the role symbols and numerically constant."""
    if expr.free_symbols & ROLE_SYMBOLS:
        values = [evaluate(expr, p) for p in POINTS]
        return all(v is not None for v in values) and max(values) - min(values) < 1e-9  # type: ignore[type-var]
    return not expr.free_symbols
