"""Symbolic algebra of KL estimators (sympy): recognise an estimator by its meaning and compute
its gradient coefficient.

Per-token log-probabilities are symbols: `LP` (policy, carries gradient), `LPD` (policy,
stop-gradient), `REF` (frozen reference), `OLD` (rollout policy). A reduction over tokens of an
expression `x` is a fresh symbol registered in a `SymbolTable` with `x` as its inner expression
(a masked sum or mean: positive normalisers are dropped); a reverse cumulative sum
(reward-to-go, returns, GAE) likewise with kind `rtg`.

Source of the rules: Y. Tang, R. Munos, "On a few pitfalls in KL divergence gradient estimation
for RL", arXiv:2506.09477 (2025), sections 3-4: a term `L(logp, ref, old)` differentiated through
`logp` only has the expected gradient of a score-function estimator with coefficient
`c = dL/dlogp`; it is the reverse-KL gradient iff `c = (pi/pi_old) * (d + const)`.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import sympy as sp
from sympy.core.function import AppliedUndef

from kllint.analysis.bounded import substitute_in_order

LP = sp.Symbol("logp", real=True)
LPD = sp.Symbol("logp_detached", real=True)
REF = sp.Symbol("ref", real=True)
OLD = sp.Symbol("old", real=True)
ROLE_SYMBOLS = frozenset({LP, LPD, REF, OLD})
LOGRATIO = LP - REF
ON_POLICY = {LPD: LP, OLD: LP}  # stop-gradients and the rollout policy equal the policy on-policy


_FREE: dict[sp.Basic, frozenset] = {}


class InternalSymbol(sp.Symbol):
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


SYMBOL_KINDS: dict[str, type[sp.Symbol]] = {
    "opaque": sp.Symbol, "kl_term": KLTermSymbol, "named_kl": NamedKLSymbol, "reduction": ReductionSymbol,
    "loop": LoopSymbol,
}


def symbols_of(expr: sp.Basic) -> frozenset:
    """`expr.free_symbols`, memoised: sympy walks the whole tree on every call, and the analysis
    asks the same expressions again and again (roles, KL terms, reductions, alternatives)."""
    found = _FREE.get(expr)
    if found is None:
        if len(_FREE) > 20_000:
            _FREE.clear()
        found = _FREE[expr] = frozenset(expr.free_symbols)
    return found


class Clamp(sp.Function):
    """`clamp(x)`: identity inside its range. Kept as a marker so that `exp(x)` with a clamped
    `x` is known to be safe (KL601), and removed before classification."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return sp.Integer(1)


@dataclass
class Reduction:
    """A reduction over tokens: `sum` (sum or mean over the token axis) or `rtg` (reward-to-go:
    reverse cumulative sum, returns or GAE loop)."""

    symbol: sp.Symbol
    inner: sp.Expr
    kind: str


