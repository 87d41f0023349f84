"""`kllint gradcheck`: output formats, exit codes, usage errors, lazy framework imports."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from kllint.gradcheck.command import gradcheck

pytest.importorskip("torch")

K3 = "torch.exp(ref - logp) - (ref - logp) - 1"


def invoke(*args: str):
    return CliRunner().invoke(gradcheck, list(args))


def as_json(result) -> dict:
    return json.loads(result.stdout)


def test_k3_json_default_runs_bandit_and_sequence():
    result = invoke("--expr", K3, "--output-format", "json")
    assert result.exit_code == 1
    data = as_json(result)
    rows = {(r["vocab"], r["horizon"]): r for r in data["results"]}
    assert set(rows) == {(4, 1), (3, 3)}
    bandit = rows[(4, 1)]
    assert bandit["verdict"] == "forward-kl"
    assert round(bandit["cos_reverse"], 3) == 0.898 and round(bandit["rel_err_reverse"], 3) == 0.442
    assert bandit["cos_forward"] == pytest.approx(1.0)
    assert bandit["extreme_input_finite"] is False
    assert rows[(3, 3)]["verdict"] == "partial forward-kl (missing future-token credit)"
    assert data["correct"] is False


def test_correct_term_exits_zero():
    result = invoke("--expr", "0.5 * (logp - ref) ** 2", "--horizon", "1", "--output-format", "json")
    assert result.exit_code == 0, result.output
    assert [r["verdict"] for r in as_json(result)["results"]] == ["correct"]


def test_sequence_level_k2_is_correct_on_both_problems():
    result = invoke("--expr", "0.5 * (lp - r) ** 2", "--policy", "lp", "--ref", "r", "--sequence",
                    "--output-format", "json")
    assert result.exit_code == 0, result.output
    assert all(r["verdict"] == "correct" and r["granularity"] == "sequence" for r in as_json(result)["results"])


def test_reward_to_go_and_off_policy_options():
    rtg = invoke("--expr", "logp - ref", "--as", "reward", "--reward-to-go", "--horizon", "3", "--output-format", "json")
    assert rtg.exit_code == 0 and as_json(rtg)["results"][0]["reward_to_go"] is True
    off = invoke("--expr", "0.5 * (logp - ref) ** 2", "--off-policy", "--horizon", "1", "--output-format", "json")
    assert off.exit_code == 1 and as_json(off)["results"][0]["verdict"] == "biased"


def test_jax_expression_picks_the_jax_backend():
    pytest.importorskip("jax")
    result = invoke("--expr", "jnp.exp(ref - logp) - (ref - logp) - 1", "--horizon", "1", "--output-format", "json")
    row = as_json(result)["results"][0]
    assert row["framework"] == "jax" and row["verdict"] == "forward-kl"


def test_table_output():
    result = invoke("--expr", K3, "--vocab", "4", "--horizon", "1")
    assert result.exit_code == 1
    for text in ("forward-kl", "0.898", "0.442", "NaN/inf", "cosine 1.000 with the forward KL"):
        assert text in result.stdout


def test_opaque_names_are_noted_on_stderr():
    result = invoke("--expr", "beta * 0.5 * (logp - ref) ** 2", "--horizon", "1", "--output-format", "json")
    assert result.exit_code == 0
    assert "bound to ones: beta" in result.stderr
    assert json.loads(result.stdout)  # stdout stays pure JSON


@pytest.mark.parametrize("args, message", [
    ((), "exactly one"),
    (("mod:fn", "--expr", "logp"), "exactly one"),
    (("--expr", "logp -"), "does not parse: invalid syntax"),
    (("--expr", "(logp - ref).sum()"), "keep the batch axis"),
    (("--expr", "logp - ref", "--vocab", "10", "--horizon", "6"), "exceeds the limit"),
    (("--expr", "undefined(logp)"), "calls 'undefined'"),
    (("--expr", "logp.exp(1, 2, 3)"), "evaluating the term failed: TypeError"),
    (("--expr", "logp.no_such_method()"), "`.no_such_method` is not allowed"),
    (("--expr", "logp", "--arg", "x=policy"), "--arg, --kwargs and --path"),
    (("no_such_module_kllint:fn",), "cannot import"),
])
def test_usage_errors_exit_2(args, message):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_function_target(tmp_path: Path):
    (tmp_path / "my_kl.py").write_text(textwrap.dedent("""
        import torch

        def kl_penalty(logprob, ref_logprob, mode):
            if mode == "k2":
                return 0.5 * (logprob - ref_logprob) ** 2
            return torch.exp(ref_logprob - logprob) - (ref_logprob - logprob) - 1
        """))
    ok = invoke("my_kl:kl_penalty", "--path", str(tmp_path), "--kwargs", "mode=k2", "--horizon", "1",
                "--output-format", "json")
    assert ok.exit_code == 0, ok.output
    row = as_json(ok)["results"][0]
    assert row["term"] == "my_kl:kl_penalty(logprob=policy, ref_logprob=reference, mode='k2')"
    bad = invoke("my_kl:kl_penalty", "--path", str(tmp_path), "--kwargs", "mode=k3", "--horizon", "1",
                 "--output-format", "json")
    assert bad.exit_code == 1 and as_json(bad)["results"][0]["verdict"] == "forward-kl"
    missing_role = invoke("my_kl:kl_penalty", "--path", str(tmp_path), "--horizon", "1")
    assert missing_role.exit_code == 2 and "cannot infer the role of parameter(s) mode" in missing_role.stderr


def test_help_warns_that_user_code_runs():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "only check code you trust" in " ".join(result.output.split())


def _run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("framework, expr", [("torch", "torch.exp(ref - logp)"), ("jax", "jnp.exp(ref - logp)")])
def test_missing_framework_is_one_line_and_exit_2(framework, expr):
    code = (f"import sys; sys.modules[{framework!r}] = None\n"
            "from kllint.gradcheck.command import gradcheck; gradcheck()")
    proc = _run_python(code, "--expr", expr)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install {framework} (kllint's `{framework}` extra)" in lines[0]
    assert "kllint[" not in lines[0]  # no package-index release to name


def test_confirm_without_framework_is_not_evaluated():
    code = textwrap.dedent("""
        import sys; sys.modules['torch'] = None
        from kllint.diagnostics import Estimate
        from kllint.gradcheck.confirm import confirm_estimate
        out = confirm_estimate(Estimate('logp - ref', (('logp', 'policy'), ('ref', 'reference')), 'loss', 'per-token'), 'KL101')
        print(out['verdict'], out['agrees'], out['summary'])
        """)
    proc = _run_python(code)
    assert proc.stdout.startswith("not-evaluated None MissingFrameworkError:"), proc.stdout + proc.stderr
    assert "pip install torch (kllint's `torch` extra)" in proc.stdout


def test_importing_kllint_does_not_import_frameworks():
    code = textwrap.dedent("""
        import sys
        import kllint.gradcheck, kllint.gradcheck.command, kllint.gradcheck.confirm
        from kllint.gradcheck import MissingFrameworkError
        print(",".join(m for m in ("torch", "jax", "numpy") if m in sys.modules))
        import kllint, kllint.cli
        print(",".join(m for m in ("torch", "jax") if m in sys.modules))
        """)
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["", ""]
