"""The import graph of the `kllint` package: no cycles, and the analysis never depends on the rules.

Every import of a kllint module counts, wherever it is written (module level, inside a function,
under `if TYPE_CHECKING:`), relative or absolute: a lazy import hides a cycle from Python, not
from the design. `from kllint.x import y` is an edge to `kllint.x.y` when `y` is a submodule,
else to `kllint.x`.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "kllint"
PACKAGE = "kllint"


def module_names(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, not `__init__`)."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def imported_modules(name: str, modules: dict[str, Path]) -> set[str]:
    """The kllint modules that module `name` imports anywhere in its text."""
    tree = ast.parse(modules[name].read_text(encoding="utf-8"), filename=str(modules[name]))
    package = name if _is_package(name, modules) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _closest_module(alias.name, modules)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(node, package)
            package_read = _closest_module(base, modules)
            if package_read is not None:
                found.add(package_read)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    found.add(submodule)
    found.discard(name)
    return found


def _resolve_from(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _closest_module(dotted: str, modules: dict[str, Path]) -> str | None:
    """`kllint.a.b` itself if it is a module, else its closest enclosing kllint module."""
    parts = dotted.split(".")
    while parts and parts[0] == PACKAGE:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    """Module -> the kllint modules it imports."""
    modules = module_names(root)
    return {name: imported_modules(name, modules) for name in modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(start: str) -> None:
        # iterative Tarjan: (node, iterator over its successors)
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(components)


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in members)
    return "{" + ", ".join(component) + "}: " + "; ".join(edges)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    # a miniature package: absolute, relative, function-level, TYPE_CHECKING and
    # `from package import submodule` imports are all edges, and make the cycles they close
    package = tmp_path / "kllint"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .leaf import thing\n")
    (package / "sub" / "leaf.py").write_text("def thing():\n    from kllint import top\n")
    (package / "top.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kllint.other import name\n")
    (package / "other.py").write_text("import kllint.sub.leaf.thing\nfrom kllint.sub import leaf\n")
    graph = import_graph(package)
    assert graph["kllint.sub"] == {"kllint.sub.leaf"}
    assert graph["kllint.sub.leaf"] == {"kllint", "kllint.top"}
    assert graph["kllint.top"] == {"kllint.other"}
    assert graph["kllint.other"] == {"kllint.sub.leaf", "kllint.sub"}
    assert cycles(graph) == [["kllint.other", "kllint.sub", "kllint.sub.leaf", "kllint.top"]]


def analysis_imports_of_rules(graph: dict[str, set[str]]) -> list[str]:
    """`A imports B` for every module A of `kllint.analysis` importing a module B of `kllint.rules`."""
    def inside(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    return sorted(f"{name} imports {target}" for name, targets in graph.items() if inside(name, f"{PACKAGE}.analysis")
                  for target in targets if inside(target, f"{PACKAGE}.rules"))


def test_an_analysis_module_importing_a_rule_module_is_found() -> None:
    graph = {"kllint.analysis.verdicts": {"kllint.rules.api", "kllint.diagnostics"}, "kllint.rules.api": set(),
             "kllint.analyser": {"kllint.rules"}}
    assert analysis_imports_of_rules(graph) == ["kllint.analysis.verdicts imports kllint.rules.api"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_describe(component, graph) for component in found)


def test_the_analysis_does_not_import_the_rules() -> None:
    offending = analysis_imports_of_rules(import_graph())
    assert not offending, "the analysis observes, the rules judge:\n" + "\n".join(offending)


def _private_imports(name: str, modules: dict[str, Path]) -> list[str]:
    """`from kllint.x import _y` lines of module `name` (a private name of another module)."""
    tree = ast.parse(modules[name].read_text(encoding="utf-8"), filename=str(modules[name]))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == PACKAGE):
            found += [f"{name}:{node.lineno} imports {alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another():
    """A name with a leading underscore is private to its module: the layout says so (issue 15)."""
    modules = module_names()
    offenders = [line for name in sorted(modules) for line in _private_imports(name, modules)]
    assert offenders == [], "\n".join(offenders)
