"""Where a forward pass is recorded by autograd: the framework a function computes with, and the
networks frozen by `requires_grad_(False)`.

KL503 (a reference forward with gradient tracking) is a PyTorch notion: JAX, Flax and MLX have
no tape — gradients come from `grad`-like transforms of the trained function, so a reference
forward outside them records nothing. The framework is decided from what the code imports and
uses, never from words in the file (a docstring or a comment mentioning `torch` says nothing).
"""
from __future__ import annotations

import ast
from enum import Enum
from typing import Any

import libcst as cst

from kllint.analysis.outline import called_names
from kllint.analysis.outline import dotted as _dotted
from kllint.analysis.module import ModuleInfo

# Top-level packages of array libraries without an autograd tape.
TAPELESS_PACKAGES = frozenset({"jax", "flax", "mlx", "mlx_lm", "equinox", "haiku", "optax", "chex", "tunix"})
TAPE_PACKAGES = frozenset({"torch"})

_functions: dict[int, tuple[Any, frozenset[str], frozenset[str]]] = {}  # id of a parsed definition -> (it, its names)
_MAX_FUNCTIONS = 4096


def _package(qualname: str) -> str:
    return qualname.split(".", 1)[0]


def module_framework(module: ModuleInfo) -> str | None:
    """`torch` when the module imports PyTorch and no tape-less array library, `tapeless` for the
    converse, `mixed` when it imports both, None when it imports neither (its own imports at
    top level, including guarded ones)."""
    cached = module.__dict__.get("_autograd_framework", False)
    if cached is not False:
        return cached
    packages = {_package(qualname) for qualname in module.imports.values()}
    torch, tapeless = bool(packages & TAPE_PACKAGES), bool(packages & TAPELESS_PACKAGES)
    kind = "mixed" if torch and tapeless else "torch" if torch else "tapeless" if tapeless else None
    module.__dict__["_autograd_framework"] = kind
    return kind


def _uses(root: cst.CSTNode) -> tuple[frozenset[str], frozenset[str]]:
    """The plain names a definition's code uses and the top-level packages it imports in its own
    body (`import mlx.core as mx` inside a function); cached per parsed definition."""
    cached = _functions.get(id(root))
    if cached is not None and cached[0] is root:
        return cached[1], cached[2]
    names: set[str] = set()
    packages: set[str] = set()
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            names.add(node.value)
        elif isinstance(node, cst.Import):
            packages.update(_EMPTY.code_for_node(alias.name).split(".", 1)[0] for alias in node.names)
            continue
        elif isinstance(node, cst.ImportFrom):
            if node.module is not None and not node.relative:
                packages.add(_EMPTY.code_for_node(node.module).split(".", 1)[0])
            continue
        stack.extend(node.children)
    if len(_functions) >= _MAX_FUNCTIONS:
        _functions.clear()
    _functions[id(root)] = (root, frozenset(names), frozenset(packages))
    return frozenset(names), frozenset(packages)


_EMPTY = cst.Module(body=[])


class Framework(Enum):
    """The array framework a piece of code computes with."""

    TORCH = "torch"
    JAX = "jax"
    MLX = "mlx"


_FAMILIES = {"torch": Framework.TORCH, "mlx": Framework.MLX, "mlx_lm": Framework.MLX,
             **{package: Framework.JAX for package in ("jax", "flax", "optax", "chex", "equinox", "haiku", "tunix")}}


def _families(packages: set[str]) -> set[Framework]:
    return {_FAMILIES[p] for p in packages if p in _FAMILIES}


def framework_of(module: ModuleInfo, root: cst.CSTNode | None) -> Framework | None:
    """The framework code of `module` running in the definition `root` computes with: the only
    one the module imports, else the only one among the imported names the definition uses and
    the packages it imports itself; None when that does not single one out. Decided from
    imports and names in code, never from words in comments or strings."""
    families = _families({_package(qualname) for qualname in module.imports.values()})
    if len(families) == 1:
        return families.pop()
    if root is None:
        return None
    used, imported = _uses(root)
    packages = {_package(qualname) for name, qualname in module.imports.items() if name in used} | set(imported)
    families = _families(packages)
    return families.pop() if len(families) == 1 else None


