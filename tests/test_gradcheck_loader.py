"""`load_function`: bare parent packages, stubs for missing third-party packages, clean-up."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kllint.gradcheck.errors import GradcheckError
from kllint.gradcheck.loader import StubModule, load_function, parse_target

pytest.importorskip("torch")

MISSING = "kllint_test_missing_heavy_dep"


@pytest.fixture()
def fake_project(tmp_path: Path) -> Path:
    """`fakerl/` whose package init must never run, and a KL module needing a missing package."""
    pkg = tmp_path / "fakerl"
    (pkg / "algos").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('the package __init__ must not run')\n")
    (pkg / "algos" / "__init__.py").write_text("raise RuntimeError('the subpackage __init__ must not run')\n")
    (pkg / "algos" / "helpers.py").write_text("def sq(x):\n    return x * x\n")
    (pkg / "algos" / "kl.py").write_text(textwrap.dedent(f"""
        from typing import Optional
        import torch
        import {MISSING} as heavy
        from {MISSING}.models import PreTrainedModel
        from fakerl.algos.helpers import sq

        class Actor(PreTrainedModel):
            pass

        @heavy.remote
        def k2(logp, ref_logp):
            return 0.5 * sq(logp - ref_logp)

        def k3(logp: torch.Tensor, ref_logp: Optional[heavy.Tensor] = None, clamp: float = 20.0):
            log_ratio = (ref_logp - logp).clamp(-clamp, clamp)
            return log_ratio.exp() - 1 - log_ratio

        def uses_heavy(logp, ref_logp):
            return heavy.kl(logp, ref_logp)
        """))
    return tmp_path


def test_parse_target():
    assert parse_target("a.b:c") == ("a.b", "c")
    assert parse_target("a.b:C.m") == ("a.b", "C.m")
    with pytest.raises(GradcheckError, match="MODULE:FUNCTION"):
        parse_target("a.b.c")


def test_loads_with_stubs_and_cleans_up(fake_project: Path):
    path_before = list(sys.path)
    with load_function("fakerl.algos.kl:k2", [str(fake_project)]) as loaded:
        assert loaded.stubbed == (MISSING,)
        assert isinstance(sys.modules[MISSING], StubModule)
        import torch

        out = loaded.function(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 1.0]))
        assert out.tolist() == [0.5, 2.0]  # the stub decorator kept the function
    assert sys.path == path_before
    assert not any(name.split(".")[0] in ("fakerl", MISSING) for name in sys.modules)


def test_without_stubs_the_missing_package_is_named(fake_project: Path):
    with pytest.raises(GradcheckError, match=MISSING):
        with load_function("fakerl.algos.kl:k2", [str(fake_project)], stub_missing=False):
            pass
    assert "fakerl" not in sys.modules


@pytest.mark.parametrize("target, message", [
    ("fakerl.algos.kl:nope", "no attribute 'nope'"),
    ("fakerl.algos.nothere:k2", "cannot import 'fakerl.algos.nothere'"),
    ("fakerl.algos.kl:heavy", "is not callable"),
])
def test_bad_targets(fake_project: Path, target: str, message: str):
    with pytest.raises(GradcheckError, match=message):
        with load_function(target, [str(fake_project)]):
            pass


def test_file_path_target(tmp_path: Path):
    (tmp_path / "mykl.py").write_text("def k1(logp, ref):\n    return logp - ref\n")
    with load_function(f"{tmp_path / 'mykl.py'}:k1") as loaded:
        assert loaded.function(3, 1) == 2


def test_missing_framework_in_user_module_is_reported(fake_project: Path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from kllint.gradcheck.loader import load_function\n"
            "from kllint.gradcheck.errors import MissingFrameworkError\n"
            "try:\n"
            f"    with load_function('fakerl.algos.kl:k2', [{str(fake_project)!r}]): pass\n"
            "except MissingFrameworkError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install torch (kllint's `torch` extra)" in out.stdout, out.stderr
