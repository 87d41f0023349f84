"""Attributes and subscripts: what `base.attr` and `base[key]` are for each kind of value
(modules, instances, classes, `super()`, tensors, networks, dictionaries, configuration values),
and method lookup through a class's bases."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import libcst as cst

from kllint.analysis import frameworks as fw
from kllint.analysis import keyed
from kllint.analysis import roles
from kllint.analysis.callables import MAPPING_VIEWS, STRING_METHODS, string_item
from kllint.analysis.callables import BoundMethod as _BoundMethod
from kllint.analysis.callables import UnresolvedAttribute as _Attr
from kllint.analysis.fields import KEY_FIELD
from kllint.analysis.interpret.frames import CONFIG_TOKENS, ROLE_SYMBOL, Frame
from kllint.analysis.interpret.names import stem
from kllint.analysis.definitions import LazyFunction, class_method
from kllint.analysis.engines import (
    FLAX_MODULES, INHERITED_METHODS, FlaxApply, inherited_library_method, remote_attribute,
)
from kllint.analysis.module import dotted_name
from kllint.analysis.symbolic import LP
from kllint.analysis.values import (
    ClassRef, Condition, ConfigValue, FunctionRef, Instance, Keyed, Literal, Mapping, Model, ModuleRef, Partial,
    Sequence, Tensor, Unknown, Value, alternatives, join,
)
from kllint.analysis.strings import read_keys

METHOD_VERBS = frozenset({"compute", "get", "calc", "calculate", "build", "make", "init", "load", "run", "update",
                          "forward", "generate", "create", "prepare", "apply", "set", "save", "fetch", "sample"})


class Attributes:
    """Reads attributes and subscripts of values (a mixin of the interpreter)."""

    def eval_Attribute(self, node: cst.Attribute, frame: Frame) -> Value:
        base = self.eval(node.value, frame)
        attr = node.attr.value
        options = []
        for option in alternatives(base):
            options.append(self.attribute(option, attr, node, frame))
        return join(*options)

    def attribute(self, base: Value, attr: str, node: cst.CSTNode, frame: Frame) -> Value:
        if isinstance(base, Keyed):  # a method of the instance a run-time key picked: under its condition
            return keyed.lifted(lambda inner: self.attribute(inner, attr, node, frame), base)
        if isinstance(base, ModuleRef):
            if base.qualname.startswith("project:"):
                module = self.index.load(base.qualname[len("project:"):])
                if module is not None:
                    if attr in module.functions or attr in module.classes or attr in module.imports:
                        return self.global_value(attr, module, frame)
                    constant = module.constants.get(attr) if attr in module.constants else None
                    alias = self.class_attribute_alias(constant, module) if constant is not None else None
                    return alias if alias is not None else ModuleRef(f"{base.qualname}.{attr}")
            return self.resolve_import(f"{base.qualname}.{attr}") if not base.qualname.startswith("project:") else ModuleRef(f"{base.qualname}.{attr}")
        if isinstance(base, Instance):
            method = self.find_method(base.cls, attr)
            if method is not None:
                if base.state and isinstance(method.bound_self, Instance):
                    method = replace(method, bound_self=base)  # its `self` knows its constructor's arguments
                if is_property(method):  # `self.beta` of a `@property`: the getter's value
                    return self.call_function(method, [], {}, node, frame)
                return method
            if attr == "apply" and self.derives_from(base.cls, FLAX_MODULES):
                return FlaxApply(base)  # `module.apply(variables, x)` runs the module's `__call__`
            constructed = self.constructed_attribute(base, attr) if base.state else None
            if constructed is not None:
                return constructed
            assigned = self.instance_attribute(base.cls, attr)
            if assigned is not None and not isinstance(assigned, Unknown) and not _wraps_the_reference(assigned, attr):
                return assigned
            if roles.is_backbone_attribute(attr):
                return Unknown(attr)  # an own sub-network (HF `PreTrainedModel.base_model`), no role by name
            inherited = inherited_library_method(self.library_bases(base.cls), attr) if attr in INHERITED_METHODS else None
            if inherited is not None:
                return inherited  # `self.manual_backward` of a LightningModule
            stored = self.stored_field(attr)
            if stored is not None:
                return stored
            return self.value_from_name(attr, self.anchor(node, frame), frame, detached_source=False) if not roles.is_kl_name(attr) else self.algebra.opaque(attr)
        if isinstance(base, ClassRef):
            method = self.find_method(base, attr)
            if method is None and attr == "apply":
                method = self.autograd_apply(base)
            if method is None:
                method = remote_attribute(base, attr)  # a Ray actor class: `Actor.remote(...)`
            return method if method is not None else Unknown(attr)
        if isinstance(base, (FunctionRef, Partial)):
            remote = remote_attribute(base, attr)  # a Ray remote function or actor method: `f.remote(...)`
            if remote is not None:
                return remote
        if isinstance(base, Super):
            found = self.super_method(base, attr)
            return self.call_function(found, [], {}, node, frame) if isinstance(found, FunctionRef) and is_property(found) else found
        if isinstance(base, Tensor):
            if attr in ("data",):
                return self.algebra.detach(base)
            if attr in ("T", "mT", "real", "logits", "log_probs", "logprobs") or (attr == "values" and base.kind == "vocab_max"):
                return base
            if attr == "indices" and base.kind == "vocab_max":
                return self.algebra.opaque(attr)
            if attr in ("shape", "dtype", "device", "ndim", "grad", "requires_grad", "is_cuda"):
                return Unknown(attr)
            if self.algebra.has_roles(base.expr) or base.kind or attr in fw.REDUCTIONS or attr in fw.IDENTITY:
                return _BoundMethod(base, attr)
            # an attribute of an opaque object (`batch.old_log_probs`, `self.accelerator.backward`);
            # `manager.compute_logprobs` is a method, not a tensor
            if roles.tokens(attr)[:1] and roles.tokens(attr)[0] in METHOD_VERBS:
                return _Attr(stem(base.expr), attr)
            stored = self.stored_field(attr)
            if stored is not None:
                return stored
            named = (self.role_from_name(attr, detached_source=not roles.is_output_name(stem(base.expr)))
                     if not roles.is_backbone_attribute(attr) else None)
            if named is None:
                return _Attr(stem(base.expr), attr)
            self.note_role(self.anchor(node, frame), frame, named, f"name `{attr}`")
            return self.live_read(named, node, frame)
        if isinstance(base, Model):
            if attr in ("logits", "module", "model", "base_model", "pretrained_model", "policy", "lm_head"):
                return base if attr != "logits" else Tensor(ROLE_SYMBOL.get(base.role, LP), space="logits")
            return _BoundMethod(base, attr)
        if isinstance(base, Mapping):
            item = base.get(attr)
            if item is None and attr in MAPPING_VIEWS:
                return _BoundMethod(base, attr)  # `losses.values()`
            return item if item is not None else Unknown(attr)
        if isinstance(base, Literal) and isinstance(base.value, str) and attr in STRING_METHODS:
            return _BoundMethod(base, attr)  # `mode.endswith("+")` of a known option
        if isinstance(base, ConfigValue):
            default = base.default
            source = dotted_name(node) or (f"{base.source}.{attr}" if base.source else attr)
            if isinstance(default, Mapping) and default.get(attr) is not None:
                inner = default.get(attr)
                return ConfigValue(attr, inner.value if isinstance(inner, Literal) else inner, source)
            field = self.tensor_field(attr, base.name, node, frame)
            if field is not None:
                return field
            return ConfigValue(attr, source=source)
        if isinstance(base, Unknown):
            if any(t in CONFIG_TOKENS or t == "params" for t in roles.tokens(base.name)):
                field = self.tensor_field(attr, base.name, node, frame)
                return field if field is not None else ConfigValue(attr, source=dotted_name(node) or attr)
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

    def base_values(self, cls: ClassRef) -> list[Value]:
        """The class's bases as the module defining it resolves them (a project class is a
        `ClassRef`, a library class a `ModuleRef` of its qualified name)."""
        return [self.eval(base.value, Frame(cls.module, {}, emit=False)) for base in cls.node.bases]

    def project_bases(self, cls: ClassRef) -> list[ClassRef]:
        """The class's bases defined in the project, in order."""
        return [base for base in self.base_values(cls) if isinstance(base, ClassRef)]

    def super_method(self, sup: "Super", name: str) -> Value:
        """`super().name`: the method of a base class of the defining class, bound to the instance."""
        for base in self.project_bases(sup.cls):
            found = self.find_method(base, name)
            if found is not None:
                return replace(found, bound_self=sup.instance) if isinstance(found.bound_self, Instance) else found
        return Unknown(name)

    def find_method(self, cls: ClassRef, name: str, seen: int = 0) -> FunctionRef | None:
        """The method `name` of `cls`, defined on it or inherited from a project base. A method
        found on a base is still bound to `cls` (an instance of `cls`, or `cls` itself for a
        classmethod): `self.hook()` inside an inherited method dispatches on the receiver's own
        class, so a subclass's override of the hook is the one that runs (template method)."""
        return self._method_of(cls, name, cls, seen)

    def _method_of(self, cls: ClassRef, name: str, receiver: ClassRef, seen: int) -> FunctionRef | None:
        definition = class_method(cls.node, name)  # not parsed: only a call that is followed parses it
        if definition is not None:
            kind = _method_kind(definition)
            bound = None if kind == "staticmethod" else receiver if kind == "classmethod" else Instance(receiver)
            return FunctionRef(f"{cls.name}.{name}", definition, cls.module, bound_self=bound, class_name=cls.name,
                               owner=cls)
        if seen > 4:
            return None
        for base in self.project_bases(cls):
            found = self._method_of(base, name, receiver, seen + 1)
            if found is not None:
                return found
        return None

    def derives_from(self, cls: ClassRef, qualnames: frozenset[str], seen: int = 0) -> bool:
        """Whether the class has, among its bases resolved through the imports of the modules
        that define them (project classes followed up to five levels), a library class of
        `qualnames`."""
        for base in self.base_values(cls):
            if isinstance(base, ModuleRef) and base.qualname in qualnames:
                return True
            if isinstance(base, ClassRef) and seen < 4 and self.derives_from(base, qualnames, seen + 1):
                return True
        return False

    def autograd_apply(self, cls: ClassRef) -> Value | None:
        """`Cls.apply` of a project subclass of `torch.autograd.Function`: calling it runs the
        static `forward` with the arguments after a context the analysis knows nothing about
        (`ctx`; none when the class splits it off into `setup_context`), in the caller's grad
        state. None for another class, or one without a `forward`."""
        if not self.derives_from(cls, fw.AUTOGRAD_FUNCTIONS):
            return None
        forward = self.find_method(cls, "forward")
        if forward is None:
            return None
        forward = replace(forward, bound_self=None)  # `Function.apply` passes the context, not an instance
        if self.find_method(cls, "setup_context") is not None:
            return forward
        return Partial(forward, (Unknown("ctx"),))

    def eval_Subscript(self, node: cst.Subscript, frame: Frame) -> Value:
        base = self.eval(node.value, frame)
        key: Value = Unknown()
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = self.eval(node.slice[0].slice.value, frame)
        keys = read_keys(key)  # a key chosen at run time: each literal choice, a pattern by its text
        options = []
        for option in alternatives(base):
            if keys is None or isinstance(option, (Mapping, Sequence, ConfigValue, Keyed)):
                options.append(self.subscript(option, key, node, frame))
            else:
                options.extend(self.subscript(option, each, node, frame) for each in keys)
        return join(*options)

    def subscript(self, base: Value, key: Value, node: cst.Subscript, frame: Frame) -> Value:
        if isinstance(base, Keyed):
            return keyed.lifted(lambda inner: self.subscript(inner, key, node, frame), base)
        if isinstance(base, Literal) and isinstance(base.value, str):
            return string_item(base.value, node.slice, key)
        if isinstance(base, Tensor):
            return self.tensor_item(base, key, node, frame)
        if isinstance(base, Model):
            return self._network_item(base, key)
        return self._container_item(base, key, node, frame)

    def _network_item(self, base: Model, key: Value) -> Value:
        """`net[key]`: the network itself (`models[0]`, a module dict), except for a string key
        that names a tensor (the container is a forward's results named after the network,
        `model_output["log_probs"]`): log-probs or logits with the network's role, a mask."""
        if not (isinstance(key, Literal) and isinstance(key.value, str)):
            return base
        named = self.role_from_name(key.value)
        if isinstance(named, Tensor) and named.kind == "mask":
            return named
        if isinstance(named, Tensor):
            return Tensor(ROLE_SYMBOL.get(base.role, LP), space=named.space)
        return base

    def tensor_item(self, base: Tensor, key: Value, node: cst.CSTNode, frame: Frame) -> Value:
        """`base[key]` or `base.get(key)` of a tensor-like value: an entry named by a string key of
        an output container without roles (`out["ref_logps"]`) is the tensor that name gives;
        an entry of a network's output (`out["log_probs"]`, `out.get("logits")`) keeps its role."""
        if isinstance(key, Literal) and isinstance(key.value, str) and not self.algebra.has_roles(base.expr):
            stored = self.fields.read(KEY_FIELD + key.value)
            if stored is not None:
                return stored
            keyed = self.value_from_name(key.value, self.anchor(node, frame), frame,
                                         detached_source=not roles.is_output_name(stem(base.expr)))
            if not isinstance(keyed, Tensor) or self.algebra.has_roles(keyed.expr) or keyed.kind:
                return self.live_read(keyed, node, frame)
        if base.kind == "vocab_max" and isinstance(key, Literal) and key.value == 1:
            return self.algebra.opaque("indices")  # `(values, indices)` of `x.max(-1)`
        return base

    def _container_item(self, base: Value, key: Value, node: cst.Subscript, frame: Frame) -> Value:
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
            if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
                return _cut(base, node.slice[0].slice, node, frame)
            return ConfigValue(base.name, source=base.source)
        if isinstance(base, (Unknown, _Attr)) and isinstance(key, Literal) and isinstance(key.value, str):
            owner = base.name if isinstance(base, Unknown) else base.attr
            if any(t in ("config", "cfg", "args", "conf", "hparams", "kwargs", "options") for t in roles.tokens(owner or "")):
                field = self.tensor_field(key.value, owner or "", node, frame)
                return field if field is not None else ConfigValue(key.value, source=frame.module.source(node).strip())
            stored = self.fields.read(KEY_FIELD + key.value)
            if stored is not None:
                return stored  # stored under this key by the code analysed
            # batch / inputs dictionaries: tensors named by their key, without gradient
            return self.live_read(self.value_from_name(key.value, self.anchor(node, frame), frame,
                                                       detached_source=not roles.is_output_name(owner or "")),
                                  node, frame)
        return Unknown()

    def keyed_entries(self, mapping: Mapping, key: Value, key_node: cst.BaseExpression | None) -> Value:
        """`mapping[key]` for a key known only at run time: every entry, one that is an object
        rather than a tensor (a callable, a class, an instance, a string naming a class) under
        the condition that the key selects it (explored option by option like a mode string)."""
        config = next((o for o in alternatives(key) if isinstance(o, ConfigValue)), None)
        tested = (dotted_name(key_node) if key_node is not None else None) or "key"
        name = (config.source or config.name) if config else tested
        default = config.default if config and isinstance(config.default, str) else None
        keys: dict[Value, list[str]] = {}  # one option per callable, under all the keys that pick it
        for entry, value in mapping.items:
            for option in alternatives(value):
                keys.setdefault(option, []).append(entry)
        return join(*(Keyed(o, Condition(name, tuple(entries), False, default, tested, from_config=config is not None))
                      if keyed.static(o) else o for o, entries in keys.items()))


