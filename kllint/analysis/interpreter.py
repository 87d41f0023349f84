"""Abstract interpretation of Python functions over libcst trees.

Each function of the checked module is run once as an entry point (its parameters get values
from their names: `logp` is the policy's log-prob, `ref_logp` the reference's, `old_logp` the
rollout policy's; `self` is an instance of its class), and helpers are followed into their bodies
(same module, other project modules, methods on `self`) with the caller's values bound to their
parameters. Branches on mode strings are specialised when the string is a literal and explored
all together otherwise. Loss, reward and API facts are recorded for the rules.
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable

import libcst as cst
import sympy as sp

from kllint.analysis import calls
from kllint.analysis import frameworks as fw
from kllint.analysis import roles
from kllint.analysis.algebra import OPERATORS, Algebra
from kllint.analysis.autograd import callers_without_grad
from kllint.analysis.callables import STRING_METHODS
from kllint.analysis.callables import BoundMethod as _BoundMethod
from kllint.analysis.callables import UnresolvedAttribute as _Attr
from kllint.analysis.facts import Abandoned, BranchChoice, LossFact, RewardFact, SinkKind
from kllint.analysis.fields import KEY_FIELD, FieldStore
from kllint.analysis.index import ProjectIndex
from kllint.analysis.module import LazyClass, ModuleInfo, class_method, class_methods, dotted_name
from kllint.analysis.symbolic import LP, LPD, OLD, REF
from kllint.analysis.values import KL_CONTENT, _plain
from kllint.analysis.values import (
    Alts, Anchor, ClassRef, Condition, ConfigValue, FunctionRef, Instance, Keyed, Literal, Mapping,
    Model, ModuleRef, Partial, Sequence, Tensor, Unknown, Value, alternatives, join,
)

MAX_DEPTH = 5
MAX_STEPS = 150_000
MAX_COHERENT = 16
GRAD_CALL = re.compile(r"\b(grad|value_and_grad|filter_grad|filter_value_and_grad)\(\s*([A-Za-z_]\w*)")
GRAD_SECOND_ARG = re.compile(r"\s*,\s*([A-Za-z_]\w*)")  # `nn.value_and_grad(model, loss_fn)`: after the first
GRAD_ALIAS = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\.\Z")  # `jax` of `jax.grad(`, read backwards
METHOD_VERBS = frozenset({"compute", "get", "calc", "calculate", "build", "make", "init", "load", "run", "update",
                          "forward", "generate", "create", "prepare", "apply", "set", "save", "fetch", "sample"})
CONFIG_TOKENS = frozenset({"config", "cfg", "args", "conf", "hparams", "hps", "settings", "opts", "options", "kwargs"})
ROLE_SYMBOL = {"policy": LP, "reference": REF, "old": OLD}


@dataclass
class _Reach:
    """How far a followed call's call tree went: the deepest frame depth that made a call, and
    the functions entered (ids of their definitions)."""

    deepest: int
    entered: set[int]


@dataclass(frozen=True)
class _CallMemo:
    """A memoised helper call: its result, its facts (with the call-stack prefix to replace),
    and its call tree's reach (`reach` levels below the call, the functions `entered`)."""

    result: Value
    facts: list
    prefix: int
    reach: int
    entered: frozenset[int]
    fields_version: int | None = None  # the field store's version after it (None: it read no field)
    fields_read: frozenset[str] = frozenset()  # the attribute names it read (a write to another leaves it valid)


class Budget(Exception):
    """The analysis of one entry point ran out of steps."""


@dataclass
class Frame:
    """The state of one function activation."""

    module: ModuleInfo
    env: dict[str, Value]
    function: str = "<module>"
    no_grad: bool = False
    conditions: tuple[Condition, ...] = ()
    returns: list[Value] = field(default_factory=list)
    depth: int = 0
    emit: bool = True
    epoch_loop: str = ""  # the iterable of the enclosing loop of updates over one batch (`range(ppo_epochs)`)
    class_ref: ClassRef | None = None
    call_stack: tuple[Anchor, ...] = ()
    accumulators: dict[str, Value] = field(default_factory=dict)
    closure: dict[str, Value] | None = None
    active: tuple[int, ...] = ()
    returned: bool = False
    return_nodes: list = field(default_factory=list)  # shared with branch frames, like `returns`
    root: cst.CSTNode | None = None  # the parsed definition whose code runs (for positions)

    def child(self, **changes: Any) -> "Frame":
        return replace(self, **changes)


@functools.lru_cache(maxsize=20_000)
def _text(expr: sp.Expr) -> str:
    """`str(expr)`, memoised (sympy's printer is slow and the same values are named often)."""
    return str(expr)


def _stem(expr: sp.Expr) -> str:
    """The name an opaque value was made from (`t__12` -> `t`)."""
    return _text(expr).split("__")[0]


