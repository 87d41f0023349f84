"""Rules on KL terms that reach a loss (Tang & Munos 2025, arXiv:2506.09477, sections 3-4;
Liu et al. 2025, arXiv:2510.01555 for the off-policy weight).

Each KL term found in a differentiated value is judged by its gradient coefficient
`c = dL/dlogp` (see `kllint.analysis.coefficients.classify_coefficient`).
"""
from __future__ import annotations

from dataclasses import replace

from kllint.analysis import terms as tm
from kllint.analysis.facts import LossFact, RewardFact
from kllint.diagnostics import Estimate, Fix
from kllint.rules import wording
from kllint.rules.base import RuleContext, estimator_words, occurrences, returned_through
from kllint.rules.fixes import estimate_for
from kllint.rules.kl_fixes import loss_rewrite
from kllint.rules.loss_terms import LossTerm, loss_terms
from kllint.rules.reward import judge_reward_sign, judge_reward_term
from kllint.rules.trace import loss_trace, root_cause


def framework(item: LossTerm):
    """The framework the estimate is computed with (for the help's spelling)."""
    return wording.framework_at(item.term.anchor, item.fact.sink)


def report_term(ctx: RuleContext, item: LossTerm, code: str, message: str, help: str,
                at_estimate: bool = True, **extra) -> None:
    """Report a finding about a KL term in a loss: at the estimate (or where it joins the loss),
    with the trace to the sink, localised in the checked file, with the estimate for --confirm.
    `message` may name the estimate as `{subject}`."""
    anchor = item.term.anchor if at_estimate else (item.term.entry or item.fact.sink)
    extra.setdefault("estimate", _estimate(item, ctx))
    extra.setdefault("variant", describe_estimator(item))
    note = None
    if straight_through(item):
        note = f"straight-through term: the {wording.short_name(item.term.estimator.name)} value, the log-ratio as gradient coefficient"
    root, clamped = root_cause(item.term, ctx.algebra.table, item.fact.sink) if at_estimate else (None, None)
    ctx.report(code, anchor, message, help=help, trace=loss_trace(item.term, item.fact, ctx.algebra.table, note),
               call_sites=returned_through(item.term) if at_estimate else (), call_stack=item.fact.call_stack,
               fallback=item.term.entry or item.fact.sink, subject=subject(item), root=root, clamped=clamped,
               about=item.term.symbol, **extra)


def straight_through(item: LossTerm) -> bool:
    """A term whose value is an estimate but whose gradient coefficient is the log-ratio (the
    straight-through rewrite `k2 - stopgrad(k2) + stopgrad(value)`): not the estimate it equals."""
    name = item.term.estimator.name
    if name in ("k2", "surrogate", "analytic") or item.coefficient.kind != "reverse" or item.coefficient.weighted:
        return False
    return item.detached_policy


def describe_estimator(item: LossTerm) -> str:
    """The estimator's name as the findings name it (`straight-through` for such a term)."""
    return "straight-through" if straight_through(item) else item.term.estimator.name


def subject(item: LossTerm) -> str:
    """The estimate in words, for the message."""
    if straight_through(item):
        return wording.ESTIMATOR_WORDS["straight-through"]
    return estimator_words(item.term)


def _estimate(item: LossTerm, ctx: RuleContext) -> Estimate | None:
    return estimate_for(item.term, ctx, usage="loss")


class EstimateAsLoss:
    """KL101 / KL102 / KL103: an estimate differentiated whose coefficient is not the log-ratio."""

    CODES = {"constant": "KL101", "forward": "KL102", "other": "KL103"}
    LIVE_RATIO = {"KL101": "k1", "KL102": "k3", "KL103": "k3"}  # what the help multiplies by a live ratio
    MESSAGES = {
        "KL101": "{subject} is differentiated as a loss: its gradient coefficient is constant, so the expected gradient is zero and the penalty only adds noise",
        "KL102": "{subject} is differentiated as a loss: its expected gradient is that of the forward KL(ref || pi), not the reverse KL(pi || ref)",
        "KL103": "{subject} is differentiated as a loss, but its gradient coefficient is not the log-ratio: the expected gradient is not a KL gradient",
    }

    def check(self, item: LossTerm, ctx: RuleContext) -> None:
        if item.coefficient.sequence_ratio or item.term.estimator.name == "reference-ratio":
            return
        code = self.CODES.get(item.coefficient.kind)
        if code is None:
            return
        report_term(ctx, item, code, self.MESSAGES[code], wording.loss_help(framework(item), self.LIVE_RATIO[code]),
                    fix=loss_rewrite(item, ctx))


