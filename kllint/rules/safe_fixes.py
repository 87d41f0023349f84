"""The safe fixes the rule pages promise (`kllint check --fix` applies them): value and gradient
with respect to the policy stay what they were.

- KL503: the statement that runs the reference forward, wrapped in `with torch.no_grad():`,
  when it is an assignment or `return` alone on its lines whose value reads nothing of the
  policy (no policy log-probs, no policy network), and the module imports torch.
- KL601: `exp(x)` clamped from above after the exponential, `exp(x).clamp(max=c)`, rewritten as
  `exp(x.clamp(max=log(c)))` (also `torch.clamp` / `torch.clip`, `jnp.clip`, `jnp.minimum`, a
  lower bound `min=a` with `a > 0` becoming `log(a)`): the same value, and the same gradient
  wherever the original gradient is finite. `log(c)` is `math.log(c)` when the module imports
  `math`, the number itself for a literal `c`, `jnp.log(c)` in JAX; otherwise display-only.
"""
from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING

import libcst as cst

from kllint.analysis import roles
from kllint.analysis.autograd import Framework
from kllint.analysis.module import ModuleInfo, dotted_name
from kllint.analysis.values import Anchor
from kllint.diagnostics import Fix, Span
from kllint.rules import rewrite
from kllint.rules.wording import framework_at

if TYPE_CHECKING:
    from kllint.rules.base import RuleContext

NO_GRAD_DESCRIPTION = "run the reference forward under `torch.no_grad()`"
CLAMP_DESCRIPTION = "clamp the log-ratio before the exponential"
_EMPTY = cst.Module(body=[])


def _alias(module: ModuleInfo, qualname: str) -> str | None:
    return next((name for name, target in sorted(module.imports.items()) if target == qualname), None)


def _reads_policy(value: ast.expr, known: dict[str, set[str]]) -> bool:
    """Whether an expression reads the policy: a policy log-prob or network, by the role the
    analysis saw it with or by its name (a called name only counts as a network: the helper
    `token_logps(ref_model, ids)` is not a policy log-prob)."""
    called = {id(node.func) for node in ast.walk(value) if isinstance(node, ast.Call)}
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute) and not isinstance(node.value, (ast.Name, ast.Attribute)):
            continue  # `.logits` of a forward's output is that output's
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name is None:
            continue
        if roles.model_role(name) == "policy":
            return True
        if id(node) not in called and ("logp" in known.get(name, ()) or roles.logprob_role(name) == "policy"):
            return True
    return False


def no_grad_fix(anchor: Anchor, ctx: "RuleContext") -> Fix:
    """KL503: wrap the statement of the reference forward at `anchor` in `torch.no_grad()`."""
    display = Fix("display-only", NO_GRAD_DESCRIPTION)
    module = anchor.module
    if module is None or anchor.node is None:
        return display
    statement = rewrite.statement_at(module, anchor.span)
    if statement is None or statement.conditional:
        return display
    node = statement.node
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Return)) else None
    torch = _alias(module, "torch")
    context = f"{torch}.no_grad()" if torch else (f"{_alias(module, 'torch.no_grad')}()" if _alias(module, "torch.no_grad") else None)
    known = ctx.name_roles.get((anchor.path, anchor.function), {})
    lines = [line.rstrip("\r\n") for line in module.lines[statement.start - 1:statement.end]]
    if value is None or context is None or _reads_policy(value, known) \
            or any('"""' in line or "'''" in line for line in lines):
        return display
    unit = rewrite.indent_unit(module, statement)
    indent = statement.indent
    body = [indent + unit + line[len(indent):] if line.startswith(indent) else unit + line for line in lines]
    content = "\n".join([f"{indent}with {context}:"] + body)
    region = Span(statement.start, 1, statement.end, len(lines[-1]) + 1)
    return Fix("safe", NO_GRAD_DESCRIPTION, module.source(anchor.node).strip(), region, content)


# -- KL601 --------------------------------------------------------------------------------------------------------

def _exp_operand(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """`x` of `torch.exp(x)` / `jnp.exp(x)` (with the function's spelling) or of `x.exp()` ("")."""
    if not isinstance(node, cst.Call):
        return None
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value == "exp":
        if not node.args:
            return func.value, ""
        if len(node.args) == 1 and node.args[0].keyword is None and dotted_name(func) is not None:
            return node.args[0].value, dotted_name(func)
    return None


def _number(node: cst.BaseExpression | None) -> float | None:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _number(node.expression)
        return -inner if inner is not None else None
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    return None


def _code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node).strip()


