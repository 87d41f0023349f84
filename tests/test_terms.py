"""The term algebra (`kllint.analysis.terms`) against the computer algebra system it replaced
(sympy, as the oracle of tests/sympy_oracle.py): the same spelling built in both gives the same
canonical form, value, free symbols, derivative and expansion; sign assumptions never contradict
sympy's. The analysis itself never imports sympy.
"""
from __future__ import annotations

import math
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import sympy as sp

from kllint.analysis import terms as tm
from sympy_oracle import to_sympy

ROOT = Path(__file__).resolve().parents[1]


def _symbols(m):
    return (m.Symbol("logp", real=True), m.Symbol("ref", real=True), m.Symbol("old", real=True),
            m.Symbol("a__1", positive=True), m.Symbol("b__2", positive=True))


TM, SP = _symbols(tm), _symbols(sp)
POINT = dict(zip(TM, (-1.3, -0.7, -1.1, 0.8, 2.3)))
SP_POINT = dict(zip(SP, POINT.values()))

# (what it shows, the spelling over (module, logp, ref, old, a, b)): built in both algebras
SPELLINGS = [
    ("like terms collect", lambda m, x, r, o, a, b: 2 * x - x + r - r),
    ("a rational factor distributes over a sum", lambda m, x, r, o, a, b: 2 * (x - r)),
    ("a float factor distributes over a sum", lambda m, x, r, o, a, b: (x - r) * 0.5),
    ("a factor times a sum stays a product", lambda m, x, r, o, a, b: a * 2 * (x - r)),
    ("a distributed sum stays one factor", lambda m, x, r, o, a, b: 2 * (x + 1) * a),
    ("negation distributes", lambda m, x, r, o, a, b: -(x - r)),
    ("powers of one base add", lambda m, x, r, o, a, b: x * x / x * a ** 2 / a),
    ("exp of opposite exponents cancels", lambda m, x, r, o, a, b: m.exp(x - r) * 2 * m.exp(r - x)),
    ("exp of different exponents stays two factors", lambda m, x, r, o, a, b: m.exp(x) * m.exp(-o)),
    ("a power of exp is exp of a product", lambda m, x, r, o, a, b: m.exp(r - x) ** 2),
    ("the inverse of exp", lambda m, x, r, o, a, b: 1 / m.exp(x - o)),
    ("log of exp of a real value", lambda m, x, r, o, a, b: m.log(m.exp(x - r))),
    ("exp of log", lambda m, x, r, o, a, b: m.exp(m.log(a))),
    ("exp pulls out a log term", lambda m, x, r, o, a, b: m.exp(x + m.log(a))),
    ("exp of a number times a log", lambda m, x, r, o, a, b: m.exp(2 * m.log(a))),
    ("k3 from the ratio", lambda m, x, r, o, a, b: m.exp(r - x) - 1 - m.log(m.exp(r - x))),
    ("k2", lambda m, x, r, o, a, b: (x - r) ** 2 / 2),
    ("abs of a negation", lambda m, x, r, o, a, b: m.Abs(-(x - r))),
    ("abs of a positive symbol", lambda m, x, r, o, a, b: m.Abs(a * x)),
    ("abs of a square", lambda m, x, r, o, a, b: m.Abs((x - r) ** 2)),
    ("square root of a square", lambda m, x, r, o, a, b: ((x - r) ** 2) ** Fraction(1, 2) if m is tm
     else ((x - r) ** 2) ** sp.Rational(1, 2)),
    ("a fractional power splits off positive factors", lambda m, x, r, o, a, b: (a * b * x) ** 0.5),
    ("an integer power of a product", lambda m, x, r, o, a, b: (2 * a * x) ** 2),
    ("numbers", lambda m, x, r, o, a, b: x * 0.5 * 2 + 0.5 + 0.5 - 1),
    ("a float zero vanishes", lambda m, x, r, o, a, b: x + 1.0 - 1),
    ("exp of a float", lambda m, x, r, o, a, b: m.exp(x + 0.5)),
    ("log of a unit fraction", lambda m, x, r, o, a, b: m.log(x / x / 2)),
]


