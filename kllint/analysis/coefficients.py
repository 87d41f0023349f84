"""Gradient coefficients: `c = dL/dlogp` of a loss term, taken symbolically (reductions by the
chain rule) and classified.

Source of the rules: Y. Tang, R. Munos, "On a few pitfalls in KL divergence gradient estimation
for RL", arXiv:2506.09477 (2025), sections 3-4: a term `L(logp, ref, old)` differentiated through
`logp` only has the expected gradient of a score-function estimator with coefficient
`c = dL/dlogp`; it is the reverse-KL gradient iff `c = (pi/pi_old) * (d + const)`.
"""
from __future__ import annotations

from dataclasses import dataclass

from kllint.analysis import terms as tm

from kllint.analysis.bounded import substitute_in_order
from kllint.analysis.estimators import on_policy_value
from kllint.analysis.numeric import POINTS, affine, evaluate, is_constant, is_zero, proportional
from kllint.analysis.symbolic import LOGRATIO, LP, LPD, OLD, ON_POLICY, REF, ROLE_SYMBOLS, SymbolTable, strip_clamps


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


def _derivative(expr: tm.Term, table: SymbolTable, memo: dict | None = None) -> tm.Term:
    """d expr / d logp_t, with reductions differentiated by the chain rule (their inner value
    at token t). The result may contain reduction symbols. `memo`: the derivatives of the inner
    expressions of reductions already taken (nested reductions share them)."""
    memo = {} if memo is None else memo
    direct = tm.diff(expr, LP)
    total = direct
    for reduction in table.reductions_in(expr):
        inner_grad = memo.get(reduction.symbol)
        if inner_grad is None:
            inner_grad = memo[reduction.symbol] = _derivative(reduction.inner, table, memo)
        if inner_grad == 0:
            continue
        total += tm.diff(expr, reduction.symbol) * inner_grad
    return total


def _exp_factors(node: tm.Term) -> tuple[list[tm.Term], tm.Term] | None:
    """For a product of two or more exponentials and other factors, those exponentials and the
    exponent of their product (`exp(logp) / exp(old)` is `exp(logp - old)`); else None."""
    if not isinstance(node, tm.Mul):
        return None
    exps = [factor for factor in node.args if isinstance(factor, tm.exp)]
    return (exps, tm.Add(*(factor.args[0] for factor in exps))) if len(exps) > 1 else None


def _exponents(node: tm.Term) -> list[tm.Term]:
    """The exponents `node` raises e to: its argument for `exp(a)`, the combined exponent of a
    product's exponential factors (`_exp_factors`)."""
    if isinstance(node, tm.exp):
        return [node.args[0]]
    combined = _exp_factors(node)
    return [combined[1]] if combined else []


def _ratio_forms(expr: tm.Term) -> bool:
    """Whether `expr` contains an importance weight exp(logp - old) (old: rollout or detached),
    also spelled as a quotient of exponentials `pi / pi_old`."""
    for node in tm.preorder_traversal(expr):
        for exponent in _exponents(node):
            arg = tm.expand(exponent)
            live = arg.coeff(LP) == 1 or arg.coeff(LPD) == 1
            behaviour = arg.coeff(OLD) == -1 or (arg.coeff(LPD) == -1 and arg.coeff(LP) == 1)
            if live and behaviour and REF not in arg.free_symbols:
                return True
    return False


