"""Comparing an expected gradient with the true ones, and the verdict.

Verdicts (Tang & Munos 2025, arXiv:2506.09477; `docs/theory.md`):

* `correct`: the direction of grad KL(pi || pi_ref) (a positive scale is allowed: it is absorbed
  by the KL coefficient; `scale_reverse` reports it);
* `zero-gradient`: the expected gradient vanishes (k1 as a loss, a detached loss);
* `forward-kl`: the direction of grad KL(pi_ref || pi) (k3 as a loss, section 3);
* `partial (missing future-token credit)`: each token credited with its own KL only (section 4);
* `partial forward-kl (missing future-token credit)`: per-token k3 losses summed;
* `sign-inverted`: minus grad KL(pi || pi_ref): training maximises the KL;
* `biased`: none of the above (k2 or k3 in a reward, abs, off-policy without importance weight);
* `nan-gradient`: the expected gradient is not finite.

Two vectors "match" when the sine of their angle is below `MATCH_TOL` and the projection
is positive; "zero" means a norm below `ZERO_TOL` times the larger true gradient's norm.
The tolerances leave room for float32 code (verl / OpenRLHF cast to float32).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MATCH_TOL = 1e-5
ZERO_TOL = 1e-5

CORRECT = "correct"
ZERO = "zero-gradient"
FORWARD = "forward-kl"
PARTIAL = "partial (missing future-token credit)"
PARTIAL_FORWARD = "partial forward-kl (missing future-token credit)"
SIGN_INVERTED = "sign-inverted"
BIASED = "biased"
NAN = "nan-gradient"
NOT_EVALUATED = "not-evaluated"
VERDICTS = (CORRECT, ZERO, FORWARD, PARTIAL, PARTIAL_FORWARD, SIGN_INVERTED, BIASED, NAN)

MATCH_NAMES = {
    "reverse": "reverse-kl",
    "forward": "forward-kl",
    "partial_reverse": "partial reverse-kl",
    "partial_forward": "partial forward-kl",
    "reverse_minus_forward": "reverse-kl minus forward-kl",
}


def cosine(g: np.ndarray, ref: np.ndarray) -> float:
    """Cosine similarity of two flattened gradients (0 when either is zero)."""
    import numpy as np

    g, ref = np.ravel(g), np.ravel(ref)
    ng, nr = float(np.linalg.norm(g)), float(np.linalg.norm(ref))
    if ng == 0.0 or nr == 0.0:
        return 0.0
    return float(np.dot(g, ref) / (ng * nr))


def relative_error(g: np.ndarray, ref: np.ndarray) -> float:
    """`|g - ref| / |ref|` (Euclidean norms over all logits)."""
    import numpy as np

    nr = float(np.linalg.norm(np.ravel(ref)))
    return float(np.linalg.norm(np.ravel(g) - np.ravel(ref)) / nr) if nr else math.inf


def matches(g: np.ndarray, ref: np.ndarray, tol: float = MATCH_TOL) -> bool:
    """`g` points exactly along `ref` (up to a positive scale)."""
    import numpy as np

    g, ref = np.ravel(g), np.ravel(ref)
    ng, nr = float(np.linalg.norm(g)), float(np.linalg.norm(ref))
    if ng == 0.0 or nr == 0.0:
        return False
    projection = float(np.dot(g, ref)) / nr
    if projection <= 0.0:
        return False
    residual = float(np.linalg.norm(g - projection * ref / nr))
    return residual <= tol * ng


@dataclass(frozen=True, eq=False)
class GradcheckResult:
    """The outcome of one exact gradient check (one term on one tabular problem).

    `gradient` and `references` (numpy, `[prefixes, vocab]`) are kept for tests and are not
    part of the JSON.
    """

    term: str
    verdict: str
    cos_reverse: float
    rel_err_reverse: float
    cos_forward: float
    rel_err_forward: float
    scale_reverse: float
    grad_norm: float
    matches: tuple[str, ...]
    vocab: int
    horizon: int
    usage: str
    granularity: str
    sampling: str
    reward_to_go: bool
    framework: str
    policies: str
    extreme_input_finite: bool | None = None
    notes: tuple[str, ...] = ()
    gradient: np.ndarray | None = field(default=None, repr=False)
    references: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def correct(self) -> bool:
        """The verdict is `correct` (exit code 0)."""
        return self.verdict == CORRECT

    @property
    def summary(self) -> str:
        """One sentence for people, e.g. "expected gradient has cosine 1.000 with the forward KL, ..."."""
        return summarize(self)

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict (non-finite numbers become null)."""
        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "term": self.term,
            "verdict": self.verdict,
            "summary": self.summary,
            "cos_reverse": num(self.cos_reverse),
            "rel_err_reverse": num(self.rel_err_reverse),
            "cos_forward": num(self.cos_forward),
            "rel_err_forward": num(self.rel_err_forward),
            "scale_reverse": num(self.scale_reverse),
            "grad_norm": num(self.grad_norm),
            "matches": list(self.matches),
            "extreme_input_finite": self.extreme_input_finite,
            "vocab": self.vocab,
            "horizon": self.horizon,
            "usage": self.usage,
            "granularity": self.granularity,
            "sampling": self.sampling,
            "reward_to_go": self.reward_to_go,
            "framework": self.framework,
            "policies": self.policies,
            "notes": list(self.notes),
        }


