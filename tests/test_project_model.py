"""The project model (`kllint.analysis.project`): the project root of a file, and the callers of
a module's functions in the project's other modules, resolved through imports to files."""
from __future__ import annotations

from pathlib import Path
from textwrap import dedent

from kllint.analysis.project import callers as callers_module
from kllint.analysis.project.callers import callers_of, upstream_files
from kllint.analysis.project.bases import framework_may_call
from kllint.analysis.project.files import project_files, project_root


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text))


def _callers(path: Path, names: set[str]) -> set[tuple[str, str, str, int]]:
    project_root.cache_clear()
    project_files.cache_clear()
    callers_module.model_for.cache_clear()
    found = callers_of(path, names)
    return {(c.path.name, c.cls, c.name, c.level) for c in found.found}


def test_project_root_is_the_nearest_marker(tmp_path):
    _write(tmp_path, {"pyproject.toml": "", "pkg/__init__.py": "", "pkg/sub/mod.py": ""})
    project_root.cache_clear()
    assert project_root((tmp_path / "pkg" / "sub").resolve()) == tmp_path.resolve()


def test_project_root_without_a_marker_is_the_import_root(tmp_path):
    _write(tmp_path, {"outer/pkg/__init__.py": "", "outer/pkg/mod.py": ""})
    project_root.cache_clear()
    assert project_root((tmp_path / "outer" / "pkg").resolve()) == (tmp_path / "outer").resolve()


def test_callers_through_every_import_form(tmp_path):
    _write(tmp_path, {
        "setup.py": "",
        "pkg/__init__.py": "",
        "pkg/losses.py": "def penalty(a, b):\n    return a - b\n\n\ndef unused():\n    pass\n",
        "pkg/direct.py": "from pkg.losses import penalty\n\ndef step(x, y):\n    return penalty(x, y)\n",
        "pkg/aliased.py": "import pkg.losses as L\n\ndef step(x, y):\n    return L.penalty(x, y)\n",
        "pkg/relative.py": "from . import losses\n\ndef step(x, y):\n    return losses.penalty(x, y)\n",
        "pkg/starred.py": "from pkg.losses import *\n\ndef step(x, y):\n    return penalty(x, y)\n",
        "pkg/inner.py": "def step(x, y):\n    from .losses import penalty\n    return penalty(x, y)\n",
        "pkg/unrelated.py": "def penalty(a, b):\n    return a\n\ndef step(x, y):\n    return penalty(x, y)\n",
    })
    found = _callers((tmp_path / "pkg" / "losses.py"), {"penalty"})
    assert found == {(name, "", "step", 1) for name in ("direct.py", "aliased.py", "relative.py", "starred.py", "inner.py")}


def test_a_module_of_the_same_name_elsewhere_is_not_a_caller(tmp_path):
    _write(tmp_path, {
        "pyproject.toml": "",
        "a/objective.py": "class Objective:\n    def forward(self, x):\n        return x\n",
        "a/train.py": "from objective import Objective\n\ndef train(x):\n    return Objective()(x)\n",
        "b/objective.py": "class Objective:\n    def forward(self, x):\n        return x\n",
        "b/train.py": "from objective import Objective\n\ndef train(x):\n    return Objective()(x)\n",
    })
    assert _callers(tmp_path / "a" / "objective.py", {"Objective"}) == {("train.py", "", "train", 1)}
    found = callers_of((tmp_path / "a" / "objective.py"), {"Objective"})
    assert {c.path.parent.name for c in found.found} == {"a"}


def test_callers_of_callers_and_methods_using_a_stored_instance(tmp_path):
    _write(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "",
        "pkg/loss.py": "class Loss:\n    def __call__(self, x):\n        return x\n",
        "pkg/trainer.py": dedent("""\
            from pkg.loss import Loss


            class Trainer:
                def __init__(self):
                    self.loss_fn = Loss()

                def step(self, x):
                    return self.loss_fn(x)

                def fit(self, xs):
                    for x in xs:
                        self.step(x)

                def log(self):
                    return 0
            """),
        "pkg/main.py": "from pkg.trainer import Trainer\n\nif __name__ == '__main__':\n    Trainer().fit([1])\n",
    })
    found = _callers(tmp_path / "pkg" / "loss.py", {"Loss"})
    assert ("trainer.py", "Trainer", "__init__", 1) in found
    assert ("trainer.py", "Trainer", "step", 1) in found  # reads the attribute `__init__` stored the loss in
    assert ("trainer.py", "Trainer", "fit", 2) in found  # calls `self.step`
    assert ("main.py", "", "<module>", 2) in found  # builds the class
    assert not any(name == "log" for _, _, name, _ in found)


