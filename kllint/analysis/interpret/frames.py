"""The interpreter's frames: the state of one function activation (`Frame`), the step budget of
an entry point (`MAX_STEPS`, `Budget`) and the tables of roles that several parts read."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import libcst as cst

from kllint.analysis.module import ModuleInfo
from kllint.analysis.symbolic import LP, OLD, REF
from kllint.analysis.values import Anchor, ClassRef, Condition, Value

MAX_STEPS = 150_000
CALL_SHARE = 40_000  # on the rerun of an entry point that ran out of steps, the steps one followed call may spend
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
    adapters_off: bool = False  # inside `with policy.disable_adapter():` (see kllint.analysis.adapters)
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
    loops: int = 0  # loops of this function around the running code (`statements.MAX_PROBED_LOOPS`)
    # the parameters the caller passed explicitly, and the locals computed from them
    # (`derived`): a branch that runs because of a test on one of them is chosen by the caller
    # (`chosen`), and so is what is formed in it. `inherited`: the parameters the caller passed
    # from its own explicit parameters; a test on one of them passes the choice further out
    # (`passed_choice`, shared with branch frames, is set then)
    unit_depth: int = 0  # the depth of the innermost frame running an entry point of its module
    explicit: frozenset[str] = frozenset()
    derived: set = field(default_factory=set)
    inherited: frozenset[str] = frozenset()
    chosen: bool = False
    passed_choice: list = field(default_factory=list)

    def child(self, **changes: Any) -> "Frame":
        """A copy with `changes` (field name -> value); lists and dicts not changed are shared,
        as with `dataclasses.replace`, which this equals for a dataclass without `__post_init__`
        (and is about five times faster than: frames are copied at every call and branch)."""
        unknown = changes.keys() - _FRAME_FIELDS
        if unknown:
            raise TypeError(f"Frame has no field {sorted(unknown)[0]!r}")
        copy = object.__new__(Frame)
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(changes)
        return copy


_FRAME_FIELDS = frozenset(f.name for f in fields(Frame))
