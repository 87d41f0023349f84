"""The checks: a term on a tabular problem -> `GradcheckResult`.

Entry points: `check_expression` (an expression string), `check_function` (a Python
function) and `check_term` (a prepared `ExpressionTerm` / `FunctionTerm`).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kllint.gradcheck.backends import detect_framework, load_backend
from kllint.gradcheck.errors import GradcheckError
from kllint.gradcheck.exact import Setting, reference_gradients, term_gradient
from kllint.gradcheck.policies import TabularProblem, make_problem
from kllint.gradcheck.terms import ExpressionTerm, FunctionTerm, expression_term, infer_arguments
from kllint.gradcheck.verdict import ZERO, GradcheckResult, cosine, judge, relative_error

_REFERENCE_CACHE: dict[tuple, dict[str, np.ndarray]] = {}


def _references(problem: TabularProblem, backend: Any) -> dict[str, np.ndarray]:
    """`reference_gradients`, cached per framework and problem (they do not depend on the term)."""
    key = (backend.name, problem.vocab, problem.horizon, problem.policy_logits.tobytes(),
           problem.reference_logits.tobytes())
    if key not in _REFERENCE_CACHE:
        if len(_REFERENCE_CACHE) > 32:
            _REFERENCE_CACHE.clear()
        _REFERENCE_CACHE[key] = reference_gradients(problem, backend)
    return _REFERENCE_CACHE[key]


def default_problems(vocab: int | None = None, horizon: int | None = None,
                     seed: int | None = None) -> list[TabularProblem]:
    """The problems a check runs on: the 4-action bandit and the V=3, T=3 sequence problem,
    or the single problem given by `vocab` / `horizon`.

    Raises:
        ValueError: the sizes are invalid or too large (see `make_problem`).
    """
    if vocab is None and horizon is None:
        return [make_problem(None, 1, seed), make_problem(None, 3, seed)]
    return [make_problem(vocab, 1 if horizon is None else horizon, seed)]


def check_term(term: ExpressionTerm | FunctionTerm, problem: TabularProblem, *, label: str,
               usage: str = "loss", granularity: str = "per-token", sampling: str | None = None,
               reward_to_go: bool = False, framework: str = "torch", extreme: bool = True,
               notes: Sequence[str] = ()) -> GradcheckResult:
    """Expected gradient of `term` vs the true gradients on `problem`, and the verdict.

    Args:
        term: from `expression_term` or a `FunctionTerm`.
        problem: a `TabularProblem` (`make_problem`).
        usage: `loss` (differentiated pathwise) or `reward` (detached, score function).
        granularity: `per-token` (role tensors `[batch, tokens]`, the term's per-token values
            summed over tokens) or `sequence` (role tensors summed per response, `[batch]`).
        sampling: `on-policy` or `off-policy` (samples from `pi_old != pi`, losses only);
            default: off-policy iff the term uses the `old` role in a loss.
        reward_to_go: per-token rewards are credited with their returns (gamma = 1).
        framework: `torch` or `jax`.
        extreme: also evaluate in float32 with two extreme first tokens (KL601) and report
            whether the gradient stays finite.

    Raises:
        GradcheckError: bad shapes, roles or settings. MissingFrameworkError: no framework.
        Exception: whatever the user's code raises.
    """
    notes = list(notes)
    uses_old = "old" in term.roles_used()
    if sampling is None:
        sampling = "off-policy" if uses_old and usage == "loss" else "on-policy"
    if usage == "reward" and sampling == "off-policy":
        notes.append("rewards are checked on-policy (the importance ratio of PPO restores the on-policy expectation)")
        sampling = "on-policy"
    if reward_to_go and usage != "reward":
        notes.append("--reward-to-go applies to rewards only; ignored")
        reward_to_go = False
    setting = Setting(usage=usage, granularity=granularity, sampling=sampling, reward_to_go=reward_to_go)
    backend = load_backend(framework)
    fn = term.make(backend.namespace())
    references = _references(problem, backend)
    g = term_gradient(problem, backend, fn, setting)
    verdict, found = judge(g, references, problem.horizon)
    zero = verdict == ZERO
    extreme_finite = None
    if extreme:
        try:
            g32 = term_gradient(problem.with_extreme_tokens(), backend, fn, setting, precision="float32")
            extreme_finite = bool(np.all(np.isfinite(g32)))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            notes.append(f"extreme-input check failed: {type(exc).__name__}: {exc}")
    rev, fwd = references["reverse"], references["forward"]
    rev_norm = float(np.linalg.norm(rev))
    finite = bool(np.all(np.isfinite(g)))
    nan = float("nan")
    return GradcheckResult(
        term=label, verdict=verdict,
        cos_reverse=0.0 if zero else cosine(g, rev) if finite else nan,
        rel_err_reverse=relative_error(g, rev) if finite else nan,
        cos_forward=0.0 if zero else cosine(g, fwd) if finite else nan,
        rel_err_forward=relative_error(g, fwd) if finite else nan,
        scale_reverse=float(np.dot(g.ravel(), rev.ravel()) / rev_norm**2) if finite and rev_norm else nan,
        grad_norm=float(np.linalg.norm(g)) if finite else nan,
        matches=found, vocab=problem.vocab, horizon=problem.horizon, usage=usage,
        granularity=granularity, sampling=sampling, reward_to_go=reward_to_go,
        framework=framework, policies=problem.description, extreme_input_finite=extreme_finite,
        notes=tuple(notes), gradient=g, references=references)


def _problem(problem: TabularProblem | None, vocab: int | None, horizon: int | None, seed: int | None) -> TabularProblem:
    if problem is not None:
        return problem
    return make_problem(vocab, 1 if horizon is None else horizon, seed)


def check_expression(expression: str, *, names: Mapping[str, str] | None = None, setup: Sequence[str] = (),
                     modules: Mapping[str, Any] | None = None, usage: str = "loss",
                     granularity: str = "per-token", sampling: str | None = None,
                     reward_to_go: bool = False, framework: str = "auto",
                     problem: TabularProblem | None = None, vocab: int | None = None,
                     horizon: int | None = None, seed: int | None = None,
                     extreme: bool = True) -> GradcheckResult:
    """Check an expression such as ``torch.exp(ref - logp) - (ref - logp) - 1``.

    Names: `logp` (policy, live), `ref`, `old`, `mask`, `logp_all` / `ref_all` (full-vocabulary
    log-probs `[batch, tokens, vocab]`) unless `names` maps names to roles differently; other
    free names are bound to ones (listed in the notes). Per token, the names are
    `[batch, tokens]` tensors and the value is summed over tokens; with `granularity="sequence"`
    they are the per-response sums `[batch]`. `framework="auto"` picks jax when the code uses
    `jnp.` / `jax.`. The problem defaults to `make_problem(vocab, horizon or 1, seed)`.

    Raises:
        GradcheckError: parse errors, unknown roles, wrong shapes, bad sizes.
        MissingFrameworkError: the framework is not installed.
        Exception: whatever the expression raises when evaluated.
    """
    if framework == "auto":
        framework = detect_framework(expression, *setup)
    backend = load_backend(framework)
    term = expression_term(expression, names, setup, modules, module_names=tuple(backend.namespace()))
    notes = []
    if term.opaque:
        notes.append(f"bound to ones: {', '.join(term.opaque)}")
    if term.keyed:
        notes.append("read by key: " + ", ".join(f"{name}[{key!r}] as {role}" for name, keys in term.keyed
                                                  for key, role in keys))
    try:
        prob = _problem(problem, vocab, horizon, seed)
    except ValueError as exc:
        raise GradcheckError(str(exc)) from exc
    return check_term(term, prob, label=term.expression, usage=usage, granularity=granularity,
                      sampling=sampling, reward_to_go=reward_to_go, framework=framework,
                      extreme=extreme, notes=notes)


def function_framework(func: Callable[..., Any]) -> str:
    """`jax` if the function's module uses jax and not torch, else `torch`."""
    module_names = set()
    for value in getattr(func, "__globals__", {}).values():
        name = getattr(value, "__name__", "") if inspect.ismodule(value) else getattr(value, "__module__", "") or ""
        module_names.add(name.split(".")[0])
    if "jax" in module_names and "torch" not in module_names:
        return "jax"
    return "torch"


