"""What is known of a term's sign, from the assumptions of its symbols (`real`, `positive`).

A term's sign knowledge is the set of signs it may take (-1, 0, 1) when it is known to be real,
or None when it is not known to be real (an unknown function, a clamp, a power of a value that
may be negative). The queries answer True, False or None (unknown), as the assumptions of a
computer algebra system do: `(x*y).is_positive` is True for positive symbols, None for real ones.
"""
from __future__ import annotations

import math

from kllint.analysis.terms.core import Num, Symbol, Term, bind
from kllint.analysis.terms.evaluate import constant_value

ALL = frozenset((-1, 0, 1))
POSITIVE = frozenset((1,))
NEGATIVE = frozenset((-1,))
NONNEGATIVE = frozenset((0, 1))
ZERO_ONLY = frozenset((0,))
_KNOWN: dict[Term, frozenset | None] = {}


def signs(term: Term) -> frozenset | None:
    """The signs `term` may take, or None when it is not known to be real (memoised)."""
    found = _KNOWN.get(term, _MISSING)
    if found is _MISSING:
        if len(_KNOWN) > 50_000:
            _KNOWN.clear()
        found = _KNOWN[term] = _signs(term)
    return found


_MISSING = object()


def _of_number(value: float) -> frozenset | None:
    """An infinite or undefined number is not a real number: it has no sign."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return POSITIVE if value > 0 else NEGATIVE if value < 0 else ZERO_ONLY


def _signs(term: Term) -> frozenset | None:
    if isinstance(term, Num):
        return _of_number(term.value)
    if isinstance(term, Symbol):
        return POSITIVE if term.positive else ALL if term.real else None
    if term.is_number:
        value = constant_value(term)
        return _of_number(value) if value is not None else None
    if term.is_Add:
        parts = [signs(a) for a in term.args]
        if any(p is None for p in parts):
            return None
        if all(p <= NONNEGATIVE for p in parts):
            return POSITIVE if any(p == POSITIVE for p in parts) else NONNEGATIVE
        if all(p <= frozenset((-1, 0)) for p in parts):
            return NEGATIVE if any(p == NEGATIVE for p in parts) else frozenset((-1, 0))
        return ALL
    if term.is_Mul:
        result = POSITIVE
        for factor in term.args:
            part = signs(factor)
            if part is None:
                return None
            result = frozenset(a * b for a in result for b in part)
        return result
    if term.is_Pow:
        return _power(*term.args)
    if term.is_exp:
        return POSITIVE if signs(term.args[0]) is not None else None
    if term.is_Abs:
        inner = signs(term.args[0])
        return POSITIVE if inner is not None and 0 not in inner else NONNEGATIVE
    if term.is_log:
        return ALL if signs(term.args[0]) == POSITIVE else None
    if term.is_sign:
        return signs(term.args[0])
    return None


def _power(base: Term, exponent: Term) -> frozenset | None:
    b, e = signs(base), signs(exponent)
    if b is None or e is None:
        return None
    if b == POSITIVE:
        return POSITIVE
    if exponent.is_Number and isinstance(exponent.value, int):
        if exponent.value % 2 == 0:
            return POSITIVE if 0 not in b else NONNEGATIVE
        return b
    if b <= NONNEGATIVE:
        return NONNEGATIVE
    return None


def is_positive(term: Term) -> bool | None:
    known = signs(term)
    if known is None:
        return None
    return known == POSITIVE if known == POSITIVE or 1 not in known else None


def is_negative(term: Term) -> bool | None:
    known = signs(term)
    if known is None:
        return None
    return True if known == NEGATIVE else False if -1 not in known else None


def is_zero(term: Term) -> bool | None:
    known = signs(term)
    if known is None:
        return None
    return True if known == ZERO_ONLY else False if 0 not in known else None


def is_nonnegative(term: Term) -> bool | None:
    known = signs(term)
    if known is None:
        return None
    return True if known <= NONNEGATIVE else False if known == NEGATIVE else None


def is_real(term: Term) -> bool | None:
    return True if signs(term) is not None else None


bind(positive=is_positive, negative=is_negative, zero=is_zero, nonnegative=is_nonnegative, real=is_real)
