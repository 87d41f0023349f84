"""`kllint check --confirm`: run a static finding's KL estimate on exact tabular policies.

`confirm_estimate` never raises: a failure becomes `{"verdict": "not-evaluated", ...}`.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from kllint.diagnostics import Diagnostic, Estimate
from kllint.gradcheck import verdict as V

ALLOWED_MODULE_PREFIXES = ("torch", "jax", "jaxlib", "numpy", "math", "optax", "flax", "einops")
"""Only these modules are imported for an estimate's aliases (`Estimate.aliases`)."""

SEQUENCE_CODES = {"KL201", "KL202", "KL402"}
"""Codes confirmed on the vocabulary-3, horizon-3 sequence problem; the others on the 4-action bandit."""

OFF_POLICY_CODES = {"KL401", "KL402", "KL403"}
"""Codes confirmed with samples from `pi_old != pi`."""

MILD_SCALE = 0.3
"""Logit scale of the second, milder problem tried when the first does not confirm a finding."""

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

EXPECTED: dict[str, str] = {
    "KL101": "a zero expected gradient",
    "KL102": "the gradient of the forward KL(ref || pi)",
    "KL103": "a gradient that is not the reverse-KL gradient",
    "KL104": "a zero gradient",
    "KL201": "a partial gradient (missing future-token credit)",
    "KL202": "a partial gradient (missing future-token credit)",
    "KL302": "a biased gradient",
    "KL401": "a biased gradient off-policy",
    "KL402": "a gradient that is not the reverse-KL gradient",
    "KL403": "a gradient that is not the reverse-KL gradient",
    "KL601": "a NaN/inf gradient on extreme inputs",
}
"""What each code's static finding says the gradient is, in words (for a contradiction)."""

CONFIRMED, CONTRADICTED, NOT_CONFIRMED = "confirmed", "contradicted", "not confirmed"
"""`status` of a `--confirm` result: the checker agrees, disagrees, or could not judge (`reason`)."""


def _not_evaluated(reason: str, code: str) -> dict[str, Any]:
    return {"verdict": V.NOT_EVALUATED, "summary": reason, "agrees": None, "code": code,
            "status": NOT_CONFIRMED, "reason": f"the estimate could not be evaluated ({reason})"}


