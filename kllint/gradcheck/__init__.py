"""Runtime gradient checker: exact expected gradients of KL terms on tabular softmax policies.

`kllint gradcheck` and `kllint check --confirm` use it. Neither torch nor jax is imported by
this package until a check runs (`backends.load_backend`). Public API:

* `check_expression(expr, ...)`, `check_function(func, ...)` -> `GradcheckResult`
* `confirm_estimate(estimate, code)` -> JSON-able dict (never raises)
* `make_problem(vocab, horizon, seed)` -> `TabularProblem`
* `load_function("module:function", paths)` (context manager)
* `MissingFrameworkError`, `GradcheckError`

Theory: Tang & Munos 2025, "On a few pitfalls in KL divergence gradient estimation for RL",
arXiv:2506.09477; `docs/gradcheck.md` for the numbers.
"""
from __future__ import annotations

from typing import Any

from kllint.gradcheck.errors import GradcheckError, MissingFrameworkError

__all__ = [
    "GradcheckError",
    "GradcheckResult",
    "MissingFrameworkError",
    "TabularProblem",
    "check_expression",
    "check_function",
    "confirm_estimate",
    "load_function",
    "make_problem",
]

_LAZY = {
    "check_expression": "kllint.gradcheck.check",
    "check_function": "kllint.gradcheck.check",
    "confirm_estimate": "kllint.gradcheck.confirm",
    "load_function": "kllint.gradcheck.loader",
    "make_problem": "kllint.gradcheck.policies",
    "TabularProblem": "kllint.gradcheck.policies",
    "GradcheckResult": "kllint.gradcheck.verdict",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kllint.gradcheck' has no attribute {name!r}")
