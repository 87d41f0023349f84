"""The KL terms of a differentiated value, each with what the loss rules and the fixes read:
its gradient coefficient `c = dL/dlogp` (`kllint.analysis.coefficients.classify_coefficient`), the
signs it enters with, whether it is reduced over tokens and whether the samples are off-policy."""
from __future__ import annotations

from dataclasses import dataclass

from kllint.analysis.coefficients import Coefficient, classify_coefficient
from kllint.analysis.facts import KLTerm, LossFact, SinkKind
from kllint.analysis.symbolic import LPD, OLD
from kllint.rules.base import RuleContext, occurrences


@dataclass
class LossTerm:
    """One KL term in one differentiated value, with everything the loss rules need."""

    term: KLTerm
    fact: LossFact
    coefficient: Coefficient
    signs: list[int]
    reduced: bool
    off_policy: bool
    live_elsewhere: bool
    uses_old: bool = False  # the loss reads the rollout (old) log-probs
    detached_policy: bool = False  # the term reads the policy's log-probs detached too

    @property
    def inverted(self) -> bool:
        """Whether the term enters the minimised loss with a negative sign everywhere."""
        scale = self.term.estimator.scale if self.term.estimator else 1.0
        return bool(self.signs) and all(s * scale < 0 for s in self.signs)


def loss_terms(fact: LossFact, ctx: RuleContext) -> list[LossTerm]:
    """The KL terms of a loss, each with its coefficient and how the loss uses it."""
    algebra = ctx.algebra
    expr = algebra.wrap(fact.loss)
    found = occurrences(expr, algebra)
    terms = []
    for symbol, all_places in found.items():
        term = algebra.kterms[symbol]
        if term.estimator is None:
            continue
        penalties = [p for p in all_places if not p.coefficient_of_live]
        places = [p for p in penalties if p.linear or term.estimator.name == "reference-ratio"]
        if not places or len(places) < len(penalties):
            # only inside nonlinear functions (DPO's logsigmoid of log-ratios: not a penalty), or
            # also there (`f(kl) - kl`, an unknown `f`): the loss's gradient through it is not
            # its own coefficient, so no estimate rule judges it
            continue
        rest = algebra.table.expand_reductions(expr.subs(symbol, 0)) if expr.has(symbol) else expr
        rest_roles = algebra.table.role_symbols(rest)
        for other in algebra.kl_symbols(rest):
            rest_roles |= algebra.table.role_symbols(algebra.kterms[other].expr)
        if term.estimator.name == "analytic":
            coefficient = Coefficient("reverse" if algebra.live(term.expr) else "none")
        else:
            coefficient = classify_coefficient(term.expr, algebra.table)
        reduced = any(p.reduced != "none" for p in places) or any(
            r.kind == "sum" for r in algebra.table.reductions_in(term.expr))
        terms.append(LossTerm(
            term, fact, coefficient, [p.sign for p in places], reduced,
            off_policy=OLD in rest_roles or bool(fact.epoch_loop),
            # a function given to a grad transform (JAX, MLX) is differentiated whatever it returns:
            # a constant penalty there is silently a zero gradient, not an error as `backward()` on
            # a value without gradient would be
            live_elsewhere=algebra.live(rest) or fact.kind is SinkKind.GRAD_TRANSFORM,
            uses_old=OLD in rest_roles,
            detached_policy=LPD in algebra.table.role_symbols(term.expr),
        ))
    return terms
