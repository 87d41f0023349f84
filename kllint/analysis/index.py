"""Modules and the project index: what each module defines and imports, resolved across the
project so that helpers in other modules can be followed (design.md, item 6).

The project root of a file is the folder above its top-level package (the chain of folders with
`__init__.py`), so `from pkg.mod import f` resolves whichever files were named on the command
line: a file's findings never depend on the other files of the run.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # libcst is imported only when a module is analysed
    import ast

    from kllint.analysis.module import ModuleInfo


def display_path(path: Path) -> str:
    """A path as shown to users: relative to the working directory when below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def package_root(path: Path) -> tuple[Path, str]:
    """The import root of `path` and its dotted module name (folders with __init__.py)."""
    root, packages = package_folders(path.parent)
    parts = [*packages, path.stem] if path.name != "__init__.py" else list(packages)
    return root, ".".join(parts)


_FOLDERS: dict[Path, tuple[Path, tuple[str, ...]]] = {}
_GIVEN: dict[tuple[str, Path], tuple[Path, tuple[str, ...]]] = {}
_REAL: dict[Path, tuple[Path, tuple[str, ...]]] = {}  # by resolved folder
_HAS_INIT: dict[Path, bool] = {}


def forget_package_roots() -> None:
    """Drop the memoised package roots (a new run may see new `__init__.py` files)."""
    _FOLDERS.clear()
    _GIVEN.clear()
    _REAL.clear()
    _HAS_INIT.clear()


def package_folders(folder: Path) -> tuple[Path, tuple[str, ...]]:
    """The import root above `folder` and the package names from it down to `folder` (memoised
    per folder: resolving paths is the costly part of a warm run)."""
    given = (os.getcwd(), folder)  # as given (cheaper than making it absolute): seen before?
    known = _GIVEN.get(given)
    if known is not None:
        return known
    folder = Path(os.path.abspath(folder))  # a relative folder means another one after a chdir
    known = _FOLDERS.get(folder)
    if known is None:
        known = _FOLDERS[folder] = _package_folders_of_real(folder.resolve())
    _GIVEN[given] = known
    return known


def _package_folders_of_real(current: Path) -> tuple[Path, tuple[str, ...]]:
    """`package_folders` of a resolved folder, from that of its parent (both memoised: the
    folders of a project share their parents)."""
    known = _REAL.get(current)
    if known is None:
        # a folder inside a package is a subpackage even without `__init__.py` (PEP 420: a
        # forgotten or deliberately omitted one), so its modules keep their absolute names
        parent = current.parent
        if not (_has_init(current) or _has_init(parent)):
            known = (current, ())
        elif parent == current:
            known = (current, (current.name,))
        else:
            root, names = _package_folders_of_real(parent)
            known = (root, (*names, current.name))
        _REAL[current] = known
    return known


def _has_init(folder: Path) -> bool:
    known = _HAS_INIT.get(folder)
    if known is None:
        known = _HAS_INIT[folder] = os.path.isfile(folder / "__init__.py")  # False where it cannot be looked up
    return known


NAMESPACE_LEVELS = 3


def _namespace_root(path: Path, root: Path) -> Path | None:
    """The import root of a file in a namespace folder (no `__init__.py`, PEP 420) below a
    package (`pkg/sub/ns/mod.py` with `pkg/sub/__init__.py`): the root of the nearest enclosing
    package at most NAMESPACE_LEVELS folders up; None when the file's own folder is a package
    or no package encloses it."""
    folder = Path(os.path.abspath(path.parent)).resolve()
    if Path(os.path.abspath(root)).resolve() != folder:
        return None
    current = folder
    for _ in range(NAMESPACE_LEVELS):
        if current.parent == current:
            return None
        current = current.parent
        if os.path.isfile(current / "__init__.py"):
            return package_folders(current)[0]
    return None


