"""Terms as text, for messages of the developers' tools and failing tests (never in findings)."""
from __future__ import annotations

from fractions import Fraction

from kllint.analysis.terms.core import Num, Symbol, Term, bind


def text(term: Term) -> str:
    """`term` in the usual notation: `exp(ref - logp) + logp - ref - 1`."""
    if isinstance(term, Num):
        value = term.value
        return f"{value.numerator}/{value.denominator}" if isinstance(value, Fraction) else repr(value)
    if isinstance(term, Symbol):
        return term.name
    if term.is_Add:
        out = ""
        for index, part in enumerate(term.args):
            piece = text(part)
            if index and piece.startswith("-"):
                out += " - " + piece[1:]
            elif index:
                out += " + " + piece
            else:
                out = piece
        return out
    if term.is_Mul:
        parts = list(term.args)
        sign = ""
        if parts[0].is_Number and parts[0].value == -1:
            sign, parts = "-", parts[1:]
        return sign + "*".join(_wrapped(p, mul=True) for p in parts)
    if term.is_Pow:
        return f"{_wrapped(term.args[0], mul=True, power=True)}**{_wrapped(term.args[1], mul=True, power=True)}"
    name = getattr(type(term), "name", type(term).__name__)
    return f"{name}({', '.join(text(a) for a in term.args)})"


def _wrapped(term: Term, mul: bool = False, power: bool = False) -> str:
    inner = text(term)
    if term.is_Add or (power and (term.is_Mul or term.is_Pow or (term.is_Number and not isinstance(term.value, int)))):
        return f"({inner})"
    if term.is_Number and term.value < 0 and mul:
        return f"({inner})"
    return inner


bind(text=text)