def check_function(func: Callable[..., Any], *, arguments: Mapping[str, str] | None = None,
                   kwargs: Mapping[str, Any] | None = None, label: str | None = None,
                   usage: str = "loss", granularity: str = "per-token", sampling: str | None = None,
                   reward_to_go: bool = False, framework: str = "auto",
                   problem: TabularProblem | None = None, vocab: int | None = None,
                   horizon: int | None = None, seed: int | None = None,
                   extreme: bool = True) -> GradcheckResult:
    """Check a Python function called with role tensors, e.g. verl's
    ``kl_penalty(logprob, ref_logprob, kl_penalty="low_var_kl")``.

    `arguments` maps parameter -> role (`exact.ROLES`); required parameters left out get a
    role from their names (`infer_arguments`). `kwargs` are passed as they are.
    Tensors are `[batch, tokens]` per token (the result, `[batch, tokens]` or `[batch]`, is
    summed over tokens) or `[batch]` with `granularity="sequence"`.

    Raises:
        GradcheckError: roles cannot be inferred, wrong shapes, bad sizes.
        MissingFrameworkError: the framework is not installed.
        Exception: whatever the function raises.
    """
    kwargs = dict(kwargs or {})
    bound = infer_arguments(func, dict(arguments or {}), kwargs)
    if framework == "auto":
        framework = function_framework(func)
    term = FunctionTerm(function=func, arguments=tuple(bound.items()), kwargs=tuple(kwargs.items()))
    if label is None:
        call = ", ".join([f"{k}={v}" for k, v in bound.items()] + [f"{k}={v!r}" for k, v in kwargs.items()])
        label = f"{getattr(func, '__module__', '?')}:{getattr(func, '__qualname__', func)}({call})"
    try:
        prob = _problem(problem, vocab, horizon, seed)
    except ValueError as exc:
        raise GradcheckError(str(exc)) from exc
    return check_term(term, prob, label=label, usage=usage, granularity=granularity, sampling=sampling,
                      reward_to_go=reward_to_go, framework=framework, extreme=extreme)
