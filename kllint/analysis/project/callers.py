"""Who calls into a module from the rest of the project, and who calls those in turn.

The callers of a module are the units (functions, methods, module-level code) of the project's
other modules that read one of its top-level definitions through their imports (`f(...)`,
`mod.f(...)`, `Cls(...)`, `from pkg import *`), resolved to files the way Python would find
them from the reading module. A caller that stores what it read on `self`
(`self.loss_fn = PolicyLoss(...)`) brings in the methods of its class that read that attribute.
Their callers follow, in the same module and across modules, for `MAX_LEVELS` levels: the
entry points that run the module's code with values its callers computed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from kllint.analysis.index import package_root
from kllint.analysis.project.files import project_files, project_root, read_text
from kllint.analysis.project.outlines import MODULE_UNIT, ModuleOutline, Unit, outline_module

MAX_LEVELS = 3
MAX_CALLERS = 32
MAX_REEXPORTS = 4  # modules a name is followed through (`pkg/__init__.py` importing it from `pkg.mod`)
MAX_EXAMINED = 500  # modules read in one search for callers: a bound for a pre-commit run
_GENERATION = [0]  # bumped by each run: the word indexes look at the files again
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Caller:
    """A unit of another module that calls into the checked one (`level` 1), or calls such a unit
    (`level` 2, ...)."""

    path: Path
    cls: str
    name: str
    line: int
    level: int


@dataclass(frozen=True)
class Callers:
    """The callers of one module, nearest first, and whether a limit cut the search."""

    found: tuple[Caller, ...]
    truncated: str = ""  # why the list is incomplete (`-v` says so), else ""


class ProjectModel:
    """The modules of one project, their outlines and an index of the words each file holds."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = project_files(root)
        self._index: dict[str, list[int]] = {}
        self._generation = -1
        self._words: dict[Path, tuple[str, frozenset[str]]] = {}
        self._resolved: dict[int, tuple[ModuleOutline, dict[str, tuple[Path, str] | None]]] = {}
        self._outlines: dict[Path, tuple[str, ModuleOutline | None]] = {}
        self._roots: dict[Path, tuple[Path, ...]] = {}

    # -- the files -------------------------------------------------------------------------
    def files_with(self, words: frozenset[str]) -> list[Path]:
        """The project files, in walk order, holding one of `words` as an identifier (in code,
        strings or comments: the outline tells a real use), from an index of every file's words
        built once per run (`refresh_models`) from the texts, read again only when changed."""
        if self._generation != _GENERATION[0]:
            self._index = self._word_index()
            self._generation = _GENERATION[0]
        found: set[int] = set()
        for word in words:
            found.update(self._index.get(word, ()))
        return [self.files.paths[position] for position in sorted(found)]

    def _word_index(self) -> dict[str, list[int]]:
        index: dict[str, list[int]] = {}
        for position, path in enumerate(self.files.paths):
            text = read_text(path)
            if text is None:
                continue
            known = self._words.get(path)
            if known is None or known[0] is not text:
                known = self._words[path] = (text, frozenset(_IDENTIFIER.findall(text)))
            for word in known[1]:
                index.setdefault(word, []).append(position)
        return index

    def outline(self, path: Path) -> ModuleOutline | None:
        text = read_text(path)
        if text is None:
            return None
        known = self._outlines.get(path)
        if known is not None and known[0] is text:
            return known[1]
        outline = outline_module(path, text, package_root(path)[1])
        self._outlines[path] = (text, outline)
        return outline

    def _import_roots(self, path: Path) -> tuple[Path, ...]:
        folder = path.parent
        roots = self._roots.get(folder)
        if roots is None:
            found = [package_root(path)[0], self.root, self.root / "src"]
            roots = self._roots[folder] = tuple(dict.fromkeys(r for r in found if r.is_dir()))
        return roots

    # -- resolution ------------------------------------------------------------------------
    def resolve(self, outline: ModuleOutline, name: str) -> tuple[Path, str] | None:
        """The file and top-level name a dotted name read in a module stands for (`mod.f` ->
        (mod.py, "f")), through the module's imports; None when it names nothing of the project
        (memoised per outline: a search asks for every name every unit reads)."""
        known = self._resolved.get(id(outline))
        if known is None or known[0] is not outline:
            known = self._resolved[id(outline)] = (outline, {})
        answers = known[1]
        if name not in answers:
            answers[name] = self._reexported(self._resolve(outline, name))
        return answers[name]

    def _reexported(self, found: tuple[Path, str] | None) -> tuple[Path, str] | None:
        """Where a name a module imports, but does not define, comes from (a package's
        `__init__.py` re-exporting `from .losses import PolicyLoss`), through `MAX_REEXPORTS`
        modules at most; the module itself when it defines the name or cannot say."""
        for _ in range(MAX_REEXPORTS):
            outline = self.outline(found[0]) if found is not None else None
            if outline is None or found[1] in outline.definitions or found[1] not in outline.bindings:
                return found
            further = self._resolve(outline, found[1])
            if further is None or further == found:
                return found
            found = further
        return found

    def _resolve(self, outline: ModuleOutline, name: str) -> tuple[Path, str] | None:
        parts = name.split(".")
        roots = self._import_roots(outline.path)
        bound = outline.bindings.get(parts[0])
        if bound is None:
            for module in outline.star:
                path = _module_file(module, roots)
                found = self.outline(path) if path is not None else None
                if found is not None and parts[0] in found.definitions:
                    return path, parts[0]
            return None
        module, attribute = bound
        rest = parts[1:]
        if attribute is not None:
            submodule = _module_file(f"{module}.{attribute}" if module else attribute, roots)
            if submodule is None:
                path = _module_file(module, roots)
                return (path, attribute) if path is not None else None
            module = f"{module}.{attribute}" if module else attribute
        # the longest module prefix of `module.rest`, then the attribute after it
        for cut in range(len(rest), -1, -1):
            candidate = ".".join([module, *rest[:cut]])
            path = _module_file(candidate, roots)
            if path is not None:
                return (path, rest[cut]) if cut < len(rest) else None
        return None


