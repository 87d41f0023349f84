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
from kllint.analysis.outline import dotted
from kllint.analysis.engines import LIBRARY_OBJECTS, differentiated_by_framework, returned_loss
from kllint.analysis.facts import Abandoned, LossFact, RewardFact, SinkKind
from kllint.analysis.grad_transforms import (
    GRAD_ALIAS_ROOTS, GRAD_NAMES, differentiated_argument, grad_target_positions,
)
from kllint.analysis.loss_forms import combines_kl_with_surrogate
from kllint.analysis.interpret import frames
from kllint.analysis.interpret.frames import CONFIG_TOKENS, ROLE_SYMBOL, Budget, Frame
from kllint.analysis.module import ModuleInfo, dotted_name
from kllint.analysis.relevance import definitions, entry_units, names_kl_or_reference
from kllint.analysis.symbolic import LP, LPD
from kllint.analysis.values import KL_CONTENT
from kllint.analysis.values import (
    Anchor, ClassRef, ConfigValue, Instance, Literal, Mapping, Model, ModuleRef, Sequence, Tensor, Unknown, Value,
    alternatives,
)

class EntryPoints:
    """Runs the module's entry points (a mixin of the interpreter)."""

    # ------------------------------------------------------------------ entry points
    def run(self) -> None:
        token = KL_CONTENT.set(self.algebra.kl_symbols)
        try:
            self._run()
            found = self.references_by_dataflow()
            if found:
                # run again from scratch, the networks found being the reference from the start
                type(self).__init__(self, self.entry, self.index, self.vocab)
                self.reference_networks = found
                KL_CONTENT.set(self.algebra.kl_symbols)
                self._run()
        finally:
            KL_CONTENT.reset(token)

    def _run(self) -> None:
        """The module-level code, then the module's entry points, each after the entry points
        that call it (so that a function a caller follows with log-probs in its arguments takes
        its roles from them and is not run again with roles read from its parameters' names,
        the last resort). The units of other modules that call these are run in their own
        modules' analyses (`kllint.analysis.relevance`, `kllint.pipeline.run`)."""
        self.grad_targets = self._find_grad_targets()
        names, calls = definitions(self.entry)
        chosen = list(entry_units(self.entry, self.index, self.vocab))
        called = {cls_name or name for cls_name, name in chosen}
        module_frame = Frame(self.entry, {}, function="<module>")
        self._guarded(lambda: self.exec_block(self._module_statements(called), module_frame), "<module>", None)
        for cls_name, name in _callers_first(chosen, calls):
            self._run_unit(self.entry, cls_name, name)

    def _run_unit(self, module: ModuleInfo, cls_name: str, name: str) -> None:
        """Run a function, or a method of a top-level class, of `module` as an entry point,
        unless a caller already ran it with log-probs among its arguments."""
        if not cls_name:
            node = module.functions.get(name)
            if node is not None and (id(node) not in self.followed_with_roles or name in self.grad_targets):
                self._guarded(lambda: self.run_entry(node, None, module=module), name, node, module)
            return
        cls_node = module.classes.get(cls_name)
        if cls_node is None:
            return
        node = cls_node.method(name)
        if node is None or (id(node) in self.followed_with_roles and not self._framework_may_call(cls_node, name)):
            return
        cls = ClassRef(cls_name, cls_node, module)
        self._guarded(lambda: self.run_entry(node, cls, module=module), f"{cls_name}.{name}", node, module)

    def _framework_may_call(self, cls_node, name: str) -> bool:
        """Whether code outside the project may call the public method `name` of the class: it
        has a base class that is not the project's (a framework's trainer or module calls its
        hooks), so its callers in the project are not all its callers."""
        if name.startswith("_") and not name.startswith("__"):
            return False
        todo, seen = [ClassRef(cls_node.name.value, cls_node, self.entry)], 0
        while todo and seen < 16:
            cls = todo.pop()
            seen += 1
            for base, written in zip(self.base_values(cls), cls.node.bases):
                if isinstance(base, ClassRef):
                    todo.append(base)
                elif dotted_name(written.value) != "object":
                    return True
        return False

    def _names_kl_or_reference(self, used: set[str]) -> bool:
        """Whether names of a definition (or statement) name a KL or the reference."""
        return names_kl_or_reference(self.entry, used, self.vocab)

    def _guarded(self, action, function: str, node: cst.CSTNode | None, module: ModuleInfo | None = None) -> None:
        """Run one entry point. One that runs out of steps is run again with a share of the budget
        for each followed call (`frames.CALL_SHARE`): a call that spends its share gives an
        unknown value and `kllint check -v` names it, so that a costly diagnostics helper does not
        hide the KL loss next to its call; the entry point is abandoned only if that run too runs
        out of steps."""
        facts_before, nested_done = len(self.facts), set(self._nested_done)
        followed = set(self.followed_with_roles)
        for share in (0, frames.CALL_SHARE):
            self.steps, self.step_limit, self.call_share = 0, frames.MAX_STEPS, share
            self.over_budget.clear()
            try:
                action()
                break
            except Budget:
                if share:
                    self._abandon(function, node, f"step budget of {frames.MAX_STEPS:,} exhausted", module, root=node)
                    self.followed_with_roles = followed  # what it followed is not trusted: run those on their own
                    break
                del self.facts[facts_before:]  # the rerun observes it all again
                self._nested_done = set(nested_done)
            except RecursionError:
                self._abandon(function, node, "nesting too deep for the interpreter", module, root=node)
                break
        self.call_share = 0
        self.close_unit()

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
        """Names of the functions this module hands to `jax.grad`-like transforms (see
        `_grad_target_positions`); also sets `grad_positions`, the positions each differentiates."""
        self.grad_positions = self._grad_target_positions(module or self.entry)
        return set(self.grad_positions)

    def _grad_target_positions(self, module: ModuleInfo) -> dict[str, tuple[int, ...] | None]:
        """The functions this module hands to grad transforms, each with the positions it
        differentiates (`kllint.analysis.grad_transforms.grad_target_positions`)."""
        return grad_target_positions(module, lambda func: self._grad_transform(func, module))

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
                    or differentiated_argument(func, transform, keyword_only=True) is not None):
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
        # JAX and MLX differentiate only the parameters at these positions: the others are constants
        differentiated = self.grad_positions.get(name, (0,)) if is_grad_target else None
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
            if is_grad_target and position == 0 and (differentiated is None or 0 in differentiated):
                frame.env[pname] = Model("policy", pname)
                self.note_role(self.anchor(param, frame), frame, "network:policy",
                               f"an argument the grad transform of `{name}` differentiates")
                continue
            value = self.param_value(pname, param, frame)
            if differentiated is not None and position - (cls is not None) not in differentiated:
                value = self.detach_value(value)  # a constant to the transform
            elif differentiated is not None and not isinstance(value, (Model, Tensor)):
                value = Model("policy", pname)  # differentiated parameters: the policy's weights
                self.note_role(self.anchor(param, frame), frame, "network:policy",
                               f"an argument the grad transform of `{name}` differentiates")
            frame.env[pname] = value
        for param in params.kwonly_params:
            value = self.param_value(param.name.value, param, frame)
            frame.env[param.name.value] = self.detach_value(value) if is_grad_target else value
        self.exec_block(node.body.body if isinstance(node.body, cst.IndentedBlock) else [node.body], frame)
        # calling an instance of a class named as a loss (`engine.set_loss_fn(StepLoss(cfg))`) runs its `__call__`
        # a method whose result a framework differentiates (Lightning's `training_step`, a
        # transformers Trainer's `compute_loss`), by the class's library bases
        framework = cls is not None and differentiated_by_framework(self.library_bases(cls), name)
        loss_function = is_grad_target or framework or roles.is_loss_function_name(name) or (
            name == "__call__" and cls is not None and roles.is_loss_function_name(cls.name))
        sink_kind = roles.sink_kind(name)
        if not frame.returns:
            return
        anchor = self.anchor(node.name, frame)
        # each `return` on its own: one join of them all would keep only the first alternatives
        for option in (o for returned in frame.returns for o in alternatives(returned)):
            first = returned_loss(option) if framework else (
                option.items[0] if isinstance(option, Sequence) and option.items else option)
            if isinstance(first, Mapping):  # an output dict (`{"loss": ..., "kl": ...}`): its loss entry
                first = next((v for _, v in first.items if isinstance(v, Tensor)
                              and combines_kl_with_surrogate(self.algebra, v)), first)
            # a KL term combined with a policy-gradient surrogate is a loss whatever the function
            # is called (whoever differentiates it, in the project or not); names come last
            if isinstance(first, Tensor) and (loss_function or combines_kl_with_surrogate(self.algebra, first)):
                self.facts.append(LossFact(first, self._return_anchor(node, frame) or anchor,
                                           SinkKind.LOSS_RETURN, name))
            elif sink_kind and not loss_function:
                for item in (option.items if isinstance(option, Sequence) else (option,)):
                    if isinstance(item, Tensor):
                        self.facts.append(RewardFact(item, self._return_anchor(node, frame) or anchor, name, sink_kind))

    def library_bases(self, cls: ClassRef, seen: int = 0) -> list[str]:
        """The qualified names of the library classes among the bases of `cls` and of its project
        bases (up to five levels), each resolved through the imports of its defining module."""
        found = []
        for base in self.base_values(cls):
            if isinstance(base, ModuleRef) and not base.qualname.startswith("project:"):
                found.append(base.qualname)
            elif isinstance(base, ClassRef) and seen < 4:
                found.extend(self.library_bases(base, seen + 1))
        return found

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
            annotation = dotted_name(param.annotation.annotation)
            if annotation and self.qualify(annotation, frame.module) in LIBRARY_OBJECTS:
                return ModuleRef(self.qualify(annotation, frame.module))  # `accelerator: Accelerator`
        return self.value_from_name(name, self.anchor(param, frame), frame, parameter=True)

    def value_from_name(self, name: str, anchor: Anchor | None, frame: Frame, parameter: bool = False,
                        detached_source: bool = False) -> Value:
        """Roles from names: the last resort (design.md, item 3)."""
        role_value = self.role_from_name(name, detached_source)
        if role_value is not None:
            self.note_role(anchor, frame, role_value, f"name `{name}`")
            return role_value
        if parameter and roles.is_kl_name(name) and anchor is not None:
            self.note_role(anchor, frame, "kl", f"name `{name}`")
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
            return Tensor(symbol, space=space, assumed=symbol == LP, named=True)  # only a live policy role is assumed
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


def _callers_first(chosen: list[tuple[str, str]], calls: dict[tuple[str, str], frozenset[str]]) -> list[tuple[str, str]]:
    """The entry points ordered so that each comes after those of the module that call it (by
    name, `f(...)` or `self.f(...)`), source order otherwise; a cycle keeps source order."""
    names = {key: key[1] for key in chosen}
    callers: dict[tuple[str, str], set[tuple[str, str]]] = {key: set() for key in chosen}
    for key in chosen:
        for other in chosen:
            if other != key and names[key] in calls.get(other, ()):
                callers[key].add(other)
    ordered: list[tuple[str, str]] = []
    placed: set[tuple[str, str]] = set()
    while len(ordered) < len(chosen):
        ready = [k for k in chosen if k not in placed and callers[k] <= placed]
        if not ready:  # a cycle: the first remaining one
            ready = [next(k for k in chosen if k not in placed)]
        for key in ready:
            ordered.append(key)
            placed.add(key)
    return ordered
