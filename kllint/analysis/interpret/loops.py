"""What a loop does, read from its syntax: whether it walks the positions of a sequence (a
returns or GAE loop: its running value credits each token with the tokens after it) or repeats
over items of the same shape (teachers, micro-batches, samples: an accumulation there is a sum
of tensors of one shape, not a reduction over tokens); and whether its iterations reuse one
batch computed before it (several updates per batch, `UpdateLoop`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import libcst as cst

from kllint.analysis import roles
from kllint.analysis.callables import BoundMethod, UnresolvedAttribute
from kllint.analysis.interpret.walk import assigned_names, bound_names, cached_per_node, used_names, walk_nodes
from kllint.analysis.module import dotted_name
from kllint.analysis.values import Model, Unknown, Value, alternatives

_FLIPS = ("reversed", "flip", "fliplr", "flipud")


def walks_positions(node: cst.For | cst.While) -> bool:
    """Whether the loop steps through the positions of a sequence: it runs backwards (`reversed`,
    a negative `range` step, `[::-1]`, a `flip`), or its cursor (the loop target; for a
    `while`, a name the body assigns) picks a position on an inner axis of a tensor (`x[:, t]`,
    `x[..., t + 1]`); a `while` whose counter indexes anything (`rewards[t]`) too. A loop over a
    list of teachers or micro-batches does neither (`logps[name]` is a key, not a position)."""
    return cached_per_node("walks_positions", node, lambda: _walks_positions(node))


def _walks_positions(node: cst.For | cst.While) -> bool:
    body = list(node.body.body)
    if isinstance(node, cst.For):
        if runs_backwards(node.iter):
            return True
        cursors = set(bound_names(node.target))
    else:
        cursors = set(assigned_names(body))
    if not cursors:
        return False
    for statement in body:
        for item in walk_nodes(statement, skip=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            if not isinstance(item, cst.Subscript):
                continue
            indexed = [element for element in item.slice if isinstance(element.slice, cst.Index)
                       and cursors & set(used_names(element.slice.value))]
            if indexed and (len(item.slice) > 1 or isinstance(node, cst.While)):
                return True
    return False


def runs_backwards(iterable: cst.BaseExpression) -> bool:
    """`reversed(...)`, `range(T - 1, -1, -1)`, `x[::-1]`, `x.flip(1)` / `torch.flip(x, ...)`."""
    for item in walk_nodes(iterable, skip=(cst.Lambda,)):
        if isinstance(item, cst.Call):
            called = (dotted_name(item.func) or "").rsplit(".", 1)[-1]
            if called in _FLIPS:
                return True
            if called == "range" and len(item.args) == 3 and _negative(item.args[2].value):
                return True
        elif isinstance(item, cst.Subscript):
            for element in item.slice:
                if isinstance(element.slice, cst.Slice) and element.slice.step is not None \
                        and _negative(element.slice.step):
                    return True
    return False


def _negative(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)


def accumulating(body: list[cst.CSTNode], name: str):
    """The statements of `body` (not in nested definitions) that store into `name` a value
    computed from it: `name += x`, `name = name + x`."""
    for statement in body:
        for item in walk_nodes(statement, skip=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            if isinstance(item, cst.AugAssign) and isinstance(item.target, cst.Name) and item.target.value == name:
                yield item
            elif isinstance(item, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name for t in item.targets) \
                    and name in used_names(item.value):
                yield item


@dataclass
class UpdateLoop:
    """A loop whose iterations reuse data computed before it (`source`: its iterable's text).
    A loss computed in it is on samples of an older policy, unless the policy generated fresh
    samples in the iteration before it (`fresh`, set when a generation runs inside)."""

    source: str
    fresh: bool = False


class LoopState:
    """The loops of updates running now and the generations by the policy inside them (a mixin
    of the interpreter)."""

    @property
    def update_loops(self) -> list[UpdateLoop]:
        """The loops of updates over one batch running now, outermost first (the interpreter
        runs depth-first: a callee running inside a loop sees it here)."""
        if not hasattr(self, "_update_loop_stack"):
            self._update_loop_stack: list[UpdateLoop] = []
        return self._update_loop_stack

    @property
    def generations(self) -> int:
        """How many generations by the policy have run so far (a memoised call that ran one
        runs it again when replayed)."""
        return getattr(self, "_generation_count", 0)

    def note_generation(self) -> None:
        """The policy generated samples: every loop running now gets fresh samples in this iteration."""
        self._generation_count = self.generations + 1
        for loop in self.update_loops:
            loop.fresh = True

    def stale_loop(self, frame: Any) -> str:
        """The loop of several updates per batch a loss computed now runs in (its iterable's
        text), if the samples were generated before it: '' when the policy generated fresh ones
        earlier in the iteration of every such loop."""
        if not frame.epoch_loop:
            return ""
        if not self.update_loops:
            return frame.epoch_loop
        return next((loop.source for loop in self.update_loops if not loop.fresh), "")


_WRAPPERS = frozenset({"enumerate", "tqdm", "list", "iter", "tuple", "reversed"})
_REPEATS = frozenset({"range", "trange", "repeat"})


def reuses_one_batch(node: cst.For, is_local: Callable[[str], bool], root: cst.CSTNode | None = None) -> bool:
    """Whether every iteration works on data that existed before the loop: a counted repetition
    (`range(k)`) whose body draws no new data (no `next(...)`, no inner loop over a data
    source), or a loop over pieces of a local batch (`rollout.split(n)`, `minibatches(batch)`,
    `batch[start:stop]`, or a local name assigned such pieces in the function `root`). A loop
    over a loader, a trainer's attribute or a parameter (`self.prompt_loader`, `loader`) draws
    a new item each time: it reuses nothing by itself. `is_local`: whether a name is a local
    value or parameter of the running function."""
    kind = _iterable_kind(node.iter, is_local, root)
    if kind == "pieces":
        return True
    if kind != "repeat":
        return False
    return not _draws_data(list(node.body.body), is_local, root)


def _iterable_kind(iterable: cst.BaseExpression, is_local: Callable[[str], bool], root: cst.CSTNode | None,
                   depth: int = 0) -> str:
    """`repeat` (a count), `pieces` (made here from a local value), or `source` (anything else)."""
    while isinstance(iterable, cst.Call) and iterable.args and \
            (dotted_name(iterable.func) or "").rsplit(".", 1)[-1] in _WRAPPERS:
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call) and (dotted_name(iterable.func) or "").rsplit(".", 1)[-1] in _REPEATS:
        return "repeat"
    if isinstance(iterable, (cst.Call, cst.Subscript)):
        names = [n for n in used_names(iterable) if n not in ("self", "cls")]
        if any(is_local(n) for n in names):
            return "pieces"
    if isinstance(iterable, cst.Name) and root is not None and depth < 3:
        for value in _assigned_values(root, iterable.value):  # `loader = rollout.split(n)` earlier
            if _iterable_kind(value, is_local, root, depth + 1) == "pieces":
                return "pieces"
    return "source"


def _assigned_values(root: cst.CSTNode, name: str) -> list[cst.BaseExpression]:
    """The values assigned to `name` in the function `root` (not in nested definitions)."""
    return cached_per_node("assigned_values", root, lambda: _collect_assignments(root)).get(name, [])


def _collect_assignments(root: cst.CSTNode) -> dict[str, list[cst.BaseExpression]]:
    found: dict[str, list[cst.BaseExpression]] = {}
    if not isinstance(root, cst.FunctionDef) or not isinstance(root.body, cst.IndentedBlock):
        return found
    for statement in root.body.body:
        for item in walk_nodes(statement, skip=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            if isinstance(item, cst.Assign):
                for target in item.targets:
                    if isinstance(target.target, cst.Name):
                        found.setdefault(target.target.value, []).append(item.value)
    return found


def _draws_data(body: list[cst.CSTNode], is_local: Callable[[str], bool], root: cst.CSTNode | None) -> bool:
    """A `next(...)` call, or a loop over a data source, in the body (not in nested definitions)."""
    for statement in body:
        for item in walk_nodes(statement, skip=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            if isinstance(item, cst.Call) and isinstance(item.func, cst.Name) and item.func.value == "next":
                return True
            if isinstance(item, cst.For) and _iterable_kind(item.iter, is_local, root) == "source":
                return True
    return False


GENERATION_METHODS = frozenset({"generate", "generate_sequences"})


def samples_from_policy(func: cst.Attribute, value: Value) -> bool:
    """Whether a call of `func` (evaluated to `value`) samples from the policy: `generate` of
    the policy network (`policy.generate(...)`, `unwrap(model).module.generate(...)`), or of a
    receiver the analysis cannot see that is not named as the reference (a sampling engine)."""
    if func.attr.value not in GENERATION_METHODS:
        return False
    for option in alternatives(value):
        if isinstance(option, BoundMethod) and isinstance(option.obj, Model):
            if option.obj.role != "reference" and not option.obj.frozen:
                return True
        elif isinstance(option, (BoundMethod, UnresolvedAttribute, Unknown)):
            receiver = dotted_name(func.value) or ""
            if not any(roles.names_reference_strongly(part) for part in receiver.split(".")):
                return True
    return False


_STEPS = frozenset({"step", "optimizer_step", "apply_gradients", "apply_updates"})


def accumulates_gradients(node: cst.For, root: cst.CSTNode | None) -> bool:
    """Gradient accumulation: the body steps no optimizer, and the block it is in steps one after
    it (`for part in batch.chunk(n): loss.backward()` then `opt.step()`): one update per batch."""
    if root is None or _steps(list(node.body.body)):
        return False
    for item in walk_nodes(root, skip=(cst.Lambda,)):
        block = getattr(item, "body", None)
        statements = list(block) if isinstance(block, (list, tuple)) else \
            list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else None
        if statements is not None and any(s is node for s in statements):
            after = statements[[i for i, s in enumerate(statements) if s is node][0] + 1:]
            return _steps(after)
    return False


def _steps(statements: list[cst.CSTNode]) -> bool:
    """An optimizer step among the statements (not in nested definitions)."""
    for statement in statements:
        for item in walk_nodes(statement, skip=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            if isinstance(item, cst.Call) and (dotted_name(item.func) or "").rsplit(".", 1)[-1] in _STEPS:
                return True
    return False
