"""Import one function of the user's code for `kllint gradcheck module:function`.

This executes the user's module. To keep that to the module itself:

* the target's parent packages are created *bare*: their `__init__.py` files are not run
  (verl's and OpenRLHF's package inits pull in Ray, vLLM, DeepSpeed, ...);
* with `stub_missing` (the default), a third-party top-level package that is not installed
  (e.g. `ray`, `transformers`, `omegaconf`, `deepspeed`) is replaced by a permissive stub
  module, so that training frameworks can be imported without their heavy dependencies.
  A stub's attributes are stub classes that can be subclassed, called (returning a stub, or
  their argument when used as a bare decorator), indexed and used in annotations. A KL
  helper that actually *calls* into a stubbed package fails at check time with an error
  that names the stub.

Everything is undone when the `load_function` context exits: `sys.path`, the import hooks,
the stubs and the user's modules are removed from `sys.modules` (modules of installed
third-party packages imported on the way stay, as after any import).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from kllint.gradcheck.errors import GradcheckError, MissingFrameworkError

MAX_STUBS = 40
_FRAMEWORK_PACKAGES = {"torch": "torch", "jax": "jax", "jaxlib": "jax"}


class _StubMeta(type):
    """Metaclass of stub classes: every attribute, call or subscription yields another stub."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]  # used as a bare decorator: keep the decorated function
        return _stub_class(f"{cls.__qualname__}()")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __bool__(cls) -> bool:
        return False

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls


def _stub_class(qualname: str) -> Any:
    return _StubMeta(qualname.rsplit(".", 1)[-1], (), {"__module__": "kllint.gradcheck.stub", "__qualname__": qualname})


class StubModule(types.ModuleType):
    """A module standing in for a missing third-party package; see the module doc."""

    __kllint_stub__ = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{self.__name__}.{name}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.tops: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in self.tops:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


@dataclass(frozen=True)
class LoadedFunction:
    """The imported function, its module name and the stubbed top-level packages."""

    function: Callable[..., Any]
    module: str
    qualname: str
    stubbed: tuple[str, ...]


def parse_target(target: str) -> tuple[str, str]:
    """Split `module:function` (or `path/to/file.py:function`; `function` may be dotted).

    Raises:
        GradcheckError: no colon, or an empty part.
    """
    module, sep, qualname = target.rpartition(":")
    if not sep or not module or not qualname:
        raise GradcheckError(f"expected MODULE:FUNCTION (e.g. verl.trainer.ppo.core_algos:kl_penalty), got {target!r}")
    return module, qualname


def _bare_parents(module: str, search: Sequence[str]) -> None:
    """Create the parent packages of `module` without running their `__init__.py`."""
    parts = module.split(".")
    path: Any = list(search) + [p for p in sys.path if p not in search]
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        existing = sys.modules.get(name)
        if existing is not None:
            path = getattr(existing, "__path__", None)
            if path is None:
                return
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.submodule_search_locations is None:
            return
        package = importlib.util.module_from_spec(spec)  # not executed: a bare package
        sys.modules[name] = package
        if i > 1:
            setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], package)
        path = spec.submodule_search_locations


def _resolve(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise GradcheckError(f"{module.__name__!r} has no attribute {qualname!r}") from None
    if not callable(obj):
        raise GradcheckError(f"{module.__name__}:{qualname} is not callable")
    return obj


@contextlib.contextmanager
def load_function(target: str, paths: Sequence[str] = (), stub_missing: bool = True) -> Iterator[LoadedFunction]:
    """Import `module:function` for the duration of the context (see the module doc).

    Args:
        target: `package.module:function` or `path/to/file.py:function`.
        paths: folders put in front of `sys.path` (`--path`).
        stub_missing: replace missing third-party top-level packages by stubs.

    Raises:
        GradcheckError: bad target, the module or function does not exist, or importing fails.
        MissingFrameworkError: the module needs torch or jax, which is not installed.
    """
    module_name, qualname = parse_target(target)
    search = [os.path.abspath(p) for p in paths]
    if module_name.endswith(".py"):
        file = os.path.abspath(module_name)
        if not os.path.isfile(file):
            raise GradcheckError(f"no such file: {module_name}")
        search.insert(0, os.path.dirname(file))
        module_name = os.path.splitext(os.path.basename(file))[0]
    top = module_name.split(".")[0]
    saved_path = list(sys.path)
    before = set(sys.modules)
    finder = _StubFinder()
    sys.path[:0] = [p for p in search if p not in sys.path[: len(search)]]
    sys.meta_path.insert(0, finder)

    def forget() -> None:
        for name in set(sys.modules) - before:
            if name.split(".")[0] == top or name.split(".")[0] in finder.tops:
                del sys.modules[name]

    try:
        module = None
        for _ in range(MAX_STUBS + 1):
            _bare_parents(module_name, search)
            try:
                module = importlib.import_module(module_name)
                break
            except ModuleNotFoundError as exc:
                missing = (exc.name or "").split(".")[0]
                if missing in _FRAMEWORK_PACKAGES:
                    raise MissingFrameworkError(_FRAMEWORK_PACKAGES[missing], f"imported by {module_name}") from exc
                if not missing or missing == top or exc.name == module_name:
                    raise GradcheckError(f"cannot import {module_name!r}: {exc} (use --path to add its folder)") from exc
                if not stub_missing:
                    raise GradcheckError(f"importing {module_name!r} needs {missing!r}, which is not installed "
                                         "(use --stub-missing to replace it by a stub)") from exc
                if missing in finder.tops or len(finder.tops) >= MAX_STUBS:
                    raise GradcheckError(f"cannot import {module_name!r} even with stubs: {exc}") from exc
                finder.tops.append(missing)
                forget()
            except GradcheckError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's module failed at import time
                stubs = f" (stubbed: {', '.join(finder.tops)})" if finder.tops else ""
                raise GradcheckError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}{stubs}") from exc
        if module is None:
            raise GradcheckError(f"cannot import {module_name!r}")
        yield LoadedFunction(function=_resolve(module, qualname), module=module_name, qualname=qualname,
                             stubbed=tuple(finder.tops))
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        sys.path[:] = saved_path
        forget()
