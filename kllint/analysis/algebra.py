"""Arithmetic on abstract tensors: builds terms (`kllint.analysis.terms`), keeps the anchor of a KL estimate
while it is still "pure" (only log-probs and numbers), and turns it into a tracked `KLTerm` when
it meets anything else (a coefficient, an advantage, another loss term).
"""
from __future__ import annotations

from functools import lru_cache

import functools
from typing import Callable

from kllint.analysis import terms as tm

from kllint.analysis.bounded import SizeBound
from kllint.analysis.coefficients import classify_coefficient
from kllint.analysis.estimators import EstimatorMatch, classify_value
from kllint.analysis.facts import KLTerm
from kllint.analysis.operations import OPERATORS
from kllint.analysis.symbolic import LP, LPD, REF, ROLE_SYMBOLS, Clamp, SymbolTable, symbols_of
from kllint.analysis.values import Anchor, Formed, Reduced, Tensor, plain
from kllint.analysis.weights import named_weight

MAX_TRACE = 6
COMPRESS_OPS = 40
EPSILON_BOUND = 1e-3  # a positive constant below this added to a probability is a numerical floor
_UNKNOWN = object()
ANALYTIC_KL = tm.Function("AnalyticKL")  # AnalyticKL(logp, ref): the KL(pi || ref) over the vocabulary
_TERM_OF = tm.Function("term")  # term(roles...): a large value without KL terms, by what it depends on
_OP = tm.Function("op")  # op(x, y): an operation the algebra cannot build


@functools.lru_cache(maxsize=4096)
def _literal_number(kind: type, value: float) -> tm.Term:
    """The term of a Python number literal, memoised by type and value; integral floats become
    integers."""
    return tm.Num(int(value)) if issubclass(kind, float) and float(value).is_integer() else tm.Num(value)


def _conditioned(anchor: Anchor, *operands: Tensor) -> Anchor:
    """`anchor` (where a pure value is formed now) with the branch conditions under which its
    operands were formed: `log_ratio.clamp(...)` after `if mode == "k3": log_ratio = ...` is the
    clamped k3 only when `mode` is 'k3', although the clamp itself is unconditional."""
    extra = tuple(c for t in operands if t.anchor is not None for c in t.anchor.conditions
                  if c not in anchor.conditions)
    # formed from a value the caller chose (`log_ratio.clamp(...)` after the chosen branch);
    # a detached operand gives no gradient, so only the operands that carry one count if any does
    live = [t for t in operands if LP in symbols_of(t.expr)] or operands
    chosen = not anchor.chosen and any(t.anchor is not None and t.anchor.chosen
                                       and t.anchor.stack == anchor.stack for t in live)
    if not extra and not chosen:
        return anchor
    return anchor.with_conditions(anchor.conditions + tuple(dict.fromkeys(extra)), chosen)


@functools.lru_cache(maxsize=4096)
@lru_cache(maxsize=16384)
def _opaque(expr: tm.Term) -> bool:
    """Whether `expr` holds a call of a function the analysis cannot read (`_call_function`)."""
    return any(isinstance(node, tm.Undefined) and node.name.startswith("call_") for node in expr.preorder())


def _call_function(name: str) -> type:
    """The unknown function `call_<name>` (the name made an identifier, at most 30 characters)."""
    safe = "".join(ch if ch.isalnum() else "_" for ch in name)[:30] or "f"
    return tm.Function(f"call_{safe}")


