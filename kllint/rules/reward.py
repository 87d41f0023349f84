"""Rules on KL terms that enter rewards, returns or advantages (score-function use): only a
detached k1, credited with the KL of the whole remaining response, gives the reverse-KL
gradient (Tang & Munos 2025, arXiv:2506.09477, section 4)."""
from __future__ import annotations

from kllint.analysis.facts import RewardFact
from kllint.analysis.symbolic import LP, ROLE_SYMBOLS
from kllint.diagnostics import Fix
from kllint.rules import wording
from kllint.rules.base import RuleContext, estimator_words, returned_through
from kllint.rules.fixes import estimate_for
from kllint.rules.flow import reaches_loss, reward_symbols
from kllint.rules.kl_fixes import reward_rewrite
from kllint.rules.trace import reward_trace, root_cause


def check_reward(fact: RewardFact, ctx: RuleContext) -> None:
    """A KL term stored under a reward or return name. Where the analysis also sees it in a
    differentiated value, that dataflow decides what it is (a policy-gradient coefficient, a
    preference objective's implicit reward, a weight) and the name is not used; otherwise the
    name stands for the policy-gradient term that is out of sight."""
    for symbol, places in reward_symbols(fact, ctx).items():
        if reaches_loss(ctx, symbol, fact.value.expr):
            continue
        judge_reward_term(symbol, places, fact, ctx, pathwise=False)


def judge_reward_term(symbol, places, fact: RewardFact, ctx: RuleContext, pathwise: bool = True) -> None:
    """KL301 / KL302 / KL202 for one KL term used as a reward (score-function coefficient).
    `pathwise`: the term is seen multiplying the policy's score function or ratio in a loss,
    so a gradient it carries leaks into the update (KL301)."""
    algebra = ctx.algebra
    term = algebra.kterms[symbol]
    name = term.estimator.name if term.estimator else None
    if name in ("reference-ratio", "surrogate"):
        return
    trace = reward_trace(term, fact, algebra.table)
    root, clamped = root_cause(term, algebra.table, fact.sink)
    framework = wording.framework_at(term.anchor, fact.sink)
    proven = not term.assumed or term.anchor.function in ctx.differentiating
    if pathwise and LP in algebra.table.role_symbols(term.expr) and proven:
        ctx.report("KL301", term.anchor,
                   f"{{subject}} enters {wording.as_code(fact.target)} while it still carries the policy's gradient: a pathwise gradient leaks through the reward",
                   help=wording.detach_reward_help(framework),
                   trace=trace, call_sites=returned_through(term), call_stack=fact.call_stack, fallback=fact.sink,
                   fix=Fix("unsafe", "detach the KL term", None), subject=estimator_words(term), variant=name or "",
                   root=root, clamped=clamped, about=symbol)
    if name not in (None, "k1"):
        ctx.report("KL302", term.anchor,
                   "{subject} is used as a reward: only k1 gives an unbiased gradient"
                   + (" (k3 gives grad KL(pi||ref) - grad KL(ref||pi))" if name == "k3" else ""),
                   help=wording.k1_reward_help(framework),
                   trace=trace, call_sites=returned_through(term), call_stack=fact.call_stack, fallback=fact.sink,
                   fix=reward_rewrite(term, ctx), estimate=estimate_for(term, ctx, usage="reward"), variant=name,
                   subject=estimator_words(term), root=root, clamped=clamped, about=symbol)
    per_token = term.per_token and (term.estimator is None or bool(term.expr.free_symbols & ROLE_SYMBOLS))
    if fact.kind == "returns" and per_token and any(p.reduced == "none" for p in places) and ctx.first("KL202", symbol):
        ctx.report("KL202", _entry_place(term, fact),
                   f"a per-token KL enters {wording.as_code(fact.target)} without reward-to-go: each token's coefficient holds only its own KL, not that of the tokens after it (partial gradient)",
                   help=wording.reward_to_go_help(framework),
                   trace=trace, call_stack=fact.call_stack, fallback=fact.sink,
                   fix=Fix("display-only", "use the reverse cumulative sum of the per-token KL"),
                   estimate=estimate_for(term, ctx, usage="reward"), about=symbol)


def judge_reward_sign(symbol, places, fact: RewardFact, ctx: RuleContext) -> None:
    """KL105 for a KL term that weights the policy's score function in a minimised loss: there
    the penalty must lower the weight of a token (`-logp * (score - beta * kl)`, the term enters
    the loss multiplying `logp` with a positive sign). With the other sign everywhere it is a
    bonus: the update raises the probability of the tokens that diverge most."""
    term = ctx.algebra.kterms[symbol]
    scale = term.estimator.scale if term.estimator else 1.0
    if not places or not all(p.sign * scale < 0 for p in places) or not ctx.first("KL105", symbol):
        return
    ctx.report("KL105", _entry_place(term, fact),
               "the KL penalty is added to the weight of the policy's log-probs, as a bonus: training maximises the divergence from the reference",
               help="subtract it from the reward: `weight = score - kl_coef * kl`",
               trace=reward_trace(term, fact, ctx.algebra.table), call_stack=fact.call_stack, fallback=fact.sink,
               about=symbol)


def _entry_place(term, fact: RewardFact):
    """Where a per-token KL that is stored as a return is reported: where it joins the value
    stored (added to a sequence advantage, accumulated into a running total), when that is in
    the function storing it; else where it is stored."""
    entry = term.entry
    if entry is not None and (entry.path, entry.function) == (fact.sink.path, fact.sink.function):
        return entry
    return fact.sink
