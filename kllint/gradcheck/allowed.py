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
construct in the message; the expression then runs with only the builtins above (`pow` among
them bounded as below).

So is arithmetic on constants that Python would compute in one uninterruptible C call for
minutes (`10**10**8`, `1 << 10**9`, `"a" * 10**10`): an exponent or shift above
`MAX_EXPONENT`, a constant integer beyond `MAX_CONSTANT_BITS` bits, a repeated string past
`MAX_REPEAT` characters (constants, and names `--setup` binds to constants, are folded to
tell).
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
MAX_EXPONENT = 1024  # of a power or a shift
MAX_CONSTANT_BITS = 65_536  # of a constant integer the expression computes
MAX_REPEAT = 1_000_000  # characters of a repeated string
_FOLDED = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.Pow: lambda a, b: a ** b, ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b}


class _TooLarge(Exception):
    """A constant too large to compute (its description is the message)."""


def _check_size(op: ast.operator, a: Any, b: Any) -> None:
    """Raise `_TooLarge` when `a op b` on plain values would be too large to compute."""
    ints = isinstance(a, int) and isinstance(b, int)
    if isinstance(op, (ast.Pow, ast.LShift)) and isinstance(b, (int, float)) and abs(b) > MAX_EXPONENT:
        raise _TooLarge(f"an exponent or shift above {MAX_EXPONENT:,}")
    if isinstance(op, ast.Pow) and ints and b > 0 and abs(a) > 1 and a.bit_length() * b > MAX_CONSTANT_BITS:
        raise _TooLarge(f"a constant beyond {MAX_CONSTANT_BITS:,} bits")
    if isinstance(op, ast.LShift) and ints and a.bit_length() + b > MAX_CONSTANT_BITS:
        raise _TooLarge(f"a constant beyond {MAX_CONSTANT_BITS:,} bits")
    if isinstance(op, ast.Mult):
        if ints and a.bit_length() + b.bit_length() > MAX_CONSTANT_BITS:
            raise _TooLarge(f"a constant beyond {MAX_CONSTANT_BITS:,} bits")
        text, count = (a, b) if isinstance(a, (str, bytes)) else (b, a)
        if isinstance(text, (str, bytes)) and isinstance(count, int) and len(text) * count > MAX_REPEAT:
            raise _TooLarge(f"a string repeated past {MAX_REPEAT:,} characters")


