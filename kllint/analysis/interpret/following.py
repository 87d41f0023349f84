"""Calls: evaluating a call expression, following project functions into their bodies with the
caller's values bound, and memoising those calls (`CallMemo`, keyed by `signature_of` or
`exact_signature`) under the call depth limit `MAX_DEPTH`."""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

import libcst as cst

from kllint.analysis import calls
from kllint.analysis.adapters import context_made
from kllint.analysis.fields import KEY_FIELD
from kllint.analysis.interpret.attributes import Super
from kllint.analysis.interpret.bindings import LOG_METHODS
from kllint.analysis.interpret.call_memo import (
    CallMemo, Reach, argument_expressions, builds_a_record, exact_signature, passes_on, signature_of, unpacked_keywords,
)
from kllint.analysis.interpret.frames import Budget, Frame
from kllint.analysis.interpret.walk import values_used
from kllint.analysis.interpret.loops import samples_from_policy
from kllint.analysis.interpret.overrides import dispatches_to_overrides, fills_a_hook
from kllint.analysis.module import dotted_name
from kllint.analysis.relevance import entry_units
from kllint.analysis.symbolic import LP, LPD, REF
from kllint.analysis.values import (
    Anchor, ConfigValue, FunctionRef, Instance, Literal, Mapping, Model, Sequence, Tensor, Unknown, Value,
    alternatives, join,
)

MAX_DEPTH = 5


