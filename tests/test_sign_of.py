"""`rules.base.sign_of` answers as sympy's assumptions do (tests/sympy_oracle.py) on products of
the values the analysis builds: symbols that are real or positive, numbers, exponentials,
logarithms, absolute values, powers."""
from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from kllint.analysis import terms as tm
from kllint.rules.base import sign_of
from sympy_oracle import to_sympy


def _sympy_sign(expr: tm.Term) -> int:
    converted = to_sympy(expr)
    return 1 if converted.is_positive else (-1 if converted.is_negative else 0)


X, Y, Z = tm.Symbol("x", real=True), tm.Symbol("y", positive=True), tm.Symbol("z")
ATOMS = [X, Y, Z, -Y, Y ** 2, tm.Num(2), tm.Num(Fraction(-1, 2)), tm.Num(0.5), tm.exp(X), tm.log(Y), X + Y, Y + 1,
         tm.Abs(X), Y ** 2, X ** 2, 1 / Y, tm.sqrt(Y), tm.Function("call_f")(X)]


@pytest.mark.parametrize("expr", [tm.Num(math.inf), tm.Num(-math.inf), tm.Num(0), tm.Num(3), tm.Num(Fraction(-1, 2)),
                                  Y, -Y, X, 2 * -Y * Y, X * Y, tm.exp(Z), tm.Abs(Z)])
def test_special_values_and_symbols(expr: tm.Term) -> None:
    assert sign_of(expr) == _sympy_sign(expr)


def test_nan_has_no_sign() -> None:
    assert sign_of(tm.Num(math.nan)) == 0


def test_random_products_agree_with_sympy() -> None:
    rng = random.Random(7)
    for _ in range(1500):
        expr = tm.Mul(*rng.sample(ATOMS, rng.randint(1, 4)))
        assert sign_of(expr) == _sympy_sign(expr), expr