class Algebra:
    """Expression building for one analysed file (shared by all frames)."""

    def __init__(self) -> None:
        self.table = SymbolTable()
        self.kterms: dict[tm.Symbol, KLTerm] = {}
        self._wrapped: dict[tuple, tm.Symbol] = {}
        self._detached: dict[tm.Symbol, tm.Symbol] = {}
        self._kl_cache: dict = {}
        self._kl_cache_size = 0
        self.sizes = SizeBound(self.table)
        self._estimators: dict = {}  # value -> its EstimatorMatch or None (`wrap`)

    # -- constructors -----------------------------------------------------------------------
    def opaque(self, name: str, positive: bool = True) -> Tensor:
        return Tensor(self.table.fresh(name or "t", positive=positive) if positive else self.table.fresh(name or "t", real=True))

    def number(self, value: float) -> Tensor:
        return Tensor(_literal_number(type(value), value))

    # -- classification helpers -------------------------------------------------------------
    def is_kl_candidate(self, t: Tensor) -> bool:
        """Pure (log-probs, numbers, reductions of those) and depends on the reference."""
        return self.table.is_pure(t.expr) and REF in self.table.role_symbols(t.expr)

    def has_roles(self, expr: tm.Term) -> bool:
        return bool(self.table.role_symbols(expr)) or bool(self.kl_symbols(expr))

    def kl_symbols(self, expr: tm.Term) -> frozenset[tm.Symbol]:
        """KL-term symbols in `expr`, looking through reductions (memoised)."""
        cached = self._kl_cache.get(expr)
        if cached is None or len(self.kterms) != self._kl_cache_size:
            if len(self.kterms) != self._kl_cache_size:
                self._kl_cache.clear()
                self._kl_cache_size = len(self.kterms)
            cached = self._kl_cache[expr] = frozenset(self._kl_symbols(expr))
        return cached

    def _kl_symbols(self, expr: tm.Term) -> set[tm.Symbol]:
        found: set[tm.Symbol] = set()
        stack, seen = [expr], set()
        while stack:
            current = stack.pop()
            for symbol in symbols_of(current):
                if symbol in self.kterms:
                    found.add(symbol)
                elif symbol in self.table.reductions and symbol not in seen:
                    seen.add(symbol)
                    stack.append(self.table.reductions[symbol].inner)
        return found

    def contains(self, expr: tm.Term, target: tm.Term) -> bool:
        """Whether `target` is a sub-expression of `expr`, looking into KL terms and reductions
        (structurally: `cumsum(x) - x` still contains `x`, which a per-token expansion cancels)."""
        stack, seen = [expr], set()
        while stack:
            node = stack.pop()
            if node == target:
                return True
            if node in seen:
                continue
            seen.add(node)
            if node.is_Symbol:
                if node in self.kterms and self.kterms[node].expr != node:
                    stack.append(self.kterms[node].expr)
                elif node in self.table.reductions:
                    stack.append(self.table.reductions[node].inner)
                continue
            stack.extend(node.args)
        return False

    def live(self, expr: tm.Term) -> bool:
        """Carries the policy's gradient (directly or through a tracked KL term)."""
        if LP in self.table.role_symbols(expr):
            return True
        return any(LP in self.table.role_symbols(self.kterms[k].expr) for k in self.kl_symbols(expr))

    # -- KL terms -------------------------------------------------------------------------
    def wrap(self, t: Tensor) -> tm.Term:
        """The expression to use when `t` meets other terms: a KLTerm symbol if `t` is a KL
        estimate (by value), else `t.expr` unchanged."""
        if t.anchor is None or not self.is_kl_candidate(t):
            return t.expr
        match = self._estimators.get(t.expr, _UNKNOWN)
        if match is _UNKNOWN:  # a function of the value alone (reductions never change)
            match = classify_value(t.expr, self.table) or self._surrogate(t.expr)
            self._estimators[t.expr] = match
        if match is None:
            return t.expr
        key = (t.expr, t.anchor)
        symbol = self._wrapped.get(key)
        if symbol is None:
            symbol = self.table.fresh("K", "kl_term", real=True)
            self._wrapped[key] = symbol
            per_token = bool(symbols_of(t.expr) & ROLE_SYMBOLS)
            self.kterms[symbol] = KLTerm(symbol, t.expr, match, t.anchor, t.trace, t.call_sites, per_token=per_token,
                                         assumed=t.assumed, reduced=t.reduced)
        else:
            term = self.kterms[symbol]
            if term.assumed and not t.assumed:
                term.assumed = False  # a helper's estimate first met with parameters named as log-probs, now with real ones
            if t.call_sites != term.call_sites and t.call_sites not in term.other_call_sites \
                    and len(term.other_call_sites) < 8:
                term.other_call_sites.append(t.call_sites)
        return symbol

    def _surrogate(self, expr: tm.Term) -> EstimatorMatch | None:
        """A score-function surrogate of the KL (`logp * stopgrad(reward-to-go of d)`): not a KL
        value, but its gradient coefficient is the log-ratio (per token or credited)."""
        if LP not in symbols_of(expr) and not any(LP in self.table.role_symbols(r.inner) for r in self.table.reductions_in(expr)):
            return None
        coefficient = classify_coefficient(expr, self.table)
        if coefficient.kind in ("reverse", "sequence"):
            return EstimatorMatch("surrogate", 1.0)
        return None

    def analytic_kl(self, live: bool, anchor: Anchor, assumed: bool = False) -> Tensor:
        """A per-token analytic KL(pi || ref) over the vocabulary (kl_divergence, sum p log p/q);
        `assumed`: the policy's gradient comes from a name (a parameter `logp`)."""
        symbol = self.table.fresh("K", "kl_term", real=True)
        expr = ANALYTIC_KL(LP if live else LPD, REF)
        self.kterms[symbol] = KLTerm(symbol, expr, EstimatorMatch("analytic", 1.0), anchor, (), (), per_token=True,
                                     assumed=assumed)
        return Tensor(symbol)

    def named_kl(self, name: str, anchor: Anchor, per_token: bool) -> Tensor:
        """A tensor named as a KL estimate whose form is not visible (e.g. a parameter `kl`)."""
        symbol = self.table.fresh("Kp", "named_kl", real=True)
        self.kterms[symbol] = KLTerm(symbol, symbol, None, anchor, (), (), per_token=per_token)
        return Tensor(symbol)

    def mark_entry(self, expr: tm.Term, other: tm.Term, anchor: Anchor) -> None:
        """Record where each KL term of `expr` is first added to a different term `other`."""
        if other.is_number:
            return
        mine, theirs = self.kl_symbols(expr), self.kl_symbols(other)
        for symbol in mine - theirs:
            term = self.kterms[symbol]
            if term.entry is None:
                term.entry = anchor

    # -- operations ----------------------------------------------------------------------------
    def detach(self, t: Tensor) -> Tensor:
        return t.with_(expr=self.detach_expr(t.expr))

    def detach_expr(self, expr: tm.Term) -> tm.Term:
        if not self.live(expr):
            return expr
        mapping: dict[tm.Symbol, tm.Term] = {}
        for symbol in symbols_of(expr):
            if symbol == LP:
                mapping[symbol] = LPD
            elif symbol in self.table.reductions and self.live(self.table.reductions[symbol].inner):
                mapping[symbol] = self._detached_symbol(symbol, lambda s: self.table.reduce(
                    self.detach_expr(self.table.reductions[s].inner), self.table.reductions[s].kind))
            elif symbol in self.kterms and self.live(self.kterms[symbol].expr):
                mapping[symbol] = self._detached_symbol(symbol, self._detached_term)
        return expr.xreplace(mapping) if mapping else expr

    def _detached_symbol(self, symbol: tm.Symbol, make: Callable[[tm.Symbol], tm.Symbol]) -> tm.Symbol:
        if symbol not in self._detached:
            self._detached[symbol] = make(symbol)
        return self._detached[symbol]

    def _detached_term(self, symbol: tm.Symbol) -> tm.Symbol:
        term = self.kterms[symbol]
        new = self.table.fresh("K", "kl_term", real=True)
        self.kterms[new] = KLTerm(new, self.detach_expr(term.expr), term.estimator, term.anchor, term.trace,
                                  term.call_sites, per_token=term.per_token, reduced=term.reduced)
        return new

    def reduce(self, t: Tensor, kind: str = "sum", at: tuple[Anchor, ...] | None = None) -> Tensor:
        """`t` reduced over tokens (`sum`) or credited from the end (`rtg`). `at`, the call stack
        ending with the reducing call, is recorded as the first reduction of the KL estimates
        `t` carries (`Reduced`)."""
        if t.kind == "mask":
            return Tensor(self.table.fresh("count", positive=True), kind="count")
        if t.expr.is_number:
            return t.with_(kind=None) if kind == "sum" else t
        result = t.with_(expr=self.table.reduce(t.expr, kind), kind=None, vocab=False)
        if at:
            event = Reduced(kind, at)
            for symbol in symbols_of(t.expr):
                term = self.kterms.get(symbol)
                if term is not None and term.reduced is None:
                    term.reduced = event
            if t.anchor is not None and t.reduced is None and self.has_roles(t.expr):
                result = result.with_(reduced=event)
        return result

    def unary(self, t: Tensor, fn: Callable[[tm.Term], tm.Term], anchor: Anchor, keep_anchor: bool = False) -> Tensor:
        """An elementwise function; a pure operand stays pure with the anchor moved here."""
        pure = self.table.is_pure(t.expr) and self.has_roles(t.expr)
        try:
            expr = self.bound(fn(t.expr if pure else self.wrap(t)))
        except (TypeError, ValueError, ZeroDivisionError):
            expr = self.table.fresh("f", real=True)
        if pure and not keep_anchor:
            return t.with_(expr=expr, anchor=_conditioned(anchor, t), trace=self._trace(t), kind=None, call_sites=(),
                           reduced=None)
        return t.with_(expr=expr, kind=None)

    def clamp(self, t: Tensor, anchor: Anchor) -> Tensor:
        if t.kind == "count":
            return t
        return self.unary(t, Clamp, anchor)

    def binary(self, op: str, a: Tensor, b: Tensor, anchor: Anchor) -> Tensor:
        """`a op b` for op in + - * / ** (masks multiply and counts divide as identities; logits
        minus their log-sum-exp are log-probs)."""
        if op == "-" and b.kind == "log_normaliser":
            result = self.binary(op, a, b.with_(kind=None), anchor)
            return result.with_(space="logprob") if a.kind is None and a.space in ("logits", None) else result
        if op == "-" and b.kind == "vocab_max" and a.space == "logits" and self._same_distribution(a, b):
            return a  # softmax is invariant to a per-row shift of the logits (the stable log-softmax)
        if op == "/" and b.kind == "partition" and a.kind == "exp_logits" and self._same_distribution(a, b):
            return a.with_(space="prob", vocab=True, kind=None)  # exp(logits) / sum(exp(logits)): the softmax
        if op == "+" and (a.space == "prob") != (b.space == "prob"):
            prob, other = (a, b) if a.space == "prob" else (b, a)
            if other.expr.is_number and 0 < other.expr < EPSILON_BOUND:
                return self.clamp(prob, anchor)  # `p + 1e-8` inside a log: a floor, as `p.clamp(min=1e-8)`
        if op == "*" and (a.kind == "one_hot") != (b.kind == "one_hot"):
            chosen = b if a.kind == "one_hot" else a
            if chosen.vocab and chosen.space in ("logprob", "prob", "logits"):
                return chosen.with_(kind="one_hot_selected")  # the chosen class's entry, once summed over classes
        if op == "*" and b.kind == "mask" and a.kind != "mask":
            return a
        if op == "*" and a.kind == "mask" and b.kind != "mask":
            return b
        if op == "/" and b.kind == "count":
            return a
        if op in "*/" and a.space == "logits" and not self.has_roles(b.expr):
            return a  # temperature scaling keeps the logits of the same policy
        if op == "*" and b.space == "logits" and not self.has_roles(a.expr):
            return b
        if a.kind == "count" and b.kind == "count":
            return Tensor(self.table.fresh("count", positive=True), kind="count")
        if op == "*":
            a, b = named_weight(self, a, b), named_weight(self, b, a)
        if plain(a) and plain(b) and not a.expr.is_Number and not b.expr.is_Number:
            # opaque values combine into an opaque value: its structure never matters to the rules
            positive = op != "-" and a.expr.is_positive is True and b.expr.is_positive is True
            return Tensor(self.table.fresh("t", **({"positive": True} if positive else {"real": True})),
                          vocab=a.vocab or b.vocab)
        # an unknown function of the log-probs (`pg_loss_fn(logp)`, a callback) is no estimate:
        # a pure estimate that meets it is tracked as a KL term, as when it meets any other term
        pure_a = self.table.is_pure(a.expr) and not _opaque(a.expr)
        pure_b = self.table.is_pure(b.expr) and not _opaque(b.expr)
        roles_a, roles_b = self.has_roles(a.expr), self.has_roles(b.expr)
        if pure_a and pure_b and (roles_a or roles_b) and not self._weighted_detached_estimate(op, a, b):
            expr = self.bound(self._apply(op, a.expr, b.expr))
            if op in "*/" and (roles_a != roles_b) and (b.anchor is None if roles_a else a.anchor is None):
                # scaling by a number keeps the estimate where it was formed
                kept = a if roles_a else b
                return kept.with_(expr=expr)
            trace = self._trace(a) + self._trace(b) if roles_a and roles_b else self._trace(a if roles_a else b)
            space = a.space if roles_a and not roles_b else (b.space if roles_b and not roles_a else None)
            return Tensor(expr, _conditioned(anchor, a, b), trace[-MAX_TRACE:], space=space, vocab=a.vocab or b.vocab,
                          assumed=(a.assumed and roles_a) or (b.assumed and roles_b),
                          named=(a.named or not roles_a) and (b.named or not roles_b))
        left, right = self.wrap(a), self.wrap(b)
        if op in "+-":
            self.mark_entry(left, right, anchor)
            self.mark_entry(right, left, anchor)
        expr = self.bound(self.compress(self._apply(op, left, right)))
        space = a.space if b.expr.is_number or not roles_b else None
        return Tensor(expr, space=space, vocab=a.vocab or b.vocab,
                      named=(roles_a or roles_b) and (a.named or not roles_a) and (b.named or not roles_b))

    def _same_distribution(self, a: Tensor, b: Tensor) -> bool:
        """`b` depends on the log-probs of the same policies as `a`, detached or not."""
        def policies(t: Tensor) -> frozenset:
            return frozenset(LP if s == LPD else s for s in self.table.role_symbols(t.expr))
        return bool(policies(b)) and policies(b) <= policies(a)

    def _weighted_detached_estimate(self, op: str, a: Tensor, b: Tensor) -> bool:
        """`ratio * stopgrad(kl)`: a KL estimate without gradient times a live factor that does
        not involve the reference (a ratio or the log-probs). The estimate stays a KL term of its
        own, a coefficient of the score function (a reward), instead of forming a new estimate.
        A reduced estimate (`logp * stopgrad(reward-to-go of d)`) is left to the surrogate forms.
        So does a live estimate times the log-probs themselves (`score_function_form`): the
        REINFORCE spelling of a KL reward that was not detached (not `k3 * ratio`, a weighted loss)."""
        if op != "*":
            return False
        for estimate, factor in ((a, b), (b, a)):
            if (estimate.anchor is not None and self.is_kl_candidate(estimate) and not self.live(estimate.expr)
                    # a credited surrogate (the reference only inside a reward-to-go) stays one
                    and (not self.table.reductions_in(estimate.expr) or REF in symbols_of(estimate.expr))
                    and LP in self.table.role_symbols(factor.expr)
                    and REF not in self.table.role_symbols(factor.expr)
                    and classify_value(estimate.expr, self.table) is not None):
                return True
            if (estimate.anchor is not None and self.is_kl_candidate(estimate) and self.live(estimate.expr)
                    and not any(r.kind == "rtg" for r in self.table.reductions_in(estimate.expr))
                    and self.score_function_form(factor.expr)
                    and classify_value(estimate.expr, self.table) is not None):
                return True  # `kl * logp` with a live kl: a REINFORCE weight that still carries gradient
        return False

    def score_function_form(self, expr: tm.Term) -> bool:
        """The policy's log-probs as a score function: polynomial in the live log-prob (summed or
        not), no reference, no exponential of it (an exponential is a ratio: an importance
        weight, not the score function)."""
        roles = self.table.role_symbols(expr)
        if LP not in roles or REF in roles:
            return False
        expanded = self.table.expand_reductions(expr)
        return not any(isinstance(node, (tm.exp, tm.log, tm.Applied)) and LP in node.free_symbols
                       for node in tm.preorder_traversal(expanded))

    def compress(self, expr: tm.Term) -> tm.Term:
        """Large expressions without KL terms (policy-gradient surrogates, normalisers) keep only
        which log-probs they depend on: their structure never matters to the rules."""
        if expr.is_Atom or self.sizes.size(expr) <= COMPRESS_OPS or self.kl_symbols(expr):
            return expr
        roles = sorted(self.table.role_symbols(expr), key=str)
        if not roles:
            return self.table.fresh("t", positive=True)
        return _TERM_OF(*roles)

    def bound(self, expr: tm.Term) -> tm.Term:
        """`expr`, with its innermost parts made opaque if it is too large to analyse in
        polynomial time (`kllint.analysis.bounded`)."""
        return self.sizes.bound(expr, self.kl_symbols)

    @staticmethod
    def _apply(op: str, x: tm.Term, y: tm.Term) -> tm.Term:
        try:
            return OPERATORS[op](x, y)
        except (TypeError, ValueError, ZeroDivisionError, KeyError, OverflowError):
            return _OP(x, y)

    @staticmethod
    def _trace(t: Tensor) -> tuple:
        if t.anchor is None:
            return t.trace
        return (t.trace + (Formed(t.anchor, t.expr),))[-MAX_TRACE:]

    def opaque_call(self, name: str, args: list[Tensor]) -> Tensor:
        """An unknown function of tensors: keeps the dependencies, not the meaning."""
        exprs = [self.wrap(a) for a in args if self.has_roles(a.expr)]
        if not exprs:
            return self.opaque(name)
        return Tensor(self.bound(_call_function(name)(*exprs)))
