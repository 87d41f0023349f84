"""`kllint check --confirm`: run a static finding's KL estimate on exact tabular policies.

`confirm_estimate` never raises: a failure becomes `{"verdict": "not-evaluated", ...}`.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from kllint.diagnostics import Estimate
from kllint.gradcheck import verdict as V

ALLOWED_MODULE_PREFIXES = ("torch", "jax", "jaxlib", "numpy", "math", "optax", "flax", "einops")
"""Only these modules are imported for an estimate's aliases (`Estimate.aliases`)."""

SEQUENCE_CODES = {"KL201", "KL202", "KL402"}
"""Codes confirmed on the vocabulary-3, horizon-3 sequence problem; the others on the 4-action bandit."""

OFF_POLICY_CODES = {"KL401", "KL402", "KL403"}
"""Codes confirmed with samples from `pi_old != pi`."""

PER_TOKEN_CODES = {"KL201", "KL202"}
"""Codes about per-token terms: confirmed per token and on-policy whatever the estimate says, so
that the missing future-token credit is the only effect measured (a per-token ratio does not
correct the prefix distribution off-policy, which would read as `biased`)."""

_NOT_CORRECT = lambda r: r.verdict != V.CORRECT  # noqa: E731

AGREEMENT: dict[str, Callable[[V.GradcheckResult], bool]] = {
    "KL101": lambda r: r.verdict == V.ZERO,
    "KL102": lambda r: r.verdict in (V.FORWARD, V.PARTIAL_FORWARD),
    "KL103": _NOT_CORRECT,
    "KL104": lambda r: r.verdict == V.ZERO,
    "KL201": lambda r: r.verdict in (V.PARTIAL, V.PARTIAL_FORWARD),
    "KL202": lambda r: r.verdict in (V.PARTIAL, V.PARTIAL_FORWARD),
    "KL302": lambda r: r.verdict == V.BIASED,
    "KL401": lambda r: r.verdict == V.BIASED,
    "KL402": _NOT_CORRECT,
    "KL403": _NOT_CORRECT,
    "KL601": lambda r: r.extreme_input_finite is False,
}
"""What the runtime verdict must be for each code's static finding to be confirmed."""


def _not_evaluated(reason: str, code: str) -> dict[str, Any]:
    return {"verdict": V.NOT_EVALUATED, "summary": reason, "agrees": None, "code": code}


KNOWN_ALIASES = {
    "torch": "torch", "F": "torch.nn.functional", "nn": "torch.nn", "np": "numpy", "math": "math",
    "jax": "jax", "jnp": "jax.numpy", "lax": "jax.lax", "optax": "optax",
}
"""Conventional aliases, used when an estimate's alias names no importable module (`("F", "F")`)."""


def _import_object(target: str) -> Any:
    """A module, or an attribute of a module (`torch.nn.functional.kl_div`)."""
    try:
        return importlib.import_module(target)
    except ImportError:
        parent, _, attr = target.rpartition(".")
        if not parent:
            raise
        return getattr(importlib.import_module(parent), attr)


