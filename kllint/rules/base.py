"""What rules share: the context that turns analysis anchors into diagnostics in the checked file."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

import sympy as sp
from sympy.core.function import AppliedUndef

from kllint.analysis.algebra import Algebra
from kllint.analysis.facts import KLTerm
from kllint.analysis.module import ModuleInfo
from kllint.analysis.values import Anchor, Condition
from kllint.diagnostics import Diagnostic, Estimate, Fix, TraceStep
from kllint.rules.registry import BY_CODE

ESTIMATOR_WORDS = {
    "k1": "k1 (the log-ratio logp - ref)",
    "k2": "k2 (0.5 * (logp - ref)**2)",
    "k3": "k3 (exp(ref - logp) - (ref - logp) - 1)",
    "k3-inverted": "inverted k3 (exp(logp - ref) - 1 - (logp - ref))",
    "abs": "abs(logp - ref)",
    "reference-ratio": "the ratio pi/pi_ref",
    "analytic": "the analytic KL(pi || ref) over the vocabulary",
    "surrogate": "the score-function KL surrogate logp * stopgrad(log-ratio)",
}


@dataclass
class RuleContext:
    """Per-file state for the rules: the entry module, the algebra, found diagnostics."""

    entry: ModuleInfo
    algebra: Algebra
    modules: dict[str, ModuleInfo] = field(default_factory=dict)
    name_roles: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)
    differentiating: set[str] = field(default_factory=set)  # functions whose results are differentiated
    carrying_calls: set[int] | None = None  # call sites that hand log-probs, KL or a model to a callee
    differentiated: set = field(default_factory=set)  # KL-term symbols found in a differentiated value
    named_rewards: dict = field(default_factory=dict)  # KL-term symbol -> the first reward fact storing it
    losses: list = field(default_factory=list)  # (loss fact, its value expanded), see `kllint.rules.flow`
    _pending: dict = field(default_factory=dict)
    _once: set = field(default_factory=set)

    def first(self, code: str, key: object) -> bool:
        """True the first time (code, key) is seen: for findings reported once per KL term."""
        if (code, key) in self._once:
            return False
        self._once.add((code, key))
        return True

    def localize(self, anchor: Anchor, call_sites: Iterable[Anchor] = (), call_stack: Iterable[Anchor] = (),
                 fallback: Anchor | None = None) -> tuple[Anchor, tuple[TraceStep, ...]] | None:
        """The primary location in the checked file: the anchor itself when it is in this file,
        else the call site in this file through which the value came (the anchor becomes a step).

        One root cause, one finding: when the estimate and its sink both lie in other modules, a
        call in this file only leads there; it is the place of the finding only if it hands the
        callee what the finding is made of (log-probs, a KL term, a network). Otherwise the
        finding belongs to the module of the estimate, which reports it when checked."""
        here = self.entry.display
        if anchor.path == here:
            return anchor, ()
        step = (anchor.step("the estimate is computed here (another module)"),)
        for site in call_sites:
            if site.path == here:
                return site, step
        sink_here = fallback is not None and fallback.path == here
        for site in reversed(tuple(call_stack)):
            if site.path == here:
                if sink_here or self.carrying_calls is None or site.node_id in self.carrying_calls:
                    return site, step
                break
        if sink_here:
            return fallback, step
        return None  # the finding belongs to another file, which reports it when checked

    def report(self, code: str, anchor: Anchor, message: str, help: str = "", trace: Iterable[TraceStep] = (),
               call_sites: Iterable[Anchor] = (), call_stack: Iterable[Anchor] = (), fix: Fix | None = None,
               estimate: Estimate | None = None, fallback: Anchor | None = None, variant: str = "") -> None:
        located = self.localize(anchor, call_sites, call_stack, fallback)
        if located is None:
            return
        primary, extra = located
        if primary is not anchor and fix is not None and fix.replacement:
            fix = Fix("display-only", fix.description)
        info = BY_CODE[code]
        steps = _dedupe(tuple(extra) + tuple(trace))
        key = (code, primary.span)
        when = condition_text(anchor.conditions)
        if key in self._pending:
            pending, whens, variants = self._pending[key]
            whens.append(when)
            variants.append(variant)
            # each further estimate merged into this finding keeps the step where it is formed
            if anchor is not primary and anchor.module is not None:
                step = anchor.step(f"{variant} estimate" if variant else "estimate")
                if (step.path, step.line) not in {(s.path, s.line) for s in pending.trace}:
                    self._pending[key] = (replace(pending, trace=pending.trace + (step,)), whens, variants)
            return
        diagnostic = Diagnostic(code, info.name, info.severity, self.entry.display, primary.span,
                                message, help, steps, fix, estimate)
        self._pending[key] = (diagnostic, [when], [variant])

    def diagnostics(self) -> list[Diagnostic]:
        """The findings, one per code and place; the configurations that lead to it are merged
        into the message (`when kl_loss_type is 'k3' or 'low_var_kl'; or when ...`)."""
        out = []
        for diagnostic, conditions, variants in self._pending.values():
            message = diagnostic.message
            kinds = [v for v in dict.fromkeys(variants) if v]
            if len(kinds) > 1:
                message += f" (estimators reaching here: {', '.join(sorted(kinds))})"
            if "" not in conditions:
                unique = list(dict.fromkeys(conditions))
                message += " (when " + "; or when ".join(unique[:4]) + ("; ..." if len(unique) > 4 else "") + ")"
            out.append(replace(diagnostic, message=message))
        return sorted(out, key=lambda d: d.sort_key)


def _dedupe(steps: tuple[TraceStep, ...]) -> tuple[TraceStep, ...]:
    seen: set[tuple[str, int]] = set()
    out = []
    for step in steps:
        key = (step.path, step.line)
        if key not in seen:
            seen.add(key)
            out.append(step)
    return tuple(out)


def condition_text(conditions: tuple[Condition, ...]) -> str:
    """"`kl_penalty` is 'low_var_kl' (configurable, project default 'kl')" for config-chosen code;
    empty when the code runs unconditionally."""
    if not conditions:
        return ""
    parts = [c.describe() for c in conditions[-2:]]
    defaults = {c.name: c.default for c in conditions if c.default is not None}
    text = " and ".join(parts)
    if defaults:
        text += " (configurable, project default " + ", ".join(f"`{k}` = {v!r}" for k, v in defaults.items()) + ")"
    return text


def sign_of(expr: sp.Expr) -> int:
    if expr.is_positive:
        return 1
    if expr.is_negative:
        return -1
    return 0


@dataclass(frozen=True)
class Place:
    """One occurrence of a KL term in a value: its sign there (0: unknown), how it is reduced
    (`none`, `sum` over tokens, `rtg` inside reward-to-go / returns), and whether it multiplies
    a term that carries the policy's gradient (then it is a score-function coefficient, a reward,
    and `reduced` counts only the reductions inside the coefficient). `affine`: linear but for
    functions the analysis cannot see into (`whiten(advantages)`). `token_coefficient`: the live
    factor multiplies it inside its own token reduction."""

    sign: int
    reduced: str
    coefficient_of_live: bool
    linear: bool = True
    affine: bool = True
    token_coefficient: bool = False


def occurrences(expr: sp.Expr, algebra: Algebra) -> dict[sp.Symbol, list[Place]]:
    """Where each KL term occurs in `expr`."""
    found: dict[sp.Symbol, list[Place]] = {}
    _walk_occurrences(expr, 1, "none", False, (True, True), 0, algebra, found, False)
    return found


def _walk_occurrences(node: sp.Expr, sign: int, reduced: str, live: bool, linear: tuple[bool, bool], depth: int,
                      algebra: Algebra, found: dict[sp.Symbol, list[Place]], live_here: bool) -> None:
    """`linear` is (linear, affine), see `Place`; `live_here`: a live factor multiplies the node
    inside the innermost reduction around it."""
    # a module-level function, not a nested one: a recursive closure is a reference cycle that
    # would keep the whole analysis of a file alive until the garbage collector runs
    if depth > 60:
        return
    if node in algebra.kterms:
        found.setdefault(node, []).append(Place(sign, reduced, live, *linear, live_here))
        return

    def walk(child: sp.Expr, child_sign: int, child_reduced: str, child_live: bool, keep: bool,
             child_here: bool, through_call: bool = False) -> None:
        child_linear = (linear[0] and keep, linear[1] and (keep or through_call))
        _walk_occurrences(child, child_sign, child_reduced, child_live, child_linear, depth + 1, algebra, found,
                          child_here)

    reduction = algebra.table.reductions.get(node)
    if reduction is not None:
        walk(reduction.inner, sign, "rtg" if reduction.kind == "rtg" or reduced == "rtg" else "sum", live, True,
             False)
        return
    if isinstance(node, sp.Add):
        for arg in node.args:
            walk(arg, sign, reduced, live, True, live_here)
    elif isinstance(node, sp.Mul):
        for index, arg in enumerate(node.args):
            others = sp.Mul(*(a for i, a in enumerate(node.args) if i != index))
            kl_factor = bool(algebra.kl_symbols(others))
            live_others = algebra.live(others)
            # a coefficient of the score function counts only the reductions inside it: the sum
            # over tokens of `logp_t * c_t` still gives each token its own coefficient
            coefficient = not live and live_others
            # whitening `(A - mean(A)) * rsqrt(var(A))`: a batch scale keeps A's terms affine
            scaled = kl_factor and all(_batch_scale(a, algebra) for i, a in enumerate(node.args)
                                       if i != index and algebra.kl_symbols(a))
            walk(arg, sign * sign_of(others), "none" if coefficient else reduced, live or live_others,
                 not kl_factor, live_here or live_others, through_call=scaled)
    elif isinstance(node, sp.Pow):
        base, exponent = node.args
        # a positive normaliser (x / n) keeps the term linear; x**2, 1/x do not
        walk(base, sign if exponent == 1 else 0, reduced, live, exponent == 1, live_here)
        walk(exponent, 0, reduced, live, False, live_here)
    else:
        opaque = isinstance(node, AppliedUndef) and str(node.func).startswith("call_") and len(node.args) == 1
        for arg in node.args:
            walk(arg, 0, reduced, live, False, live_here, through_call=opaque)


_SCALE_CALLS = frozenset({"call_rsqrt", "call_std", "call_var", "call_sqrt", "call_norm"})


def _batch_scale(factor: sp.Expr, algebra: Algebra) -> bool:
    """A positive batch statistic that scales a value: `rsqrt(var)`, `1 / (std + eps)`,
    `1 / sum(mask)` (advantage whitening and normalisers), not a per-token function."""
    if isinstance(factor, AppliedUndef):
        return str(factor.func) == "call_rsqrt"
    if isinstance(factor, sp.Pow) and factor.exp.is_number and factor.exp.is_negative:
        base = factor.base
        terms = base.args if isinstance(base, sp.Add) else (base,)
        return all(t.is_number or (isinstance(t, AppliedUndef) and str(t.func) in _SCALE_CALLS)
                   or (isinstance(t, sp.Pow) and t.exp == sp.Rational(1, 2) and _statistic(t.base, algebra))
                   or _statistic(t, algebra) for t in terms)
    return False


def _statistic(expr: sp.Expr, algebra: Algebra) -> bool:
    """A reduction (a batch sum or mean), a positive symbol (a token count) or a product of them."""
    if isinstance(expr, sp.Symbol):
        return algebra.table.is_reduction(expr) or bool(expr.is_positive)
    return isinstance(expr, sp.Mul) and all(a.is_number and a.is_positive or _statistic(a, algebra)
                                            for a in expr.args)


def term_steps(term: KLTerm, note: str) -> tuple[TraceStep, ...]:
    steps = tuple(anchor.step("computed here") for anchor in term.trace
                  if (anchor.path, anchor.span.line) != (term.anchor.path, term.anchor.span.line))
    steps += (term.anchor.step(note),)
    steps += tuple(site.step("returned from the helper to this call") for site in term.call_sites)
    steps += tuple(site.step("also returned from the helper to this call") for sites in term.other_call_sites
                   for site in sites)
    return steps


def estimator_words(term: KLTerm) -> str:
    if term.estimator is None:
        return "a KL estimate"
    return ESTIMATOR_WORDS.get(term.estimator.name, term.estimator.name)
