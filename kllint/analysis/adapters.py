"""Adapter-disabled forwards: a LoRA policy run with its adapters switched off is the reference.

PEFT's `PeftModel.disable_adapter()` is a context manager under which the wrapped network runs
its frozen base weights, the model the adapters were trained from; trainers use it instead of a
separate reference network (GRPO, DPO and PPO trainers of `trl` with `peft_config`). A forward
of the policy inside such a block, directly or through a helper, gives the reference's
log-probs: `Frame.adapters_off` carries that, and `kllint.analysis.calls.forward` reads it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import libcst as cst

from kllint.analysis.values import Literal, ModuleRef, alternatives

ADAPTER_OFF_METHODS = frozenset({"disable_adapter"})


@dataclass(frozen=True)
class Context:
    """A context manager that changes how the code inside its `with` runs, made where it is
    called and possibly held in a variable or chosen by a conditional expression
    (`ctx = torch.inference_mode() if ref else nullcontext()`): `no_grad` (gradient tracking
    off), `grad` (on), `adapters_off` (a LoRA policy's adapters disabled), `null` (nothing)."""

    kind: str


GRAD_ON_CONTEXTS = frozenset({"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"})
SET_GRAD_CONTEXTS = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                               "torch.autograd.grad_mode.set_grad_enabled"})
NULL_CONTEXTS = frozenset({"contextlib.nullcontext", "contextlib.suppress"})


def context_made(node: cst.Call, func: Any, args: list, kwargs: dict) -> Context | None:
    """The context manager a call makes, as a value (`Context`), so that one held in a variable
    or chosen by a conditional expression acts as it does written in the `with`: a library
    grad-mode switch by its qualified name (`torch.no_grad()`, `torch.inference_mode()`,
    `torch.enable_grad()`, `torch.set_grad_enabled(flag)` with a literal flag),
    `contextlib.nullcontext()`, or `x.disable_adapter()` of PEFT. None for any other call."""
    from kllint.analysis.frameworks import NO_GRAD_CONTEXTS

    if isinstance(node.func, cst.Attribute) and node.func.attr.value in ADAPTER_OFF_METHODS:
        return Context("adapters_off")
    if not isinstance(func, ModuleRef):
        return None
    name = func.qualname
    if name in NO_GRAD_CONTEXTS:
        return Context("no_grad")
    if name in GRAD_ON_CONTEXTS:
        return Context("grad")
    if name in NULL_CONTEXTS:
        return Context("null")
    if name in SET_GRAD_CONTEXTS:
        flag = args[0] if args else kwargs.get("mode")
        if isinstance(flag, Literal) and isinstance(flag.value, bool):
            return Context("grad" if flag.value else "no_grad")
    return None


def context_effect(value: Any) -> tuple[bool | None, bool]:
    """What entering `value` (a `with` item's value) does: (gradient tracking: False for off,
    True for on, None for unchanged, adapters switched off). A choice of contexts made at run
    time acts as written inline: the grad mode changes only when every choice changes it
    alike, the adapters are off when any choice switches them off (the other choice then
    runs a network without adapters, the reference being another network)."""
    options = alternatives(value)
    kinds = [option.kind if isinstance(option, Context) else None for option in options]
    grad = None
    if kinds and all(kind == "no_grad" for kind in kinds):
        grad = False
    elif kinds and all(kind == "grad" for kind in kinds):
        grad = True
    return grad, "adapters_off" in kinds


def disables_adapters(expr: cst.BaseExpression) -> bool:
    """Whether a `with` item switches the adapters off: `model.disable_adapter()`, also as one
    branch of a conditional expression (`m.disable_adapter() if peft else nullcontext()`, whose
    other branch leaves a network without adapters, the reference network being another one)."""
    if isinstance(expr, cst.IfExp):
        return disables_adapters(expr.body) or disables_adapters(expr.orelse)
    return (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in ADAPTER_OFF_METHODS)


class _YieldInside(cst.CSTVisitor):
    def __init__(self) -> None:
        self.depth = 0
        self.found = False

    def visit_With(self, node: cst.With) -> None:
        if any(disables_adapters(item.item) for item in node.items):
            self.depth += 1

    def leave_With(self, original_node: cst.With) -> None:
        if any(disables_adapters(item.item) for item in original_node.items):
            self.depth -= 1

    def visit_Yield(self, node: cst.Yield) -> None:
        if self.depth:
            self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested definition yields for itself

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


@lru_cache(maxsize=256)
def _yields_with_adapters_off(fdef: cst.FunctionDef) -> bool:
    visitor = _YieldInside()
    fdef.body.visit(visitor)
    return visitor.found


def yields_with_adapters_off(fdef: cst.FunctionDef | cst.Lambda) -> bool:
    """Whether a generator function yields inside a `with` that switches the adapters off: used
    as a context manager (`@contextmanager def null_ref_context(self)`), its block runs the
    policy as the reference."""
    return isinstance(fdef, cst.FunctionDef) and _yields_with_adapters_off(fdef)
