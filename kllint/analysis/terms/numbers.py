"""Plain numbers of the term algebra: Python `int`, `fractions.Fraction` (exact) and `float`.

A float that is zero becomes the integer 0 (an exact zero absorbs a product and vanishes from a
sum), and a fraction with denominator 1 becomes an int; otherwise a float stays a float (a
coefficient `1.0` is kept, so that a value computed with floats is told from an exact one).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Union

Number = Union[int, Fraction, float]


def normal(value: Number) -> Number:
    """`value` in its canonical type (see the module docstring)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else value
    if isinstance(value, float) and value == 0.0:
        return 0
    return value


def exact(value: Number) -> bool:
    """An int or a Fraction (not a float)."""
    return not isinstance(value, float)


def is_integer(value: Number) -> bool:
    return isinstance(value, int)


MAX_EXACT_BITS = 4096  # an exact power beyond this many bits stays symbolic (`10 ** 10 ** 8`)


def _bits(value: Number) -> int:
    """Bits of an int, or of the larger part of a Fraction."""
    if isinstance(value, Fraction):
        return max(value.numerator.bit_length(), value.denominator.bit_length())
    return int(value).bit_length()


def power(base: Number, exponent: Number) -> Number | None:
    """`base ** exponent` as a plain number, or None when it is not one in closed form (an
    irrational root such as `2 ** (1/2)`, a negative base to a fractional power, a zero base
    to a negative power) or an exact one too large to compute (over `MAX_EXACT_BITS` bits)."""
    if base == 0 and exponent < 0:
        return None
    if isinstance(exponent, int):
        if exact(base):
            if base not in (0, 1, -1) and abs(exponent) * _bits(base) > MAX_EXACT_BITS:
                return None
            return normal(Fraction(base) ** exponent)
        try:
            return normal(float(base) ** exponent)
        except OverflowError:
            return None
    if base < 0:
        return None
    if exact(base) and exact(exponent):
        if _bits(base) * max(abs(exponent.numerator), 1) > MAX_EXACT_BITS or exponent.denominator > MAX_EXACT_BITS:
            return None
        # an exact root only when it is one: 4 ** (1/2) = 2, 2 ** (1/2) stays symbolic
        fraction = Fraction(base)
        q = exponent.denominator
        numerator = _integer_root(fraction.numerator, q)
        denominator = _integer_root(fraction.denominator, q)
        if numerator is None or denominator is None:
            return None
        return normal(Fraction(numerator, denominator) ** exponent.numerator)
    try:
        return normal(float(base) ** float(exponent))
    except (OverflowError, ZeroDivisionError):
        return None


def _integer_root(value: int, degree: int) -> int | None:
    root = round(value ** (1.0 / degree))
    for candidate in (root - 1, root, root + 1):
        if candidate >= 0 and candidate ** degree == value:
            return candidate
    return None


def as_float(value: Number) -> float:
    """`float(value)`, infinite for an exact number beyond the floats (`2 ** 1100`)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def finite(value: Number) -> bool:
    return not isinstance(value, float) or math.isfinite(value)