@pytest.mark.parametrize("spelling", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_spellings_have_sympys_canonical_form(spelling) -> None:
    _, build = spelling
    mine, theirs = build(tm, *TM), build(sp, *SP)
    assert to_sympy(mine) == theirs, (mine, theirs)


def _random_pair(rng: random.Random, depth: int):
    """The same random expression in both algebras (the values the analysis builds: sums,
    products, quotients, powers, exp, log, abs, square roots of log-probs and positive values)."""
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.75:
            index = rng.randrange(len(TM))
            return TM[index], SP[index]
        value = rng.choice([1, 2, 3, -1, Fraction(1, 2), 0.5, 0.1, 2.5])
        theirs = sp.Rational(value.numerator, value.denominator) if isinstance(value, Fraction) else sp.Number(value)
        return tm.Num(value), theirs
    a = _random_pair(rng, depth - 1)
    op = rng.choice(["+", "-", "*", "/", "neg", "exp", "log", "abs", "square", "sqrt", "float-root"])
    if op in ("+", "-", "*", "/"):
        b = _random_pair(rng, depth - 1)
        apply = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x / y}[op]
        try:
            return apply(a[0], b[0]), apply(a[1], b[1])
        except ZeroDivisionError:  # the algebra refuses a division by zero that sympy calls zoo
            return a
    one = {"neg": (lambda t: -t, lambda s: -s), "exp": (tm.exp, sp.exp), "log": (tm.log, sp.log),
           "abs": (tm.Abs, sp.Abs), "square": (lambda t: t ** 2, lambda s: s ** 2), "sqrt": (tm.sqrt, sp.sqrt),
           "float-root": (lambda t: t ** 0.5, lambda s: s ** sp.Float(0.5))}[op]
    return one[0](a[0]), one[1](a[1])


def _pairs(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        mine, theirs = _random_pair(rng, rng.randint(1, 4))
        if not theirs.has(sp.zoo, sp.nan, sp.oo, sp.I):
            yield mine, theirs


def _sympy_value(expr: sp.Expr, point: dict) -> float | None:
    try:
        value = complex(expr.evalf(subs=point))
    except (TypeError, ValueError):
        return None
    return value.real if abs(value.imag) < 1e-9 and math.isfinite(value.real) else None


def test_random_values_free_symbols_and_forms_agree_with_sympy() -> None:
    pairs = list(_pairs(20251203, 2500))
    forms_differ = 0
    for mine, theirs in pairs:
        assert {s.name for s in mine.free_symbols} == {s.name for s in theirs.free_symbols}, (mine, theirs)
        value = tm.value_at(mine, POINT)
        if value is not None:  # None where a log or root of a negative value is met on the way
            expected = _sympy_value(theirs, SP_POINT)
            assert expected is not None and abs(value - expected) <= 1e-7 * max(1.0, abs(expected)), (mine, theirs)
        forms_differ += to_sympy(mine) != theirs
    # the forms differ only where sympy's own result is not its canonical form again (nested Abs)
    assert len(pairs) > 2000 and forms_differ <= len(pairs) // 100, forms_differ


def test_random_derivatives_and_expansions_agree_with_sympy() -> None:
    for mine, theirs in _pairs(7, 600):
        for index in (0, 3):
            derivative = tm.diff(mine, TM[index])
            value = tm.value_at(derivative, POINT)
            if value is not None:
                expected = _sympy_value(sp.diff(theirs, SP[index]), SP_POINT)
                assert expected is not None and abs(value - expected) <= 1e-6 * max(1.0, abs(expected)), (mine, index)
        expanded = tm.value_at(tm.expand(mine), POINT)
        direct = tm.value_at(mine, POINT)
        if expanded is not None and direct is not None:
            assert abs(expanded - direct) <= 1e-7 * max(1.0, abs(direct)), mine


def test_sign_assumptions_never_contradict_sympys() -> None:
    known = 0
    for mine, theirs in _pairs(11, 1500):
        for query in ("is_positive", "is_negative", "is_zero", "is_nonnegative", "is_real"):
            answer = getattr(mine, query)
            if answer is not None:
                known += 1
                assert getattr(theirs, query) in (answer, None), (query, mine, theirs)
    assert known > 1500


def test_derivative_of_an_unknown_function_is_unevaluated_and_never_a_number() -> None:
    x = TM[0]
    f = tm.Function("call_f")
    assert tm.diff(f(x), x) == tm.Derivative(f(x), x)
    assert tm.value_at(tm.diff(f(x ** 2), x), POINT) is None
    with pytest.raises(ValueError):  # its variable cannot become an expression
        tm.Derivative(f(x), x).xreplace({x: x + 1})


def test_structural_equality_and_hashes() -> None:
    x, r = TM[0], TM[1]
    assert tm.exp(r - x) - (r - x) - 1 == tm.exp(-(x - r)) + x - r - 1
    assert hash(2 * (x - r)) == hash(2 * x - 2 * r)
    assert tm.Num(2) != tm.Num(2.0) and tm.Num(0.5) == 0.5 and tm.Num(1) == 1
    assert tm.Symbol("t__1", positive=True) != tm.Symbol("t__1", real=True)
    assert tm.Dummy("common") != tm.Dummy("common")


def test_checking_a_kl_file_never_imports_sympy() -> None:
    probe = ("import sys\nfrom kllint.api import check_paths\nfrom kllint.config import Settings\n"
             f"result = check_paths([{str(ROOT / 'fixtures' / 'KL102')!r}], Settings())\n"
             "print(len(result.diagnostics) > 0, 'kllint.analysis.terms' in sys.modules, 'sympy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "False"]
