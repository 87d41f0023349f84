"""The Python operators the analysis applies to constants and terms, bounded: a constant the
code computes (`10 ** 10 ** 8`, `"a" * 10 ** 10`) that would take Python minutes or gigabytes
is refused (OverflowError, the value is then unknown). Python computes such a power in one C
call that holds the interpreter lock: neither Ctrl+C nor the time budget could stop it."""
from __future__ import annotations

import operator

MAX_LITERAL_BITS = 4096  # a constant the code computes beyond this is unknown (`10 ** 10 ** 8`)
MAX_LITERAL_LENGTH = 1_000_000  # likewise a repeated string (`"a" * 10 ** 10`)


def _bounded(size: int) -> None:
    if size > MAX_LITERAL_BITS:
        raise OverflowError("a constant too large to compute")


def _power(a, b):
    """`a ** b`, refusing (OverflowError) an integer power too large to compute."""
    if isinstance(a, int) and isinstance(b, int) and b > 0 and a not in (0, 1, -1):
        _bounded(a.bit_length() * b)
    return operator.pow(a, b)


def _product(a, b):
    """`a * b`, refusing (OverflowError) a product of integers or a repeated string too large."""
    if isinstance(a, int) and isinstance(b, int):
        _bounded(a.bit_length() + b.bit_length())
    elif isinstance(a, (str, bytes)) and isinstance(b, int) or isinstance(b, (str, bytes)) and isinstance(a, int):
        text, count = (a, b) if isinstance(a, (str, bytes)) else (b, a)
        if len(text) * count > MAX_LITERAL_LENGTH:
            raise OverflowError("a string too long to compute")
    return operator.mul(a, b)


OPERATORS = {"+": operator.add, "-": operator.sub, "*": _product, "/": operator.truediv, "**": _power}
