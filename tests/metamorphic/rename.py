"""Consistent renaming of local variables and of parameters, with libcst's scope analysis.

Only `Name` nodes that libcst resolves to a binding of the renamed variable change (its
assignments, its reads in the scope and in nested scopes that close over it, the `nonlocal`
statements naming it), so attributes (`x.ref_logp`), keys (`batch["ref_logp"]`), call keywords
(`f(ref_logp=...)`, except the ones `rename_parameters` rewrites on purpose), imports and names
in other scopes are untouched. Comments and line breaks are libcst's, hence kept.

A name is left alone where a rename could not be made consistent: bound by an import, a `def`
or a `class` in the scope, a parameter (for locals), a walrus target inside a comprehension
(libcst binds it in the comprehension; Python in the enclosing function), a `match` capture
(libcst does not record it), read inside an f-string debug field (`f"{x=}"` prints the name) or
read through a string annotation.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import (Assignment, ClassScope, ComprehensionScope, FunctionScope, MetadataWrapper,
                             ScopeProvider)


@dataclass
class Namer:
    """Neutral names `<prefix>1`, `<prefix>2`, ... that no identifier of the corpus already has.

    With `by_name`, the same old name always gets the same new name (parameters: callers'
    keywords and overriding methods stay consistent); otherwise each variable gets a fresh one."""

    prefix: str
    taken: set[str] = field(default_factory=set)
    by_name: bool = False
    _count: int = 0
    _given: dict[str, str] = field(default_factory=dict)
    asked: set[str] = field(default_factory=set)  # the old names renamed

    def __post_init__(self) -> None:
        while any(re.fullmatch(re.escape(self.prefix) + r"\d+", name) for name in self.taken):
            self.prefix += self.prefix[0]  # `v1` is taken: `vv1`, ...

    def new(self, old: str) -> str:
        self.asked.add(old)
        if self.by_name and old in self._given:
            return self._given[old]
        self._count += 1
        name = f"{self.prefix}{self._count}"
        if self.by_name:
            self._given[old] = name
        return name


def identifiers(source: str) -> set[str]:
    """Every identifier-like word of `source` (a superset of its names: safe for `Namer.taken`)."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))


# --- names that cannot be renamed consistently ------------------------------------------------------