@dataclass
class SymbolTable:
    """Reductions and opaque symbols created while analysing one file."""

    reductions: dict[sp.Symbol, Reduction] = field(default_factory=dict)
    counter: int = 0
    _by_inner: dict = field(default_factory=dict)
    _roles: dict = field(default_factory=dict)
    _pure: dict = field(default_factory=dict)
    _expanded: dict = field(default_factory=dict)

    def fresh(self, stem: str, kind: str = "opaque", **assumptions: bool) -> sp.Symbol:
        """A new symbol named after `stem`, of `kind` (a key of `SYMBOL_KINDS`)."""
        self.counter += 1
        clean = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in stem)[:40] or "t"
        return SYMBOL_KINDS[kind](f"{clean}__{self.counter}", **assumptions)

    def reduce(self, inner: sp.Expr, kind: str = "sum") -> sp.Symbol:
        """The reduction symbol of `inner`: one per (inner, kind), since the analysis does not
        tell a sum from a mean or one token axis from another (normalisers are positive)."""
        key = (inner, kind)
        symbol = self._by_inner.get(key)
        if symbol is None:
            symbol = self.fresh("S" if kind == "sum" else "G", "reduction", real=True)
            self.reductions[symbol] = Reduction(symbol, inner, kind)
            self._by_inner[key] = symbol
        return symbol

    def is_reduction(self, symbol: sp.Basic) -> bool:
        return symbol in self.reductions

    def expand_reductions(self, expr: sp.Expr) -> sp.Expr:
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

    def role_symbols(self, expr: sp.Expr) -> frozenset[sp.Symbol]:
        """Role symbols (LP, LPD, REF, OLD) in `expr`, looking through reductions (memoised)."""
        cached = self._roles.get(expr)
        if cached is None:
            cached = self._roles[expr] = frozenset(self._role_symbols(expr))
        return cached

    def _role_symbols(self, expr: sp.Expr) -> set[sp.Symbol]:
        found: set[sp.Symbol] = set()
        stack = [expr]
        seen: set[sp.Basic] = set()
        while stack:
            current = stack.pop()
            for symbol in symbols_of(current):
                if symbol in ROLE_SYMBOLS:
                    found.add(symbol)
                elif symbol in self.reductions and symbol not in seen:
                    seen.add(symbol)
                    stack.append(self.reductions[symbol].inner)
        return found

    def is_pure(self, expr: sp.Expr) -> bool:
        """Built only from role symbols, numbers and reductions of pure expressions (memoised)."""
        cached = self._pure.get(expr)
        if cached is None:
            cached = self._pure[expr] = self._is_pure(expr)
        return cached

    def _is_pure(self, expr: sp.Expr) -> bool:
        for symbol in symbols_of(expr):
            if symbol in ROLE_SYMBOLS:
                continue
            if symbol in self.reductions and self.is_pure(self.reductions[symbol].inner):
                continue
            return False
        return True

    def reductions_in(self, expr: sp.Expr) -> list[Reduction]:
        return [self.reductions[s] for s in symbols_of(expr) if s in self.reductions]


def strip_clamps(expr: sp.Expr) -> sp.Expr:
    return expr.replace(Clamp, lambda arg: arg) if expr.has(Clamp) else expr


# ---------------------------------------------------------------------------------------------
# Numeric identity testing: robust to every spelling (expm1, log(ratio), x * x, ...), and fast.

_POINTS: list[dict[sp.Symbol, float]] = []
_rng = random.Random(20250609)
for _ in range(5):
    _lp = -_rng.uniform(0.2, 2.5)
    _POINTS.append({LP: _lp, LPD: _lp, OLD: _lp - _rng.uniform(-0.4, 0.4), REF: -_rng.uniform(0.2, 2.5)})


def _evaluate(expr: sp.Expr, point: dict[sp.Symbol, float]) -> float | None:
    """`expr` at `point` as a real float; None if it is not real and finite there or has other symbols."""
    compiled = _COMPILED.get(expr, _MISSING)
    if compiled is _MISSING:
        compiled = _COMPILED[expr] = _compile(expr)
    try:
        value = compiled(point) if compiled is not None else _evaluate_slowly(expr, point)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError):
        return None
    if value is None or isinstance(value, complex) or not math.isfinite(value):
        return None
    return value


def _evaluate_slowly(expr: sp.Expr, point: dict[sp.Symbol, float]) -> float | None:
    value = complex(expr.evalf(subs=point))
    return value.real if abs(value.imag) <= 1e-9 else None


_MISSING = object()
_NEVER_NUMERIC = (AppliedUndef, sp.Derivative, sp.Subs, Clamp)
_COMPILED: dict[sp.Expr, object] = {}
_UNARY = {sp.exp: math.exp, sp.log: math.log, sp.Abs: abs, sp.tanh: math.tanh, sp.sign: lambda x: float((x > 0) - (x < 0))}


