"""Template methods: a method inherited by the receiver's class that calls hooks the receiver's
class fills in. The module defining such a method runs it on its own class, whose hooks are
empty, so only the caller that picks the subclass sees what the call computes: a call of one
hands the callee what a finding is made of, as a call passing log-probs does
(`kllint.rules.base.RuleContext.localize`)."""
from __future__ import annotations

from typing import Any

import libcst as cst

from kllint.analysis.definitions import LazyClass
from kllint.analysis.values import ClassRef, FunctionRef, Instance

MAX_REACHED = 64  # names followed through `self.<name>(...)` calls from one method
MAX_SUBCLASS_LEVELS = 5


def dispatches_to_overrides(it: Any, ref: FunctionRef) -> bool:
    """Whether `ref` is a method inherited by the receiver's class, which fills a hook that
    `ref` calls (on `self`, directly or through other methods of its class) and that the class
    defining `ref` leaves to subclasses. `it`: the interpreter (`find_method`, `project_bases`)."""
    receiver, owner = ref.bound_self, ref.owner
    if not isinstance(receiver, Instance) or owner is None or receiver.cls.node is owner.node \
            or not isinstance(owner.node, LazyClass) or isinstance(ref.node, cst.Lambda):
        return False
    hooks = {name for name in _reached_on_self(it, owner, ref.node.name.value) & owner.node.hooks()
             if _left_to_subclasses(it, owner, name)}
    cls, seen = receiver.cls, 0
    while hooks and cls is not None and cls.node is not owner.node and seen < MAX_SUBCLASS_LEVELS:
        if not hooks.isdisjoint(_method_names(cls.node)):
            return True
        cls = next(iter(it.project_bases(cls)), None)
        seen += 1
    return False


def fills_a_hook(it: Any, ref: FunctionRef, node: cst.CSTNode, frame: Any) -> bool:
    """Whether `ref`, called as `self.<name>(...)` (`node`) in a method of a base class
    (`frame`), is the receiver's subclass filling a hook that the base leaves to subclasses:
    what it computes is the choice of whoever picked the subclass."""
    base = frame.class_ref
    func = node.func if isinstance(node, cst.Call) else None
    if base is None or ref.owner is None or not isinstance(ref.bound_self, Instance) \
            or not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self") \
            or ref.owner.node is base.node or not isinstance(base.node, LazyClass) or isinstance(ref.node, cst.Lambda):
        return False
    return _left_to_subclasses(it, base, ref.node.name.value)


def _reached_on_self(it: Any, owner: ClassRef, name: str) -> set[str]:
    """The names the method `name` of `owner` calls on `self`, and those the methods of `owner`
    and its project bases so called call on `self` in turn (at most MAX_REACHED)."""
    reached: set[str] = set()
    todo = [name]
    while todo and len(reached) < MAX_REACHED:
        method = todo.pop()
        found = it.find_method(owner, method)
        node = found.owner.node if found is not None and found.owner is not None else None
        if not isinstance(node, LazyClass):
            continue
        for called in node.self_calls(method) - reached:  # from the outline: nothing parsed
            reached.add(called)
            todo.append(called)
    return reached


def _left_to_subclasses(it: Any, owner: ClassRef, name: str) -> bool:
    """Whether the method `name` that `owner` calls is defined nowhere in its class and its
    project bases but as a declaration for subclasses to fill (an inherited concrete method that
    a subclass overrides is seen by the module defining it too)."""
    found = it.find_method(owner, name)
    return found is None or (found.owner is not None and isinstance(found.owner.node, LazyClass)
                             and name in found.owner.node.hooks())


def _method_names(cls: cst.ClassDef | LazyClass) -> set[str]:
    """The names of the methods a class defines (a top-level class answers from its outline,
    nothing parsed)."""
    if isinstance(cls, LazyClass):
        return set(cls.method_names)
    return {s.name.value for s in cls.body.body if isinstance(s, cst.FunctionDef)}