class _Unrenamable(cst.CSTVisitor):
    """Names bound or read where libcst's scopes do not follow Python (see the module docstring)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._comprehensions = 0
        self._debug_fields = 0

    def _enter_comprehension(self, node: cst.CSTNode) -> None:
        self._comprehensions += 1

    def _leave_comprehension(self, node: cst.CSTNode) -> None:
        self._comprehensions -= 1

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _enter_comprehension
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _leave_comprehension

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if self._comprehensions and isinstance(node.target, cst.Name):
            self.names.add(node.target.value)

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self.names.add(node.name.value)

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self.names.add(node.name.value)

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        if node.rest is not None:
            self.names.add(node.rest.value)

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        if node.equal is not None:
            self._debug_fields += 1

    def leave_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        if node.equal is not None:
            self._debug_fields -= 1

    def visit_Name(self, node: cst.Name) -> None:
        if self._debug_fields:
            self.names.add(node.value)


# --- the rewrite ------------------------------------------------------------------------------------


class _Rewrite(cst.CSTTransformer):
    def __init__(self, names: dict[int, str], keywords: dict[int, str]) -> None:
        self.names = names        # id(Name node) -> new name
        self.keywords = keywords  # id(Arg node) -> new keyword

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = self.names.get(id(original))
        return updated.with_changes(value=new) if new else updated

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        new = self.keywords.get(id(original))
        if new and updated.keyword is not None:
            return updated.with_changes(keyword=updated.keyword.with_changes(value=new))
        return updated


@dataclass
class _Plan:
    names: dict[int, str] = field(default_factory=dict)
    keywords: dict[int, str] = field(default_factory=dict)
    renamed: dict[tuple[int, str], str] = field(default_factory=dict)  # (id(scope), old) -> new


@dataclass
class Prepared:
    """A parsed module with its scopes and the names not to rename: computed once, used by
    `parameters_by_callee` and `rename_parameters` alike."""

    wrapper: MetadataWrapper
    skip: set[str]
    scopes: list

    @classmethod
    def of(cls, source: str) -> "Prepared":
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
        skip = _Unrenamable()
        wrapper.module.visit(skip)
        return cls(wrapper, skip.names, _scopes(wrapper))


def _scopes(wrapper: MetadataWrapper) -> list:
    seen: dict[int, object] = {}
    for scope in wrapper.resolve(ScopeProvider).values():
        if scope is not None:
            seen.setdefault(id(scope), scope)
    return list(seen.values())


def _bindings(scope) -> dict[str, list]:
    grouped: dict[str, list] = defaultdict(list)
    for assignment in scope.assignments:
        grouped[assignment.name].append(assignment)
    return grouped


def _rename(plan: _Plan, scope, old: str, assignments: list, new: str) -> bool:
    """Plan `old` -> `new` for every binding and read of `old` in `scope`; False (nothing
    planned) when one of them is not a plain `Name` (a string annotation, say)."""
    nodes: list[cst.Name] = []
    for assignment in assignments:
        node = assignment.node
        nodes.append(node.name if isinstance(node, cst.Param) else node)
        nodes += [access.node for access in assignment.references]
    if not all(isinstance(node, cst.Name) and node.value == old for node in nodes):
        return False
    for node in nodes:
        plan.names[id(node)] = new
    plan.renamed[(id(scope), old)] = new
    return True


def _nonlocals(wrapper: MetadataWrapper, plan: _Plan) -> None:
    """`nonlocal x` statements follow the rename of the enclosing function's `x`."""
    scopes = wrapper.resolve(ScopeProvider)

    class Nonlocals(cst.CSTVisitor):
        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            for item in node.names:
                scope = scopes.get(node)
                scope = scope.parent if scope is not None else None
                while scope is not None and not isinstance(scope, cst.metadata.GlobalScope):
                    if isinstance(scope, FunctionScope) and item.name.value in scope.assignments:
                        new = plan.renamed.get((id(scope), item.name.value))
                        if new:
                            plan.names[id(item.name)] = new
                        break
                    scope = scope.parent

    wrapper.module.visit(Nonlocals())


def rename_locals(source: str, namer: Namer | None = None, only: set[str] | None = None) -> str:
    """`source` with every local variable of every function, lambda and comprehension renamed
    to a fresh neutral name (parameters, imports, nested `def`/`class` names untouched); with
    `only`, just the variables of those names (to find which rename loses a finding)."""
    prepared = Prepared.of(source)
    wrapper = prepared.wrapper
    namer = namer or Namer("v", identifiers(source))
    plan = _Plan()
    for scope in prepared.scopes:
        if not isinstance(scope, (FunctionScope, ComprehensionScope)):
            continue
        for old, assignments in sorted(_bindings(scope).items()):
            if old in prepared.skip or only is not None and old not in only or not all(type(a) is Assignment and isinstance(a.node, cst.Name)
                                            for a in assignments):
                continue
            _rename(plan, scope, old, assignments, namer.new(old))
    _nonlocals(wrapper, plan)
    return wrapper.module.visit(_Rewrite(plan.names, {})).code


# --- parameters ---------------------------------------------------------------------------------------


def _is_method(scope) -> bool:
    node = scope.node
    static = any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
                 for d in node.decorators)
    return isinstance(scope.parent, ClassScope) and not static


def _first_positional(node: cst.FunctionDef) -> str | None:
    params = [*node.params.posonly_params, *node.params.params]
    return params[0].name.value if params else None


