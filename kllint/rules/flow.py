"""Where KL terms go, for the rules that judge a value by its use rather than by the name it is
stored under: the differentiated values of a file (its loss facts) and the KL terms stored
under reward or return names."""
from __future__ import annotations

from typing import Iterable

from kllint.analysis import terms as tm

from kllint.analysis.facts import BranchChoice, LossFact, ReferenceForward, RewardFact
from kllint.rules.base import RuleContext, occurrences


def prepare(ctx: RuleContext, facts: Iterable[object]) -> None:
    """Fill `ctx.losses`, `ctx.differentiated`, `ctx.named_rewards`, `ctx.choices` and
    `ctx.direct_forwards` from the facts."""
    algebra = ctx.algebra
    seen: set[tm.Term] = set()
    for fact in facts:
        if isinstance(fact, LossFact):
            wrapped = algebra.wrap(fact.loss)
            if wrapped not in seen:
                seen.add(wrapped)
                ctx.differentiated.update(occurrences(wrapped, algebra))
            ctx.losses.append((fact, wrapped))
        elif isinstance(fact, BranchChoice):
            ctx.choices.append(fact)
        elif isinstance(fact, ReferenceForward) and not fact.call_stack and fact.taped and fact.tracking \
                and not fact.frozen:
            ctx.direct_forwards.add(fact.anchor.node_id)
    for fact in facts:
        if isinstance(fact, RewardFact):
            for symbol in reward_symbols(fact, ctx):
                ctx.named_rewards.setdefault(symbol, fact)


def reward_symbols(fact: RewardFact, ctx: RuleContext) -> dict:
    """The KL terms a reward fact stores linearly, with their places."""
    algebra = ctx.algebra
    found = {}
    for symbol, places in occurrences(algebra.wrap(fact.value), algebra).items():
        linear = [p for p in places if p.linear]
        if linear:
            found[symbol] = linear
    return found


def reaches_loss(ctx: RuleContext, symbol: tm.Symbol, stored: tm.Term | None = None) -> bool:
    """Whether a KL term (or the value `stored` under a reward name that holds it, before it
    became a term) is in a differentiated value. The value stored is searched, not the bare
    estimate: the same log-ratio written again in an unrelated loss function is another use of
    the same symbols, judged on its own, not this reward flowing into a loss."""
    if symbol in ctx.differentiated:
        return True
    marker = stored if stored is not None else ctx.algebra.kterms[symbol].expr
    if marker.is_Atom:
        return False
    return bool(losses_with(ctx, marker, first=True))


def losses_with(ctx: RuleContext, marker: tm.Term, first: bool = False) -> list[LossFact]:
    """The loss facts whose differentiated value contains `marker` (the first one only, with
    `first`); values shared by several facts are searched once."""
    found, searched = [], {}
    for fact, wrapped in ctx.losses:
        if wrapped not in searched:
            searched[wrapped] = ctx.algebra.contains(wrapped, marker)
        if searched[wrapped]:
            found.append(fact)
            if first:
                break
    return found
