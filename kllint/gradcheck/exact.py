"""Exact expectations over every enumerated response (no sampling).

Two kinds of gradients w.r.t. the policy logits `theta` (`[prefixes, vocab]`):

* the true gradients of the sequence-level divergences, reverse `KL(pi || pi_ref)` and
  forward `KL(pi_ref || pi)`, and their per-token ("partial") versions that hold the prefix
  distribution fixed (Tang & Munos 2025, arXiv:2506.09477, section 4);
* the *expected gradient of a term under test*:
  - as a **loss** (differentiated pathwise): `sum_y p_s(y) * grad_theta L(y; theta)`, where
    `p_s` is the sampling policy's probability, a constant (`pi` detached on-policy, `pi_old`
    off-policy) and `L(y)` is the term reduced over tokens;
  - as a **reward** (detached, score function): `sum_y p(y) * sum_t grad log pi(y_t|y_<t) * c_t(y)`
    where `c_t` is the token's own per-token reward, its reward-to-go (returns with gamma = 1)
    when `reward_to_go` is set, or the sequence reward when the term is per sequence.

Shapes: responses are the rows of `[batch, tokens]` tensors, `batch = vocab ** horizon`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from kllint.gradcheck.errors import GradcheckError
from kllint.gradcheck.policies import TabularProblem

USAGES = ("loss", "reward")
GRANULARITIES = ("per-token", "sequence")
SAMPLINGS = ("on-policy", "off-policy")

TOKEN_ROLES = ("policy", "policy_detached", "reference", "old", "mask", "ones")
DIST_ROLES = ("policy_dist", "reference_dist")
ROLES = TOKEN_ROLES + DIST_ROLES
"""Roles a name can be bound to.

Per token (`[batch, tokens]`): `policy` (live log-probs of the sampled tokens), `policy_detached`,
`reference`, `old` (rollout policy; the detached policy on-policy), `mask` and `ones` (ones).
Full vocabulary (`[batch, tokens, vocab]`, per-token checks only): `policy_dist`,
`reference_dist` (log-probs of every token at each position). With the sequence granularity
the per-token roles are summed over tokens (`[batch]`).
"""

Term = Callable[[Mapping[str, Any]], Any]
"""A term under test: maps the role tensors to per-token `[batch, tokens]` or per-sequence `[batch]` values."""


@dataclass(frozen=True)
class Setting:
    """How a term is used: `usage` loss|reward, `granularity` per-token|sequence,
    `sampling` on-policy|off-policy (losses only; rewards are checked on-policy),
    `reward_to_go`: per-token rewards are credited with their returns (gamma = 1)."""

    usage: str = "loss"
    granularity: str = "per-token"
    sampling: str = "on-policy"
    reward_to_go: bool = False

    def __post_init__(self) -> None:
        for value, allowed, what in ((self.usage, USAGES, "usage"),
                                     (self.granularity, GRANULARITIES, "granularity"),
                                     (self.sampling, SAMPLINGS, "sampling")):
            if value not in allowed:
                raise GradcheckError(f"unknown {what} {value!r} (choose from {', '.join(allowed)})")


class Roles(dict):
    """The role tensors handed to a term; unavailable roles raise a clear `GradcheckError`."""

    def __missing__(self, key: str) -> Any:
        if key in DIST_ROLES:
            raise GradcheckError(f"role {key!r} (full-vocabulary log-probs) exists only for per-token checks")
        raise GradcheckError(f"unknown role {key!r} (choose from {', '.join(ROLES)})")


@dataclass
class _Context:
    logp: Any  # [batch, tokens] live
    roles: Roles
    detached_roles: Roles
    weights: Any  # [batch] constant sampling probabilities


def _context(problem: TabularProblem, backend: Any, theta: Any, precision: str, setting: Setting) -> _Context:
    B = backend
    pre, seq = B.index(problem.prefix_index), B.index(problem.sequences)
    policy_all = B.log_softmax(theta)
    reference_all = B.log_softmax(B.constant(problem.reference_logits, precision))
    logp = policy_all[pre, seq]
    ref = reference_all[pre, seq]
    ones = B.constant(np.ones(problem.sequences.shape), precision)
    off_policy = setting.sampling == "off-policy" and setting.usage == "loss"
    if off_policy:
        old = B.log_softmax(B.constant(problem.old_logits, precision))[pre, seq]
        weights = B.exp(old.sum(-1))
    else:
        old = B.stop_gradient(logp)
        weights = B.stop_gradient(B.exp(logp.sum(-1)))
    detached = B.stop_gradient(logp)

    def roles(live: Any) -> Roles:
        token = {"policy": live, "policy_detached": detached, "reference": ref, "old": old,
                 "mask": ones, "ones": ones}
        if setting.granularity == "sequence":
            return Roles({name: value.sum(-1) for name, value in token.items()})
        dist_live = policy_all[pre] if live is logp else B.stop_gradient(policy_all[pre])
        return Roles(token, policy_dist=dist_live, reference_dist=reference_all[pre])

    return _Context(logp=logp, roles=roles(logp), detached_roles=roles(detached), weights=weights)


def _values(backend: Any, value: Any, like: Any, problem: TabularProblem, allow_tokens: bool = True) -> Any:
    """The term's value as `[batch, tokens]` (per-token) or `[batch]` (per-sequence)."""
    value = backend.as_array(value, like)
    shape = backend.shape(value)
    batch, horizon = problem.batch, problem.horizon
    if allow_tokens and shape == (batch, horizon):
        return value
    if shape in ((batch,), (batch, 1)):
        return backend.reshape(value, (batch,))
    expected = f"[batch, tokens] = [{batch}, {horizon}] or [batch] = [{batch}]" if allow_tokens else f"[batch] = [{batch}]"
    raise GradcheckError(
        f"the term has shape {list(shape)}; expected {expected}: keep the batch axis "
        "(a term reduced over the batch cannot be weighted by the responses' probabilities)")


