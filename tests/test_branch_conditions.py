"""Branch conditions read as a conjunction (`kllint.analysis.conditions.narrowed`) and the
conditions a test gives each branch (`and`, `or`, `not`, `str.endswith`, early returns), seen
through the messages of findings."""
from __future__ import annotations

from pathlib import Path

import pytest

from kllint.analysis.conditions import narrowed
from kllint.analysis.values import Condition
from kllint.api import check_source
from kllint.rules.wording import merge_paths

MODE = "cfg.mode"


def _in(*options: str, negated: bool = False, config: bool = True) -> Condition:
    return Condition(MODE, options, negated, from_config=config)


def _ends(suffix: str, negated: bool = False) -> Condition:
    return Condition(MODE, (suffix,), negated, predicate="endswith", from_config=True)


@pytest.mark.parametrize(("conditions", "expected"), [
    ((_in("k1", "k1+"), _ends("+")), (_in("k1+"),)),
    ((_in("k1", "k1+"), _ends("+", negated=True)), (_in("k1"),)),
    ((_in("k1", "k2", "k3"), _in("k2", negated=True)), (_in("k1", "k3"),)),
    ((_in("k1", "k1+"), _in("k1", "k1+"), _ends("+")), (_in("k1+"),)),
    ((_ends("+"), _in("k2", "k2+", negated=True)), (_ends("+"), _in("k2+", negated=True))),
    ((_ends("+"), _in("k2", negated=True)), (_ends("+"),)),
    ((_in("k1"),), (_in("k1"),)),
])
def test_conditions_on_one_value_are_narrowed_to_the_options_they_all_admit(conditions, expected) -> None:
    assert narrowed(conditions) == expected


@pytest.mark.parametrize("conditions", [
    (_in("k1", "k1+"), _ends("+"), _in("k2", "k2+")),
    (_in("k2"), _ends("+")),
    (_in("k1"), _in("k1", negated=True)),
])
def test_a_path_no_configured_value_can_take_is_impossible(conditions) -> None:
    assert narrowed(conditions) is None


def test_tests_of_a_local_name_are_never_judged_contradictory() -> None:
    # two helpers may test different values under one parameter name
    conditions = (_in("a", config=False), _in("b", config=False))
    assert narrowed(conditions) == conditions


def test_suffix_conditions_are_worded() -> None:
    assert merge_paths([(_ends("+"),)]) == "`cfg.mode` ends with '+'"
    assert merge_paths([(_ends("+", negated=True), _in("k2", "k3", negated=True))]) == \
        "`cfg.mode` does not end with '+' and `cfg.mode` is not 'k2' or 'k3'"


STRAIGHT_THROUGH = (Path(__file__).parent.parent / "fixtures" / "KL201" / "straight_through_suffix_from_config.py").read_text(
    encoding="utf-8")
MODE_READ = "`self.config.kl_estimator`"


def _messages(source: str, code: str) -> dict[int, str]:
    return {d.span.line: d.message for d in check_source(source, "suffix.py") if d.code == code}


# k1 (line 15) is chosen by the argument `estimate` hands on from the trainer's call: one place
# per finding, the call that chose it (line 39)
CHOOSING_CALL = 39


def test_a_suffix_stripped_under_its_test_reads_as_the_configured_value() -> None:
    """k1 is a loss only for "k1" (with "+", the k1 value is detached: straight-through)."""
    assert _messages(STRAIGHT_THROUGH, "KL101")[CHOOSING_CALL].endswith(f"(when {MODE_READ} is 'k1')")


def test_what_follows_an_early_return_runs_under_the_test_that_did_not_return() -> None:
    messages = _messages(STRAIGHT_THROUGH, "KL201")
    assert messages[19].endswith(f"(when {MODE_READ} is not 'k1' or 'k2' and {MODE_READ} does not end with '+')")
    assert messages[28].endswith(f"the estimate is straight-through when {MODE_READ} is 'k1+'; or when {MODE_READ} "
                                 f"ends with '+' and {MODE_READ} is not 'k1+' or 'k2+', k2 when {MODE_READ} is 'k2+'")


def test_a_value_returned_in_a_branch_carries_the_branch_conditions() -> None:
    source = '''import torch


def pick(logp, ref_logp, mode):
    log_ratio = logp - ref_logp
    if mode == "k1":
        return log_ratio
    return 0.5 * log_ratio ** 2


def step(policy, ref_model, ids, config):
    logp = policy(ids).log_softmax(-1)
    with torch.no_grad():
        ref_logp = ref_model(ids).log_softmax(-1)
    pick(logp, ref_logp, config.kl_mode).sum().backward()
'''
    assert _messages(source, "KL101")[5].endswith("(when `config.kl_mode` is 'k1')")
    assert _messages(source, "KL201")[8].endswith("(when `config.kl_mode` is not 'k1')")


def test_a_slice_without_its_test_is_a_value_of_its_own() -> None:
    source = STRAIGHT_THROUGH.replace('mode[:-1] if mode.endswith("+") else mode', "mode[:-1]")
    assert _messages(source, "KL101")[CHOOSING_CALL].endswith(
        f"(when `mode[:-1]` is 'k1' and {MODE_READ} does not end with '+')")


def test_a_path_another_path_covers_is_not_said() -> None:
    aggregation = Condition("cfg.agg", ("sum",), from_config=True)
    assert merge_paths([(_in("k1"), aggregation), (_in("k1"),)]) == "`cfg.mode` is 'k1'"
    assert merge_paths([(_in("k1"), aggregation), (_in("k2"),)]) == \
        "`cfg.mode` is 'k1' and `cfg.agg` is 'sum'; or when `cfg.mode` is 'k2'"
