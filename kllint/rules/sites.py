"""The KL estimates of one analysis as sites (`kllint check --show-sites`, `kllint.sites`): a
report of observations, beside the rules, not a rule. Each estimate (`Algebra.kterms`, with the
estimates logged as metrics) is placed as a finding about it would be (`RuleContext.localize`);
estimates written at one place are one site. Its fates are where its value ends: a
differentiated value that takes it as a loss term (`loss`) or as a coefficient of the policy's
score function (`reward`), a value stored as a reward or return that no loss takes (`reward`),
a number read out or logged (`metric`, `MetricFact`). Its roles are the evidence the analysis
recorded (`RoleEvidence`) in the same entry point for each role the estimate reads. The
findings the rules made about it (`RuleContext.about`, or placed at the site) are listed for
the report to join with what is actually reported."""
from __future__ import annotations

from typing import Iterable

from kllint.analysis.facts import KLTerm, MetricFact, RewardFact, RoleEvidence
from kllint.analysis.conditions import narrowed
from kllint.analysis.symbolic import LP, LPD, OLD, REF
from kllint.analysis.values import Anchor
from kllint.diagnostics import Diagnostic
from kllint.rules.base import RuleContext, occurrences, returned_through
from kllint.rules.flow import reaches_loss, reward_symbols
from kllint.rules.loss import weights_the_score_function
from kllint.rules.wording import merge_paths
from kllint.sites import ESTIMATOR_NAMES, FATES, UNKNOWN, EstimatorSeen, RoleSeen, Site

ROLE_OF_SYMBOL = ((LP, "policy"), (LPD, "policy"), (REF, "reference"), (OLD, "old"))
# the roles of `RoleEvidence` that are roles of an estimate, by the role they stand for
ESTIMATE_ROLES = {"policy": "policy", "policy, no gradient": "policy", "reference": "reference", "old": "old",
                  "kl": "kl"}
# the roles of networks, whose evidence stands for that of their log-probs when those have none
NETWORK_ROLES = {"network:policy": "policy", "network:reference": "reference", "network:old": "old"}
MAX_EVIDENCE = 3  # per role of a site


def observe_sites(ctx: RuleContext, facts: list, diagnostics: list[Diagnostic]) -> list[Site]:
    """The sites of the estimates the analysis saw, with the findings about each (`diagnostics`,
    before selection and suppressions)."""
    algebra = ctx.algebra
    metrics: set = set()
    for fact in facts:  # first: wrapping a logged estimate makes it a KL term
        if isinstance(fact, MetricFact):
            metrics.update(algebra.kl_symbols(algebra.wrap(fact.value)))
    fates = _fates(ctx, facts, metrics)
    evidence = _evidence_by_unit(facts)
    groups: dict[tuple, list[KLTerm]] = {}
    places: dict[tuple, Anchor] = {}
    for symbol, term in list(algebra.kterms.items()):
        if narrowed(term.anchor.conditions) is None:
            continue  # no configuration takes this path
        place, _ = ctx.localize(term.anchor, returned_through(term))
        key = (place.path, place.span.line, place.span.column)
        groups.setdefault(key, []).append(term)
        places[key] = place
    by_code = {(code, path, span.line, span.column): symbols for (code, path, span), symbols in ctx.about.items()}
    sites = []
    for key, terms in groups.items():
        symbols = {term.symbol for term in terms}
        seen = set().union(*(fates.get(symbol, set()) for symbol in symbols))
        judged = tuple(sorted({(d.code, d.path, d.span.line, d.span.column) for d in diagnostics
                               if (d.path, d.span.line, d.span.column) == key
                               or not symbols.isdisjoint(by_code.get((d.code, d.path, d.span.line, d.span.column), ()))}))
        sites.append(Site(key[0], key[1], key[2], _estimators(terms), tuple(f for f in FATES if f in seen) or (UNKNOWN,),
                          _roles(terms, evidence, algebra), judged))
    return sites