class DeadKLLoss:
    """KL104: the KL term carries no gradient but is added to a loss that does."""

    def check(self, item: LossTerm, ctx: RuleContext) -> None:
        if item.coefficient.kind != "none" or not item.live_elsewhere:
            return
        report_term(ctx, item, "KL104",
                    "{subject} is added to the loss but carries no gradient (computed under no_grad or from detached log-probs): the penalty is a constant and never regularises",
                    wording.live_kl_help(framework(item)), at_estimate=False,
                    fix=Fix("display-only", "recompute the KL from live log-probs"))


class InvertedPenalty:
    """KL105: the KL enters a minimised loss with a negative sign."""

    def check(self, item: LossTerm, ctx: RuleContext) -> None:
        if item.coefficient.kind == "none" or not item.inverted or item.term.estimator.name == "reference-ratio":
            return
        report_term(ctx, item, "KL105",
                    "the KL penalty is subtracted from a loss that is minimised: training maximises the divergence from the reference",
                    "add the penalty: `loss = policy_loss + kl_coef * kl_loss`", at_estimate=False,
                    estimate=None)


class PerTokenKLLoss:
    """KL201: per-token KL terms reduced over tokens without reward-to-go credit."""

    def check(self, item: LossTerm, ctx: RuleContext) -> None:
        kind = item.coefficient.kind
        if not item.reduced or (kind not in ("reverse", "forward", "other") and not item.coefficient.sequence_ratio):
            return
        if item.coefficient.level != "token":
            return
        if item.term.estimator.name == "reference-ratio":
            return
        report_term(ctx, item, "KL201",
                    "per-token KL loss terms are reduced over tokens: each token's gradient misses the KL of the tokens it causes later (partial gradient)",
                    wording.token_credit_help(framework(item)),
                    fix=Fix("display-only", "credit each token with the reward-to-go of the log-ratio"))


class OffPolicyWithoutWeight:
    """KL401: a sampled KL loss on samples from an older policy without the weight pi/pi_old."""

    def check(self, item: LossTerm, ctx: RuleContext) -> None:
        if not item.off_policy or item.coefficient.weighted or item.coefficient.kind in ("none",):
            return
        if item.coefficient.sequence_ratio or item.term.estimator.name == "reference-ratio":
            return
        report_term(ctx, item, "KL401", off_policy_message(item, ctx), wording.importance_weight_help(framework(item)))


class SequenceRatioOnTokenKL:
    """KL402: a sequence-level importance ratio broadcast onto per-token KL terms."""

    def check(self, item: LossTerm, ctx: RuleContext) -> None:
        if not item.coefficient.sequence_ratio:
            return
        report_term(ctx, item, "KL402",
                    "a sequence-level importance ratio multiplies per-token KL terms: the gradient gains a biased cross term",
                    wording.token_ratio_help(framework(item)))


class ReferenceAsBehaviour:
    """KL403: the importance ratio divides by the reference policy instead of the sampling policy."""

    def check(self, item: LossTerm, ctx: RuleContext) -> None:
        if item.term.estimator.name != "reference-ratio":
            return
        report_term(ctx, item, "KL403",
                    "the importance ratio divides by the reference policy, not the policy that sampled the data: wrong weights and clipping around the reference",
                    wording.rollout_ratio_help(framework(item)))


def off_policy_message(item: LossTerm, ctx: RuleContext) -> str:
    """KL401's message, saying what makes the samples come from an older policy: the rollout
    log-probs it reads (and the configuration that picks them), the loop of updates it runs in."""
    loop = f"runs once per item of `{item.fact.epoch_loop}`, several updates per batch"
    old = "the rollout log-probs"
    places = {(a.path, a.function) for a in (item.term.anchor, item.term.entry, item.fact.sink) if a is not None}
    choice = next((c for c in ctx.choices if (c.anchor.path, c.anchor.function) in places), None)
    if choice is not None:
        old += f" `{choice.source}` when {wording.branch_taken_when(choice.test, choice.when_true)}"
    if item.uses_old and item.fact.epoch_loop:
        why = f"the same loss uses {old} and {loop}"
    elif item.uses_old:
        why = f"the same loss uses {old}"
    else:
        why = f"the loss {loop}"
    return ("{subject} is a loss on samples from the rollout policy (" + why
            + ") without the importance weight pi/pi_old: biased gradient")