def _compile(expr: sp.Expr):
    """A plain-float evaluator of `expr` (closures over `math`), or None for anything else
    (unknown functions such as `Clamp` never evaluate to a number, as with `evalf`)."""
    if expr.is_Symbol:
        return lambda point, s=expr: point[s]
    if expr.is_Number:
        if not expr.is_real or not expr.is_finite:
            return lambda point: None
        value = float(expr)
        return lambda point: value
    if isinstance(expr, _NEVER_NUMERIC):
        return _never
    parts = [_compile(arg) for arg in expr.args]
    if any(p is _never for p in parts):
        return _never  # a function of a value that is never a number is never one (as with evalf)
    if any(p is None for p in parts):
        return None
    if expr.is_Add:
        return lambda point: math.fsum(p(point) for p in parts)
    if expr.is_Mul:
        def product(point):
            result = 1.0
            for p in parts:
                result *= p(point)
            return result
        return product
    if expr.is_Pow:
        base, exponent = parts
        return lambda point: _power(base(point), exponent(point))
    function = _UNARY.get(type(expr))
    if function is not None and len(parts) == 1:
        inner = parts[0]
        return lambda point: function(inner(point))
    if isinstance(expr, (sp.Max, sp.Min)):
        pick = max if isinstance(expr, sp.Max) else min
        return lambda point: pick(p(point) for p in parts)
    return None


def _never(point: dict) -> None:
    return None


def _power(base: float, exponent: float) -> float | None:
    if base < 0 and not float(exponent).is_integer():
        return None
    return base ** exponent


def proportional(expr: sp.Expr, template: sp.Expr, points: list[dict[sp.Symbol, float]] | None = None
                 ) -> float | None:
    """The constant `a` with `expr == a * template` on the sample points, or None."""
    ratio: float | None = None
    for point in points or _POINTS:
        t = _evaluate(template, point)
        e = _evaluate(expr, point)
        if t is None or e is None:
            return None
        if abs(t) < 1e-9:
            if abs(e) > 1e-7:
                return None
            continue
        r = e / t
        if ratio is None:
            ratio = r
        elif abs(r - ratio) > 1e-7 * max(1.0, abs(ratio)):
            return None
    if ratio is None or abs(ratio) < 1e-12:
        return None
    return ratio


def affine(expr: sp.Expr, template: sp.Expr) -> float | None:
    """The slope `a` with `expr == a * template + b` (a != 0, b constant) on the sample points.

    A constant offset in a gradient coefficient vanishes in expectation (E[grad logp] = 0).
    """
    values = [(_evaluate(template, p), _evaluate(expr, p)) for p in _POINTS]
    if any(t is None or e is None for t, e in values):
        return None
    (t0, e0), rest = values[0], values[1:]
    slope: float | None = None
    for t, e in rest:
        if abs(t - t0) < 1e-9:  # type: ignore[operator]
            return None
        s = (e - e0) / (t - t0)  # type: ignore[operator]
        if slope is None:
            slope = s
        elif abs(s - slope) > 1e-7 * max(1.0, abs(slope)):
            return None
    if slope is None or abs(slope) < 1e-12:
        return None
    return slope


def is_zero(expr: sp.Expr) -> bool:
    if expr == 0:
        return True
    values = [_evaluate(expr, p) for p in _POINTS]
    return all(v is not None and abs(v) < 1e-9 for v in values)


def is_constant(expr: sp.Expr) -> bool:
    """Free of the role symbols and numerically constant."""
    if expr.free_symbols & ROLE_SYMBOLS:
        values = [_evaluate(expr, p) for p in _POINTS]
        return all(v is not None for v in values) and max(values) - min(values) < 1e-9  # type: ignore[type-var]
    return not expr.free_symbols


# ---------------------------------------------------------------------------------------------
# Estimators (values): Schulman (2020) k1/k2/k3 and friends, in d = logp - ref.