class ProjectIndex:
    """Resolves dotted module names to parsed modules under the project roots (cached)."""

    MAX_MODULE_BYTES = 2 * 1024 * 1024
    MAX_MODULES = 250

    def __init__(self) -> None:
        # (file, dotted name) -> module: a file reached under two names (`pkg.helper` from one
        # importer, `helper` from another) is two modules, whose relative imports differ; one
        # shared module would make a file's findings depend on which importer came first
        self._by_path: dict[tuple[Path, str], ModuleInfo | None] = {}
        self._at_path: dict[Path, ModuleInfo] = {}  # file -> a module loaded from it (same text)
        self._next_id = 1
        self._tracked: dict[Path, bool] | None = None
        self._lookups: dict[tuple, tuple] = {}
        self.memo: dict[str, dict] = {}  # what the analysis keeps per index (the callers' runs)

    def module_for_file(self, text: str, path: Path, display: str, outline: ast.Module | None = None,
                        from_disk: bool = False) -> ModuleInfo:
        """The entry module (`outline` its `ast` tree if parsed already). `from_disk`: `text` is
        the file's content on disk, so the entry and the module other files of the run import
        from it are one module (parsed once, its definitions parsed once), when they are shown
        under the same name; otherwise it is always built afresh from `text`.

        Raises:
            SyntaxError: Python rejects the text.
        """
        from kllint.analysis.module import ModuleInfo

        if len(self._by_path) > self.MAX_MODULES:  # bounded memory over a long run; rebuilt on demand
            self._by_path.clear()
            self._at_path.clear()
            self.memo.clear()  # what was kept refers to the modules dropped
        exists = os.path.exists(path)  # os.path: False, not PermissionError, in a folder that cannot be searched
        root, name = package_root(path) if exists else (path.parent, path.stem)
        above = _namespace_root(path, root) if exists else None
        if above is not None:
            dotted = ".".join(path.resolve().relative_to(above).with_suffix("").parts)
            if dotted.endswith(".__init__"):
                dotted = dotted[: -len(".__init__")]
            if dotted != name and "from ." in text:  # relative imports count from the real package
                name = dotted
        self._roots = [root] + ([above] if above is not None else [])
        src = root / "src"
        if os.path.isdir(src):
            self._roots.append(src)
        shared = from_disk and display == display_path(path)
        key = (path.resolve(), name) if shared else None
        known = self._by_path.get(key) if key is not None else None
        if known is not None and known.text == text and known.display == display:
            return known
        info = ModuleInfo.build(text, path, display, name, file_id=0, outline=outline)
        if key is not None:
            self._by_path[key] = info
            self._at_path[key[0]] = info
        return info

    def outline_of(self, path: Path, text: str) -> ast.Module | None:
        """The `ast` tree of the module loaded from `path` when its text is `text` (a file the run
        checks after another file imported it need not be parsed again), else None."""
        if not self._at_path:  # nothing loaded yet: spare resolving the path
            return None
        try:
            module = self._at_path.get(path.resolve())
        except (OSError, RuntimeError):
            return None
        return module.outline if module is not None and module.text == text else None

    def module_at(self, path: Path) -> ModuleInfo | None:
        """The project module at `path` under the name its import root gives it (None when it
        cannot be read or parsed); its import root joins the roots imports are resolved in."""
        root, dotted = package_root(path)
        roots = getattr(self, "_roots", [])
        if root not in roots:
            self._roots = [*roots, root]
        return self._load_path(path, dotted)

    def loaded(self) -> list[ModuleInfo]:
        unique = {id(m): m for m in self._by_path.values() if m is not None}
        return list(unique.values())

    def resolve(self, dotted: str) -> tuple[ModuleInfo | None, str]:
        """The longest prefix of `dotted` that is a project module, and the remaining attribute path."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = self.load(".".join(parts[:cut]))
            if module is not None:
                return module, ".".join(parts[cut:])
        return None, dotted

    def load(self, dotted: str) -> ModuleInfo | None:
        """The project module `dotted` under the current roots (None if there is none)."""
        key = (tuple(getattr(self, "_roots", ())), dotted)
        found = self._lookups.get(key)
        if found is None:
            found = self._lookups[key] = self._find(key[0], dotted)
        probes, path = found
        if self._tracked is not None:
            self._tracked.update(probes)
        return self._load_path(path, dotted) if path is not None else None

    @staticmethod
    def _find(roots: tuple[Path, ...], dotted: str) -> tuple[tuple[tuple[Path, bool], ...], Path | None]:
        """The files probed for `dotted` (each with whether it exists) and the one found."""
        probes: list[tuple[Path, bool]] = []
        for root in roots:
            base = root.joinpath(*dotted.split("."))
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                exists = os.path.isfile(candidate)
                probes.append((candidate, exists))
                if exists:
                    return tuple(probes), candidate
        return tuple(probes), None

    def begin_tracking(self) -> None:
        """Start recording the module files `load` looks at (for the result cache, kllint.pipeline.cache)."""
        self._tracked = {}

    def tracked_paths(self) -> dict[Path, bool]:
        """Every candidate file `load` probed since `begin_tracking()`, found or not (cache hits too)."""
        return dict(self._tracked or {})

    def code_digest(self, path: Path) -> str | None:
        """The code digest (`kllint.pipeline.source.code_digest`) of the module `load` found at `path`;
        None when it found none there or could not load it."""
        module = self._at_path.get(path)
        return module.code_digest() if module is not None else None

    def _load_path(self, path: Path, dotted: str) -> ModuleInfo | None:
        if (path, dotted) in self._by_path:
            return self._by_path[path, dotted]
        probed = path
        try:
            path = path.resolve()
        except (OSError, RuntimeError):  # a symbolic link loop
            self._by_path[probed, dotted] = None
            return None
        if (path, dotted) in self._by_path:
            self._by_path[probed, dotted] = self._by_path[path, dotted]
            return self._by_path[path, dotted]
        from kllint.analysis.module import ModuleInfo

        info: ModuleInfo | None = None
        try:
            from kllint.nesting import too_deeply_nested
            from kllint.pipeline.source import decode_source, read_regular

            # a regular file of at most MAX_MODULE_BYTES (never a FIFO or a device), PEP 263
            text = decode_source(read_regular(path, self.MAX_MODULE_BYTES))
            info = ModuleInfo.build(text, path, display_path(path), dotted, file_id=self._next_id)
            self._next_id += 1
            if too_deeply_nested(text, info.outline) is not None:  # as a checked file (kllint.nesting)
                info = None
        except (OSError, UnicodeDecodeError, LookupError, SyntaxError, ValueError, RecursionError, MemoryError):
            info = None
        self._by_path[path, dotted] = self._by_path[probed, dotted] = info
        if info is not None:
            self._at_path[path] = self._at_path[probed] = info
        return info


class IndexPerRoot:
    """The `ProjectIndex` of the import root being checked: files of one root share one index
    (their helpers are parsed once), and the next root starts a fresh one, so that the modules
    kept never exceed those of one project (a worker of a nine-release audit: 345 MB -> 231 MB
    peak; `pipeline.parallel.chunks` hands out one root after another so that a worker rarely
    parses a root's helpers twice; docs/performance.md)."""

    def __init__(self) -> None:
        self._index: ProjectIndex | None = None
        self._root: Path | None = None

    def for_file(self, path: Path) -> ProjectIndex:
        """The index to analyse the file at `path` with."""
        root = package_root(path)[0]
        if self._index is None or root != self._root:
            self._index, self._root = ProjectIndex(), root
        return self._index

    def drop(self) -> None:
        """Start afresh (after an analysis was interrupted: nothing it shared is trusted again)."""
        self._index = None
