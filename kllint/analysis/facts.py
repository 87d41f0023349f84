"""Facts the interpreter records for the rules (observations): where values reach loss and reward
sinks, and the API calls the API-pitfall rules judge (kl_div arguments, reference forwards, clamps
after exp). Rules turn facts into diagnostics; facts carry no verdicts, codes or wording.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kllint.analysis import terms as tm

from kllint.analysis.estimators import EstimatorMatch
from kllint.analysis.values import Anchor, Formed, Reduced, Tensor


@dataclass
class KLTerm:
    """A KL estimate that met other terms (a loss, a reward, a coefficient) and is tracked as a
    symbol from then on. `expr` is its pure expression; `estimator` None means a tensor named as
    a KL whose form the analysis cannot see (a function parameter `kl`)."""

    symbol: tm.Symbol
    expr: tm.Term
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
class MetricFact:
    """A value read out as a number or logged (`how`: `.item()`, `stored in `metrics``, `logged by
    `wandb.log``): where an estimate ends when no gradient or reward takes it. No rule judges it;
    `kllint check --show-sites` reports it."""

    value: Tensor
    sink: Anchor
    how: str
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class ClampFact:
    """`exp` of a live, unbounded log-ratio clamped after the exponential: `clamped` is the
    clamp's expression (a `Clamp(...)` node, the marker the value carries from here on). The
    rule judges it only where a differentiated value contains it."""

    clamped: tm.Term
    anchor: Anchor
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class KlDivCall:
    """A call of PyTorch's kl_div, which computes KL(target || exp(input)) elementwise: `api` is
    `F.kl_div` or `nn.KLDivLoss` (a call of an instance). `input_space` and `target_space` are
    what the arguments hold ("prob", "logits", "logprob"; None: not known); `reduction` is the
    literal reduction (None when it is not a literal), `explicit_reduction` whether the code
    writes it (else it is PyTorch's default, "mean")."""

    anchor: Anchor
    api: str
    input_space: str | None
    target_space: str | None
    log_target: bool
    reduction: object
    explicit_reduction: bool
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class KlDivLossConstruction:
    """`nn.KLDivLoss(...)`: the reduction its instances apply (None when not a literal) and
    whether the code writes it."""

    anchor: Anchor
    reduction: object
    explicit_reduction: bool
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class RoleEvidence:
    """Why a value read or formed at `anchor` has `role` (`policy`, `reference`, `old`, `mask`,
    `kl`, `coefficient`, `network:<role>`): a short account of the evidence, dataflow first
    ("forward of `anchor_net` only with gradient tracking off, ...", "detached explicitly in this
    function"), a name last ("name `ref_logp`"). No rule judges it; reports show it."""

    anchor: Anchor
    role: str
    evidence: str
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class ClassMeanOfKlDiv:
    """The elementwise result of kl_div (`reduction='none'`) averaged over the class dimension:
    `.mean()` or `.mean(-1)` at `anchor`."""

    anchor: Anchor
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class OptaxKlCall:
    """A call of optax's KL divergence (`function`: `kl_divergence`, ...), whose first argument
    should hold log-probabilities: `predictions_space` is what it holds (None: not known)."""

    anchor: Anchor
    function: str
    predictions_space: str | None
    call_stack: tuple[Anchor, ...] = ()


@dataclass
class ReferenceForward:
    """A forward pass of a reference network (a call with inputs) and the network's name as the
    code holds it (`model`: `self.ref_model`). `taped`: the code computes with a framework whose
    autograd records forwards (PyTorch); `tracking`: gradient tracking is on there (no `no_grad`
    / `inference_mode` in this frame, its callers or the code around it); `frozen`: the network's
    parameters are frozen (`requires_grad_(False)`); `weak_name`: the network is the reference
    only by a weak word of its name (`base_model`, `init_model`: often the policy's own
    backbone); `handed_in`: the function running the forward received the network from its caller
(a parameter), rather than reading it from `self` or a global. A forward that autograd records (taped, tracking, not frozen) is observed within
    one call of the entry point only. `call_stack` ends with the call sites that lead to it."""

    anchor: Anchor
    model: str
    taped: bool
    tracking: bool
    frozen: bool
    call_stack: tuple[Anchor, ...] = ()
    weak_name: bool = False  # the reference role rests on a weak word of its name (`base_model`)
    handed_in: bool = True  # the network reaches the forward's function through its parameters


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