_D = LOGRATIO
ESTIMATOR_TEMPLATES: tuple[tuple[str, sp.Expr], ...] = (
    ("k1", _D),
    ("k2", _D ** 2 / 2),
    ("k3", sp.exp(-_D) - 1 + _D),
    ("k3-inverted", sp.exp(_D) - 1 - _D),
    ("abs", sp.Abs(_D)),
    ("reference-ratio", sp.exp(_D)),
)


@dataclass(frozen=True)
class EstimatorMatch:
    """A recognised estimator: its name and the constant factor (`value = scale * template`)."""

    name: str
    scale: float


def on_policy_value(expr: sp.Expr, table: SymbolTable) -> sp.Expr:
    """The value of `expr` per token, on-policy: stop-gradients and `old` equal `logp`."""
    value = strip_clamps(table.expand_reductions(expr))
    return substitute_in_order(value, ON_POLICY)


def classify_value(expr: sp.Expr, table: SymbolTable) -> EstimatorMatch | None:
    """Which KL estimator `expr` computes (by value), whatever its spelling; None if none.

    The expression must depend on the reference log-prob.
    """
    if REF not in table.role_symbols(expr):
        return None
    value = on_policy_value(expr, table)
    if REF not in value.free_symbols or LP not in value.free_symbols:
        return None
    for name, template in ESTIMATOR_TEMPLATES:
        scale = proportional(value, template)
        if scale is not None:
            return EstimatorMatch(name, scale)
    return None


# ---------------------------------------------------------------------------------------------
# Gradient coefficients.

@dataclass(frozen=True)
class Coefficient:
    """The gradient coefficient `c = dL/dlogp_t` of a loss term, classified.

    `kind`: `none` (no gradient), `constant` (k1: zero expected gradient), `reverse` (per-token
    log-ratio: right for one step), `forward` (`1 - pi_ref/pi`: the forward KL), `sequence`
    (credited with the whole sequence's or the future tokens' log-ratio: right), `other`.
    `weighted`: multiplied by a live or detached importance weight `pi/pi_old`.
    `sequence_ratio`: a sequence-level importance ratio multiplies per-token terms (KL402).
    `sign`: sign of the proportionality constant (+1 minimises the KL).
    """

    kind: str
    weighted: bool = False
    sequence_ratio: bool = False
    sign: int = 1
    level: str = "token"


def _derivative(expr: sp.Expr, table: SymbolTable, memo: dict | None = None) -> sp.Expr:
    """d expr / d logp_t, with reductions differentiated by the chain rule (their inner value
    at token t). The result may contain reduction symbols. `memo`: the derivatives of the inner
    expressions of reductions already taken (nested reductions share them)."""
    memo = {} if memo is None else memo
    direct = sp.diff(expr, LP)
    total = direct
    for reduction in table.reductions_in(expr):
        inner_grad = memo.get(reduction.symbol)
        if inner_grad is None:
            inner_grad = memo[reduction.symbol] = _derivative(reduction.inner, table, memo)
        if inner_grad == 0:
            continue
        total += sp.diff(expr, reduction.symbol) * inner_grad
    return total


def _exp_factors(node: sp.Basic) -> tuple[list[sp.Expr], sp.Expr] | None:
    """For a product of two or more exponentials and other factors, those exponentials and the
    exponent of their product (`exp(logp) / exp(old)` is `exp(logp - old)`); else None."""
    if not isinstance(node, sp.Mul):
        return None
    exps = [factor for factor in node.args if isinstance(factor, sp.exp)]
    return (exps, sp.Add(*(factor.args[0] for factor in exps))) if len(exps) > 1 else None


def _exponents(node: sp.Basic) -> list[sp.Expr]:
    """The exponents `node` raises e to: its argument for `exp(a)`, the combined exponent of a
    product's exponential factors (`_exp_factors`)."""
    if isinstance(node, sp.exp):
        return [node.args[0]]
    combined = _exp_factors(node)
    return [combined[1]] if combined else []


