"""The wording of a branch test that does not hold (KL401's "when ..." for the branch that reads
the rollout log-probs): a single comparison is inverted, a negation is unwrapped."""
from __future__ import annotations

import pytest

from kllint.rules.wording import branch_taken_when


@pytest.mark.parametrize(("test", "holds", "expected"), [
    ("old_logps is None", True, "`old_logps is None`"),
    ("old_logps is None", False, "`old_logps is not None`"),
    ("old_logps is not None", False, "`old_logps is None`"),
    ("self.num_iterations > 1", False, "`self.num_iterations <= 1`"),
    ("mode == 'k3'", False, "`mode != 'k3'`"),
    ("key in batch", False, "`key not in batch`"),
    ("not self.reuse", False, "`self.reuse`"),
    ("self.reuse", False, "not `self.reuse`"),
    ("0 < a < 1", False, "not `0 < a < 1`"),
])
def test_a_test_is_worded_as_it_holds(test: str, holds: bool, expected: str) -> None:
    assert branch_taken_when(test, holds) == expected
