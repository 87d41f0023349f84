"""What an `ast` outline says without libcst: the identifiers a piece of code uses, the names it
calls, dotted names. The prefilter asks it before the analysis (and its libcst) is
ever imported; `kllint.analysis.definitions` and the entry points ask it of each definition."""
from __future__ import annotations

import ast
import re
from typing import Iterator

FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROSE = re.compile(r"\s")  # a string with whitespace is a message, never a key or a name


def identifiers(node: ast.AST, import_parts: bool = False) -> frozenset[str]:
    """The names a piece of code uses: names, attributes, parameters, keywords, definitions, and
    the identifier-like words of its string constants that can be keys or names (`batch["ref_logps"]`,
    `f"ref_{name}"`, `"actor/kl"`: no whitespace); not docstrings, comments or prose strings
    (`"see docs/reference.md"`), from which the analysis never reads a role (`roles.tokens`). `import_parts`: also every part of every
    imported name (`kl_div` of `from m import kl_div as d`), not only the name it binds.

    The answer for a definition (function or class) or a module is kept on its node: the
    prefilter's walk of a module answers the entry points' questions about each of its
    definitions."""
    names, parts, _ = _outline_of(node)
    return names | parts if import_parts else names


def called_names(node: ast.AST) -> frozenset[str]:
    """The names a piece of code calls, `name(...)` or `x.name(...)` (`self.name(...)`), however
    the call is laid out over lines; nested definitions and decorators count, strings, comments
    and docstrings do not. Read in the same walk as `identifiers` (and kept with it)."""
    return _outline_of(node)[2]


_KEPT = "_kllint_identifiers"
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_KEPT_FOR = (*_DEFINITIONS, ast.Module)  # asked again for each unit of the module (entry points)
_Outline = tuple[frozenset[str], frozenset[str], frozenset[str]]  # names, import parts, called names
# nodes that hold no name and no child (contexts, operators): never pushed, and a `Name` is read
# without walking on to its context; the others are told apart by their exact type (`ast.parse`
# makes no subclasses), most frequent first (this walk is most of the prefilter's time)
_LEAVES = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def _outline_of(root: ast.AST) -> _Outline:
    kept = root.__dict__.get(_KEPT)
    if kept is not None:
        return kept
    found: set[str] = set()
    parts: set[str] = set()
    called: set[str] = set()
    docstrings: set[int] = set()
    stack = [root]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is ast.Name:
            found.add(item.id)
            continue
        if isinstance(item, _DEFINITIONS):
            if item is not root:
                inner, inner_parts, inner_called = _outline_of(item)
                found |= inner
                parts |= inner_parts
                called |= inner_called
                continue
            found.add(item.name)
        body = getattr(item, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.add(id(body[0].value))
        if kind is ast.Attribute:
            found.add(item.attr)
        elif kind is ast.Call:
            func = item.func
            if isinstance(func, ast.Name):
                called.add(func.id)
            elif isinstance(func, ast.Attribute):
                called.add(func.attr)
        elif kind is ast.arg:
            found.add(item.arg)
        elif kind is ast.keyword:
            if item.arg:
                found.add(item.arg)
        elif kind is ast.alias:
            found.add(item.asname or item.name)
            parts.update(item.name.split("."))
        elif (kind is ast.Constant and isinstance(item.value, str) and id(item) not in docstrings
              and not _PROSE.search(item.value)):
            found.update(_WORD.findall(item.value))
        for name in item._fields:
            value = getattr(item, name, None)
            if isinstance(value, ast.AST):
                if not isinstance(value, _LEAVES):
                    stack.append(value)
            elif isinstance(value, list):
                stack.extend(child for child in value if isinstance(child, ast.AST))
    result = (frozenset(found), frozenset(parts), frozenset(called))
    if isinstance(root, _KEPT_FOR):
        root.__dict__[_KEPT] = result
    return result


def top_level_statements(statements: list[ast.stmt], block: ast.stmt | None = None
                         ) -> Iterator[tuple[ast.stmt, ast.stmt | None]]:
    """The statements of a module body that define its top-level names, each with the outermost
    `if`/`try` block it sits in (None at the top): the blocks' branches are read as alternatives
    (`if TYPE_CHECKING:`, guarded imports, `except ImportError:` fallbacks), in source order."""
    for statement in statements:
        if isinstance(statement, (ast.If, ast.Try)):
            branches = [statement.body, statement.orelse]
            if isinstance(statement, ast.Try):
                branches[1:1] = [handler.body for handler in statement.handlers]
                branches.append(statement.finalbody)
            for branch in branches:
                yield from top_level_statements(branch, block or statement)
        else:
            yield statement, block


def entry_names(module: ast.Module) -> list[frozenset[str]]:
    """The names each piece of a module that the analysis may run is chosen by: every top-level
    function and every method of a top-level class (as `kllint.analysis.module.ModuleInfo`
    indexes them, `top_level_statements`) and every other top-level statement but imports, each
    with what its names reach as the entry points of `kllint.analysis.interpret.entry` read
    them: the parts of a module-level import it uses (`kl_div` of `from m import kl_div as d`)
    and the identifiers of the module constants it reads. A superset of what the entry points
    ask, so a module none of whose pieces names a KL or the reference runs nothing: its findings
    are none, whatever the rest of its code names (a configuration class whose fields name the
    reference model)."""
    imports: dict[str, set[str]] = {}
    constants: dict[str, set[str]] = {}
    units: list[frozenset[str]] = []
    for statement, _ in top_level_statements(module.body):
        if isinstance(statement, FUNCTION_DEFS):
            units.append(identifiers(statement))
        elif isinstance(statement, ast.ClassDef):
            units.extend(identifiers(item) for item in statement.body if isinstance(item, FUNCTION_DEFS))
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                bound = alias.asname or alias.name.split(".")[0]
                imports.setdefault(bound, set()).update(alias.name.split("."))
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    constants.setdefault(target.id, set()).update(identifiers(statement))
    units.extend(identifiers(statement) for statement in module.body
                 if not isinstance(statement, (*FUNCTION_DEFS, ast.ClassDef, ast.Import, ast.ImportFrom)))
    expanded = []
    for names in units:
        seen = set(names)
        for name in names:
            seen.update(imports.get(name, ()))
            seen.update(constants.get(name, ()))
        expanded.append(frozenset(seen))
    return expanded


def dotted(node: ast.expr) -> str | None:
    """`a.b.c` of an `ast` Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))
