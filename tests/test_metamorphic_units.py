"""The transformations of tests/test_metamorphic.py, each on a tiny program: the result is valid
Python with the same lines and comments, prints the same when run, and renames or moves exactly
what it should (names checked on the syntax tree)."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from metamorphic.corpus import analyse, compare, copy_corpus, with_definitions_moved
from metamorphic.move import MoveError, move_definitions
from metamorphic.rename import Namer, identifiers, parameters_by_callee, rename_locals, rename_parameters

LOCALS = '''\
"""Locals of every kind; the comments stay on their lines."""
import math
from collections import namedtuple

TOTAL = 0
Pair = namedtuple("Pair", "ref_logp logp")


def score(batch, scale=2.0):
    global TOTAL
    ref_logp = batch["ref_logp"]  # expect: KL102
    logp = batch.get("logp", 0.0)
    pair = Pair(ref_logp=ref_logp, logp=logp)
    gaps = [p - q for p, q in zip(pair.ref_logp, [logp] * 3)]
    squares = {g: g * g for g in gaps}
    count = 0

    def bump():
        nonlocal count
        count += 1
        return count

    class Acc:
        total = sum(gaps)

        def get(self):
            return self.total * scale

    for k in range(2):
        bump()
    try:
        raise ValueError("x")
    except ValueError as err:
        message = str(err)
    if (n := len(gaps)) > 1:
        TOTAL += n
    lam = lambda t: t + logp  # noqa: E731
    return sorted(squares.items()), count, Acc().get(), message, TOTAL, lam(1), k, math.floor(scale)


print(score({"ref_logp": [1.0, 2.0, 3.0], "logp": 0.5}))
'''

PARAMETERS = '''\
import functools


def kl(ref_logp, logp, *rest, beta=0.1, **options):
    return beta * (ref_logp - logp) + len(rest) + len(options)


class Loss:
    def __init__(self, coef):
        self.coef = coef

    def __call__(self, logp, ref_logp):
        return self.coef * kl(ref_logp=ref_logp, logp=logp)  # expect: KL101

    @staticmethod
    def scale(value):
        return 2 * value

    @classmethod
    def make(cls, coef):
        return cls(coef=coef)


def outer(logp):
    def inner():
        nonlocal logp
        logp = logp + 1
        return logp
    return inner()


loss_fn = Loss.make(coef=0.5)
half = functools.partial(kl, beta=0.5)
print(kl(1.0, 0.5, 7, beta=0.2, extra=1), loss_fn(logp=0.25, ref_logp=1.0), half(2.0, logp=1.0),
      Loss.scale(value=3), outer(1), sorted(dict(beta=1)))
'''

MODULE = '''\
"""A module to split; `user` imports from it."""
from __future__ import annotations

import math
from functools import partial

SCALE = 2.0  # a constant


def helper(x, k=SCALE):
    return math.exp(x) * k  # expect: KL102


class Base:
    def run(self, x):
        return helper(x)


class Child(Base):
    def run(self, x):
        return super().run(x) + twice(x)


def twice(x):
    return 2 * x


DOUBLE = partial(twice)
print(round(Child().run(1.0), 6), DOUBLE(3))


def late():
    return DOUBLE(4)


if __name__ == "__main__":
    print(late())
'''

USER = '''\
from prog import DOUBLE, SCALE, Child, late

print(late(), DOUBLE(1), SCALE, Child().run(0.0))
'''


def _run(folder: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _names(source: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}


def _same_run(tmp_path: Path, before: str, after: str) -> None:
    (tmp_path / "before.py").write_text(before)
    (tmp_path / "after.py").write_text(after)
    assert _run(tmp_path, "before.py") == _run(tmp_path, "after.py")


def _comments(source: str) -> list[tuple[int, str]]:
    return [(n, line[line.index("#"):]) for n, line in enumerate(source.splitlines(), 1) if "# " in line]


# --- (a) locals -------------------------------------------------------------------------------------------


def test_rename_locals_renames_every_local_and_nothing_else(tmp_path: Path) -> None:
    renamed = rename_locals(LOCALS)
    _same_run(tmp_path, LOCALS, renamed)
    assert len(renamed.splitlines()) == len(LOCALS.splitlines())
    assert _comments(renamed) == _comments(LOCALS)
    names = _names(renamed)
    for local in ("ref_logp", "logp", "pair", "gaps", "squares", "count", "k", "err", "message", "n", "lam", "p", "q", "g"):
        assert local not in names, local
    for kept in ("batch", "scale", "self", "t", "TOTAL", "Pair", "math", "bump", "Acc", "zip"):
        assert kept in names, kept
    # keys, keywords, attributes and the namedtuple's field names keep their text
    assert 'batch["ref_logp"]' in renamed and "Pair(ref_logp=" in renamed and ".ref_logp, " in renamed
    assert "nonlocal v" in renamed and "global TOTAL" in renamed


def test_rename_locals_gives_fresh_names_that_do_not_capture(tmp_path: Path) -> None:
    source = textwrap.dedent('''\
        v1 = 10


        def f():
            x = 1

            def g():
                y = 2
                return x + y + v1
            return g()


        print(f())
        ''')
    renamed = rename_locals(source)
    _same_run(tmp_path, source, renamed)
    assert "x" not in _names(renamed) and "y" not in _names(renamed) and "vv1" in _names(renamed)


def test_names_libcst_scopes_get_wrong_are_kept() -> None:
    source = textwrap.dedent('''\
        def f(items):
            total = [last := i for i in items]
            match items:
                case [head, *tail]:
                    pass
            shown = f"{total=}"
            return last, head, tail, shown
        ''')
    names = _names(rename_locals(source))
    assert {"last", "head", "tail", "total"} <= names and "shown" not in names and "i" not in names


# --- (c) parameters ------------------------------------------------------------------------------------------


def test_rename_parameters_follows_keywords_and_keeps_self(tmp_path: Path) -> None:
    namer = Namer("a", identifiers(PARAMETERS), by_name=True)
    renamed = rename_parameters(PARAMETERS, namer, parameters_by_callee(PARAMETERS))
    _same_run(tmp_path, PARAMETERS, renamed)
    assert _comments(renamed) == _comments(PARAMETERS)
    tree = ast.parse(renamed)
    params = {a.arg for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
              for a in (*f.args.args, *f.args.kwonlyargs, f.args.vararg, f.args.kwarg) if a is not None}
    assert {"self", "cls"} <= params
    assert not params & {"ref_logp", "logp", "rest", "beta", "options", "coef", "value"}
    assert "extra=1" in renamed and "self.coef" in renamed and "dict(beta=1)" in renamed  # not ours: untouched
    assert namer.new("ref_logp") == namer.new("ref_logp")  # one old name, one new name, in every file


# --- (b) moved definitions -------------------------------------------------------------------------------------


def _write_package(folder: Path, files: dict) -> None:
    folder.mkdir(parents=True)
    for name, new in files.items():
        (folder / name).write_text(new.code)


def test_move_definitions_gives_a_package_that_runs_the_same(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    (before / "prog.py").write_text(MODULE)
    (before / "user.py").write_text(USER)
    files = move_definitions(MODULE, "prog")
    assert set(files) == {"__init__.py", "common.py", "m_helper.py", "m_Base.py", "m_Child.py", "m_twice.py",
                          "m_late.py"}
    _write_package(after / "prog", files)
    (after / "user.py").write_text(USER)
    assert _run(before, "user.py") == _run(after, "user.py")
    original = MODULE.splitlines()
    for name, new in files.items():
        ast.parse(new.code)
        for text, line in zip(new.text, new.origin):
            assert line is None or text == original[line - 1], (name, line)
    assert files["m_helper.py"].origin[-1] == 11  # the `# expect:` line, mapped back
    assert "from prog.m_Base import Base" in files["m_Child.py"].code
    assert "from prog import DOUBLE" in files["m_late.py"].code  # a name bound after a definition
    assert "from prog.common import SCALE" in files["m_helper.py"].code


@pytest.mark.parametrize("source, reason", [
    ("x = 1; y = 2\n\n\ndef f():\n    return x\n", "two top-level statements"),
    ("N = 0\n\n\ndef f():\n    global N\n    N = 1\n", "global N"),
    ("def f():\n    return g()\n\n\ndef g():\n    return f()\n", "import each other"),
    ("def f():\n    pass\n\n\ndef f():\n    pass\n", "bound by a definition"),
])
def test_move_refuses_what_it_cannot_keep(source: str, reason: str) -> None:
    with pytest.raises(MoveError, match=reason):
        move_definitions(source, "pkg")


K3 = '''\
import torch


def step(policy, batch, opt):
    logp = torch.log_softmax(policy(batch["ids"]), -1).gather(-1, batch["ids"][..., None])[..., 0]
    with torch.no_grad():
        ref = torch.log_softmax(batch["ref_model"](batch["ids"]), -1).gather(-1, batch["ids"][..., None])[..., 0]
    loss = loss_of(logp, ref)
    loss.backward()
    opt.step()


def loss_of(logp, ref):
    return (torch.exp(ref - logp) - (ref - logp) - 1).mean()  # expect: KL102,KL201
'''


def test_findings_of_a_moved_copy_are_keyed_by_the_original_lines(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(K3)
    original = copy_corpus(tmp_path / "src", tmp_path / "original")
    moved = with_definitions_moved(original, tmp_path / "moved")
    assert sorted(p.relative_to(moved.root).as_posix() for p in moved.root.rglob("*.py")) == [
        "train/__init__.py", "train/m_loss_of.py", "train/m_step.py"]
    assert moved.origin["train/m_loss_of.py"] == ("train.py", [None, None, None, 13, 14])
    before, after = analyse(original), analyse(moved)
    assert {(f.path, f.line) for f in before.findings} == {("train.py", 14)}
    assert not compare(before, after), compare(before, after).report()
    assert {f.where for f in after.findings} == {"train/m_loss_of.py:5"}