def _log_of(bound: cst.BaseExpression, module: ModuleInfo, jax_numpy: str | None) -> str | None:
    """`log(bound)` as this module can write it: `math.log(10.0)` (or its value) for a positive
    number, `jnp.log(c)` in JAX; None for a PyTorch bound that may be a tensor."""
    value = _number(bound)
    if value is not None:
        if value <= 0:
            return None
        math_alias = _alias(module, "math")
        return f"{math_alias}.log({_code(bound)})" if math_alias else repr(math.log(value))
    if jax_numpy:
        return f"{jax_numpy}.log({_code(bound)})"
    return None


def clamp_fix(anchor: Anchor, ctx: "RuleContext") -> Fix:
    """KL601: `exp(x).clamp(max=c)` -> `exp(x.clamp(max=log(c)))` (see the module docstring)."""
    display = Fix("display-only", CLAMP_DESCRIPTION)
    module, call = anchor.module, anchor.node
    if module is None or not isinstance(call, cst.Call):
        return display
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
    method = isinstance(func, cst.Attribute) and name in ("clamp", "clip", "clamp_max") and _exp_operand(func.value)
    if method:
        operand, args = func.value, list(call.args)
    elif name in ("clamp", "clip", "minimum") and call.args and dotted_name(func) is not None \
            and (name != "minimum" or module.imports.get(dotted_name(func).split(".")[0], "").startswith("jax")):
        args = list(call.args)
        first = 1 if name == "minimum" and _exp_operand(args[1].value if len(args) > 1 else None) else 0
        operand = args.pop(first).value
    else:
        return display
    exp = _exp_operand(operand)
    if exp is None or any(a.star for a in args):
        return display
    x, exp_func = exp

    jax_numpy = _alias(module, "jax.numpy") if framework_at(anchor) is Framework.JAX else None
    bounds = _bounds(name, args)
    if bounds is None:
        return display
    new_args = []
    for keyword, bound, upper in bounds:
        if not upper:
            number = _number(bound) if bound is not None else None
            if bound is None or (number is not None and number <= 0):  # exp(x) > 0: no lower bound
                if keyword is None:
                    new_args.append("None")  # keeps the position of the upper bound
                continue
            if number is None:
                return display  # a lower bound whose sign is unknown
        logged = _log_of(bound, module, jax_numpy)
        if logged is None:
            return display
        new_args.append(f"{keyword}={logged}" if keyword else logged)
    while new_args and new_args[-1] == "None":
        new_args.pop()
    if not new_args or all(a == "None" for a in new_args):
        return display
    inner = _code(x)
    listed = ", ".join(new_args)
    if method:
        clamped = f"{rewrite_atom(inner)}.{name}({listed})"
    else:
        clamped = f"{dotted_name(func)}({inner}, {listed})"
    replacement = f"{rewrite_atom(clamped)}.exp()" if exp_func == "" else f"{exp_func}({clamped})"
    return Fix("safe", CLAMP_DESCRIPTION, replacement)


def _bounds(name: str, args: list[cst.Arg]) -> list[tuple[str | None, cst.BaseExpression | None, bool]] | None:
    """(keyword, bound, is the upper bound) of a clamp's bounds as written; None for a form not
    rewritten (an upper bound missing, unknown keywords)."""
    if name == "clamp_max":
        return [(None, args[0].value, True)] if len(args) == 1 and args[0].keyword is None else None
    if name == "minimum":
        return [(None, args[0].value, True)] if len(args) == 1 and args[0].keyword is None else None
    found: list[tuple[str | None, cst.BaseExpression | None, bool]] = []
    positional = [a for a in args if a.keyword is None]
    if len(positional) > 2:
        return None
    for index, arg in enumerate(positional):
        value = None if isinstance(arg.value, cst.Name) and arg.value.value == "None" else arg.value
        found.append((None, value, index == 1))
    for arg in args:
        if arg.keyword is None:
            continue
        keyword = arg.keyword.value
        if keyword not in ("min", "max", "a_min", "a_max"):
            return None
        found.append((keyword, arg.value, keyword in ("max", "a_max")))
    if not any(upper and bound is not None for _, bound, upper in found):
        return None
    return found


def rewrite_atom(text: str) -> str:
    """`text` as the receiver of a method call: parenthesized unless it is a name, call,
    attribute or subscript."""
    try:
        node = cst.parse_expression(text)
    except Exception:  # noqa: BLE001
        return f"({text})"
    if isinstance(node, (cst.Name, cst.Call, cst.Attribute, cst.Subscript)) or node.lpar:
        return text
    return f"({text})"
