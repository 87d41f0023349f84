"""The operators every term has: arithmetic, comparison of constants, conversion to a float
and to text, and the assumption queries. Each is answered by a function another module of the
algebra binds here (`bind`) when the package is imported, so that no module imports another in
a cycle: `arith` binds the constructors, `signs` the assumptions, `evaluate` the numeric value,
`printing` the text, `core` the conversion of Python numbers to terms.
"""
from __future__ import annotations

from typing import Any, Callable

HOOKS: dict[str, Callable[..., Any]] = {}


def bind(**hooks: Callable[..., Any]) -> None:
    """Install what the other modules of the algebra define and every term uses: the canonical
    constructors (`add`, `mul`, `pow`; `kllint.analysis.terms.arith`), the assumption queries
    (`positive`, `negative`, `zero`, `nonnegative`, `real`; `signs`), the numeric value of a
    constant (`value`; `evaluate`) and the text of a term (`text`; `printing`). They are bound
    when the package is imported, so that no module of it imports another in a cycle."""
    HOOKS.update(hooks)


class Operators:
    """The operators of `kllint.analysis.terms.core.Term` (a mixin)."""

    __slots__ = ()

    # -- assumptions (`kllint.analysis.terms.signs` answers them) ----------------------------
    @property
    def is_positive(self) -> bool | None:
        return HOOKS["positive"](self)

    @property
    def is_negative(self) -> bool | None:
        return HOOKS["negative"](self)

    @property
    def is_zero(self) -> bool | None:
        return HOOKS["zero"](self)

    @property
    def is_nonnegative(self) -> bool | None:
        return HOOKS["nonnegative"](self)

    @property
    def is_real(self) -> bool | None:
        return HOOKS["real"](self)

    # -- arithmetic -------------------------------------------------------------------------
    def __add__(self, other: Any) -> "Operators":
        return HOOKS["add"](self, HOOKS["term"](other))

    def __radd__(self, other: Any) -> "Operators":
        return HOOKS["add"](HOOKS["term"](other), self)

    def __sub__(self, other: Any) -> "Operators":
        return HOOKS["add"](self, -HOOKS["term"](other))

    def __rsub__(self, other: Any) -> "Operators":
        return HOOKS["add"](HOOKS["term"](other), -self)

    def __mul__(self, other: Any) -> "Operators":
        return HOOKS["mul"](self, HOOKS["term"](other))

    def __rmul__(self, other: Any) -> "Operators":
        return HOOKS["mul"](HOOKS["term"](other), self)

    def __truediv__(self, other: Any) -> "Operators":
        return HOOKS["mul"](self, HOOKS["pow"](HOOKS["term"](other), HOOKS["term"](-1)))

    def __rtruediv__(self, other: Any) -> "Operators":
        return HOOKS["mul"](HOOKS["term"](other), HOOKS["pow"](self, HOOKS["term"](-1)))

    def __pow__(self, other: Any) -> "Operators":
        return HOOKS["pow"](self, HOOKS["term"](other))

    def __rpow__(self, other: Any) -> "Operators":
        return HOOKS["pow"](HOOKS["term"](other), self)

    def __neg__(self) -> "Operators":
        return HOOKS["mul"](HOOKS["term"](-1), self)

    def __pos__(self) -> "Operators":
        return self

    # -- numbers ----------------------------------------------------------------------------
    def __float__(self) -> float:
        value = HOOKS["value"](self)
        if value is None:
            raise TypeError(f"{self} is not a real number")
        return value

    def _compare(self, other: Any) -> tuple[float, float]:
        if not self.is_number or not HOOKS["term"](other).is_number:
            raise TypeError("cannot compare terms with symbols")
        return float(self), float(HOOKS["term"](other))

    def __lt__(self, other: Any) -> bool:
        a, b = self._compare(other)
        return a < b

    def __le__(self, other: Any) -> bool:
        a, b = self._compare(other)
        return a <= b

    def __gt__(self, other: Any) -> bool:
        a, b = self._compare(other)
        return a > b

    def __ge__(self, other: Any) -> bool:
        a, b = self._compare(other)
        return a >= b

    def __str__(self) -> str:
        return HOOKS["text"](self)

    __repr__ = __str__