def judge(g: np.ndarray, references: dict[str, np.ndarray], horizon: int) -> tuple[str, tuple[str, ...]]:
    """Verdict and the list of reference gradients `g` matches (names from `MATCH_NAMES`)."""
    import numpy as np

    if not np.all(np.isfinite(g)):
        return NAN, ()
    refs = dict(references)
    refs["reverse_minus_forward"] = refs["reverse"] - refs["forward"]
    norm = float(np.linalg.norm(g))
    scale = max(float(np.linalg.norm(refs["reverse"])), float(np.linalg.norm(refs["forward"])))
    if norm <= ZERO_TOL * scale:
        return ZERO, ("zero",)
    if horizon == 1:  # per-token and sequence gradients coincide
        refs = {k: v for k, v in refs.items() if not k.startswith("partial")}
    found = tuple(MATCH_NAMES[name] for name, ref in refs.items() if matches(g, ref))
    if matches(g, refs["reverse"]):
        verdict = CORRECT
    elif matches(g, refs["forward"]):
        verdict = FORWARD
    elif horizon > 1 and matches(g, refs["partial_reverse"]):
        verdict = PARTIAL
    elif horizon > 1 and matches(g, refs["partial_forward"]):
        verdict = PARTIAL_FORWARD
    elif matches(-g, refs["reverse"]):
        verdict = SIGN_INVERTED
    else:
        verdict = BIASED
    return verdict, found


EXTREME_NOTE = "the gradient is NaN/inf when one token's log-prob is -150 vs the reference (float32)"


def summarize(r: GradcheckResult, extreme: bool = True) -> str:
    """The one-line explanation used by the table, the JSON and `confirm_estimate`.

    With `extreme`, a non-finite gradient on the extreme input (KL601) is mentioned too.
    """
    cos_pair = f"cosine {r.cos_forward:.3f} with the forward KL, {r.cos_reverse:.3f} with the reverse KL"
    if r.verdict == NAN:
        text = "expected gradient is not finite (NaN or inf)"
    elif r.verdict == ZERO:
        text = f"expected gradient is zero (norm {r.grad_norm:.1e}): the term does not regularise the policy"
    elif r.verdict == CORRECT:
        text = f"expected gradient is the reverse-KL gradient (relative error {r.rel_err_reverse:.1e})"
        if abs(r.scale_reverse - 1.0) > 1e-6:
            text += f", scaled by {r.scale_reverse:.3g}"
    elif r.verdict == FORWARD:
        text = f"expected gradient has {cos_pair}"
    elif r.verdict in (PARTIAL, PARTIAL_FORWARD):
        which = "reverse" if r.verdict == PARTIAL else "forward"
        text = (f"expected gradient is the per-token {which}-KL gradient without future-token credit: "
                f"cosine {r.cos_reverse:.3f} and relative error {r.rel_err_reverse:.3f} to the sequence "
                "reverse-KL gradient")
    elif r.verdict == SIGN_INVERTED:
        text = "expected gradient is minus the reverse-KL gradient: training maximises the KL"
    else:
        text = (f"expected gradient is biased: cosine {r.cos_reverse:.3f} and relative error "
                f"{r.rel_err_reverse:.3f} to the reverse-KL gradient, cosine {r.cos_forward:.3f} to the forward KL")
        if "reverse-kl minus forward-kl" in r.matches:
            text += "; it equals grad KL(pi||ref) - grad KL(ref||pi)"
    if extreme and r.extreme_input_finite is False:
        text += "; " + EXTREME_NOTE
    return text
