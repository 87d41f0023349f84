"""The terms of the algebra: an immutable tree of `Term` nodes with structural equality.

A term is a number (`Num`), a symbol (`Symbol`) or a node of a class (sum, product, power,
exponential, logarithm, absolute value, clamp, an unknown function) over argument terms
(`args`). Equal trees are equal terms with equal hashes, whichever objects hold them; hashes,
free symbols and sort keys are computed once per node, so that the walks of shared trees stay
linear in the graph. The arithmetic operators build canonical sums, products and powers through
`kllint.analysis.terms.arith`, bound at import time of the package (`bind_arithmetic`).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, Iterator

from kllint.analysis.terms.numbers import Number, as_float, finite, normal
from kllint.analysis.terms.operators import HOOKS, Operators, bind

class Term(Operators):
    """A node of the algebra. Subclasses set the class flags and `_rank` (the canonical order of
    node kinds among the arguments of a sum or product)."""

    __slots__ = ("args", "_hash", "_free", "_key", "__weakref__")
    is_Number = False
    is_Symbol = False
    is_Atom = False
    is_Add = False
    is_Mul = False
    is_Pow = False
    is_Function = False
    is_exp = False
    is_log = False
    is_Abs = False
    is_sign = False
    _rank = 50

    def __init__(self, args: tuple["Term", ...]) -> None:
        self.args = args
        self._hash = hash((type(self).__name__, args))
        self._free = None
        self._key = None

    # -- identity ---------------------------------------------------------------------------
    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Term):
            return False if not isinstance(other, (int, float, Fraction)) else self == as_term(other)
        return type(self) is type(other) and self._hash == other._hash and self._same(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def _same(self, other: "Term") -> bool:
        return self.args == other.args

    @property
    def func(self) -> type:
        return type(self)

    @property
    def sort_key(self) -> tuple:
        """A deterministic order of terms (numbers first, then symbols by name, then nodes by
        kind and arguments); never hash-based, so every process orders alike."""
        key = self._key
        if key is None:
            key = self._key = self._sort_key()
        return key

    def _sort_key(self) -> tuple:
        return (2, self._rank, type(self).__name__, len(self.args), tuple(a.sort_key for a in self.args))

    # -- structure --------------------------------------------------------------------------
    @property
    def free_symbols(self) -> frozenset:
        free = self._free
        if free is None:
            free = self._free = self._free_symbols()
        return free

    def _free_symbols(self) -> frozenset:
        if not self.args:
            return frozenset()
        if len(self.args) == 1:
            return self.args[0].free_symbols
        return frozenset().union(*(a.free_symbols for a in self.args))

    @property
    def is_number(self) -> bool:
        """No symbol and no unknown function: a constant (`exp(2)`, `log(3)`)."""
        return all(a.is_number for a in self.args)

    def rebuild(self, args: tuple["Term", ...]) -> "Term":
        """The same kind of node over other arguments, evaluated."""
        return type(self)(*args)

    def raw(self, args: tuple["Term", ...]) -> "Term":
        """The same kind of node over other arguments, not evaluated."""
        return type(self)(*args, evaluate=False)

    def preorder(self) -> Iterator["Term"]:
        """The node and every node below it, parents before children, each occurrence once."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.args))

    def has(self, *targets: Any) -> bool:
        """Whether a node equal to a target term, or of a target class, occurs in the term."""
        classes = tuple(t for t in targets if isinstance(t, type))
        terms = [t for t in targets if not isinstance(t, type)]
        seen: set[int] = set()
        stack = [self]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if (classes and isinstance(node, classes)) or (terms and node in terms):
                return True
            stack.extend(node.args)
        return False

    def atoms(self, *classes: type) -> set["Term"]:
        """The nodes of the given classes (symbols and numbers without a class given)."""
        wanted = classes or (Symbol, Num)
        return {node for node in self.preorder() if isinstance(node, wanted)}

    def xreplace(self, mapping: dict) -> "Term":
        """The term with every node that is a key of `mapping` replaced by its value, at once,
        the nodes above rebuilt (evaluated); each shared node is visited once."""
        if not mapping:
            return self
        memo: dict[int, Term] = {}

        def visit(node: Term) -> Term:
            found = memo.get(id(node))
            if found is not None:
                return found
            replaced = mapping.get(node)
            if replaced is None:
                if not node.args:
                    replaced = node
                else:
                    args = tuple(visit(a) for a in node.args)
                    replaced = node if all(n is o for n, o in zip(args, node.args)) else node.rebuild(args)
            memo[id(node)] = replaced
            return replaced

        return visit(self)

    def subs(self, old: Any, new: Any = None) -> "Term":
        """Substitution of symbols (`subs(x, 0)` or `subs({x: 0, ...})`, one after the other in
        the order given)."""
        pairs = list(old.items()) if isinstance(old, dict) else [(old, new)]
        result = self
        for key, value in pairs:
            result = result.xreplace({as_term(key): as_term(value)})
        return result

    def replace(self, cls: type, function: Callable[..., "Term"]) -> "Term":
        """The term with every node of class `cls` replaced by `function(*its args)`, innermost
        first."""
        memo: dict[int, Term] = {}

        def visit(node: Term) -> Term:
            found = memo.get(id(node))
            if found is not None:
                return found
            result = node
            if node.args:
                args = tuple(visit(a) for a in node.args)
                if not all(n is o for n, o in zip(args, node.args)):
                    result = node.rebuild(args)
            if isinstance(result, cls):
                result = as_term(function(*result.args))
            memo[id(node)] = result
            return result

        return visit(self)

    def as_coeff_Mul(self) -> tuple["Term", "Term"]:
        """(number, rest) with `self == number * rest`; (1, self) when there is no leading number."""
        return ONE, self

    def as_coeff_Add(self) -> tuple["Term", "Term"]:
        """(number, rest) with `self == number + rest`; (0, self) when there is no number term."""
        return ZERO, self

    def as_base_exp(self) -> tuple["Term", "Term"]:
        return self, ONE

    def coeff(self, x: "Term") -> "Term":
        """The coefficient of `x` among the terms of this sum: what multiplies `x` where it is a
        factor of a term (to the first power)."""
        parts = []
        for term in (self.args if self.is_Add else (self,)):
            if term == x:
                parts.append(ONE)
            elif term.is_Mul and x in term.args:
                others = list(term.args)
                others.remove(x)
                if x not in others:
                    parts.append(HOOKS["mul"](*others))
        return HOOKS["add"](*parts) if parts else ZERO

