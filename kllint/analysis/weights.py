"""Weights of a KL estimate, decided by what they do, not by their names.

A value known only by a KL-ish name (a parameter `KL_COEFFICIENT`, an attribute `kl_scale`: a
named KL whose form is not visible, no log-prob in it) that multiplies a real estimate (a KL of a
seen form) is that estimate's coefficient, not a second KL: a weight is whatever scales the
estimate and is not itself derived from log-probs (design.md, item 3). A named KL that multiplies
the log-probs themselves (a REINFORCE weight) stays a KL.
"""
from __future__ import annotations

from typing import Any

from kllint.analysis.estimators import classify_value
from kllint.analysis.values import Tensor


def named_weight(algebra: Any, weight: Tensor, other: Tensor) -> Tensor:
    """`weight`, or an opaque positive coefficient in its place when it is known only by a KL-ish
    name and scales `other`, a real estimate."""
    symbols = algebra.kl_symbols(weight.expr)
    if (not symbols or algebra.table.role_symbols(weight.expr)
            or any(algebra.kterms[s].estimator is not None or algebra.kterms[s].expr != s for s in symbols)):
        return weight
    if not real_estimate(algebra, other):
        return weight
    return Tensor(algebra.table.fresh("coef", positive=True), vocab=weight.vocab)


def real_estimate(algebra: Any, t: Tensor) -> bool:
    """Whether `t` is or carries a KL estimate of a seen form."""
    if t.anchor is not None and algebra.is_kl_candidate(t) and classify_value(t.expr, algebra.table) is not None:
        return True
    return any(algebra.kterms[s].estimator is not None for s in algebra.kl_symbols(t.expr))
