"""`confirm_estimate`: the runtime verdict behind `kllint check --confirm`."""
from __future__ import annotations

import json

import pytest

from kllint.diagnostics import Estimate
from kllint.gradcheck import verdict as V
from kllint.gradcheck.confirm import AGREEMENT, confirm_estimate

pytest.importorskip("torch")

POLICY_REF = (("logp", "policy"), ("ref_logp", "reference"))
K3 = "torch.exp(ref_logp - logp) - (ref_logp - logp) - 1"
TORCH = (("torch", "torch"),)


def estimate(source: str, usage: str = "loss", roles=POLICY_REF, **kw) -> Estimate:
    kw.setdefault("aliases", TORCH)
    return Estimate(source=source, roles=tuple(roles), usage=usage, granularity=kw.pop("granularity", "per-token"), **kw)


KEYS = {"verdict", "cos_reverse", "rel_err_reverse", "cos_forward", "rel_err_forward", "vocab", "horizon",
        "summary", "agrees"}


def test_k3_loss_confirms_kl102_with_the_doc_numbers():
    out = confirm_estimate(estimate(K3), "KL102")
    assert KEYS <= set(out)
    assert out["verdict"] == V.FORWARD and out["agrees"] is True
    assert (out["vocab"], out["horizon"]) == (4, 1)
    assert out["summary"] == "expected gradient has cosine 1.000 with the forward KL, 0.898 with the reverse KL"
    json.dumps(out)


def test_aliases_of_functions_and_conventional_names():
    est = estimate("kl_div(ref_all, logp_all, log_target=True, reduction='none').sum(-1)",
                   roles=(("logp_all", "policy_dist"), ("ref_all", "reference_dist")),
                   aliases=(("kl_div", "torch.nn.functional.kl_div"), ("F", "F")))
    out = confirm_estimate(est, "KL201")
    assert out["verdict"] == V.PARTIAL and out["agrees"] is True


def test_active_clamp_is_confirmed_on_milder_policies():
    """verl's `clamp(k3, -10, 10)` bites on the doc bandit (one k3 value is 16): biased there,
    forward-KL where the clamp is inactive."""
    est = estimate("torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)", setup=("kl = ref_logp - logp",))
    out = confirm_estimate(est, "KL102")
    assert out["verdict"] == V.FORWARD and out["agrees"] is True
    assert out["policies"] == "numpy seed 0, scale 0.3"
    assert any(n.startswith("on the theory-doc bandit (torch seed 0) policies: expected gradient is biased")
               for n in out["notes"])


def test_batch_dict_entries_get_roles_from_their_keys():
    est = estimate('(logp - mb["ref_logp"]).pow(2) * mb["response_mask"]', roles=(("logp", "policy"),))
    out = confirm_estimate(est, "KL201")
    assert out["verdict"] == V.PARTIAL and out["agrees"] is True
    assert "read by key: mb['ref_logp'] as reference, mb['response_mask'] as mask" in out["notes"]


def test_jax_estimate():
    pytest.importorskip("jax")
    est = estimate("jnp.exp(ref_logp - logp) - (ref_logp - logp) - 1", framework="jax",
                   aliases=(("jnp", "jax.numpy"),))
    out = confirm_estimate(est, "KL102")
    assert out["verdict"] == V.FORWARD and out["agrees"] is True and out["framework"] == "jax"


@pytest.mark.parametrize("source, usage, code, verdict, roles", [
    ("logp - ref_logp", "loss", "KL101", V.ZERO, POLICY_REF),
    ("(logp - ref_logp).abs()", "loss", "KL103", V.BIASED, POLICY_REF),
    ("0.5 * (logp - ref_logp) ** 2", "loss", "KL104", V.ZERO, (("logp", "policy_detached"), ("ref_logp", "reference"))),
    (K3, "reward", "KL302", V.BIASED, POLICY_REF),
    ("logp - ref_logp", "reward", "KL202", V.PARTIAL, POLICY_REF),
    (K3, "loss", "KL401", V.BIASED, POLICY_REF),
    ("0.5 * (logp - ref_logp) ** 2", "loss", "KL401", V.BIASED, POLICY_REF),
])
def test_codes_are_confirmed(source, usage, code, verdict, roles):
    out = confirm_estimate(estimate(source, usage, roles), code)
    assert out["verdict"] == verdict, out
    assert out["agrees"] is True