@dataclass(frozen=True)
class Super:
    """`super()` inside a method of `cls`, for `instance`."""

    cls: ClassRef
    instance: Any


def decorator_names(definition: cst.FunctionDef | cst.Lambda | LazyFunction) -> list[str | None]:
    """The dotted name of each decorator of a definition (None for one that is not a dotted
    name); a `LazyFunction` answers from its `ast` outline, unparsed."""
    if isinstance(definition, LazyFunction):
        return definition.decorator_names()
    if isinstance(definition, cst.FunctionDef):
        return [dotted_name(decorator.decorator) for decorator in definition.decorators]
    return []


def _method_kind(definition: cst.FunctionDef | LazyFunction) -> str | None:
    """`staticmethod` or `classmethod` for a method so decorated (its first parameter is not the
    instance), else None."""
    return next((name for name in decorator_names(definition) if name in ("staticmethod", "classmethod")), None)


PROPERTY_DECORATORS = frozenset({"property", "cached_property", "functools.cached_property",
                                 "abc.abstractproperty", "abstractproperty"})


def is_property(method: FunctionRef) -> bool:
    """A method decorated `@property` (or `@cached_property`): reading the attribute of an
    instance runs it and gives its result, it is not a bound method."""
    return any(name in PROPERTY_DECORATORS for name in decorator_names(method.definition))


