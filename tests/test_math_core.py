"""Table-driven tests of the math core (kllint/analysis/symbolic.py, estimators.py and coefficients.py),
independent of fixtures.

Each row is one spelling of a KL term over the symbols `LP` (policy log-prob, live), `LPD`
(the same, detached), `REF` (reference) and `OLD` (rollout policy), built with a `SymbolTable`
for reductions over tokens (`sum`; `rtg` for reward-to-go). Two checks per row:

- the value: `classify_value` names the estimator (k1, k2, k3, k3-inverted, abs,
  reference-ratio, or None) and its scale (`value = scale * template`);
- the gradient: `classify_coefficient` gives the coefficient `c = dL/dlogp` its kind (`none`,
  `constant`: zero expected gradient, `reverse`: the log-ratio, `forward`: `1 - ref/pi`,
  `sequence`: credited with the sequence's log-ratio, `other`), sign, `weighted` (an importance
  weight `pi/pi_old`), `sequence_ratio` (a sequence-level ratio on per-token terms) and level.

The expected answers are the theory's (docs/theory.md and Tang & Munos 2025, table 1), not
what the code happens to return: a spelling the code gets wrong is marked
`xfail(strict=True)` with the reason, so that fixing it turns the row into a failure to update.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
from fractions import Fraction

from kllint.analysis import terms as tm

from kllint.analysis.coefficients import Coefficient, classify_coefficient
from kllint.analysis.estimators import ESTIMATOR_TEMPLATES, EstimatorMatch, classify_value
from kllint.analysis.symbolic import LP, LPD, OLD, REF, Clamp, SymbolTable

D = LP - REF  # the log-ratio d
ND = REF - LP  # log(ref / pi), as code often writes it
K2 = D ** 2 / 2
K3 = tm.exp(-D) - 1 + D
R = tm.exp(REF - LP)  # ref / pi
PI, PREF, POLD = tm.exp(LP), tm.exp(REF), tm.exp(OLD)
W = tm.exp(LP - OLD)  # live importance weight pi / pi_old


def detach(expr: tm.Term) -> tm.Term:
    """`expr.detach()` for an expression without reductions: the policy log-prob loses its gradient."""
    return expr.xreplace({LP: LPD})


WD = detach(W)


@dataclass(frozen=True)
class Row:
    """One spelling: `build(table)` gives the expression; the expected value estimator (name
    and scale, or None) and coefficient; `value_bug` / `gradient_bug`: why the code is wrong."""

    id: str
    build: Callable[[SymbolTable], tm.Term]
    estimator: str | None
    scale: float | None
    kind: str
    sign: int = 1
    weighted: bool = False
    sequence_ratio: bool = False
    level: str = "token"
    value_bug: str | None = None
    gradient_bug: str | None = None


def _sum(t: SymbolTable, inner: tm.Term) -> tm.Term:
    return t.reduce(inner, "sum")


def _rtg(t: SymbolTable, inner: tm.Term) -> tm.Term:
    return t.reduce(inner, "rtg")


ROWS = [
    # --- k1: value d, coefficient 1 (zero expected gradient) --------------------------------------
    Row("k1: logp - ref", lambda t: D, "k1", 1, "constant"),
    Row("k1: log(pi) - log(pi_ref)", lambda t: tm.log(PI) - tm.log(PREF), "k1", 1, "constant"),
    Row("k1: -(ref - logp)", lambda t: -(REF - LP), "k1", 1, "constant"),
    Row("k1: log(pi / pi_ref)", lambda t: tm.log(PI / PREF), "k1", 1, "constant"),
    Row("k1 negated: ref - logp", lambda t: ND, "k1", -1, "constant", sign=-1),
    Row("k1 scaled: 0.1 * (logp - ref)", lambda t: tm.Num(0.1) * D, "k1", 0.1, "constant"),
    Row("k1 detached", lambda t: detach(D), "k1", 1, "none"),
    Row("k1 summed over tokens", lambda t: _sum(t, D), "k1", 1, "constant"),
    Row("k1 plus a constant: logp - ref + 1", lambda t: D + 1, "k1", 1, "constant"),
    Row("k1 minus a constant: 0.5 * (logp - ref) - 2", lambda t: tm.Num(Fraction(1, 2)) * D - 2, "k1", 0.5, "constant"),
    Row("k1 + k2: constant offset vanishes", lambda t: D + K2, None, None, "reverse"),
    Row("no reference: logp - old", lambda t: LP - OLD, None, None, "constant"),
    Row("no reference: exp(logp - old)", lambda t: W, None, None, "constant", weighted=True),
    # --- k2: value d^2 / 2, coefficient d (reverse) ---------------------------------------------
    Row("k2: 0.5 * (logp - ref) ** 2", lambda t: tm.Num(Fraction(1, 2)) * D ** 2, "k2", 1, "reverse"),
    Row("k2: (ref - logp) ** 2 / 2", lambda t: ND ** 2 / 2, "k2", 1, "reverse"),
    Row("k2: x * x * 0.5", lambda t: D * D * tm.Num(0.5), "k2", 1, "reverse"),
    Row("k2 unhalved: (logp - ref) ** 2", lambda t: D ** 2, "k2", 2, "reverse"),
    Row("k2: log(pi / pi_ref) ** 2 / 2", lambda t: tm.log(PI / PREF) ** 2 / 2, "k2", 1, "reverse"),
    Row("k2: (log(pi) - ref) ** 2 / 2", lambda t: (tm.log(PI) - REF) ** 2 / 2, "k2", 1, "reverse"),
    Row("k2 scaled: 0.01 * k2", lambda t: tm.Num(0.01) * K2, "k2", 0.01, "reverse"),
    Row("k2 / 8 of the square", lambda t: ND ** 2 / 8, "k2", 0.25, "reverse"),
    Row("k2 negated (sign inverted)", lambda t: -K2, "k2", -1, "reverse", sign=-1),
    Row("k2 of a clamped log-ratio", lambda t: Clamp(D) ** 2 / 2, "k2", 1, "reverse"),
    Row("k2 of clamp(ref - logp)", lambda t: tm.Num(Fraction(1, 2)) * Clamp(ND) ** 2, "k2", 1, "reverse"),
    Row("k2 masked mean over tokens", lambda t: _sum(t, K2), "k2", 1, "reverse"),
    Row("k2 detached", lambda t: detach(K2), "k2", 1, "none"),
    # --- k3: value r - 1 - log r, coefficient 1 - r (forward) --------------------------------------
    Row("k3: exp(-d) - 1 + d", lambda t: K3, "k3", 1, "forward"),
    Row("k3: exp(ref - logp) - (ref - logp) - 1", lambda t: tm.exp(ND) - ND - 1, "k3", 1, "forward"),
    Row("k3: (r - 1) - log(r)", lambda t: (R - 1) - tm.log(R), "k3", 1, "forward"),
    Row("k3: exp(ref)/exp(logp) - 1 - log(exp(ref)/exp(logp))",
        lambda t: PREF / PI - 1 - tm.log(PREF / PI), "k3", 1, "forward"),
    Row("k3: pi_ref/pi - log(pi_ref/pi) - 1", lambda t: PREF / PI - tm.log(PREF / PI) - 1, "k3", 1, "forward"),
    Row("k3: exp(ref) * exp(-logp) - 1 + (logp - ref)", lambda t: PREF * tm.exp(-LP) - 1 + D, "k3", 1, "forward"),
    Row("k3 doubled", lambda t: 2 * K3, "k3", 2, "forward"),
    Row("k3 halved: 0.5 * (r - 1 - log r)", lambda t: tm.Num(Fraction(1, 2)) * (R - 1 - tm.log(R)), "k3", 0.5, "forward"),
    Row("k3 negated (sign inverted)", lambda t: -K3, "k3", -1, "forward", sign=-1),
    Row("k3 of a clamped log-ratio", lambda t: tm.exp(Clamp(ND)) - 1 - Clamp(ND), "k3", 1, "forward"),
    Row("k3 clamped after exp", lambda t: Clamp(tm.exp(ND)) - 1 - ND, "k3", 1, "forward"),
    Row("k3 masked mean over tokens", lambda t: _sum(t, K3), "k3", 1, "forward"),
    Row("k3 detached", lambda t: detach(K3), "k3", 1, "none"),
    Row("k3 without its - 1: exp(-d) + d", lambda t: tm.exp(ND) + D, "k3", 1, "forward"),
    Row("k3 without its - 1, doubled: 2 * (r - log r)", lambda t: 2 * (R - tm.log(R)), "k3", 2, "forward"),
    Row("k3 with its exp on the rollout log-prob", lambda t: tm.exp(REF - OLD) - 1 - ND, "k3", 1, "constant"),
    # --- other estimators: not KL gradients ------------------------------------------------------
    Row("abs(logp - ref)", lambda t: tm.Abs(D), "abs", 1, "other"),
    Row("abs(ref - logp)", lambda t: tm.Abs(ND), "abs", 1, "other"),
    Row("sqrt((logp - ref) ** 2)", lambda t: tm.sqrt(D ** 2), "abs", 1, "other"),
    Row("inverted k3: exp(d) - 1 - d", lambda t: tm.exp(D) - 1 - D, "k3-inverted", 1, "other"),
    Row("inverted k3: pi/pi_ref - 1 - log(pi/pi_ref)", lambda t: PI / PREF - 1 - tm.log(PI / PREF),
        "k3-inverted", 1, "other"),
    Row("reference ratio exp(logp - ref)", lambda t: tm.exp(D), "reference-ratio", 1, "other"),
    Row("reference ratio pi / pi_ref", lambda t: PI / PREF, "reference-ratio", 1, "other"),
    Row("reference ratio times k2", lambda t: tm.exp(D) * K2, None, None, "other"),
    Row("pi * (logp - ref), one sample of the analytic sum", lambda t: PI * D, None, None, "other"),
    # --- straight-through: value of one estimator, gradient of another ------------------------------
    Row("straight-through: k3.detach() + k2 - k2.detach()", lambda t: detach(K3) + K2 - detach(K2), "k3", 1, "reverse"),
    Row("straight-through: k2 - k2.detach() + k3.detach()", lambda t: K2 - detach(K2) + detach(K3), "k3", 1, "reverse"),
    Row("straight-through with the k1 gradient", lambda t: D - detach(D) + detach(K3), "k3", 1, "constant"),
    Row("straight-through with the surrogate logp * d.detach()",
        lambda t: LP * detach(D) - LPD * detach(D) + detach(K3), "k3", 1, "reverse"),
    Row("straight-through: k2 value, k3 gradient", lambda t: detach(K2) + K3 - detach(K3), "k2", 1, "forward"),
    # --- importance weights ----------------------------------------------------------------------
    Row("k3 * exp(logp - old), live ratio", lambda t: K3 * W, "k3", 1, "reverse", weighted=True),
    Row("-k3 * exp(logp - old)", lambda t: -K3 * W, "k3", -1, "reverse", sign=-1, weighted=True),
    Row("k3 * exp(logp - logp.detach())", lambda t: K3 * tm.exp(LP - LPD), "k3", 1, "reverse", weighted=True),
    Row("k3 * clamp(exp(logp - old))", lambda t: K3 * Clamp(W), "k3", 1, "reverse", weighted=True),
    Row("k3 * exp(logp - old).detach()", lambda t: K3 * WD, "k3", 1, "forward", weighted=True),
    Row("exp(logp - old).detach() * k2", lambda t: WD * K2, "k2", 1, "reverse", weighted=True),
    Row("exp(logp - old) * k2, live ratio times k2", lambda t: W * K2, "k2", 1, "other", weighted=True),
    Row("exp(logp - old) * k1", lambda t: W * D, "k1", 1, "reverse", weighted=True),
    Row("exp(logp - old).detach() * k1", lambda t: WD * D, "k1", 1, "constant", weighted=True),
    Row("k3 * exp(old - logp), inverted ratio", lambda t: K3 * tm.exp(OLD - LP), "k3", 1, "other"),
    Row("k3 * pi / pi_old", lambda t: K3 * PI / POLD, "k3", 1, "reverse", weighted=True),
    Row("k3 * exp(logp) / exp(logp.detach())", lambda t: K3 * PI / tm.exp(LPD), "k3", 1, "reverse", weighted=True),
    Row("(pi / pi_old).detach() * k2", lambda t: tm.exp(LPD) / POLD * K2, "k2", 1, "reverse", weighted=True),
    # --- sequence-level estimators -------------------------------------------------------------------
    Row("sequence k2: 0.5 * sum(d) ** 2", lambda t: _sum(t, D) ** 2 / 2, "k2", 1, "sequence", level="sequence"),
    Row("sequence k2: 0.5 * sum(ref - logp) ** 2", lambda t: _sum(t, ND) ** 2 / 2, "k2", 1, "sequence",
        level="sequence"),
    Row("sequence k2 unhalved: sum(d) ** 2", lambda t: _sum(t, D) ** 2, "k2", 2, "sequence", level="sequence"),
    Row("sequence k2 of a clamped sum", lambda t: Clamp(_sum(t, D)) ** 2 / 2, "k2", 1, "sequence", level="sequence"),
    Row("sequence k2 negated: 0.5 * sum(d) * sum(ref - logp)", lambda t: _sum(t, D) * _sum(t, ND) / 2,
        "k2", -1, "sequence", sign=-1, level="sequence"),
    Row("sequence k3: exp(-sum d) - 1 + sum d", lambda t: tm.exp(-_sum(t, D)) - 1 + _sum(t, D), "k3", 1, "forward",
        level="sequence"),
    Row("sequence k2: 0.5 * (sum(logp) - sum(ref)) ** 2", lambda t: (_sum(t, LP) - _sum(t, REF)) ** 2 / 2,
        "k2", 1, "sequence", level="sequence"),
    # --- score-function surrogates: logp * stopgrad(credit) ------------------------------------------
    Row("surrogate: logp * d.detach()", lambda t: LP * detach(D), None, None, "reverse"),
    Row("surrogate: -logp * (ref - logp).detach()", lambda t: -LP * detach(ND), None, None, "reverse"),
    Row("surrogate with reward-to-go of d", lambda t: LP * _rtg(t, detach(D)), None, None, "sequence",
        level="sequence"),
    Row("surrogate with -reward-to-go of (ref - logp)", lambda t: -LP * _rtg(t, detach(ND)), None, None, "sequence",
        level="sequence"),
    Row("surrogate with half the reward-to-go", lambda t: tm.Num(Fraction(1, 2)) * LP * _rtg(t, detach(D)), None, None,
        "sequence", level="sequence"),
    Row("surrogate with the reward-to-go, sign inverted", lambda t: -LP * _rtg(t, detach(D)), None, None,
        "sequence", sign=-1, level="sequence"),
    Row("surrogate with the whole-response return", lambda t: LP * _sum(t, detach(D)), None, None, "sequence",
        level="sequence"),
    Row("weighted surrogate: ratio.detach() * logp * rtg", lambda t: WD * LP * _rtg(t, detach(D)), None, None,
        "sequence", weighted=True, level="sequence"),
    Row("surrogate with the reward-to-go of k3", lambda t: LP * _rtg(t, detach(K3)), None, None, "other",
        level="mixed"),
    Row("surrogate with a live reward-to-go", lambda t: LP * _rtg(t, D), None, None, "other", level="mixed"),
    Row("surrogate with the return sum(logp).detach() - sum(ref)", lambda t: LP * (_sum(t, LPD) - _sum(t, REF)),
        None, None, "sequence", level="sequence"),
    # --- sequence-level importance ratios on per-token terms ---------------------------------------
    Row("exp(sum(logp - old)) * k3", lambda t: tm.exp(_sum(t, LP - OLD)) * K3, "k3", 1, "reverse", weighted=True,
        sequence_ratio=True),
    Row("exp(sum(logp - old)) * k2", lambda t: tm.exp(_sum(t, LP - OLD)) * K2, "k2", 1, "other", weighted=True,
        sequence_ratio=True),
    Row("exp(sum(logp - old)).detach() * k3: no cross term, forward",
        lambda t: tm.exp(_sum(t, LPD - OLD)) * K3, "k3", 1, "forward", weighted=True),
    Row("exp(sum(logp - old)) * sum(k3): a sequence weight on a sequence term",
        lambda t: tm.exp(_sum(t, LP - OLD)) * _sum(t, K3), "k3", 1, "other", weighted=True, level="mixed"),
    Row("exp(sum(logp) - sum(old)) * k3", lambda t: tm.exp(_sum(t, LP) - _sum(t, OLD)) * K3, "k3", 1, "reverse",
        weighted=True, sequence_ratio=True),
    Row("exp(sum(logp)) / exp(sum(old)) * k3", lambda t: tm.exp(_sum(t, LP)) / tm.exp(_sum(t, OLD)) * K3, "k3", 1,
        "reverse", weighted=True, sequence_ratio=True),
]


def _params(bug: str) -> list:
    return [pytest.param(row, id=row.id, marks=[pytest.mark.xfail(strict=True, reason=getattr(row, bug))]
                         if getattr(row, bug) else []) for row in ROWS]


@pytest.mark.parametrize("row", _params("value_bug"))
def test_value_is_classified_by_meaning(row: Row) -> None:
    table = SymbolTable()
    match = classify_value(row.build(table), table)
    if row.estimator is None:
        assert match is None, f"classified as {match}"
        return
    assert match is not None, "not recognised as an estimator"
    assert (match.name, match.scale) == (row.estimator, pytest.approx(row.scale, rel=1e-6))


@pytest.mark.parametrize("row", _params("gradient_bug"))
def test_gradient_coefficient(row: Row) -> None:
    table = SymbolTable()
    coefficient = classify_coefficient(row.build(table), table)
    expected = Coefficient(row.kind, row.weighted, row.sequence_ratio, row.sign, row.level)
    assert coefficient == expected


# --- the estimator templates and the symbol table ---------------------------------------------------


@pytest.mark.parametrize("name,template", ESTIMATOR_TEMPLATES, ids=[name for name, _ in ESTIMATOR_TEMPLATES])
def test_each_template_is_its_own_estimator(name: str, template: tm.Term) -> None:
    table = SymbolTable()
    match = classify_value(template, table)
    assert match is not None and match.name == name and match.scale == pytest.approx(1.0)
    assert classify_value(-3 * template, table).scale == pytest.approx(-3.0)


def test_a_constant_offset_is_named_and_only_then() -> None:
    # the offset changes neither a loss gradient nor a reward's expected score-function gradient
    table = SymbolTable()
    assert classify_value(tm.exp(ND) + D, table) == EstimatorMatch("k3", pytest.approx(1.0), offset=True)
    assert classify_value(tm.exp(D) - 1, table).offset
    assert not classify_value(K3, table).offset
    assert classify_value(D + table.fresh("beta", positive=True), table) is None  # not a constant


def test_the_templates_are_the_documented_estimators() -> None:
    assert [name for name, _ in ESTIMATOR_TEMPLATES] == ["k1", "k2", "k3", "k3-inverted", "abs", "reference-ratio"]


def test_a_reduction_is_one_symbol_per_inner_expression_and_kind() -> None:
    table = SymbolTable()
    total, again, credit = table.reduce(D), table.reduce(D), table.reduce(D, "rtg")
    assert total == again and total != credit
    assert table.reductions[credit].kind == "rtg" and table.reductions[total].inner == D
    nested = table.reduce(total * LP)
    assert table.expand_reductions(nested) == D * LP
    assert table.role_symbols(nested) == frozenset({LP, REF})


def test_an_opaque_symbol_makes_an_expression_impure() -> None:
    table = SymbolTable()
    beta = table.fresh("beta", positive=True)
    assert table.is_pure(table.reduce(K3)) and not table.is_pure(beta * K3)
    assert classify_value(beta * K3, table) is None


def test_an_unknown_function_of_a_sum_of_log_probs_is_classified_without_error() -> None:
    # d/dlogp of f(sum(logp)) holds Derivative(f(S), S); mapping S to the sequence log-ratio
    # must not fail (a derivative with respect to a sum is refused)
    table = SymbolTable()
    unknown = tm.Function("call_fused")
    expr = unknown(_sum(table, LP)) - _sum(table, REF)
    assert classify_coefficient(expr, table).kind == "other"