def test_kl201_runs_on_sequences_with_setup_statements():
    est = estimate("0.5 * log_ratio.square()", roles=(("logp", "policy"), ("base_logp", "reference")),
                   setup=("log_ratio = logp - base_logp",))
    out = confirm_estimate(est, "KL201")
    assert (out["vocab"], out["horizon"]) == (3, 3)
    assert out["verdict"] == V.PARTIAL and out["agrees"] is True
    assert round(out["cos_reverse"], 3) == 0.925


def test_kl201_is_measured_per_token_and_on_policy():
    """`k3 * exp(logp - old)` is exact per token: KL201 is its only problem."""
    est = estimate("(torch.exp(ref_logp - logp) - (ref_logp - logp) - 1) * torch.exp(logp - old_logp)",
                   roles=POLICY_REF + (("old_logp", "old"),), granularity="sequence")
    out = confirm_estimate(est, "KL201")
    assert out["verdict"] == V.PARTIAL and out["agrees"] is True
    assert (out["sampling"], out["granularity"]) == ("on-policy", "per-token")


def test_correct_code_is_not_confirmed():
    assert confirm_estimate(estimate("0.5 * (logp - ref_logp) ** 2"), "KL102")["agrees"] is False
    assert confirm_estimate(estimate("logp - ref_logp", usage="reward"), "KL302")["agrees"] is False
    seq = estimate("0.5 * ((logp - ref_logp) * mask).sum(-1) ** 2",
                   roles=POLICY_REF + (("mask", "mask"),), granularity="sequence")
    out = confirm_estimate(seq, "KL201")
    assert out["verdict"] == V.CORRECT and out["agrees"] is False
    by_sums = estimate("0.5 * (seq_logp - seq_ref) ** 2", roles=(("seq_logp", "policy"), ("seq_ref", "reference")),
                       granularity="sequence")
    out = confirm_estimate(by_sums, "KL101")  # bound to per-response sums: sequence-level k2
    assert out["verdict"] == V.CORRECT and out["agrees"] is False and out["granularity"] == "sequence"


def test_kl601_clamp_after_exp_gives_nan_on_the_extreme_input():
    roles = (("logp", "policy"), ("base_logp", "reference"))
    after = estimate("(log_ratio.exp() - 1 - log_ratio).clamp(min=-cap, max=cap)", roles=roles,
                     setup=("log_ratio = base_logp - logp",))
    before = estimate("(log_ratio.exp() - 1 - log_ratio).clamp(min=-cap, max=cap)", roles=roles,
                      setup=("log_ratio = (base_logp - logp).clamp(min=-20.0, max=20.0)",))
    bad, good = confirm_estimate(after, "KL601"), confirm_estimate(before, "KL601")
    assert bad["verdict"] == V.NAN and bad["agrees"] is True and bad["extreme_input_finite"] is False
    assert bad["summary"].startswith("the gradient is NaN/inf when one token's log-prob is -150")
    assert good["agrees"] is False and good["extreme_input_finite"] is True
    assert "bound to ones: cap" in bad["notes"]


@pytest.mark.parametrize("est, reason", [
    (estimate("helper(logp)"), "calls 'helper'"),
    (estimate("logp -"), "does not parse"),
    (estimate("os.getcwd()", aliases=(("os", "os"),)), "not imported by the checker"),
    (estimate("(logp - ref_logp).sum()"), "keep the batch axis"),
    (estimate("logp.frobnicate()"), "AttributeError"),
])
def test_failures_are_not_evaluated(est, reason):
    out = confirm_estimate(est, "KL102")
    assert out["verdict"] == "not-evaluated" and out["agrees"] is None
    assert reason in out["summary"]
    json.dumps(out)


def test_code_without_runtime_criterion():
    out = confirm_estimate(estimate("0.5 * (logp - ref_logp) ** 2"), "KL105")
    assert out["agrees"] is None and "no runtime criterion for KL105" in out["notes"]


def _fake(verdict: str, extreme: bool | None = True) -> V.GradcheckResult:
    nan = float("nan")
    return V.GradcheckResult(term="t", verdict=verdict, cos_reverse=nan, rel_err_reverse=nan, cos_forward=nan,
                             rel_err_forward=nan, scale_reverse=nan, grad_norm=nan, matches=(), vocab=4,
                             horizon=1, usage="loss", granularity="per-token", sampling="on-policy",
                             reward_to_go=False, framework="torch", policies="", extreme_input_finite=extreme)


@pytest.mark.parametrize("code", sorted(AGREEMENT))
def test_every_code_is_confirmed_by_some_verdict_and_never_by_correct(code):
    rule = AGREEMENT[code]
    assert any(rule(_fake(v, extreme=False)) for v in V.VERDICTS)
    assert not rule(_fake(V.CORRECT, extreme=True))