def _cut(config: ConfigValue, cut: cst.Slice, node: cst.Subscript, frame: Frame) -> ConfigValue:
    """A slice of a configured string: `mode[:-1]` where the branch knows `mode` ends with a
    one-character suffix is `mode` without it (compared as `mode` with the suffix, see
    `ConfigValue.spelled`); any other slice is a value of its own, named as written."""
    name = config.source or config.name
    bound = cut.upper if cut.lower is None else cut.lower
    count = None
    if cut.step is None and (cut.lower is None) != (cut.upper is None):
        if isinstance(bound, cst.UnaryOperation) and isinstance(bound.operator, cst.Minus) \
                and isinstance(bound.expression, cst.Integer):
            count = -int(bound.expression.value)
        elif isinstance(bound, cst.Integer):
            count = int(bound.value)
    if count is not None and not (config.suffix or config.prefix):
        predicate = "endswith" if cut.lower is None else "startswith"
        for condition in frame.conditions:
            affix = condition.options[0] if condition.options else ""
            if condition.name == name and condition.predicate == predicate and not condition.negated \
                    and len(affix) == abs(count) and (count < 0) == (predicate == "endswith"):
                return replace(config, suffix=affix) if predicate == "endswith" else replace(config, prefix=affix)
    source = frame.module.source(node).strip()
    return ConfigValue(source, source=source)


def _wraps_the_reference(value: Value, attr: str) -> bool:
    """`self.ref_model = Wrapper(...)`: an instance of a project class stored under a name that
    gives the reference network's role. The project's network wrapper is the policy's too
    (`self.model = Wrapper(...)`), so following it would make the reference the policy: the
    name's role stands."""
    return roles.model_role(attr) == "reference" and all(isinstance(o, Instance) for o in alternatives(value))
