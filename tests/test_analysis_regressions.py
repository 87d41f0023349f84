"""Regressions found in review: each snippet once broke or misled the analysis."""
from __future__ import annotations

from kllint.api import check_source

DETACHED_ANALYTIC_REWARD = '''import torch
from torch.distributions import Categorical, kl_divergence


def kl_rewards(policy_logits, ref_logits, scores, beta=0.05):
    with torch.no_grad():
        kl = kl_divergence(Categorical(logits=policy_logits), Categorical(logits=ref_logits))
        rewards = scores - beta * kl.sum(-1)
    return rewards
'''


def test_analytic_kl_of_detached_policy_is_a_biased_reward() -> None:
    # the analytic KL of a detached policy once raised NameError inside the analysis
    found = {(d.code, d.span.line) for d in check_source(DETACHED_ANALYTIC_REWARD, "rewards.py")}
    assert found == {("KL302", 7)}
