"""Registries filled by decorators: `@register_loss("k3")` above a definition stores it in a
module-level dict that a configured key later reads (`LOSSES[cfg.loss_mode]`).

Read from the module's `ast` outline, without running anything: a *registering decorator* is a
top-level function of the module that assigns one of its (or its inner decorator's) parameters
into a module-level dict, `REGISTRY[key] = func`. The key is a parameter of the decorator
factory (`register("k3")`), a loop over one (`for name in names`, `for name in settings.names`)
or the definition's own name (`func.__name__`). Each top-level definition of the module that
such a decorator decorates is a registration; the keys come from the literal arguments of the
decorator call, and a key the outline cannot read is the definition's name.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class KeySource:
    """Where a registering decorator takes the key from: `kind` is `literal` (`value`), `arg`
    (the factory's parameter `param` at `position`, or its attribute `attr`) or `name` (the
    decorated definition's `__name__`)."""

    kind: str
    value: str = ""
    param: str = ""
    position: int = -1
    attr: str = ""


def registrations(outline: ast.Module) -> dict[str, tuple[tuple[str, str], ...]]:
    """`registry name -> ((key, definition name), ...)` for the dicts of the module that its
    own decorated top-level functions and classes fill."""
    globals_ = _module_names(outline)
    decorators = {}
    for statement in outline.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = _registering(statement, globals_)
            if found is not None:
                decorators[statement.name] = found
    if not decorators:
        return {}
    found: dict[str, list[tuple[str, str]]] = {}
    for statement in outline.body:
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for decorator in statement.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            head = call.func if call is not None else decorator
            if not isinstance(head, ast.Name) or head.id not in decorators:
                continue
            registry, source = decorators[head.id]
            for key in _keys(source, call, statement.name):
                found.setdefault(registry, []).append((key, statement.name))
    return {name: tuple(items) for name, items in found.items()}


def _module_names(outline: ast.Module) -> set[str]:
    names = set()
    for statement in outline.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else (
            [statement.target] if isinstance(statement, ast.AnnAssign) else [])
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _registering(factory: ast.FunctionDef | ast.AsyncFunctionDef, globals_: set[str]) -> tuple[str, KeySource] | None:
    """(registry, key source) when `factory` stores a parameter into a module-level dict."""
    if not any(isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
               and any(_stores_into(target, globals_) for target in node.targets) for node in ast.walk(factory)):
        return None  # one walk settles most functions: they store nothing into a module-level dict
    outer = [a.arg for a in factory.args.posonlyargs + factory.args.args]
    outer_all = set(outer) | {a.arg for a in factory.args.kwonlyargs}
    if factory.args.vararg is not None:
        outer_all.add(factory.args.vararg.arg)
    inner = [n for n in ast.walk(factory) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not factory]
    # a factory's inner decorator receives the definition; a plain decorator receives it itself
    for function in inner or [factory]:
        params = {a.arg for a in (function.args.posonlyargs + function.args.args)[:1]}
        loops = {}
        for node in ast.walk(function):
            if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                loops[node.target.id] = node.iter
        for node in ast.walk(function):
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Name) or node.value.id not in params:
                continue
            for target in node.targets:
                if _stores_into(target, globals_):
                    source = _key_source(target.slice, node.value.id, outer, outer_all, loops)
                    if source is not None:
                        return target.value.id, source
    return None


def _stores_into(target: ast.expr, globals_: set[str]) -> bool:
    """Whether an assignment target is an item of a module-level name (`REGISTRY[key]`)."""
    return isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in globals_


def _key_source(key: ast.expr, func_param: str, outer: list[str], outer_all: set[str],
                loops: dict[str, ast.expr]) -> KeySource | None:
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return KeySource("literal", value=key.value)
    if (isinstance(key, ast.Attribute) and key.attr == "__name__" and isinstance(key.value, ast.Name)
            and key.value.id == func_param):
        return KeySource("name")
    if isinstance(key, ast.Name):
        source = loops.get(key.id)
        if source is None and key.id in outer_all:
            return KeySource("arg", param=key.id, position=outer.index(key.id) if key.id in outer else -1)
        if isinstance(source, ast.Name) and source.id in outer_all:
            return KeySource("arg", param=source.id, position=outer.index(source.id) if source.id in outer else -1)
        if (isinstance(source, ast.Attribute) and isinstance(source.value, ast.Name)
                and source.value.id in outer_all):
            param = source.value.id
            return KeySource("arg", param=param, position=outer.index(param) if param in outer else -1,
                             attr=source.attr)
    return None


def _keys(source: KeySource, call: ast.Call | None, definition: str) -> list[str]:
    """The keys one decorator application registers `definition` under."""
    if source.kind == "literal":
        return [source.value]
    if source.kind == "name" or call is None:
        return [definition]
    argument = None
    if 0 <= source.position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        argument = call.args[source.position]
    argument = next((k.value for k in call.keywords if k.arg == source.param), argument)
    if argument is None and source.position < 0 and call.args:  # `register(*names)`
        argument = ast.Tuple(elts=list(call.args))
    if argument is not None and source.attr:
        argument = _attribute_of(argument, source.attr)
    keys = _strings(argument)
    return keys or [definition]


def _attribute_of(value: ast.expr, attr: str) -> ast.expr | None:
    """`Settings(names=[...])` -> the `names` argument of the constructor call."""
    if isinstance(value, ast.Call):
        return next((k.value for k in value.keywords if k.arg == attr), None)
    return None


def _strings(value: ast.expr | None) -> list[str]:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return [value.value]
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []
