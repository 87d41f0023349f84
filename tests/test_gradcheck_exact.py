"""Tabular problems and the exact reference gradients, checked against closed forms in numpy."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from kllint.gradcheck import verdict as V
from kllint.gradcheck.policies import (DOC_BANDIT_LOGITS, MAX_SEQUENCES, enumerate_sequences, make_problem,
                                       num_prefixes)

torch = pytest.importorskip("torch")


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def closed_form(problem) -> dict[str, np.ndarray]:
    """Per-prefix formulas: grad_theta_h = P(h) * J_h c_h with J_h c = pi_h * (c - E_pi_h c).

    reverse: c = soft-Q of the KL, d(h, v) + KL of the future after (h, v);
    partial reverse: c = d(h, .); per-token k3: pi_h - ref_h; forward: P_ref(h) (pi_h - ref_h).
    """
    V_, T = problem.vocab, problem.horizon
    prefixes = [()] + [p for t in range(1, T) for p in itertools.product(range(V_), repeat=t)]
    index = {p: i for i, p in enumerate(prefixes)}
    lp, lq = log_softmax(problem.policy_logits), log_softmax(problem.reference_logits)
    p, q, d = np.exp(lp), np.exp(lq), lp - lq
    future, soft_q = np.zeros(len(prefixes)), d.copy()
    for h in reversed(prefixes):
        i = index[h]
        if len(h) < T - 1:
            for v in range(V_):
                soft_q[i, v] += future[index[h + (v,)]]
        future[i] = (p[i] * soft_q[i]).sum()
    reach, reach_ref = np.ones(len(prefixes)), np.ones(len(prefixes))
    for h in prefixes[1:]:
        parent = index[h[:-1]]
        reach[index[h]] = reach[parent] * p[parent, h[-1]]
        reach_ref[index[h]] = reach_ref[parent] * q[parent, h[-1]]

    def jac(c: np.ndarray) -> np.ndarray:
        return p * c - p * (p * c).sum(-1, keepdims=True)

    return {"reverse": reach[:, None] * jac(soft_q), "partial_reverse": reach[:, None] * jac(d),
            "partial_forward": reach[:, None] * (p - q), "forward": reach_ref[:, None] * (p - q)}


def test_enumeration_lists_every_response_with_its_prefix_row():
    seqs, pre = enumerate_sequences(3, 3)
    assert seqs.shape == (27, 3)
    assert len({tuple(s) for s in seqs}) == 27
    rows = {}
    for s, r in zip(seqs.tolist(), pre.tolist()):
        for t in range(3):
            rows.setdefault(tuple(s[:t]), set()).add(r[t])
    assert all(len(v) == 1 for v in rows.values())  # one row per prefix
    assert sorted(next(iter(v)) for v in rows.values()) == list(range(num_prefixes(3, 3)))


def test_doc_bandit_logits_are_torch_seed_zero():
    torch.manual_seed(0)
    pi, ref = torch.randn(4), torch.randn(4)
    np.testing.assert_array_equal(np.array(DOC_BANDIT_LOGITS[0]), pi.double().numpy())
    np.testing.assert_array_equal(np.array(DOC_BANDIT_LOGITS[1]), ref.double().numpy())


def test_problems_are_deterministic_and_seeded():
    a, b, c = make_problem(3, 2, seed=7), make_problem(3, 2, seed=7), make_problem(3, 2, seed=8)
    np.testing.assert_array_equal(a.policy_logits, b.policy_logits)
    assert not np.allclose(a.policy_logits, c.policy_logits)
    assert not np.allclose(a.old_logits, a.policy_logits)
    assert make_problem().description.startswith("theory-doc bandit")
    assert make_problem(None, 3).description == "numpy seed 1139647"


@pytest.mark.parametrize("vocab, horizon, message", [
    (1, 3, "at least 2"), (3, 0, "at least 1"), (10, 5, "exceeds the limit of 50000"),
])
def test_invalid_sizes_raise_value_error(vocab, horizon, message):
    with pytest.raises(ValueError, match=message):
        make_problem(vocab, horizon)
    assert MAX_SEQUENCES == 50_000


def test_extreme_problem_has_a_token_at_minus_150():
    p = make_problem().with_extreme_tokens()
    assert log_softmax(p.policy_logits)[0, 0] == pytest.approx(-150.0, abs=0.01)
    assert log_softmax(p.reference_logits)[0, 1] == pytest.approx(-150.0, abs=0.01)


@pytest.mark.parametrize("vocab, horizon, seed", [(4, 1, None), (3, 3, None), (2, 4, 3), (5, 2, 11)])
def test_reference_gradients_match_closed_forms(vocab, horizon, seed):
    from kllint.gradcheck.backends import load_backend
    from kllint.gradcheck.exact import reference_gradients

    problem = make_problem(vocab, horizon, seed)
    got = reference_gradients(problem, load_backend("torch"))
    want = closed_form(problem)
    for name in ("reverse", "forward", "partial_reverse", "partial_forward"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=1e-13, err_msg=name)


def test_matching_is_scale_free_but_not_sign_free():
    g = np.array([1.0, -2.0, 0.5])
    assert V.matches(3 * g, g)
    assert not V.matches(-g, g)
    assert not V.matches(g + np.array([0.0, 0.0, 1e-3]), g)
    assert V.cosine(np.zeros(3), g) == 0.0
    assert V.relative_error(2 * g, g) == pytest.approx(1.0)


def test_judge_reports_nan():
    refs = {k: np.ones((1, 2)) for k in ("reverse", "forward", "partial_reverse", "partial_forward")}
    assert V.judge(np.array([[np.nan, 1.0]]), refs, 1) == (V.NAN, ())
