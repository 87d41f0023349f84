"""One module of the project, indexed with `ast` and parsed with libcst one definition at a time.

Python's own parser is about ten times faster than libcst, so a module's outline (imports,
top-level functions, classes and their methods, constants) comes from `ast`, and libcst parses a
function, a method or a constant only when the analysis asks for it. Each such snippet keeps
its columns (a method is parsed under a dummy `class _:` header) and knows its line offset, so
spans are those of the whole file.
"""
from __future__ import annotations

import ast
import re
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from kllint.diagnostics import Span
from kllint.guard import guarded_parse_module
from kllint.pipeline.prefilter import parse_or_error
from kllint.pipeline.source import code_digest, source_lines, statement_lines

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_EMPTY_MODULE = cst.Module(body=[])


def dotted_name(node: cst.BaseExpression | None) -> str | None:
    """`a.b.c` for Name/Attribute chains, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def identifiers(node: ast.AST) -> set[str]:
    """The names a piece of code uses: names, attributes, parameters, keywords, definitions, and
    the identifier-like words of its string constants (`batch["ref_logps"]`); not docstrings
    or comments, which never reach the analysis."""
    found: set[str] = set()
    docstrings = set()
    for item in ast.walk(node):
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
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(item.name)
        elif isinstance(item, ast.alias):
            found.add(item.asname or item.name)
        elif isinstance(item, ast.Constant) and isinstance(item.value, str) and id(item) not in docstrings:
            found.update(_WORD.findall(item.value))
    return found


@dataclass(frozen=True)
class Site:
    """Where a definition or statement is in the file: 1-based lines, inclusive; its indentation."""

    start: int
    end: int
    indented: bool

    @classmethod
    def of(cls, node: ast.stmt, lines: list[str]) -> "Site":
        """The lines of `node` (decorators included) in a file of `lines`."""
        start, end = statement_lines(node, lines)
        first = lines[start - 1] if start <= len(lines) else ""
        # a form feed at the start of a line resets Python's indentation count
        return cls(start, end, first.lstrip("\f")[:1] in (" ", "\t"))


class LazyClass:
    """A class of the module: its methods are parsed with libcst one at a time, on demand.

    Offers what the analysis reads of a `cst.ClassDef`: `name.value`, `bases` (`cst.Arg`s),
    `method(name)`, `method_names`, and `assigns_attribute(attr)` (which methods assign `self.attr`).
    """

    def __init__(self, module: "ModuleInfo", node: ast.ClassDef) -> None:
        self.module = weakref.proxy(module)  # no cycle: the module is freed by reference counting
        self.name = cst.Name(node.name)
        self._node = node
        self._methods: dict[str, ast.stmt] = {}
        for statement in node.body:
            if isinstance(statement, _DEFS):
                self._methods[statement.name] = statement  # the last one wins, as in Python
        self._bases: list[cst.Arg] | None = None

    @property
    def method_names(self) -> list[str]:
        return list(self._methods)

    def method_text(self, name: str) -> str:
        return self.module.text_of(Site.of(self._methods[name], self.module.lines))

    def method_identifiers(self, name: str) -> set[str]:
        return identifiers(self._methods[name])

    def method(self, name: str) -> cst.FunctionDef | None:
        statement = self._methods.get(name)
        if statement is None:
            return None
        return self.module.definition(Site.of(statement, self.module.lines))

    @property
    def bases(self) -> list[cst.Arg]:
        if self._bases is None:
            self._bases = []
            for base in self._node.bases:
                segment = self.module.segment(base)
                try:
                    self._bases.append(cst.Arg(value=cst.parse_expression(f"({segment})")))
                except (cst.ParserSyntaxError, TypeError):
                    continue
        return self._bases

    def assigns_attribute(self, attr: str) -> list[str]:
        """Methods that assign `self.<attr> = <call, name or conditional>` (read from `ast`,
        nothing parsed)."""
        found = []
        for name, statement in self._methods.items():
            for node in statement.body:
                if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.Call, ast.Name, ast.Attribute, ast.IfExp))
                        and any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                                and t.value.id == "self" for t in node.targets)):
                    found.append(name)
                    break
        return found


class _LazyNames:
    """Names of a module, each with the `Site` that libcst parses on first access and its `ast`
    outline (membership and identifiers need no parsing)."""

    def __init__(self, module: "ModuleInfo") -> None:
        self._module = weakref.proxy(module)  # no cycle: the module is freed by reference counting
        self._sites: dict[str, Site] = {}
        self._outlines: dict[str, ast.stmt] = {}

    def add(self, name: str, site: Site, outline: ast.stmt) -> None:
        self._sites[name] = site
        self._outlines[name] = outline

    def identifiers(self, name: str) -> set[str]:
        return identifiers(self._outlines[name])

    def __contains__(self, name: object) -> bool:
        return name in self._sites


class LazyDefinitions(_LazyNames):
    """name -> `cst.FunctionDef`, parsed on first access."""

    def __getitem__(self, name: str) -> cst.FunctionDef:
        node = self._module.definition(self._sites[name])
        if node is None:
            raise KeyError(name)
        return node

    def get(self, name: str) -> cst.FunctionDef | None:
        """The parsed definition, or None when absent or when libcst rejects it."""
        site = self._sites.get(name)
        return self._module.definition(site) if site is not None else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)

    def text(self, name: str) -> str:
        return self._module.text_of(self._sites[name])


class LazyConstants(_LazyNames):
    """name -> the `cst` expression assigned at module level, parsed on first access. The site of
    a constant is the top-level statement holding the assignment (an `if`/`try` block for a
    guarded constant), its outline the assignment itself."""

    def get(self, name: str) -> cst.BaseExpression | None:
        """The assigned expression, or None when absent or when libcst rejects its statement."""
        site = self._sites.get(name)
        statement = self._module.statement(site) if site is not None else None
        return _assigned_value(statement, name) if statement is not None else None

    def __getitem__(self, name: str) -> cst.BaseExpression:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value


def _assigned_value(statement: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value assigned to `name` in a statement (searching `if`/`try` blocks too)."""
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets):
            return node.value
        if (isinstance(node, cst.AnnAssign) and node.value is not None and isinstance(node.target, cst.Name)
                and node.target.value == name):
            return node.value
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.IndentedBlock)):
            stack.extend(reversed(node.body))
        elif isinstance(node, (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally)):
            parts = [node.body, getattr(node, "orelse", None), getattr(node, "finalbody", None),
                     *getattr(node, "handlers", ())]
            stack.extend(reversed([part for part in parts if part is not None]))
    return None


