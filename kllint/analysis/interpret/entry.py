"""Entry points: running each function of the checked module that matters (the run loop, the
choice of entry points, their parameters' values from names), recording what the analysis
abandons, and the small helpers every part calls (`anchor`, `tick`, `qualify`, `as_tensor`,
`emit`)."""
from __future__ import annotations

import ast
from typing import Any

import libcst as cst

from kllint.analysis import frameworks as fw
from kllint.analysis import roles
from kllint.analysis.autograd import callers_without_grad
from kllint.analysis.outline import FUNCTION_DEFS, dotted, identifiers
from kllint.analysis.facts import Abandoned, LossFact, RewardFact, SinkKind
from kllint.analysis.interpret import frames
from kllint.analysis.interpret.frames import CONFIG_TOKENS, ROLE_SYMBOL, Budget, Frame
from kllint.analysis.module import ModuleInfo
from kllint.analysis.symbolic import LP, LPD
from kllint.analysis.values import KL_CONTENT
from kllint.analysis.values import (
    Anchor, ClassRef, ConfigValue, Instance, Literal, Mapping, Model, Sequence, Tensor, Unknown, Value,
    alternatives,
)

GRAD_NAMES = frozenset(transform.rpartition(".")[2] for transform in fw.GRAD_TRANSFORMS)  # grad, value_and_grad, ...
GRAD_ALIAS_ROOTS = ("jax", "nnx", "eqx")  # `jax.<...>.grad` that the imports do not resolve still counts


def _differentiated_argument(call: ast.Call, transform: str, keyword_only: bool = False) -> ast.expr | None:
    """The argument of a call of a grad-like transform that names the function differentiated:
    positional (the second for `mlx.nn.value_and_grad(model, fn)`) unless `keyword_only`, or by
    its keyword, `fun` for jax, equinox and mlx.core, `f` for flax.nnx, `fn` for mlx.nn."""
    position = 1 if transform in fw.GRAD_TRANSFORMS_OF_MODEL else 0
    leading = call.args[:position + 1]
    if not keyword_only and len(leading) > position and not any(isinstance(arg, ast.Starred) for arg in leading):
        return call.args[position]
    keyword = "fn" if position else "f" if "nnx" in transform.split(".") else "fun"
    return next((item.value for item in call.keywords if item.arg == keyword), None)


def _differentiated(call: ast.Call, transform: str) -> str | None:
    """The name of the function a call of a grad-like transform differentiates, when it is a
    plain name."""
    argument = _differentiated_argument(call, transform)
    return argument.id if isinstance(argument, ast.Name) else None


