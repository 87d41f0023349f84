"""Bindings and sinks: what an assignment does to its target (names with their name-based
roles, tuple unpacking, items, attributes kept in the field store), and the reward and loss
sinks that assignments and outputs reach."""
from __future__ import annotations

import libcst as cst
from kllint.analysis import terms as tm

from kllint.analysis import frameworks as fw
from kllint.analysis import keyed
from kllint.analysis import roles
from kllint.analysis.fields import KEY_FIELD
from kllint.analysis.facts import LossFact, MetricFact, RewardFact, SinkKind
from kllint.analysis.interpret.expressions import string_value
from kllint.analysis.interpret.frames import Frame
from kllint.analysis.interpret.walk import values_used
from kllint.analysis.module import dotted_name
from kllint.analysis.symbolic import LPD, OLD
from kllint.analysis.values import (
    Alts, Keyed, Literal, Mapping, Model, Sequence, Tensor, Unknown, Value, alternatives, join,
)
from kllint.analysis.strings import KeyPattern


class Bindings:
    """Assigns values to targets and records sinks (a mixin of the interpreter)."""

    def assign(self, target: cst.BaseExpression, value: Value, frame: Frame, statement: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            if name in frame.accumulators:
                value = frame.accumulators[name]
            value = self._named(value, name, frame, statement)
            if frame.no_grad:
                value = self.detach_value(value)
            if frame.chosen:
                value = _chosen_here(value, frame)
            if frame.explicit and isinstance(statement, (cst.Assign, cst.AnnAssign)) and statement.value is not None:
                read = values_used(statement.value)
                if not frame.explicit.isdisjoint(read) or not frame.derived.isdisjoint(read):
                    frame.derived.add(name)  # `base = mode[:-1] if mode.endswith("+") else mode`
            frame.env[name] = value
            self.check_reward_sink(name, value, frame, statement)
        elif isinstance(target, (cst.Tuple, cst.List)):
            elements = [e.value for e in target.elements]
            for position, element in enumerate(elements):
                item = self._item(value, position, len(elements))
                self.assign(element, item, frame, statement)
        elif isinstance(target, cst.Subscript):
            base = target.value
            name = dotted_name(base)
            key = target.slice[0].slice.value if len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) else None
            entry = string_value(key.value) if isinstance(key, cst.SimpleString) else None
            stored_key = entry if isinstance(entry, str) else self._key_pattern(key, frame)
            if entry is not None:
                self.output_loss_entry(entry, value, frame, statement)
            if name is not None:
                last = name.split(".")[-1]
                if METRIC_WORDS & set(roles.tokens(last)):
                    self.metric_sink(value, statement, frame, f"stored in `{name}`")
                self.check_reward_sink(last, value, frame, statement)
                if isinstance(entry, str) and roles.sink_kind(last) is None:
                    self.check_reward_sink(entry, value, frame, statement)  # `batch["token_level_rewards"] = ...`
                if isinstance(base, cst.Name) and base.value in frame.env:
                    current = frame.env[base.value]
                    if frame.no_grad:  # `buffer[idx] = logp` under no_grad stores a detached copy
                        value = self.detach_value(value)
                    if stored_key is not None and (isinstance(current, Unknown) or (
                            isinstance(current, Tensor) and not self.algebra.has_roles(current.expr))):
                        # `store["adv"] = value` on a container the analysis cannot see: the entry
                        # is kept under its key (read back by `store["adv"]`, here or in a callee),
                        # the container's other keys still name their own values; a key made at
                        # run time (`f"ref_logps_{i}"`) is kept under its literal parts
                        self.fields.write(KEY_FIELD + stored_key, value, id(statement))
                    elif isinstance(current, (Tensor, Unknown)) and isinstance(value, (Tensor, Alts)):
                        frame.env[base.value] = join(current, value) if not isinstance(current, Unknown) else value
                    elif isinstance(current, Mapping) and isinstance(entry, str):  # `losses["kl"] = ...`
                        kept = tuple((k, v) for k, v in current.items if k != entry)
                        frame.env[base.value] = Mapping(kept + ((entry, value),), current.name)
        elif isinstance(target, cst.Attribute):
            self.check_reward_sink(target.attr.value, value, frame, statement)
            self.fields.write(target.attr.value, self.detach_value(value) if frame.no_grad else value, id(statement))

    def _key_pattern(self, key: cst.BaseExpression | None, frame: Frame) -> str | None:
        """The text a store's key made at run time is kept under: an f-string or a
        concatenation with a literal part (`f"ref_logps_{i}"` -> `ref_logps_{}`); None for
        other keys (a name, a number)."""
        if not isinstance(key, (cst.FormattedString, cst.BinaryOperation)):
            return None
        value = self.eval(key, frame.child(emit=False))
        if isinstance(value, KeyPattern):
            return value.text
        return value.value if isinstance(value, Literal) and isinstance(value.value, str) else None

    def _item(self, value: Value, position: int, count: int) -> Value:
        options = []
        for option in alternatives(value):
            if isinstance(option, Keyed):  # `path, name = entry.rsplit(".", 1)` of an entry a run-time key picked
                options.append(keyed.lifted(lambda inner: self._item(inner, position, count), option))
            elif isinstance(option, Sequence) and len(option.items) == count:
                options.append(option.items[position])
            elif isinstance(option, Tensor) and option.kind == "pieces":
                options.append(option.with_(kind=None))  # `first, second = logp.chunk(2)`
            elif isinstance(option, (Tensor, Model)):
                # `logits, cache = model(...)`: the outputs of a forward share its role
                options.append(option if position == 0 else Unknown())
            else:
                options.append(Unknown())
        return join(*options)

    def _named(self, value: Value, name: str, frame: Frame, statement: cst.CSTNode) -> Value:
        """Name-based roles for values the dataflow knows nothing about (`ref_lp = f(...)`)."""
        named = self.role_from_name(name, detached_source=frame.no_grad)
        if named is None:
            return value
        if any(isinstance(option, Unknown) or (isinstance(option, Tensor) and not self.algebra.has_roles(option.expr))
               for option in alternatives(value)):
            self.note_role(self.anchor(statement, frame), frame, named, f"name `{name}` of the variable assigned")
        options = []
        for option in alternatives(value):
            if (isinstance(option, Tensor) and option.expr == LPD and roles.logprob_role(name) == "old"
                    and not _detaches_in_place(statement)):
                options.append(option.with_(expr=OLD))  # the rollout policy's log-probs, read back
            elif isinstance(option, Unknown) and isinstance(named, Model):
                options.append(named)
            elif isinstance(named, Tensor) and (isinstance(option, Unknown) or (
                    isinstance(option, Tensor) and not self.algebra.has_roles(option.expr) and option.anchor is None
                    and not option.expr.is_number and option.kind is None)):
                options.append(named)
            elif isinstance(named, Tensor) and isinstance(option, Tensor) and option.kind == "buffer":
                # a preallocated buffer: a mask by its name, but log-probs only once written
                options.append(option if self.algebra.has_roles(named.expr) else named)
            else:
                options.append(option)
        return join(*options)

    def detach_value(self, value: Value) -> Value:
        options = []
        for option in alternatives(value):
            if isinstance(option, Tensor):
                options.append(self.algebra.detach(option))
            elif isinstance(option, Sequence):
                options.append(Sequence(tuple(self.detach_value(i) for i in option.items)))
            else:
                options.append(option)
        return join(*options)

    # ------------------------------------------------------------------ sinks
    def check_reward_sink(self, name: str, value: Value, frame: Frame, statement: cst.CSTNode) -> None:
        kind = roles.sink_kind(name)
        if kind is None or not frame.emit:
            return
        for option in alternatives(value):
            items = option.items if isinstance(option, Sequence) else (option,)
            for item in items:
                if (isinstance(item, Tensor) and self.algebra.kl_symbols(self._wrapped_expr(item))
                        and not self.fields.judged(item, kind)):
                    self.facts.append(RewardFact(item, self.anchor(statement, frame), name, kind, frame.call_stack))

    def _wrapped_expr(self, t: Tensor) -> tm.Term:
        return self.algebra.wrap(t)

    def output_loss_entry(self, key: object, value: Value, frame: Frame, node: cst.CSTNode) -> None:
        """`out["loss_kl"] = value` in a loss function (or the forward of a loss module): the
        entries named `loss` / `loss_*` of its output are the terms the caller differentiates."""
        if not isinstance(key, str) or not (key == "loss" or key.startswith("loss_")) or frame.depth > 0:
            return
        function = frame.function.rsplit(".", 1)[-1]
        owner = frame.class_ref.name if frame.class_ref is not None else ""
        if roles.is_loss_function_name(function) or (
                function in ("forward", "__call__") and (roles.is_loss_function_name(owner)
                                                         or owner.lower().endswith(("loss", "objective")))):
            self.loss_sink(value, node, frame, SinkKind.LOSS_ENTRY, frame.function, entry_key=key)

    def metric_sink(self, value: Value, node: cst.CSTNode, frame: Frame, how: str, depth: int = 0) -> None:
        """Record that `value` (each KL estimate it holds, also in a dict or a tuple) is read out
        as a number or logged at `node` (`MetricFact`)."""
        if not frame.emit or depth > 3:
            return
        for option in alternatives(value):
            if isinstance(option, (Mapping, Sequence)):
                items = [v for _, v in option.items] if isinstance(option, Mapping) else option.items
                for item in items:
                    self.metric_sink(item, node, frame, how, depth + 1)
            elif isinstance(option, Tensor) and option.anchor is not None and (
                    self.algebra.is_kl_candidate(option) or self.algebra.kl_symbols(option.expr)):
                self.facts.append(MetricFact(option, self.anchor(node, frame), how, frame.call_stack))

    def loss_sink(self, value: Value, node: cst.CSTNode, frame: Frame, kind: SinkKind, name: str = "",
                  entry_key: str = "") -> None:
        """Record that `value` is differentiated at `node` (how: `kind`, through `name`)."""
        if not frame.emit:
            return
        for option in alternatives(value):
            if isinstance(option, Tensor):
                self.facts.append(LossFact(option, self.anchor(node, frame), kind, name, frame.call_stack,
                                           self.stale_loop(frame), entry_key))


