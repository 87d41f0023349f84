"""Rules judged at one API call: F.kl_div / nn.KLDivLoss / optax arguments (KL501, KL502),
reference forwards with gradient tracking (KL503), clamp after exp (KL601)."""
from __future__ import annotations

from kllint.analysis.facts import CallFact
from kllint.rules.base import RuleContext


def check_call(fact: CallFact, ctx: RuleContext) -> None:
    estimate = None
    if fact.code == "KL601":  # the clamped estimate, for a NaN-gradient check on an extreme input
        from types import SimpleNamespace

        from kllint.rules.fixes import estimate_for

        estimate = estimate_for(SimpleNamespace(anchor=fact.anchor, per_token=True), ctx, usage="loss")
    if fact.at_caller:
        ctx.report(fact.code, fact.location(ctx.entry.display), fact.message, help=fact.help, trace=fact.trace)
        return
    ctx.report(fact.code, fact.anchor, fact.message, help=fact.help, trace=fact.trace, call_stack=fact.call_stack,
               estimate=estimate)
