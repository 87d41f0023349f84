"""The words of the findings: estimator names, the configuration that leads to a finding, and help
texts in the spelling of the framework the code computes with (PyTorch, JAX or MLX).

The framework is the analysis' observation of the code (`kllint.analysis.autograd.framework_of`:
its imports and the imported names the function uses), never words in comments or strings.
"""
from __future__ import annotations

import ast
from dataclasses import replace
from typing import Iterable

import libcst as cst

from kllint.analysis.autograd import Framework, framework_of
from kllint.analysis.conditions import narrowed
from kllint.analysis.module import code_of
from kllint.analysis.values import Anchor, Condition

ESTIMATOR_WORDS = {
    "k1": "k1 (the log-ratio logp - ref)",
    "k2": "k2 (0.5 * (logp - ref)**2)",
    "k3": "k3 (exp(ref - logp) - (ref - logp) - 1)",
    "k3-inverted": "inverted k3 (exp(logp - ref) - 1 - (logp - ref))",
    "abs": "abs(logp - ref)",
    "reference-ratio": "the ratio pi/pi_ref",
    "analytic": "the analytic KL(pi || ref) over the vocabulary",
    "surrogate": "the score-function KL surrogate logp * stopgrad(log-ratio)",
    "straight-through": "a straight-through KL term (the estimate's value, the log-ratio as gradient coefficient)",
}
SHORT_NAMES = {"k3-inverted": "inverted k3", "reference-ratio": "the ratio pi/pi_ref", "analytic": "the analytic KL",
               "surrogate": "the score-function surrogate", "abs": "abs", "straight-through": "straight-through"}


def as_code(text: str) -> str:
    """`text` in code backticks when it is code (an expression, a statement, a method call as
    `.sum()`); prose such as `the policy-gradient coefficient` stays as it is."""
    body = f"x{text}" if text.startswith(".") else text
    for mode in ("eval", "exec"):
        try:
            ast.parse(body, mode=mode)
            return f"`{text}`"
        except (SyntaxError, ValueError):
            continue
    return text


def short_name(estimator: str) -> str:
    """`k3`, `abs`, `inverted k3`: an estimator named inside a sentence."""
    return SHORT_NAMES.get(estimator, estimator)


def framework_at(*anchors: Anchor | None) -> Framework:
    """The framework of the first anchor whose code singles one out (PyTorch when none does)."""
    for anchor in anchors:
        if anchor is None or anchor.module is None:
            continue
        found = framework_of(anchor.module, anchor.root)
        if found is not None:
            return found
    return Framework.TORCH


# -- help texts, per framework -----------------------------------------------------------------------------------

_STOP = {Framework.TORCH: "{x}.detach()", Framework.JAX: "jax.lax.stop_gradient({x})",
         Framework.MLX: "mx.stop_gradient({x})"}
_EXP = {Framework.TORCH: "torch.exp", Framework.JAX: "jnp.exp", Framework.MLX: "mx.exp"}
_REVERSE_CUMSUM = {
    Framework.TORCH: "torch.flip(torch.flip({x}, [-1]).cumsum(-1), [-1])",
    Framework.JAX: "jnp.flip(jnp.flip({x}, -1).cumsum(-1), -1)",
    Framework.MLX: "mx.cumsum({x}, axis=-1, reverse=True)",
}
_NO_GRAD = {Framework.TORCH: "outside `torch.no_grad()` and without `.detach()`",
            Framework.JAX: "without `jax.lax.stop_gradient`", Framework.MLX: "without `mx.stop_gradient`"}
_CLIP = {Framework.TORCH: "log_ratio.clamp(-20, 20)", Framework.JAX: "jnp.clip(log_ratio, -20, 20)",
         Framework.MLX: "mx.clip(log_ratio, -20, 20)"}


def stop(framework: Framework, x: str, atom: bool = True) -> str:
    """`x` without gradient, in the framework's spelling (`x.detach()`, `jax.lax.stop_gradient(x)`);
    `atom`: `x` needs no parentheses before `.detach()`."""
    return _STOP[framework].format(x=x if atom or framework is not Framework.TORCH else f"({x})")


def reverse_cumsum(framework: Framework, x: str) -> str:
    """The reward-to-go of `x` over the last axis (`torch.flip(torch.flip(x, [-1]).cumsum(-1), [-1])`)."""
    return _REVERSE_CUMSUM[framework].format(x=x)


