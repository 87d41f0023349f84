"""Small tabular softmax policies whose every response can be enumerated.

A problem has a vocabulary of `vocab` tokens and a horizon of `horizon` tokens. The policy is
autoregressive over all prefixes: one row of logits per prefix `y_<t` (`sum_t vocab**t` rows,
breadth first: the empty prefix, then length 1 in lexicographic order, ...). `horizon == 1` is
the bandit of Tang & Munos (2025, arXiv:2506.09477, section 3); `horizon > 1` is their
sequence setting (section 4), where the future-token credit matters.

Three sets of logits: the trained policy `pi` (the parameters the checker differentiates),
the frozen reference `pi_ref`, and the rollout policy `pi_old` used for off-policy checks
(`pi`'s logits plus Gaussian noise of scale `old_shift`).

Everything here is numpy: the backends (`backends.py`) turn the tables into tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

MAX_SEQUENCES = 50_000
"""Largest `vocab ** horizon` (number of enumerated responses) accepted by `make_problem`."""

DEFAULT_BANDIT_VOCAB = 4
DEFAULT_SEQUENCE_VOCAB = 3
DEFAULT_SEQUENCE_HORIZON = 3

DOC_BANDIT_LOGITS = (
    (1.5409960746765137, -0.293428897857666, -2.1787893772125244, 0.5684312582015991),
    (-1.0845223665237427, -1.3985954523086548, 0.40334683656692505, 0.8380263447761536),
)
"""Policy and reference logits of the 4-action bandit of `docs/theory.md`.

They are the float32 draws of ``torch.manual_seed(0); torch.randn(4); torch.randn(4)``
(policy first); with them the checker reproduces every bandit number of `docs/theory.md` to
three decimals (k3 as loss: cosine 0.898, relative error 0.442; k2 in reward 0.371; k3 in
reward 0.924). Stored as literals so that the numbers do not depend on which framework is
installed; a test checks them against torch when torch is available.
"""

DOC_SEQUENCE_SEED = 1139647
"""numpy seed of the default vocabulary-3, horizon-3 problem.

