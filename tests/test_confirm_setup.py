"""The setup `--confirm` runs before a finding's estimate: names reassigned from themselves
(`log_ratio = log_ratio.exp() - 1 - log_ratio`, `log_ratio = log_ratio.clamp(...)`) and
augmented assignments (`kl -= log_ratio`) keep the whole chain back to the log-probs."""
from __future__ import annotations

import textwrap

import pytest

from kllint.api import check_source
from kllint.session import confirm_findings

HEAD = '''
import torch


def kl_loss(policy, ref_model, input_ids, mask):
    logp = policy(input_ids).log_softmax(-1)
    with torch.no_grad():
        ref = ref_model(input_ids).log_softmax(-1)
'''
TAIL = '''
    loss = (kl * mask).sum() / mask.sum()
    loss.backward()
'''

CASES = {
    "self-reassigned k3 (the anchor's own statement)": (
        "log_ratio = ref - logp\nkl = ref - logp\nkl = kl.exp() - 1 - kl",
        "kl.exp() - 1 - kl", ("kl = ref - logp",)),
    "clamped log-ratio reassigned to its name": (
        "log_ratio = ref - logp\nlog_ratio = log_ratio.clamp(-10, 10)\nkl = log_ratio.exp()\n"
        "kl = kl - 1\nkl = kl - log_ratio",
        "kl - log_ratio",
        ("log_ratio = ref - logp", "log_ratio = log_ratio.clamp(-10, 10)", "kl = log_ratio.exp()", "kl = kl - 1")),
    "augmented assignment completes the estimate": (
        "log_ratio = ref - logp\nlog_ratio = log_ratio.clamp(-20, 20)\nkl = log_ratio.exp() - 1\nkl -= log_ratio",
        "kl - log_ratio",
        ("log_ratio = ref - logp", "log_ratio = log_ratio.clamp(-20, 20)", "kl = log_ratio.exp() - 1")),
    "augmented assignment in the setup": (
        "kl = ref - logp\nkl *= 1.0\nkl = kl.exp() - 1 - kl",
        "kl.exp() - 1 - kl", ("kl = ref - logp", "kl *= 1.0")),
}


def _source(body: str) -> str:
    return HEAD + textwrap.indent(body, "    ") + "\n" + TAIL


@pytest.mark.parametrize("body, source, setup", CASES.values(), ids=list(CASES))
def test_setup_keeps_the_chain_of_reassignments(body, source, setup):
    findings = [d for d in check_source(_source(body), "train.py") if d.code == "KL102"]
    assert len(findings) == 1
    estimate = findings[0].estimate
    assert estimate is not None
    assert estimate.source == source
    assert estimate.setup == setup
    assert dict(estimate.roles) == {"ref": "reference", "logp": "policy"}


@pytest.mark.parametrize("body", [CASES[name][0] for name in CASES], ids=list(CASES))
def test_reassigned_k3_is_confirmed(body):
    pytest.importorskip("torch")
    findings = [d for d in check_source(_source(body), "train.py") if d.code in ("KL102", "KL201")]
    assert {d.code for d in findings} == {"KL102", "KL201"}
    for d in confirm_findings(findings):
        assert d.confirmed["status"] == "confirmed", (d.code, d.confirmed)
        assert d.confirmed["verdict"] in ("forward-kl", "partial forward-kl (missing future-token credit)")


def test_a_later_assignment_is_not_setup():
    """Assignments after the estimate, or the statement that contains it, are not run first."""
    body = "kl = ref - logp\nkl = (\n    kl.exp() - 1 - kl\n)\nlog_ratio = kl"
    [d] = [d for d in check_source(_source(body), "train.py") if d.code == "KL102"]
    assert d.estimate.setup == ("kl = ref - logp",)


@pytest.mark.parametrize("setup, named", [
    (("log_ratio = logp - ref",), "log_ratio"),
    (("log_ratio = logp - ref", "log_ratio = log_ratio.clamp(-10, 10)"), None),
    (("log_ratio = logp - ref", "log_ratio *= mask"), None),
    (("log_ratio = logp - ref", "kl = log_ratio.exp()"), "log_ratio"),
])
def test_a_reassigned_log_ratio_is_not_reused_by_the_rewrite(monkeypatch, setup, named):
    """Now that the setup keeps a name's earlier bindings, the k2 rewrite must not take a name
    that holds the log-ratio only before it is reassigned (clamped, masked)."""
    from kllint.diagnostics import Estimate
    from kllint.rules import kl_fixes

    estimate = Estimate("kl", (("logp", "policy"), ("ref", "reference")), "loss", "per-token", setup)
    monkeypatch.setattr(kl_fixes, "estimate_for", lambda *args: estimate)
    assert kl_fixes._named_log_ratio(None, None, "logp", "ref") == named