def _ratio_forms(expr: sp.Expr) -> bool:
    """Whether `expr` contains an importance weight exp(logp - old) (old: rollout or detached),
    also spelled as a quotient of exponentials `pi / pi_old`."""
    for node in sp.preorder_traversal(expr):
        for exponent in _exponents(node):
            arg = sp.expand(exponent)
            live = arg.coeff(LP) == 1 or arg.coeff(LPD) == 1
            behaviour = arg.coeff(OLD) == -1 or (arg.coeff(LPD) == -1 and arg.coeff(LP) == 1)
            if live and behaviour and REF not in arg.free_symbols:
                return True
    return False


def sequence_ratio(expr: sp.Expr, table: SymbolTable) -> bool:
    """exp(reduction of (logp - old)) multiplying per-token terms: a sequence-level IS ratio."""
    pending, seen, nodes = [expr], set(), []
    while pending:
        current = pending.pop()
        for node in sp.preorder_traversal(current):
            nodes.append(node)
            reduction = table.reductions.get(node)
            if reduction is not None and node not in seen:
                seen.add(node)
                pending.append(reduction.inner)
    def is_sequence_exponent(exponent: sp.Expr) -> bool:
        """A sum over tokens of (logp - old): one reduction, or a combination of reductions
        (`sum(logp) - sum(old)`), with no per-token role outside them."""
        if exponent.free_symbols & ROLE_SYMBOLS:
            return False
        if not any(s in table.reductions and table.reductions[s].kind == "sum" for s in exponent.free_symbols):
            return False
        inner_roles = table.role_symbols(table.expand_reductions(exponent))
        return LP in inner_roles and (OLD in inner_roles or LPD in inner_roles) and REF not in inner_roles

    def is_sequence_weight(node: sp.Basic) -> bool:
        return isinstance(node, sp.exp) and is_sequence_exponent(node.args[0])

    for node in nodes:
        if not isinstance(node, sp.Mul):
            continue
        weights = [f for f in node.args if is_sequence_weight(f)]
        combined = _exp_factors(node) if not weights else None
        if combined and is_sequence_exponent(combined[1]):
            weights = combined[0]  # `exp(sum(logp)) / exp(sum(old))`: the quotient is the weight
        if weights:
            # the weight must multiply per-token terms (not a sequence-level estimate)
            others = [f for f in node.args if f not in weights]
            if any(f.free_symbols & ROLE_SYMBOLS and REF in table.role_symbols(f) for f in others):
                return True
    return False


def _classify_in(coefficient: sp.Expr, variable: sp.Expr) -> tuple[str, int]:
    """Kind and sign of a coefficient that is a function of the log-ratio `variable`."""
    if is_constant(coefficient):
        value = _evaluate(coefficient, _POINTS[0]) or 0.0
        if abs(value) < 1e-12:
            return "none", 1
        return "constant", 1 if value > 0 else -1
    scale = affine(coefficient, variable)
    if scale is not None:
        return "reverse", 1 if scale > 0 else -1
    scale = affine(coefficient, 1 - sp.exp(-variable))
    if scale is not None:
        return "forward", 1 if scale > 0 else -1
    return "other", 1


