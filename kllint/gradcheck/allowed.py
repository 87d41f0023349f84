"""What `kllint gradcheck --expr` (and `--setup`) may contain: arithmetic, not Python.

Unlike `MODULE:FUNCTION` and `kllint check --confirm`, which run the user's code on purpose,
an expression is a formula typed on the command line (or pasted from a README, an issue, a CI
file); it is parsed with `ast` and accepted only when every node is one of:

* numbers, strings (keys such as `batch["ref_logp"]`, `reduction="batchmean"`), `True`,
  `False`, `None`, `...`; names: the log-prob names, other free names (bound to ones), names
  `--setup` assigns, and the builtins `abs`, `min`, `max`, `pow`, `float`, `int`, `round`, `sum`;
* arithmetic, comparisons, `and` / `or` / `not`, `x if c else y`, tuples and lists,
  subscripts and slices, calls with positional and keyword arguments;
* `MODULE.FUNCTION` for the math functions and constants of `ALLOWED_FUNCTIONS` (`torch.exp`,
  `F.kl_div`, `jnp.exp`, `jax.lax.stop_gradient`, `math.pi`, `torch.float32`, ...), through the
  module names of the backends (`torch`, `F`, `nn`, `math`, `np`, `jax`, `jnp`, `lax`);
* `.METHOD` of a value for the tensor methods and attributes of `TENSOR_ATTRIBUTES`
  (`.exp()`, `.detach()`, `.sum(-1)`, `.clamp(max=10)`, `.pow(2)`, `.to(torch.float32)`, ...).

`--setup` statements are assignments (`d = logp - ref`, `d += 1`) of such expressions. Anything
else (`__import__`, `open`, a lambda, a comprehension, a dunder name or attribute, `torch.load`,
`np.os`, `.numpy()`, `import`) is refused before anything is evaluated, with the first such
construct in the message; the expression then runs with only the builtins above.
"""
from __future__ import annotations

import ast
import builtins
import re
from typing import Any, Sequence

from kllint.gradcheck.errors import GradcheckError

MODULE_NAMES = {"torch": "torch", "F": "torch.nn.functional", "nn": "torch.nn", "math": "math", "np": "numpy",
                "numpy": "numpy", "jax": "jax", "jnp": "jax.numpy", "lax": "jax.lax"}
"""Module names an expression may start a dotted name with, and the module each one is."""

_MATH = {"exp", "log", "log1p", "expm1", "exp2", "log2", "log10", "abs", "sqrt", "square", "pow", "power",
         "clamp", "clip", "minimum", "maximum", "min", "max", "where", "sum", "mean", "sign", "sigmoid", "tanh",
         "softmax", "log_softmax", "logsumexp", "logaddexp", "cumsum", "flip", "ones_like", "zeros_like",
         "full_like", "reciprocal", "rsqrt", "neg", "negative", "add", "sub", "subtract", "mul", "multiply",
         "div", "divide", "true_divide", "relu", "nan_to_num", "stack", "cat", "concatenate", "float16",
         "float32", "float64", "bfloat16", "inf", "nan", "pi", "e", "clamp_min", "clamp_max", "fabs"}
ALLOWED_FUNCTIONS = frozenset(
    {f"{module}.{name}" for module in ("torch", "numpy", "jax.numpy", "math") for name in _MATH}
    | {f"torch.nn.functional.{name}" for name in ("kl_div", "log_softmax", "softmax", "logsigmoid", "softplus",
                                                  "relu", "sigmoid", "mse_loss")}
    | {f"jax.lax.{name}" for name in ("stop_gradient", "exp", "log", "abs", "sqrt", "neg", "clamp", "max", "min")}
    | {f"jax.nn.{name}" for name in ("log_softmax", "softmax", "sigmoid", "log_sigmoid", "softplus", "relu")}
)
"""The dotted names (by module, aliases resolved) an expression may use."""

TENSOR_ATTRIBUTES = frozenset(_MATH - {"inf", "nan", "pi", "e", "float16", "float32", "float64", "bfloat16"} | {
    "detach", "amax", "amin", "float", "double", "half", "to", "type_as", "astype", "unsqueeze", "squeeze",
    "masked_fill", "gather", "view", "reshape", "expand_as", "dtype", "shape", "T", "prod", "sum_to_size"})
"""Attributes and methods of a value (a tensor or an array) an expression may use."""

ALLOWED_BUILTINS = ("abs", "min", "max", "pow", "float", "int", "round", "sum")
"""The builtins an expression may use; the only ones it is evaluated with."""

_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.keyword,
          ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.Constant, ast.Tuple, ast.List,
          ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.expr_context)
_DESCRIBED = {ast.Lambda: "a lambda", ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
              ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
              ast.NamedExpr: "`:=`", ast.JoinedStr: "an f-string", ast.Dict: "a dict", ast.Set: "a set",
              ast.Starred: "`*` unpacking", ast.Await: "`await`", ast.Yield: "`yield`", ast.YieldFrom: "`yield`",
              ast.Import: "`import`", ast.ImportFrom: "`import`"}
_BUILTIN_NAMES = set(dir(builtins))
_DOTTED = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*")
REASON = ("an expression is arithmetic over the log-prob names and numbers with the math functions of "
          "torch / jax (torch.exp, .detach(), abs, ** ...); to check other code use MODULE:FUNCTION")