def records_gradients(module: ModuleInfo, root: cst.CSTNode | None) -> bool:
    """Whether code of `module` running in the definition `root` computes with PyTorch (whose
    autograd records forwards): decided by the module's imports and, when it imports both
    PyTorch and a tape-less library (or neither), by the imported names the definition uses and
    the packages it imports itself. Code that names no framework at all is taken to be PyTorch."""
    kind = module_framework(module)
    if kind in ("torch", "tapeless") or root is None:
        return kind != "tapeless"
    used, imported = _uses(root)
    packages = {_package(qualname) for name, qualname in module.imports.items() if name in used} | imported
    if packages & TAPE_PACKAGES:
        return True
    return not packages & TAPELESS_PACKAGES


def _false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _freezes(call: ast.Call) -> ast.expr | None:
    """The expression `call` freezes: `X` of `X.requires_grad_(False)`."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "requires_grad_"):
        return None
    flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "requires_grad"), None)
    return func.value if flag is not None and _false(flag) else None


def _last_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def frozen_networks(module: ModuleInfo) -> frozenset[str]:
    """The last names of the networks a module freezes, from its code: `ref_model` of
    `self.ref_model.requires_grad_(False)` and `reference` of `for p in reference.parameters():
    p.requires_grad = False` (or `p.requires_grad_(False)`)."""
    cached = module.__dict__.get("_autograd_frozen")
    if cached is not None:
        return cached
    names: set[str] = set()
    for node in module.outline_nodes(ast.Call, ast.For):
        if isinstance(node, ast.Call):
            target = _freezes(node)
            if target is not None:
                names.add(_last_name(target) or "")
        elif isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Attribute) \
                and node.iter.func.attr in ("parameters", "named_parameters"):
            loop = node.target.elts[-1] if isinstance(node.target, ast.Tuple) and node.target.elts else node.target
            if isinstance(loop, ast.Name) and _loop_freezes(node.body, loop.id):
                names.add(_last_name(node.iter.func.value) or "")
    names.discard("")
    result = frozenset(names)
    module.__dict__["_autograd_frozen"] = result
    return result


def _loop_freezes(body: list[ast.stmt], var: str) -> bool:
    """Whether a loop body sets `var.requires_grad = False` or calls `var.requires_grad_(False)`."""
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign) and _false(node.value) and any(
                    isinstance(t, ast.Attribute) and t.attr == "requires_grad" and isinstance(t.value, ast.Name)
                    and t.value.id == var for t in node.targets):
                return True
            if isinstance(node, ast.Call) and _freezes(node) is not None and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == var:
                return True
    return False


# -- contexts that turn gradient tracking off, read from the code around a call ----------------
_SET_GRAD = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"})
_CALLER_DEPTH = 3


def _qualified(node: ast.expr, module: ModuleInfo) -> str:
    dotted = _dotted(node) or ""
    head, _, rest = dotted.partition(".")
    base = module.imports.get(head)
    return dotted if base is None else (f"{base}.{rest}" if rest else base)


def _functions_of(module: ModuleInfo) -> list[ast.AST]:
    """Every function definition of the module (nested ones too), in `ast.walk` order."""
    return module.outline_nodes(ast.FunctionDef, ast.AsyncFunctionDef)


def _innermost_function(module: ModuleInfo, line: int) -> ast.AST | None:
    best = None
    for function in _functions_of(module):
        if function.lineno <= line <= (function.end_lineno or function.lineno):
            if best is None or function.lineno >= best.lineno:
                best = function
    return best


def _may_disable(expr: ast.expr | None, module: ModuleInfo, bindings: dict[str, list[ast.expr]], depth: int = 0) -> bool:
    """Whether a context-manager expression may turn gradient tracking off: `torch.no_grad()`,
    `torch.inference_mode()`, `torch.set_grad_enabled(<not True>)`, either branch of a
    conditional (`torch.no_grad() if frozen else nullcontext()`), or a local name bound to one."""
    from kllint.analysis.frameworks import NO_GRAD_CONTEXTS

    if expr is None or depth > 4:
        return False
    if isinstance(expr, ast.IfExp):
        return any(_may_disable(branch, module, bindings, depth + 1) for branch in (expr.body, expr.orelse))
    if isinstance(expr, ast.Name) and expr.id in bindings:
        return any(_may_disable(value, module, bindings, depth + 1) for value in bindings[expr.id])
    if isinstance(expr, ast.Call):
        qualified = _qualified(expr.func, module)
        if qualified in NO_GRAD_CONTEXTS:
            return True
        if qualified in _SET_GRAD:
            flag = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "mode"), None)
            return not (isinstance(flag, ast.Constant) and flag.value is True)
    return qualified_no_grad(expr, module)


def qualified_no_grad(expr: ast.expr, module: ModuleInfo) -> bool:
    """`torch.no_grad` / `torch.inference_mode` named without a call (a decorator)."""
    from kllint.analysis.frameworks import NO_GRAD_CONTEXTS

    return isinstance(expr, (ast.Name, ast.Attribute)) and _qualified(expr, module) in NO_GRAD_CONTEXTS


def _bindings(function: ast.AST) -> dict[str, list[ast.expr]]:
    found: dict[str, list[ast.expr]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
    return found


def without_grad_at(module: ModuleInfo, line: int) -> bool:
    """Whether the code at `line` may run with gradient tracking off by the code around it in its
    function: an enclosing `with` whose context may disable it (conditional and name-bound
    contexts included), or a preceding `torch.set_grad_enabled(False)` statement not undone
    before the line, or a `no_grad`-like decorator of the function."""
    function = _innermost_function(module, line)
    if function is None:
        return False
    if any(_may_disable(d, module, {}) for d in function.decorator_list):
        return True
    bindings = _bindings(function)
    last_switch: tuple[int, bool] | None = None
    for node in ast.walk(function):
        if isinstance(node, (ast.With, ast.AsyncWith)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            body_start = node.body[0].lineno if node.body else node.lineno
            if line >= body_start and any(_may_disable(item.context_expr, module, bindings) for item in node.items):
                return True
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.lineno < line \
                and _qualified(node.value.func, module) in _SET_GRAD:
            if last_switch is None or node.lineno > last_switch[0]:
                last_switch = (node.lineno, _may_disable(node.value, module, bindings))
    return bool(last_switch and last_switch[1])


def _name_uses(module: ModuleInfo) -> dict[str, list[tuple[int, bool, bool]]]:
    """Every use of a name in the module (a plain name or an attribute's last name): its line,
    whether it is the function of a call and whether it is an attribute; cached on the module."""
    cached = module.__dict__.get("_autograd_uses")
    if cached is None:
        cached = {}
        calls = {id(n.func) for n in module.outline_nodes(ast.Call)}
        for node in module.outline_nodes(ast.Name, ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            cached.setdefault(name, []).append((node.lineno, id(node) in calls, isinstance(node, ast.Attribute)))
        module.__dict__["_autograd_uses"] = cached
    return cached


def _called_anywhere(module: ModuleInfo) -> frozenset[str]:
    """The names the module calls anywhere (`kllint.analysis.outline.called_names`, from the walk
    the prefilter made of its definitions); cached on the module."""
    cached = module.__dict__.get("_autograd_called")
    if cached is None:
        cached = module.__dict__["_autograd_called"] = called_names(module.outline)
    return cached


def _classes_of_methods(module: ModuleInfo) -> dict[int, str]:
    """Id of each method definition of the module (a function defined in a class body) -> its class's name."""
    cached = module.__dict__.get("_autograd_methods")
    if cached is None:
        cached = {id(item): node.name for node in module.outline_nodes(ast.ClassDef)
                  for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
        module.__dict__["_autograd_methods"] = cached
    return cached


def callers_without_grad(module: ModuleInfo, name: str, method: bool = False, depth: int = 0, cls: str = "",
                         index: Any = None) -> bool:
    """Whether the function or method `name` is called and every use of the name, in `module`
    and (with the project `index`) in the project's other modules, is a call that runs with
    gradient tracking off: by its context (a `with`, a decorator of the calling function), or
    because every caller of the calling function runs without it. A use that is not a call (a
    callback) counts as unknown, and so does a public method that code outside the project may
    call: one of a class `cls` deriving from an outside base that may call it (a trainer's
    `compute_loss`; `kllint.analysis.project.bases`), or of an unnamed class."""
    if depth > _CALLER_DEPTH or name.startswith("__"):
        return False
    memo = module.__dict__.setdefault("_autograd_callers", {})
    key = (name, method, cls, index is not None)
    if key in memo:
        return memo[key]
    memo[key] = False  # while in progress (recursion)
    if method and not name.startswith("_") and (not cls or _framework_may_call(module, cls, name)):
        return False
    here = name in _called_anywhere(module)  # else no walk of the module: no caller here settles it
    if here and not _uses_without_grad(module, name, depth, index):
        result = False
    elif index is not None:
        # and every caller elsewhere; at least one call somewhere
        result = _elsewhere_without_grad(module, name, cls if method else "", depth, index, here)
    else:
        result = here
    memo[key] = result
    return result


def _framework_may_call(module: ModuleInfo, cls: str, name: str) -> bool:
    from kllint.analysis.project.bases import framework_may_call

    return framework_may_call(module.path, module.text, cls, name)


def _uses_without_grad(module: ModuleInfo, name: str, depth: int, index: Any, attributes: bool = False) -> bool:
    """Whether the module uses `name` (as an attribute only, with `attributes`: `obj.name`) and
    every use is a call running with gradients off."""
    uses = [use for use in _name_uses(module).get(name, []) if use[2] or not attributes]
    for line, is_call, _ in uses:
        if not is_call:
            return False
        if without_grad_at(module, line):
            continue
        caller = _innermost_function(module, line)
        if caller is None or caller.name == name:
            return False
        owner = _classes_of_methods(module).get(id(caller), "")
        if not callers_without_grad(module, caller.name, bool(owner), depth + 1, owner, index):
            return False
    return bool(uses)


def _elsewhere_without_grad(module: ModuleInfo, name: str, cls: str, depth: int, index: Any, called: bool) -> bool:
    """Whether the function `name` (or the method `name` of the class `cls`) is called, by
    `module` itself (`called`) or by a module importing it (or its class), and every call of it
    elsewhere in the project runs with gradients off. A method is called on an instance that
    may come from anywhere: a call of its name in any module counts against it, but only a
    module that imports the class shows that it is called at all (a same-named method of
    another class, called somewhere, says nothing of this one)."""
    from kllint.analysis.project.callers import callers_of, model_for
    from kllint.analysis.project.files import project_root

    path = module.path.resolve()
    if not path.is_file():
        return called  # a text without a project: its own uses are all there is
    callers = callers_of(path, {cls or name}, levels=1)
    if callers.truncated:
        return False  # not every caller is known
    importers = list(dict.fromkeys(caller.path for caller in callers.found))
    seen = {path}
    for other_path in importers:
        verdict = _calls_without_grad(module, other_path, name, depth, index, seen)
        if verdict is False:
            return False
        called = called or verdict is True
    if not called or not cls:
        return called
    for other_path in model_for(project_root(path.parent)).files_with(frozenset({name})):
        if _calls_without_grad(module, other_path, name, depth, index, seen, attributes=True) is False:
            return False  # `obj.name(...)` with gradients on, on an instance from anywhere
    return True


def _calls_without_grad(module: ModuleInfo, other_path: Any, name: str, depth: int, index: Any,
                        seen: set, attributes: bool = False) -> bool | None:
    """Whether the module at `other_path` calls `name` (as an attribute, with `attributes`) only
    with gradients off (None: it does not use the name so, or was seen)."""
    if other_path in seen:
        return None
    seen.add(other_path)
    other = index.module_at(other_path)
    if other is None or other is module or not any(u[2] or not attributes for u in _name_uses(other).get(name, [])):
        return None  # the word in a comment or a string, or a file Python rejects
    return _uses_without_grad(other, name, depth, index, attributes)