def test_a_search_cut_by_the_limit_says_so(tmp_path, monkeypatch):
    files = {"pyproject.toml": "", "core.py": "def kl(a):\n    return a\n"}
    files.update({f"user{i}.py": "from core import kl\n\ndef f(x):\n    return kl(x)\n" for i in range(5)})
    _write(tmp_path, files)
    monkeypatch.setattr(callers_module, "MAX_CALLERS", 3)
    project_root.cache_clear()
    project_files.cache_clear()
    callers_module.model_for.cache_clear()
    found = callers_of(tmp_path / "core.py", {"kl"})
    assert len(found.found) == 3 and "more than 3 callers" in found.truncated


def _fresh_model() -> None:
    project_root.cache_clear()
    project_files.cache_clear()
    callers_module.model_for.cache_clear()


def test_an_installed_package_is_its_own_project(tmp_path):
    # a folder of installed distributions under a folder with a project marker (a tool's checkout)
    _write(tmp_path, {".git/HEAD": "", "lib/site/dep-1.0.dist-info/METADATA": "",
                      "lib/site/dep/__init__.py": "", "lib/site/dep/sub/mod.py": "", "lib/site/other/x.py": ""})
    _fresh_model()
    assert project_root((tmp_path / "lib" / "site" / "dep" / "sub").resolve()) == (tmp_path / "lib/site/dep").resolve()
    assert project_root(tmp_path.resolve()) == tmp_path.resolve()


def test_upstream_files_of_several_checked_modules_in_one_search(tmp_path):
    _write(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "",
        "pkg/kl_terms.py": "def kl_penalty(a, b):\n    return a - b\n",
        "pkg/ratio.py": "def kl_ratio(a, b):\n    return a / b\n",
        "pkg/loss.py": "from pkg.kl_terms import kl_penalty\n\ndef total(x, y):\n    return kl_penalty(x, y)\n",
        "scripts/train.py": "from pkg.loss import total\n\ntotal(1, 2)\n",
        "scripts/other.py": "from pkg.ratio import kl_ratio\n\nkl_ratio(1, 2)\n",
        "scripts/unrelated.py": "print(1)\n",
    })
    _fresh_model()
    checked = [tmp_path / "pkg/kl_terms.py", tmp_path / "pkg/ratio.py", tmp_path / "pkg/loss.py"]
    upstream, notes = upstream_files(checked, {p.resolve() for p in checked})
    # the checked `loss.py` is no context file, but its caller is (a level further up)
    assert [p.relative_to(tmp_path.resolve()).as_posix() for p in upstream] == ["scripts/other.py", "scripts/train.py"]
    assert notes == []


def test_a_search_reading_too_many_modules_says_so(tmp_path, monkeypatch):
    files = {"pyproject.toml": "", "core.py": "def kl(a):\n    return a\n"}
    files.update({f"user{i}.py": "from core import kl\n\ndef f(x):\n    return kl(x)\n" for i in range(5)})
    _write(tmp_path, files)
    monkeypatch.setattr(callers_module, "MAX_EXAMINED", 2)
    _fresh_model()
    upstream, notes = upstream_files([tmp_path / "core.py"], {(tmp_path / "core.py").resolve()})
    assert len(upstream) <= 2
    assert len(notes) == 1 and "more than 2 modules that may call them" in notes[0]


def test_names_reexported_by_a_package_resolve_to_their_definitions(tmp_path):
    _write(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "from pkg.base import TrainerBase\nfrom .losses import penalty\n",
        "pkg/base.py": "class TrainerBase:\n    def fit(self):\n        pass\n",
        "pkg/losses.py": "def penalty(a, b):\n    return a - b\n",
        "pkg/trainer.py": "from pkg import TrainerBase, penalty\n\n\nclass Trainer(TrainerBase):\n"
                          "    def compute_kl(self, x, y):\n        return penalty(x, y)\n",
    })
    _fresh_model()
    # a caller through the package's re-export
    assert ("trainer.py", "Trainer", "compute_kl", 1) in _callers(tmp_path / "pkg/losses.py", {"penalty"})
    # a base re-exported by the package is read where it is defined: nothing outside the project
    # derives from it, so only the project calls `compute_kl`
    trainer = tmp_path / "pkg/trainer.py"
    assert not framework_may_call(trainer, trainer.read_text(), "Trainer", "compute_kl")
