"""Whether the modules of a corpus copy import, and what names they define (in a subprocess).

The moved copy must import wherever the original does, with the same top-level names: the
proof on the corpus that `move_definitions` kept the program (the unit tests run tiny ones).
Modules whose original does not import here (a library not installed) are left out.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from metamorphic.corpus import Copy

_PROBE = r"""
import importlib, json, sys
found = {}
for root, dotted in json.load(sys.stdin):
    before = set(sys.modules)
    sys.path.insert(0, root)
    try:
        module = importlib.import_module(dotted)
        found[dotted] = sorted(name for name in vars(module) if not name.startswith("__"))
    except BaseException as error:  # a module that exits or fails: its error, not the run's
        found[dotted] = f"{type(error).__name__}: {error}"
    finally:
        sys.path.remove(root)
        for name in set(sys.modules) - before:
            if (getattr(sys.modules[name], "__file__", None) or "").startswith(root):
                del sys.modules[name]
print(json.dumps(found))
"""


def module_of(copy: Copy, name: str) -> tuple[str, str]:
    """(import root, dotted name) of the file `name` of `copy`."""
    path = copy.root / name
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while folder != copy.root and (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return str(folder), ".".join(parts)


def imported(copy: Copy, names: list[str], timeout: float = 600) -> dict[str, list[str] | str]:
    """For each file of `names`: its module's top-level names, or the error importing it."""
    modules = [module_of(copy, name) for name in names]
    done = subprocess.run([sys.executable, "-c", _PROBE], input=json.dumps(modules), capture_output=True,
                          text=True, timeout=timeout, cwd=copy.root)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: found[dotted] for name, (_, dotted) in zip(names, modules)}
