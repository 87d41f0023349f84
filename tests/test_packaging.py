"""The install story: the built wheel works in a fresh virtual environment, and the torch extra
never replaces a user's torch (the exact torch pin lives only in CI and the README's test command).

The wheel test builds with `python -m build --no-isolation` (hatchling and build come with the
`dev` extra), creates a venv with `--system-site-packages` (so the dependencies are already
there) and installs the wheel with `pip --no-index`: no network is needed. It is marked `slow`
but stays in the default run (about 15 s).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "KL102" / "k3_times_detached_ratio.py"
README_TEST_COMMAND = "python -m pip install torch==2.13.0 -e '.[dev,torch,jax]' && python -m pytest -q"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_torch_extra_is_a_range_not_a_pin():
    torch = [req for req in _project()["optional-dependencies"]["torch"] if req.startswith("torch")]
    assert torch, "the torch extra must name torch"
    assert all("==" not in req and ">=" in req for req in torch), torch


def test_ci_and_readme_pin_the_cpu_torch_explicitly():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert README_TEST_COMMAND in readme
    assert README_TEST_COMMAND in ci, "CI must run exactly the README's test command"


def _setup_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("\n## ", 1)[0]


def test_readme_has_two_setup_commands_and_no_cpu_promise_for_the_plain_pin():
    """`pip install torch==2.13.0` from PyPI is the CUDA build on Linux x86_64; only a machine
    whose pip finds a CPU-only wheel (a local index, as on CI) gets that one."""
    section = _setup_section()
    assert len(re.findall(r"^```sh$", section, flags=re.M)) == 2
    assert README_TEST_COMMAND in section
    prose = " ".join(re.sub(r"```sh\n.*?```", "", section, flags=re.S).split())
    assert not re.search(r"installs the CPU build|CPU build of torch", prose), prose
    assert "CUDA build" in prose and "+cpu" in prose


def test_dev_extra_can_build_the_wheel():
    dev = " ".join(_project()["optional-dependencies"]["dev"])
    assert re.search(r"\bbuild\b", dev) and "hatchling" in dev


def test_readme_does_not_promise_a_package_index_release():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"pip install ['\"]?kllint(\[|\b(?! @))", readme), "no release on a package index yet"
    assert "rev: v0.1.0" not in readme, "no tag exists yet"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("build")
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("src") / "kllint"
    # build from a copy: the checkout stays untouched whatever the backend writes
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".kllint_cache", "__pycache__", ".demo"))
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("kllint-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(system_site_packages=True, with_pip=True, symlinks=os.name != "nt").create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    proc = subprocess.run([str(bindir / "python"), "-m", "pip", "install", "--no-index", "--no-deps",
                           "--force-reinstall", str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return bindir


def _run(bindir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(NO_COLOR="1", PATH=str(bindir) + os.pathsep + env.get("PATH", ""))
    return subprocess.run([str(bindir / "kllint"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_wheel_runs_from_a_fresh_venv(installed, tmp_path):
    where = subprocess.run([str(installed / "python"), "-c", "import kllint; print(kllint.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert str(installed.parent) in where.stdout, "the venv must import the installed wheel, not the checkout"
    shutil.copy(FIXTURE, tmp_path / "train.py")
    check = _run(installed, "check", "--no-cache", "--output-format", "concise", "train.py", cwd=tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "KL102" in check.stdout
    page = _run(installed, "rule", "KL102", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    assert "k3-as-loss" in page.stdout and "## " in page.stdout
    listing = _run(installed, "rules", "--output-format", "json", cwd=tmp_path)
    assert listing.returncode == 0 and '"KL102"' in listing.stdout, listing.stderr
