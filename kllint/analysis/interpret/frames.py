"""The interpreter's frames: the state of one function activation (`Frame`), the step budget of
an entry point (`MAX_STEPS`, `Budget`) and the tables of roles that several parts read."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from kllint.analysis.module import ModuleInfo
from kllint.analysis.symbolic import LP, OLD, REF
from kllint.analysis.values import Anchor, ClassRef, Condition, Value

MAX_STEPS = 150_000
CONFIG_TOKENS = frozenset({"config", "cfg", "args", "conf", "hparams", "hps", "settings", "opts", "options", "kwargs"})
ROLE_SYMBOL = {"policy": LP, "reference": REF, "old": OLD}


class Budget(Exception):
    """The analysis of one entry point ran out of steps."""


@dataclass
class Frame:
    """The state of one function activation."""

    module: ModuleInfo
    env: dict[str, Value]
    function: str = "<module>"
    no_grad: bool = False
    conditions: tuple[Condition, ...] = ()
    returns: list[Value] = field(default_factory=list)
    depth: int = 0
    emit: bool = True
    epoch_loop: str = ""  # the iterable of the enclosing loop of updates over one batch (`range(ppo_epochs)`)
    class_ref: ClassRef | None = None
    call_stack: tuple[Anchor, ...] = ()
    accumulators: dict[str, Value] = field(default_factory=dict)
    closure: dict[str, Value] | None = None
    active: tuple[int, ...] = ()
    returned: bool = False
    return_nodes: list = field(default_factory=list)  # shared with branch frames, like `returns`
    root: cst.CSTNode | None = None  # the parsed definition whose code runs (for positions)

    def child(self, **changes: Any) -> "Frame":
        return replace(self, **changes)