def loss_help(framework: Framework, estimator: str = "k3") -> str:
    """KL101 / KL102 / KL103. `estimator`: the one the live-ratio alternative multiplies (`k1`
    for KL101, whose k1 times a live ratio has the reverse-KL gradient, as k3 has; else `k3`)."""
    k2 = "k2 = 0.5 * (logp - ref) ** 2"
    return (f"route the gradient through k2 and keep the logged value: `{k2}` then "
            f"`kl = k2 - {stop(framework, 'k2')} + {stop(framework, 'kl')}`, or multiply {estimator} by a live ratio "
            f"`{_EXP[framework]}(logp - old)`; better, put detached k1 in the reward with returns over the whole response")


def token_credit_help(framework: Framework) -> str:
    """KL201: the reward-to-go rewrite."""
    d = stop(framework, "(logp - ref) * mask", atom=False)
    return (f"credit each token with the KL of the tokens after it: `kl_rtg = {reverse_cumsum(framework, d)}`, "
            "then `kl_loss = logp * kl_rtg * mask` reduced like the policy-gradient term "
            "(or put detached k1 in the reward and compute returns with gamma = 1)")


def reward_to_go_help(framework: Framework) -> str:
    """KL202."""
    return (f"accumulate the KL rewards from the end: `kl_rtg = {reverse_cumsum(framework, 'kl')}`, or compute "
            "returns/GAE with gamma = 1 over the token rewards")


def detach_reward_help(framework: Framework) -> str:
    """KL301."""
    if framework is Framework.TORCH:
        return "detach the KL before it enters the reward: `kl.detach()` (or compute it under `torch.no_grad()`)"
    return f"stop the KL's gradient before it enters the reward: `{stop(framework, 'kl')}`"


def k1_reward_help(framework: Framework) -> str:
    """KL302."""
    return (f"use k1 in the reward: `kl = {stop(framework, 'logp - ref_logp', atom=False)}`, "
            "with returns or GAE over the whole response")


def live_kl_help(framework: Framework) -> str:
    """KL104."""
    return f"compute the KL term from the live policy log-probs, {_NO_GRAD[framework]}"


def importance_weight_help(framework: Framework) -> str:
    """KL401."""
    weight = f"{_EXP[framework]}(logp - old_logp)"
    return f"multiply the KL term by the importance weight `{weight}` (live with k3, `{stop(framework, weight)}` with k2)"


def token_ratio_help(framework: Framework) -> str:
    """KL402."""
    return f"weight each token's KL with its own ratio `{_EXP[framework]}(logp - old_logp)`"


def rollout_ratio_help(framework: Framework) -> str:
    """KL403."""
    return (f"use the rollout log-probs: `{_EXP[framework]}(logp - old_logp)` "
            f"(or `{_EXP[framework]}(logp - {stop(framework, 'logp')})` on-policy)")


def clamp_first_help(framework: Framework) -> str:
    """KL601."""
    return f"clamp the log-ratio before `exp` (e.g. `{_CLIP[framework]}`), then clamp the result if needed"


# -- configurations ----------------------------------------------------------------------------------------------

def _quoted(options: Iterable[str], default: str | None) -> str:
    words = [repr(o) + (" (the default)" if o == default else "") for o in options]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _simplified(conditions: tuple[Condition, ...]) -> list[Condition]:
    """One condition per value: a value known to be one of some options needs no "is not" next to it."""
    conditions = narrowed(conditions) or conditions
    merged: dict[tuple[str, bool, str], Condition] = {}
    for condition in conditions:
        key = (condition.name, condition.negated, condition.predicate)
        known = merged.get(key)
        if known is None or condition.predicate != "in":
            merged[key] = condition
        elif not condition.negated:  # both hold: the options common to both
            common = tuple(o for o in known.options if o in condition.options) or condition.options
            merged[key] = Condition(condition.name, common, False, known.default or condition.default)
        else:
            merged[key] = Condition(condition.name, tuple(dict.fromkeys(known.options + condition.options)), True,
                                    known.default or condition.default)
    return [c for c in merged.values() if not ((c.negated or c.predicate != "in") and (c.name, False, "in") in merged)]


_AFFIX_VERBS = {"endswith": ("ends with", "does not end with"), "startswith": ("starts with", "does not start with")}


def describe_conditions(conditions: tuple[Condition, ...], other_defaults: bool = True) -> str:
    """`` `self.config.kl_loss_type` is 'low_var_kl' (the default) `` for the branch conditions of
    one path, each value named once; empty for code that runs unconditionally. A default that is
    not among the options is said too (`(default 'kl')`) unless `other_defaults` is false."""
    parts = []
    for condition in _simplified(conditions)[-2:]:
        default = condition.default
        if condition.predicate != "in":
            verb = _AFFIX_VERBS[condition.predicate][condition.negated]
            parts.append(f"`{condition.name}` {verb} {condition.options[0]!r}")
            continue
        text = f"`{condition.name}` is {'not ' if condition.negated else ''}{_quoted(condition.options, default)}"
        if other_defaults and default is not None and default not in condition.options:
            text += f" (default {default!r})"
        parts.append(text)
    return " and ".join(parts)


