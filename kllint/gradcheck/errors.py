"""Exceptions of the runtime gradient checker.

`GradcheckError` is the base of every usage error; the `gradcheck` command turns it into a
one-line message and exit code 2, and `confirm_estimate` into a `not-evaluated` verdict.
"""
from __future__ import annotations

EXTRAS = {"torch": "torch", "jax": "jax"}


class GradcheckError(Exception):
    """A usage error: a bad expression, binding, size or `module:function` target."""


class MissingFrameworkError(GradcheckError):
    """The array framework a check needs (PyTorch or JAX) is not installed.

    The message says what to install, e.g. ``pip install torch (kllint's `torch` extra)``;
    it does not name a package-index release of kllint, which does not exist yet.
    """

    def __init__(self, framework: str, detail: str = "", package: str | None = None) -> None:
        self.framework = framework
        extra = EXTRAS.get(framework, framework)
        if package is None:
            message = (f"the {framework} backend of `kllint gradcheck` needs {framework}, which is not "
                       f"installed: pip install {framework} (kllint's `{extra}` extra)")
        else:
            message = (f"`kllint gradcheck` needs {package}, which is not installed: "
                       f"pip install {package} (kllint's `{extra}` extra)")
        if detail:
            message += f" ({detail})"
        super().__init__(message)