class Interpreter:
    """Runs the entry points of one module and collects facts."""

    def __init__(self, entry: ModuleInfo, index: ProjectIndex, vocab: Any = None) -> None:
        """`vocab` (config `[tool.kllint.vocab]`) names the project's own log-prob helpers,
        stop-gradient helpers, loss sinks and reference names."""
        self.entry = entry
        self.index = index
        self.vocab = vocab
        self.algebra = Algebra()
        self.fields = FieldStore(self.algebra)  # values kept on containers (`experience.kl = kl`)
        self.facts: list[Any] = []
        self._abandoned: dict[tuple[str, str], tuple[cst.CSTNode | None, ModuleInfo, cst.CSTNode | None]] = {}
        self.steps = 0
        self.grad_targets: set[str] = set()
        self.name_roles: dict[tuple[str, str], dict[str, set[str]]] = {}
        self._nested_done: set[int] = set()
        self._instance_attributes: dict[tuple[int, str], Value | None] = {}
        self._plain_calls: dict[tuple, _CallMemo] = {}
        self._cutoffs = 0  # calls not followed (depth limit, recursion) so far
        self._open_calls: list[_Reach] = []  # the followed calls in progress, innermost last
        self.carrying_calls: set[int] = set()  # ids of project-call nodes whose arguments carry log-probs, KL or a model

    # ------------------------------------------------------------------ entry points
    def run(self) -> None:
        token = KL_CONTENT.set(self.algebra.kl_symbols)
        try:
            self._run()
        finally:
            KL_CONTENT.reset(token)

    def _run(self) -> None:
        self.grad_targets = self._find_grad_targets()
        module_frame = Frame(self.entry, {}, function="<module>")
        self._guarded(lambda: self.exec_block(self._module_statements(), module_frame), "<module>", None)
        functions = self.entry.functions
        texts = {("", name): functions.text(name) for name in functions}
        names = {("", name): functions.identifiers(name) for name in functions}
        for cls_node in self.entry.classes.values():
            texts.update({(cls_node.name.value, name): cls_node.method_text(name) for name in cls_node.method_names})
            names.update({(cls_node.name.value, name): cls_node.method_identifiers(name)
                          for name in cls_node.method_names})
        for cls_name, name in self._entry_points(texts, names):
            if not cls_name:
                node = functions.get(name)
                if node is not None:
                    self._guarded(lambda node=node: self.run_entry(node, None), name, node)
                continue
            cls_node = self.entry.classes[cls_name]
            cls = ClassRef(cls_name, cls_node, self.entry)
            self._guarded(lambda name=name, cls=cls: self._run_method(cls, name), f"{cls_name}.{name}",
                          cls_node.method(name))

    def _run_method(self, cls: ClassRef, name: str) -> None:
        node = cls.node.method(name)
        if node is not None:
            self.run_entry(node, cls)

    def _entry_points(self, texts: dict[tuple[str, str], str],
                      names: dict[tuple[str, str], set[str]]) -> list[tuple[str, str]]:
        """The functions and methods (class name or "", name) run as entry points, in source order.

        Every finding starts from a KL, a reference model or a KL API, so an entry point is a
        definition that uses a name for one (`kllint.pipeline.prefilter.names_kl_or_reference`; its
        docstring and comments do not count), or one whose text calls such a definition of this
        module by name (its caller may hold the loss or reward sink). Other definitions are only
        followed as helpers.
        """
        chosen = {key for key, used in names.items() if self._names_kl_or_reference(used)}
        while True:
            called = {name for _, name in chosen}
            if not called:
                break
            calls = re.compile(r"(?<!def )\b(?:" + "|".join(sorted(map(re.escape, called))) + r")\s*\(")
            added = {key for key, text in texts.items() if key not in chosen and calls.search(text)}
            if not added:
                break
            chosen |= added
        return [key for key in texts if key in chosen]

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

    def _guarded(self, action, function: str, node: cst.CSTNode | None) -> None:
        self.steps = 0
        try:
            action()
        except Budget:
            self._abandon(function, node, f"step budget of {MAX_STEPS:,} exhausted", root=node)
        except RecursionError:
            self._abandon(function, node, "nesting too deep for the interpreter", root=node)

    def _abandon(self, function: str, node: cst.CSTNode | None, reason: str, module: ModuleInfo | None = None,
                 root: cst.CSTNode | None = None) -> None:
        """Record that the analysis gave up on `function` (never silently: `kllint check -v`);
        `root`, the definition holding `node`, spares positioning every other definition."""
        self._abandoned.setdefault((function, reason), (node, module or self.entry, root))

    def abandoned(self) -> list[Abandoned]:
        """What the analysis gave up on, each with the line where it happened."""
        records = []
        for (function, reason), (node, module, root) in self._abandoned.items():
            line = module.span(node, root).line if node is not None else 1
            records.append(Abandoned(function, module.display, line, reason))
        return records

    def _module_statements(self) -> list[cst.CSTNode]:
        return self.entry.module_statements(self._names_kl_or_reference)

    def _find_grad_targets(self) -> set[str]:
        """Names of functions handed to `jax.grad`-like transforms in this module (`grad(f)`,
        `value_and_grad(f, has_aux=True)`, `nnx.grad`, `eqx.filter_grad`), read from the text."""
        targets: set[str] = set()
        text = self.entry.text
        for match in GRAD_CALL.finditer(text):
            transform, name = match.groups()
            start = match.start()
            alias_match = GRAD_ALIAS.search(text, max(0, start - 200), start) if text[start - 1:start] == "." else None
            alias = alias_match.group(1) if alias_match else None
            qualified = self.qualify(f"{alias}.{transform}" if alias else transform, self.entry)
            if qualified in fw.GRAD_TRANSFORMS_OF_MODEL:
                second = GRAD_SECOND_ARG.match(text, match.end())
                if second:
                    targets.add(second.group(1))
            elif qualified in fw.GRAD_TRANSFORMS or (alias or "").split(".")[0] in ("jax", "nnx", "eqx"):
                targets.add(name)
        return targets

    def run_entry(self, node: cst.FunctionDef, cls: ClassRef | None, closure: dict[str, Value] | None = None,
                  no_grad: bool = False, root: cst.CSTNode | None = None) -> None:
        name = node.name.value
        is_grad_target = name in self.grad_targets
        frame = Frame(self.entry, {}, function=name, class_ref=cls, closure=closure,
                      no_grad=no_grad or self._no_grad_decorated(node, self.entry) or callers_without_grad(self.entry, name, cls is not None),
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
        loss_function = is_grad_target or roles.is_loss_function_name(name)
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
            return Tensor(symbol, space=space, assumed=True)
        model = roles.model_role(name)
        if model is not None:
            return Model(model, name)
        if roles.is_mask_name(name):
            return Tensor(self.algebra.table.fresh(name, positive=True), kind="mask")
        return None

    # ------------------------------------------------------------------ helpers
    def anchor(self, node: cst.CSTNode, frame: Frame) -> Anchor:
        module = frame.module
        return Anchor(module.display, id(node), node, module, frame.conditions, frame.function, frame.root)

    def tick(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
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
                    self._abandon(node.name.value, node, f"step budget of {MAX_STEPS:,} exhausted", root=frame.root)
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
        names = [n for n in _used_names(node) if isinstance(frame.env.get(n), Alts) and any(
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

    def assign(self, target: cst.BaseExpression, value: Value, frame: Frame, statement: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            if name in frame.accumulators:
                value = frame.accumulators[name]
            value = self._named(value, name, frame, statement)
            if frame.no_grad:
                value = self.detach_value(value)
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
            if isinstance(key, cst.SimpleString):
                self.output_loss_entry(_string_value(key.value), value, frame, statement)
            if name is not None:
                last = name.split(".")[-1]
                self.check_reward_sink(last, value, frame, statement)
                if isinstance(base, cst.Name) and base.value in frame.env:
                    current = frame.env[base.value]
                    if frame.no_grad:  # `buffer[idx] = logp` under no_grad stores a detached copy
                        value = self.detach_value(value)
                    if isinstance(current, (Tensor, Unknown)) and isinstance(value, (Tensor, Alts)):
                        frame.env[base.value] = join(current, value) if not isinstance(current, Unknown) else value
        elif isinstance(target, cst.Attribute):
            self.check_reward_sink(target.attr.value, value, frame, statement)
            self.fields.write(target.attr.value, self.detach_value(value) if frame.no_grad else value, id(statement))

    def _item(self, value: Value, position: int, count: int) -> Value:
        options = []
        for option in alternatives(value):
            if isinstance(option, Sequence) and len(option.items) == count:
                options.append(option.items[position])
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
        options = []
        for option in alternatives(value):
            if isinstance(option, Tensor) and option.expr == LPD and roles.logprob_role(name) == "old":
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
            left = self.eval(test.left, frame)
            right = self.eval(comparison.comparator, frame)
            operator = comparison.operator
            options = self._literal_options(right)
            tested_node = test.left
            if options is None:
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
        assigned = _assigned_names(body)
        epoch_loop = frame.epoch_loop
        if isinstance(node, cst.For):
            iterable = self.eval(node.iter, frame)
            element = self._element(iterable, node.iter, frame)
            iter_source = frame.module.source(node.iter).strip()
            iter_text = iter_source.lower()
            if any(word in iter_text for word in ("epoch", "iteration", "minibatch", "mini_batch", "ppo_step", "update")):
                epoch_loop = epoch_loop or iter_source
        carried = [n for n in assigned if n in frame.env]
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
                     if isinstance(option, Tensor) and placeholder.expr in option.expr.free_symbols]
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
                options.append(option)
            else:
                options.append(Unknown())
        return join(*options)

    def exec_with(self, node: cst.With, frame: Frame) -> None:
        no_grad = frame.no_grad
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
                value = self.eval(call, frame)
                if item.asname is not None:
                    self.assign(item.asname.name, value, frame, node)
        saved = frame.no_grad
        frame.no_grad = no_grad
        self.exec_block(node.body.body, frame)
        frame.no_grad = saved

    def _no_grad_decorated(self, node: cst.FunctionDef, module: ModuleInfo) -> bool:
        for decorator in node.decorators:
            expr = decorator.decorator
            func = expr.func if isinstance(expr, cst.Call) else expr
            if self.qualify(dotted_name(func) or "", module) in fw.NO_GRAD_CONTEXTS:
                return True
        return False

    # ------------------------------------------------------------------ sinks
    def check_reward_sink(self, name: str, value: Value, frame: Frame, statement: cst.CSTNode) -> None:
        kind = roles.sink_kind(name)
        if kind is None or not frame.emit:
            return
        for option in alternatives(value):
            items = option.items if isinstance(option, Sequence) else (option,)
            for item in items:
                if (isinstance(item, Tensor) and self.algebra.kl_symbols(self._wrapped_expr(item))
                        and not self.fields.judged(item)):
                    self.facts.append(RewardFact(item, self.anchor(statement, frame), name, kind, frame.call_stack))

    def _wrapped_expr(self, t: Tensor) -> sp.Expr:
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

    def loss_sink(self, value: Value, node: cst.CSTNode, frame: Frame, kind: SinkKind, name: str = "",
                  entry_key: str = "") -> None:
        """Record that `value` is differentiated at `node` (how: `kind`, through `name`)."""
        if not frame.emit:
            return
        for option in alternatives(value):
            if isinstance(option, Tensor):
                self.facts.append(LossFact(option, self.anchor(node, frame), kind, name, frame.call_stack,
                                           frame.epoch_loop, entry_key))

    # ------------------------------------------------------------------ expressions
    def eval(self, node: cst.BaseExpression | None, frame: Frame) -> Value:
        if node is None:
            return Unknown()
        self.tick()
        method = getattr(self, f"eval_{type(node).__name__}", None)
        if method is None:
            return Unknown()
        return method(node, frame)

    def eval_Name(self, node: cst.Name, frame: Frame) -> Value:
        name = node.value
        if name in frame.env:
            value = frame.env[name]
            if isinstance(value, Tensor) and value.expr in (LP, LPD, REF, OLD):
                self.name_roles.setdefault((frame.module.display, frame.function), {}).setdefault(name, set()).add(_text(value.expr))
            return value
        if frame.closure is not None and name in frame.closure:
            return frame.closure[name]
        if name in ("True", "False", "None"):
            return Literal({"True": True, "False": False, "None": None}[name])
        return self.global_value(name, frame.module, frame)

    def global_value(self, name: str, module: ModuleInfo, frame: Frame) -> Value:
        if name in module.functions and module.functions.get(name) is not None:
            return FunctionRef(name, module.functions[name], module)
        if name in module.classes:
            return ClassRef(name, module.classes[name], module)
        if name in module.imports:
            return self.resolve_import(module.imports[name])
        constant = module.constants.get(name) if name in module.constants else None
        if constant is not None:
            if isinstance(constant, cst.Call) and self._library_constructor(constant, module):
                return self.eval(constant, frame.child(module=module, env={}, emit=False))
            if isinstance(constant, (cst.Dict, cst.SimpleString, cst.Integer, cst.Float, cst.Tuple, cst.List, cst.ConcatenatedString)):
                value = self.eval(constant, frame.child(module=module, env={}))
                if isinstance(value, Mapping):
                    return replace(value, name=name, items=value.items + self._registered(name, module))
                return value
            if name in module.registries:  # `REGISTRY = dict()` / `defaultdict(...)`, filled by decorators
                return Mapping(self._registered(name, module), name)
        return Unknown(name)

    def _registered(self, registry: str, module: ModuleInfo) -> tuple[tuple[str, Value], ...]:
        """The definitions the module's decorators store in `registry`, by key."""
        items = []
        for key, definition in module.registries.get(registry, ()):
            if definition in module.functions and module.functions.get(definition) is not None:
                items.append((key, FunctionRef(definition, module.functions[definition], module)))
            elif definition in module.classes:
                items.append((key, ClassRef(definition, module.classes[definition], module)))
        return tuple(items)

    def _library_constructor(self, call: cst.Call, module: ModuleInfo) -> bool:
        """`nn.KLDivLoss(...)`-like: a call of a tensor-library name (cheap and side-effect free)."""
        name = dotted_name(call.func)
        return name is not None and self.qualify(name, module).split(".")[0] in ("torch", "optax", "jax")

    def instance_attribute(self, cls: ClassRef, attr: str) -> Value | None:
        """`self.attr` assigned a library object (e.g. `nn.KLDivLoss(...)`) in a method of the class."""
        key = (id(cls.node), attr)
        if key not in self._instance_attributes:
            self._instance_attributes[key] = self._find_instance_attribute(cls, attr)
        return self._instance_attributes[key]

    def _find_instance_attribute(self, cls: ClassRef, attr: str) -> Value | None:
        node = cls.node
        methods = ([node.method(name) for name in node.assigns_attribute(attr)] if isinstance(node, LazyClass)
                   else class_methods(node))
        for stmt in methods:
            if stmt is None or not isinstance(stmt.body, cst.IndentedBlock):
                continue
            for line in stmt.body.body:
                if not isinstance(line, cst.SimpleStatementLine):
                    continue
                for small in line.body:
                    if not (isinstance(small, cst.Assign)
                            and any(dotted_name(t.target) == f"self.{attr}" for t in small.targets)):
                        continue
                    if isinstance(small.value, cst.Call):
                        if self._library_constructor(small.value, cls.module):
                            return self.eval(small.value, Frame(cls.module, {}, emit=False))
                        made = self._project_constructor(small.value, cls.module)
                        if made is not None:
                            return made
                    chosen = self._chosen_function(small.value, cls.module)
                    if chosen is not None:
                        return chosen
        return None

    def _chosen_function(self, expr: cst.BaseExpression, module: ModuleInfo) -> Value | None:
        """`self.reduce = partial(masked_sum, n=...) if cfg.x else masked_mean`: a function of the
        project (or a partial application of one), possibly chosen by a condition; None for
        anything else. Evaluated without the method's locals (a name it does not know is no
        function)."""
        if not isinstance(expr, (cst.Name, cst.Attribute, cst.IfExp, cst.Call)):
            return None
        if isinstance(expr, cst.Call) and self.qualify(dotted_name(expr.func) or "", module) != "functools.partial":
            return None
        value = self.eval(expr, Frame(module, {}, emit=False))
        options = alternatives(value)
        if options and all(isinstance(o, (FunctionRef, Partial)) for o in options):
            return value
        return None

    def _project_constructor(self, call: cst.Call, module: ModuleInfo) -> Instance | None:
        """`Estimator(config.kind)`: an instance of a project class (its constructor is not run)."""
        name = dotted_name(call.func)
        if name is None:
            return None
        head = name.split(".")[0]
        if head not in module.classes and head not in module.imports:
            return None
        value = self.eval(call.func, Frame(module, {}, emit=False))
        return Instance(value) if isinstance(value, ClassRef) else None

    def resolve_import(self, qualname: str) -> Value:
        root = qualname.split(".")[0]
        if root in ("torch", "jax", "numpy", "optax", "flax", "transformers", "math", "functools", "typing", "einops", "equinox", "chex", "mlx"):
            return ModuleRef(qualname)
        module, rest = self.index.resolve(qualname)
        if module is None:
            return ModuleRef(qualname)
        if not rest:
            return ModuleRef(f"project:{module.name}")
        head = rest.split(".")[0]
        if head in module.functions and module.functions.get(head) is not None:
            return FunctionRef(head, module.functions[head], module)
        if head in module.classes:
            return ClassRef(head, module.classes[head], module)
        if head in module.imports and module.imports[head] != qualname:
            return self.resolve_import(module.imports[head])
        return ModuleRef(qualname)

    def eval_Attribute(self, node: cst.Attribute, frame: Frame) -> Value:
        base = self.eval(node.value, frame)
        attr = node.attr.value
        options = []
        for option in alternatives(base):
            options.append(self.attribute(option, attr, node, frame))
        return join(*options)

    def attribute(self, base: Value, attr: str, node: cst.Attribute, frame: Frame) -> Value:
        if isinstance(base, ModuleRef):
            if base.qualname.startswith("project:"):
                module = self.index.load(base.qualname[len("project:"):])
                if module is not None:
                    return self.global_value(attr, module, frame) if attr in module.functions or attr in module.classes or attr in module.imports else ModuleRef(f"{base.qualname}.{attr}")
            return self.resolve_import(f"{base.qualname}.{attr}") if not base.qualname.startswith("project:") else ModuleRef(f"{base.qualname}.{attr}")
        if isinstance(base, Instance):
            method = self.find_method(base.cls, attr)
            if method is not None:
                return method
            assigned = self.instance_attribute(base.cls, attr)
            if assigned is not None and not isinstance(assigned, Unknown):
                return assigned
            if roles.is_backbone_attribute(attr):
                return Unknown(attr)  # an own sub-network (HF `PreTrainedModel.base_model`), no role by name
            stored = self.stored_field(attr)
            if stored is not None:
                return stored
            return self.value_from_name(attr, self.anchor(node, frame), frame, detached_source=False) if not roles.is_kl_name(attr) else self.algebra.opaque(attr)
        if isinstance(base, ClassRef):
            method = self.find_method(base, attr)
            return method if method is not None else Unknown(attr)
        if isinstance(base, _Super):
            return self.super_method(base, attr)
        if isinstance(base, Tensor):
            if attr in ("data",):
                return self.algebra.detach(base)
            if attr in ("T", "mT", "real", "logits", "log_probs", "logprobs"):
                return base
            if attr in ("shape", "dtype", "device", "ndim", "grad", "requires_grad", "is_cuda"):
                return Unknown(attr)
            if self.algebra.has_roles(base.expr) or base.kind or attr in fw.REDUCTIONS or attr in fw.IDENTITY:
                return _BoundMethod(base, attr)
            # an attribute of an opaque object (`batch.old_log_probs`, `self.accelerator.backward`);
            # `manager.compute_logprobs` is a method, not a tensor
            if roles.tokens(attr)[:1] and roles.tokens(attr)[0] in METHOD_VERBS:
                return _Attr(_stem(base.expr), attr)
            stored = self.stored_field(attr)
            if stored is not None:
                return stored
            named = (self.role_from_name(attr, detached_source=not roles.is_output_name(_stem(base.expr)))
                     if not roles.is_backbone_attribute(attr) else None)
            return named if named is not None else _Attr(_stem(base.expr), attr)
        if isinstance(base, Model):
            if attr in ("logits", "module", "model", "base_model", "pretrained_model", "policy", "lm_head"):
                return base if attr != "logits" else Tensor(ROLE_SYMBOL.get(base.role, LP), space="logits")
            return _BoundMethod(base, attr)
        if isinstance(base, Mapping):
            item = base.get(attr)
            return item if item is not None else Unknown(attr)
        if isinstance(base, Literal) and isinstance(base.value, str) and attr in STRING_METHODS:
            return _BoundMethod(base, attr)  # `mode.endswith("+")` of a known option
        if isinstance(base, ConfigValue):
            default = base.default
            source = dotted_name(node) or (f"{base.source}.{attr}" if base.source else attr)
            if isinstance(default, Mapping):
                inner = default.get(attr)
                return ConfigValue(attr, inner.value if isinstance(inner, Literal) else inner, source)
            return ConfigValue(attr, source=source)
        if isinstance(base, Unknown):
            if any(t in CONFIG_TOKENS or t == "params" for t in roles.tokens(base.name)):
                return ConfigValue(attr, source=dotted_name(node) or attr)
            stored = self.stored_field(attr)
            return stored if stored is not None else _Attr(base.name, attr)
        if isinstance(base, _Attr):
            stored = self.stored_field(attr)
            if stored is not None:
                return stored
        return Unknown(attr)

    def stored_field(self, attr: str) -> Value | None:
        """What the analysed code stored under the attribute `attr` of some object, for a read on
        an object the analysis knows nothing else about; not for names that give a role (a
        model or log-probs: `self.ref_model`, built by factories the analysis cannot tell apart
        from the policy, keeps the role of its name)."""
        if self.role_from_name(attr) is not None:
            return None
        return self.fields.read(attr)

    def super_method(self, sup: "_Super", name: str) -> Value:
        """`super().name`: the method of a base class of the defining class, bound to the instance."""
        for base in sup.cls.node.bases:
            base_value = self.eval(base.value, Frame(sup.cls.module, {}))
            if isinstance(base_value, ClassRef):
                found = self.find_method(base_value, name)
                if found is not None:
                    return replace(found, bound_self=sup.instance) if isinstance(found.bound_self, Instance) else found
        return Unknown(name)

    def find_method(self, cls: ClassRef, name: str, seen: int = 0) -> FunctionRef | None:
        stmt = class_method(cls.node, name)
        if stmt is not None:
            kind = _method_kind(stmt)
            bound = None if kind == "staticmethod" else cls if kind == "classmethod" else Instance(cls)
            return FunctionRef(f"{cls.name}.{name}", stmt, cls.module, bound_self=bound, class_name=cls.name, owner=cls)
        if seen > 4:
            return None
        for base in cls.node.bases:
            base_value = self.eval(base.value, Frame(cls.module, {}))
            if isinstance(base_value, ClassRef):
                found = self.find_method(base_value, name, seen + 1)
                if found is not None:
                    return found
        return None

    def eval_Subscript(self, node: cst.Subscript, frame: Frame) -> Value:
        base = self.eval(node.value, frame)
        key: Value = Unknown()
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = self.eval(node.slice[0].slice.value, frame)
        options = []
        for option in alternatives(base):
            options.append(self.subscript(option, key, node, frame))
        return join(*options)

    def subscript(self, base: Value, key: Value, node: cst.Subscript, frame: Frame) -> Value:
        if isinstance(base, Literal) and isinstance(base.value, str):
            return _string_item(base.value, node.slice, key)
        if isinstance(base, Tensor):
            if isinstance(key, Literal) and isinstance(key.value, str) and not self.algebra.has_roles(base.expr):
                stored = self.fields.read(KEY_FIELD + key.value)
                if stored is not None:
                    return stored
                keyed = self.value_from_name(key.value, self.anchor(node, frame), frame,
                                             detached_source=not roles.is_output_name(_stem(base.expr)))
                if not isinstance(keyed, Tensor) or self.algebra.has_roles(keyed.expr) or keyed.kind:
                    return keyed
            return base
        if isinstance(base, Model):
            return base
        if isinstance(base, Mapping) and isinstance(key, Literal):
            item = base.get(str(key.value))
            return item if item is not None else Unknown(str(key.value))
        if isinstance(base, Mapping) and base.items:
            return self.keyed_entries(base, key, node.slice[0].slice.value if len(node.slice) == 1
                                      and isinstance(node.slice[0].slice, cst.Index) else None)
        if isinstance(base, Sequence):
            if isinstance(key, Literal) and isinstance(key.value, int) and -len(base.items) <= key.value < len(base.items):
                return base.items[key.value]
            return join(*base.items) if base.items else Unknown()
        if isinstance(base, ConfigValue):
            if isinstance(key, Literal):
                default = base.default.get(str(key.value)) if isinstance(base.default, Mapping) else None
                return ConfigValue(str(key.value), default.value if isinstance(default, Literal) else default,
                                   frame.module.source(node).strip())
            return ConfigValue(base.name, source=base.source)
        if isinstance(base, (Unknown, _Attr)) and isinstance(key, Literal) and isinstance(key.value, str):
            owner = base.name if isinstance(base, Unknown) else base.attr
            if any(t in ("config", "cfg", "args", "conf", "hparams", "kwargs", "options") for t in roles.tokens(owner or "")):
                return ConfigValue(key.value, source=frame.module.source(node).strip())
            stored = self.fields.read(KEY_FIELD + key.value)
            if stored is not None:
                return stored  # stored under this key by the code analysed
            # batch / inputs dictionaries: tensors named by their key, without gradient
            return self.value_from_name(key.value, self.anchor(node, frame), frame,
                                        detached_source=not roles.is_output_name(owner or ""))
        return Unknown()

    def keyed_entries(self, mapping: Mapping, key: Value, key_node: cst.BaseExpression | None) -> Value:
        """`mapping[key]` for a key known only at run time: every entry, a callable one under
        the condition that the key selects it (explored option by option like a mode string)."""
        config = next((o for o in alternatives(key) if isinstance(o, ConfigValue)), None)
        tested = (dotted_name(key_node) if key_node is not None else None) or "key"
        name = (config.source or config.name) if config else tested
        default = config.default if config and isinstance(config.default, str) else None
        keys: dict[Value, list[str]] = {}  # one option per callable, under all the keys that pick it
        for entry, value in mapping.items:
            for option in alternatives(value):
                keys.setdefault(option, []).append(entry)
        return join(*(Keyed(o, Condition(name, tuple(entries), False, default, tested))
                      if isinstance(o, (FunctionRef, Partial, ClassRef)) else o for o, entries in keys.items()))

    def eval_Call(self, node: cst.Call, frame: Frame) -> Value:
        if isinstance(node.func, cst.Name) and node.func.value == "super" and frame.class_ref is not None:
            return _Super(frame.class_ref, frame.env.get("self", Instance(frame.class_ref)))
        func = self.eval(node.func, frame)
        args = [self.eval(a.value, frame) for a in node.args if a.keyword is None and a.star == ""]
        kwargs = {a.keyword.value: self.eval(a.value, frame) for a in node.args if a.keyword is not None}
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
        options = []
        for option in alternatives(func):
            options.append(self.call(option, args, kwargs, node, frame))
        return join(*options)

    def call(self, func: Value, args: list[Value], kwargs: dict[str, Value], node: cst.Call, frame: Frame) -> Value:
        return calls.dispatch(self, func, args, kwargs, node, frame)

    def call_function(self, ref: FunctionRef, args: list[Value], kwargs: dict[str, Value], node: cst.CSTNode,
                      frame: Frame, defaults_as_literals: bool = True) -> Value:
        """Follow a project function with the caller's values bound to its parameters.

        Calls are memoised: by a summary of their arguments when these carry no log-prob or KL
        (`_signature_of`), else by the arguments themselves (`_exact_signature`). A result
        whose computation met no cut-off (depth limit, recursive call) is reused at other depths
        as long as its whole call tree still fits under MAX_DEPTH there and enters no function
        that is running at the new call site; other results are reused at the same depth only.
        """
        fdef = ref.node
        key = id(fdef)
        if self.carries(list(args) + list(kwargs.values())):
            self.carrying_calls.add(id(node))
        if frame.depth >= MAX_DEPTH or key in frame.active:
            self._cutoffs += 1
            if frame.depth >= MAX_DEPTH and frame.emit and self._carries_roles(list(args) + list(kwargs.values())):
                self._abandon(frame.function, node, f"call of `{ref.qualname}` not followed (call depth limit "
                                                    f"{MAX_DEPTH}) with log-probs or KL terms among its arguments",
                              frame.module, frame.root)
            return Unknown(ref.qualname)
        memo_key = None
        values = list(args) + [kwargs[k] for k in sorted(kwargs)]
        signature = _signature_of(values)
        if signature is None:
            signature = _exact_signature(values, frame)
        if signature is not None and not isinstance(fdef, cst.Lambda) and key not in self._closures:
            memo_key = (key, frame.no_grad, frame.emit, tuple(sorted(kwargs)), signature,
                        id(ref.bound_self.cls.node) if isinstance(ref.bound_self, Instance) else 0)
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
                return self._replay(memo, node, frame)
        facts_before, cutoffs_before = len(self.facts), self._cutoffs
        reach = _Reach(frame.depth, {key})
        self._open_calls.append(reach)
        self.fields.open()
        try:
            result, callee_frame = self._follow(ref, args, kwargs, node, frame, defaults_as_literals)
        finally:
            self._open_calls.pop()
            read = self.fields.close()
        self._note_reach(reach.deepest, reach.entered)
        if memo_key is not None:
            depth = None if self._cutoffs == cutoffs_before else frame.depth
            self._plain_calls[memo_key + (depth,)] = _CallMemo(
                result, self.facts[facts_before:], len(callee_frame.call_stack), reach.deepest - frame.depth,
                frozenset(reach.entered), self.fields.version if read else None, read)
        return self._returned(result, self.anchor(node, frame))

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

    def depth_matters(self, frame: Frame) -> int:
        """The depth of `frame`, for a decision that depends on it: a helper call whose result
        (or facts) came from such a decision is memoised for its own depth only."""
        self._cutoffs += 1
        return frame.depth

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
        callee_frame = Frame(ref.module, {}, function=ref.qualname, no_grad=frame.no_grad,
                             conditions=frame.conditions, depth=frame.depth + 1, emit=frame.emit,
                             epoch_loop=frame.epoch_loop,
                             call_stack=frame.call_stack + (self.anchor(node, frame),),
                             closure=self._closures.get(key), active=frame.active + (key,), class_ref=ref.owner,
                             root=fdef if ref.module.is_root(fdef) else (frame.root if ref.module is frame.module else None))
        if isinstance(fdef, cst.FunctionDef) and self._no_grad_decorated(fdef, ref.module):
            callee_frame.no_grad = True
        params = fdef.params
        positional = list(params.posonly_params) + list(params.params)
        values = list(args)
        if ref.bound_self is not None and positional:
            callee_frame.env[positional[0].name.value] = ref.bound_self
            positional = positional[1:]
        for param in positional + list(params.kwonly_params):
            pname = param.name.value
            if pname in kwargs:
                value = kwargs[pname]
            elif values and param in positional:
                value = values.pop(0)
            elif param.default is not None:
                value = self.eval(param.default, callee_frame.child(env={}))
                if not defaults_as_literals and isinstance(value, Literal):
                    value = ConfigValue(pname, value.value, pname)
            else:
                value = self.value_from_name(pname, self.anchor(param, callee_frame), callee_frame, parameter=True)
            callee_frame.env[pname] = value
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

    def _replay(self, memo: "_CallMemo", node: cst.CSTNode, frame: Frame) -> Value:
        """A memoised helper call: its result, and its facts re-stated for this call site."""
        stack = frame.call_stack + (self.anchor(node, frame),)
        if frame.emit:
            for fact in memo.facts:
                self.facts.append(replace(fact, call_stack=stack + tuple(fact.call_stack[memo.prefix:])))
        return self._returned(memo.result, stack[-1])

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

    def eval_BinaryOperation(self, node: cst.BinaryOperation, frame: Frame) -> Value:
        op = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.Divide: "/", cst.Power: "**",
              cst.FloorDivide: "/", cst.MatrixMultiply: "*"}.get(type(node.operator))
        left = self.eval(node.left, frame)
        right = self.eval(node.right, frame)
        if op is None:
            return Unknown()
        return self.arith(op, left, right, node, frame)

    def arith(self, op: str, left: Value, right: Value, node: cst.CSTNode, frame: Frame) -> Value:
        options = []
        lefts, rights = alternatives(left), alternatives(right)
        pairs = covering_pairs(len(lefts), len(rights))
        for i, j in pairs:
            a, b = lefts[i], rights[j]
            if True:
                if isinstance(a, Literal) and isinstance(b, Literal):
                    try:
                        options.append(Literal(OPERATORS[op](a.value, b.value)))
                    except Exception:  # noqa: BLE001
                        options.append(Unknown())
                    continue
                if isinstance(a, Sequence) and isinstance(b, Sequence) and op == "+":
                    options.append(Sequence(a.items + b.items))
                    continue
                if not _numeric(a) or not _numeric(b):
                    options.append(Unknown())
                    continue
                if isinstance(a, Model) or isinstance(b, Model):
                    # a layer of the network (x @ W, W + b): logits of the model's role
                    model = a if isinstance(a, Model) else b
                    options.append(self.as_tensor(model))
                    continue
                ta, tb = self.as_tensor(a), self.as_tensor(b)
                options.append(self.algebra.binary(op, ta, tb, self.anchor(node, frame)))
        return join(*options)

    def eval_UnaryOperation(self, node: cst.UnaryOperation, frame: Frame) -> Value:
        value = self.eval(node.expression, frame)
        if isinstance(node.operator, cst.Minus):
            options = []
            for option in alternatives(value):
                if isinstance(option, Literal) and isinstance(option.value, (int, float)):
                    options.append(Literal(-option.value))
                elif _numeric(option):
                    options.append(self.algebra.unary(self.as_tensor(option), lambda e: -e, self.anchor(node, frame)))
                else:
                    options.append(Unknown())
            return join(*options)
        if isinstance(node.operator, cst.Not):
            return Unknown()
        return value

    def eval_Integer(self, node: cst.Integer, frame: Frame) -> Value:
        try:
            return Literal(int(node.value.replace("_", ""), 0))
        except ValueError:
            return Unknown()

    def eval_Float(self, node: cst.Float, frame: Frame) -> Value:
        try:
            return Literal(float(node.value.replace("_", "")))
        except ValueError:
            return Unknown()

    def eval_SimpleString(self, node: cst.SimpleString, frame: Frame) -> Value:
        try:
            return Literal(_string_value(node.value))
        except Exception:  # noqa: BLE001
            return Unknown()

    def eval_ConcatenatedString(self, node: cst.ConcatenatedString, frame: Frame) -> Value:
        return Unknown()

    def eval_Tuple(self, node: cst.Tuple, frame: Frame) -> Value:
        return Sequence(tuple(self.eval(e.value, frame) for e in node.elements))

    eval_List = eval_Tuple

    def eval_Dict(self, node: cst.Dict, frame: Frame) -> Value:
        items = []
        for element in node.elements:
            if isinstance(element, cst.DictElement):
                key = self.eval(element.key, frame)
                if isinstance(key, Literal):
                    items.append((str(key.value), self.eval(element.value, frame)))
        return Mapping(tuple(items))

    def eval_IfExp(self, node: cst.IfExp, frame: Frame) -> Value:
        decision, _ = self.decide(node.test, frame)
        if decision is True:
            return self.eval(node.body, frame)
        if decision is False:
            return self.eval(node.orelse, frame)
        then, other = self.eval(node.body, frame), self.eval(node.orelse, frame)
        if frame.emit:
            self._note_choice(node, then, other, frame)
        return join(then, other)

    def _note_choice(self, node: cst.IfExp, then: Value, other: Value, frame: Frame) -> None:
        """Record an undecided `a if test else b` whose branches carry the rollout policy's
        log-probs in one branch only (`BranchChoice`)."""
        def old_in(value: Value) -> bool:
            return any(isinstance(o, Tensor) and OLD in self.algebra.table.role_symbols(o.expr) for o in alternatives(value))

        in_then, in_other = old_in(then), old_in(other)
        if in_then != in_other:
            source = frame.module.source
            self.facts.append(BranchChoice(self.anchor(node, frame), source(node.test).strip(), in_then,
                                           source(node.body if in_then else node.orelse).strip(), frame.call_stack))

    def eval_Lambda(self, node: cst.Lambda, frame: Frame) -> Value:
        self._closures[id(node)] = frame.env
        return FunctionRef("<lambda>", node, frame.module)

    def eval_Await(self, node: cst.Await, frame: Frame) -> Value:
        return self.eval(node.expression, frame)

    def eval_NamedExpr(self, node: cst.NamedExpr, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        self.assign(node.target, value, frame, node)
        return value

    def _comprehension(self, node, frame: Frame) -> Frame:
        inner = frame.child(env=dict(frame.env))
        generator = node.for_in
        while generator is not None:
            iterable = self.eval(generator.iter, inner)
            element = self._element(iterable, generator.iter, inner)
            self.assign(generator.target, element, inner, node)
            generator = generator.inner_for_in
        return inner

    def eval_ListComp(self, node: cst.ListComp, frame: Frame) -> Value:
        inner = self._comprehension(node, frame)
        return Sequence((self.eval(node.elt, inner),))

    eval_GeneratorExp = eval_ListComp
    eval_SetComp = eval_ListComp

    def eval_DictComp(self, node: cst.DictComp, frame: Frame) -> Value:
        self._comprehension(node, frame)
        return Unknown()

    def eval_Comparison(self, node: cst.Comparison, frame: Frame) -> Value:
        self.eval(node.left, frame)
        for comparison in node.comparisons:
            self.eval(comparison.comparator, frame)
        return Unknown("comparison")

    def eval_BooleanOperation(self, node: cst.BooleanOperation, frame: Frame) -> Value:
        return join(self.eval(node.left, frame), self.eval(node.right, frame))

    def eval_StarredElement(self, node: cst.StarredElement, frame: Frame) -> Value:
        return self.eval(node.value, frame)

    def eval_FormattedString(self, node: cst.FormattedString, frame: Frame) -> Value:
        return Unknown()


@dataclass(frozen=True)
class _Super:
    """`super()` inside a method of `cls`, for `instance`."""

    cls: ClassRef
    instance: Any


def _string_item(text: str, elements, key: Value) -> Value:
    """`text[i]` or `text[a:b]` with literal bounds; Unknown otherwise."""
    if len(elements) != 1:
        return Unknown()
    part = elements[0].slice
    if isinstance(part, cst.Index):
        if isinstance(key, Literal) and isinstance(key.value, int) and -len(text) <= key.value < len(text):
            return Literal(text[key.value])
        return Unknown()
    bounds = []
    for bound in (part.lower, part.upper, part.step):
        if bound is None:
            bounds.append(None)
            continue
        number = _int_literal(bound)
        if number is None:
            return Unknown()
        bounds.append(number)
    return Literal(text[slice(*bounds)])


def _int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.value)
    return None


def covering_pairs(m: int, n: int) -> list[tuple[int, int]]:
    """Index pairs of two alternative lists, ordered so that every option of either side comes
    in the first max(m, n) pairs (alternatives are capped: a left option times the first right
    option only would drop the right side's later options, e.g. the fourth estimator of a
    mode-dispatching helper), then the rest by (max(i, j), i, j)."""
    cover = [(k % m, k % n) for k in range(max(m, n))]
    seen = set(cover)
    rest = sorted(((i, j) for i in range(m) for j in range(n) if (i, j) not in seen), key=lambda ij: (max(ij), ij))
    return cover + rest


def _signature_of(values: list[Value]) -> tuple | None:
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
            parts.append(("model", value.role))
        elif isinstance(value, Instance):
            parts.append(("instance", id(value.cls.node)))
        elif isinstance(value, (Mapping, Sequence)):
            items = [v for _, v in value.items] if isinstance(value, Mapping) else list(value.items)
            inner = _signature_of(items)
            if inner is None:
                return None
            parts.append((type(value).__name__, inner))
        else:
            return None
    return tuple(parts)


def _exact_signature(values: list[Value], frame: Frame) -> tuple | None:
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


@functools.lru_cache(maxsize=20_000)
def _string_value(source: str) -> str | bytes:
    """The value of a string literal from its source text (`ast.literal_eval`, memoised: it
    parses the text and leaves cyclic garbage for the collector on every call)."""
    return ast.literal_eval(source)


def _numeric(value: Value) -> bool:
    if isinstance(value, Literal):
        return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    return isinstance(value, (Tensor, Model, ConfigValue, Unknown, _Attr))


_NAME_CACHE: dict[tuple[str, int], tuple[Any, list[str]]] = {}


def _cached(kind: str, node: Any, compute) -> list[str]:
    """Memoised per node; the entry keeps the node alive so that its id is never reused."""
    key = (kind, id(node))
    found = _NAME_CACHE.get(key)
    if found is None or found[0] is not node:
        if len(_NAME_CACHE) > 20_000:  # its entries keep parsed trees alive
            _NAME_CACHE.clear()
        found = _NAME_CACHE[key] = (node, compute())
    return found[1]


def _assigned_names(statements: list[cst.CSTNode]) -> list[str]:
    return _cached("assigned", statements[0] if statements else None, lambda: _collect_assigned(statements))


def _collect_assigned(statements: list[cst.CSTNode]) -> list[str]:
    names: list[str] = []
    for statement in statements:
        for node in _walk(statement, skip=(cst.FunctionDef,)):
            if isinstance(node, cst.AssignTarget):
                names.extend(_target_names(node.target))
            elif isinstance(node, cst.AugAssign):
                names.extend(_target_names(node.target))
    return list(dict.fromkeys(names))


def _used_names(node: cst.CSTNode) -> list[str]:
    return _cached("used", node, lambda: _collect_used(node))


def _collect_used(node: cst.CSTNode) -> list[str]:
    """Names read in an expression: `a` of `a.b.c`, not `b` or `c`; lambdas are not entered."""
    names: list[str] = []
    for item in _walk(node, skip=(cst.Lambda,), attribute_values=True):
        if isinstance(item, cst.Name):
            names.append(item.value)
    return list(dict.fromkeys(names))


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_LAYOUT = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after", "header", "footer",
           "newline", "lbracket", "rbracket", "lbrace", "rbrace", "colon", "equal", "star", "dot", "operator")


def _child_fields(kind: type) -> tuple[str, ...]:
    found = _CHILD_FIELDS.get(kind)
    if found is None:
        found = _CHILD_FIELDS[kind] = tuple(f.name for f in fields(kind) if not f.name.startswith(_LAYOUT))
    return found


def _walk(root: cst.CSTNode, skip: tuple[type, ...] = (), attribute_values: bool = False):
    """`root` and the nodes below it (layout-only fields skipped; nodes of the `skip` types are
    yielded but not entered). With `attribute_values`, an Attribute is entered on its `value` side only."""
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, skip):
            continue
        if attribute_values and isinstance(node, cst.Attribute):
            stack.append(node.value)
            continue
        children: list[cst.CSTNode] = []
        for name in _child_fields(type(node)):
            child = getattr(node, name)
            if isinstance(child, cst.CSTNode):
                children.append(child)
            elif isinstance(child, (list, tuple)):
                children.extend(c for c in child if isinstance(c, cst.CSTNode))
        stack.extend(reversed(children))  # pre-order, in source order


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _target_names(e.value)]
    return []


def _method_kind(node: cst.FunctionDef) -> str | None:
    """`staticmethod` or `classmethod` for a method so decorated (its first parameter is not the
    instance), else None."""
    for decorator in node.decorators:
        name = dotted_name(decorator.decorator)
        if name in ("staticmethod", "classmethod"):
            return name
    return None