def _renamed_parameters(scope, skip: set[str]) -> list[str]:
    """The parameters of the `def` of `scope` that `rename_parameters` renames."""
    if not isinstance(scope, FunctionScope) or not isinstance(scope.node, cst.FunctionDef):
        return []
    keep = _first_positional(scope.node) if _is_method(scope) else None
    names = []
    for old, assignments in _bindings(scope).items():
        if old == keep or old in skip or not any(isinstance(a.node, cst.Param) for a in assignments):
            continue
        if all(type(a) is Assignment and isinstance(a.node, (cst.Name, cst.Param)) for a in assignments):
            names.append(old)
    return sorted(names)


def parameters_by_callee(source: str | Prepared) -> dict[str, set[str]]:
    """Callee name -> the parameter names `rename_parameters` renames in a `def` of that name
    (a class's name stands for its `__init__`): which call keywords follow the rename."""
    prepared = source if isinstance(source, Prepared) else Prepared.of(source)
    found: dict[str, set[str]] = defaultdict(set)
    for scope in prepared.scopes:
        names = _renamed_parameters(scope, prepared.skip)
        if not names:
            continue
        found[scope.node.name.value].update(names)
        if scope.node.name.value == "__init__" and isinstance(scope.parent, ClassScope):
            found[scope.parent.node.name.value].update(names)
    return found


def _callee(call: cst.Call) -> str | None:
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


def _keyword_plan(wrapper: MetadataWrapper, plan: _Plan, callees: dict[str, set[str]], namer: Namer) -> None:
    """Keywords of calls to a renamed function (`f(k=...)`, `obj.f(k=...)`, `Cls(k=...)`,
    `partial(f, k=...)`) take the parameter's new name; calls of an instance (`self.loss_fn(k=...)`)
    follow the `forward` / `__call__` parameters of the corpus."""
    instance = callees.get("forward", set()) | callees.get("__call__", set())
    scopes = wrapper.resolve(ScopeProvider)

    def imported(node: cst.Call) -> bool:
        scope = scopes.get(node)
        found = scope[node.func.value] if scope is not None and isinstance(node.func, cst.Name) else ()
        return any(not isinstance(a, Assignment) or isinstance(a.node, (cst.Import, cst.ImportFrom))
                   for a in found)

    def instance_call(node: cst.Call) -> bool:  # `loss_fn(...)`, `self.loss_fn(...)`: not an import
        func = node.func
        if isinstance(func, cst.Attribute):
            return isinstance(func.value, cst.Name) and func.value.value == "self"
        return isinstance(func, cst.Name) and not imported(node)

    class Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            name = _callee(node)
            if name == "partial" and node.args and isinstance(node.args[0].value, (cst.Name, cst.Attribute)):
                name = _callee(cst.Call(func=node.args[0].value))
            if name == "cls" and isinstance(node.func, cst.Name):  # `cls(...)` in a classmethod
                name = "__init__"
            params = callees.get(name) if name in callees else instance if instance_call(node) else set()
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value in params:
                    plan.keywords[id(arg)] = namer.new(arg.keyword.value)

    wrapper.module.visit(Calls())


def rename_parameters(source: str | Prepared, namer: Namer, callees: dict[str, set[str]],
                      only: set[str] | None = None) -> str:
    """`source` with the parameters of every `def` renamed by `namer` (give it `by_name=True`
    and share it across a corpus), except the first of a method; call keywords follow for the
    callees in `callees` (`parameters_by_callee` of every file of the corpus, merged)."""
    prepared = source if isinstance(source, Prepared) else Prepared.of(source)
    wrapper = prepared.wrapper
    plan = _Plan()
    for scope in prepared.scopes:
        groups = _bindings(scope) if isinstance(scope, FunctionScope) else {}
        for old in _renamed_parameters(scope, prepared.skip):
            if only is None or old in only:
                _rename(plan, scope, old, groups[old], namer.new(old))
    _nonlocals(wrapper, plan)
    if only is not None:
        callees = {callee: names & only for callee, names in callees.items()}
    _keyword_plan(wrapper, plan, callees, namer)
    return wrapper.module.visit(_Rewrite(plan.names, plan.keywords)).code
