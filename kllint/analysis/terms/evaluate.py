"""Numeric values of terms: a term compiled once into a plain-float evaluator over a point (a
mapping of symbols to floats), memoised per term.

A value is None where the term is not a real, finite number: an unknown function, a clamp or
an unevaluated derivative (never a number, whatever the point), a logarithm of a negative
number, a negative number to a fractional power, an overflow, a symbol the point does not give.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

from kllint.analysis.terms.core import Num, Symbol, Term, bind
from kllint.analysis.terms.numbers import as_float

Point = Mapping[Term, float]
Evaluator = Callable[[Point], "float | None"]
_COMPILED: dict[Term, Evaluator] = {}


def value_at(term: Term, point: Point) -> float | None:
    """`term` at `point` as a real float, or None (see the module docstring)."""
    compiled = _COMPILED.get(term)
    if compiled is None:
        if len(_COMPILED) > 50_000:
            _COMPILED.clear()
        compiled = _COMPILED[term] = _compile(term)
    try:
        value = compiled(point)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None
    if value is None or isinstance(value, complex) or not math.isfinite(value):
        return None
    return value


def constant_value(term: Term) -> float | None:
    """The value of a term without symbols, or None."""
    return value_at(term, {})


def _never(point: Point) -> None:
    return None


def _compile(term: Term) -> Evaluator:
    if isinstance(term, Symbol):
        return lambda point, s=term: point[s]
    if isinstance(term, Num):
        value = as_float(term.value)
        return lambda point: value
    if term.is_Function:
        function = getattr(type(term), "numeric", None)
        if function is None:
            return _never
    elif not (term.is_Add or term.is_Mul or term.is_Pow):
        return _never  # an unevaluated derivative
    parts = [_compile(arg) for arg in term.args]
    if any(p is _never for p in parts):
        return _never  # a function of a value that is never a number is never one
    if term.is_Add:
        return lambda point: math.fsum(p(point) for p in parts)
    if term.is_Mul:
        def product(point: Point) -> float:
            result = 1.0
            for p in parts:
                result *= p(point)
            return result
        return product
    if term.is_Pow:
        base, exponent = parts
        return lambda point: _power(base(point), exponent(point))
    inner = parts[0]
    return lambda point: function(inner(point))


def _power(base: float, exponent: float) -> float | None:
    if base < 0 and not float(exponent).is_integer():
        return None
    return base ** exponent


bind(value=constant_value)
