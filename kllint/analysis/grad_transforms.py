"""Function transforms that differentiate (`jax.grad`, `jax.value_and_grad`, `mx.grad`,
`mx.value_and_grad`, `mlx.nn.value_and_grad`, `nnx.grad`, `eqx.filter_grad`): calling the
transformed function runs the function given with the call's arguments, and its result (the
first element with auxiliary outputs) is a loss.

JAX and MLX differentiate only what that function computes from its differentiated arguments:
the positions of `argnums` (the first by default) for `jax` / `mx` / `nnx` / `eqx`, the model's
parameters for `mlx.nn.value_and_grad(model, fn)`. Every other argument is a constant inside
(log-probs computed before the call carry no gradient there), so it is passed detached.
"""
from __future__ import annotations

import ast
from typing import Any, Callable

import libcst as cst

from kllint.analysis import frameworks as fw
from kllint.analysis.facts import SinkKind
from kllint.analysis.outline import FUNCTION_DEFS, identifiers
from kllint.analysis.protocols import FrameLike, InterpreterLike
from kllint.analysis.tensor_calls import literal_value
from kllint.analysis.values import (
    ClassRef, FunctionRef, GradOf, Instance, Literal, Model, Sequence, Tensor, Unknown, Value, alternatives, join,
)

GRAD_NAMES = frozenset(transform.rpartition(".")[2] for transform in fw.GRAD_TRANSFORMS)  # grad, value_and_grad, ...
GRAD_ALIAS_ROOTS = ("jax", "nnx", "eqx")  # `jax.<...>.grad` that the imports do not resolve still counts


def grad_transform(qualname: str, args: list[Value], kwargs: dict[str, Value]) -> GradOf:
    """`jax.grad(f, argnums=..., has_aux=...)` and the like, awaiting the call that runs `f`."""
    has_aux = bool(literal_value(kwargs.get("has_aux")))
    of_model = qualname in fw.GRAD_TRANSFORMS_OF_MODEL
    position = 1 if of_model else 0
    function = args[position] if len(args) > position else kwargs.get("fn" if of_model else "fun", kwargs.get("f", Unknown()))
    last = qualname.rsplit(".", 1)[-1]
    positions = (0,) if of_model else _argnums(args[1] if len(args) > 1 else kwargs.get("argnums"))
    return GradOf(function, has_aux or "value_and_grad" in last, qualname, positions)


def _argnums(value: Value | None) -> tuple[int, ...] | None:
    """The differentiated positions `argnums` names (an int or a tuple of ints; the first when it
    is not given), None when they are not known."""
    if value is None or (isinstance(value, Literal) and value.value is None):
        return (0,)
    number = literal_value(value)
    if isinstance(number, int) and not isinstance(number, bool):
        return (number,)
    if isinstance(value, Sequence) and all(isinstance(literal_value(i), int) for i in value.items):
        return tuple(literal_value(i) for i in value.items)
    return None


def differentiated_arguments(it: InterpreterLike, grad: GradOf, args: list[Value],
                             kwargs: dict[str, Value]) -> tuple[list[Value], dict[str, Value]]:
    """The arguments the transformed function runs with: a differentiated position holds the
    policy's parameters (or the live tensor passed there); any other argument, and every keyword,
    is a constant to the transform (a network stays a network: a forward of it inside is live)."""
    positions = grad.argnums
    of_model = grad.transform in fw.GRAD_TRANSFORMS_OF_MODEL  # the model's parameters, not a tensor passed
    bound = []
    for index, value in enumerate(args):
        if positions is None or index in positions:
            live = [o for o in alternatives(value) if isinstance(o, Tensor) and it.algebra.has_roles(o.expr)
                    and not of_model]
            network = [o for o in alternatives(value) if isinstance(o, (Model, Instance, ClassRef))]
            bound.append(join(*live) if live else join(*network) if network else Model("policy", "params"))
        else:
            bound.append(_constant(it, value))
    if not args and positions:
        bound.append(Model("policy", "params"))
    return bound, {key: _constant(it, value) for key, value in kwargs.items()}


def _constant(it: InterpreterLike, value: Value) -> Value:
    """An argument the transform does not differentiate: tensors without their gradient, networks
    as they are (a forward inside the function still runs with its weights)."""
    return it.detach_value(value)