class EntryPoints:
    """Runs the module's entry points (a mixin of the interpreter)."""

    # ------------------------------------------------------------------ entry points
    def run(self) -> None:
        token = KL_CONTENT.set(self.algebra.kl_symbols)
        try:
            self._run()
        finally:
            KL_CONTENT.reset(token)

    def _run(self) -> None:
        self.grad_targets = self._find_grad_targets()
        chosen = self._entry_points(*self._definitions())
        called = {cls_name or name for cls_name, name in chosen}
        module_frame = Frame(self.entry, {}, function="<module>")
        self._guarded(lambda: self.exec_block(self._module_statements(called), module_frame), "<module>", None)
        for cls_name, name in chosen:
            self._run_unit(self.entry, cls_name, name)
        self._run_callers(called)

    def _run_unit(self, module: ModuleInfo, cls_name: str, name: str) -> None:
        """Run a function, or a method of a top-level class, of `module` as an entry point."""
        if not cls_name:
            node = module.functions.get(name)
            if node is not None:
                self._guarded(lambda: self.run_entry(node, None, module=module), name, node, module)
            return
        cls_node = module.classes.get(cls_name)
        if cls_node is None:
            return
        cls = ClassRef(cls_name, cls_node, module)
        self._guarded(lambda: self._run_method(cls, name, module), f"{cls_name}.{name}", cls_node.method(name), module)

    def _run_method(self, cls: ClassRef, name: str, module: ModuleInfo) -> None:
        node = cls.node.method(name)
        if node is not None:
            self.run_entry(node, cls, module=module)

    def _run_callers(self, called: set[str]) -> None:
        """Run, as entry points in their own modules, the project's functions that call the
        checked module's entry points (`kllint.analysis.project.callers`): what the checked
        code computes is judged with the values its callers give it and by what they do with
        its results. A search cut by a limit is said (`kllint check -v`)."""
        if not called or not self.entry.path.is_file():
            return
        from kllint.analysis.project.callers import MODULE_UNIT, callers_of

        found = callers_of(self.entry.path, called)
        if found.truncated:
            self._abandon("<module>", None, f"callers in other modules not all followed ({found.truncated})")
        for caller in found.found:
            module = self.index.module_at(caller.path)
            if module is None or module is self.entry:
                continue
            self.grad_targets = self._find_grad_targets(module)
            if caller.name == MODULE_UNIT:
                frame = Frame(module, {}, function="<module>")
                statements = module.module_statements(lambda names: True)
                self._guarded(lambda: self.exec_block(statements, frame), "<module>", None, module)
            else:
                self._run_unit(module, caller.cls, caller.name)
        self.grad_targets = self._find_grad_targets()

    def _definitions(self) -> tuple[dict[tuple[str, str], set[str]], dict[tuple[str, str], frozenset[str]]]:
        """The identifiers and the called names of each top-level function and method
        ((class name or "", name) -> ...), in source order, from the outline."""
        functions = self.entry.functions
        names = {("", name): functions.identifiers(name) for name in functions}
        calls = {("", name): functions.calls(name) for name in functions}
        for cls_node in self.entry.classes.values():
            cls_name = cls_node.name.value
            names.update({(cls_name, name): cls_node.method_identifiers(name) for name in cls_node.method_names})
            calls.update({(cls_name, name): cls_node.method_calls(name) for name in cls_node.method_names})
        return names, calls

    def _entry_points(self, names: dict[tuple[str, str], set[str]],
                      calls: dict[tuple[str, str], frozenset[str]]) -> list[tuple[str, str]]:
        """The functions and methods (class name or "", name) run as entry points, in source order.

        Every finding starts from a KL, a reference model or a KL API, so an entry point is a
        definition that uses a name for one (`names`: its identifiers, as
        `kllint.pipeline.prefilter.names_kl_or_reference` reads them; its docstring and comments
        do not count), or one that calls such a definition of this module by name (`calls`: the
        names each definition calls, `f(...)` or `self.f(...)`; its caller may hold the loss or
        reward sink), to a fixpoint. Other definitions are only followed as helpers.
        """
        chosen = {key for key, used in names.items() if self._names_kl_or_reference(used)}
        while True:
            called = {name for _, name in chosen}
            added = {key for key, made in calls.items() if key not in chosen and not made.isdisjoint(called)}
            if not added:
                break
            chosen |= added
        return [key for key in names if key in chosen]

    def _names_kl_or_reference(self, used: set[str]) -> bool:
        """Whether names of a definition (or statement) name a KL or the reference, directly, by
        the import they alias (`kl_div as divergence`) or by a module constant (`KEY = "ref_logps"`)."""
        from kllint.pipeline.prefilter import names_matter

        imports, constants = self.entry.imports, self.entry.constants
        seen = set(used)
        seen.update(imports[name].rsplit(".", 1)[-1] for name in used if name in imports)
        for name in used:
            if name in constants:
                seen.update(constants.identifiers(name))
        return names_matter(seen, self.vocab)

    def _guarded(self, action, function: str, node: cst.CSTNode | None, module: ModuleInfo | None = None) -> None:
        """Run one entry point. One that runs out of steps is run again with a share of the budget
        for each followed call (`frames.CALL_SHARE`): a call that spends its share gives an
        unknown value and `kllint check -v` names it, so that a costly diagnostics helper does not
        hide the KL loss next to its call; the entry point is abandoned only if that run too runs
        out of steps."""
        facts_before, nested_done = len(self.facts), set(self._nested_done)
        for share in (0, frames.CALL_SHARE):
            self.steps, self.step_limit, self.call_share = 0, frames.MAX_STEPS, share
            self.over_budget.clear()
            try:
                action()
                break
            except Budget:
                if share:
                    self._abandon(function, node, f"step budget of {frames.MAX_STEPS:,} exhausted", module, root=node)
                    break
                del self.facts[facts_before:]  # the rerun observes it all again
                self._nested_done = set(nested_done)
            except RecursionError:
                self._abandon(function, node, "nesting too deep for the interpreter", module, root=node)
                break
        self.call_share = 0

    def _abandon(self, function: str, node: cst.CSTNode | None, reason: str, module: ModuleInfo | None = None,
                 root: cst.CSTNode | None = None) -> None:
        """Record that the analysis gave up on `function` (never silently: `kllint check -v`);
        `root`, the definition holding `node`, spares positioning every other definition."""
        module = module or self.entry  # keyed by module too: a `level5` of two modules is two lines
        self._abandoned.setdefault((module.display, function, reason), (node, module, root))

    def abandoned(self) -> list[Abandoned]:
        """What the analysis gave up on, each with the line where it happened."""
        records = []
        for (_, function, reason), (node, module, root) in self._abandoned.items():
            line = module.span(node, root).line if node is not None else 1
            records.append(Abandoned(function, module.display, line, reason))
        return records

    def _module_statements(self, called: set[str]) -> list[cst.CSTNode]:
        """The module-level statements that name a KL or the reference, or use an entry point
        (a script's loop, an `if __name__ == "__main__":` block calling the training step)."""
        return self.entry.module_statements(lambda names: self._names_kl_or_reference(names)
                                            or not called.isdisjoint(names))

    def _find_grad_targets(self, module: ModuleInfo | None = None) -> set[str]:
        """Names of the functions this module hands to `jax.grad`-like transforms, read from its
        `ast` outline (never from strings or comments): the function argument of a call of one
        (`grad(f)`, `value_and_grad(f, has_aux=True)`, `value_and_grad(fun=f)`, `nnx.grad`,
        `eqx.filter_grad`, the second argument of `mlx.nn.value_and_grad(model, f)`, also
        `eqx.filter_value_and_grad(has_aux=True)(f)`) and the definitions one decorates
        (`@jax.grad`, `@partial(jax.value_and_grad, has_aux=True)`)."""
        module = module or self.entry
        targets: set[str] = set()
        if GRAD_NAMES.isdisjoint(identifiers(module.outline, import_parts=True)):
            return targets  # a transform is always named by its last part, in the code or an import
        for node in module.outline_nodes(ast.Call, *FUNCTION_DEFS):
            if isinstance(node, ast.Call):
                transform = self._grad_transform(node.func, module)
                target = _differentiated(node, transform) if transform is not None else None
                if target is not None:
                    targets.add(target)
            elif isinstance(node, FUNCTION_DEFS):
                transforms = [self._grad_transform(decorator, module) for decorator in node.decorator_list]
                if any(t is not None and t not in fw.GRAD_TRANSFORMS_OF_MODEL for t in transforms):
                    targets.add(node.name)
        return targets

    def _grad_transform(self, func: ast.expr, module: ModuleInfo) -> str | None:
        """The qualified name of the grad-like transform that `func` is, still awaiting the
        function to differentiate, else None: a transform named through the imports (`jax.`,
        `nnx.` or `eqx.` followed by a transform's name counts unresolved), the transform called
        without its function (`eqx.filter_value_and_grad(has_aux=True)`) or given to
        `functools.partial` without it (`partial(jax.value_and_grad, has_aux=True)`)."""
        if isinstance(func, ast.Call):
            partial = self.qualify(dotted(func.func) or "", module) == "functools.partial"
            inner, rest = (func.args[0], func.args[1:]) if partial and func.args else (func.func, func.args)
            transform = self._grad_transform(inner, module) if not rest else None
            if (transform is None or transform in fw.GRAD_TRANSFORMS_OF_MODEL
                    or _differentiated_argument(func, transform, keyword_only=True) is not None):
                return None
            return transform
        name = dotted(func)
        if name is None:
            return None
        qualified = self.qualify(name, module)
        head, _, last = name.rpartition(".")
        if qualified in fw.GRAD_TRANSFORMS or (last in GRAD_NAMES and head.split(".")[0] in GRAD_ALIAS_ROOTS):
            return qualified
        return None

    def run_entry(self, node: cst.FunctionDef, cls: ClassRef | None, closure: dict[str, Value] | None = None,
                  no_grad: bool = False, root: cst.CSTNode | None = None, module: ModuleInfo | None = None) -> None:
        module = module or self.entry
        name = node.name.value
        is_grad_target = name in self.grad_targets
        frame = Frame(module, {}, function=name, class_ref=cls, closure=closure,
                      no_grad=no_grad or self._no_grad_decorated(node, module) or callers_without_grad(
                          module, name, cls is not None, cls=cls.name if cls is not None else "", index=self.index),
                      active=(id(node),), root=root or node)
        params = node.params
        all_params = list(params.posonly_params) + list(params.params)
        for position, param in enumerate(all_params):
            pname = param.name.value
            if position == 0 and cls is not None and pname in ("self", "cls"):
                frame.env[pname] = Instance(cls)
                continue
            if is_grad_target and position == 0:
                frame.env[pname] = Model("policy", pname)
                continue
            frame.env[pname] = self.param_value(pname, param, frame)
        for param in params.kwonly_params:
            frame.env[param.name.value] = self.param_value(param.name.value, param, frame)
        self.exec_block(node.body.body if isinstance(node.body, cst.IndentedBlock) else [node.body], frame)
        # calling an instance of a class named as a loss (`engine.set_loss_fn(StepLoss(cfg))`) runs its `__call__`
        loss_function = is_grad_target or roles.is_loss_function_name(name) or (
            name == "__call__" and cls is not None and roles.is_loss_function_name(cls.name))
        sink_kind = roles.sink_kind(name)
        if not frame.returns:
            return
        anchor = self.anchor(node.name, frame)
        # each `return` on its own: one join of them all would keep only the first alternatives
        for option in (o for returned in frame.returns for o in alternatives(returned)):
            first = option.items[0] if isinstance(option, Sequence) and option.items else option
            if loss_function and isinstance(first, Tensor):
                self.facts.append(LossFact(first, self._return_anchor(node, frame) or anchor,
                                           SinkKind.LOSS_RETURN, name))
            elif sink_kind and not loss_function:
                for item in (option.items if isinstance(option, Sequence) else (option,)):
                    if isinstance(item, Tensor):
                        self.facts.append(RewardFact(item, self._return_anchor(node, frame) or anchor, name, sink_kind))

    def _return_anchor(self, node: cst.FunctionDef, frame: Frame) -> Anchor | None:
        """The last `return` statement the entry point executed."""
        return self.anchor(frame.return_nodes[-1], frame) if frame.return_nodes else None

    def param_value(self, name: str, param: cst.Param, frame: Frame) -> Value:
        """The value of an entry point's parameter, from its name and default."""
        default = param.default
        if default is not None:
            value = self.eval(default, frame)
            if isinstance(value, Literal):
                if value.value is None and isinstance(self.role_from_name(name), Tensor):
                    return self.value_from_name(name, self.anchor(param, frame), frame, parameter=True)  # `ref=None`
                if isinstance(value.value, (str, bool)) or value.value is None:
                    return ConfigValue(name, value.value, name)
            elif isinstance(value, Mapping):
                return ConfigValue(name, value, name)
        elif param.annotation is not None and isinstance(frame.root, cst.FunctionDef):
            configured = self.annotated_configuration(frame.root, name, frame.module)
            if configured is not None:
                return configured  # `cfg: TrainConfig`, a configuration class of the project
        return self.value_from_name(name, self.anchor(param, frame), frame, parameter=True)

    def value_from_name(self, name: str, anchor: Anchor | None, frame: Frame, parameter: bool = False,
                        detached_source: bool = False) -> Value:
        """Roles from names: the last resort (design.md, item 3)."""
        role_value = self.role_from_name(name, detached_source)
        if role_value is not None:
            return role_value
        if parameter and roles.is_kl_name(name) and anchor is not None:
            return self.algebra.named_kl(name, anchor, per_token=not roles.is_sequence_name(name))
        toks = roles.tokens(name)
        if any(t in CONFIG_TOKENS for t in toks):
            return Unknown(name)  # attributes and items of a config are configuration values
        space = "prob" if any(t in ("probs", "prob", "probabilities", "p") for t in toks) else None
        return Tensor(self.algebra.table.fresh(name, positive=True), space=space)

    def role_from_name(self, name: str, detached_source: bool = False) -> Tensor | Model | None:
        """The value a log-prob, model or mask name (or a configured reference name) stands for;
        None for a name that gives no role."""
        role = roles.logprob_role(name)
        if self.vocab is not None and name in self.vocab.reference_names:
            role = "reference" if role is not None or not roles.model_role(name) else None
            if role is None:
                return Model("reference", name)
        if role is not None:
            symbol = ROLE_SYMBOL[role]
            if detached_source and symbol == LP:
                symbol = LPD
            space = "logits" if roles.is_logits_name(name) else "logprob"
            return Tensor(symbol, space=space, assumed=symbol == LP)  # only a live policy role is assumed
        model = roles.model_role(name)
        if model is not None:
            return Model(model, name)
        if roles.is_mask_name(name):
            return Tensor(self.algebra.table.fresh(name, positive=True), kind="mask")
        return None

    # ------------------------------------------------------------------ helpers
    def anchor(self, node: cst.CSTNode, frame: Frame) -> Anchor:
        module = frame.module
        return Anchor(module.display, id(node), node, module, frame.conditions, frame.function, frame.root,
                      frame.chosen, frame.call_stack)

    def tick(self) -> None:
        self.steps += 1
        if self.steps > self.step_limit:
            raise Budget()

    def qualify(self, dotted: str, module: ModuleInfo) -> str:
        head, _, rest = dotted.partition(".")
        base = module.imports.get(head)
        if base is None:
            return dotted
        return f"{base}.{rest}" if rest else base

    def as_tensor(self, value: Value, name: str = "t") -> Tensor:
        if isinstance(value, Tensor):
            return value
        if isinstance(value, Literal) and isinstance(value.value, (int, float)) and not isinstance(value.value, bool):
            return self.algebra.number(value.value)
        if isinstance(value, Model):
            return Tensor(ROLE_SYMBOL.get(value.role, LP), space="logits")
        if isinstance(value, ConfigValue):
            return self.algebra.opaque(value.name)
        return self.algebra.opaque(name)

    def emit(self, frame: Frame, fact: Any) -> None:
        if frame.emit:
            self.facts.append(fact)
