"""`rules.base.sign_of` answers as sympy's assumptions do, without their cost on products that
hold a symbol that may be zero."""
from __future__ import annotations

import random

import pytest
import sympy as sp

from kllint.rules.base import sign_of


def _sympy_sign(expr: sp.Expr) -> int:
    return 1 if expr.is_positive else (-1 if expr.is_negative else 0)


X, Y, Z = sp.Symbol("x", real=True), sp.Symbol("y", positive=True), sp.Symbol("z")
N, W = sp.Symbol("n", negative=True), sp.Symbol("w", nonnegative=True)
ATOMS = [X, Y, Z, N, W, sp.Integer(2), sp.Rational(-1, 2), sp.Float(0.5), sp.exp(X), sp.log(Y), X + Y, Y + 1,
         sp.Abs(X), Y ** 2, X ** 2, 1 / Y]


@pytest.mark.parametrize("expr", [sp.nan, sp.zoo, sp.oo, -sp.oo, sp.Integer(0), sp.Integer(3), sp.Rational(-1, 2),
                                  Y, N, X, sp.oo * X, -Y, 2 * N * Y, X * Y])
def test_special_values_and_symbols(expr: sp.Expr) -> None:
    assert sign_of(expr) == _sympy_sign(expr)


def test_random_products_agree_with_sympy() -> None:
    rng = random.Random(7)
    for _ in range(1500):
        expr = sp.Mul(*rng.sample(ATOMS, rng.randint(1, 4)))
        assert sign_of(expr) == _sympy_sign(expr), expr
