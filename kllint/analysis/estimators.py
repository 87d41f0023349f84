"""Estimators by value: Schulman's (2020) k1/k2/k3 and friends, in d = logp - ref, recognised
whatever their spelling by comparing the on-policy value with each template."""
from __future__ import annotations

from dataclasses import dataclass

from kllint.analysis import terms as tm

from kllint.analysis.bounded import substitute_in_order
from kllint.analysis.numeric import affine, proportional
from kllint.analysis.symbolic import LOGRATIO, LP, ON_POLICY, REF, SymbolTable, strip_clamps

_D = LOGRATIO
ESTIMATOR_TEMPLATES: tuple[tuple[str, tm.Term], ...] = (
    ("k1", _D),
    ("k2", _D ** 2 / 2),
    ("k3", tm.exp(-_D) - 1 + _D),
    ("k3-inverted", tm.exp(_D) - 1 - _D),
    ("abs", tm.Abs(_D)),
    ("reference-ratio", tm.exp(_D)),
)


@dataclass(frozen=True)
class EstimatorMatch:
    """A recognised estimator: its name, the constant factor and the constant offset
    (`value = scale * template + offset`). An offset changes neither the gradient of a loss nor,
    in expectation, the score-function gradient of a reward (E[grad log pi] = 0): k3 written
    without its `- 1` is still k3 to every rule."""

    name: str
    scale: float
    offset: bool = False


def on_policy_value(expr: tm.Term, table: SymbolTable) -> tm.Term:
    """The value of `expr` per token, on-policy: stop-gradients and `old` equal `logp`."""
    value = strip_clamps(table.expand_reductions(expr))
    return substitute_in_order(value, ON_POLICY)


def classify_value(expr: tm.Term, table: SymbolTable) -> EstimatorMatch | None:
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
    for name, template in ESTIMATOR_TEMPLATES:
        scale = affine(value, template)
        if scale is not None:
            return EstimatorMatch(name, scale, offset=True)
    return None