class Calls:
    """Evaluates calls and follows project functions (a mixin of the interpreter)."""

    _plain_calls: dict[tuple, CallMemo]  # set up by the interpreter
    _open_calls: list[Reach]

    def eval_Call(self, node: cst.Call, frame: Frame) -> Value:
        if isinstance(node.func, cst.Name) and node.func.value == "super" and frame.class_ref is not None:
            return Super(frame.class_ref, frame.env.get("self", Instance(frame.class_ref)))
        func = self.eval(node.func, frame)
        args, kwargs = self.call_arguments(node, frame)
        context = context_made(node, func, args, kwargs)
        if context is not None:
            return context
        if isinstance(node.func, cst.Attribute) and samples_from_policy(node.func, func):
            self.note_generation()  # fresh samples for the loops of updates running now
        if (isinstance(node.func, cst.Attribute) and node.func.attr.value in ("get", "pop") and args
                and isinstance(args[0], Literal) and isinstance(args[0].value, str)):
            mappings = [o for o in alternatives(func) if isinstance(o, Unknown) and o.name in ("get", "pop")]
            if mappings:
                base = self.eval(node.func.value, frame.child(emit=False))
                items = [o.get(args[0].value) for o in alternatives(base) if isinstance(o, Mapping)]
                if items and all(i is not None for i in items):
                    return join(*items)  # `d.get("key")` of a dict the analysis built
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "get" and args:
            mappings = [o for o in alternatives(func) if isinstance(o, Unknown) and o.name == "get"]
            if mappings:
                base = self.eval(node.func.value, frame.child(emit=False))
                found = [self.keyed_entries(o, args[0], node.args[0].value) for o in alternatives(base)
                         if isinstance(o, Mapping) and o.items]
                if found:
                    return join(*found)  # `REGISTRY.get(cfg.mode)`
        if (isinstance(node.func, cst.Attribute) and node.func.attr.value == "set" and len(args) >= 2
                and isinstance(args[0], Literal) and isinstance(args[0].value, str)):
            self.output_loss_entry(args[0].value, args[1], frame, node)  # `td_out.set("loss_kl", value)`
            self.fields.write(KEY_FIELD + args[0].value, self.detach_value(args[1]) if frame.no_grad else args[1], id(node))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("append", "extend", "insert", "add") and args:
            container = dotted_name(node.func.value)
            if container is not None:
                item = args[-1]
                if node.func.attr.value == "extend":
                    item = self._element(item, node, frame)
                self.check_reward_sink(container.split(".")[-1], item, frame, node)
                if isinstance(node.func.value, cst.Name):
                    current = frame.env.get(container)
                    elements = [e for o in alternatives(current) if isinstance(o, Sequence) for e in o.items]
                    frame.env[container] = Sequence((join(*elements, item),))
                return Literal(None)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in LOG_METHODS:
            self.metric_sink(Sequence(tuple(args) + tuple(kwargs.values())), node, frame,
                             f"logged by `{dotted_name(node.func) or node.func.attr.value}`")
        if kwargs and builds_a_record(node.func, func):
            for key, value in kwargs.items():  # `LossOutput(loss_kl=...)`, `dict(loss=...)`: output entries
                self.output_loss_entry(key, value, frame, node)
        read = self.mapping_read(node, func, args, kwargs, frame)  # `d.get(key, default)` of an unseen mapping
        if read is not None:
            return read
        options = [self.call(option, args, kwargs, node, frame) for option in alternatives(func)]
        named = self.named_result(node, options, frame)
        return named if named is not None else join(*options)

    def call_arguments(self, node: cst.Call, frame: Frame) -> tuple[list[Value], dict[str, Value]]:
        """The positional and keyword values of a call. `**d` of a dict the analysis built (literal
        string keys, the same keys on every branch) passes its entries as keywords; any other `**`
        passes nothing the analysis can name. `*seq` has a length the analysis does not know (a
        list built by `append` is one joined element), so it and every positional argument after
        it bind no parameter by position: the callee reads those parameters by name, as it does
        a parameter the call leaves out."""
        args: list[Value] = []
        kwargs: dict[str, Value] = {}
        placed = True
        for arg in node.args:
            if arg.keyword is not None:
                kwargs[arg.keyword.value] = self.eval(arg.value, frame)
            elif arg.star == "**":
                for key, value in unpacked_keywords(self.eval(arg.value, frame)):
                    kwargs.setdefault(key, value)
            elif arg.star == "*":
                self.eval(arg.value, frame)
                placed = False
            elif placed:
                args.append(self.eval(arg.value, frame))
            else:
                self.eval(arg.value, frame)
        return args, kwargs

    def call(self, func: Value, args: list[Value], kwargs: dict[str, Value], node: cst.Call, frame: Frame) -> Value:
        return calls.dispatch(self, func, args, kwargs, node, frame)

    def call_function(self, ref: FunctionRef, args: list[Value], kwargs: dict[str, Value], node: cst.CSTNode,
                      frame: Frame, defaults_as_literals: bool = True) -> Value:
        """Follow a project function with the caller's values bound to its parameters.

        Calls are memoised: by a summary of their arguments when these carry no log-prob or KL
        (`signature_of`), else by the arguments themselves (`exact_signature`). A result
        whose computation met no cut-off (depth limit, recursive call) is reused at other depths
        as long as its whole call tree still fits under MAX_DEPTH there and enters no function
        that is running at the new call site; other results are reused at the same depth only.
        """
        fdef = ref.node  # parsed here, on the first call of a function looked up so far
        if fdef is None:
            return Unknown(ref.qualname)  # libcst rejects its text: its body cannot be followed
        key = id(fdef)
        template = dispatches_to_overrides(self, ref)
        if template or fills_a_hook(self, ref, node, frame):
            self.choosing_calls.add(id(node))
        if self.carries(list(args) + list(kwargs.values())) or template:
            self.carrying_calls.add(id(node))
            if frame.emit and self.carries_evidence(list(args) + list(kwargs.values())):
                self.followed_with_roles.add(key)
            if self.pairs(list(args) + list(kwargs.values())):
                self.pairing_calls.add(id(node))
        if key in self.over_budget:
            return Unknown(ref.qualname)  # it spent its share before: not again in this entry point
        if frame.depth >= MAX_DEPTH or key in frame.active:
            self._cutoffs += 1
            if frame.depth >= MAX_DEPTH and frame.emit and self._carries_roles(list(args) + list(kwargs.values())):
                self._abandon(frame.function, node, f"call of `{ref.qualname}` not followed (call depth limit "
                                                    f"{MAX_DEPTH}) with log-probs or KL terms among its arguments",
                              frame.module, frame.root)
            return Unknown(ref.qualname)
        memo_key = None
        values = list(args) + [kwargs[k] for k in sorted(kwargs)]
        signature = signature_of(values)
        if signature is None:
            signature = exact_signature(values, frame)
        if signature is not None and not isinstance(fdef, cst.Lambda) and key not in self._closures:
            memo_key = (key, frame.no_grad, frame.adapters_off, frame.emit, self.stale_loop(frame), tuple(sorted(kwargs)),
                        signature, passes_on(node, frame),
                        (id(ref.bound_self.cls.node), ref.bound_self.state) if isinstance(ref.bound_self, Instance)
                        else 0)
            for variant in (memo_key + (None,), memo_key + (frame.depth,)):
                memo = self._plain_calls.get(variant)
                if memo is None:
                    continue
                if memo.fields_version is not None and self.fields.stale(memo.fields_read, memo.fields_version):
                    continue  # it read container fields that have changed since: compute it afresh
                if variant[-1] is None and (frame.depth + memo.reach >= MAX_DEPTH
                                            or not memo.entered.isdisjoint(frame.active)):
                    continue  # here its call tree would be cut: compute it afresh
                if variant[-1] is not None:
                    self._cutoffs += 1
                self.fields.depend(memo.fields_read)  # the caller depends on the fields this call read
                self._note_reach(frame.depth + memo.reach, memo.entered)
                if memo.passed_choice:
                    self.passes_choice.add(id(node))
                return self._replay(memo, node, frame)
        facts_before, cutoffs_before, generations_before = len(self.facts), self._cutoffs, self.generations
        forwards_before = len(self.forward_log)
        reach = Reach(frame.depth, {key})
        self._open_calls.append(reach)
        self.fields.open()
        limit = self.step_limit
        if self.call_share:
            self.step_limit = min(limit, self.steps + self.call_share)
        try:
            result, callee_frame = self._follow(ref, args, kwargs, node, frame, defaults_as_literals)
        except Budget:
            if self.step_limit >= limit:
                raise  # the caller's own budget ran out, not this call's share
            return self._over_budget(ref, node, frame, facts_before)
        finally:
            self.step_limit = limit
            self._open_calls.pop()
            read = self.fields.close()
        self._note_reach(reach.deepest, reach.entered)
        passed_choice = bool(callee_frame.passed_choice)
        if passed_choice:
            self.passes_choice.add(id(node))
        if memo_key is not None:
            depth = None if self._cutoffs == cutoffs_before else frame.depth
            self._plain_calls[memo_key + (depth,)] = CallMemo(
                result, self.facts[facts_before:], len(callee_frame.call_stack), reach.deepest - frame.depth,
                frozenset(reach.entered), self.fields.version if read else None, read, passed_choice,
                self.generations != generations_before, tuple(self.forward_log[forwards_before:]))
        return self._returned(result, self.anchor(node, frame))

    def _over_budget(self, ref: FunctionRef, node: cst.CSTNode, frame: Frame, facts_before: int) -> Value:
        """A followed call that spent its share of the step budget: its result is unknown, what it
        observed is dropped (it may be half a computation), and the caller goes on; `kllint check
        -v` names it."""
        del self.facts[facts_before:]
        self.over_budget.add(id(ref.node))
        self._cutoffs += 1
        self._abandon(frame.function, node, f"call of `{ref.qualname}` not followed past its share of the step "
                                            f"budget ({self.call_share:,} steps); its result is unknown",
                      frame.module, frame.root)
        return Unknown(ref.qualname)

    def _carries_roles(self, values: list[Value]) -> bool:
        return any(isinstance(option, Tensor) and self.algebra.has_roles(option.expr)
                   for value in values for option in alternatives(value))

    def carries(self, values: Iterable[Value], depth: int = 0) -> bool:
        """Whether call arguments hand the callee a log-prob, a KL term or a network (also inside
        tuples and dicts): then what the callee computes from them depends on this call."""
        for value in values:
            for option in alternatives(value):
                if isinstance(option, Model):
                    return True
                if isinstance(option, Tensor) and self.algebra.has_roles(option.expr):
                    return True
                if depth < 2 and isinstance(option, (Sequence, Mapping)):
                    items = [v for _, v in option.items] if isinstance(option, Mapping) else list(option.items)
                    if self.carries(items, depth + 1):
                        return True
        return False

    def carries_evidence(self, values: Iterable[Value], depth: int = 0) -> bool:
        """Whether call arguments hand the callee a network or log-probs whose roles come from
        what the code computed (a forward, a gather), not only from names: then the callee's
        roles are decided by this call rather than by its own parameters' names."""
        for value in values:
            for option in alternatives(value):
                if isinstance(option, Model) or (isinstance(option, Tensor) and not option.named
                                                  and self.algebra.has_roles(option.expr)):
                    return True
                if depth < 2 and isinstance(option, (Sequence, Mapping)):
                    items = [v for _, v in option.items] if isinstance(option, Mapping) else list(option.items)
                    if self.carries_evidence(items, depth + 1):
                        return True
        return False

    def pairs(self, values: Iterable[Value]) -> bool:
        """Whether a call hands its callee the policy's log-probs already paired with the
        reference's (a log-ratio, `logp - ref`): the KL estimate the callee forms from it is
        then the caller's, formed at the call (`kllint.rules.base.RuleContext.localize`)."""
        for value in values:
            for option in alternatives(value):
                if isinstance(option, Tensor):
                    roles = self.algebra.table.role_symbols(option.expr)
                    if REF in roles and (LP in roles or LPD in roles):
                        return True
        return False

    def depth_matters(self, frame: Frame) -> int:
        """The depth of `frame` below the innermost frame running an entry point of its module
        (an entry point a caller ran is not run again on its own), for a decision that depends
        on it: a helper call whose result (or facts) came from such a decision is memoised for
        its own depth only."""
        self._cutoffs += 1
        return frame.depth - frame.unit_depth

    def _note_reach(self, deepest: int, entered: Iterable[int]) -> None:
        """Record, for the followed call in progress, the depth and functions a nested call reached."""
        if self._open_calls:
            current = self._open_calls[-1]
            current.deepest = max(current.deepest, deepest)
            current.entered.update(entered)

    def _follow(self, ref: FunctionRef, args: list[Value], kwargs: dict[str, Value], node: cst.CSTNode,
                frame: Frame, defaults_as_literals: bool) -> tuple[Value, Frame]:
        """Run the function's body with the arguments bound; its result and the callee frame."""
        fdef = ref.node
        key = id(fdef)
        callee_frame = Frame(ref.module, {}, function=ref.qualname, no_grad=frame.no_grad, adapters_off=frame.adapters_off,
                             conditions=frame.conditions, depth=frame.depth + 1, emit=frame.emit,
                             epoch_loop=frame.epoch_loop,
                             call_stack=frame.call_stack + (self.anchor(node, frame),),
                             closure=self._closures.get(key), active=frame.active + (key,), class_ref=ref.owner,
                             root=fdef if ref.module.is_root(fdef) else (frame.root if ref.module is frame.module else None))
        if isinstance(fdef, cst.FunctionDef) and self._no_grad_decorated(fdef, ref.module):
            callee_frame.no_grad = True
        callee_frame.unit_depth = frame.unit_depth
        if isinstance(fdef, cst.FunctionDef) and ref.module.is_root(fdef) and (
                ref.owner.name if ref.owner is not None else "", fdef.name.value) in entry_units(ref.module, self.index, self.vocab):
            callee_frame.unit_depth = callee_frame.depth
        params = fdef.params
        positional = list(params.posonly_params) + list(params.params)
        values = list(args)
        if ref.bound_self is not None and positional:
            callee_frame.env[positional[0].name.value] = ref.bound_self
            positional = positional[1:]
        explicit = []
        positional_exprs, keyword_exprs = argument_expressions(node)
        passed_on = frame.explicit | frame.derived
        inherited = []
        for param in positional + list(params.kwonly_params):
            pname = param.name.value
            if pname in kwargs:
                value = kwargs[pname]
                explicit.append(pname)
                expression = keyword_exprs.get(pname)
            elif values and param in positional:
                expression = positional_exprs[len(args) - len(values)] if len(args) - len(values) < len(positional_exprs) else None
                value = values.pop(0)
                explicit.append(pname)
            elif param.default is not None:
                value = self.eval(param.default, callee_frame.child(env={}))
                expression = None
                if not defaults_as_literals and isinstance(value, Literal):
                    value = ConfigValue(pname, value.value, pname)
            else:
                value = self.value_from_name(pname, self.anchor(param, callee_frame), callee_frame, parameter=True)
                expression = None
            if expression is not None and passed_on and not passed_on.isdisjoint(values_used(expression)):
                inherited.append(pname)
            if type(value) is Unknown:  # the caller knows nothing of it (an undefined global): names last
                value = self._named_parameter(pname, param, callee_frame) or value
            callee_frame.env[pname] = value
        callee_frame.explicit = frozenset(explicit)
        callee_frame.inherited = frozenset(inherited)
        if isinstance(params.star_arg, cst.Param):
            callee_frame.env[params.star_arg.name.value] = Sequence(tuple(values))
        if isinstance(params.star_kwarg, cst.Param):
            callee_frame.env[params.star_kwarg.name.value] = Mapping(tuple(kwargs.items()))
        if isinstance(fdef, cst.Lambda):
            result = self.eval(fdef.body, callee_frame)
        else:
            self.exec_block(fdef.body.body if isinstance(fdef.body, cst.IndentedBlock) else [fdef.body], callee_frame)
            result = join(*callee_frame.returns) if callee_frame.returns else Literal(None)
        if callee_frame.no_grad:
            result = self.detach_value(result)
        return result, callee_frame

    def _replay(self, memo: "CallMemo", node: cst.CSTNode, frame: Frame) -> Value:
        """A memoised helper call: its result, and its facts re-stated for this call site."""
        stack = frame.call_stack + (self.anchor(node, frame),)
        if memo.generates:
            self.note_generation()
        for name, tracking in memo.forwards:  # the reference by dataflow counts the forwards of each step
            self.note_forward(name, tracking)
        if frame.emit:
            for fact in memo.facts:
                self.facts.append(replace(fact, call_stack=stack + tuple(fact.call_stack[memo.prefix:])))
        return self._returned(memo.result, stack[-1])

    def _named_parameter(self, pname: str, param: cst.Param, frame: Frame) -> Value | None:
        """The network or log-probs a parameter's name gives, for an argument the caller knows
        nothing about; None when the name gives neither."""
        named = self.value_from_name(pname, self.anchor(param, frame), frame, parameter=True)
        if isinstance(named, Model) or (isinstance(named, Tensor) and self.algebra.table.role_symbols(named.expr)):
            return named
        return None

    def _returned(self, value: Value, site: Anchor) -> Value:
        options = []
        for option in alternatives(value):
            if isinstance(option, Tensor) and option.anchor is not None:
                options.append(option.with_(call_sites=option.call_sites + (site,)))
            elif isinstance(option, Sequence):
                options.append(Sequence(tuple(self._returned(i, site) for i in option.items)))
            else:
                options.append(option)
        return join(*options)