def unnamed_defaults(paths: list[tuple[Condition, ...]]) -> str:
    """` (`kl_penalty` defaults to 'kl')` for the values whose default is none of the options
    named in `paths` (said once, after all of them); empty when there is none."""
    defaults: dict[str, str] = {}
    named: dict[str, set[str]] = {}
    for path in paths:
        for condition in _simplified(path):
            if condition.default is not None:
                defaults.setdefault(condition.name, condition.default)
            if condition.predicate == "in":  # `is not 'k2' (the default)` names the default too
                named.setdefault(condition.name, set()).update(condition.options)
    missing = [f"`{name}` defaults to {default!r}" for name, default in defaults.items()
               if default not in named.get(name, set())]
    return f" ({'; '.join(missing)})" if missing else ""


def _named_by_callers(paths: list[tuple[Condition, ...]]) -> list[tuple[Condition, ...]]:
    """A condition on a helper's parameter as the helper reads it (`kl_penalty`, the helper run
    as an entry point) takes the name a caller gives the same test (`self.config.kl_penalty`):
    one configuration value, said once."""
    richer: dict[tuple, str] = {}
    for path in paths:
        for c in path:
            if c.tested and c.name != c.tested:
                richer.setdefault((c.tested, c.options, c.negated), c.name)
    if not richer:
        return paths
    renamed = []
    for path in paths:
        renamed.append(tuple(replace(c, name=richer[(c.tested, c.options, c.negated)])
                             if c.name == c.tested and (c.tested, c.options, c.negated) in richer else c
                             for c in path))
    return list(dict.fromkeys(renamed))


def _without_subsumed(paths: list[tuple[Condition, ...]]) -> list[tuple[Condition, ...]]:
    """The paths that no other path covers: `mode` is 'k1' and `agg` is 'sum' says nothing more
    once `mode` is 'k1' alone leads to the same finding."""
    def words(path: tuple[Condition, ...]) -> frozenset:
        return frozenset((c.name, c.options, c.negated, c.predicate) for c in path)
    sets = [words(path) for path in paths]
    return [path for path, mine in zip(paths, sets) if not any(other < mine for other in sets)]


def merge_paths(paths: list[tuple[Condition, ...]], defaults: bool = True) -> str:
    """The configurations of several paths to one finding, each value named once: paths that
    differ only in the options of one value are joined (`is 'k3' or 'low_var_kl'`); with
    `defaults`, the defaults that are none of the options follow once (`unnamed_defaults`)."""
    paths = _named_by_callers(paths)
    groups: dict[tuple, list[tuple[Condition, ...]]] = {}
    for simple in _without_subsumed([tuple(_simplified(path)) for path in paths]):
        key = tuple((c.name, c.negated, c.predicate) for c in simple) + tuple(c for c in simple[:-1])
        if simple and (simple[-1].negated or simple[-1].predicate != "in"):
            last = simple[-1]  # `is not 'a'` or `is not 'b'` is not `is not 'a' or 'b'`
            key += ((last.name, last.options, last.negated, last.predicate),)
        groups.setdefault(key, []).append(simple)
    texts = []
    for members in groups.values():
        last = members[0][-1] if members[0] else None
        if last is None:
            continue
        options = tuple(dict.fromkeys(o for m in members for o in m[-1].options))
        default = next((m[-1].default for m in members if m[-1].default is not None), None)
        joined = members[0][:-1] + (replace(last, options=options, default=default),)
        texts.append(describe_conditions(joined, other_defaults=False))
    texts = list(dict.fromkeys(texts))
    text = "; or when ".join(texts[:4]) + ("; ..." if len(texts) > 4 else "")
    return text + (unnamed_defaults(paths) if defaults and text else "")


_INVERSES = {"is": "is not", "is not": "is", "==": "!=", "!=": "==", "in": "not in", "not in": "in",
             "<": ">=", ">=": "<", ">": "<=", "<=": ">"}


def branch_taken_when(test: str, holds: bool) -> str:
    """`` `test` `` when it holds; when it does not, the inverted comparison for a single
    comparison (`` `old is not None` `` for `old is None`), else `` not `test` ``."""
    if holds:
        return f"`{test}`"
    try:
        node = cst.parse_expression(test)
    except cst.ParserSyntaxError:
        return f"not `{test}`"
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        operator = code_of(target.operator).strip()
        inverse = _INVERSES.get(" ".join(operator.split()))
        if inverse is not None:
            left, right = code_of(node.left), code_of(target.comparator)
            return f"`{left} {inverse} {right}`"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        return f"`{code_of(node.expression)}`"
    return f"not `{test}`"

