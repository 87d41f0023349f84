"""The computer algebra system the term algebra (`kllint.analysis.terms`) replaced, as a test
oracle: `to_sympy` rebuilds a term in sympy (which then applies its own simplifications), so that
the tests can compare canonical forms, values and sign assumptions with sympy's. sympy is a
test dependency only (the `dev` extra); kllint never imports it.
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

from kllint.analysis import terms as tm

_FUNCTIONS = {"exp": sp.exp, "log": sp.log, "Abs": sp.Abs, "sign": sp.sign}
_DEFINED: dict[str, type] = {}


def to_sympy(term: tm.Term) -> sp.Expr:
    """`term` as a sympy expression (evaluated: sympy's canonical form of the same value)."""
    if isinstance(term, tm.Num):
        value = term.value
        if isinstance(value, float):
            return sp.Number(value)  # an infinite float is sympy's oo
        return sp.Rational(value.numerator, value.denominator) if isinstance(value, Fraction) else sp.Integer(value)
    if isinstance(term, tm.Dummy):
        return sp.Dummy(term.name, real=term.real or None, positive=term.positive or None)
    if isinstance(term, tm.Symbol):
        assumptions = {"positive": True} if term.positive else {"real": True} if term.real else {}
        return sp.Symbol(term.name, **assumptions)
    args = [to_sympy(a) for a in term.args]
    if term.is_Add:
        return sp.Add(*args)
    if term.is_Mul:
        return sp.Mul(*args)
    if term.is_Pow:
        return sp.Pow(*args)
    name = type(term).name
    if name in _FUNCTIONS:
        return _FUNCTIONS[name](*args)
    if isinstance(term, tm.Undefined):
        return sp.Function(name)(*args)
    if name not in _DEFINED:  # a function the analysis defines (Clamp): a sympy function without rules
        _DEFINED[name] = type(name, (sp.Function,), {})
    return _DEFINED[name](*args)
