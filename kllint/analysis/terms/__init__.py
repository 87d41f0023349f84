"""The term algebra of the analysis: values as small immutable trees over symbols for the
log-probs, with canonical sums, products and powers, exact derivatives, numeric evaluation and
sign assumptions (see `core` and `arith`). It replaces a computer algebra system on the
analysis' hot path: building a term costs microseconds and importing this package a few
milliseconds.
"""
from kllint.analysis.terms import printing as _printing  # noqa: F401  (binds the text of a term)
from kllint.analysis.terms import signs as _signs  # noqa: F401  (binds the assumption queries)
from kllint.analysis.terms.arith import Add, Mul, Pow
from kllint.analysis.terms.calculus import default_sort_key, diff, expand, preorder_traversal
from kllint.analysis.terms.core import HALF, MINUS_ONE, ONE, ZERO, Dummy, Num, Symbol, Term, as_term
from kllint.analysis.terms.evaluate import constant_value, value_at
from kllint.analysis.terms.functions import (
    E, Abs, Applied, Defined, Derivative, Function, Subs, Undefined, could_extract_minus_sign, exp, log, sign, sqrt,
)

__all__ = [
    "Abs", "Add", "Applied", "Defined", "Derivative", "Dummy", "E", "Function", "HALF", "MINUS_ONE", "Mul", "Num", "ONE",
    "Pow", "Subs", "Symbol", "Term", "Undefined", "ZERO", "as_term", "constant_value", "could_extract_minus_sign",
    "default_sort_key", "diff", "exp", "expand", "log", "preorder_traversal", "sign", "sqrt", "value_at",
]
