"""Name resolution: local, closure and module-level names (functions, classes, imports,
constants, decorator registries), `self.attr` assigned in a class's methods, and imports
resolved through the project index."""
from __future__ import annotations

from dataclasses import replace

import libcst as cst
from kllint.analysis import terms as tm

from kllint.analysis import keyed
from kllint.analysis.engines import LIBRARY_OBJECTS
from kllint.analysis.fields import constructor_fields, constructor_state
from kllint.analysis.interpret.frames import Frame
from kllint.analysis.interpret.walk import used_names
from kllint.analysis.definitions import LazyClass, class_methods, own_statement_lines, parameter_names
from kllint.analysis.module import ModuleInfo, dotted_name
from kllint.analysis.symbolic import ROLE_SYMBOLS, symbols_of
from kllint.analysis.values import (
    STARRED, ClassRef, ConfigValue, FunctionRef, Instance, Literal, Mapping, ModuleRef, Partial, Tensor, Unknown, Value, alternatives,
    join,
)


class Names:
    """Resolves names, module globals, instance attributes and imports (a mixin of the interpreter)."""

    _open_aliases: set  # set up by the interpreter
    _module_instances: dict[int, Value | None]

    def eval_Name(self, node: cst.Name, frame: Frame) -> Value:
        name = node.value
        if name in frame.env:
            value = frame.env[name]
            if isinstance(value, Tensor) and value.expr in ROLE_SYMBOLS:
                self.name_roles.setdefault((frame.module.display, frame.function), {}).setdefault(name, set()).add(value.expr.name)
            return value
        if frame.closure is not None and name in frame.closure:
            return frame.closure[name]
        if name in ("True", "False", "None"):
            return Literal({"True": True, "False": False, "None": None}[name])
        return self.global_value(name, frame.module, frame)

    def global_value(self, name: str, module: ModuleInfo, frame: Frame) -> Value:
        if name in module.functions:
            return FunctionRef(name, module.functions.function(name), module)
        if name in module.classes:
            return ClassRef(name, module.classes[name], module)
        if name in module.imports:
            return self.resolve_import(module.imports[name])
        constant = module.constants.get(name) if name in module.constants else None
        if constant is not None:
            if isinstance(constant, cst.Call) and self._library_constructor(constant, module):
                return self.eval(constant, frame.child(module=module, env={}, emit=False))
            if isinstance(constant, cst.Call):
                made = self.module_instance(constant, module)
                if made is not None:
                    return made
            if isinstance(constant, (cst.Dict, cst.SimpleString, cst.Integer, cst.Float, cst.Tuple, cst.List, cst.ConcatenatedString)):
                value = self.eval(constant, frame.child(module=module, env={}))
                if isinstance(value, Mapping):
                    return replace(value, name=name, items=value.items + self._registered(name, module))
                return value
            if name in module.registries:  # `REGISTRY = dict()` / `defaultdict(...)`, filled by decorators
                return Mapping(self._registered(name, module), name)
            method = self.class_attribute_alias(constant, module)
            if method is not None:
                return method
        return Unknown(name)

    def class_attribute_alias(self, constant: cst.BaseExpression, module: ModuleInfo) -> Value | None:
        """A module-level name bound to a callable attribute of a class the module defines or
        imports (`fused_op = FusedOp.apply`, `build = Builder.create`): that callable (a project
        function, or the forward of a project autograd Function); None for anything else."""
        if not (isinstance(constant, cst.Attribute) and isinstance(constant.value, cst.Name)
                and (constant.value.value in module.classes or constant.value.value in module.imports)):
            return None
        if id(constant) in self._open_aliases:
            return None  # aliases that lead back to themselves through other modules
        self._open_aliases.add(id(constant))
        try:
            value = self.eval(constant, Frame(module, {}, emit=False))
        finally:
            self._open_aliases.discard(id(constant))
        options = alternatives(value)
        return value if options and all(isinstance(o, (FunctionRef, Partial)) for o in options) else None

    def _registered(self, registry: str, module: ModuleInfo) -> tuple[tuple[str, Value], ...]:
        """The definitions the module's decorators store in `registry`, by key."""
        items = []
        for key, definition in module.registries.get(registry, ()):
            if definition in module.functions:
                items.append((key, FunctionRef(definition, module.functions.function(definition), module)))
            elif definition in module.classes:
                items.append((key, ClassRef(definition, module.classes[definition], module)))
        return tuple(items)

    def _library_constructor(self, call: cst.Call, module: ModuleInfo) -> bool:
        """`nn.KLDivLoss(...)`-like: a call of a tensor-library name (cheap and side-effect free), or of
        a library class whose methods the analysis models (`kllint.analysis.engines.LIBRARY_OBJECTS`)."""
        name = dotted_name(call.func)
        qualified = self.qualify(name, module) if name is not None else ""
        return qualified.split(".")[0] in ("torch", "optax", "jax") or qualified in LIBRARY_OBJECTS

    def instance_attribute(self, cls: ClassRef, attr: str, seen: int = 0) -> Value | None:
        """`self.attr` assigned a library object (e.g. `nn.KLDivLoss(...)`) in a method of the
        class or, when the class assigns none, of a base class of the project (the constructor of
        a base trainer storing the reducer its subclasses call)."""
        key = (id(cls.node), attr)
        if key not in self._instance_attributes:
            self._instance_attributes[key] = None  # a cycle of bases finds nothing
            found = self._find_instance_attribute(cls, attr)
            if found is None:
                found = self._configuration_passed_up(cls, attr)
            if found is None and seen < 4:
                for base in self.project_bases(cls):
                    found = self.instance_attribute(base, attr, seen + 1)
                    if found is not None:
                        break
            self._instance_attributes[key] = found
        return self._instance_attributes[key]

    def _find_instance_attribute(self, cls: ClassRef, attr: str) -> Value | None:
        node = cls.node  # a lazy class's methods are parsed one at a time, up to the first that answers
        methods = ((node.method(name) for name in node.assigns_attribute(attr)) if isinstance(node, LazyClass)
                   else class_methods(node))
        for stmt in methods:
            for value in _stored_on_self(stmt, attr):
                if isinstance(value, cst.Call):
                    if self._library_constructor(value, cls.module):
                        return self.eval(value, Frame(cls.module, {}, emit=False))
                    receiver = parameter_names(stmt)[:1]
                    made = self._project_constructor(value, cls.module, {name: Instance(cls) for name in receiver})
                    if made is not None:
                        return made
                chosen = self._chosen_function(value, cls.module)
                if chosen is not None:
                    return chosen
                if isinstance(value, cst.Name):
                    configured = self.annotated_configuration(stmt, value.value, cls.module)
                    if configured is not None:
                        return configured
        return None

    def _configuration_passed_up(self, cls: ClassRef, attr: str) -> ConfigValue | None:
        """`self.attr` that a base class's constructor stores from its parameter, given by this
        class's constructor as its own parameter annotated with a configuration class
        (`def __init__(self, config: ActorConfig): super().__init__(config)` over a base's
        `self.config = config`): that configuration, with the class's defaults."""
        constructor = cls.node.function("__init__") if isinstance(cls.node, LazyClass) else None
        if constructor is None or not constructor.calls_super_init():
            return None  # read from the outline: most constructors are never parsed here
        init = constructor.node
        if init is None or not isinstance(init.body, cst.IndentedBlock):
            return None
        for line in init.body.body:
            call = _super_init_call(line)
            if call is None:
                continue
            for base in self.project_bases(cls):
                base_constructor = base.node.function("__init__") if isinstance(base.node, LazyClass) else None
                if base_constructor is None or not base_constructor.stores_parameter(attr):
                    continue
                base_init = base_constructor.node
                stored = _stored_parameter(base_init, attr) if base_init is not None else None
                passed = _argument_for(call, base_init, stored) if stored is not None else None
                if isinstance(passed, cst.Name):
                    return self.annotated_configuration(init, passed.value, cls.module)
        return None

    def annotated_configuration(self, fdef: cst.FunctionDef, name: str, module: ModuleInfo) -> ConfigValue | None:
        """The parameter `name` of `fdef` annotated with a configuration class of the project
        (`ppo_config: PPOConfig`: annotated fields with literal defaults, a string among them, as
        a mode is): a configuration value whose defaults are the class's, so that a mode read from
        it names its default. None for anything else (a data container's fields default to None)."""
        params = fdef.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.name.value != name or param.annotation is None:
                continue
            annotation = param.annotation.annotation
            if isinstance(annotation, cst.SimpleString):
                text = annotation.value.strip("\"'")
                annotation = cst.Name(text) if text.isidentifier() else annotation
            if not isinstance(annotation, (cst.Name, cst.Attribute)):
                return None
            cls = self.eval(annotation, Frame(module, {}, emit=False))
            if not isinstance(cls, ClassRef) or not isinstance(cls.node, LazyClass):
                return None
            defaults = cls.node.field_defaults()
            if not any(isinstance(value, str) for value in defaults.values()):
                return None  # a data container (`batch: TensorDict = None`), not a configuration with modes
            return ConfigValue(name, Mapping(tuple((key, Literal(value)) for key, value in defaults.items())), name)
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

    def module_instance(self, call: cst.Call, module: ModuleInfo) -> Value | None:
        """A module-level name bound to an instance of a project class (`LOSSES = Registry("loss",
        default_mapping={...})`): that instance with the arguments known statically (memoised
        per statement); None for a call of anything else."""
        key = id(call)
        if key not in self._module_instances:
            if key in self._open_aliases:
                return None
            self._open_aliases.add(key)
            try:
                self._module_instances[key] = self._project_constructor(call, module, plain_names_only=True)
            finally:
                self._open_aliases.discard(key)
        return self._module_instances[key]

    def _project_constructor(self, call: cst.Call, module: ModuleInfo, env: dict[str, Value] | None = None,
                             plain_names_only: bool = False) -> Value | None:
        """`Estimator(config.kind)`, `TABLE["k3"](coef)`, `REGISTRY.get(cfg.kind)(**cfg.args)`: an
        instance of a project class, the class named or taken from a container or a registry's
        lookup (under the condition of a run-time key); its constructor is not run, the
        arguments known statically are kept. Evaluated without the method's locals but its
        receiver (`env`: `self` as an instance of the class); None when the callee is no
        project class."""
        callee = call.func
        while isinstance(callee, (cst.Call, cst.Subscript, cst.Attribute)):
            if plain_names_only and not isinstance(callee, cst.Attribute):
                return None  # a module constant: only a class named (`Registry(...)`), nothing run
            callee = callee.func if isinstance(callee, cst.Call) else callee.value
        if not isinstance(callee, cst.Name) or not (callee.value in module.classes or callee.value in module.imports
                                                     or callee.value in module.constants):
            return None
        frame = Frame(module, dict(env or {}), emit=False)
        func = self.eval(call.func, frame)
        if not any(isinstance(inner, ClassRef) for inner, _ in keyed.conditioned(func)):
            return None
        args, kwargs = self.call_arguments(call, frame)
        made = [keyed.lifted(lambda made: self._with_state(made, args, kwargs, call), option)
                for cls in alternatives(func) if isinstance(keyed.conditioned(cls)[0][0], ClassRef)
                for option in alternatives(self.call(cls, args, kwargs, call, frame))
                if isinstance(keyed.conditioned(option)[0][0], Instance)]
        return join(*made) if made else None

    def _with_state(self, instance: Instance, args: list[Value], kwargs: dict[str, Value], call: cst.Call) -> Instance:
        """The instance a constructor call made, with the arguments it binds known statically
        (kept only here, for instances stored on a module or on `self`: instances that differ
        by their arguments are followed one by one, too costly for every construction)."""
        init = self.find_method(instance.cls, "__init__")
        pairs = constructor_fields(instance.cls, init.definition if init is not None else None, args, kwargs)
        return replace(instance, state=constructor_state(pairs, call))

    def constructed_attribute(self, instance: Instance, attr: str) -> Value | None:
        """`self.attr` of an instance whose constructor arguments are partly known
        (`instance.state`): what its `__init__` stores there (every store, joined), when a store
        reads a parameter given a static argument and every value is static (a string, a dict of
        class paths, a class); None otherwise (the class-wide view of `instance_attribute`
        applies). A parameter given an argument the analysis cannot tell is unknown, one not
        given takes its default (unless the call passed `*args` or `**kwargs`)."""
        init = self.find_method(instance.cls, "__init__")
        if init is None or not isinstance(init.node, cst.FunctionDef):
            return None
        stored = _stored_on_self(init.node, attr)
        known = {name for name, value in instance.state if keyed.static(value)}
        key = (id(init.node), attr)
        if not any(known.intersection(used_names(value)) for value in stored) or key in self._open_aliases:
            return None  # not computed from the known arguments, or read while computed (`self.x = f(self.x)`)
        env: dict[str, Value] = dict(instance.state)
        frame = Frame(init.module, env, emit=False, class_ref=init.owner)
        names = parameter_names(init.node)
        if names:
            env[names[0]] = instance
        params = init.node.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.name.value not in env:
                given = STARRED in env or param.default is None
                env[param.name.value] = (Unknown(param.name.value) if given
                                         else self.eval(param.default, frame.child(env={})))
        self._open_aliases.add(key)
        try:
            value = join(*(self.eval(expression, frame) for expression in stored))
        finally:
            self._open_aliases.discard(key)
        return value if all(keyed.static(option) for option in alternatives(value)) else None

    def resolve_import(self, qualname: str, hops: int = 0) -> Value:
        """The value an imported dotted name refers to: a project function, class or module, or
        a library module reference; a name a package re-exports with `from .m import *` is
        looked up in those modules (a few hops at most)."""
        root = qualname.split(".")[0]
        if root in ("torch", "jax", "numpy", "optax", "flax", "transformers", "math", "functools", "typing", "einops", "equinox", "chex", "mlx"):
            return ModuleRef(qualname)
        module, rest = self.index.resolve(qualname)
        if module is None:
            return ModuleRef(qualname)
        if not rest:
            return ModuleRef(f"project:{module.name}")
        head = rest.split(".")[0]
        if head in module.functions:
            return FunctionRef(head, module.functions.function(head), module)
        if head in module.classes:
            return ClassRef(head, module.classes[head], module)
        if head in module.imports and module.imports[head] != qualname:
            return self.resolve_import(module.imports[head], hops + 1)
        constant = module.constants.get(head) if head == rest and head in module.constants else None
        method = self.class_attribute_alias(constant, module) if constant is not None else None
        if method is None and isinstance(constant, cst.Call):
            method = self.module_instance(constant, module)  # `from pkg.losses import REGISTRY`
        if method is not None:
            return method
        if hops < 4:
            for star in module.star_imports:
                found = self.resolve_import(f"{star}.{rest}", hops + 1)
                if not isinstance(found, ModuleRef):
                    return found
        return ModuleRef(qualname)


