"""Derivatives and expansion of terms.

`diff(term, x)` is the exact derivative with respect to the symbol `x` (product, power and chain
rules); the derivative of an unknown function stays unevaluated (`Derivative(f(x), x)`, or at an
argument that is not `x` itself, `Subs(Derivative(f(xi), xi), xi, g(x)) * g'(x)`), and so does the
derivative of a clamp-like function whose derivative the algebra is not told.

`expand(term)` multiplies products out over sums, raises sums to integer powers term by term and
splits the logarithm of a product of positive factors (or of a positive power) into a sum, also
inside function arguments.
"""
from __future__ import annotations

from typing import Iterator

from kllint.analysis.terms.arith import add, mul, power
from kllint.analysis.terms.core import MINUS_ONE, ONE, ZERO, Dummy, Num, Symbol, Term
from kllint.analysis.terms.functions import Applied, Derivative, Subs, Undefined, exp, log
from kllint.analysis.terms.signs import signs

MAX_EXPANDED_POWER = 8  # (a + b) ** n is multiplied out up to this n


def diff(term: Term, x: Symbol) -> Term:
    """d term / d x."""
    memo: dict[int, Term] = {}

    def d(node: Term) -> Term:
        if x not in node.free_symbols:
            return ZERO
        if node.is_Symbol:
            return ONE if node == x else ZERO
        known = memo.get(id(node))
        if known is not None:
            return known
        result = _derivative(node, x, d)
        memo[id(node)] = result
        return result

    return d(term)


def _derivative(node: Term, x: Symbol, d) -> Term:
    if node.is_Add:
        return add(*(d(a) for a in node.args))
    if node.is_Mul:
        terms = []
        for index, factor in enumerate(node.args):
            df = d(factor)
            if df.is_Number and df.value == 0:
                continue
            terms.append(mul(*node.args[:index], df, *node.args[index + 1:]))
        return add(*terms)
    if node.is_Pow:
        base, exponent = node.args
        db, de = d(base), d(exponent)
        inner = add(mul(de, log(base)), mul(db, exponent, power(base, MINUS_ONE)))
        return mul(node, inner)
    if isinstance(node, Undefined):
        terms = []
        for index, argument in enumerate(node.args):
            da = d(argument)
            if da.is_Number and da.value == 0:
                continue
            if argument == x:
                terms.append(mul(Derivative(node, x), da))
            else:
                xi = Dummy("xi", real=True)
                at_xi = type(node)(*(node.args[:index] + (xi,) + node.args[index + 1:]))
                terms.append(mul(Subs(Derivative(at_xi, xi), xi, argument), da))
        return add(*terms)
    if isinstance(node, Applied) and len(node.args) == 1:
        factor = node.derivative_factor(0)
        if factor is not None:
            return mul(factor, d(node.args[0]))
    return Derivative(node, x)


def expand(term: Term) -> Term:
    """`term` multiplied out (see the module docstring)."""
    memo: dict[int, Term] = {}

    def visit(node: Term) -> Term:
        if not node.args:
            return node
        known = memo.get(id(node))
        if known is not None:
            return known
        args = tuple(visit(a) for a in node.args)
        rebuilt = node if all(n is o for n, o in zip(args, node.args)) else node.rebuild(args)
        result = _expand_node(rebuilt)
        memo[id(node)] = result
        return result

    return visit(term)


def _expand_node(node: Term) -> Term:
    if node.is_Mul:
        return _distribute(node.args)
    if node.is_Pow:
        base, exponent = node.args
        if base.is_Add and exponent.is_Number and isinstance(exponent.value, int) and 1 < exponent.value <= MAX_EXPANDED_POWER:
            return _distribute((base,) * exponent.value)
        return node
    if isinstance(node, log):
        return _expand_log(node.args[0], node)
    return node


def _distribute(factors: tuple[Term, ...]) -> Term:
    terms: list[Term] = [ONE]
    for factor in factors:
        parts = factor.args if factor.is_Add else (factor,)
        terms = [mul(t, p) for t in terms for p in parts]
    return add(*terms)


def _expand_log(argument: Term, node: Term) -> Term:
    if argument.is_Number and argument.is_Rational and not isinstance(argument.value, int):
        value = argument.value
        return add(log(Num(value.numerator)), mul(MINUS_ONE, log(Num(value.denominator))))
    if argument.is_Mul:
        parts, rest = [], []
        for factor in argument.args:
            if factor.is_positive:
                inner = log(factor)
                parts.append(_expand_log(factor, inner) if isinstance(inner, log) else inner)
            elif factor.is_negative:
                parts.append(log(mul(MINUS_ONE, factor)))
                rest.append(MINUS_ONE)
            else:
                rest.append(factor)
        return add(*parts, log(mul(*rest)))
    if argument.is_Pow or isinstance(argument, exp):
        base, exponent = argument.as_base_exp()
        below = signs(add(exponent, MINUS_ONE))
        if exponent.is_real and (base.is_positive or (add(exponent, ONE).is_positive and below is not None
                                                      and below <= frozenset((-1, 0)))):
            inner = log(base)
            return mul(exponent, _expand_log(base, inner) if isinstance(inner, log) else inner)
    return node


def preorder_traversal(term: Term) -> Iterator[Term]:
    """`term` and every node below it, parents first."""
    return term.preorder()


def default_sort_key(term: Term) -> tuple:
    return term.sort_key


__all__ = ["default_sort_key", "diff", "expand", "preorder_traversal"]
