"""`gradcheck module:function` on the pinned PyPI releases of verl and OpenRLHF.

The wheels are downloaded once into the release cache (`tests/releases.py`,
`KLLINT_RELEASE_CACHE`, default `~/.cache/kllint/releases`) and imported without their
heavy dependencies: the parent packages are not initialised and missing third-party packages
(ray, omegaconf, transformers, deepspeed, ...) are stubbed.
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kllint.gradcheck import verdict as V
from kllint.gradcheck.check import check_function
from kllint.gradcheck.command import gradcheck
from kllint.gradcheck.loader import load_function
from kllint.gradcheck.policies import make_problem
from releases import release_tree

pytestmark = [pytest.mark.network,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # torch.jit in OpenRLHF's imports
pytest.importorskip("torch")

VERL_KL = "verl.trainer.ppo.core_algos:kl_penalty"
OPENRLHF_KL = "openrlhf.models.utils:compute_approx_kl"


@pytest.fixture(scope="module")
def verl_tree() -> str:
    return str(release_tree("verl==0.9.1"))


@pytest.fixture(scope="module")
def openrlhf_tree() -> str:
    return str(release_tree("openrlhf==0.11.2"))


def test_verl_kl_penalty_modes(verl_tree):
    bandit = make_problem(None, 1)
    mild = make_problem(4, 1, seed=0, scale=0.3)  # log-ratios small enough for verl's k3 clamp at 10
    with load_function(VERL_KL, [verl_tree]) as loaded:
        assert {"ray", "omegaconf"} <= set(loaded.stubbed)

        def verdict(mode, problem=bandit):
            return check_function(loaded.function, kwargs={"kl_penalty": mode}, problem=problem, extreme=False)

        assert verdict("kl").verdict == V.ZERO
        assert verdict("mse").verdict == V.CORRECT
        assert verdict("abs").verdict == V.BIASED
        assert verdict("k3+").verdict == V.CORRECT  # straight-through: k2's gradient, k3's value
        assert verdict("low_var_kl", mild).verdict == V.FORWARD
        clamped = verdict("low_var_kl")  # on the doc bandit one k3 value exceeds 10 and is clamped
        assert clamped.verdict == V.BIASED and clamped.cos_reverse < 0.99


def test_verl_through_the_command(verl_tree):
    result = CliRunner().invoke(gradcheck, [VERL_KL, "--path", verl_tree, "--kwargs", "kl_penalty=mse",
                                            "--output-format", "json"])
    assert result.exit_code == 1, result.output  # k2 is right per token, partial on sequences
    data = json.loads(result.stdout)
    assert [r["verdict"] for r in data["results"]] == [V.CORRECT, V.PARTIAL]
    assert "ray" in data["stubbed"]
    assert "stubbed missing packages" in result.stderr


def test_openrlhf_compute_approx_kl(openrlhf_tree):
    bandit = make_problem(None, 1)
    with load_function(OPENRLHF_KL, [openrlhf_tree]) as loaded:
        def run(arguments=None, **kwargs):
            return check_function(loaded.function, arguments=arguments, kwargs=kwargs, problem=bandit)

        assert run(kl_estimator="k1").verdict == V.ZERO
        assert run(kl_estimator="k2").verdict == V.CORRECT
        k3 = run(kl_estimator="k3")
        assert k3.verdict == V.BIASED and k3.extreme_input_finite is True  # clamped at 10; log-ratio clamped first
        fixed = run({"log_probs_old": "old"}, kl_estimator="k3", unbiased_gradient=True)
        assert fixed.sampling == "off-policy" and fixed.verdict == V.CORRECT
        assert fixed.rel_err_reverse < 1e-6  # float32 inside OpenRLHF