def stem(expr: tm.Term) -> str:
    """The name an opaque value was made from (`t__12` -> `t`)."""
    if expr.is_Symbol:
        return expr.name.split("__")[0]
    # a compound value (`2*t__3`, `t__3 + t__4`) is named after its symbol when it has one, and
    # after nothing otherwise: printing it is slow (floats, large normalisers) and its text
    # names no single value
    symbols = symbols_of(expr)
    return next(iter(symbols)).name.split("__")[0] if len(symbols) == 1 else ""


def _super_init_call(line: cst.CSTNode) -> cst.Call | None:
    """The `super().__init__(...)` call a constructor's statement line makes, if it is one."""
    if not isinstance(line, cst.SimpleStatementLine) or not isinstance(line.body[0], cst.Expr):
        return None
    call = line.body[0].value
    if (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "__init__"
            and isinstance(call.func.value, cst.Call) and dotted_name(call.func.value.func) == "super"):
        return call
    return None


def _stored_on_self(method: cst.FunctionDef | None, attr: str) -> list[cst.BaseExpression]:
    """The values a method's own statements store as `self.attr = value`, in order, also inside
    its `if`, `with`, `try` and loop blocks (a store made under a condition: `if cfg.use_kl:
    self.penalty = ...`); not inside nested definitions."""
    if method is None or not isinstance(method.body, cst.IndentedBlock):
        return []
    return [small.value for line in own_statement_lines(method.body) for small in line.body
            if isinstance(small, cst.Assign) and any(dotted_name(t.target) == f"self.{attr}" for t in small.targets)]


def _stored_parameter(init: cst.FunctionDef, attr: str) -> str | None:
    """The parameter of a constructor it stores as `self.attr = parameter`, if any."""
    names = set(parameter_names(init))
    return next((value.value for value in _stored_on_self(init, attr)
                 if isinstance(value, cst.Name) and value.value in names), None)


def _argument_for(call: cst.Call, init: cst.FunctionDef, parameter: str) -> cst.BaseExpression | None:
    """The argument `super().__init__(...)` passes for the base constructor's `parameter`."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == parameter:
            return arg.value
    positional = parameter_names(init, keyword_only=False)[1:]
    index = positional.index(parameter) if parameter in positional else -1
    args = [arg for arg in call.args if arg.keyword is None]
    if 0 <= index < len(args) and not any(arg.star for arg in args[:index + 1]):
        return args[index].value
    return None