LOSS_RULES = (EstimateAsLoss(), DeadKLLoss(), InvertedPenalty(), PerTokenKLLoss(), OffPolicyWithoutWeight(),
              SequenceRatioOnTokenKL(), ReferenceAsBehaviour())


def check_loss(fact: LossFact, ctx: RuleContext) -> None:
    """Every loss rule on every KL term of a differentiated value, then its reward-like terms."""
    for item in loss_terms(fact, ctx):
        for rule in LOSS_RULES:
            rule.check(item, ctx)
    check_score_function_coefficients(fact, ctx)


def check_score_function_coefficients(fact: LossFact, ctx: RuleContext) -> None:
    """KL terms that multiply the live log-probs in a loss are rewards: judge them as such. A
    live term there is a reward only if it was stored as one (else it is a weighted KL loss
    term, such as k3 times a live ratio); it then leaks a pathwise gradient (KL301)."""
    algebra = ctx.algebra
    for symbol, places in occurrences(algebra.wrap(fact.loss), algebra).items():
        term = algebra.kterms[symbol]
        if algebra.live(term.expr):
            if symbol not in ctx.named_rewards and not weights_the_score_function(fact.loss, symbol, ctx):
                continue  # a live estimate times a live factor (a ratio) is neither a reward nor a plain loss term
            # any live occurrence in the coefficient leaks, also through a group normalisation
            as_reward = [p for p in places if p.coefficient_of_live]
        else:  # a normalisation of the advantages the analysis cannot read keeps the coefficient
            as_reward = [p for p in places if p.coefficient_of_live and p.affine]
        if not as_reward:
            continue
        judge_reward_sign(symbol, as_reward, RewardFact(fact.loss, term.entry or fact.sink, "the policy-gradient coefficient",
                                                        "returns", fact.call_stack), ctx)
        named = ctx.named_rewards.get(symbol)
        if named is not None:  # where it is stored as a reward or an advantage
            judge_reward_term(symbol, as_reward, RewardFact(fact.loss, named.sink, named.target, "returns",
                                                            named.call_stack), ctx)
            continue
        sink = term.entry or term.anchor or fact.sink  # where the coefficient is formed, else where it is differentiated
        # a coefficient of the live factor of its own token only (`sum_t ratio_t * kl_t`)
        # (for an estimate whose form is seen: a tensor only named as a KL may be anything)
        if term.estimator is not None:
            as_reward = [replace(p, reduced="none") if p.token_coefficient and p.reduced == "sum" else p
                         for p in as_reward]
        judge_reward_term(symbol, as_reward, RewardFact(fact.loss, sink, "the policy-gradient coefficient", "returns",
                                                        fact.call_stack), ctx)


def _products(expr, algebra, limit: int = 2000) -> list:
    """The products in `expr` and in the inner expressions of the reductions it holds, each seen
    as written: expanding the reductions in place would cancel a group's centring
    (`x - mean(x)` is 0 token by token)."""
    found, stack, seen = [], [expr], set()
    while stack and len(seen) < limit:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        reduction = algebra.table.reductions.get(node)
        if reduction is not None:
            stack.append(reduction.inner)
            continue
        if isinstance(node, tm.Mul):
            found.append(node)
        stack.extend(getattr(node, "args", ()))
    return found


def weights_the_score_function(loss, symbol, ctx: RuleContext) -> bool:
    """Whether the KL term `symbol` multiplies the policy's log-probs themselves somewhere in the
    loss (`(scores - beta * kl) * logp`, the REINFORCE form), not an exponential of them (a ratio,
    which makes `k3 * ratio` a weighted loss term): dataflow, not the name, says it is a reward."""
    algebra = ctx.algebra
    for node in _products(algebra.wrap(loss), algebra):
        holding = [a for a in node.args if a == symbol or symbol in algebra.kl_symbols(a)]
        others = [a for a in node.args if not (a == symbol or symbol in algebra.kl_symbols(a))]
        if not holding or not others or not algebra.score_function_form(tm.Mul(*others)):
            continue
        places = occurrences(tm.Mul(*holding), algebra).get(symbol, [])
        # the weight is linear in the term (up to a group normalisation), not `sigmoid(kl)`
        weights = [p for p in places if not p.in_scale]
        if weights and all(p.linear or p.scaled for p in weights):
            return True
    return False