def grad_call(it: InterpreterLike, grad: GradOf, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
              frame: FrameLike) -> Value:
    """Calling a transformed function: the function given runs with the call's arguments (the
    differentiated ones live, the others constants), and its result (the first element with
    auxiliary outputs) is the loss the transform differentiates."""
    results = []
    bound, constants = differentiated_arguments(it, grad, args, kwargs)
    for function in alternatives(grad.function):
        if not isinstance(function, FunctionRef):
            continue
        result = it.call_function(function, bound, constants, node, frame)
        for option in alternatives(result):
            first = option.items[0] if isinstance(option, Sequence) and option.items and grad.has_aux else option
            if isinstance(first, Sequence) and first.items:
                first = first.items[0]
            results.append(first)
    it.loss_sink(join(*results) if results else Unknown(), node, frame, SinkKind.GRAD_TRANSFORM, grad.transform)
    return Unknown("gradients")


def written_argnums(node: ast.expr, transform: str) -> tuple[int, ...] | None:
    """The positions a transform differentiates as its source writes them (`ast`): `argnums=` of
    the call that names the transform or makes it (`partial(jax.grad, argnums=1)`,
    `jax.value_and_grad(f, 1)`), the first when absent (and for `mlx.nn.value_and_grad`, whose
    first argument is the model); None when not literal ints."""
    if transform in fw.GRAD_TRANSFORMS_OF_MODEL:
        return (0,)
    while isinstance(node, ast.Call):
        for keyword in node.keywords:
            if keyword.arg == "argnums":
                return _literal_positions(keyword.value)
        if len(node.args) == 2 and not any(isinstance(a, ast.Starred) for a in node.args) \
                and not isinstance(node.func, ast.Call):
            second = node.args[1]
            if isinstance(second, (ast.Constant, ast.Tuple)):
                return _literal_positions(second)  # `jax.grad(f, 1)` (not `partial(jax.grad, f)`)
        node = node.func
    return (0,)


def _literal_positions(node: ast.expr) -> tuple[int, ...] | None:
    if isinstance(node, ast.Constant) and node.value is None:
        return (0,)  # MLX's default
    items = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    if all(isinstance(i, ast.Constant) and isinstance(i.value, int) and not isinstance(i.value, bool) for i in items):
        return tuple(i.value for i in items)
    return None


def differentiated_argument(call: ast.Call, transform: str, keyword_only: bool = False) -> ast.expr | None:
    """The argument of a call of a grad-like transform that names the function differentiated:
    positional (the second for `mlx.nn.value_and_grad(model, fn)`) unless `keyword_only`, or by
    its keyword, `fun` for jax, equinox and mlx.core, `f` for flax.nnx, `fn` for mlx.nn."""
    position = 1 if transform in fw.GRAD_TRANSFORMS_OF_MODEL else 0
    leading = call.args[:position + 1]
    if not keyword_only and len(leading) > position and not any(isinstance(arg, ast.Starred) for arg in leading):
        return call.args[position]
    keyword = "fn" if position else "f" if "nnx" in transform.split(".") else "fun"
    return next((item.value for item in call.keywords if item.arg == keyword), None)


def grad_target_positions(module: Any, transform_of: Callable[[ast.expr], str | None]) -> dict[str, tuple[int, ...] | None]:
    """The functions a module hands to `jax.grad`-like transforms, read from its `ast` outline
    (never from strings or comments), each with the positions of the parameters the transform
    differentiates (`argnums`, the first by default; None when not a literal or not the same
    everywhere): the function argument of a call of one (`grad(f)`, `value_and_grad(f,
    has_aux=True)`, `value_and_grad(fun=f)`, `nnx.grad`, `eqx.filter_grad`, the second argument
    of `mlx.nn.value_and_grad(model, f)`, also `eqx.filter_value_and_grad(has_aux=True)(f)`) and
    the definitions one decorates (`@jax.grad`, `@partial(jax.value_and_grad, has_aux=True)`).
    `transform_of` gives the qualified name of the transform an expression is, awaiting its
    function, else None."""
    targets: dict[str, tuple[int, ...] | None] = {}
    if GRAD_NAMES.isdisjoint(identifiers(module.outline, import_parts=True)):
        return targets  # a transform is always named by its last part, in the code or an import

    def add(name: str, positions: tuple[int, ...] | None) -> None:
        targets[name] = positions if targets.get(name, positions) == positions else None

    for node in module.outline_nodes(ast.Call, *FUNCTION_DEFS):
        if isinstance(node, ast.Call):
            transform = transform_of(node.func)
            target = differentiated_argument(node, transform) if transform is not None else None
            if isinstance(target, ast.Name):
                add(target.id, written_argnums(node, transform))
        elif isinstance(node, FUNCTION_DEFS):
            for decorator in node.decorator_list:
                transform = transform_of(decorator)
                if transform is not None and transform not in fw.GRAD_TRANSFORMS_OF_MODEL:
                    add(node.name, written_argnums(decorator, transform))
    return targets