def term_objective(problem: TabularProblem, backend: Any, term: Term, setting: Setting,
                   precision: str = "float64") -> Callable[[Any], Any]:
    """The scalar surrogate whose gradient is the term's expected gradient (see module doc)."""
    B = backend

    def objective(theta: Any) -> Any:
        ctx = _context(problem, B, theta, precision, setting)
        if setting.usage == "loss":
            values = _values(B, term(ctx.roles), ctx.logp, problem, allow_tokens=setting.granularity == "per-token")
            if len(B.shape(values)) == 2:
                values = values.sum(-1)
            return (ctx.weights * values).sum()
        rewards = B.stop_gradient(_values(B, term(ctx.detached_roles), ctx.logp, problem,
                                          allow_tokens=setting.granularity == "per-token"))
        if len(B.shape(rewards)) == 2:
            credit = B.reverse_cumsum(rewards) if setting.reward_to_go else rewards
            return (ctx.weights * (ctx.logp * credit).sum(-1)).sum()
        return (ctx.weights * ctx.logp.sum(-1) * rewards).sum()

    return objective


def term_gradient(problem: TabularProblem, backend: Any, term: Term, setting: Setting,
                  precision: str = "float64") -> np.ndarray:
    """Expected gradient of `term` used as `setting` says, `[prefixes, vocab]` float64.

    Raises:
        GradcheckError: the term has the wrong shape or asks for an unavailable role.
        Exception: whatever the term itself raises when evaluated.
    """
    return backend.gradient(term_objective(problem, backend, term, setting, precision),
                            problem.policy_logits, precision)


REFERENCES = ("reverse", "forward", "partial_reverse", "partial_forward")


def reference_gradients(problem: TabularProblem, backend: Any) -> dict[str, np.ndarray]:
    """True gradients, `[prefixes, vocab]` float64, keyed by name.

    * `reverse`: grad KL(pi || pi_ref) over whole responses (the target);
    * `forward`: grad KL(pi_ref || pi);
    * `partial_reverse`: `E_pi[sum_t d_t grad log pi_t]`, each token credited with its own
      log-ratio only (what per-token KL losses summed over tokens give);
    * `partial_forward`: `E_pi[sum_t (1 - r_t) grad log pi_t]` (per-token k3 losses summed).
    """
    B = backend
    precision = "float64"
    setting = Setting()

    def reverse(theta: Any) -> Any:
        ctx = _context(problem, B, theta, precision, setting)
        seq_logp, seq_ref = ctx.logp.sum(-1), ctx.roles["reference"].sum(-1)
        return (B.exp(seq_logp) * (seq_logp - seq_ref)).sum()

    def forward(theta: Any) -> Any:
        ctx = _context(problem, B, theta, precision, setting)
        seq_logp, seq_ref = ctx.logp.sum(-1), ctx.roles["reference"].sum(-1)
        return (B.exp(seq_ref) * (seq_ref - seq_logp)).sum()

    def partial_reverse(theta: Any) -> Any:
        ctx = _context(problem, B, theta, precision, setting)
        d = B.stop_gradient(ctx.logp - ctx.roles["reference"])
        return (ctx.weights * (ctx.logp * d).sum(-1)).sum()

    def partial_forward(theta: Any) -> Any:
        ctx = _context(problem, B, theta, precision, setting)
        coef = 1 - B.stop_gradient(B.exp(ctx.roles["reference"] - ctx.logp))
        return (ctx.weights * (ctx.logp * coef).sum(-1)).sum()

    objectives = {"reverse": reverse, "forward": forward,
                  "partial_reverse": partial_reverse, "partial_forward": partial_forward}
    return {name: B.gradient(fn, problem.policy_logits, precision) for name, fn in objectives.items()}
