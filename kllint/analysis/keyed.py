"""Values chosen by a key only known at run time, carried with the condition that picks them.

`REGISTRY[cfg.kind]` of a dict with literal keys is each entry under the condition that the key
names it (`Keyed`). An entry that is an object rather than a tensor (a class, an instance, a
module, a string, a method waiting for its call) keeps its condition through what the code then
does with it: `path.rsplit(".", 1)`, tuple unpacking, `importlib.import_module(path)`,
`getattr(module, name)`, calling the class, reading a method of the instance. Combining two such
values (the module and the class name cut from the same string) keeps only the pairs whose
conditions can hold together: the module of the `k1` entry never meets the class name of the
`k3` entry.
"""
from __future__ import annotations

from itertools import islice, product
from typing import Callable

from kllint.analysis.callables import BoundMethod
from kllint.analysis.conditions import narrowed
from kllint.analysis.values import (
    ClassRef, Condition, FunctionRef, Instance, Keyed, Literal, Mapping, ModuleRef, Partial, Sequence, Unknown,
    Value, alternatives, join,
)

MAX_COMBINATIONS = 64


def static(value: Value, depth: int = 0) -> bool:
    """An object whose identity carries no anchor (no tensor): the condition that chose it must
    travel with it, since nothing formed under the condition records it."""
    if isinstance(value, Keyed):
        return static(value.function, depth)
    if isinstance(value, (Literal, ModuleRef, ClassRef, FunctionRef, Partial, Instance)):
        return True
    if isinstance(value, BoundMethod):
        return depth < 3 and static(value.obj, depth + 1)
    if isinstance(value, Sequence):
        return depth < 3 and all(static(item, depth + 1) for item in value.items)
    if isinstance(value, Mapping):
        return depth < 3 and all(static(item, depth + 1) for _, item in value.items)
    return False


def conditioned(value: Value) -> list[tuple[Value, tuple[Condition, ...]]]:
    """Each alternative of `value` without its `Keyed` wrappers, with the conditions they held."""
    found = []
    for option in alternatives(value):
        conditions: tuple[Condition, ...] = ()
        while isinstance(option, Keyed):
            conditions += (option.condition,)
            option = option.function
        found.append((option, conditions))
    return found


def under(value: Value, conditions: tuple[Condition, ...]) -> Value:
    """`value` (each static alternative) chosen under `conditions`; a tensor keeps its own
    anchors, which record the conditions they were formed under, and is left as it is."""
    if not conditions:
        return value
    options = []
    for option in alternatives(value):
        if static(option):
            for condition in reversed(conditions):
                option = Keyed(option, condition)
        options.append(option)
    return join(*options)


def lifted(function: Callable[..., Value], *values: Value) -> Value:
    """`function` applied to each combination of the alternatives of `values` (at most
    MAX_COMBINATIONS), without their `Keyed` wrappers; each result is chosen under the
    conditions of its operands, and a combination whose conditions contradict is dropped."""
    results = []
    for combination in islice(product(*(conditioned(v) for v in values)), MAX_COMBINATIONS):
        conditions = narrowed(tuple(c for _, held in combination for c in held), strict=True)
        if conditions is None:
            continue
        results.append(under(function(*(inner for inner, _ in combination)), conditions))
    return join(*results) if results else Unknown()


def has_keyed(*values: Value) -> bool:
    """Whether any alternative of `values` is chosen by a run-time key."""
    return any(isinstance(option, Keyed) for value in values for option in alternatives(value))
