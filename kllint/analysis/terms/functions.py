"""Functions of terms: the exponential, the logarithm, the absolute value and the sign, each
with its automatic simplifications; functions the algebra knows nothing of (`Function(name)`,
an unknown function of its arguments); and the derivatives `calculus.diff` leaves unevaluated.
"""
from __future__ import annotations

import math
from fractions import Fraction

import kllint.analysis.terms.numbers as numbers
from kllint.analysis.terms.arith import Mul, Pow, add, make_node, mul, power, set_e
from kllint.analysis.terms.core import MINUS_ONE, ONE, ZERO, Num, Symbol, Term, as_term, bind


class Applied(Term):
    """A function applied to arguments. Subclasses are the functions; `name` is how one prints."""

    __slots__ = ()
    is_Function = True
    name = "f"
    _rank = 40

    def __new__(cls, *args: object, evaluate: bool = True) -> Term:
        terms = tuple(as_term(a) for a in args)
        if evaluate:
            simpler = cls.eval(*terms)
            if simpler is not None:
                return simpler
        return make_node(cls, terms)

    def __init__(self, *args: object, evaluate: bool = True) -> None:
        pass

    @classmethod
    def eval(cls, *args: Term) -> Term | None:
        """A simpler term equal to the application, or None."""
        return None

    def derivative_factor(self, index: int) -> Term | None:
        """d self / d args[index] as a term, or None when unknown (an unevaluated derivative)."""
        return None

    def _sort_key(self) -> tuple:
        return (2, self._rank, type(self).name, len(self.args), tuple(a.sort_key for a in self.args))


class _FunctionName(type):
    """The class of a function class: it prints as the function's name."""

    def __str__(cls) -> str:
        return getattr(cls, "name", cls.__name__)

    __repr__ = __str__


class Undefined(Applied, metaclass=_FunctionName):
    """An unknown function: nothing is known of its value but what it depends on."""

    __slots__ = ()

    @property
    def is_number(self) -> bool:
        return False


_UNDEFINED: dict[str, type] = {}


def Function(name: str) -> type:
    """The unknown function called `name` (the same class for the same name)."""
    cls = _UNDEFINED.get(name)
    if cls is None:
        cls = _UNDEFINED[name] = _FunctionName(name, (Undefined,), {"__slots__": (), "name": name})
    return cls


class Defined(Applied, metaclass=_FunctionName):
    """A function the algebra knows by its class (exp, log, Abs, sign, or one of the analysis)."""

    __slots__ = ()


class exp(Defined):
    """e ** x."""

    __slots__ = ()
    name = "exp"
    is_exp = True
    numeric = staticmethod(math.exp)
    _rank = 35

    @classmethod
    def eval(cls, x: Term) -> Term | None:
        if x.is_Number:
            if x.value == 0:
                return ONE
            if isinstance(x.value, float):
                try:
                    return Num(math.exp(x.value))
                except OverflowError:
                    return None
            return None
        if isinstance(x, log):
            return x.args[0]
        if x.is_Mul:
            coefficient, rest = x.as_coeff_Mul()
            if isinstance(rest, log) and coefficient is not ONE:
                return power(rest.args[0], coefficient)
            return None
        if x.is_Add:
            pulled, kept = [], []
            for term in x.args:
                if term.is_Number and term.value == 1 and numbers.exact(term.value):
                    kept.append(term)
                    continue
                value = exp(term)
                if isinstance(value, exp):
                    kept.append(value.args[0])
                else:
                    pulled.append(value)
            if pulled:
                return mul(*pulled, make_node(exp, (add(*kept),))) if kept else mul(*pulled)
        return None

    def as_base_exp(self) -> tuple[Term, Term]:
        return E, self.args[0]

    def derivative_factor(self, index: int) -> Term:
        return self


E = make_node(exp, (ONE,))
set_e(E)


class log(Defined):
    """The natural logarithm."""

    __slots__ = ()
    name = "log"
    is_log = True
    numeric = staticmethod(math.log)

    @classmethod
    def eval(cls, x: Term) -> Term | None:
        if x.is_Number:
            value = x.value
            if value == 1:
                return ZERO
            if isinstance(value, float):
                return Num(math.log(value)) if value > 0 else None
            if isinstance(value, Fraction) and value.numerator == 1 and value > 0:
                return mul(MINUS_ONE, log(Num(value.denominator)))
            return None
        if isinstance(x, exp) and x.args[0].is_real:
            return x.args[0]
        return None

    def derivative_factor(self, index: int) -> Term:
        return power(self.args[0], MINUS_ONE)


