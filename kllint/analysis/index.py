"""Modules and the project index: what each module defines and imports, resolved across the
project so that helpers in other modules can be followed (design.md, item 6).

The project root of a file is the folder above its top-level package (the chain of folders with
`__init__.py`), so `from pkg.mod import f` resolves whichever files were named on the command
line: a file's findings never depend on the other files of the run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from kllint.diagnostics import Span


class ParseFailure(SyntaxError):
    """libcst could not parse a module."""


def parse_module(text: str) -> cst.Module:
    """Parse with libcst. Raises ParseFailure (a SyntaxError) with line and column."""
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        error = ParseFailure(exc.message.splitlines()[0] if exc.message else "invalid syntax")
        error.lineno, error.offset = exc.raw_line, exc.raw_column + 1
        raise error from None


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
    """One parsed module: its tree, positions, imports and top-level definitions."""

    path: Path
    display: str
    name: str
    text: str
    tree: cst.Module
    positions: dict = field(repr=False, default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)
    constants: dict[str, cst.BaseExpression] = field(default_factory=dict)
    file_id: int = 0

    @classmethod
    def build(cls, text: str, path: Path, display: str, name: str, file_id: int = 0) -> "ModuleInfo":
        tree = parse_module(text)
        info = cls(path, display, name, text, tree, {}, file_id=file_id)
        info._collect()
        return info

    def _positions(self) -> dict:
        """Positions of every node, computed on first use (most imported modules never need them)."""
        if not self.positions:
            wrapper = MetadataWrapper(self.tree, unsafe_skip_copy=True)
            self.positions = dict(wrapper.resolve(PositionProvider))
        return self.positions

    def function_at(self, line: int) -> cst.FunctionDef | None:
        """The innermost function definition whose body contains `line`."""
        if not hasattr(self, "_function_spans"):
            spans: list[tuple[int, int, cst.FunctionDef]] = []
            stack: list[cst.CSTNode] = list(self.tree.body)
            while stack:
                node = stack.pop()
                if isinstance(node, cst.FunctionDef):
                    span = self.span(node)
                    spans.append((span.line, span.end_line, node))
                body = getattr(node, "body", None)
                inner = getattr(body, "body", None)
                if isinstance(inner, (list, tuple)):
                    stack.extend(n for n in inner if isinstance(n, cst.CSTNode))
                for extra in ("orelse", "handlers", "finalbody"):
                    part = getattr(node, extra, None)
                    if isinstance(part, (list, tuple)):
                        stack.extend(part)
                    elif isinstance(part, cst.CSTNode):
                        stack.append(part)
            self._function_spans = sorted(spans, key=lambda s: (s[0], -s[1]))
        best = None
        for start, end, node in self._function_spans:
            if start <= line <= end:
                best = node
        return best

    def span(self, node: cst.CSTNode) -> Span:
        code_range = self._positions().get(node)
        if code_range is None:
            return Span(1, 1, 1, 2)
        return Span.from_code_range(code_range)

    def source(self, node: cst.CSTNode) -> str:
        return self.tree.code_for_node(node)

    @property
    def package(self) -> str:
        if self.path.name == "__init__.py":
            return self.name
        return self.name.rpartition(".")[0]

    def _collect(self) -> None:
        for statement in self.tree.body:
            self._collect_statement(statement)

    def _collect_statement(self, statement: cst.CSTNode) -> None:
        if isinstance(statement, cst.FunctionDef):
            self.functions[statement.name.value] = statement
        elif isinstance(statement, cst.ClassDef):
            self.classes[statement.name.value] = statement
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        full = dotted_name(alias.name) or ""
                        if alias.asname and isinstance(alias.asname.name, cst.Name):
                            self.imports[alias.asname.name.value] = full
                        else:
                            top = full.split(".")[0]
                            self.imports[top] = top
                elif isinstance(small, cst.ImportFrom):
                    base = self._resolve_from(small)
                    if base is None or isinstance(small.names, cst.ImportStar):
                        continue
                    for alias in small.names:
                        imported = dotted_name(alias.name) or ""
                        local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else imported
                        self.imports[local] = f"{base}.{imported}" if base else imported
                elif isinstance(small, (cst.Assign, cst.AnnAssign)):
                    targets = small.targets if isinstance(small, cst.Assign) else [small]
                    for target in targets:
                        node = target.target
                        if isinstance(node, cst.Name) and small.value is not None:
                            self.constants[node.value] = small.value
        elif isinstance(statement, cst.If):
            # `if TYPE_CHECKING:` / try-imports: collect definitions in both branches
            for inner in statement.body.body:
                self._collect_statement(inner)
        elif isinstance(statement, cst.Try):
            for inner in statement.body.body:
                self._collect_statement(inner)

    def _resolve_from(self, node: cst.ImportFrom) -> str | None:
        module = dotted_name(node.module) if node.module is not None else ""
        if module is None:
            return None
        dots = len(node.relative)
        if not dots:
            return module
        base_parts = self.package.split(".") if self.package else []
        if dots > 1:
            base_parts = base_parts[: len(base_parts) - (dots - 1)]
        base = ".".join(base_parts)
        return f"{base}.{module}" if module and base else (module or base)


def display_path(path: Path) -> str:
    """A path as shown to users: relative to the working directory when below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def package_root(path: Path) -> tuple[Path, str]:
    """The import root of `path` and its dotted module name (folders with __init__.py)."""
    path = path.resolve()
    parts = [path.stem] if path.name != "__init__.py" else []
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.append(folder.name)
        if folder.parent == folder:
            break
        folder = folder.parent
    return folder, ".".join(reversed(parts))


