"""Suggested rewrites (Ruff applicability levels) and the estimate handed to the gradient checker.

KL101/102/103: straight-through k2 keeps the logged value and gives the log-ratio as gradient
coefficient (unsafe: it changes training on purpose). KL302: k1 in the reward (unsafe).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from kllint.analysis.facts import KLTerm
from kllint.analysis.index import ModuleInfo
from kllint.diagnostics import Estimate, Fix

if TYPE_CHECKING:
    from kllint.rules.base import RuleContext
    from kllint.rules.loss import LossTerm

ROLE_NAMES = {"logp": "policy", "logp_detached": "policy_detached", "ref": "reference", "old": "old"}


def token_credit_help() -> str:
    return ("credit each token with the KL of the tokens after it: "
            "`kl_rtg = ((logp - ref) * mask).detach().flip(-1).cumsum(-1).flip(-1)`; "
            "`kl_loss = (logp * kl_rtg * mask)` reduced like the policy-gradient term "
            "(or put detached k1 in the reward and compute returns with gamma = 1)")


def _free_names(node: cst.CSTNode) -> list[str]:
    names: list[str] = []

    class Collector(cst.CSTVisitor):
        def visit_Attribute(self, attr: cst.Attribute) -> bool:
            attr.value.visit(self)
            return False

        def visit_Name(self, name: cst.Name) -> None:
            names.append(name.value)

        def visit_Arg(self, arg: cst.Arg) -> bool:
            arg.value.visit(self)
            return False

        def visit_Call(self, call: cst.Call) -> bool:
            if not isinstance(call.func, cst.Name):
                call.func.visit(self)
            for arg in call.args:
                arg.visit(self)
            return False

    node.visit(Collector())
    return list(dict.fromkeys(names))


def _setup(module: ModuleInfo, function: cst.FunctionDef | None, anchor_line: int, names: list[str],
           known: dict[str, str]) -> tuple[list[str], list[str]]:
    """Assignments (as written) before the anchor that define `names`, transitively, stopping at
    names whose role is known (`known`: name -> role); and the remaining free names."""
    if function is None:
        return [], names
    assignments: dict[str, cst.Assign] = {}
    stack: list[cst.CSTNode] = list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
    ordered: list[cst.CSTNode] = []
    while stack:
        node = stack.pop(0)
        if isinstance(node, cst.SimpleStatementLine):
            ordered.extend(node.body)
        elif not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            for part in ("body", "orelse"):
                child = getattr(node, part, None)
                inner = getattr(child, "body", None)
                if isinstance(inner, (list, tuple)):
                    stack.extend(inner)
                elif isinstance(child, cst.CSTNode) and part == "orelse":
                    stack.append(child)
    for node in ordered:
        if isinstance(node, cst.Assign) and module.span(node).line < anchor_line:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    assignments[target.target.value] = node
    setup: list[cst.Assign] = []
    free: list[str] = []
    pending, seen = list(names), set()
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        node = assignments.get(name)
        if node is None or name in known:
            free.append(name)
            continue
        if node not in setup:
            setup.append(node)
        pending.extend(_free_names(node.value))
    setup.sort(key=lambda n: module.span(n).line)
    return [module.source(n).strip() for n in setup], free


MODULE_ALIASES = ("torch", "F", "jnp", "jax", "np", "nn", "math", "optax")


def estimate_for(term: KLTerm, ctx: "RuleContext", usage: str) -> Estimate | None:
    """The estimate expression as written, with its setup and operand roles, for `--confirm`."""
    module = ctx.modules.get(term.anchor.path)
    if module is None or term.anchor.node is None:
        return None
    try:
        source = module.source(term.anchor.node).strip()
    except Exception:  # noqa: BLE001
        return None
    from kllint.analysis import roles as name_roles

    function = module.function_at(term.anchor.span.line)
    known = ctx.name_roles.get((term.anchor.path, term.anchor.function), {})
    setup, free = _setup(module, function, term.anchor.span.line, _free_names(term.anchor.node), known)

    role_map = []
    aliases = []
    for name in free:
        if name in module.imports or name in MODULE_ALIASES:
            aliases.append((name, module.imports.get(name, name)))
            continue
        seen = known.get(name, set())
        # a name seen with several roles (branches): the reference or live side is the KL's operand
        preferred = next((r for r in ("ref", "logp", "old", "logp_detached") if r in seen), "")
        role = ROLE_NAMES.get(preferred) or name_roles.logprob_role(name)
        if role is None and name_roles.is_mask_name(name):
            role = "mask"
        if role is not None:
            role_map.append((name, role))
    framework = "jax" if any(q.startswith("jax") for _, q in aliases) else "torch"
    granularity = "per-token" if term.per_token else "sequence"
    return Estimate(source, tuple(role_map), usage, granularity, tuple(setup), framework, tuple(aliases))


def _role_names(term: KLTerm, ctx: "RuleContext") -> tuple[str | None, str | None, bool]:
    estimate = estimate_for(term, ctx, "loss")
    if estimate is None:
        return None, None, False
    policy = next((n for n, r in estimate.roles if r in ("policy", "policy_detached")), None)
    reference = next((n for n, r in estimate.roles if r == "reference"), None)
    return policy, reference, estimate.framework == "jax"


def loss_rewrite(item: "LossTerm", ctx: "RuleContext") -> Fix | None:
    """Straight-through k2: same value, gradient coefficient = the log-ratio (unsafe)."""
    term = item.term
    if term.anchor.path != ctx.entry.display:
        return Fix("display-only", "rewrite the KL term in the helper where it is computed")
    policy, reference, is_jax = _role_names(term, ctx)
    original = ctx.entry.source(term.anchor.node).strip() if term.anchor.node is not None else None
    if policy is None or reference is None or original is None or "\n" in original:
        return Fix("display-only", "route the gradient through k2 (straight-through) and keep the value")
    surrogate = f"0.5 * ({policy} - {reference}) ** 2"
    if is_jax:
        replacement = (f"({surrogate} - jax.lax.stop_gradient({surrogate}) + jax.lax.stop_gradient({original}))")
    else:
        replacement = f"({surrogate} - ({surrogate}).detach() + ({original}).detach())"
    return Fix("unsafe", "straight-through k2: keep the value, use the log-ratio as gradient coefficient", replacement)


def reward_rewrite(term: KLTerm, ctx: "RuleContext") -> Fix | None:
    """k1 in the reward (unsafe: changes the reward on purpose)."""
    if term.anchor.path != ctx.entry.display:
        return Fix("display-only", "use k1 in the helper where the reward KL is computed")
    policy, reference, _ = _role_names(term, ctx)
    if policy is None or reference is None:
        return Fix("display-only", "use k1 (logp - ref_logp) as the KL reward")
    return Fix("unsafe", "use the unbiased k1 estimator in the reward", f"({policy} - {reference})")