The project's first account of the theory gave a sequence table for an unrecorded random
policy (0.921 / 0.442 for per-token k2 summed, 0.787 / 0.717 for k3). This seed was chosen by
searching seeds 0..2,000,000 of ``np.random.default_rng(seed).standard_normal`` for the
closest match: per-token k2 summed gives cosine 0.925 / relative error 0.444 and per-token k3
summed 0.786 / 0.721, the numbers `docs/theory.md` shows.
"""

OLD_SHIFT = 0.5
EXTREME_LOGPROB = -150.0


@dataclass(frozen=True, eq=False)
class TabularProblem:
    """An enumerable problem: logits of `pi`, `pi_ref` and `pi_old`, and every response.

    Attributes:
        vocab: vocabulary size V (at least 2).
        horizon: response length T (at least 1).
        policy_logits, reference_logits, old_logits: float64 arrays `[prefixes, vocab]`.
        sequences: int array `[batch, tokens]` with every response, `batch = vocab**horizon`,
            in lexicographic order.
        prefix_index: int array `[batch, tokens]`: the logits row of the prefix before each token.
        description: how the logits were made (seed or preset), for reports.
    """

    vocab: int
    horizon: int
    policy_logits: np.ndarray
    reference_logits: np.ndarray
    old_logits: np.ndarray
    sequences: np.ndarray
    prefix_index: np.ndarray
    description: str
    seed: int | None = None

    @property
    def batch(self) -> int:
        """Number of enumerated responses, `vocab ** horizon`."""
        return int(self.sequences.shape[0])

    @property
    def kind(self) -> str:
        """`bandit` for one-token responses, `sequence` otherwise."""
        return "bandit" if self.horizon == 1 else "sequence"

    def with_extreme_tokens(self, logprob: float = EXTREME_LOGPROB) -> "TabularProblem":
        """The same problem with two extreme first tokens (the KL601 stress input).

        At the empty prefix, token 0 gets policy log-prob about `logprob` (the policy almost
        never emits it, the reference does) and token 1 gets reference log-prob about
        `logprob` (the reverse). Exponentials of the log-ratio overflow in float32 there.
        """
        policy = self.policy_logits.copy()
        reference = self.reference_logits.copy()
        policy[0, 0] = _logsumexp(np.delete(policy[0], 0)) + logprob
        reference[0, 1] = _logsumexp(np.delete(reference[0], 1)) + logprob
        return replace(self, policy_logits=policy, reference_logits=reference,
                       description=f"{self.description}, extreme first tokens (log-prob {logprob:g})")


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + float(np.log(np.sum(np.exp(x - m))))


def num_prefixes(vocab: int, horizon: int) -> int:
    """Number of logits rows: prefixes of length 0 .. horizon-1, `sum_t vocab**t`."""
    return sum(vocab**t for t in range(horizon))


def enumerate_sequences(vocab: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Every response and the logits row used at each of its positions.

    Returns:
        `(sequences, prefix_index)`, both int64 `[vocab**horizon, horizon]`.
    """
    batch = vocab**horizon
    codes = np.arange(batch)
    # token t of response n is digit t (most significant first) of n in base `vocab`
    powers = vocab ** np.arange(horizon - 1, -1, -1)
    sequences = (codes[:, None] // powers[None, :]) % vocab
    prefix_index = np.zeros_like(sequences)
    for t in range(horizon):
        offset = num_prefixes(vocab, t)
        prefix_code = codes // vocab ** (horizon - t)  # the first t tokens, as a base-vocab number
        prefix_index[:, t] = offset + prefix_code
    return sequences.astype(np.int64), prefix_index.astype(np.int64)


def make_problem(vocab: int | None = None, horizon: int = 1, seed: int | None = None,
                 scale: float = 1.0, old_shift: float = OLD_SHIFT,
                 max_sequences: int = MAX_SEQUENCES) -> TabularProblem:
    """Build a tabular problem with deterministic random logits.

    Args:
        vocab: vocabulary size; default 4 for a bandit (`horizon == 1`), 3 otherwise.
        horizon: response length T.
        seed: numpy seed; the logits are `scale * standard_normal`, policy then reference,
            and `pi_old = pi + old_shift * standard_normal`. `None` picks the documented
            defaults: the theory doc's bandit (`DOC_BANDIT_LOGITS`) for V=4, T=1,
            `DOC_SEQUENCE_SEED` for V=3, T=3 and seed 0 otherwise.
        scale: standard deviation of the logits.
        old_shift: standard deviation of the noise that turns `pi` into `pi_old`.
        max_sequences: limit on `vocab ** horizon`.

    Raises:
        ValueError: `vocab < 2`, `horizon < 1`, or `vocab ** horizon > max_sequences`.
    """
    if vocab is None:
        vocab = DEFAULT_BANDIT_VOCAB if horizon == 1 else DEFAULT_SEQUENCE_VOCAB
    if vocab < 2:
        raise ValueError(f"vocabulary size must be at least 2, got {vocab}")
    if horizon < 1:
        raise ValueError(f"horizon must be at least 1, got {horizon}")
    batch = vocab**horizon
    if batch > max_sequences:
        raise ValueError(
            f"vocab**horizon = {vocab}**{horizon} = {batch} responses exceeds the limit of "
            f"{max_sequences}: exact enumeration would be too slow; choose a smaller vocabulary or horizon")
    rows = num_prefixes(vocab, horizon)
    sequences, prefix_index = enumerate_sequences(vocab, horizon)
    if seed is None and (vocab, horizon) == (DEFAULT_BANDIT_VOCAB, 1) and scale == 1.0:
        policy = np.array([DOC_BANDIT_LOGITS[0]], dtype=np.float64)
        reference = np.array([DOC_BANDIT_LOGITS[1]], dtype=np.float64)
        noise = np.random.default_rng(0).standard_normal((rows, vocab))
        description = "theory-doc bandit (torch seed 0)"
    else:
        if seed is None:
            seed = DOC_SEQUENCE_SEED if (vocab, horizon) == (DEFAULT_SEQUENCE_VOCAB, DEFAULT_SEQUENCE_HORIZON) else 0
        rng = np.random.default_rng(seed)
        policy = scale * rng.standard_normal((rows, vocab))
        reference = scale * rng.standard_normal((rows, vocab))
        noise = rng.standard_normal((rows, vocab))
        description = f"numpy seed {seed}" + (f", scale {scale:g}" if scale != 1.0 else "")
    return TabularProblem(
        vocab=vocab, horizon=horizon, policy_logits=policy, reference_logits=reference,
        old_logits=policy + old_shift * noise, sequences=sequences, prefix_index=prefix_index,
        description=description, seed=seed)