@dataclass
class ModuleInfo:
    """One module: its text, its outline from `ast`, and libcst trees of the parts the analysis reads."""

    path: Path
    display: str
    name: str
    text: str
    outline: ast.Module = field(repr=False)
    imports: dict[str, str] = field(default_factory=dict)
    file_id: int = 0

    def __post_init__(self) -> None:
        self.lines = source_lines(self.text)
        self.functions = LazyDefinitions(self)
        self.classes: dict[str, LazyClass] = {}
        self.constants = LazyConstants(self)
        self._parsed: dict[Site, cst.CSTNode | None] = {}
        self._site_of: dict[int, Site] = {}
        self._snippets: list[tuple[cst.Module, int]] = []
        self._snippet_of: dict[int, int] = {}  # id of a parsed definition -> its snippet
        self._positioned: set[int] = set()
        self._positions: dict[cst.CSTNode, Span] = {}
        self._code_digest: str | None = None
        self._registries: dict[str, tuple[tuple[str, str], ...]] | None = None
        self._defs_index: list[tuple[Site, ast.stmt, Site]] | None = None
        self._function_at: dict[int, cst.FunctionDef | None] = {}
        self._collect(self.outline.body)

    @classmethod
    def build(cls, text: str, path: Path, display: str, name: str, file_id: int = 0,
              outline: ast.Module | None = None) -> "ModuleInfo":
        """Index a module (`outline`: its `ast` tree when already parsed).

        Raises:
            SyntaxError: Python rejects the text.
        """
        if outline is None:
            outline, error = parse_or_error(text)
            if error is not None:
                raise error
        return cls(path, display, name, text, outline, file_id=file_id)

    @property
    def registries(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """Module-level dicts filled by the module's registering decorators
        (`kllint.analysis.registries`): name -> ((key, definition), ...)."""
        if self._registries is None:
            from kllint.analysis.registries import registrations

            self._registries = registrations(self.outline)
        return self._registries

    def code_digest(self) -> str:
        """`kllint.pipeline.source.code_digest` of this module (computed once)."""
        if self._code_digest is None:
            self._code_digest = code_digest(self.lines, self.outline)
        return self._code_digest

    # -- text and snippets ------------------------------------------------------------------
    def text_of(self, site: Site) -> str:
        return "".join(self.lines[site.start - 1:site.end])

    def segment(self, node: ast.expr) -> str:
        """The source text of an `ast` expression (its columns are UTF-8 byte offsets)."""
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        lines = [line.encode() for line in self.lines[first:last + 1]]
        if not lines:
            return ""
        if len(lines) == 1:
            return lines[0][node.col_offset:node.end_col_offset].decode(errors="replace")
        lines[0] = lines[0][node.col_offset:]
        lines[-1] = lines[-1][:node.end_col_offset]
        return b"".join(lines).decode(errors="replace")

    def _parse_site(self, site: Site) -> cst.BaseStatement | None:
        if site in self._parsed:
            return self._parsed[site]
        # libcst rejects some leading form feeds that Python accepts: drop them from the first line
        snippet = self.text_of(site).lstrip("\f")
        header = "class _:\n" if site.indented else ""
        node: cst.BaseStatement | None = None
        try:
            tree = guarded_parse_module(header + snippet)  # screens out what would crash libcst
        except (cst.ParserSyntaxError, RecursionError):
            tree = None
        if tree is not None and tree.body:
            node = tree.body[0]
            if site.indented:
                node = node.body.body[0] if isinstance(node, cst.ClassDef) and node.body.body else None
            self._snippets.append((tree, site.start - 1 - (1 if site.indented else 0)))
        self._parsed[site] = node
        if node is not None:
            self._site_of[id(node)] = site
            self._snippet_of[id(node)] = len(self._snippets) - 1
        return node

    def definition(self, site: Site) -> cst.FunctionDef | None:
        """The function or method defined at `site` (parsed once)."""
        node = self._parse_site(site)
        return node if isinstance(node, cst.FunctionDef) else None

    def statement(self, site: Site) -> cst.BaseStatement | None:
        """The statement at `site` (parsed once)."""
        return self._parse_site(site)

    def module_statements(self, wanted) -> list[cst.BaseStatement]:
        """Top-level statements other than definitions and imports whose identifiers (a set)
        `wanted` accepts."""
        found = []
        for node in self.outline.body:
            if isinstance(node, (*_DEFS, ast.ClassDef, ast.Import, ast.ImportFrom)):
                continue
            site = Site.of(node, self.lines)
            if wanted(identifiers(node)):
                statement = self.statement(site)
                if statement is not None:
                    found.append(statement)
        return found

    # -- positions -------------------------------------------------------------------------
    def is_root(self, node: cst.CSTNode) -> bool:
        """Whether `node` is a definition this module parsed as a snippet of its own."""
        return id(node) in self._snippet_of

    def span(self, node: cst.CSTNode, root: cst.CSTNode | None = None) -> Span:
        """The node's range in the file (1-based lines and columns). `root`, the definition that
        contains the node, spares computing the positions of every other parsed definition."""
        span = self._positions.get(node)
        if span is None and root is not None and id(root) in self._snippet_of:
            self._position(self._snippet_of[id(root)])
            span = self._positions.get(node)
        if span is None:
            for position in range(len(self._snippets)):
                self._position(position)
            span = self._positions.get(node)
        return span if span is not None else Span(1, 1, 1, 2)

    def _position(self, position: int) -> None:
        if position in self._positioned:
            return
        self._positioned.add(position)
        tree, offset = self._snippets[position]
        wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
        for item, code_range in wrapper.resolve(PositionProvider).items():
            self._positions[item] = Span(code_range.start.line + offset, code_range.start.column + 1,
                                         code_range.end.line + offset, code_range.end.column + 1)

    def source(self, node: cst.CSTNode) -> str:
        """The code of `node`: the file's own lines for a definition parsed from them, else
        generated by libcst."""
        site = self._site_of.get(id(node))
        if site is not None and self._parsed.get(site) is node:
            return self.text_of(site)
        return _EMPTY_MODULE.code_for_node(node)

    def _definition_sites(self) -> list[tuple[Site, ast.stmt, Site]]:
        """Every function definition of the module (nested ones too) with its site and the site
        of the top-level definition that contains it, in outline order; computed once."""
        if self._defs_index is None:
            found: list[tuple[Site, ast.stmt, Site]] = []
            stack: list[tuple[ast.AST, Site | None]] = [(n, None) for n in reversed(self.outline.body)]
            while stack:
                node, container = stack.pop()
                if isinstance(node, _DEFS):
                    site = Site.of(node, self.lines)
                    found.append((site, node, container or site))
                children = [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
                for child in reversed(children):
                    outer = container
                    if outer is None and isinstance(node, (*_DEFS, ast.ClassDef)) and isinstance(child, _DEFS):
                        outer = Site.of(child, self.lines) if isinstance(node, ast.ClassDef) else Site.of(node, self.lines)
                    stack.append((child, outer))
            self._defs_index = found
        return self._defs_index

    def function_at(self, line: int) -> cst.FunctionDef | None:
        """The innermost function definition whose lines contain `line` (the definitions are
        indexed once and each answer is kept: a file with many findings asks for many lines)."""
        best: ast.stmt | None = None
        best_start = -1
        top: Site | None = None
        for site, node, container in self._definition_sites():
            if site.start <= line <= site.end and site.start >= best_start:
                best, best_start, top = node, site.start, container
        if best is None or top is None:
            return None
        key = id(best)
        if key not in self._function_at:
            self._function_at[key] = self._find_definition(best, top)
        return self._function_at[key]

    def _find_definition(self, best: ast.stmt, top: Site) -> cst.FunctionDef | None:
        root = self.definition(top)
        if root is None:
            return None
        target = best.lineno
        for candidate in _function_defs(root):
            if candidate.name.value == best.name and self.span(candidate.name).line == target:
                return candidate
        return None

    @property
    def package(self) -> str:
        if self.path.name == "__init__.py":
            return self.name
        return self.name.rpartition(".")[0]

    # -- outline ------------------------------------------------------------------------------
    def _collect(self, statements: list[ast.stmt], block: Site | None = None) -> None:
        """Index top-level statements; `block`: the `if`/`try` statement they are guarded by (its
        branches are alternatives: the first definition of a name among them is kept)."""
        for statement in statements:
            if isinstance(statement, _DEFS):
                if block is None or statement.name not in self.functions:
                    self.functions.add(statement.name, Site.of(statement, self.lines), statement)
            elif isinstance(statement, ast.ClassDef):
                if block is None or statement.name not in self.classes:
                    self.classes[statement.name] = LazyClass(self, statement)
            elif isinstance(statement, ast.Import):
                for alias in statement.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(statement, ast.ImportFrom):
                base = self._resolve_from(statement)
                if base is None:
                    continue
                for alias in statement.names:
                    if alias.name == "*":
                        continue
                    self.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
            elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                if statement.value is not None:
                    for target in targets:
                        if isinstance(target, ast.Name) and (block is None or target.id not in self.constants):
                            self.constants.add(target.id, block or Site.of(statement, self.lines), statement)
            elif isinstance(statement, (ast.If, ast.Try)):
                # `if TYPE_CHECKING:`, guarded imports, `except ImportError:` fallbacks
                outer = block or Site.of(statement, self.lines)
                branches = [statement.body, statement.orelse]
                if isinstance(statement, ast.Try):
                    branches[1:1] = [handler.body for handler in statement.handlers]
                    branches.append(statement.finalbody)
                for branch in branches:
                    self._collect(branch, outer)

    def _resolve_from(self, node: ast.ImportFrom) -> str | None:
        return self.resolve_from(node.module or "", node.level)

    def resolve_from(self, module: str, dots: int) -> str | None:
        """The absolute name of the module `from <dots><module> import ...` reads in this module
        (None when the dots climb above the top-level package)."""
        if not dots:
            return module
        base_parts = self.package.split(".") if self.package else []
        if dots > 1:
            base_parts = base_parts[: len(base_parts) - (dots - 1)]
        base = ".".join(base_parts)
        return f"{base}.{module}" if module and base else (module or base)


def _function_defs(root: cst.CSTNode) -> Iterator[cst.FunctionDef]:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.FunctionDef):
            yield node
        stack.extend(node.children)


def class_method(cls: cst.ClassDef | LazyClass, name: str) -> cst.FunctionDef | None:
    """The method `name` defined in the body of a class (lazy or parsed), else None."""
    if isinstance(cls, LazyClass):
        return cls.method(name)
    for statement in cls.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
            return statement
    return None


def class_methods(cls: cst.ClassDef | LazyClass) -> list[cst.FunctionDef]:
    """Every method of a class, parsed (for the few classes the analysis walks whole)."""
    if isinstance(cls, LazyClass):
        return [m for m in (cls.method(n) for n in cls.method_names) if m is not None]
    return [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]
