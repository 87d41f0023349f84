"""Symbols of the term algebra (`kllint.analysis.terms`) of KL estimators, and the table of reductions.

Per-token log-probabilities are symbols: `LP` (policy, carries gradient), `LPD` (policy,
stop-gradient), `REF` (frozen reference), `OLD` (rollout policy). A reduction over tokens of an
expression `x` is a fresh symbol registered in a `SymbolTable` with `x` as its inner expression
(a masked sum or mean: positive normalisers are dropped); a reverse cumulative sum
(reward-to-go, returns, GAE) likewise with kind `rtg`.

Estimators are recognised by value in `kllint.analysis.estimators` and gradient coefficients
classified in `kllint.analysis.coefficients`, both with the numeric identity tests of
`kllint.analysis.numeric`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kllint.analysis import terms as tm
from kllint.analysis.bounded import substitute_in_order

LP = tm.Symbol("logp", real=True)
LPD = tm.Symbol("logp_detached", real=True)
REF = tm.Symbol("ref", real=True)
OLD = tm.Symbol("old", real=True)
ROLE_SYMBOLS = frozenset({LP, LPD, REF, OLD})
LOGRATIO = LP - REF
ON_POLICY = {LPD: LP, OLD: LP}  # stop-gradients and the rollout policy equal the policy on-policy


_CLEAN_STEMS: dict[str, str] = {}


class InternalSymbol(tm.Symbol):
    """A symbol the analysis makes for its own bookkeeping, told apart from the opaque values of
    the analysed code by its class (never by its name: an analysed variable may be called `K`)."""


class KLTermSymbol(InternalSymbol):
    """Stands for a KL estimate that met other terms (its meaning is a `facts.KLTerm`)."""


class NamedKLSymbol(KLTermSymbol):
    """Stands for a tensor named as a KL estimate whose form is not visible."""


class ReductionSymbol(InternalSymbol):
    """Stands for a reduction over tokens (a `Reduction` of the `SymbolTable`)."""


class LoopSymbol(InternalSymbol):
    """Stands for a value carried around a loop while the loop body is first run."""


SYMBOL_KINDS: dict[str, type[tm.Symbol]] = {
    "opaque": tm.Symbol, "kl_term": KLTermSymbol, "named_kl": NamedKLSymbol, "reduction": ReductionSymbol,
    "loop": LoopSymbol,
}


def symbols_of(expr: tm.Term) -> frozenset:
    """The symbols of `expr` (kept on each node of the term)."""
    return expr.free_symbols


class Clamp(tm.Defined):
    """`clamp(x)`: identity inside its range. Kept as a marker so that `exp(x)` with a clamped
    `x` is known to be safe (KL601), and removed before classification."""

    __slots__ = ()
    name = "Clamp"

    def derivative_factor(self, index: int) -> tm.Term:
        return tm.ONE


@dataclass
class Reduction:
    """A reduction over tokens: `sum` (sum or mean over the token axis) or `rtg` (reward-to-go:
    reverse cumulative sum, returns or GAE loop)."""

    symbol: tm.Symbol
    inner: tm.Term
    kind: str


@dataclass
class SymbolTable:
    """Reductions and opaque symbols created while analysing one file."""

    reductions: dict[tm.Symbol, Reduction] = field(default_factory=dict)
    counter: int = 0
    _by_inner: dict = field(default_factory=dict)
    _roles: dict = field(default_factory=dict)
    _pure: dict = field(default_factory=dict)
    _expanded: dict = field(default_factory=dict)

    def fresh(self, stem: str, kind: str = "opaque", **assumptions: bool) -> tm.Symbol:
        """A new symbol named after `stem`, of `kind` (a key of `SYMBOL_KINDS`)."""
        self.counter += 1
        clean = _CLEAN_STEMS.get(stem)
        if clean is None:
            clean = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in stem)[:40] or "t"
            if len(_CLEAN_STEMS) < 10_000:
                _CLEAN_STEMS[stem] = clean
        return SYMBOL_KINDS[kind](f"{clean}__{self.counter}", **assumptions)

    def reduce(self, inner: tm.Term, kind: str = "sum") -> tm.Symbol:
        """The reduction symbol of `inner`: one per (inner, kind), since the analysis does not
        tell a sum from a mean or one token axis from another (normalisers are positive)."""
        key = (inner, kind)
        symbol = self._by_inner.get(key)
        if symbol is None:
            symbol = self.fresh("S" if kind == "sum" else "G", "reduction", real=True)
            self.reductions[symbol] = Reduction(symbol, inner, kind)
            self._by_inner[key] = symbol
        return symbol

    def is_reduction(self, symbol: tm.Term) -> bool:
        return symbol in self.reductions

    def expand_reductions(self, expr: tm.Term) -> tm.Term:
        """Replace each reduction symbol by its inner expression (per-token view of the value),
        up to 8 levels of nested reductions (memoised)."""
        expanded = self._expanded.get(expr)
        if expanded is None:
            expanded = expr
            for _ in range(8):
                present = [s for s in symbols_of(expanded) if s in self.reductions]
                if not present:
                    break
                expanded = substitute_in_order(expanded, {s: self.reductions[s].inner for s in present})
            self._expanded[expr] = expanded
        return expanded

    def role_symbols(self, expr: tm.Term) -> frozenset[tm.Symbol]:
        """Role symbols (LP, LPD, REF, OLD) in `expr`, looking through reductions (memoised)."""
        cached = self._roles.get(expr)
        if cached is None:
            cached = self._roles[expr] = frozenset(self._role_symbols(expr))
        return cached

    def _role_symbols(self, expr: tm.Term) -> set[tm.Symbol]:
        found: set[tm.Symbol] = set()
        stack = [expr]
        seen: set[tm.Term] = set()
        while stack:
            current = stack.pop()
            for symbol in symbols_of(current):
                if symbol in ROLE_SYMBOLS:
                    found.add(symbol)
                elif symbol in self.reductions and symbol not in seen:
                    seen.add(symbol)
                    stack.append(self.reductions[symbol].inner)
        return found

    def is_pure(self, expr: tm.Term) -> bool:
        """Built only from role symbols, numbers and reductions of pure expressions (memoised)."""
        cached = self._pure.get(expr)
        if cached is None:
            cached = self._pure[expr] = self._is_pure(expr)
        return cached

    def _is_pure(self, expr: tm.Term) -> bool:
        for symbol in symbols_of(expr):
            if symbol in ROLE_SYMBOLS:
                continue
            if symbol in self.reductions and self.is_pure(self.reductions[symbol].inner):
                continue
            return False
        return True

    def reductions_in(self, expr: tm.Term) -> list[Reduction]:
        return [self.reductions[s] for s in symbols_of(expr) if s in self.reductions]


def strip_clamps(expr: tm.Term) -> tm.Term:
    """`expr` with every `Clamp` replaced by its argument."""
    return expr.replace(Clamp, lambda arg: arg) if expr.has(Clamp) else expr
