"""One module of the project, indexed with `ast` and parsed with libcst one definition at a time.

Python's own parser is about ten times faster than libcst, so a module's outline (imports,
top-level functions, classes and their methods, constants) comes from `ast`, and libcst parses a
function, a method or a constant only when the analysis asks for it. Each such snippet keeps
its columns (a method is parsed under a dummy `class _:` header) and knows its line offset, so
spans are those of the whole file.

The parts parsed on demand (classes, functions, constants) and their sites are in
`kllint.analysis.definitions`.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from kllint.analysis.definitions import LazyClass, LazyConstants, LazyDefinitions, Site
from kllint.analysis.outline import FUNCTION_DEFS, identifiers, top_level_statements
from kllint.diagnostics import Span
from kllint.guard import guarded_parse_module
from kllint.pipeline.prefilter import parse_or_error
from kllint.pipeline.source import code_digest, source_lines

_EMPTY_MODULE = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    """The code libcst generates for a node outside any module (no positions needed)."""
    return _EMPTY_MODULE.code_for_node(node)


def code_ranges(tree: cst.Module):
    """Every node of `tree` -> its `CodeRange`, as libcst's `PositionProvider` gives it, from the
    provider's own code-generation pass alone: resolving it through a `MetadataWrapper` also walks
    the whole tree once more with an empty batch of visitors and copies the mapping twice (about
    half the time of positioning a definition). Through the wrapper where libcst's internals
    differ."""
    provider = PositionProvider()
    try:
        provider._gen_impl(tree)
        return provider._computed
    except AttributeError:
        return MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)
    except (RecursionError, KeyError):  # too deep for the pass (it then fails with a KeyError): the nodes it placed
        return provider._computed


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


@dataclass
class ModuleInfo:
    """One module: its text, its outline from `ast`, and libcst trees of the parts the analysis reads."""

    path: Path
    display: str
    name: str
    text: str
    outline: ast.Module = field(repr=False)
    imports: dict[str, str] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)  # modules of `from m import *`, in order
    file_id: int = 0

    def __post_init__(self) -> None:
        self.lines = source_lines(self.text)
        self.functions = LazyDefinitions(self)
        self.classes: dict[str, LazyClass] = {}
        self.constants = LazyConstants(self)
        self._parsed: dict[Site, cst.CSTNode | None] = {}
        self._site_of: dict[int, Site] = {}
        self._generated: dict[int, tuple[cst.CSTNode, str]] = {}  # node id -> (node, its code), for `source`
        self._snippets: list[tuple[cst.Module, int]] = []
        self._snippet_of: dict[int, int] = {}  # id of a parsed definition -> its snippet
        self._positioned: set[int] = set()
        self._positions: dict[cst.CSTNode, Span] = {}
        self._code_digest: str | None = None
        self._registries: dict[str, tuple[tuple[str, str], ...]] | None = None
        self._defs_index: list[tuple[Site, ast.stmt, Site]] | None = None
        self._function_at: dict[int, cst.FunctionDef | None] = {}
        self._walk_order: list[ast.AST] | None = None
        self._nodes_of: dict[tuple[type, ...], list[ast.AST]] = {}
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
            # screens out what would crash libcst; the module's text is Python (its outline
            # parsed), so the nodes of its definitions need no validation
            tree = guarded_parse_module(header + snippet, validate=False)
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
            if isinstance(node, (*FUNCTION_DEFS, ast.ClassDef, ast.Import, ast.ImportFrom)):
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
        for item, code_range in code_ranges(tree).items():
            self._positions[item] = Span(code_range.start.line + offset, code_range.start.column + 1,
                                         code_range.end.line + offset, code_range.end.column + 1)

    def source(self, node: cst.CSTNode) -> str:
        """The code of `node`: the file's own lines for a definition parsed from them, else
        generated by libcst."""
        site = self._site_of.get(id(node))
        if site is not None and self._parsed.get(site) is node:
            return self.text_of(site)
        known = self._generated.get(id(node))
        if known is None or known[0] is not node:  # the entry keeps the node alive: its id stays its own
            known = self._generated[id(node)] = (node, _EMPTY_MODULE.code_for_node(node))
        return known[1]

    def _definition_sites(self) -> list[tuple[Site, ast.stmt, Site]]:
        """Every function definition of the module (nested ones too) with its site and the site
        of the top-level definition that contains it, in outline order; computed once."""
        if self._defs_index is None:
            found: list[tuple[Site, ast.stmt, Site]] = []
            stack: list[tuple[ast.AST, Site | None]] = [(n, None) for n in reversed(self.outline.body)]
            while stack:
                node, container = stack.pop()
                if isinstance(node, FUNCTION_DEFS):
                    site = Site.of(node, self.lines)
                    found.append((site, node, container or site))
                children = [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
                for child in reversed(children):
                    outer = container
                    if outer is None and isinstance(node, (*FUNCTION_DEFS, ast.ClassDef)) and isinstance(child, FUNCTION_DEFS):
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
    def outline_nodes(self, *kinds: type) -> list[ast.AST]:
        """The outline's nodes of the given `ast` types, in `ast.walk` order: the module is
        walked once, however many whole-module questions are asked of it."""
        found = self._nodes_of.get(kinds)
        if found is None:
            if self._walk_order is None:
                self._walk_order = list(ast.walk(self.outline))
            found = self._nodes_of[kinds] = [node for node in self._walk_order if isinstance(node, kinds)]
        return found

    def _collect(self, statements: list[ast.stmt]) -> None:
        """Index top-level statements, also those of top-level `if`/`try` blocks
        (`outline.top_level_statements`: a block's branches are alternatives, so the first
        definition of a name among them is kept, and a constant's site is the whole block)."""
        blocks: dict[int, Site] = {}
        for statement, guard in top_level_statements(statements):
            block = None
            if guard is not None:
                block = blocks.get(id(guard))
                if block is None:
                    block = blocks[id(guard)] = Site.of(guard, self.lines)
            if isinstance(statement, FUNCTION_DEFS):
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
                        self.star_imports.append(base)
                        continue
                    self.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
            elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                if statement.value is not None:
                    for target in targets:
                        if isinstance(target, ast.Name) and (block is None or target.id not in self.constants):
                            self.constants.add(target.id, block or Site.of(statement, self.lines), statement)

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
