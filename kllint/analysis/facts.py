"""Facts the interpreter records for the rules: where values reach loss and reward sinks, and the
API calls the API-pitfall rules judge. Rules turn facts into diagnostics; facts carry no verdicts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import sympy as sp

from kllint.analysis.symbolic import EstimatorMatch
from kllint.analysis.values import Anchor, Formed, Reduced, Tensor


@dataclass
class KLTerm:
    """A KL estimate that met other terms (a loss, a reward, a coefficient) and is tracked as a
    symbol from then on. `expr` is its pure expression; `estimator` None means a tensor named as
    a KL whose form the analysis cannot see (a function parameter `kl`)."""

    symbol: sp.Symbol
    expr: sp.Expr
    estimator: EstimatorMatch | None
    anchor: Anchor
    trace: tuple[Formed, ...] = ()
    call_sites: tuple[Anchor, ...] = ()
    entry: Anchor | None = None  # where it was first added to another term
    per_token: bool = True
    assumed: bool = False
    reduced: Reduced | None = None  # where it (or the estimate it stands for) was first reduced
    # the same estimate returned through other chains of calls (one root cause, several paths)
    other_call_sites: list = field(default_factory=list)


class SinkKind(Enum):
    """How a value is differentiated (the rules put it into words)."""

    BACKWARD_METHOD = "backward-method"  # `loss.backward()`
    BACKWARD_CALL = "backward-call"  # `accelerator.backward(loss)`, `backward(loss)`
    AUTOGRAD = "autograd"  # `torch.autograd.grad(loss, ...)`, `torch.autograd.backward`
    GRAD_TRANSFORM = "grad-transform"  # the function given to `jax.grad` / `jax.value_and_grad`
    CONFIGURED = "configured"  # a call named in `vocab.loss-sinks`
    LOSS_RETURN = "loss-return"  # returned by a loss function
    LOSS_ENTRY = "loss-entry"  # `out["loss_kl"] = ...` in a loss function's output


@dataclass
class LossFact:
    """A value that is differentiated: `.backward()`, `autograd.grad`, a loss function's result,
    the result of a function given to `jax.grad`; `kind` and `name` say how."""

    loss: Tensor
    sink: Anchor
    kind: SinkKind
    name: str = ""  # the API, configured sink or loss function (`accelerator.backward`, `grpo_loss`)
    call_stack: tuple[Anchor, ...] = ()
    epoch_loop: str = ""  # the iterable of the loop of several updates per batch it runs in (`range(ppo_epochs)`)
    entry_key: str = ""  # for LOSS_ENTRY: the key of the output entry (`loss_kl`)


@dataclass
class RewardFact:
    """A value stored into rewards (`kind='rewards'`) or returns/advantages (`kind='returns'`)."""

    value: Tensor
    sink: Anchor
    target: str
    kind: str
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class ClampFact:
    """`exp` of a live, unbounded log-ratio clamped after the exponential: `clamped` is the
    clamp's expression (a `Clamp(...)` node, the marker the value carries from here on). The
    rule judges it only where a differentiated value contains it."""

    clamped: sp.Expr
    anchor: Anchor
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class CallFact:
    """An API call judged on its own (kl_div arguments, reference forward, clamp after exp)."""

    code: str
    anchor: Anchor
    message: str
    help: str
    call_stack: tuple[Anchor, ...] = ()
    trace: tuple = field(default_factory=tuple)
    at_caller: bool = False  # reported at the last call site in the checked file (see `location`)

    def location(self, checked: str) -> Anchor:
        """Where to report in the module displayed as `checked`: the anchor, or for an `at_caller`
        fact the innermost call site in that module (the user's call of a shared helper); read
        from the call stack when reported, so a memoised helper call re-stated at another call
        site (its call stack replaced) is reported there."""
        if self.at_caller:
            local = [site for site in self.call_stack if site.path == checked]
            if local:
                return local[-1]
        return self.anchor


@dataclass(frozen=True)
class BranchChoice:
    """`a if test else b` whose test the analysis cannot decide (`self.num_iterations > 1`),
    where one branch reads the rollout policy's log-probs and the other does not: `test` and
    that branch (`source`) as written; `when_true`: it is the branch taken when `test` holds."""

    anchor: Anchor
    test: str
    when_true: bool
    source: str
    call_stack: tuple[Anchor, ...] = ()


@dataclass(frozen=True)
class Abandoned:
    """A function whose analysis stopped before its end, or a call the analysis did not follow
    with log-probs or KL terms among its arguments: a finding on that path may be missing.
    `reason` is a short phrase (`step budget of 60,000 exhausted`)."""

    function: str
    path: str
    line: int
    reason: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: analysis of `{self.function}` abandoned: {self.reason}"
