"""Rules judged at one API call, one class per code: the argument spaces of kl_div and optax's KL
(KL501), kl_div reductions that divide by the number of classes (KL502), reference forwards that
autograd records (KL503), and a clamp after exp that reaches a loss (KL601). The analysis
observes the calls (`kllint.analysis.facts`); these decide and word the findings."""
from __future__ import annotations

from types import SimpleNamespace

from kllint.analysis.facts import (
    ClampFact, ClassMeanOfKlDiv, KlDivCall, KlDivLossConstruction, OptaxKlCall, ReferenceForward,
)
from kllint.analysis.values import Anchor
from kllint.diagnostics import Fix
from kllint.rules.base import RuleContext
from kllint.rules.fixes import estimate_for
from kllint.rules.flow import losses_with
from kllint.rules.safe_fixes import clamp_fix, no_grad_fix
from kllint.rules.trace import Step, sink_step
from kllint.rules.wording import clamp_first_help, framework_at

SPACE_WORDS = {"prob": "probabilities", "logits": "raw logits", "logprob": "log-probabilities"}


def space_words(space: str | None) -> str:
    """What an argument holds, in words (`raw logits`)."""
    return SPACE_WORDS.get(space or "", "values")


class KlDivArgumentSpaces:
    """KL501: kl_div's input must hold log-probabilities and its target match `log_target`;
    optax's KL takes log-probabilities first."""

    CODE = "KL501"

    def check_kl_div(self, fact: KlDivCall, ctx: RuleContext) -> None:
        """`F.kl_div(input, target)` / an `nn.KLDivLoss` instance called on them."""
        if fact.input_space in ("prob", "logits"):
            self._report(ctx, fact.anchor, fact.call_stack,
                         f"`{fact.api}` treats `input` as log-probabilities but gets {space_words(fact.input_space)}: "
                         "the result is not a KL (it can be negative) and its gradient is wrong",
                         "pass log-probabilities: `F.log_softmax(logits, -1)` or `probs.log()`")
        elif fact.log_target and fact.target_space == "prob":
            self._report(ctx, fact.anchor, fact.call_stack,
                         f"`{fact.api}` has log_target=True but the target is in probability space",
                         "pass `target.log()` or set `log_target=False`")
        elif not fact.log_target and fact.target_space == "logprob":
            self._report(ctx, fact.anchor, fact.call_stack,
                         f"`{fact.api}` gets a log-probability target without log_target=True",
                         "set `log_target=True` or pass `target.exp()`")

    def check_optax(self, fact: OptaxKlCall, ctx: RuleContext) -> None:
        """`optax.kl_divergence(log_predictions, targets)`."""
        if fact.predictions_space in ("prob", "logits"):
            self._report(ctx, fact.anchor, fact.call_stack,
                         f"`{fact.function}` expects log-probabilities as its first argument but gets "
                         f"{space_words(fact.predictions_space)}: the value is not a KL and its gradient is wrong",
                         "pass `jax.nn.log_softmax(logits)` as `log_predictions`")

    def _report(self, ctx: RuleContext, anchor: Anchor, call_stack: tuple[Anchor, ...], message: str,
                help: str) -> None:
        ctx.report(self.CODE, anchor, message, help=help, call_stack=call_stack)


