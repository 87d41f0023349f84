"""The explicit registry of rule metadata: code, kebab-case name, severity, one-line summary.

Codes are stable and never reused. Each code has a page
`rules/<CODE>.md`; a test keeps pages and this table in step.
"""
from __future__ import annotations

from dataclasses import dataclass

from kllint.diagnostics import Severity


@dataclass(frozen=True)
class RuleInfo:
    """Metadata of one rule."""

    code: str
    name: str
    severity: Severity
    summary: str


RULES: tuple[RuleInfo, ...] = (
    RuleInfo("KL101", "k1-as-loss", "error",
             "The log-ratio logp - ref is differentiated as a loss: its expected gradient is zero."),
    RuleInfo("KL102", "k3-as-loss", "error",
             "k3 is differentiated as a loss: its gradient is that of the forward KL(ref || pi)."),
    RuleInfo("KL103", "non-kl-gradient-as-loss", "error",
             "A KL estimate whose gradient coefficient is not the log-ratio is differentiated."),
    RuleInfo("KL104", "kl-loss-without-gradient", "error",
             "A KL term without gradient (no_grad, detached log-probs) is added to a loss."),
    RuleInfo("KL105", "kl-penalty-sign-inverted", "error",
             "The KL penalty is subtracted from a minimised loss: training maximises the divergence."),
    RuleInfo("KL201", "per-token-kl-loss", "error",
             "Per-token KL loss terms are reduced over tokens without reward-to-go credit."),
    RuleInfo("KL202", "per-token-kl-reward-without-reward-to-go", "error",
             "A per-token KL reward reaches the advantages without returns or reward-to-go."),
    RuleInfo("KL301", "kl-reward-not-detached", "error",
             "A KL term enters rewards, returns or advantages while it still carries gradient."),
    RuleInfo("KL302", "biased-kl-reward", "error",
             "The KL estimate used as a reward is k2, k3, abs or analytic, not k1: biased gradient."),
    RuleInfo("KL401", "off-policy-kl-loss-without-importance-weight", "error",
             "A sampled KL loss on samples from an older policy lacks the weight pi/pi_old."),
    RuleInfo("KL402", "sequence-ratio-on-token-kl", "error",
             "A sequence-level importance ratio is broadcast onto per-token KL terms."),
    RuleInfo("KL403", "reference-as-behaviour-policy", "error",
             "The importance ratio divides by the reference policy instead of the sampling policy."),
    RuleInfo("KL501", "kl-div-input-not-log-probs", "error",
             "F.kl_div / nn.KLDivLoss gets probabilities or logits as input, or mismatched spaces."),
    RuleInfo("KL502", "kl-div-mean-reduction", "warning",
             "kl_div with reduction='mean' divides by the number of classes too."),
    RuleInfo("KL503", "reference-logprobs-with-grad", "warning",
             "Reference-model log-probs are computed with gradient tracking on."),
    RuleInfo("KL601", "exp-before-clamp", "error",
             "exp of a log-ratio is clamped after the exponential: NaN gradients on overflow."),
    RuleInfo("KL900", "syntax-error", "error",
             "A file could not be read or parsed, so it was not checked."),
    RuleInfo("KL901", "unused-suppression", "warning",
             "A `# noqa` or `# kllint: ignore[...]` code hides no finding (select KL901 to report them)."),
)

# rules that `ALL` (the default) and the bare prefix `KL` leave out: they are enabled only by
# their code, their name or a longer prefix (`--extend-select KL901`), as Ruff's RUF100
OPT_IN: frozenset[str] = frozenset({"KL901"})

BY_CODE: dict[str, RuleInfo] = {rule.code: rule for rule in RULES}
BY_NAME: dict[str, RuleInfo] = {rule.name: rule for rule in RULES}


def resolve_selector(selector: str) -> set[str]:
    """Codes matched by a selector: a full code, a code prefix (`KL1`, `KL`, `ALL`) or a name.

    Raises:
        ValueError: when the selector matches no rule.
    """
    token = selector.strip()
    if token.upper() == "ALL":
        return set(BY_CODE)
    if token in BY_NAME:
        return {BY_NAME[token].code}
    matched = {code for code in BY_CODE if code.startswith(token.upper())}
    if not matched:
        raise ValueError(f"unknown rule selector {selector!r}")
    return matched


def select_codes(select: list[str] | tuple[str, ...], ignore: list[str] | tuple[str, ...],
                 extend_select: list[str] | tuple[str, ...] = ()) -> frozenset[str]:
    """The active codes after `select`, `extend-select` and `ignore` (ignore wins, Ruff-style;
    an empty `select` selects nothing, as in Ruff, and `extend-select` then adds to nothing)."""
    codes: set[str] = set()
    for sel in (*select, *extend_select):
        matched = resolve_selector(sel)
        codes |= matched - OPT_IN if sel.strip().upper() in ("ALL", "KL") else matched
    for sel in ignore:
        codes -= resolve_selector(sel)
    return frozenset(codes)


def rule_page(code: str) -> str:
    """The markdown page of a rule (`rules/<CODE>.md`).

    Raises:
        KeyError: when the code is unknown or its page is missing.
    """
    from kllint.rules.pages import read_page

    if code.upper() not in BY_CODE:
        raise KeyError(code)
    return read_page(code.upper())