def _fates(ctx: RuleContext, facts: Iterable[object], metrics: set) -> dict:
    """KL-term symbol -> where its value ends (`loss`, `reward`, `metric`), as the rules read the
    differentiated values (`check_score_function_coefficients`) and the stored rewards."""
    algebra = ctx.algebra
    found: dict = {symbol: {"metric"} for symbol in metrics}
    searched = set()
    for fact, wrapped in ctx.losses:
        if wrapped in searched:
            continue
        searched.add(wrapped)
        for symbol, places in occurrences(wrapped, algebra).items():
            term = algebra.kterms[symbol]
            if algebra.live(term.expr):
                rewarded = symbol in ctx.named_rewards or weights_the_score_function(fact.loss, symbol, ctx)
                as_reward = [p for p in places if p.coefficient_of_live] if rewarded else []
            else:
                as_reward = [p for p in places if p.coefficient_of_live and p.affine]
            if as_reward:
                found.setdefault(symbol, set()).add("reward")
            if len(as_reward) < len(places):
                found.setdefault(symbol, set()).add("loss")
    for fact in facts:
        if isinstance(fact, RewardFact):
            for symbol in reward_symbols(fact, ctx):
                if not reaches_loss(ctx, symbol, fact.value.expr):
                    found.setdefault(symbol, set()).add("reward")
    return found


def _estimators(terms: list[KLTerm]) -> tuple[EstimatorSeen, ...]:
    """The estimators written at one place, each with the configurations choosing it."""
    paths: dict[str, list] = {}
    for term in terms:
        name = ESTIMATOR_NAMES.get(term.estimator.name if term.estimator else None,
                                   term.estimator.name if term.estimator else "")
        if term.estimator is not None and term.estimator.offset:
            name += " plus a constant"
        paths.setdefault(name, []).append(term.anchor.conditions)
    return tuple(EstimatorSeen(name, "" if any(not c for c in conditions) else merge_paths(conditions))
                 for name, conditions in paths.items())


def _unit(anchor: Anchor, stack: tuple) -> tuple[str, str]:
    """The entry point a value was seen in: the function of the outermost call site, else its own."""
    outer = stack[0] if stack else anchor
    return outer.path, outer.function


def _evidence_by_unit(facts: Iterable[object]) -> dict:
    """(path, entry function) -> [RoleEvidence], in the order recorded."""
    found: dict = {}
    for fact in facts:
        if isinstance(fact, RoleEvidence) and (fact.role in ESTIMATE_ROLES or fact.role in NETWORK_ROLES):
            found.setdefault(_unit(fact.anchor, fact.call_stack), []).append(fact)
    return found


def _roles(terms: list[KLTerm], evidence: dict, algebra) -> tuple[RoleSeen, ...]:
    """The evidence for each role the estimates read, recorded in the entry points that formed
    them (the evidence of the network of that role when the log-probs have none): per role,
    dataflow first, then names, at most `MAX_EVIDENCE`."""
    wanted: list[str] = []
    units: list[tuple[str, str]] = []
    for term in terms:
        symbols = algebra.table.role_symbols(term.expr)
        wanted += [role for symbol, role in ROLE_OF_SYMBOL if symbol in symbols]
        if term.estimator is None:
            wanted.append("kl")
        units.append(_unit(term.anchor, term.anchor.stack))
    seen: list[RoleSeen] = []
    for role in dict.fromkeys(r for r in ("policy", "reference", "old", "kl") if r in wanted):
        recorded = [f for unit in dict.fromkeys(units) for f in evidence.get(unit, ())]
        facts = [f for f in recorded if ESTIMATE_ROLES.get(f.role) == role] or [
            f for f in recorded if NETWORK_ROLES.get(f.role) == role]  # the network's evidence
        lines = list(dict.fromkeys(
            RoleSeen(f.role, f.evidence, f.anchor.path, f.anchor.span.line, f.anchor.span.column,
                     (f.call_stack[0].path, f.call_stack[0].span.line, f.call_stack[0].span.column)
                     if f.call_stack else None)
            for f in facts))
        texts: set[str] = set()
        ordered = [line for line in lines if not line.by_name] + [line for line in lines if line.by_name]
        kept = [line for line in ordered if line.evidence not in texts and not texts.add(line.evidence)]
        seen += kept[:MAX_EVIDENCE] or [RoleSeen(role, "", "", 0, 0)]
    return tuple(seen)
