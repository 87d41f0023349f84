"""Adapter-disabled forwards: a LoRA policy run with its adapters switched off is the reference.

PEFT's `PeftModel.disable_adapter()` is a context manager under which the wrapped network runs
its frozen base weights, the model the adapters were trained from; trainers use it instead of a
separate reference network (GRPO, DPO and PPO trainers of `trl` with `peft_config`). A forward
of the policy inside such a block, directly or through a helper, gives the reference's
log-probs: `Frame.adapters_off` carries that, and `kllint.analysis.calls.forward` reads it.
"""
from __future__ import annotations

from functools import lru_cache

import libcst as cst

ADAPTER_OFF_METHODS = frozenset({"disable_adapter"})


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
