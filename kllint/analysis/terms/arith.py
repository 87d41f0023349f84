"""Canonical sums, products and powers.

The canonical forms follow the automatic simplification a computer algebra system applies
(sympy's, which this algebra replaced), so that equal values built by different spellings meet:

- a sum flattens nested sums, adds its numbers and collects like terms (`2*x - x` is `x`, a
  zero coefficient drops the term); its number comes first, the other terms in `sort_key` order;
- a product flattens nested products, multiplies its numbers and collects the powers of equal
  bases whose exponents differ only by a number factor (`x**2 / x` is `x`, `exp(a) * exp(-a)` is
  1, `exp(a) * exp(b)` stays two factors); a number times a sum of two factors is distributed
  (`2 * (x - y)` is `2*x - 2*y`), a number times a product with a sum is not;
- a power of a power, of a product and of an exponential combines where that is exact for real
  values (`(x**2)**(1/2)` is `Abs(x)`; a product to a fractional power splits off its factors
  known to be nonnegative).
"""
from __future__ import annotations

from fractions import Fraction
from operator import attrgetter

import kllint.analysis.terms.numbers as numbers
from kllint.analysis.terms.core import HOOKS, ONE, ZERO, Num, Term, as_term, bind


_HASH_OF = attrgetter("_hash")


def make_node(cls: type, args: tuple[Term, ...]) -> Term:
    """A node of class `cls` over `args` as given (no simplification: the caller ensures the
    canonical form, or wants the node unevaluated)."""
    node = object.__new__(cls)
    node.args = args
    node._hash = hash((cls.__name__, *map(_HASH_OF, args)))
    node._free = None
    node._key = None
    return node


def _key_of(term: Term) -> tuple:
    return term.sort_key


class Add(Term):
    """A sum of two or more terms (number first)."""

    __slots__ = ()
    is_Add = True
    _rank = 30

    def __new__(cls, *args: object, evaluate: bool = True) -> Term:
        terms = [as_term(a) for a in args]
        if not evaluate:
            return make_node(cls, tuple(terms)) if len(terms) > 1 else (terms[0] if terms else ZERO)
        return add(*terms)

    def __init__(self, *args: object, evaluate: bool = True) -> None:
        pass

    def as_coeff_Add(self) -> tuple[Term, Term]:
        first = self.args[0]
        if first.is_Number:
            rest = self.args[1:]
            return first, rest[0] if len(rest) == 1 else make_node(Add, rest)
        return ZERO, self


class Mul(Term):
    """A product of two or more factors (number first)."""

    __slots__ = ()
    is_Mul = True
    _rank = 20

    def __new__(cls, *args: object, evaluate: bool = True) -> Term:
        factors = [as_term(a) for a in args]
        if not evaluate:
            return make_node(cls, tuple(factors)) if len(factors) > 1 else (factors[0] if factors else ONE)
        return mul(*factors)

    def __init__(self, *args: object, evaluate: bool = True) -> None:
        pass

    def as_coeff_Mul(self) -> tuple[Term, Term]:
        first = self.args[0]
        if first.is_Number:
            rest = self.args[1:]
            return first, rest[0] if len(rest) == 1 else make_node(Mul, rest)
        return ONE, self


class Pow(Term):
    """`base ** exp`."""

    __slots__ = ()
    is_Pow = True
    _rank = 15

    def __new__(cls, base: object, exponent: object, evaluate: bool = True) -> Term:
        b, e = as_term(base), as_term(exponent)
        if not evaluate:
            return make_node(cls, (b, e))
        return power(b, e)

    def __init__(self, *args: object, evaluate: bool = True) -> None:
        pass

    @property
    def base(self) -> Term:
        return self.args[0]

    @property
    def exp(self) -> Term:
        return self.args[1]

    def as_base_exp(self) -> tuple[Term, Term]:
        return self.args[0], self.args[1]


# ---------------------------------------------------------------------------------------------
# sums

