"""The rewrites of KL estimates (Ruff applicability levels): KL101/102/103 get straight-through
k2, which keeps the logged value and gives the log-ratio as gradient coefficient; KL302 gets k1
in the reward. Both are unsafe (they change training on purpose) and written as a person would:
names bound on the lines before, lines within `line-length`, stale comments rewritten
(`kllint.rules.rewrite`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from kllint.analysis.autograd import Framework
from kllint.analysis.facts import KLTerm
from kllint.analysis.module import ModuleInfo
from kllint.diagnostics import Fix
from kllint.rules import rewrite
from kllint.rules.bound_names import bound_before
from kllint.rules.fixes import (
    atom, detached_weight, log_ratio_source, parenthesized, role_names, estimate_for, setup_bound_names,
)
from kllint.rules.wording import framework_at

if TYPE_CHECKING:
    from kllint.rules.base import RuleContext
    from kllint.rules.loss_terms import LossTerm


def stop_spelling(module: ModuleInfo, framework: Framework):
    """How this module stops a gradient, from its own imports: `x.detach()` (PyTorch),
    `jax.lax.stop_gradient(x)` or `mx.stop_gradient(x)` under the names it imports them as;
    None when it imports no way to write it."""
    if framework is Framework.TORCH:
        return lambda x: f"{atom(x)}.detach()"
    wanted = {Framework.JAX: (("jax", ".lax.stop_gradient"), ("jax.lax", ".stop_gradient"),
                              ("jax.lax.stop_gradient", "")),
              Framework.MLX: (("mlx.core", ".stop_gradient"), ("mlx.core.stop_gradient", ""))}[framework]
    for qualname, rest in wanted:
        alias = next((name for name, target in sorted(module.imports.items()) if target == qualname), None)
        if alias is not None:
            return lambda x, call=f"{alias}{rest}": f"{call}({x})"
    return None


def _named_log_ratio(term: KLTerm, ctx: "RuleContext", policy: str | None, reference: str | None) -> str | None:
    """A name the estimate's own setup binds to the log-ratio (`log_ratio = logp - ref`, either
    sign: k2 squares it), so that the rewrite does not spell it out again."""
    estimate = estimate_for(term, ctx, "loss")
    if estimate is None or policy is None or reference is None:
        return None
    wanted = {f"{policy}-{reference}", f"{reference}-{policy}"}
    found = None
    for line in estimate.setup:
        target, _, value = line.partition("=")
        target = target.strip()
        if target.isidentifier() and value.replace(" ", "").split("#")[0] in wanted:
            found = target
        elif found is not None and found in setup_bound_names(line):
            found = None  # reassigned on the way to the estimate: no longer the plain log-ratio
    return found


VALUE_NAMES = {"k1": "log_ratio", "k3": "k3", "k3-inverted": "k3_inverted", "abs": "abs_kl"}


def loss_rewrite(item: "LossTerm", ctx: "RuleContext") -> Fix | None:
    """Straight-through k2: same value, gradient coefficient = the log-ratio (unsafe).

    Per token the log-ratio is `policy - reference` (the operand names of the estimate); for a
    sequence-level term it is the sequence log-ratio the estimator is built on (the argument of
    its `exp` or `abs`), so the surrogate has the shape of the value it stands in for. The
    surrogate is bound to a name on the line before (`k2 = 0.5 * d ** 2`, then
    `kl = k2 - k2.detach() + value.detach()`), and so is the value when the line would be
    longer than `line-length`. Withheld where the statement cannot take a line before it (the
    estimate in a branch of a conditional expression, a lambda, a compound statement's header).
    """
    term = item.term
    display = Fix("display-only", "route the gradient through k2 (straight-through) and keep the value")
    module = term.anchor.module
    if module is None:
        return Fix("display-only", "rewrite the KL term in the helper where it is computed")
    policy, reference, _ = role_names(term, ctx)
    original = unparenthesized_source(term.anchor.node, module) if term.anchor.node is not None else None
    if term.per_token:
        log_ratio = f"{policy} - {reference}" if policy is not None and reference is not None else None
    else:
        log_ratio = log_ratio_source(term.anchor.node, module) if term.anchor.node is not None else None
        if term.estimator is not None and term.estimator.name == "k1":
            log_ratio = original
    stop = stop_spelling(module, framework_at(term.anchor))
    if log_ratio is None or original is None or stop is None or "\n" in original or "\n" in log_ratio:
        return display
    surrogate = f"0.5 * {atom(log_ratio)} ** 2"
    weight = detached_weight(term.anchor.node, module)
    if weight is not None:  # off-policy: keep the detached importance weight on the surrogate
        surrogate = f"{surrogate} * {weight}"
    statement = rewrite.statement_at(module, term.anchor.span)
    if statement is None or statement.conditional or rewrite.rebinds_a_branch_value(statement):
        return display
    taken = rewrite.names_in_scope(module, statement)
    bindings: list[tuple[str, str]] = []
    square = f"0.5 * {atom(log_ratio)} ** 2"
    # `log_ratio = logp - ref` in the estimate's setup: k2 is written with it
    named = _named_log_ratio(term, ctx, policy, reference) if term.per_token else None
    # the log-ratio written out in the value (either sign): named once (by the name a statement
    # before already binds it to, else a new one), used by both
    variants = [log_ratio] + ([f"{reference} - {policy}"] if term.per_token else [])
    found = next((v for v in variants if rewrite.replace_subexpression(original, v, "_") != original), None)
    if found is not None and not found.isidentifier():
        name = bound_before(module, statement, found)
        if name is None and named is None:
            name = rewrite.fresh_name("log_ratio", taken)
            bindings.append((name, found))
        if name is not None:
            original = rewrite.replace_subexpression(original, found, name)
            named = named or name
    if named is not None:
        surrogate = surrogate.replace(square, f"0.5 * {named} ** 2")
    k2 = rewrite.fresh_name("k2", taken)
    estimator = term.estimator.name if term.estimator is not None else "KL"
    comment = f"# {estimator} value, gradient of k2 (straight-through)"
    bindings.append((k2, surrogate))
    value = original
    negative = term.estimator is not None and term.estimator.scale < 0
    for _ in range(2):  # on one line; else with the value named too, wrapped if it still does not fit
        # a value oriented against the reverse KL (`ref - logp`, scale < 0) takes minus k2's gradient
        new = (f"{stop(value)} - ({k2} - {stop(k2)})" if negative else f"{k2} - {stop(k2)} + {stop(value)}")
        final = value != original or value.isidentifier()  # a plain name is not named again
        region, content, fits, replacement = rewrite.rewrite_statement(
            module, statement, term.anchor.span, new, bindings, comment, ctx.line_length,
            parenthesize=not getattr(term.anchor.node, "lpar", None), wrap=final)
        if fits or final:
            break
        value = bound_before(module, statement, original)
        if value is None:
            value = rewrite.fresh_name(VALUE_NAMES.get(estimator, "kl_value"), taken)
            bindings = bindings[:-1] + [(value, original), (k2, surrogate)]
    return Fix("unsafe", "straight-through k2: keep the value, use the log-ratio as gradient coefficient",
               replacement, region, content)


def unparenthesized_source(node: cst.CSTNode, module: "ModuleInfo") -> str:
    """The code of an expression of `module` without the parentheses around it: a value wrapped
    over lines by a formatter (`kl = (\n    exp(d) - d - 1\n)`) is one line inside them."""
    if getattr(node, "lpar", None):
        node = node.with_changes(lpar=[], rpar=[])
    return module.source(node).strip()


def reward_rewrite(term: KLTerm, ctx: "RuleContext") -> Fix | None:
    """k1 in the reward (unsafe: changes the reward on purpose). A comment next to it that
    speaks of the old estimator is rewritten too.

    Display-only when the sampled-token log-probs are not visible (a full-vocabulary analytic
    KL) or when the flagged span is only part of the estimate (`d ** 2` with the 1/2 outside).
    """
    module = term.anchor.module
    if module is None:
        return Fix("display-only", "use k1 in the helper where the reward KL is computed")
    policy, reference, _ = role_names(term, ctx)
    name = term.estimator.name if term.estimator is not None else None
    original = unparenthesized_source(term.anchor.node, module) if term.anchor.node is not None else ""
    partial = name == "k2" and not any(half in original.replace(" ", "") for half in ("0.5", "/2", ".5*"))
    if policy is None or reference is None or name == "analytic" or partial:
        return Fix("display-only", "use k1 (logp - ref_logp) as the KL reward")
    replacement = parenthesized(f"{policy} - {reference}", term.anchor.node)
    description = "use the unbiased k1 estimator in the reward"
    statement = rewrite.statement_at(module, term.anchor.span)
    if statement is not None and (rewrite.stale(statement.comment) or any(
            rewrite.stale(line.strip()) for line in module.lines[statement.above - 1:statement.start - 1])):
        region, content, _, replacement = rewrite.rewrite_statement(
            module, statement, term.anchor.span, f"{policy} - {reference}", [],
            "# k1, the log-ratio: the unbiased KL reward", ctx.line_length,
            parenthesize=not getattr(term.anchor.node, "lpar", None))
        return Fix("unsafe", description, replacement, region, content)
    return Fix("unsafe", description, replacement)