class Abs(Defined):
    """|x|."""

    __slots__ = ()
    name = "Abs"
    is_Abs = True
    numeric = staticmethod(abs)

    @classmethod
    def eval(cls, x: Term) -> Term | None:
        if x.is_Number:
            return Num(abs(x.value))
        if x.is_Mul:
            known, unknown = [], []
            for factor in x.args:
                value = Abs(factor)
                if isinstance(value, Abs):
                    unknown.append(value.args[0])
                else:
                    known.append(value)
            rest = [] if not unknown else [Abs(mul(*unknown), evaluate=False)]
            return mul(*known, *rest)
        if x.is_Pow:
            base, exponent = x.args
            if base.is_real:
                if exponent.is_Number and isinstance(exponent.value, int):
                    return x if exponent.value % 2 == 0 else power(Abs(base), exponent)
                if base.is_nonnegative:
                    return x
            return None
        if isinstance(x, exp) and x.args[0].is_real:
            return x
        if x.is_nonnegative:
            return x
        if x.is_nonnegative is False and x.is_real:
            return mul(MINUS_ONE, x)
        if could_extract_minus_sign(x):
            return Abs(mul(MINUS_ONE, x))
        return None

    def derivative_factor(self, index: int) -> Term:
        return sign(self.args[0])


class sign(Defined):
    """The sign of a real number: -1, 0 or 1."""

    __slots__ = ()
    name = "sign"
    is_sign = True
    numeric = staticmethod(lambda x: float((x > 0) - (x < 0)))

    @classmethod
    def eval(cls, x: Term) -> Term | None:
        if x.is_Number:
            return Num((x.value > 0) - (x.value < 0))
        if x.is_positive:
            return ONE
        if x.is_negative:
            return MINUS_ONE
        if could_extract_minus_sign(x):
            return mul(MINUS_ONE, sign(mul(MINUS_ONE, x)))
        return None


def could_extract_minus_sign(x: Term) -> bool:
    """Whether `x` reads as the negation of another term: a negative number, a product led by a
    negative number, a sum with more negated terms than others (on a tie, the one of `x` and
    `-x` that comes first in `sort_key` order is the positive one)."""
    if x.is_Number:
        return x.value < 0
    if x.is_Mul:
        return x.args[0].is_Number and x.args[0].value < 0
    if x.is_Add:
        negative = sum(1 for t in x.args if could_extract_minus_sign(t))
        positive = len(x.args) - negative
        if negative != positive:
            return negative > positive
        return x.sort_key < mul(MINUS_ONE, x).sort_key
    return False


def sqrt(x: object) -> Term:
    return power(as_term(x), Num(Fraction(1, 2)))


class Derivative(Term):
    """d expr / d variable, unevaluated (`expr` an unknown function of the variable)."""

    __slots__ = ()
    _rank = 45

    def __new__(cls, expr: Term, variable: Symbol) -> Term:
        return make_node(cls, (expr, variable))

    def __init__(self, *args: object) -> None:
        pass

    @property
    def is_number(self) -> bool:
        return False

    def rebuild(self, args: tuple[Term, ...]) -> Term:
        if not isinstance(args[1], Symbol):
            raise ValueError("a derivative's variable replaced by an expression")
        return Derivative(args[0], args[1])

    raw = rebuild


class Subs(Term):
    """`expr` with `variable` set to `point` (the derivative of an unknown function at an
    argument that is not a plain symbol), unevaluated."""

    __slots__ = ()
    _rank = 46

    def __new__(cls, expr: Term, variable: Symbol, point: Term) -> Term:
        return make_node(cls, (expr, variable, point))

    def __init__(self, *args: object) -> None:
        pass

    def _free_symbols(self) -> frozenset:
        expr, variable, point = self.args
        return (expr.free_symbols - {variable}) | point.free_symbols

    @property
    def is_number(self) -> bool:
        return False

    def rebuild(self, args: tuple[Term, ...]) -> Term:
        return Subs(*args)

    raw = rebuild


bind(exp=exp, Abs=Abs)

__all__ = ["Abs", "Applied", "Defined", "Derivative", "E", "Function", "Mul", "Pow", "Subs", "Undefined", "exp",
           "log", "sign", "sqrt"]
