"""Which single rename loses a finding: the reduction behind a metamorphic difference.

`blame(file, "locals")` renames one variable name at a time (`rename_locals(..., only={name})`)
in a copy of the file's unit (the file, or its top-level package, or a folder given) and
reports each name whose rename alone changes the file's findings: "the role is decided by the
local name `ref_lp`". Parameters likewise (`rename_parameters`, the calls' keywords following).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from metamorphic.corpus import Copy, Differences, analyse, compare, copy_corpus
from metamorphic.rename import Namer, identifiers, parameters_by_callee, rename_locals, rename_parameters


def unit_of(path: Path) -> Path:
    """The folder of the top-level package holding `path`, or `path` itself outside packages."""
    unit = path
    while (unit.parent / "__init__.py").is_file():
        unit = unit.parent
    return unit


def _rename(kind: str, source: str, callees: dict[str, set[str]], only: set[str] | None) -> tuple[str, set[str]]:
    namer = Namer("v" if kind == "locals" else "a", identifiers(source), by_name=kind != "locals")
    if kind == "locals":
        return rename_locals(source, namer, only), namer.asked
    return rename_parameters(source, namer, callees, only), namer.asked


def _copy(unit: Path, target: Path) -> Copy:
    if unit.is_dir():
        return copy_corpus(unit, target / unit.name)
    target.mkdir(parents=True)
    shutil.copyfile(unit, target / unit.name)
    return Copy(target, {unit.name: (unit.name, None)})


def blame(path: Path, kind: str, unit: Path | None = None) -> list[tuple[str, Differences]]:
    """(label, differences) for each name of `path` whose rename alone changes the findings of
    the unit (`kind`: "locals" or "parameters"), labelled "`name`". A difference of the full
    rename that no single rename makes is then explained by the names each of which, kept while
    all others are renamed, undoes it (any one of them is evidence enough), labelled
    "all but `name`"."""
    path = path.resolve()
    unit = (unit or unit_of(path)).resolve()
    relative = path.relative_to(unit).as_posix() if unit.is_dir() else path.name
    source = path.read_text(encoding="utf-8")
    callees: dict[str, set[str]] = {}
    for file in (unit.rglob("*.py") if unit.is_dir() else [unit]):
        for callee, names in parameters_by_callee(file.read_text(encoding="utf-8")).items():
            callees.setdefault(callee, set()).update(names)
    _, names = _rename(kind, source, callees, None)
    with tempfile.TemporaryDirectory() as folder:
        base = _copy(unit, Path(folder) / "base")
        before = analyse(base)
        runs = iter(range(10**6))

        def renamed(only: set[str]) -> Differences:
            copy = _copy(unit, Path(folder) / str(next(runs)))
            (copy.root / relative).write_text(_rename(kind, source, callees, only)[0], encoding="utf-8")
            return compare(before, analyse(copy))

        out = [(f"`{name}`", differences) for name in sorted(names) if (differences := renamed({name}))]
        explained = {_key(f) for _, d in out for f in d.lost + d.gained}
        full = renamed(set(names))
        if any(_key(f) not in explained for f in full.lost + full.gained):
            for name in sorted(names):
                undone = _undone(full, renamed(set(names) - {name}), explained)
                if undone:
                    out.append((f"all but `{name}`", undone))
        return out


def _key(finding) -> tuple:
    return finding.path, finding.line, finding.code


def _undone(full: Differences, partial: Differences, explained: set) -> Differences:
    """The differences of `full`, not in `explained`, that `partial` no longer has."""
    still = {_key(f) for f in partial.lost + partial.gained}
    return Differences([f for f in full.lost if _key(f) not in explained | still],
                       [f for f in full.gained if _key(f) not in explained | still])