class KlDivMeanReduction:
    """KL502: kl_div's `reduction='mean'` (PyTorch's default) divides by batch x classes, and so
    does a mean over the class dimension of its elementwise result."""

    CODE = "KL502"

    def check_kl_div(self, fact: KlDivCall, ctx: RuleContext) -> None:
        """`F.kl_div(...)` with the mean reduction (an `nn.KLDivLoss` is judged where it is made)."""
        if fact.reduction == "mean" and fact.api != "nn.KLDivLoss":
            self._report_mean(ctx, fact.anchor, fact.call_stack, fact.api, fact.explicit_reduction)

    def check_construction(self, fact: KlDivLossConstruction, ctx: RuleContext) -> None:
        """`nn.KLDivLoss(...)` with the mean reduction."""
        if fact.reduction == "mean":
            self._report_mean(ctx, fact.anchor, fact.call_stack, "nn.KLDivLoss", fact.explicit_reduction)

    def check_class_mean(self, fact: ClassMeanOfKlDiv, ctx: RuleContext) -> None:
        """`F.kl_div(..., reduction='none').mean(-1)`."""
        ctx.report(self.CODE, fact.anchor,
                   "kl_div with reduction='none' is then averaged over the class dimension: the KL is "
                   "divided by the vocabulary size",
                   help="sum over the class dimension (`.sum(-1)`), then average over tokens or the batch",
                   call_stack=fact.call_stack)

    def _report_mean(self, ctx: RuleContext, anchor: Anchor, call_stack: tuple[Anchor, ...], api: str,
                     explicit: bool) -> None:
        how = "explicit" if explicit else "the default"
        ctx.report(self.CODE, anchor,
                   f"`{api}` with reduction='mean' ({how}) divides by batch x classes, not the batch: the KL "
                   "is scaled down by the vocabulary size",
                   help="use `reduction=\"batchmean\"` (or sum over classes, then average over tokens)",
                   call_stack=call_stack)


class ReferenceForwardWithGradients:
    """KL503: a reference forward that autograd records (PyTorch, gradient tracking on, the
    reference not frozen), with the `torch.no_grad()` fix."""

    CODE = "KL503"

    def check(self, fact: ReferenceForward, ctx: RuleContext) -> None:
        """Reported at the user's own call: the innermost call site in the checked file (read from
        the call stack when reported, so a memoised helper call re-stated at another call site,
        its call stack replaced, is reported there), else the forward itself."""
        if not (fact.taped and fact.tracking and not fact.frozen):
            return
        if (fact.call_stack and not fact.handed_in and fact.anchor.node_id in ctx.direct_forwards
                and fact.anchor.path == ctx.entry.display):
            return  # a forward of a network its function reads itself is reported there, not at each call
        # a helper running whatever network it is handed: the call that hands it the reference
        anchor = fact.call_stack[-1] if fact.handed_in and fact.call_stack else fact.anchor
        fix = no_grad_fix(anchor, ctx)
        if fix.applicability == "safe" and fact.weak_name:
            # the reference role rests on a weak word (`base_model`): often the policy's own
            # backbone, whose forward must keep its gradient, so a person decides
            fix = Fix("display-only", fix.description)
        ctx.report(self.CODE, anchor,
                   "reference-model log-probs are computed with gradient tracking on: autograd keeps the "
                   "reference's activations and can push gradient into it",
                   help="compute reference log-probs under `torch.no_grad()` / `torch.inference_mode()`, or "
                        "freeze the reference with `requires_grad_(False)`",
                   fix=fix)


CLAMP_MESSAGE = ("exp of a log-ratio is clamped after the exponential: once exp overflows the clamp's "
                 "zero gradient times an infinite derivative gives NaN gradients")


class ClampAfterExp:
    """KL601: the clamped exp(log-ratio) reaches a differentiated value (a detached reward or
    metric never back-propagates through the exponential)."""

    CODE = "KL601"

    def check(self, fact: ClampFact, ctx: RuleContext) -> None:
        """Judged once per clamp and call stack, at the first loss that contains it."""
        if not ctx.first("KL601-clamp", (fact.anchor, fact.clamped, fact.call_stack)):
            return
        reached = losses_with(ctx, fact.clamped, first=True)
        if not reached:
            return
        loss = reached[0]
        estimate = estimate_for(SimpleNamespace(anchor=fact.anchor, per_token=True), ctx, usage="loss")
        ctx.report(self.CODE, fact.anchor, CLAMP_MESSAGE, help=clamp_first_help(framework_at(fact.anchor, loss.sink)),
                   trace=(Step(fact.anchor, "exp of the log-ratio, clamped after the exponential"), sink_step(loss)),
                   call_stack=fact.call_stack, estimate=estimate, fallback=loss.sink,
                   fix=clamp_fix(fact.anchor, ctx))


KL_DIV_SPACES = KlDivArgumentSpaces()
KL_DIV_MEAN = KlDivMeanReduction()
REFERENCE_FORWARD = ReferenceForwardWithGradients()
CLAMP_AFTER_EXP = ClampAfterExp()