@lru_cache(maxsize=65536)
def _module_file(dotted: str, roots: tuple[Path, ...]) -> Path | None:
    if not dotted:
        return None
    for root in roots:
        base = root.joinpath(*dotted.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


@lru_cache(maxsize=16)
def model_for(root: Path) -> ProjectModel:
    return ProjectModel(root)


def refresh_models() -> None:
    """Have the project models look at their files again (a new run may see edited ones)."""
    _GENERATION[0] += 1


def callers_of(path: Path, names: Iterable[str], levels: int = MAX_LEVELS) -> Callers:
    """The callers, in its project, of the top-level functions and classes `names` of the module
    at `path`, nearest first, up to `levels` (1: the units reading them)."""
    path = path.resolve()
    model = model_for(project_root(path.parent))
    target = model.outline(path)
    wanted_names = set(names) & target.definitions if target is not None else set()
    if not wanted_names:
        return Callers(())
    return _search(model, {path: wanted_names}, {path}, MAX_CALLERS, levels)


def _search(model: ProjectModel, wanted: dict[Path, set[str]], targets: set[Path], limit: int,
            levels: int = MAX_LEVELS) -> Callers:
    """The units reading the wanted (file, names), then their callers, for `levels` levels;
    stops at `limit` callers or after reading `MAX_EXAMINED` modules that may call (and says so)."""
    found: dict[tuple[Path, str, str], Caller] = {}
    budget = [MAX_EXAMINED]
    for level in range(1, levels + 1):
        added = _readers(model, wanted, targets, level, found, budget)
        if len(found) >= limit:
            return Callers(tuple(sorted(found.values(), key=_order))[:limit],
                           f"more than {limit} callers in the project")
        if budget[0] < 0:
            return Callers(tuple(sorted(found.values(), key=_order)),
                           f"more than {MAX_EXAMINED} modules that may call them")
        if not added:
            break
        wanted = {}
        for caller in added:
            if caller.name == MODULE_UNIT:
                continue
            names = wanted.setdefault(caller.path, set())
            # a function is read by its name; a method through its class (`Cls(...)` elsewhere)
            # or, in its class, on `self`
            names.update((caller.cls, f"{caller.cls}.{caller.name}") if caller.cls else (caller.name,))
    return Callers(tuple(sorted(found.values(), key=_order)))


def _order(caller: Caller) -> tuple:
    return caller.level, str(caller.path), caller.line


def _readers(model: ProjectModel, wanted: dict[Path, set[str]], targets: set[Path], level: int,
             found: dict[tuple[Path, str, str], Caller], budget: list[int]) -> list[Caller]:
    """The units that read a wanted (file, name) pair, not yet found; in the module of a wanted
    method's class, the units calling it on `self` or through the class. A unit of a module among
    `targets` is a caller only of the other modules' names (its own module is analysed anyway).
    Each module read spends one of `budget` (below zero: the search was cut)."""
    added: list[Caller] = []

    def add(path: Path, unit: Unit) -> None:
        key = (path, unit.cls, unit.name)
        if key not in found:
            found[key] = caller = Caller(path, unit.cls, unit.name, unit.line, level)
            added.append(caller)

    candidates: set[Path] = set(wanted)
    words = frozenset(name for names in wanted.values() for name in names if "." not in name)
    if words:
        candidates.update(model.files_with(words))
    for module_path in sorted(candidates):
        reading = wanted if module_path not in targets else {
            path: names for path, names in wanted.items() if path != module_path}
        if not reading:
            continue
        budget[0] -= 1
        if budget[0] < 0:
            break
        outline = model.outline(module_path)
        if outline is None:
            continue
        for unit in outline.units:
            if _reads_wanted(model, outline, unit, reading):
                add(module_path, unit)
                for attribute, reads in unit.self_stores.items():
                    if unit.cls and any(_resolves_to(model, outline, name, reading) for name in reads):
                        for other in outline.units:  # the methods using what it stored
                            if other.cls == unit.cls and attribute in other.self_reads:
                                add(module_path, other)
    return added


def _reads_wanted(model: ProjectModel, outline: ModuleOutline, unit: Unit, wanted: dict[Path, set[str]]) -> bool:
    local = wanted.get(outline.path, ())
    for name in unit.reads:
        head = name.split(".")[0]
        if head in local and head not in outline.bindings:
            return True  # a function or class of the same module (`f(...)`, `Cls(...)`)
        if unit.cls and head == "self" and name.count(".") == 1 and f"{unit.cls}.{name[5:]}" in local:
            return True  # a method of its class, called on `self`
        if _resolves_to(model, outline, name, wanted):
            return True
    return False


def _resolves_to(model: ProjectModel, outline: ModuleOutline, name: str, wanted: dict[Path, set[str]]) -> bool:
    head = name.split(".")[0]
    if head not in outline.bindings and not outline.star:
        return False
    resolved = model.resolve(outline, name)
    return resolved is not None and resolved[1] in wanted.get(resolved[0], ())


def upstream_files(paths: Iterable[Path], checked: set[Path], vocab: Any = None) -> tuple[list[Path], list[str]]:
    """The project files, other than `paths`, holding units that call into the modules at `paths`
    (their top-level functions and classes with a unit that names a KL or the reference), directly
    or through other callers: what a run must also analyse when it checks `paths` without them.
    One search per project, for all its checked modules; none for a project whose files are all
    among `checked` (resolved paths). Also the notes of searches a limit cut (`MAX_CALLERS` for
    each checked module)."""
    from kllint.pipeline.prefilter import might_matter, names_matter

    per_root: dict[Path, list[Path]] = {}
    for path in paths:
        path = path.resolve()
        per_root.setdefault(project_root(path.parent), []).append(path)
    found: set[Path] = set()
    notes: list[str] = []
    for root, modules in per_root.items():
        model = model_for(root)
        if all(p.resolve() in checked for p in model.files.paths):
            continue
        wanted: dict[Path, set[str]] = {}
        for path in modules:
            text = read_text(path)
            if text is None or not might_matter(text, vocab):  # no unit of it can name a KL
                continue
            outline = model.outline(path)
            names = {unit.cls or unit.name for unit in outline.units
                     if unit.name != MODULE_UNIT and names_matter(unit.identifiers, vocab)} if outline else set()
            if names:
                wanted[path] = names
        if not wanted:
            continue
        callers = _search(model, wanted, set(wanted), MAX_CALLERS * len(wanted))
        found.update(caller.path.resolve() for caller in callers.found)
        if callers.truncated:
            notes.append(f"callers of the checked files in {root} searched in part: {callers.truncated}")
    return sorted(found - checked), notes
