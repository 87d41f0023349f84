"""Which methods of a project class code outside the project may call.

A framework calls the methods its own base classes define (a trainer's `compute_loss`, a
module's `forward`): a method that overrides nothing from a base outside the project is called
only by the project itself, so the project's call sites tell how it runs. The bases of a class
are followed through the project (same module, then imports, as Python would find them) to the
first classes outside it. Those whose calls on subclasses are known leave every other method
alone (`torch.nn.Module` calls `forward`); any other outside base may call any public method.
"""
from __future__ import annotations

from pathlib import Path

from kllint.analysis.project.callers import ProjectModel, model_for
from kllint.analysis.project.files import project_root
from kllint.analysis.project.outlines import ModuleOutline, outline_module

# classes outside the project, by qualified name -> the methods they call on a subclass
KNOWN_BASES: dict[str, frozenset[str]] = {
    "object": frozenset(),
    "abc.ABC": frozenset(),
    "typing.Generic": frozenset(),
    "typing.Protocol": frozenset(),
    "torch.nn.Module": frozenset({"forward", "__call__"}),
    "torch.nn.modules.module.Module": frozenset({"forward", "__call__"}),
}
_MAX_CLASSES = 32


def framework_may_call(path: Path, text: str, cls: str, method: str) -> bool:
    """Whether code outside the project may call `method` of class `cls`, defined in the module
    at `path` (whose text is `text`): its class or a project base derives from a class outside
    the project that is not known to leave `method` alone, or a base cannot be read."""
    resolved = path.resolve()
    model = model_for(project_root(resolved.parent)) if resolved.is_file() else None
    outline = model.outline(resolved) if model is not None else outline_module(resolved, text, "")
    if outline is None:
        return True
    outside: set[str | None] = set()
    _outside_bases(model, outline, cls, outside, set())
    return any(base is None or method in KNOWN_BASES.get(base, frozenset({method})) for base in outside)


def _outside_bases(model: ProjectModel | None, outline: ModuleOutline, cls: str, found: set[str | None],
                   seen: set[tuple[Path, str]]) -> None:
    """Add to `found` the qualified names of the classes outside the project that `cls` derives
    from (None for a base that cannot be read)."""
    if (outline.path, cls) in seen:
        return
    seen.add((outline.path, cls))
    if cls not in outline.classes or len(seen) > _MAX_CLASSES:
        found.add(None)
        return
    for base in outline.classes[cls][1]:
        head = base.split(".")[0]
        if base in outline.classes and head not in outline.bindings:
            _outside_bases(model, outline, base, found, seen)  # a class of the same module
            continue
        target = model.resolve(outline, base) if model is not None else None
        if target is not None:
            other = model.outline(target[0])
            if other is not None:
                _outside_bases(model, other, target[1], found, seen)
            else:
                found.add(None)
            continue
        bound = outline.bindings.get(head)
        if bound is None:
            found.add(base)  # a builtin (`object`, `Exception`)
        else:
            module, attribute = bound
            prefix = f"{module}.{attribute}" if attribute else module
            found.add(".".join([prefix, *base.split(".")[1:]]))
