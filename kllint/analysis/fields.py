"""Fields of containers: values stored as attributes of objects and read back elsewhere.

Rollout code often computes a KL (or reference log-probs) in one method, keeps it on a
container (`experience.kl = kl`, `Experience(seq, logp, ..., kl)`, a dataclass field) and
reads it back in another method that shapes rewards or builds a loss (`experience.kl`). The
analysis does not follow the identity of objects through lists, loops and method calls, so it
keeps, for the file being checked, what was stored under each attribute name (only values that
carry log-prob roles or KL terms) and gives it to a later read of that attribute on an object
it knows nothing else about. The store is filled as the entry points run, in source order: a
read in a method that runs before any store (and is not called after one) sees nothing.
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

import libcst as cst

from kllint.analysis import keyed
from kllint.analysis.definitions import LazyFunction, parameter_names
from kllint.analysis.roles import sink_kind
from kllint.analysis.values import (
    STARRED, ClassRef, Instance, Mapping, Model, Sequence, Tensor, Unknown, Value, identity_key, alternatives, join,
)

if TYPE_CHECKING:
    from kllint.analysis.algebra import Algebra

MAX_FIELDS = 256
# field-store names of container keys written with `td.set("key", v)` (subscript stores are
# mostly metrics dicts: `metrics["ref_logps"] = ref_logps.mean()` would shadow the batch's data)
KEY_FIELD = "[]"
SUNK = "<sunk>"  # the name under which `judged` reads: the values stored under reward names


class FieldStore:
    """Attribute name -> the values stored under it, per storing statement (joined over its
    runs), for one checked file."""

    def __init__(self, algebra: "Algebra") -> None:
        self.algebra = algebra
        self.values: dict[str, dict[int, Value]] = {}
        # keys of values stored under reward / return names (judged there) -> the sink kind
        # (`returns` once stored as a return or advantage)
        self.sunk: dict = {}
        self.version = 0  # changes whenever a stored value changes
        self.changed: dict[str, int] = {}  # attribute name -> the version at which its values last changed
        self._reading: list[set[str]] = []  # the names read by each followed call in progress, innermost last

    def _carries(self, value: Value, reduced_too: bool = False) -> bool:
        if isinstance(value, Tensor):
            # dataflow only: per-token log-prob roles or KL estimates of a seen form, not a value
            # that is a KL by its name alone (`lambda_kl` of a constructor)
            algebra = self.algebra
            if algebra.table.reductions_in(value.expr) and not reduced_too:
                return False  # a mean or sum kept for logging (`metrics["kl"] = kl.mean()`), not data
            return bool(algebra.table.role_symbols(value.expr)) or any(
                algebra.kterms[k].estimator is not None for k in algebra.kl_symbols(value.expr))
        if isinstance(value, Sequence):
            return any(self._carries(item, reduced_too) for item in value.items)
        return isinstance(value, Model)

    def write(self, attr: str, value: Value, site: int) -> None:
        """Remember `value` (its options that carry roles or KL terms) under `attr`, as stored by
        the statement `site` (an id; a read joins the statements' values, so that no one
        statement's many runs crowd out the others)."""
        # an attribute keeps a reduced KL too (`self.kl_loss = kl.mean()` read by another method);
        # a container key's mean is mostly a metric (`td.set("kl", kl.mean())`)
        kept = [option for option in alternatives(value) if self._carries(option, not attr.startswith(KEY_FIELD))]
        if not kept:
            return
        if attr not in self.values and len(self.values) >= MAX_FIELDS:
            return
        kind = sink_kind(attr)
        if kind is not None:
            keys = {identity_key(option) for option in kept}
            if any(self.sunk.get(key) not in (kind, "returns") for key in keys):
                for key in keys:
                    if self.sunk.get(key) != "returns":
                        self.sunk[key] = kind
                self.version += 1
                self.changed[SUNK] = self.version
        by_site = self.values.setdefault(attr, {})
        before = by_site.get(site)
        by_site[site] = join(*((before,) if before is not None else ()), *kept)
        if by_site[site] != before:
            self.version += 1
            self.changed[attr] = self.version

    def read(self, attr: str) -> Value | None:
        """What was stored under `attr`, or None."""
        if self._reading:
            self._reading[-1].add(attr)
        stored = self.values.get(attr)
        return join(*stored.values()) if stored else None

    def judged(self, value: Value, kind: str = "rewards") -> bool:
        """Whether `value` is a value read back, unchanged, from a reward or return field: its
        reward sink of `kind` was judged where it was stored (`advantages = experience.advantages`).
        A value stored as rewards and then used as the advantage itself (no returns computed in
        between) is judged again as a return: storing rewards decided nothing about credit."""
        if self._reading:
            self._reading[-1].add(SUNK)
        stored = self.sunk.get(identity_key(value))
        return stored is not None and (stored == "returns" or kind == "rewards")

    # -- what a memoised call depends on ------------------------------------------------------
    def open(self) -> None:
        """A followed call starts: the names it reads (also in its own calls) are collected."""
        self._reading.append(set())

    def close(self) -> frozenset[str]:
        """The followed call opened last ends: the names it read, which its caller read too."""
        names = self._reading.pop()
        if self._reading:
            self._reading[-1].update(names)
        return frozenset(names)

    def depend(self, names: frozenset[str]) -> None:
        """The call in progress depends on `names` (a memoised call that read them is reused)."""
        if self._reading:
            self._reading[-1].update(names)

    def stale(self, names: frozenset[str], version: int) -> bool:
        """Whether the values under any of `names` changed after `version`: a memoised call
        that read them must be computed afresh (writes to other names leave it valid)."""
        return any(self.changed.get(name, 0) > version for name in names)


def constructor_fields(cls: ClassRef, init: cst.FunctionDef | LazyFunction | None, args: list[Value],
                       kwargs: dict[str, Value]) -> list[tuple[str, Value]]:
    """The fields a constructor call `Cls(a, b, name=c)` fills: by the parameters of `__init__`
    (conventionally stored under their own names; a `LazyFunction` names them from its outline,
    unparsed), else by the annotated fields of the class body in order (a dataclass or named
    tuple)."""
    if init is not None:
        params = parameter_names(init)[1:]
    else:
        params = class_field_names(cls.node)
    pairs = list(zip(params, args))
    pairs += [(name, value) for name, value in kwargs.items() if name in params]
    return pairs


def constructor_state(pairs: list[tuple[str, Value]], node: cst.Call) -> tuple[tuple[str, Value], ...]:
    """An instance's `state` from the arguments its constructor call binds (empty when none is
    static: the instance is then like any other of its class). Another instance is not kept
    (`Trainer(config=Config(...))`): instances that differ only by what they hold would be
    followed one by one, each call of their methods computed afresh."""
    kept = [(name, value) for name, value in pairs if _state_value(value)]
    if not kept:
        return ()
    known = dict(kept)
    state = tuple((name, known.get(name, Unknown(name))) for name, _ in pairs)
    return state + (((STARRED, Unknown(STARRED)),) if any(arg.star for arg in node.args) else ())


def _state_value(value: Value) -> bool:
    """A static argument an instance keeps: not an instance (nor a container or key-picked
    choice of instances)."""
    return keyed.static(value) and not any(isinstance(inner, Instance) for inner, _ in keyed.conditioned(value)) and (
        not isinstance(value, (Sequence, Mapping)) or all(
            _state_value(item) for item in (value.items if isinstance(value, Sequence) else [v for _, v in value.items])))


def class_field_names(node: Any) -> list[str]:
    """Annotated names of a class body, in order (`kl: Optional[torch.Tensor] = None`)."""
    outline = getattr(node, "_node", None)
    if isinstance(outline, ast.ClassDef):
        return [s.target.id for s in outline.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    if isinstance(node, cst.ClassDef):
        names = []
        for line in node.body.body:
            if isinstance(line, cst.SimpleStatementLine):
                names += [s.target.value for s in line.body
                          if isinstance(s, cst.AnnAssign) and isinstance(s.target, cst.Name)]
        return names
    return []