class ProjectIndex:
    """Resolves dotted module names to parsed modules under the project roots (cached)."""

    MAX_MODULE_BYTES = 2 * 1024 * 1024

    def __init__(self) -> None:
        self._by_path: dict[Path, ModuleInfo | None] = {}
        self._next_id = 1
        self._tracked: dict[Path, bool] | None = None

    def module_for_file(self, text: str, path: Path, display: str) -> ModuleInfo:
        """The entry module (always re-built from `text`). Raises ParseFailure."""
        root, name = package_root(path) if path.exists() else (path.parent, path.stem)
        info = ModuleInfo.build(text, path, display, name, file_id=0)
        self._roots = [root]
        src = root / "src"
        if src.is_dir():
            self._roots.append(src)
        return info

    def loaded(self) -> list[ModuleInfo]:
        return [m for m in self._by_path.values() if m is not None]

    def resolve(self, dotted: str) -> tuple[ModuleInfo | None, str]:
        """The longest prefix of `dotted` that is a project module, and the remaining attribute path."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = self.load(".".join(parts[:cut]))
            if module is not None:
                return module, ".".join(parts[cut:])
        return None, dotted

    def load(self, dotted: str) -> ModuleInfo | None:
        for root in getattr(self, "_roots", []):
            base = root.joinpath(*dotted.split("."))
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                exists = candidate.is_file()
                if self._tracked is not None:
                    self._tracked[candidate] = exists
                if exists:
                    return self._load_path(candidate, dotted)
        return None

    def begin_tracking(self) -> None:
        """Start recording the module files `load` looks at (for the result cache, kllint.cache)."""
        self._tracked = {}

    def tracked_paths(self) -> dict[Path, bool]:
        """Every candidate file `load` probed since `begin_tracking()`, found or not (cache hits too)."""
        return dict(self._tracked or {})

    def _load_path(self, path: Path, dotted: str) -> ModuleInfo | None:
        path = path.resolve()
        if path in self._by_path:
            return self._by_path[path]
        info: ModuleInfo | None = None
        try:
            if path.stat().st_size <= self.MAX_MODULE_BYTES:
                text = path.read_text(encoding="utf-8")
                info = ModuleInfo.build(text, path, display_path(path), dotted, file_id=self._next_id)
                self._next_id += 1
        except (OSError, UnicodeDecodeError, SyntaxError, RecursionError):
            info = None
        self._by_path[path] = info
        return info