class Num(Term):
    """A number: `value` is an int, a Fraction or a float (`normal`)."""

    __slots__ = ("value",)
    is_Number = True
    is_Atom = True
    _rank = 0

    def __new__(cls, value: Number) -> "Num":
        value = normal(value)
        cached = _SMALL.get((type(value), value)) if not isinstance(value, float) else None
        if cached is not None:
            return cached
        node = object.__new__(cls)
        node.value = value
        node.args = ()
        node._hash = hash(("Num", isinstance(value, float), value))
        node._free = frozenset()
        node._key = None
        return node

    def __init__(self, value: Number) -> None:
        pass

    def _same(self, other: Term) -> bool:
        return isinstance(self.value, float) == isinstance(other.value, float) and self.value == other.value

    def _sort_key(self) -> tuple:
        return (0, as_float(self.value), isinstance(self.value, float))

    @property
    def is_number(self) -> bool:
        return True

    @property
    def is_integer(self) -> bool:
        return isinstance(self.value, int)

    @property
    def is_Rational(self) -> bool:
        return not isinstance(self.value, float)

    @property
    def is_Float(self) -> bool:
        return isinstance(self.value, float)

    @property
    def is_finite(self) -> bool:
        return finite(self.value)

    def __bool__(self) -> bool:
        return self.value != 0

    def __float__(self) -> float:
        return as_float(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def as_coeff_Mul(self) -> tuple[Term, Term]:
        return self, ONE

    def as_coeff_Add(self) -> tuple[Term, Term]:
        return self, ZERO


_SMALL: dict[tuple, Num] = {}
for _value in (0, 1, -1, 2, -2, 3, Fraction(1, 2), Fraction(-1, 2)):
    _SMALL[(type(_value), _value)] = Num(_value)
ZERO, ONE, MINUS_ONE, HALF = Num(0), Num(1), Num(-1), Num(Fraction(1, 2))


class Symbol(Term):
    """A symbol: a name and its assumptions (`real`; `positive`, which implies real). Symbols are
    equal when their class, name and assumptions are."""

    __slots__ = ("name", "real", "positive")
    is_Symbol = True
    is_Atom = True
    _rank = 1

    def __init__(self, name: str, real: bool = False, positive: bool = False, **ignored: bool) -> None:
        self.name = name
        self.positive = bool(positive)
        self.real = bool(real) or self.positive
        self.args = ()
        self._hash = hash((type(self).__name__, name, self.real, self.positive))
        self._free = None
        self._key = None

    def _free_symbols(self) -> frozenset:
        return frozenset((self,))

    def _same(self, other: Term) -> bool:
        return self.name == other.name and self.real == other.real and self.positive == other.positive

    def _sort_key(self) -> tuple:
        return (1, self.name, type(self).__name__, self.positive)

    @property
    def is_number(self) -> bool:
        return False

    def rebuild(self, args: tuple[Term, ...]) -> Term:
        return self


class Dummy(Symbol):
    """A symbol that equals no other, whatever its name."""

    __slots__ = ("serial",)
    _count = 0

    def __init__(self, name: str = "dummy", real: bool = False, positive: bool = False) -> None:
        Dummy._count += 1
        self.serial = Dummy._count
        super().__init__(name, real=real, positive=positive)
        self._hash = hash(("Dummy", self.serial))

    def _same(self, other: Term) -> bool:
        return self.serial == other.serial


def as_term(value: Any) -> Term:
    """A Python number as a `Num`; a term as itself."""
    if isinstance(value, Term):
        return value
    if isinstance(value, (int, float, Fraction)):
        return Num(value)
    raise TypeError(f"not a term: {value!r}")


bind(term=as_term)
