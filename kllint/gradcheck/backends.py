"""Array backends: PyTorch and JAX, imported lazily (never by `import kllint`).

A backend turns the numpy tables of a `TabularProblem` into tensors, provides the handful
of operations the exact expectations need, and differentiates a scalar objective with
respect to the policy logits (`torch.autograd.grad` / `jax.grad`).
"""
from __future__ import annotations

import contextlib
import importlib
import math
import re
from typing import Any, Callable

import numpy as np

from kllint.gradcheck.errors import GradcheckError, MissingFrameworkError

FRAMEWORKS = ("torch", "jax")
PRECISIONS = {"float64", "float32"}

_JAX_USE = re.compile(r"\b(jnp|jax|lax|optax)\s*\.")
_JAX_IMPORT = re.compile(r"\b(import\s+jax|from\s+jax)\b")


def detect_framework(*texts: str) -> str:
    """`jax` if the code uses `jnp.`, `jax.`, `lax.` or `optax.` (or imports jax), else `torch`."""
    for text in texts:
        if _JAX_USE.search(text) or _JAX_IMPORT.search(text):
            return "jax"
    return "torch"


def _import(framework: str, module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingFrameworkError(framework, str(exc)) from exc


class TorchBackend:
    """PyTorch backend (CPU, float64 unless asked for float32)."""

    name = "torch"

    def __init__(self) -> None:
        self.torch = _import("torch", "torch")

    def namespace(self) -> dict[str, Any]:
        """Module names an expression may use: `torch`, `F`, `nn`, `math`, `np`."""
        torch = self.torch
        return {"torch": torch, "F": torch.nn.functional, "nn": torch.nn, "math": math, "np": np}

    def _dtype(self, precision: str) -> Any:
        return self.torch.float64 if precision == "float64" else self.torch.float32

    def constant(self, array: np.ndarray, precision: str) -> Any:
        """A tensor without gradient from a float array."""
        return self.torch.as_tensor(np.asarray(array), dtype=self._dtype(precision))

    def index(self, array: np.ndarray) -> Any:
        """An integer index tensor."""
        return self.torch.as_tensor(array, dtype=self.torch.long)

    def log_softmax(self, x: Any) -> Any:
        return self.torch.log_softmax(x, dim=-1)

    def exp(self, x: Any) -> Any:
        return self.torch.exp(x)

    def stop_gradient(self, x: Any) -> Any:
        return x.detach()

    def reverse_cumsum(self, x: Any) -> Any:
        """`out[..., t] = sum_{s >= t} x[..., s]` over the last axis."""
        return self.torch.flip(self.torch.cumsum(self.torch.flip(x, [-1]), -1), [-1])

    def as_array(self, value: Any, like: Any) -> Any:
        """A tensor from an expression's value (tensors pass through, numbers are wrapped)."""
        if isinstance(value, self.torch.Tensor):
            return value
        return self.torch.as_tensor(value, dtype=like.dtype)

    def shape(self, x: Any) -> tuple[int, ...]:
        return tuple(x.shape)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.reshape(shape)

    def gradient(self, objective: Callable[[Any], Any], theta: np.ndarray, precision: str = "float64") -> np.ndarray:
        """`d objective / d theta` at `theta` (`[prefixes, vocab]`), as a float64 numpy array.

        An objective that does not depend on `theta` (detached everywhere) has gradient zero.
        """
        torch = self.torch
        with torch.enable_grad():
            param = torch.tensor(np.asarray(theta), dtype=self._dtype(precision), requires_grad=True)
            out = objective(param)
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                return np.zeros_like(np.asarray(theta), dtype=np.float64)
            if out.numel() != 1:
                raise GradcheckError(f"internal: objective has shape {tuple(out.shape)}, expected a scalar")
            (grad,) = torch.autograd.grad(out.reshape(()), param, allow_unused=True)
        if grad is None:
            return np.zeros_like(np.asarray(theta), dtype=np.float64)
        return grad.detach().to(torch.float64).cpu().numpy()


class JaxBackend:
    """JAX backend (CPU; float64 through `jax.enable_x64`, float32 otherwise)."""

    name = "jax"

    def __init__(self) -> None:
        self.jax = _import("jax", "jax")
        self.jnp = _import("jax", "jax.numpy")

    def namespace(self) -> dict[str, Any]:
        """Module names an expression may use: `jax`, `jnp`, `lax`, `math`, `np` (and `optax` if installed)."""
        names = {"jax": self.jax, "jnp": self.jnp, "lax": self.jax.lax, "math": math, "np": np}
        try:
            names["optax"] = importlib.import_module("optax")
        except ImportError:
            pass
        return names

    def _dtype(self, precision: str) -> Any:
        return self.jnp.float64 if precision == "float64" else self.jnp.float32

    @contextlib.contextmanager
    def precision_scope(self, precision: str):
        """Enable 64-bit arrays for the duration of a float64 computation."""
        enable = getattr(self.jax, "enable_x64", None)
        if enable is not None and callable(enable):
            with enable(precision == "float64"):
                yield
            return
        from jax.experimental import enable_x64, disable_x64  # older jax

        with (enable_x64() if precision == "float64" else disable_x64()):
            yield

    def constant(self, array: np.ndarray, precision: str) -> Any:
        return self.jnp.asarray(np.asarray(array), dtype=self._dtype(precision))

    def index(self, array: np.ndarray) -> Any:
        return np.asarray(array)

    def log_softmax(self, x: Any) -> Any:
        return self.jax.nn.log_softmax(x, axis=-1)

    def exp(self, x: Any) -> Any:
        return self.jnp.exp(x)

    def stop_gradient(self, x: Any) -> Any:
        return self.jax.lax.stop_gradient(x)

    def reverse_cumsum(self, x: Any) -> Any:
        jnp = self.jnp
        return jnp.flip(jnp.cumsum(jnp.flip(x, -1), -1), -1)

    def as_array(self, value: Any, like: Any) -> Any:
        return self.jnp.asarray(value, dtype=None if hasattr(value, "dtype") else like.dtype)

    def shape(self, x: Any) -> tuple[int, ...]:
        return tuple(self.jnp.shape(x))

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self.jnp.reshape(x, shape)

    def gradient(self, objective: Callable[[Any], Any], theta: np.ndarray, precision: str = "float64") -> np.ndarray:
        """`d objective / d theta` at `theta` (`[prefixes, vocab]`), as a float64 numpy array."""
        with self.precision_scope(precision):
            param = self.jnp.asarray(np.asarray(theta), dtype=self._dtype(precision))

            def scalar(p: Any) -> Any:
                return self.jnp.reshape(objective(p), ())

            grad = self.jax.grad(scalar)(param)
            return np.asarray(grad, dtype=np.float64)


_CACHE: dict[str, Any] = {}


def load_backend(framework: str) -> TorchBackend | JaxBackend:
    """The backend object for `torch` or `jax` (imports the framework on first use).

    Raises:
        MissingFrameworkError: the framework is not installed.
        GradcheckError: an unknown framework name.
    """
    if framework not in FRAMEWORKS:
        raise GradcheckError(f"unknown framework {framework!r} (choose from {', '.join(FRAMEWORKS)})")
    if framework not in _CACHE:
        _CACHE[framework] = TorchBackend() if framework == "torch" else JaxBackend()
    return _CACHE[framework]