def classify_coefficient(expr: sp.Expr, table: SymbolTable) -> Coefficient:
    """Classify the gradient coefficient of the loss term `expr` (Tang & Munos 2025, table 1).

    Per token, the coefficient is right iff it is `d + const` (`reverse`; one step right, the
    future-token credit is KL201's concern). When it depends on the sequence log-ratio
    `D = sum_t d_t` only (a sequence-level estimator), the same test runs in `D` and a
    `D`-proportional coefficient is the exact (`sequence`) credit.
    """
    seq_ratio = sequence_ratio(expr, table)
    grad = strip_clamps(_derivative(expr, table))
    weighted = _ratio_forms(grad) or _sequence_weight(grad, table)
    on_policy = substitute_in_order(grad, ON_POLICY)
    unit_weights = _unit_weights(on_policy, table)
    if unit_weights:
        on_policy = on_policy.xreplace(unit_weights)
    reductions = [s for s in on_policy.free_symbols if table.is_reduction(s)]
    if not reductions:
        kind, sign = _classify_in(on_policy, LOGRATIO)
        return Coefficient(kind, weighted, seq_ratio, sign)
    # Reductions: a sequence log-ratio D, on-policy weights (value 0 in the exponent) or other.
    sequence = sp.Symbol("D_sequence", real=True)
    mapping: dict[sp.Symbol, sp.Expr] = {}
    for symbol in reductions:
        inner = on_policy_value(table.reductions[symbol].inner, table)
        if is_zero(inner):
            mapping[symbol] = sp.Integer(0)
            continue
        scale = proportional(inner, LOGRATIO)
        if scale is not None:
            mapping[symbol] = scale * sequence
            continue
        linear = _linear_sum(inner, sequence)
        if linear is None:
            return Coefficient("other", weighted, seq_ratio, level="mixed")
        mapping[symbol] = linear
    try:
        reduced = on_policy.xreplace(mapping)
    except (ValueError, TypeError):  # a derivative taken with respect to a reduction (`Derivative(f(S), S)`)
        return Coefficient("other", weighted, seq_ratio, level="mixed")
    if _SUM_OF_REF in reduced.free_symbols:  # `sum(logp) - sum(ref)` must leave no sum of ref alone
        return Coefficient("other", weighted, seq_ratio, level="mixed")
    if reduced.free_symbols & ROLE_SYMBOLS:
        return Coefficient("other", weighted, seq_ratio, level="mixed")
    kind, sign = _classify_in(reduced.subs(sequence, LOGRATIO), LOGRATIO)
    if kind == "reverse":
        kind = "sequence"
    return Coefficient(kind, weighted, seq_ratio, sign, level="sequence")


_SUM_OF_REF = sp.Symbol("sum_ref", real=True)


def _unit_weights(expr: sp.Expr, table: SymbolTable) -> dict[sp.Basic, sp.Expr]:
    """Sequence-level weights of `expr` that equal 1 on-policy (`exp(sum(logp - old))`, also as
    the quotient `exp(sum(logp)) / exp(sum(old))`), each mapped to what remains without it."""
    def unit(exponent: sp.Expr) -> bool:
        return any(table.is_reduction(s) for s in exponent.free_symbols) and is_zero(on_policy_value(exponent, table))

    found: dict[sp.Basic, sp.Expr] = {}
    for node in sp.preorder_traversal(expr):
        if isinstance(node, sp.exp) and unit(node.args[0]):
            found[node] = sp.Integer(1)
        else:
            combined = _exp_factors(node)
            if combined and not any(unit(f.args[0]) for f in combined[0]) and unit(combined[1]):
                found[node] = sp.Mul(*(f for f in node.args if f not in combined[0]))
    return found


def _linear_sum(inner: sp.Expr, sequence: sp.Symbol) -> sp.Expr | None:
    """The sum over tokens of a per-token value `a * logp + b * ref` (a, b numbers) in terms of
    the sequence log-ratio D = sum_t (logp_t - ref_t) and the sum of ref: a * D + (a + b) * sum_ref,
    so that `sum(logp) - sum(ref)` is D. None for any other value (a constant part included)."""
    a, b = sp.diff(inner, LP), sp.diff(inner, REF)
    if not (a.is_number and b.is_number) or inner.free_symbols - {LP, REF}:
        return None
    if not is_zero(sp.expand(inner - a * LP - b * REF)):
        return None
    return a * sequence + (a + b) * _SUM_OF_REF


def _sequence_weight(expr: sp.Expr, table: SymbolTable) -> bool:
    """exp(sum_t (logp_t - old_t)): a sequence-level importance weight."""
    for node in sp.preorder_traversal(expr):
        for exponent in _exponents(node):
            argument = table.expand_reductions(exponent)
            if argument != exponent and _ratio_forms(sp.exp(argument)):
                return True
    return False