def add(*args: Term) -> Term:
    """The canonical sum of the terms."""
    if len(args) == 1:
        return args[0]
    coefficients: dict[Term, numbers.Number] = {}
    constant: numbers.Number = 0
    pending = list(args)
    for term in pending:
        if term.is_Number:
            constant = constant + term.value
        elif term.is_Add:
            pending.extend(term.args)
        else:
            if term.is_Mul and term.args[0].is_Number:
                args_ = term.args
                coefficient = args_[0].value
                rest = args_[1] if len(args_) == 2 else make_node(Mul, args_[1:])
            else:
                coefficient, rest = 1, term
            known = coefficients.get(rest)
            coefficients[rest] = coefficient if known is None else known + coefficient
    parts: list[Term] = []
    for rest, coefficient in coefficients.items():
        if type(coefficient) is not int:
            coefficient = numbers.normal(coefficient)
        if coefficient == 0:
            continue
        if coefficient == 1 and type(coefficient) is int:
            parts.append(rest)
        elif rest.is_Mul:
            parts.append(make_node(Mul, (Num(coefficient),) + rest.args))
        else:
            parts.append(make_node(Mul, (Num(coefficient), rest)) if not rest.is_Add else mul(Num(coefficient), rest))
    if len(parts) > 1:
        parts.sort(key=_key_of)
    if type(constant) is not int:
        constant = numbers.normal(constant)
    if constant != 0:
        parts.insert(0, Num(constant))
    if not parts:
        return Num(constant)
    if len(parts) == 1:
        return parts[0]
    return make_node(Add, tuple(parts))


# ---------------------------------------------------------------------------------------------
# products

def mul(*args: Term) -> Term:
    """The canonical product of the factors."""
    factors = [a for a in args if not (a.is_Number and a.value == 1 and type(a.value) is int)]
    if len(factors) < 2:
        return factors[0] if factors else ONE
    if len(factors) == 2:
        a, b = factors
        if (a.is_Number and type(a.value) is not float) or (b.is_Number and type(b.value) is not float):
            distributed = _two_factor_distribution(a, b)
            if distributed is not None:
                return distributed
    coefficient: numbers.Number = 1
    exponents: dict[Term, dict[Term, numbers.Number]] = {}  # base -> exponent's term -> its number factor
    for factor in factors:
        if factor.is_Mul:
            factors.extend(factor.args)
            continue
        if factor.is_Number:
            coefficient = coefficient * factor.value
            continue
        if factor.is_Pow:
            base, exponent = factor.args
        elif factor.is_exp:
            base, exponent = _E, factor.args[0]
        else:
            base, exponent = factor, ONE
        if exponent is ONE:
            number, term = 1, ONE
        elif exponent.is_Number:
            number, term = exponent.value, ONE
        elif exponent.is_Mul and exponent.args[0].is_Number:
            number = exponent.args[0].value
            term = exponent.args[1] if len(exponent.args) == 2 else make_node(Mul, exponent.args[1:])
        else:
            number, term = 1, exponent
        by_term = exponents.get(base)
        if by_term is None:
            exponents[base] = {term: number}
        else:
            known = by_term.get(term)
            by_term[term] = number if known is None else known + number
    parts: list[Term] = []
    split = False
    for base, by_term in exponents.items():
        for term, number in by_term.items():
            if type(number) is not int:
                number = numbers.normal(number)
            if number == 0:
                continue
            if term is ONE:
                if number == 1 and type(number) is int:
                    parts.append(base)
                    continue
                exponent = Num(number)
            else:
                exponent = term if number == 1 and type(number) is int else mul(Num(number), term)
            made = power(base, exponent)
            if made.is_Number:
                coefficient = coefficient * made.value
            elif made.is_Mul:  # a power that split (`exp(x + log(p))` is `p*exp(x)`)
                split = True
                parts.extend(made.args)
            else:
                parts.append(made)
    if type(coefficient) is not int:
        coefficient = numbers.normal(coefficient)
    if coefficient == 0:
        return ZERO
    if split:  # the split factors may meet other powers of their bases
        return mul(Num(coefficient), *parts)
    if len(parts) > 1:
        parts.sort(key=_key_of)
    if not (coefficient == 1 and type(coefficient) is int):
        if len(parts) == 1 and parts[0].is_Add and numbers.finite(coefficient):
            return add(*(mul(Num(coefficient), term) for term in parts[0].args))  # 2*(x + y) -> 2*x + 2*y
        parts.insert(0, Num(coefficient))
    if not parts:
        return Num(coefficient)
    if len(parts) == 1:
        return parts[0]
    return make_node(Mul, tuple(parts))


