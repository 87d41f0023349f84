"""Which units of a module the analysis runs as entry points, read from `ast` outlines alone.

Every finding starts from a KL, a reference model or a KL API, so a unit (a top-level function
or a method of a top-level class) is run when it names one (its identifiers, as
`kllint.pipeline.prefilter.names_kl_or_reference` reads them, also through the imports and module
constants it uses), when it calls such a unit of its module, or when it uses a relevant unit of
another project module that it imports (the call it makes there, or an instance of it that its
class keeps on `self` and another method calls): the caller holds the values the callee is
given and the sink its result reaches. Each module's units are judged in their own module's
analysis, whichever file's analysis needs them, so every unit of the project runs once.
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from kllint.analysis.outline import FUNCTION_DEFS, dotted, identifiers

if TYPE_CHECKING:
    from kllint.analysis.index import ProjectIndex
    from kllint.analysis.module import ModuleInfo

Unit = tuple[str, str]  # (class name or "", function or method name)
MAX_MODULE_HOPS = 2  # a caller of a caller of a unit that names a KL, across modules


def definitions(module: "ModuleInfo") -> tuple[dict[Unit, frozenset[str]], dict[Unit, frozenset[str]]]:
    """The identifiers and the called names of each top-level function and method, in source
    order, from the outline."""
    functions = module.functions
    names = {("", name): functions.identifiers(name) for name in functions}
    calls = {("", name): functions.calls(name) for name in functions}
    for cls_node in module.classes.values():
        cls_name = cls_node.name.value
        names.update({(cls_name, name): cls_node.method_identifiers(name) for name in cls_node.method_names})
        calls.update({(cls_name, name): cls_node.method_calls(name) for name in cls_node.method_names})
    return names, calls


def names_kl_or_reference(module: "ModuleInfo", used: frozenset[str] | set[str], vocab: Any) -> bool:
    """Whether names of a unit (or statement) name a KL or the reference, directly, by the import
    they alias (`kl_div as divergence`) or by a module constant (`KEY = "ref_logps"`)."""
    from kllint.pipeline.prefilter import forwards_without_grad, names_matter

    imports, constants = module.imports, module.constants
    seen = set(used)
    seen.update(imports[name].rsplit(".", 1)[-1] for name in used if name in imports)
    for name in used:
        if name in constants:
            seen.update(constants.identifiers(name))
    return names_matter(seen, vocab) or forwards_without_grad(seen, identifiers(module.outline, import_parts=True))


def entry_units(module: "ModuleInfo", index: "ProjectIndex | None", vocab: Any) -> dict[Unit, None]:
    """The units of `module` run as entry points, in source order (memoised per module; a dict
    for membership tests)."""
    return _relevant(module, index, vocab, 0, set())


def _relevant(module: "ModuleInfo", index: "ProjectIndex | None", vocab: Any, hops: int,
              open_modules: set[int]) -> dict[Unit, None]:
    memo = module.__dict__.setdefault("_relevant_units", {})
    key = (_hashable(vocab), hops)
    known = memo.get(key)
    if known is not None:
        return known
    names, calls = definitions(module)
    chosen = {unit for unit, used in names.items() if names_kl_or_reference(module, used, vocab)}
    if chosen:
        # where a loss ends (`loss.backward()`, `backward(loss)`) whatever its variables are
        # called: in a module that holds a KL or the reference, the units that differentiate are
        # entry points too (their losses may read what others stored)
        chosen |= {unit for unit, made in calls.items() if "backward" in made}
    if index is not None and hops < MAX_MODULE_HOPS and id(module) not in open_modules:
        open_modules.add(id(module))
        try:
            chosen |= _callers_of_imported(module, index, vocab, hops, open_modules, names)
        finally:
            open_modules.discard(id(module))
    while True:  # the units calling a chosen one by name (`f(...)`, `self.f(...)`)
        called = {name for _, name in chosen}
        added = {unit for unit, made in calls.items() if unit not in chosen and not made.isdisjoint(called)}
        if not added:
            break
        chosen |= added
    result = {unit: None for unit in names if unit in chosen}
    memo[key] = result
    return result


def _callers_of_imported(module: "ModuleInfo", index: "ProjectIndex", vocab: Any, hops: int,
                         open_modules: set[int], names: dict[Unit, frozenset[str]]) -> set[Unit]:
    """The units of `module` using a relevant unit of a project module it imports: by the name
    the import binds (`from m import f`; `import m` then `m.f`), or through an attribute of
    `self` that a method of its class stores an instance of one in."""
    wanted: dict[str, frozenset[str]] = {}  # a name bound by an import -> the relevant names it gives (empty: itself)
    for alias, target in module.imports.items():
        found, rest = index.resolve(target)
        if found is None or found is module:
            continue
        relevant = {cls or name for cls, name in _relevant(found, index, vocab, hops + 1, open_modules)}
        if not relevant:
            continue
        if rest:
            if rest.split(".")[0] in relevant:
                wanted[alias] = frozenset()
        else:
            wanted[alias] = frozenset(relevant)
    if not wanted:
        return set()

    def uses(used: frozenset[str]) -> bool:
        return any(alias in used and (not attrs or not attrs.isdisjoint(used)) for alias, attrs in wanted.items())

    chosen = {unit for unit, used in names.items() if uses(used)}
    for cls_node in module.classes.values():  # `self.loss_fn = PenaltyLoss(...)`, then `self.loss_fn(...)`
        cls_name = cls_node.name.value
        kept = {attr for attr, value in _self_stores(cls_node) if uses(value)}
        if kept:
            chosen |= {(cls_name, name) for name in cls_node.method_names
                       if not kept.isdisjoint(cls_node.method_identifiers(name))}
    return chosen


def _self_stores(cls_node: Any) -> list[tuple[str, frozenset[str]]]:
    """Each `self.attr = value` in the class's methods: the attribute and the names the value uses."""
    found: list[tuple[str, frozenset[str]]] = []
    for statement in getattr(cls_node, "_node").body:
        if not isinstance(statement, FUNCTION_DEFS):
            continue
        for node in ast.walk(statement):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    name = dotted(target)
                    if name is not None and name.startswith("self.") and name.count(".") == 1:
                        used = frozenset(n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.value)
                                         if isinstance(n, (ast.Name, ast.Attribute)))
                        found.append((name[5:], used))
    return found


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return id(value)
    return value
