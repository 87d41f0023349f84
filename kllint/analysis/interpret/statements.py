"""Statements: blocks, nested definitions, imports, augmented assignments, branches (decided
statically or explored with a condition on a mode value, then merged), loops (with their
accumulators) and `with` blocks (gradient contexts)."""
from __future__ import annotations

from typing import Iterable

import libcst as cst

from kllint.analysis import frameworks as fw
from kllint.analysis.adapters import context_effect, disables_adapters, yields_with_adapters_off
from kllint.analysis.conditions import narrowed
from kllint.analysis.interpret import frames
from kllint.analysis.interpret.expressions import covering_pairs
from kllint.analysis.interpret.frames import Budget, Frame
from kllint.analysis.interpret.loops import (
    LoopState, UpdateLoop, accumulates_gradients, accumulating, reuses_one_batch, walks_positions,
)
from kllint.analysis.interpret.exposure import exposed_names
from kllint.analysis.interpret.walk import assigned_names, used_names
from kllint.analysis.symbolic import symbols_of
from kllint.analysis.tensor_calls import note_reward_to_go
from kllint.analysis.module import ModuleInfo, dotted_name
from kllint.analysis.values import (
    Alts, ClassRef, FunctionRef, Keyed, Literal, Model, ModuleRef, Sequence, Tensor, Unknown, Value,
    alternatives, join,
)

MAX_COHERENT = 16
# A loop runs its body twice (a probe for accumulators, then the real run), so n nested loops
# ran the innermost body 2^n times: 18 loops (1,246 bytes) took minutes. Loops nested deeper
# than this run their body once (no accumulators are looked for in them): 2^4 (n - 4) runs.
MAX_PROBED_LOOPS = 4


class Statements(LoopState):
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
            if frame.depth == 0 and frame.emit and id(node) not in self._nested_done:
                # a nested function is an entry point too, seeing the enclosing values
                self._nested_done.add(id(node))
                saved = self.steps
                try:
                    self.run_entry(node, frame.class_ref, closure=dict(frame.env), no_grad=frame.no_grad,
                                   root=frame.root, module=frame.module)
                except Budget:
                    self._abandon(node.name.value, node, f"step budget of {frames.MAX_STEPS:,} exhausted",
                                  frame.module, root=frame.root)
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
            value = _returned_under(value, frame.conditions)
            if value is not None:
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
        decision, then_paths, else_paths = self.branch_paths(node.test, frame)
        chosen = self.chosen_by_caller(node.test, frame)
        branches: list[tuple[list, tuple]] = []
        if decision is not False:
            branches.extend((list(node.body.body), frame.conditions + path) for path in then_paths)
        if decision is not True:
            orelse = node.orelse
            statements = [orelse] if isinstance(orelse, cst.If) else list(orelse.body.body) if isinstance(orelse, cst.Else) else []
            branches.extend((statements, frame.conditions + path) for path in else_paths)
        # a branch no configuration can take (`mode == "k2"` where `mode` ends with '+') is not run
        possible = [b for b in branches if narrowed(b[1]) is not None]
        branches = possible or branches[-1:]
        envs = []
        survivors = []
        for statements, conditions in branches:
            branch = frame.child(env=dict(frame.env), conditions=conditions, returned=False, chosen=chosen)
            self.exec_block(statements, branch)
            if not branch.returned:
                envs.append(branch.env)
                survivors.append(branch.conditions)
        if not envs:
            frame.returned = True
            return
        # what follows runs only after a branch that did not return: under the conditions
        # all of those share (`if mode == "k1": return ...` leaves `mode` is not 'k1')
        frame.conditions = tuple(c for c in survivors[0] if all(c in other for other in survivors[1:]))
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

    def exec_loop(self, node: cst.For | cst.While, frame: Frame) -> None:
        body = list(node.body.body)
        assigned = assigned_names(body)
        epoch_loop = frame.epoch_loop
        update = None
        if isinstance(node, cst.For):
            iterable = self.eval(node.iter, frame)
            element = self._element(iterable, node.iter, frame)
            if reuses_one_batch(node, lambda name: _local(frame.env.get(name)), frame.root) \
                    and not accumulates_gradients(node, frame.root):
                update = UpdateLoop(frame.module.source(node.iter).strip())
                epoch_loop = epoch_loop or update.source
        if update is not None:
            self.update_loops.append(update)
        try:
            self._run_loop(node, body, assigned, frame, epoch_loop, update, element if isinstance(node, cst.For) else None)
        finally:
            if update is not None:
                self.update_loops.pop()

    def _run_loop(self, node: cst.For | cst.While, body: list, assigned: list[str], frame: Frame, epoch_loop: str,
                  update: UpdateLoop | None, element: Value | None) -> None:
        # only a name an iteration may read before binding it carries a value around the loop
        loops = frame.loops + 1
        exposed = exposed_names(node) if loops <= MAX_PROBED_LOOPS else ()
        carried = [n for n in assigned if n in frame.env and n in exposed]
        placeholders = {n: Tensor(self.algebra.table.fresh(f"X_{n}", "loop", real=True)) for n in carried}
        # pass 1: find accumulators (loop-carried values that depend on themselves)
        accumulators: dict[str, Value] = {}
        probe = frame.child(env={**frame.env, **placeholders}, emit=False, returns=[], epoch_loop=epoch_loop, loops=loops)
        if placeholders:
            if isinstance(node, cst.For):
                self.assign(node.target, element, probe, node)
            self.exec_block(body, probe)
        # a loop through the positions of a sequence credits each token with the ones after it
        # (returns, GAE); a loop over items of one shape (teachers, micro-batches) only adds
        # them up: what it carries is its first value plus the increment, per token as before
        positional = walks_positions(node)
        summed: list[str] = []
        for name, placeholder in placeholders.items():
            grown = [option for option in alternatives(probe.env.get(name))
                     if isinstance(option, Tensor) and placeholder.expr in symbols_of(option.expr)]
            if grown and positional:
                for option in grown:
                    note_reward_to_go(self, option.with_(expr=option.expr.subs(placeholder.expr, 0)),
                                      self.anchor(node, frame), frame)
                accumulators[name] = join(*(Tensor(self.algebra.table.reduce(option.expr.subs(placeholder.expr, 0), "rtg"))
                                            for option in grown))
            elif grown:
                summed.append(name)
        # pass 2: the real run (what the probe generated is not this iteration's)
        if update is not None:
            update.fresh = False
        run = frame.child(env=dict(frame.env), epoch_loop=epoch_loop, loops=loops,
                          accumulators={**frame.accumulators, **accumulators}, returned=False)
        for name, value in accumulators.items():
            run.env[name] = value
        if isinstance(node, cst.For):
            self.assign(node.target, element, run, node)
        self.exec_block(body, run)
        for name in summed:
            self._mark_accumulated(name, body, run)
        self._merge_envs(frame, [frame.env, run.env])

    def _mark_accumulated(self, name: str, body: list, frame: Frame) -> None:
        """A KL term added into a running total over items of one shape (`total += kl` over
        teachers) enters that total where it is accumulated: one pass of the body gives its
        value (first value plus one increment), the statement is where the term joins it."""
        statement = next((s for s in accumulating(body, name)), None)
        if statement is None:
            return
        anchor = self.anchor(statement, frame)
        options = []
        for option in alternatives(frame.env.get(name)):
            if isinstance(option, Tensor):
                wrapped = self.algebra.wrap(option)
                for symbol in self.algebra.kl_symbols(wrapped):
                    term = self.algebra.kterms[symbol]
                    if term.entry is None:
                        term.entry = anchor
                # a total, no longer an estimate written here: later operations keep the term
                option = option.with_(expr=wrapped)
            options.append(option)
        if options:
            frame.env[name] = join(*options)

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
                grad, off = context_effect(value)  # a context held in a variable, or chosen at run time
                no_grad = no_grad if grad is None else not grad
                adapters_off = adapters_off or off
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


def _local(value: Value | None) -> bool:
    """A local value or parameter (data), not a function, class, module or network."""
    return value is not None and not any(isinstance(o, (FunctionRef, ClassRef, ModuleRef, Model))
                                         for o in alternatives(value))


def _returned_under(value: Value, conditions: tuple) -> Value:
    """`value` returned under the branch conditions of the `return`: an estimate formed before
    the branch (`forward` returned only when `mode` has no '+') is the result only under them.
    A value already reduced (a loss aggregated by a mode of its own) keeps the conditions of
    its estimate: the aggregation mode does not decide the estimator."""
    if not conditions:
        return value
    options, changed = [], False
    for option in alternatives(value):
        anchor = option.anchor if isinstance(option, Tensor) and option.reduced is None else None
        extra = tuple(c for c in conditions if c not in anchor.conditions) if anchor is not None else ()
        if extra:
            changed = True
            if narrowed(anchor.conditions + extra) is None:
                continue  # formed under a configuration this return excludes
            option = option.with_(anchor=anchor.with_conditions(anchor.conditions + extra))
        options.append(option)
    if not changed:
        return value
    return join(*options) if options else None