def _modules(aliases: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Resolve an estimate's `(alias, qualified name)` pairs, e.g. `("F", "torch.nn.functional")`.

    Raises:
        ValueError: the target is outside `ALLOWED_MODULE_PREFIXES`.
        ImportError, AttributeError: it cannot be imported.
    """
    modules = {}
    for alias, target in aliases:
        if target.split(".")[0] not in ALLOWED_MODULE_PREFIXES and alias in KNOWN_ALIASES:
            target = KNOWN_ALIASES[alias]
        if target.split(".")[0] not in ALLOWED_MODULE_PREFIXES:
            raise ValueError(f"module {target!r} is not imported by the checker (alias {alias!r})")
        modules[alias] = _import_object(target)
    return modules


def confirm_estimate(estimate: Estimate, code: str) -> dict[str, Any]:
    """Evaluate a finding's estimate exactly and say whether the result supports `code`.

    The `estimate.setup` statements run first, then `estimate.source` is evaluated with the
    names of `estimate.roles` bound to tabular-policy tensors (`policy` live log-probs
    `[batch, tokens]`, `policy_detached`, `reference`, `old`, `mask` ones); other free names
    are bound to ones, module aliases (`estimate.aliases`) to the real modules (torch, jax,
    numpy, ... only). `usage` loss|reward and `granularity` per-token|sequence as in
    `check_expression`; for the sequence granularity the names are per-response sums
    `[batch]`, or `[batch, tokens]` when the source reduces the token axis itself.

    Problem: the 4-action bandit of the theory doc, or the V=3, T=3 sequence problem for
    `SEQUENCE_CODES`; off-policy sampling for `OFF_POLICY_CODES`; per-token, on-policy
    evaluation for `PER_TOKEN_CODES`. KL601 is confirmed by a non-finite float32 gradient when
    one token's log-prob is -150 vs the reference.

    Returns:
        JSON-able dict: `verdict`, `cos_reverse`, `rel_err_reverse`, `cos_forward`,
        `rel_err_forward`, `vocab`, `horizon`, `summary`, `agrees` (bool, or None when the
        code has no runtime criterion), plus `code`, `framework`, `usage`, `granularity`,
        `sampling`, `extreme_input_finite`, `notes`. On any failure:
        `{"verdict": "not-evaluated", "summary": reason, "agrees": None, "code": code}`.
    """
    code = str(code).upper()
    try:
        return _confirm(estimate, code)
    except Exception as exc:  # noqa: BLE001 - never raise from --confirm
        message = str(exc).splitlines()[0] if str(exc) else ""
        return _not_evaluated(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, code)


def _confirm(estimate: Estimate, code: str) -> dict[str, Any]:
    from kllint.gradcheck.check import check_expression
    from kllint.gradcheck.backends import detect_framework
    from kllint.gradcheck.exact import ROLES
    from kllint.gradcheck.policies import make_problem

    framework = estimate.framework if estimate.framework in ("torch", "jax") else \
        detect_framework(estimate.source, *estimate.setup)
    modules = _modules(tuple(estimate.aliases))
    names = {name: (role if role in ROLES else "ones") for name, role in estimate.roles}
    usage = estimate.usage if estimate.usage in ("loss", "reward") else "loss"
    problem = make_problem(None, 3) if code in SEQUENCE_CODES else make_problem(None, 1)
    sampling = "off-policy" if code in OFF_POLICY_CODES else "on-policy" if code in PER_TOKEN_CODES else None
    kwargs = dict(names=names, setup=tuple(estimate.setup), modules=modules, usage=usage,
                  sampling=sampling, framework=framework, problem=problem)
    granularity = "sequence" if estimate.granularity == "sequence" and code not in PER_TOKEN_CODES else "per-token"
    try:
        result = check_expression(estimate.source, granularity=granularity, **kwargs)
    except Exception:
        if granularity != "sequence":
            raise
        granularity = "per-token"  # the source reduces the token axis itself
        result = check_expression(estimate.source, granularity=granularity, **kwargs)
    rule = AGREEMENT.get(code)
    verdict = result.verdict
    if code == "KL601" and result.extreme_input_finite is False:
        verdict = V.NAN
    notes = list(result.notes)
    if rule is None:
        notes.append(f"no runtime criterion for {code}")
    out = result.to_json()
    summary = V.summarize(result, extreme=False)
    if code == "KL601":
        finite = {True: "the gradient stays finite", False: V.EXTREME_NOTE, None: "the extreme input could not be evaluated"}
        summary = f"{finite[result.extreme_input_finite]}; on ordinary inputs: {summary}"
    return {
        "verdict": verdict,
        "cos_reverse": out["cos_reverse"],
        "rel_err_reverse": out["rel_err_reverse"],
        "cos_forward": out["cos_forward"],
        "rel_err_forward": out["rel_err_forward"],
        "vocab": result.vocab,
        "horizon": result.horizon,
        "summary": summary,
        "agrees": None if rule is None else bool(rule(result)),
        "code": code,
        "framework": framework,
        "usage": usage,
        "granularity": granularity,
        "sampling": result.sampling,
        "extreme_input_finite": result.extreme_input_finite,
        "notes": notes,
    }
