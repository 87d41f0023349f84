"""`kllint gradcheck --expr` / `--setup` accept arithmetic only: nothing but the documented
names, numbers and torch / jax math functions is ever evaluated (`kllint.gradcheck.allowed`)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kllint.gradcheck.allowed import check_allowed, restricted_builtins
from kllint.gradcheck.errors import GradcheckError

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]


def _documented_expressions() -> list[str]:
    found = []
    for page in DOCS:
        found += re.findall(r'--expr "([^"]+)"', page.read_text(encoding="utf-8"))
    return sorted(set(found) - {"EXPR"})


def test_the_documented_expressions_are_found():
    assert "torch.exp(ref - logp) - (ref - logp) - 1" in _documented_expressions()
    assert len(_documented_expressions()) >= 3


@pytest.mark.parametrize("expression", _documented_expressions())
def test_every_documented_expression_is_allowed(expression):
    check_allowed(expression)


def test_the_theory_and_test_expressions_are_allowed():
    from test_docs import ROWS
    import test_gradcheck_theory as theory

    expressions = [expression for expression, _ in ROWS.values()]
    for fw in theory.FRAMEWORKS:
        for pair in (theory.K3, theory.RATIO, theory.RATIO_SG, theory.ABS, theory.D_SG, theory.ANALYTIC):
            expressions.append(theory.pick(pair, fw))
        expressions += [theory.rtg("logp - ref", fw), theory.sg(theory.pick(theory.K3, fw), fw)]
    expressions += ["F.kl_div(ref_all, logp_all, reduction='batchmean', log_target=True)",
                    "0.5 * (batch['ref_logp'] - logp) ** 2 * mask", "torch.exp(ref - logp).clamp(max=10)",
                    "abs(logp - ref) + max(1, 2) * lax.stop_gradient(jnp.log1p(logp))", "logp[..., 0:1] * 2",
                    "(logp - ref).to(torch.float32).pow(2) if True else -logp", "torch.where(logp > ref, d, -d)"]
    for expression in expressions:
        check_allowed(expression, ["d = logp - ref", "d += 0.0"])


@pytest.mark.parametrize("expression, setup, named", [
    ("__import__('os').system('true')", (), "`__import__`"),
    ("open('/etc/passwd').read()", (), "the builtin `open`"),
    ("eval('1')", (), "the builtin `eval`"),
    ("getattr(logp, 'exp')()", (), "the builtin `getattr`"),
    ("torch.load('weights.pt')", (), "`torch.load`"),
    ("torch.os.system('true')", (), "`torch.os.system`"),
    ("np.os.system('true')", (), "`np.os.system`"),
    ("torch.nn.Module", (), "`torch.nn.Module`"),
    ("torch", (), "the module `torch` itself"),
    ("logp.numpy().tofile('x')", (), "`.numpy`"),
    ("logp.__class__.__mro__", (), "`.__class__`"),
    ("(lambda: logp)()", (), "a lambda"),
    ("[x for x in logp][0]", (), "a list comprehension"),
    ("sum(x for x in logp)", (), "a generator expression"),
    ("{'a': logp}['a']", (), "a dict"),
    ("batch['__class__']", (), "the string '__class__'"),
    ("logp.exp(**kw)", (), "`**` unpacking"),
    ("(y := logp)", (), "`:=`"),
    ("f'{logp}'", (), "an f-string"),
    ("d", ("import os",), "`import`"),
    ("d", ("def f(): pass",), "the statement `def f():`"),
    ("d", ("d = logp", "torch = d"), "assigning to `torch`"),
    ("d", ("logp.data = ref",), "assigning to `logp.data`"),
])
def test_anything_else_is_refused_naming_the_first_construct(expression, setup, named):
    with pytest.raises(GradcheckError) as error:
        check_allowed(expression, setup)
    message = str(error.value)
    assert f": {named} is not allowed: " in message and "\n" not in message
    assert message.startswith("--setup " if setup and named in ("`import`", "the statement `def f():`",
                                                                 "assigning to `torch`", "assigning to `logp.data`")
                              else "--expr ")


def test_the_first_construct_in_the_text_is_named():
    with pytest.raises(GradcheckError, match="`__import__` is not allowed"):
        check_allowed("__import__('os').system('true') + open('x')")
    with pytest.raises(GradcheckError, match="`.numpy` is not allowed"):
        check_allowed("logp.numpy().tofile('x')")


def test_evaluation_sees_only_the_allowed_builtins():
    assert sorted(restricted_builtins()["__builtins__"]) == ["abs", "float", "int", "max", "min", "pow", "round",
                                                             "sum"]


def test_the_command_refuses_code_before_running_it(tmp_path):
    pytest.importorskip("torch")
    marker = tmp_path / "ran"
    code = "from kllint.gradcheck.command import gradcheck; gradcheck()"
    expression = f"__import__('pathlib').Path({str(marker)!r}).touch() or logp"
    proc = subprocess.run([sys.executable, "-c", code, "--horizon", "1", "--expr", expression],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "`__import__` is not allowed" in lines[0] and "Traceback" not in proc.stderr
    assert not marker.exists()
    setup = subprocess.run([sys.executable, "-c", code, "--horizon", "1", "--setup",
                            f"import pathlib; pathlib.Path({str(marker)!r}).touch()", "--expr", "logp"],
                           capture_output=True, text=True, timeout=120)
    assert setup.returncode == 2 and "`import` is not allowed" in setup.stderr
    assert not marker.exists()