def _dunder(name: str) -> bool:
    return name.startswith("__")


def _dotted(node: ast.expr) -> list[str] | None:
    """`["torch", "nn", "functional", "kl_div"]` for a chain of attributes on a name, else None."""
    text = ast.unparse(node)
    return text.split(".") if _DOTTED.fullmatch(text) else None


class _Checker:
    """Collects the constructs that are not allowed, with their positions."""

    def __init__(self, assigned: set[str]) -> None:
        self.assigned = assigned
        self.found: list[tuple[int, int, str]] = []

    def refuse(self, node: ast.AST, what: str, column: int | None = None) -> None:
        """Record `what` at `node` (at `column` when given)."""
        line = getattr(node, "lineno", 1)
        self.found.append((line, getattr(node, "col_offset", 0) if column is None else column, what))

    def statement(self, node: ast.stmt) -> None:
        """A `--setup` statement: an assignment of an allowed expression."""
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.target(target)
            self.expr(node.value)
        elif isinstance(node, ast.AugAssign):
            self.target(node.target)
            self.expr(node.value)
        else:
            self.refuse(node, _DESCRIBED.get(type(node), f"the statement `{ast.unparse(node).split(chr(10))[0]}`"))

    def target(self, node: ast.expr) -> None:
        """An assignment target: a new plain name (or a tuple of them)."""
        if isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element)
        elif not isinstance(node, ast.Name):
            self.refuse(node, f"assigning to `{ast.unparse(node)}`")
        elif _dunder(node.id) or node.id in MODULE_NAMES or node.id in _BUILTIN_NAMES:
            self.refuse(node, f"assigning to `{node.id}`")
        else:
            self.assigned.add(node.id)

    def expr(self, node: ast.AST) -> None:
        """An expression and everything in it."""
        if not isinstance(node, _NODES):
            self.refuse(node, _DESCRIBED.get(type(node), f"`{type(node).__name__}`"))
            return
        if isinstance(node, ast.Attribute):
            self.attribute(node)
            return
        if isinstance(node, ast.Name):
            self.name(node)
        elif isinstance(node, ast.Constant):
            self.constant(node)
        elif isinstance(node, ast.keyword) and node.arg is None:
            self.refuse(node, "`**` unpacking")
        for child in ast.iter_child_nodes(node):
            self.expr(child)

    def name(self, node: ast.Name) -> None:
        """A name read: no dunder, bare module or builtin other than `ALLOWED_BUILTINS`."""
        name = node.id
        if _dunder(name):
            self.refuse(node, f"`{name}`")
        elif name in MODULE_NAMES:
            self.refuse(node, f"the module `{name}` itself")
        elif name in _BUILTIN_NAMES and name not in ALLOWED_BUILTINS and name not in self.assigned:
            self.refuse(node, f"the builtin `{name}`")

    def constant(self, node: ast.Constant) -> None:
        """A literal: no bytes, no dunder string."""
        if isinstance(node.value, bytes):
            self.refuse(node, "a bytes literal")
        elif isinstance(node.value, str) and _dunder(node.value):
            self.refuse(node, f"the string {node.value!r}")

    def attribute(self, node: ast.Attribute) -> None:
        """`MODULE.NAME` of `ALLOWED_FUNCTIONS`, or `.NAME` of `TENSOR_ATTRIBUTES` on a value."""
        parts = _dotted(node)
        if parts is not None and parts[0] in MODULE_NAMES:
            canonical = ".".join([MODULE_NAMES[parts[0]], *parts[1:]])
            if canonical not in ALLOWED_FUNCTIONS:
                self.refuse(node, f"`{'.'.join(parts)}`")
            return
        column = (node.end_col_offset or 0) - len(node.attr) if node.end_lineno == node.lineno else None
        if node.attr not in TENSOR_ATTRIBUTES:
            self.refuse(node, f"`.{node.attr}`", column)
        self.expr(node.value)


def check_allowed(expression: str, setup: Sequence[str] = ()) -> None:
    """Refuse an `--expr` / `--setup` that is more than arithmetic (see the module docstring).

    Raises:
        GradcheckError: the first construct that is not allowed (`--setup` statements first, in
            order), or the code does not parse.
    """
    assigned: set[str] = set()
    for option, text, mode in [*(("--setup", s, "exec") for s in setup), ("--expr", expression.strip(), "eval")]:
        try:
            tree = ast.parse(text, mode=mode)
        except SyntaxError as exc:
            raise GradcheckError(f"the code does not parse: {exc.msg}: {(exc.text or '').strip()!r}") from exc
        checker = _Checker(assigned)
        if isinstance(tree, ast.Module):
            for statement in tree.body:
                checker.statement(statement)
        else:
            checker.expr(tree)
        if checker.found:
            _, _, what = min(checker.found)
            raise GradcheckError(f"{option} {text!r}: {what} is not allowed: {REASON}")


def restricted_builtins() -> dict[str, Any]:
    """`{"__builtins__": ...}` with only `ALLOWED_BUILTINS`, for the namespace of a checked expression."""
    return {"__builtins__": {name: getattr(builtins, name) for name in ALLOWED_BUILTINS}}
