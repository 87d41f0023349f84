"""The memo of followed calls and what it is keyed by: a call tree's reach (`Reach`), a memoised
helper call (`CallMemo`), the summaries of argument values (`signature_of`, `exact_signature`),
the arguments a caller passes on from its own caller (`passes_on`), and how a call's keywords
and record-building read (`builds_a_record`, `unpacked_keywords`)."""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from kllint.analysis.interpret.frames import Frame
from kllint.analysis.interpret.walk import values_used
from kllint.analysis.module import dotted_name
from kllint.analysis.values import plain as _plain
from kllint.analysis.values import (
    ClassRef, ConfigValue, FunctionRef, Instance, Literal, Mapping, Model, Sequence, Unknown, Value, alternatives, join,
)

@dataclass
class Reach:
    """How far a followed call's call tree went: the deepest frame depth that made a call, and
    the functions entered (ids of their definitions)."""

    deepest: int
    entered: set[int]


@dataclass(frozen=True)
class CallMemo:
    """A memoised helper call: its result, its facts (with the call-stack prefix to replace),
    and its call tree's reach (`reach` levels below the call, the functions `entered`)."""

    result: Value
    facts: list
    prefix: int
    reach: int
    entered: frozenset[int]
    fields_version: int | None = None  # the field store's version after it (None: it read no field)
    fields_read: frozenset[str] = frozenset()  # the attribute names it read (a write to another leaves it valid)
    passed_choice: bool = False  # what it computes was chosen by arguments the caller passed on from its own caller
    generates: bool = False  # the policy generated samples in its call tree
    forwards: tuple = ()  # the networks' forwards its call tree ran: (name, gradient tracking on)


def builds_a_record(callee: cst.BaseExpression, value: Value) -> bool:
    """Whether a call builds a record from its keywords: a class of the project, `dict`, or a
    library class (a capitalised name: `TensorDict`, a dataclass of outputs); not a function or a
    method (`metrics.update(...)`, `logger.log(...)` only read their keywords)."""
    if any(isinstance(option, ClassRef) for option in alternatives(value)):
        return True
    if any(isinstance(option, FunctionRef) for option in alternatives(value)):
        return False
    name = dotted_name(callee)
    last = name.rsplit(".", 1)[-1] if name else ""
    return last == "dict" or last[:1].isupper()


def unpacked_keywords(value: Value) -> list[tuple[str, Value]]:
    """The keyword arguments `**value` passes: the keys every alternative of `value` holds (each
    a dict with literal string keys), each with the join of its values; none otherwise."""
    options = alternatives(value)
    if not options or not all(isinstance(o, Mapping) for o in options):
        return []
    common = [key for key, _ in options[0].items if all(o.get(key) is not None for o in options[1:])]
    return [(key, join(*(o.get(key) for o in options))) for key in dict.fromkeys(common) if key.isidentifier()]


def signature_of(values: list[Value]) -> tuple | None:
    """A hashable summary of call arguments that carry no log-prob or KL (None otherwise): calls of
    the same helper with the same summary give the same result, so it is computed once."""
    parts: list[object] = []
    for value in values:
        if _plain(value):
            parts.append("plain")
        elif isinstance(value, Literal):
            parts.append(("literal", repr(value.value)))
        elif isinstance(value, ConfigValue):
            parts.append(("config", value.name, repr(value.default) if not isinstance(value.default, Mapping) else "map"))
        elif isinstance(value, Model):
            # by name too: a network's forwards decide whether it is the reference by dataflow
            # (`EntryPoints.references_by_dataflow`), so two networks are never one memo entry
            parts.append(("model", value.role, value.name, value.frozen))
        elif isinstance(value, Instance):
            parts.append(("instance", id(value.cls.node), value.state))
        elif isinstance(value, (Mapping, Sequence)):
            items = [v for _, v in value.items] if isinstance(value, Mapping) else list(value.items)
            inner = signature_of(items)
            if inner is None:
                return None
            parts.append((type(value).__name__, inner))
        else:
            return None
    return tuple(parts)


def exact_signature(values: list[Value], frame: Frame) -> tuple | None:
    """A memo key for calls whose arguments carry a log-prob or KL: the arguments themselves
    (values compare by structure; an `Unknown` stands for any other, it carries nothing the
    callee can tell apart) with the caller's branch conditions and loop kind, which the callee's
    anchors and facts inherit. None when a value cannot be hashed."""
    signature = ("exact", tuple("unknown" if isinstance(v, Unknown) else v for v in values), frame.conditions,
                 frame.epoch_loop)
    try:
        hash(signature)
    except TypeError:
        return None
    return signature


def argument_expressions(node: cst.CSTNode) -> tuple[list[cst.BaseExpression], dict[str, cst.BaseExpression]]:
    """The expressions of a call's plain positional arguments (up to the first `*`) and of its
    keyword arguments."""
    positional: list[cst.BaseExpression] = []
    keywords: dict[str, cst.BaseExpression] = {}
    if isinstance(node, cst.Call):
        placed = True
        for arg in node.args:
            if arg.keyword is not None:
                keywords[arg.keyword.value] = arg.value
            elif arg.star:
                placed = False
            elif placed:
                positional.append(arg.value)
    return positional, keywords


def passes_on(node: cst.CSTNode, frame: Frame) -> tuple:
    """Which arguments of a call its caller computes from its own explicit parameters (positions
    and keywords): part of a memoised call's key, since the choice they pass on is recorded."""
    passed_on = frame.explicit | frame.derived
    if not passed_on:
        return ()
    positional, keywords = argument_expressions(node)
    return (tuple(i for i, e in enumerate(positional) if not passed_on.isdisjoint(values_used(e))),
            tuple(sorted(k for k, e in keywords.items() if not passed_on.isdisjoint(values_used(e)))))
