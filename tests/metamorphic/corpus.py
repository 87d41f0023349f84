"""A corpus copied, transformed file by file, analysed in-process, and findings compared.

A finding is keyed by (code, path relative to the corpus root, line). A transformed copy keeps,
for each of its files, the original file and line map it came from, so that its findings are
keyed by the original's path and line: "the same finding" means the same code at the same
estimate, wherever the transformation put it.
"""
from __future__ import annotations

import ast
import keyword
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from metamorphic.move import MoveError, move_definitions
from metamorphic.rename import Namer, Prepared, identifiers, parameters_by_callee, rename_locals, rename_parameters


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the corpus root, POSIX (the original's path for a transformed copy)
    line: int | None  # None: on a line the transformation generated
    code: str
    text: str = field(compare=False)  # the reported line, stripped
    where: str = field(default="", compare=False)  # the transformed file and line, when they differ


@dataclass
class Copy:
    """A corpus copy: its root, and for each file (relative path) the original it came from and
    the line map (`None`: the same lines)."""

    root: Path
    origin: dict[str, tuple[str, list[int | None] | None]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # original file -> why it is kept as it is
    broken: dict[str, str] = field(default_factory=dict)   # file -> what is wrong with the transformed text


def python_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def copy_corpus(source: Path, target: Path) -> Copy:
    """The `*.py` files of `source` copied under `target` (notebooks and other files left out)."""
    copy = Copy(target)
    for name in python_files(source):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target / name)
        copy.origin[name] = (name, None)
    return copy


def _shape(tree: ast.AST) -> str:
    """`ast.dump` with every identifier a local rename may touch replaced by `_`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = "_"
        elif isinstance(node, ast.arg):
            node.arg = "_"
        elif isinstance(node, ast.keyword) and node.arg is not None:
            node.arg = "_"
        elif isinstance(node, ast.Nonlocal):
            node.names = ["_"] * len(node.names)
    return ast.dump(tree)


def _rewrite(original: Copy, target: Path, change: Callable[[str, str], str]) -> Copy:
    """Each file of `original` rewritten by `change(text, relative path)` under `target`; a file
    whose new text does not parse, has another line count or another shape is `broken`."""
    copy = Copy(target)
    for name in original.origin:
        text = (original.root / name).read_text(encoding="utf-8")
        try:
            new = change(text, name)
            if len(new.splitlines()) != len(text.splitlines()):
                raise ValueError(f"{len(text.splitlines())} lines became {len(new.splitlines())}")
            if _shape(ast.parse(new)) != _shape(ast.parse(text)):
                raise ValueError("the syntax tree changed beyond names")
        except Exception as error:  # noqa: BLE001 - any failure of the transformation is reported
            copy.broken[name] = f"{type(error).__name__}: {error}"
            new = text
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(new, encoding="utf-8")
        copy.origin[name] = (name, None)
    return copy


def with_locals_renamed(original: Copy, target: Path) -> Copy:
    return _rewrite(original, target, lambda text, name: rename_locals(text))


def with_parameters_renamed(original: Copy, target: Path) -> Copy:
    """Parameters renamed with one name per old name across the corpus, so that the keywords of
    calls between files follow (each file parsed and scoped once for both passes)."""
    taken: set[str] = set()
    callees: dict[str, set[str]] = {}
    prepared: dict[str, Prepared] = {}
    for name in original.origin:
        text = (original.root / name).read_text(encoding="utf-8")
        taken |= identifiers(text)
        try:
            prepared[name] = Prepared.of(text)
        except Exception:  # noqa: BLE001 - the rewrite below reports the file
            continue
        for callee, names in parameters_by_callee(prepared[name]).items():
            callees.setdefault(callee, set()).update(names)
    namer = Namer("a", taken, by_name=True)
    return _rewrite(original, target, lambda text, name: rename_parameters(prepared.get(name, text), namer, callees))


def _dotted(root: Path, folder: Path) -> list[str]:
    names: list[str] = []
    while folder != root and (folder / "__init__.py").is_file():
        names.insert(0, folder.name)
        folder = folder.parent
    return names


def package_name(stem: str) -> str:
    """The package a module `stem`.py becomes: its own name, made an identifier if it is not one."""
    name = re.sub(r"\W", "_", stem)
    name = name if name.isidentifier() else "m_" + name
    return name + "_" if keyword.iskeyword(name) else name


def with_definitions_moved(original: Copy, target: Path) -> Copy:
    """Every module with top-level definitions replaced by a package (`metamorphic.move`)."""
    shutil.copytree(original.root, target)
    copy = Copy(target, origin=dict(original.origin))
    for name in original.origin:
        path = target / name
        init = path.name == "__init__.py"
        stem = package_name(path.stem)  # `x.unsafe.fixed.py` (imported by no one) -> `x_unsafe_fixed/`
        folder = path.parent if init else path.parent / stem
        package = ".".join(_dotted(target, path.parent) + ([] if init else [stem]))
        try:
            if not init and folder.exists():
                raise MoveError(f"`{folder.name}` already exists")
            files = move_definitions(path.read_text(encoding="utf-8"), package, deeper=not init)
            clashes = [new for new in files if new != "__init__.py" and (folder / new).exists()]
            if clashes:
                raise MoveError(f"{clashes[0]} already exists")
        except (MoveError, SyntaxError) as error:
            copy.skipped[name] = str(error)
            continue
        if not files:
            continue
        if not init:
            path.unlink()
            del copy.origin[name]
        folder.mkdir(exist_ok=True)
        for new_name, new in files.items():
            (folder / new_name).write_text(new.code, encoding="utf-8")
            relative = (folder / new_name).relative_to(target).as_posix()
            copy.origin[relative] = (name, new.origin)
            try:
                ast.parse(new.code)
            except SyntaxError as error:
                copy.broken[relative] = f"SyntaxError: {error}"
    return copy


# --- analysis and comparison ---------------------------------------------------------------------------


@dataclass
class Analysis:
    findings: set[Finding]
    internal_errors: list[str]


def analyse(copy: Copy) -> Analysis:
    """kllint on the copy, in this process (default settings, no cache), findings keyed by the
    original's path and line."""
    from kllint.api import check_paths

    result = check_paths([str(copy.root)])
    lines: dict[str, list[str]] = {}
    found: set[Finding] = set()
    for diagnostic in result.diagnostics:
        path = Path(diagnostic.path)
        relative = (path if path.is_absolute() else Path.cwd() / path).resolve().relative_to(copy.root.resolve())
        name = relative.as_posix()
        if name not in lines:
            lines[name] = (copy.root / name).read_text(encoding="utf-8").splitlines()
        line = diagnostic.span.line
        text = lines[name][line - 1].strip() if 0 < line <= len(lines[name]) else ""
        original, origin = copy.origin.get(name, (name, None))
        mapped = line if origin is None else origin[line - 1] if 0 < line <= len(origin) else None
        where = "" if (original, mapped) == (name, line) else f"{name}:{line}"
        found.add(Finding(original, mapped, diagnostic.code, text, where))
    return Analysis(found, list(result.internal_errors))


@dataclass
class Differences:
    lost: list[Finding]    # in the original's findings only
    gained: list[Finding]  # in the transformed copy's findings only

    def __bool__(self) -> bool:
        return bool(self.lost or self.gained)

    def by_file(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for label, items in (("lost", self.lost), ("gained", self.gained)):
            for finding in items:
                at = f"line {finding.line}" if finding.line is not None else "a generated line"
                moved = f" (at {finding.where})" if finding.where else ""
                out.setdefault(finding.path, []).append(f"  {label} {finding.code} at {at}{moved}: {finding.text}")
        return {path: sorted(lines) for path, lines in sorted(out.items())}

    def report(self) -> str:
        return "\n".join(f"{path}:\n" + "\n".join(lines) for path, lines in self.by_file().items())


def compare(original: Analysis, transformed: Analysis) -> Differences:
    keys = {(f.path, f.line, f.code) for f in transformed.findings}
    before = {(f.path, f.line, f.code) for f in original.findings}
    def order(finding: Finding) -> tuple:
        return finding.path, finding.line or 0, finding.code, finding.where

    return Differences(sorted((f for f in original.findings if (f.path, f.line, f.code) not in keys), key=order),
                       sorted((f for f in transformed.findings if (f.path, f.line, f.code) not in before), key=order))
