"""Rules judged at one API call: F.kl_div / nn.KLDivLoss / optax arguments (KL501, KL502),
reference forwards with gradient tracking (KL503), clamp after exp reaching a loss (KL601)."""
from __future__ import annotations

from kllint.analysis.facts import CallFact, ClampFact
from kllint.rules.base import RuleContext

CLAMP_MESSAGE = ("exp of a log-ratio is clamped after the exponential: once exp overflows the clamp's "
                 "zero gradient times an infinite derivative gives NaN gradients")


def check_clamp(fact: ClampFact, ctx: RuleContext) -> None:
    """KL601: the clamped exp(log-ratio) reaches a differentiated value (a detached reward or
    metric never back-propagates through the exponential)."""
    from types import SimpleNamespace

    from kllint.rules.fixes import estimate_for
    from kllint.rules.flow import losses_with
    from kllint.rules.safe_fixes import clamp_fix
    from kllint.rules.trace import Step, sink_step
    from kllint.rules.wording import clamp_first_help, framework_at

    if not ctx.first("KL601-clamp", (fact.anchor, fact.clamped, fact.call_stack)):
        return
    reached = losses_with(ctx, fact.clamped, first=True)
    if not reached:
        return
    loss = reached[0]
    estimate = estimate_for(SimpleNamespace(anchor=fact.anchor, per_token=True), ctx, usage="loss")
    ctx.report("KL601", fact.anchor, CLAMP_MESSAGE, help=clamp_first_help(framework_at(fact.anchor, loss.sink)),
               trace=(Step(fact.anchor, "exp of the log-ratio, clamped after the exponential"), sink_step(loss)),
               call_stack=fact.call_stack, estimate=estimate, fallback=loss.sink,
               fix=clamp_fix(fact.anchor, ctx))


def check_call(fact: CallFact, ctx: RuleContext) -> None:
    """KL501 / KL502 / KL503, judged at the call; KL503 with the `torch.no_grad()` fix."""
    from kllint.rules.safe_fixes import no_grad_fix

    if fact.at_caller:
        anchor = fact.location(ctx.entry.display)
        fix = no_grad_fix(anchor, ctx) if fact.code == "KL503" else None
        ctx.report(fact.code, anchor, fact.message, help=fact.help, trace=fact.trace, fix=fix)
        return
    fix = no_grad_fix(fact.anchor, ctx) if fact.code == "KL503" else None
    ctx.report(fact.code, fact.anchor, fact.message, help=fact.help, trace=fact.trace, call_stack=fact.call_stack,
               fix=fix)
