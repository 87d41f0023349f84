"""The rule pages and the KL101/KL102/KL103 help say what the gradient checker measures: the
numbers quoted in `rules/KL102.md` and `rules/KL201.md` are those `kllint gradcheck --expr`
prints on its default problems, and the KL101 help offers k1 (not k3) times a live ratio."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kllint.rules.dispatch import check_source

RULES = Path(__file__).resolve().parent.parent / "rules"
K3 = "torch.exp(ref - logp) - (ref - logp) - 1"

K1_LOSS = '''import torch


def grpo_loss(logp, ref_logp, advantages, mask, beta=0.04):
    ratio = torch.exp(logp - logp.detach())
    kl = logp - ref_logp
    per_token = -ratio * advantages.unsqueeze(1) + beta * kl
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()
'''


def _help(source: str, code: str) -> str:
    found = [d for d in check_source(source, "train.py", Path("train.py")) if d.code == code]
    assert found, code
    return found[0].help


def test_kl101_help_multiplies_k1_by_the_live_ratio() -> None:
    text = _help(K1_LOSS, "KL101")
    assert "or multiply k1 by a live ratio `torch.exp(logp - old)`" in text
    assert "k3" not in text


def test_kl102_help_still_multiplies_k3() -> None:
    text = _help(K1_LOSS.replace("kl = logp - ref_logp", f"kl = {K3.replace('ref', 'ref_logp')}"), "KL102")
    assert "or multiply k3 by a live ratio `torch.exp(logp - old)`" in text


def _numbers(expression: str, horizon: int, **kw) -> tuple[str, str]:
    from kllint.gradcheck.check import check_expression

    result = check_expression(expression, framework="torch", horizon=horizon, extreme=False, **kw)
    return f"{result.cos_reverse:.3f}", f"{result.rel_err_reverse:.3f}"


def test_k1_times_a_live_ratio_has_the_reverse_kl_gradient() -> None:
    """What the KL101 help offers is right: coefficient `w * (d + 1)`, and `E[grad logp] = 0`."""
    pytest.importorskip("torch")
    from kllint.gradcheck import verdict as V
    from kllint.gradcheck.check import check_expression

    result = check_expression("(logp - ref) * torch.exp(logp - logp.detach())", framework="torch", horizon=1,
                              extreme=False)
    assert result.verdict == V.CORRECT


def test_kl102_page_quotes_the_gradcheck_numbers() -> None:
    pytest.importorskip("torch")
    page = " ".join((RULES / "KL102.md").read_text().split())
    bandit = re.search(r"k3-as-loss gradient has cosine (\S+) and relative error (\S+) to the reverse-KL", page)
    sequence = re.search(r"k3 loss has cosine (\S+) and relative error (\S+) to the true sequence", page)
    assert bandit and sequence
    assert bandit.groups() == _numbers(K3, 1)
    assert sequence.groups() == _numbers(K3, 3)


ROWS = {
    "per-token k2 loss, summed": ("0.5 * (logp - ref) ** 2", {}),
    "per-token analytic KL loss, summed": ("(logp_all.exp() * (logp_all - ref_all)).sum(-1)", {}),
    "per-token k3 loss, summed (also KL102)": (K3, {}),
    "sequence-level k2 `0.5 * (sum_t d_t) ** 2`": ("0.5 * (logp - ref) ** 2", {"granularity": "sequence"}),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_kl201_page_table_is_the_gradcheck_numbers(row: str) -> None:
    pytest.importorskip("torch")
    cells = {line.split("|")[1].strip(): tuple(c.strip() for c in line.split("|")[2:4])
             for line in (RULES / "KL201.md").read_text().splitlines() if line.startswith("| ")}
    expression, options = ROWS[row]
    assert cells[row] == _numbers(expression, 3, **options)