# words of a container that keeps numbers to log (`metrics["kl"] = ...`, `stats[...]`)
METRIC_WORDS = frozenset({"metrics", "metric", "stats", "statistics", "info", "infos", "logs", "log", "summary",
                          "scalars", "logged", "diagnostics"})
# methods that log their arguments (`wandb.log`, `self.log_dict`, `writer.add_scalar`)
LOG_METHODS = frozenset({"log", "log_dict", "log_metrics", "add_scalar", "add_scalars", "log_scalar", "record"})


def _detaches_in_place(statement: cst.CSTNode) -> bool:
    """`old = logp.detach()` (or `stop_gradient(logp)`, then casts or a clone): the current
    policy's log-probs without their gradient, from this very forward, not the rollout
    policy's read back from a batch, whatever the name says (GRPO's single-update form)."""
    value = statement.value if isinstance(statement, (cst.Assign, cst.AnnAssign)) else None
    while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
           and value.func.attr.value in fw.IDENTITY):
        value = value.func.value
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Attribute) and value.func.attr.value in fw.DETACH and not value.args:
        return True
    called = dotted_name(value.func) or ""
    return called.rsplit(".", 1)[-1] == "stop_gradient" and len(value.args) == 1


def _chosen_here(value: Value, frame: Frame) -> Value:
    """`value = log_ratio` in a branch the caller chose: an estimate formed earlier in this
    function is now the caller's choice too (`Anchor.chosen`)."""
    options, changed = [], False
    for option in alternatives(value):
        anchor = option.anchor if isinstance(option, Tensor) else None
        if anchor is not None and not anchor.chosen and anchor.stack == frame.call_stack:
            option = option.with_(anchor=anchor.with_conditions(anchor.conditions, chosen=True))
            changed = True
        options.append(option)
    return join(*options) if changed else value
