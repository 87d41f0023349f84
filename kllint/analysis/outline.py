"""What an `ast` outline says without libcst: the identifiers a piece of code uses, the names it
calls, dotted names. The prefilter asks it before the analysis (and its libcst and sympy) is
ever imported; `kllint.analysis.definitions` and the entry points ask it of each definition."""
from __future__ import annotations

import ast
import re

FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROSE = re.compile(r"\s")  # a string with whitespace is a message, never a key or a name


def identifiers(node: ast.AST, import_parts: bool = False) -> frozenset[str]:
    """The names a piece of code uses: names, attributes, parameters, keywords, definitions, and
    the identifier-like words of its string constants that can be keys or names (`batch["ref_logps"]`,
    `f"ref_{name}"`, `"actor/kl"`: no whitespace); not docstrings, comments or prose strings
    (`"see docs/reference.md"`), from which the analysis never reads a role (`roles.tokens`). `import_parts`: also every part of every
    imported name (`kl_div` of `from m import kl_div as d`), not only the name it binds.

    The answer for a definition (function or class) is kept on its node: the prefilter's walk of
    a module answers the entry points' questions about each of its definitions."""
    names, parts = _identifiers_and_import_parts(node)
    return names | parts if import_parts else names


_KEPT = "_kllint_identifiers"
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _identifiers_and_import_parts(root: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
    kept = root.__dict__.get(_KEPT)
    if kept is not None:
        return kept
    found: set[str] = set()
    parts: set[str] = set()
    docstrings: set[int] = set()
    stack = [root]
    while stack:
        item = stack.pop()
        if item is not root and isinstance(item, _DEFINITIONS):
            inner, inner_parts = _identifiers_and_import_parts(item)
            found |= inner
            parts |= inner_parts
            continue
        body = getattr(item, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.add(id(body[0].value))
        if isinstance(item, ast.Name):
            found.add(item.id)
        elif isinstance(item, ast.Attribute):
            found.add(item.attr)
        elif isinstance(item, ast.arg):
            found.add(item.arg)
        elif isinstance(item, ast.keyword) and item.arg:
            found.add(item.arg)
        elif isinstance(item, _DEFINITIONS):
            found.add(item.name)
        elif isinstance(item, ast.alias):
            found.add(item.asname or item.name)
            parts.update(item.name.split("."))
        elif (isinstance(item, ast.Constant) and isinstance(item.value, str) and id(item) not in docstrings
              and not _PROSE.search(item.value)):
            found.update(_WORD.findall(item.value))
        for name in item._fields:
            value = getattr(item, name, None)
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(child for child in value if isinstance(child, ast.AST))
    result = (frozenset(found), frozenset(parts))
    if isinstance(root, _DEFINITIONS):
        root.__dict__[_KEPT] = result
    return result


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


def called_names(node: ast.AST) -> frozenset[str]:
    """The names a piece of code calls, `name(...)` or `x.name(...)` (`self.name(...)`), however
    the call is laid out over lines; nested definitions and decorators count, strings, comments
    and docstrings do not."""
    return frozenset(item.func.id if isinstance(item.func, ast.Name) else item.func.attr
                     for item in ast.walk(node)
                     if isinstance(item, ast.Call) and isinstance(item.func, (ast.Name, ast.Attribute)))
