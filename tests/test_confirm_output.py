"""`--confirm` as people read it: `confirmed:` only when the checker agrees, `not confirmed:
<reason>` when the estimate could not be evaluated, `contradicted:` naming what the rule says
and what the checker measured; the concise output shows the status too."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from kllint.diagnostics import Diagnostic, Estimate, Span
from kllint.report import concise, text
from kllint.session import confirm_findings

pytest.importorskip("torch")

ROLES = (("logp", "policy"), ("ref_logp", "reference"))
K3 = "torch.exp(ref_logp - logp) - (ref_logp - logp) - 1"


def _finding(source: str, code: str = "KL102") -> Diagnostic:
    estimate = Estimate(source=source, roles=ROLES, usage="loss", granularity="per-token",
                        aliases=(("torch", "torch"),))
    return Diagnostic(code, "k3-as-loss", "error", "nowhere.py", Span(1, 1, 1, 2), "k3 is differentiated as a loss",
                      estimate=estimate)


def _full(diagnostics: list[Diagnostic]) -> str:
    buffer = io.StringIO()
    text.render(diagnostics, Console(file=buffer, width=200, no_color=True))
    return buffer.getvalue()


def test_agreement_is_confirmed_everywhere():
    [d] = confirm_findings([_finding(K3)])
    assert d.confirmed["status"] == "confirmed"
    assert "  confirmed: " in _full([d])
    assert concise.render([d]).rstrip().endswith("k3 is differentiated as a loss (confirmed)")


def test_unevaluable_expression_is_not_confirmed_with_the_reason():
    [d] = confirm_findings([_finding("helper(logp)")])
    out = _full([d])
    assert d.confirmed["status"] == "not confirmed"
    assert "  not confirmed: the estimate could not be evaluated (" in out
    assert "calls 'helper'" in out
    assert "  confirmed:" not in out
    assert concise.render([d]).rstrip().endswith("(not confirmed)")


def test_disagreement_says_which_and_why():
    [d] = confirm_findings([_finding("0.5 * (logp - ref_logp) ** 2")])  # k2: the checker finds it correct
    out = _full([d])
    assert d.confirmed["status"] == "contradicted"
    assert ("  contradicted: the static analysis reports KL102, the gradient of the forward KL(ref || pi); "
            "the gradient checker measured `correct`") in out
    assert "  confirmed:" not in out
    assert concise.render([d]).rstrip().endswith("(contradicted)")


def test_code_without_runtime_criterion_is_not_confirmed():
    [d] = confirm_findings([_finding(K3, code="KL105")])
    assert d.confirmed["status"] == "not confirmed"
    assert "not confirmed: the gradient checker has no runtime criterion for KL105" in _full([d])
