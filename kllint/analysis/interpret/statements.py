"""Statements: blocks, nested definitions, imports, augmented assignments, branches (decided
statically or explored with a condition on a mode value, then merged), loops (with their
accumulators) and `with` blocks (gradient contexts)."""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

import libcst as cst

from kllint.analysis import frameworks as fw
from kllint.analysis import keyed
from kllint.analysis.adapters import disables_adapters, yields_with_adapters_off
from kllint.analysis.interpret import frames
from kllint.analysis.interpret.expressions import covering_pairs
from kllint.analysis.interpret.frames import Budget, Frame
from kllint.analysis.interpret.exposure import exposed_names
from kllint.analysis.interpret.walk import assigned_names, used_names
from kllint.analysis.symbolic import symbols_of
from kllint.analysis.module import ModuleInfo, dotted_name
from kllint.analysis.values import (
    Alts, ClassRef, Condition, ConfigValue, FunctionRef, Keyed, Literal, Sequence, Tensor, Unknown, Value,
    alternatives, join,
)

MAX_COHERENT = 16


class Statements:
    """Executes statements in a frame (a mixin of the interpreter)."""

    # ------------------------------------------------------------------ statements
    def exec_block(self, statements: Iterable[cst.CSTNode], frame: Frame) -> None:
        for statement in statements:
            if frame.returned:
                return
            self.exec_statement(statement, frame)

    def exec_statement(self, node: cst.CSTNode, frame: Frame) -> None:
        self.tick()
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self.exec_small(small, frame)
        elif isinstance(node, cst.If):
            self.exec_if(node, frame)
        elif isinstance(node, (cst.For, cst.While)):
            self.exec_loop(node, frame)
        elif isinstance(node, cst.With):
            self.exec_with(node, frame)
        elif isinstance(node, cst.Try):
            self.exec_block(node.body.body, frame)
            for handler in node.handlers:
                self.exec_block(handler.body.body, frame.child(emit=False, returns=[]))
            if node.orelse:
                self.exec_block(node.orelse.body.body, frame)
            if node.finalbody:
                self.exec_block(node.finalbody.body.body, frame)
        elif isinstance(node, cst.FunctionDef):
            frame.env[node.name.value] = FunctionRef(node.name.value, node, frame.module, class_name=None)
            self._closures[id(node)] = frame.env
            if frame.depth == 0 and frame.emit and frame.module is self.entry and id(node) not in self._nested_done:
                # a nested function is an entry point too, seeing the enclosing values
                self._nested_done.add(id(node))
                saved = self.steps
                try:
                    self.run_entry(node, frame.class_ref, closure=dict(frame.env), no_grad=frame.no_grad,
                                   root=frame.root)
                except Budget:
                    self._abandon(node.name.value, node, f"step budget of {frames.MAX_STEPS:,} exhausted", root=frame.root)
                self.steps = saved
        elif isinstance(node, cst.ClassDef):
            frame.env[node.name.value] = ClassRef(node.name.value, node, frame.module)
        elif isinstance(node, cst.Match):
            envs = []
            for case in node.cases:
                branch = frame.child(env=dict(frame.env), returns=frame.returns)
                self.exec_block(case.body.body, branch)
                envs.append(branch.env)
            self._merge_envs(frame, envs, include_current=True)

    @property
    def _closures(self) -> dict[int, dict[str, Value]]:
        if not hasattr(self, "_closure_map"):
            self._closure_map: dict[int, dict[str, Value]] = {}
        return self._closure_map

    def eval_coherent(self, node: cst.BaseExpression, frame: Frame) -> Value:
        """Evaluate with each branch-dependent variable fixed to one alternative at a time, so
        that `exp(ref - lp) - (ref - lp)` never mixes two different `ref`s."""
        names = [n for n in used_names(node) if isinstance(frame.env.get(n), Alts) and any(
            isinstance(o, Tensor) and self.algebra.has_roles(o.expr) for o in frame.env[n].options)]
        if not names or self._fans_out(node, frame):
            return self.eval(node, frame)
        combos: list[dict[str, Value]] = [{}]
        for name in names:
            options = frame.env[name].options
            pairs = covering_pairs(len(combos), len(options))
            combos = [dict(combos[i], **{name: options[j]}) for i, j in pairs][:MAX_COHERENT]
        saved = {n: frame.env[n] for n in names}
        results = []
        try:
            for combo in combos:
                frame.env.update(combo)
                results.append(alternatives(self.eval(node, frame)))
        finally:
            frame.env.update(saved)
        # round-robin, so that every combination is represented when alternatives are capped
        longest = max(len(r) for r in results)
        return join(*(r[i] for i in range(longest) for r in results if i < len(r)))

    def _fans_out(self, node: cst.BaseExpression, frame: Frame) -> bool:
        """A call of several callables picked from a registry by a run-time key: each is run
        once with every option of its arguments, not once per combination of them (the options
        reach each registered function at once; the product of both would explode)."""
        if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name):
            return False
        func = frame.env.get(node.func.value)
        return sum(isinstance(o, Keyed) for o in alternatives(func)) >= 2

    def exec_small(self, node: cst.CSTNode, frame: Frame) -> None:
        if isinstance(node, cst.Assign):
            value = self.eval_coherent(node.value, frame)
            for target in node.targets:
                self.assign(target.target, value, frame, node)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self.assign(node.target, self.eval(node.value, frame), frame, node)
        elif isinstance(node, cst.AugAssign):
            self.exec_augassign(node, frame)
        elif isinstance(node, cst.Expr):
            self.eval(node.value, frame)
        elif isinstance(node, cst.Return):
            value = self.eval_coherent(node.value, frame) if node.value is not None else Literal(None)
            frame.returns.append(value)
            frame.returned = True
            frame.return_nodes.append(node)
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            self.exec_import(node, frame)

    def exec_import(self, node: cst.Import | cst.ImportFrom, frame: Frame) -> None:
        """An import inside a function binds its names locally (`import torch` in a loss
        function makes `torch.exp` the library's exponential there)."""
        if isinstance(node, cst.Import):
            for alias in node.names:
                qualname = dotted_name(alias.name)
                if not qualname:
                    continue
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    frame.env[alias.asname.name.value] = self.resolve_import(qualname)
                else:
                    top = qualname.split(".")[0]
                    frame.env[top] = self.resolve_import(top)
            return
        if isinstance(node.names, cst.ImportStar):
            return
        base = frame.module.resolve_from(dotted_name(node.module) if node.module is not None else "",
                                         len(node.relative))
        if base is None:
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) \
                else name
            if name and local:
                frame.env[local] = self.resolve_import(f"{base}.{name}" if base else name)

    def exec_augassign(self, node: cst.AugAssign, frame: Frame) -> None:
        op = {cst.AddAssign: "+", cst.SubtractAssign: "-", cst.MultiplyAssign: "*", cst.DivideAssign: "/"}.get(type(node.operator))
        current = self.eval(node.target, frame)
        value = self.eval(node.value, frame)
        if op is None:
            new = Unknown()
        else:
            new = self.arith(op, current, value, node, frame)
        self.assign(node.target, new, frame, node)

    def exec_if(self, node: cst.If, frame: Frame) -> None:
        decision, condition = self.decide(node.test, frame)
        branches: list[tuple[list, tuple]] = []
        if decision is not False:
            then_conditions = frame.conditions + ((condition,) if condition else ())
            branches.append((list(node.body.body), then_conditions))
        if decision is not True:
            else_conditions = frame.conditions + ((replace(condition, negated=not condition.negated),) if condition else ())
            orelse = node.orelse
            if isinstance(orelse, cst.If):
                branches.append(([orelse], else_conditions))
            elif isinstance(orelse, cst.Else):
                branches.append((list(orelse.body.body), else_conditions))
            else:
                branches.append(([], else_conditions))
        envs = []
        for statements, conditions in branches:
            branch = frame.child(env=dict(frame.env), conditions=conditions, returned=False)
            self.exec_block(statements, branch)
            if not branch.returned:
                envs.append(branch.env)
        if not envs:
            frame.returned = True
            return
        self._merge_envs(frame, envs)

    def _merge_envs(self, frame: Frame, envs: list[dict[str, Value]], include_current: bool = False) -> None:
        if include_current:
            envs = envs + [frame.env]
        names = set().union(*envs)
        merged = {}
        for name in names:
            values = [env[name] for env in envs if name in env]
            merged[name] = values[0] if all(v is values[0] for v in values) else join(*values)
        frame.env.clear()
        frame.env.update(merged)

    def decide(self, test: cst.BaseExpression, frame: Frame) -> tuple[bool | None, Condition | None]:
        """Decide a branch statically (True/False) or return a condition on a mode value."""
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            if isinstance(test.left, cst.Name) and test.left.value == "__name__":
                return True, None
            # a string a run-time key picked is tested as the string itself
            left = _unkeyed(self.eval(test.left, frame))
            right = _unkeyed(self.eval(comparison.comparator, frame))
            operator = comparison.operator
            options = self._literal_options(right)
            tested_node = test.left
            if options is None:
                if isinstance(operator, (cst.In, cst.NotIn)):
                    return None, None  # `"key" in batch.keys()`: a membership test, not a mode taking a value
                options, left = self._literal_options(left), right
                tested_node = comparison.comparator
            if options is not None:
                negated = isinstance(operator, (cst.NotEqual, cst.NotIn, cst.IsNot))
                if not isinstance(operator, (cst.Equal, cst.NotEqual, cst.In, cst.NotIn, cst.Is, cst.IsNot)):
                    return None, None
                known = [o.value for o in alternatives(left) if isinstance(o, Literal)]
                tested = dotted_name(tested_node) or frame.module.source(tested_node).strip()
                if known and len(known) == len(alternatives(left)):
                    hits = [k in options for k in known]
                    if all(hits):
                        return (not negated), None
                    if not any(hits):
                        return negated, None
                    return None, Condition(tested, tuple(str(o) for o in options), negated, tested=tested)
                config = next((o for o in alternatives(left) if isinstance(o, ConfigValue)), None)
                name = (config.source or config.name) if config else tested
                default = config.default if config and isinstance(config.default, str) else None
                return None, Condition(name, tuple(str(o) for o in options), negated, default, tested)
        if isinstance(test, cst.BooleanOperation):
            return self._decide_boolean(test, frame)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            decision, condition = self.decide(test.expression, frame)
            if decision is not None:
                return (not decision), None
            return None, (replace(condition, negated=not condition.negated) if condition else None)
        value = self.eval(test, frame)
        known = [o for o in alternatives(value) if isinstance(o, Literal)]
        if known and len(known) == len(alternatives(value)):
            truths = {bool(o.value) for o in known}
            if len(truths) == 1:
                return truths.pop(), None
        return None, None

    def _decide_boolean(self, test: cst.BooleanOperation, frame: Frame) -> tuple[bool | None, Condition | None]:
        """`a or b` / `a and b`: decided when one side settles it; otherwise the condition of the
        side left open when the other side is known not to settle it."""
        left, left_condition = self.decide(test.left, frame)
        right, right_condition = self.decide(test.right, frame)
        settles = isinstance(test.operator, cst.Or)  # the value of one side that decides the whole
        if left is settles or right is settles:
            return settles, None
        if left is not None and right is not None:
            return (not settles), None
        if left is not None:
            return None, right_condition
        if right is not None:
            return None, left_condition
        return None, None

    def _literal_options(self, value: Value) -> tuple | None:
        if isinstance(value, Literal) and isinstance(value.value, str):
            return (value.value,)
        if isinstance(value, Sequence) and value.items and all(isinstance(i, Literal) for i in value.items):
            return tuple(i.value for i in value.items)
        return None

    def exec_loop(self, node: cst.For | cst.While, frame: Frame) -> None:
        body = list(node.body.body)
        assigned = assigned_names(body)
        epoch_loop = frame.epoch_loop
        if isinstance(node, cst.For):
            iterable = self.eval(node.iter, frame)
            element = self._element(iterable, node.iter, frame)
            iter_source = frame.module.source(node.iter).strip()
            iter_text = iter_source.lower()
            if any(word in iter_text for word in ("epoch", "iteration", "minibatch", "mini_batch", "ppo_step", "update")):
                epoch_loop = epoch_loop or iter_source
        # only a name an iteration may read before binding it carries a value around the loop
        exposed = exposed_names(node)
        carried = [n for n in assigned if n in frame.env and n in exposed]
        placeholders = {n: Tensor(self.algebra.table.fresh(f"X_{n}", "loop", real=True)) for n in carried}
        # pass 1: find accumulators (loop-carried values that depend on themselves)
        accumulators: dict[str, Value] = {}
        probe = frame.child(env={**frame.env, **placeholders}, emit=False, returns=[], epoch_loop=epoch_loop)
        if placeholders:
            if isinstance(node, cst.For):
                self.assign(node.target, element, probe, node)
            self.exec_block(body, probe)
        for name, placeholder in placeholders.items():
            grown = [option for option in alternatives(probe.env.get(name))
                     if isinstance(option, Tensor) and placeholder.expr in symbols_of(option.expr)]
            if grown:
                accumulators[name] = join(*(Tensor(self.algebra.table.reduce(option.expr.subs(placeholder.expr, 0), "rtg"))
                                            for option in grown))
        # pass 2: the real run
        run = frame.child(env=dict(frame.env), epoch_loop=epoch_loop,
                          accumulators={**frame.accumulators, **accumulators}, returned=False)
        for name, value in accumulators.items():
            run.env[name] = value
        if isinstance(node, cst.For):
            self.assign(node.target, element, run, node)
        self.exec_block(body, run)
        self._merge_envs(frame, [frame.env, run.env])

    def _element(self, iterable: Value, node: cst.BaseExpression, frame: Frame) -> Value:
        options = []
        for option in alternatives(iterable):
            if isinstance(option, Sequence) and option.items:
                options.extend(option.items)
            elif isinstance(option, Tensor):
                options.append(option.with_(kind=None) if option.kind == "pieces" else option)
            else:
                options.append(Unknown())
        return join(*options)

    def exec_with(self, node: cst.With, frame: Frame) -> None:
        no_grad, adapters_off = frame.no_grad, frame.adapters_off
        for item in node.items:
            call = item.item
            func = call.func if isinstance(call, cst.Call) else call
            qual = self.qualify(dotted_name(func) or "", frame.module)
            if qual in fw.NO_GRAD_CONTEXTS:
                no_grad = True
            elif qual == "torch.enable_grad":
                no_grad = False
            elif qual == "torch.set_grad_enabled" and isinstance(call, cst.Call) and call.args:
                flag = self.eval(call.args[0].value, frame)
                if isinstance(flag, Literal):
                    no_grad = not flag.value
            else:
                if disables_adapters(call) or self._adapter_off_context(func, frame):
                    adapters_off = True
                value = self.eval(call, frame)
                if item.asname is not None:
                    self.assign(item.asname.name, value, frame, node)
        saved = frame.no_grad, frame.adapters_off
        frame.no_grad, frame.adapters_off = no_grad, adapters_off
        self.exec_block(node.body.body, frame)
        frame.no_grad, frame.adapters_off = saved

    def _adapter_off_context(self, func: cst.BaseExpression, frame: Frame) -> bool:
        """Whether a `with` item calls a project context manager that yields with the adapters off."""
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return False
        value = self.eval(func, frame.child(emit=False))
        return any(isinstance(option, FunctionRef) and yields_with_adapters_off(option.node)
                   for option in alternatives(value))

    def _no_grad_decorated(self, node: cst.FunctionDef, module: ModuleInfo) -> bool:
        for decorator in node.decorators:
            expr = decorator.decorator
            func = expr.func if isinstance(expr, cst.Call) else expr
            if self.qualify(dotted_name(func) or "", module) in fw.NO_GRAD_CONTEXTS:
                return True
        return False


def _unkeyed(value: Value) -> Value:
    """`value` without the conditions of run-time keys that picked its alternatives."""
    return join(*(inner for inner, _ in keyed.conditioned(value))) if keyed.has_keyed(value) else value