def _two_factor_distribution(a: Term, b: Term) -> Term | None:
    """A rational number times a sum: distributed (`2 * (x + 1)` is `2*x + 2`)."""
    if b.is_Number and b.is_Rational:
        a, b = b, a
    if not (a.is_Number and a.is_Rational and a.value != 0):
        return None
    r, rest = b.as_coeff_Mul()
    if not rest.is_Add:
        return None
    if r is not ONE and not (r.is_Number and r.value == 1 and numbers.exact(r.value)):
        scaled = mul(a, r)
        return rest if scaled == ONE else make_node(Mul, (scaled, rest))
    return add(*(mul(a, term) for term in rest.args))


# ---------------------------------------------------------------------------------------------
# powers

def power(base: Term, exponent: Term) -> Term:
    """The canonical `base ** exponent`."""
    if exponent.is_Number and numbers.exact(exponent.value):
        if exponent.value == 0:
            return ONE
        if exponent.value == 1:
            return base
    if base.is_Number and base.value == 1 and numbers.exact(base.value):
        return ONE
    if base.is_exp:
        return HOOKS["exp"](mul(base.args[0], exponent))
    if base == _E:
        return HOOKS["exp"](exponent)
    if base.is_Number and exponent.is_Number:
        if base.value == 0 and exponent.value < 0:
            return make_node(Pow, (base, exponent))  # a division by zero stays unevaluated
        value = numbers.power(base.value, exponent.value)
        return Num(value) if value is not None else make_node(Pow, (base, exponent))
    integer = exponent.is_Number and isinstance(exponent.value, int)
    if base.is_Pow:
        combined = _power_of_power(base.args[0], base.args[1], exponent)
        if combined is not None:
            return combined
    elif base.is_Mul:
        if integer:
            return mul(*(power(factor, exponent) for factor in base.args))
        if exponent.is_Number:
            return _split_power_of_product(base, exponent)
    elif base.is_Abs and integer:
        inner = base.args[0]
        if inner.is_real:
            if exponent.value % 2 == 0:
                return power(inner, exponent)
            if exponent.value != -1:
                return mul(power(inner, Num(exponent.value - 1)), base)
    return make_node(Pow, (base, exponent))


def _power_of_power(base: Term, inner: Term, outer: Term) -> Term | None:
    """`(base ** inner) ** outer` as one power when that is exact for real values, else None."""
    if outer.is_Number and isinstance(outer.value, int):
        return power(base, mul(inner, outer))
    if inner.is_real is not True:
        return None
    half = outer.is_Number and isinstance(outer.value, Fraction) and outer.value.denominator == 2
    if inner.is_Number and inner.value == -1 and numbers.exact(inner.value) and half and base.is_negative is False:
        return power(base, mul(Num(-1), outer))
    if inner.is_Number and isinstance(inner.value, int) and inner.value % 2 == 0 and base.is_real:
        base = HOOKS["Abs"](base)
    if (inner.is_Number and abs(inner.value) < 1) or base.is_nonnegative:
        return power(base, mul(inner, outer))
    return None


def _split_power_of_product(base: Term, exponent: Term) -> Term:
    """`(a * b) ** e` for a number `e` that is not an integer: each factor known to be
    nonnegative gets its own power, the others stay together under one power."""
    nonnegative, others = [], []
    for factor in base.args:
        (nonnegative if factor.is_nonnegative else others).append(factor)
    if not nonnegative:
        return make_node(Pow, (base, exponent))
    if not others:
        tail = []
    elif len(others) == 1:
        tail = [power(others[0], exponent)]
    else:
        tail = [make_node(Pow, (make_node(Mul, tuple(others)), exponent))]
    return mul(*(power(factor, exponent) for factor in nonnegative), *tail)


_E: Term = ONE  # exp(1), set by `kllint.analysis.terms.functions`


def set_e(value: Term) -> None:
    """Called once by `kllint.analysis.terms.functions` with `exp(1)`."""
    global _E
    _E = value


bind(add=add, mul=mul, pow=power)