def bounded_pow(base: Any, exponent: Any, *modulus: Any) -> Any:
    """The builtin `pow` for expressions: refuses (OverflowError) what `_check_size` refuses."""
    if not modulus:
        try:
            _check_size(ast.Pow(), base, exponent)
        except _TooLarge as exc:
            raise OverflowError(f"pow(): {exc}") from None
    return pow(base, exponent, *modulus)
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

    def __init__(self, assigned: set[str], constants: dict[str, Any]) -> None:
        self.assigned = assigned
        self.constants = constants  # names `--setup` bound to a constant, folded
        self.found: list[tuple[int, int, str]] = []

    def fold(self, node: ast.AST) -> Any:
        """The value of a constant expression (numbers, strings, operators, names bound to
        constants, `pow`), None when it is not one; `_TooLarge` when it is too large to compute."""
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bytes)):
            return node.value
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = self.fold(node.operand)
            return (-value if isinstance(node.op, ast.USub) else value) if isinstance(value, (int, float)) else None
        if isinstance(node, ast.BinOp) and type(node.op) in _FOLDED:
            left, right = self.fold(node.left), self.fold(node.right)
            return self._apply(node.op, left, right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pow" \
                and len(node.args) == 2 and not node.keywords:
            return self._apply(ast.Pow(), self.fold(node.args[0]), self.fold(node.args[1]))
        return None

    @staticmethod
    def _apply(op: ast.operator, left: Any, right: Any) -> Any:
        if left is None or right is None:
            return None
        _check_size(op, left, right)
        try:
            return _FOLDED[type(op)](left, right)
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, ArithmeticError):
            return None

    def bounded(self, node: ast.AST) -> None:
        """Refuse a power, shift or product whose constant operands make it too large (`10**10**8`)."""
        operands = ([node.left, node.right] if isinstance(node, ast.BinOp) else list(node.args[:2]))
        op = node.op if isinstance(node, ast.BinOp) else ast.Pow()
        values = []
        for operand in operands:
            try:
                values.append(self.fold(operand))
            except _TooLarge:  # refused where it is computed
                values.append(None)
        try:
            if isinstance(op, (ast.Pow, ast.LShift)) and isinstance(values[1], (int, float)):
                _check_size(op, values[0] if values[0] is not None else 2, values[1])
            elif None not in values:
                _check_size(op, *values)
        except _TooLarge as exc:
            self.refuse(node, f"`{ast.unparse(node)[:60]}` ({exc})")

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
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    value = self.fold(node.value)
                except _TooLarge:
                    value = None
                if value is None:
                    self.constants.pop(node.targets[0].id, None)
                else:
                    self.constants[node.targets[0].id] = value
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
        if (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.LShift, ast.Mult))) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pow"
                and len(node.args) >= 2):
            self.bounded(node)
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
    constants: dict[str, Any] = {}
    for option, text, mode in [*(("--setup", s, "exec") for s in setup), ("--expr", expression.strip(), "eval")]:
        try:
            tree = ast.parse(text, mode=mode)
        except SyntaxError as exc:
            raise GradcheckError(f"the code does not parse: {exc.msg}: {(exc.text or '').strip()!r}") from exc
        checker = _Checker(assigned, constants)
        if isinstance(tree, ast.Module):
            for statement in tree.body:
                checker.statement(statement)
        else:
            checker.expr(tree)
        if checker.found:
            _, _, what = min(checker.found)
            raise GradcheckError(f"{option} {text!r}: {what} is not allowed: {REASON}")


_GUARD = "__kllint_bounded__"  # a dunder name: an expression cannot name it (`_Checker.name`)
_GUARDED = (ast.Pow, ast.LShift, ast.Mult)


def _guarded(op: str, a: Any, b: Any) -> Any:
    """`a op b` for op in `**`, `<<`, `*`, refusing (OverflowError) what `_check_size` refuses:
    integers computed at run time (`10 ** int(x)`) are as dangerous as constants."""
    node = {"**": ast.Pow(), "<<": ast.LShift(), "*": ast.Mult()}[op]
    try:
        _check_size(node, a, b)
    except _TooLarge as exc:
        raise OverflowError(f"`{op}`: {exc}") from None
    return _FOLDED[type(node)](a, b)


class _Guard(ast.NodeTransformer):
    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, _GUARDED):
            return node
        symbol = {ast.Pow: "**", ast.LShift: "<<", ast.Mult: "*"}[type(node.op)]
        return ast.copy_location(ast.Call(ast.Name(_GUARD, ast.Load()), [ast.Constant(symbol), node.left, node.right],
                                          []), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, _GUARDED) or not isinstance(node.target, ast.Name):
            return node
        read = ast.Name(node.target.id, ast.Load())
        value = self.visit_BinOp(ast.copy_location(ast.BinOp(read, node.op, node.value), node))
        return ast.copy_location(ast.Assign([node.target], value), node)


def bounded_code(text: str, mode: str, filename: str) -> tuple[Any, dict[str, Any]]:
    """`compile(text, filename, mode)` with every `**`, `<<` and `*` bounded at run time (see
    `_guarded`), and the names the code needs for it.

    Raises:
        SyntaxError: the text does not parse.
    """
    tree = ast.fix_missing_locations(_Guard().visit(ast.parse(text, mode=mode)))
    return compile(tree, filename, mode), {_GUARD: _guarded}


def restricted_builtins() -> dict[str, Any]:
    """`{"__builtins__": ...}` with only `ALLOWED_BUILTINS`, for the namespace of a checked expression."""
    allowed = {name: getattr(builtins, name) for name in ALLOWED_BUILTINS}
    allowed["pow"] = bounded_pow
    return {"__builtins__": allowed}