def sequence_ratio(expr: tm.Term, table: SymbolTable) -> bool:
    """exp(reduction of (logp - old)) multiplying per-token terms: a sequence-level IS ratio."""
    pending, seen, nodes = [expr], set(), []
    while pending:
        current = pending.pop()
        for node in tm.preorder_traversal(current):
            nodes.append(node)
            reduction = table.reductions.get(node)
            if reduction is not None and node not in seen:
                seen.add(node)
                pending.append(reduction.inner)
    def is_sequence_exponent(exponent: tm.Term) -> bool:
        """A sum over tokens of (logp - old): one reduction, or a combination of reductions
        (`sum(logp) - sum(old)`), with no per-token role outside them."""
        if exponent.free_symbols & ROLE_SYMBOLS:
            return False
        if not any(s in table.reductions and table.reductions[s].kind == "sum" for s in exponent.free_symbols):
            return False
        inner_roles = table.role_symbols(table.expand_reductions(exponent))
        return LP in inner_roles and (OLD in inner_roles or LPD in inner_roles) and REF not in inner_roles

    def is_sequence_weight(node: tm.Term) -> bool:
        return isinstance(node, tm.exp) and is_sequence_exponent(node.args[0])

    for node in nodes:
        if not isinstance(node, tm.Mul):
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


def _classify_in(coefficient: tm.Term, variable: tm.Term) -> tuple[str, int]:
    """Kind and sign of a coefficient that is a function of the log-ratio `variable`."""
    if is_constant(coefficient):
        value = evaluate(coefficient, POINTS[0]) or 0.0
        if abs(value) < 1e-12:
            return "none", 1
        return "constant", 1 if value > 0 else -1
    scale = affine(coefficient, variable)
    if scale is not None:
        return "reverse", 1 if scale > 0 else -1
    scale = affine(coefficient, 1 - tm.exp(-variable))
    if scale is not None:
        return "forward", 1 if scale > 0 else -1
    return "other", 1


def classify_coefficient(expr: tm.Term, table: SymbolTable) -> Coefficient:
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
    sequence = tm.Symbol("D_sequence", real=True)
    mapping: dict[tm.Symbol, tm.Term] = {}
    for symbol in reductions:
        inner = on_policy_value(table.reductions[symbol].inner, table)
        if is_zero(inner):
            mapping[symbol] = tm.ZERO
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


_SUM_OF_REF = tm.Symbol("sum_ref", real=True)


def _unit_weights(expr: tm.Term, table: SymbolTable) -> dict[tm.Term, tm.Term]:
    """Sequence-level weights of `expr` that equal 1 on-policy (`exp(sum(logp - old))`, also as
    the quotient `exp(sum(logp)) / exp(sum(old))`), each mapped to what remains without it."""
    def unit(exponent: tm.Term) -> bool:
        return any(table.is_reduction(s) for s in exponent.free_symbols) and is_zero(on_policy_value(exponent, table))

    found: dict[tm.Term, tm.Term] = {}
    for node in tm.preorder_traversal(expr):
        if isinstance(node, tm.exp) and unit(node.args[0]):
            found[node] = tm.ONE
        else:
            combined = _exp_factors(node)
            if combined and not any(unit(f.args[0]) for f in combined[0]) and unit(combined[1]):
                found[node] = tm.Mul(*(f for f in node.args if f not in combined[0]))
    return found


def _linear_sum(inner: tm.Term, sequence: tm.Symbol) -> tm.Term | None:
    """The sum over tokens of a per-token value `a * logp + b * ref` (a, b numbers) in terms of
    the sequence log-ratio D = sum_t (logp_t - ref_t) and the sum of ref: a * D + (a + b) * sum_ref,
    so that `sum(logp) - sum(ref)` is D. None for any other value (a constant part included)."""
    a, b = tm.diff(inner, LP), tm.diff(inner, REF)
    if not (a.is_number and b.is_number) or inner.free_symbols - {LP, REF}:
        return None
    if not is_zero(tm.expand(inner - a * LP - b * REF)):
        return None
    return a * sequence + (a + b) * _SUM_OF_REF


def _sequence_weight(expr: tm.Term, table: SymbolTable) -> bool:
    """exp(sum_t (logp_t - old_t)): a sequence-level importance weight."""
    for node in tm.preorder_traversal(expr):
        for exponent in _exponents(node):
            argument = table.expand_reductions(exponent)
            if argument != exponent and _ratio_forms(tm.exp(argument)):
                return True
    return False