def _with_status(result: dict[str, Any]) -> dict[str, Any]:
    """Add `status` (confirmed | contradicted | not confirmed), `expected` and, when not
    confirmed, `reason` to a result of `_confirm`."""
    code = result.get("code", "")
    result["expected"] = EXPECTED.get(code)
    if result.get("agrees") is True:
        result["status"] = CONFIRMED
    elif result.get("agrees") is False:
        result["status"] = CONTRADICTED
        result["reason"] = (f"the static analysis reports {code}, {EXPECTED.get(code, 'a wrong gradient')}; "
                            f"the gradient checker measured `{result.get('verdict')}`: {result.get('summary')}")
    else:
        result["status"] = NOT_CONFIRMED
        result["reason"] = f"the gradient checker has no runtime criterion for {code}: {result.get('summary')}"
    return result


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
    evaluation for `PER_TOKEN_CODES`. When the result does not confirm the code, the check is
    repeated on milder policies (logits scaled by `MILD_SCALE`, seed 0), where clamps such as
    `clamp(k3, -10, 10)` are inactive; if that confirms it, its numbers are returned and a
    note gives the first result. KL601 is confirmed by a non-finite float32 gradient when
    one token's log-prob is -150 vs the reference.

    Returns:
        JSON-able dict: `verdict`, `cos_reverse`, `rel_err_reverse`, `cos_forward`,
        `rel_err_forward`, `vocab`, `horizon`, `summary`, `agrees` (bool, or None when the
        code has no runtime criterion), plus `code`, `framework`, `usage`, `granularity`,
        `sampling`, `extreme_input_finite`, `notes`, and `status` (`confirmed`, `contradicted`
        or `not confirmed`), `expected` (the static claim in words) and `reason` (why it is not
        confirmed). On any failure: `{"verdict": "not-evaluated", "summary": reason, "agrees":
        None, "code": code, "status": "not confirmed", "reason": ...}`.
    """
    code = str(code).upper()
    try:
        return _with_status(_confirm(estimate, code))
    except Exception as exc:  # noqa: BLE001 - never raise from --confirm
        message = str(exc).splitlines()[0] if str(exc) else ""
        return _not_evaluated(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, code)


def _evaluate(estimate: Estimate, code: str, rule: Callable[[V.GradcheckResult], bool] | None
              ) -> tuple[V.GradcheckResult, str, list[str]]:
    """Run the estimate (see `confirm_estimate`); returns the result, the granularity used, notes."""
    from kllint.gradcheck.backends import detect_framework
    from kllint.gradcheck.check import check_expression
    from kllint.gradcheck.exact import ROLES
    from kllint.gradcheck.policies import make_problem

    framework = estimate.framework if estimate.framework in ("torch", "jax") else \
        detect_framework(estimate.source, *estimate.setup)
    options = dict(
        names={name: (role if role in ROLES else "ones") for name, role in estimate.roles},
        setup=tuple(estimate.setup), modules=_modules(tuple(estimate.aliases)),
        usage=estimate.usage if estimate.usage in ("loss", "reward") else "loss",
        sampling="off-policy" if code in OFF_POLICY_CODES else "on-policy" if code in PER_TOKEN_CODES else None,
        framework=framework)
    granularity = "sequence" if estimate.granularity == "sequence" and code not in PER_TOKEN_CODES else "per-token"

    def run(problem: Any) -> tuple[V.GradcheckResult, str]:
        try:
            return check_expression(estimate.source, granularity=granularity, problem=problem, **options), granularity
        except Exception:
            if granularity != "sequence":
                raise
            # the source reduces the token axis itself: bind [batch, tokens] tensors
            return check_expression(estimate.source, granularity="per-token", problem=problem, **options), "per-token"

    problem = make_problem(None, 3) if code in SEQUENCE_CODES else make_problem(None, 1)
    result, used = run(problem)
    notes: list[str] = []
    if rule is not None and not rule(result):
        # Clamps such as verl's `clamp(k3, -10, 10)` are active on the theory-doc policies (one
        # log-ratio is about 3); the rules are about the estimator where clamps are inactive.
        mild_result, mild_used = run(make_problem(problem.vocab, problem.horizon, seed=0, scale=MILD_SCALE))
        if rule(mild_result):
            notes.append(f"on the {problem.description} policies: {V.summarize(result, extreme=False)}; "
                         f"confirmed on milder policies (logit scale {MILD_SCALE:g}) where clamps are inactive")
            result, used = mild_result, mild_used
    return result, used, notes


def _confirm(estimate: Estimate, code: str) -> dict[str, Any]:
    rule = AGREEMENT.get(code)
    result, granularity, notes = _evaluate(estimate, code, rule)
    notes = list(result.notes) + notes
    if rule is None:
        notes.append(f"no runtime criterion for {code}")
    verdict = result.verdict
    summary = V.summarize(result, extreme=False)
    if code == "KL601":
        if result.extreme_input_finite is False:
            verdict = V.NAN
        finite = {True: "the gradient stays finite", False: V.EXTREME_NOTE,
                  None: "the extreme input could not be evaluated"}
        summary = f"{finite[result.extreme_input_finite]}; on ordinary inputs: {summary}"
    out = result.to_json()
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
        "framework": result.framework,
        "usage": result.usage,
        "granularity": granularity,
        "sampling": result.sampling,
        "policies": result.policies,
        "extreme_input_finite": result.extreme_input_finite,
        "notes": notes,
    }


def confirm_findings(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Attach `confirm_estimate`'s result to each finding with an estimate (`confirmed`); a
    finding the checker contradicts is kept, and its result says so.

    Raises:
        kllint.gradcheck.errors.GradcheckError: neither PyTorch nor JAX (with numpy) is installed,
            or the framework an estimate needs is missing.
    """
    import importlib.util
    from dataclasses import replace

    from kllint.gradcheck.errors import GradcheckError

    have = {name: importlib.util.find_spec(name) is not None for name in ("numpy", "torch", "jax")}
    if not have["numpy"] or not (have["torch"] or have["jax"]):
        raise GradcheckError("--confirm runs the gradient checker, which needs PyTorch or JAX (and numpy): "
                             "pip install torch numpy (kllint's `torch` extra) or jax jaxlib numpy (the `jax` extra)")
    return [d if d.estimate is None else replace(d, confirmed=confirm_estimate(d.estimate, d.code))
            for d in diagnostics]
