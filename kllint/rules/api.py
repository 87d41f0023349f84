"""Rules judged at one API call: F.kl_div / nn.KLDivLoss / optax arguments (KL501, KL502),
reference forwards with gradient tracking (KL503), clamp after exp reaching a loss (KL601)."""
from __future__ import annotations

from kllint.analysis.facts import CallFact, ClampFact, LossFact
from kllint.rules.base import RuleContext

CLAMP_MESSAGE = ("exp of a log-ratio is clamped after the exponential: once exp overflows the clamp's "
                 "zero gradient times an infinite derivative gives NaN gradients")
CLAMP_HELP = "clamp the log-ratio before `exp` (e.g. `log_ratio.clamp(-20, 20)`), then clamp the result if needed"


def check_clamp(fact: ClampFact, losses: list[LossFact], ctx: RuleContext, expanded: dict[int, object]) -> None:
    """KL601: the clamped exp(log-ratio) reaches a differentiated value (a detached reward or
    metric never back-propagates through the exponential). `expanded` memoises the loss
    expressions with their KL terms and reductions spelled out."""
    from types import SimpleNamespace

    from kllint.rules.fixes import estimate_for

    algebra = ctx.algebra
    if not ctx.first("KL601-clamp", (fact.anchor, fact.clamped, fact.call_stack)):
        return
    marker = algebra.expand_all(fact.clamped)
    for loss in losses:
        key = id(loss)
        if key not in expanded:
            expanded[key] = algebra.expand_all(algebra.wrap(loss.loss))
        if not expanded[key].has(marker):
            continue
        estimate = estimate_for(SimpleNamespace(anchor=fact.anchor, per_token=True), ctx, usage="loss")
        ctx.report("KL601", fact.anchor, CLAMP_MESSAGE, help=CLAMP_HELP, trace=(loss.sink.step(loss.note),),
                   call_stack=fact.call_stack, estimate=estimate, fallback=loss.sink)
        return


def check_call(fact: CallFact, ctx: RuleContext) -> None:
    if fact.at_caller:
        ctx.report(fact.code, fact.location(ctx.entry.display), fact.message, help=fact.help, trace=fact.trace)
        return
    ctx.report(fact.code, fact.anchor, fact.message, help=fact.help, trace=fact.trace, call_stack=fact.call_stack)
