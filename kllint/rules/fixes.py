"""What the fixes read from the code, and the estimate handed to the gradient checker: the
estimate expression as written with its setup and operand roles, the log-ratio it is built on,
a detached importance weight on it (the rewrites themselves are in `kllint.rules.kl_fixes`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from kllint.analysis import roles as name_roles
from kllint.analysis.facts import KLTerm
from kllint.analysis.module import ModuleInfo, code_of
from kllint.diagnostics import Estimate, Span

if TYPE_CHECKING:
    from kllint.rules.base import RuleContext

ROLE_NAMES = {"logp": "policy", "logp_detached": "policy_detached", "ref": "reference", "old": "old"}


class _NameCollector(cst.CSTVisitor):
    """The names read by an expression (`a` of `a.b`, arguments of calls, not called names)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def visit_Attribute(self, attr: cst.Attribute) -> bool:
        attr.value.visit(self)
        return False

    def visit_Name(self, name: cst.Name) -> None:
        self.names.append(name.value)

    def visit_Arg(self, arg: cst.Arg) -> bool:
        arg.value.visit(self)
        return False

    def visit_Call(self, call: cst.Call) -> bool:
        if not isinstance(call.func, cst.Name):
            call.func.visit(self)
        for arg in call.args:
            arg.visit(self)
        return False


def _free_names(node: cst.CSTNode) -> list[str]:
    collector = _NameCollector()  # a module-level class: one defined here would be a reference cycle
    node.visit(collector)
    return list(dict.fromkeys(collector.names))


def _branch_condition(test: cst.BaseExpression) -> tuple[str, frozenset, bool] | None:
    """`name == "a"` / `name in ("a", "b")` (or their negations) as (name, options, negated)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name)):
        return None
    target = test.comparisons[0]
    values = target.comparator.elements if isinstance(target.comparator, (cst.Tuple, cst.List)) else None
    strings = [e.value for e in values] if values is not None else [target.comparator]
    if not strings or not all(isinstance(v, cst.SimpleString) for v in strings):
        return None
    options = frozenset(str(v.evaluated_value) for v in strings)
    negated = isinstance(target.operator, (cst.NotEqual, cst.NotIn))
    if not negated and not isinstance(target.operator, (cst.Equal, cst.In)):
        return None
    return test.left.value, options, negated


def _in_source_order(statements, conditions: tuple, out: list) -> None:
    """Small statements with the branch conditions they run under, in source order."""
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            out.extend((small, conditions) for small in statement.body)
        elif isinstance(statement, cst.If):
            condition = _branch_condition(statement.test)
            taken = conditions + ((condition,) if condition else ())
            _in_source_order(statement.body.body, taken, out)
            other = conditions + (((condition[0], condition[1], not condition[2]),) if condition else ())
            if isinstance(statement.orelse, cst.If):
                _in_source_order([statement.orelse], other, out)
            elif isinstance(statement.orelse, cst.Else):
                _in_source_order(statement.orelse.body.body, other, out)
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            body = getattr(statement, "body", None)
            if isinstance(getattr(body, "body", None), (list, tuple)):
                _in_source_order(body.body, conditions, out)


def _consistent(branch: tuple, anchor_conditions: tuple) -> bool:
    """Whether an assignment's branch conditions can hold together with the estimate's."""
    for name, options, negated in branch:
        for condition in anchor_conditions:
            if (condition.tested or condition.name) != name or condition.predicate != "in":
                continue
            theirs = frozenset(condition.options)
            if not negated and not condition.negated and not options & theirs:
                return False
            if negated != condition.negated and (options <= theirs if negated else theirs <= options):
                return False
    return True


def _bound_names(node: cst.Assign | cst.AugAssign) -> list[str]:
    """The plain names an assignment binds (`a = b = ...`, `a -= ...`)."""
    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
    return [t.value for t in targets if isinstance(t, cst.Name)]


def setup_bound_names(line: str) -> list[str]:
    """The names a setup line of an estimate (`Estimate.setup`) binds; none when it does not parse."""
    try:
        statement = cst.parse_statement(line)
    except Exception:  # noqa: BLE001
        return []
    body = getattr(statement, "body", ())
    return [name for node in body if isinstance(node, (cst.Assign, cst.AugAssign)) for name in _bound_names(node)]


def _before(span: Span, anchor: Span) -> bool:
    """Whether a statement at `span` ends before the estimate at `anchor` starts (a statement
    that contains the estimate, such as `kl = kl.exp() - 1 - kl` itself, is not before it)."""
    return (span.end_line, span.end_column) <= (anchor.line, anchor.column)


def _setup(module: ModuleInfo, function: cst.FunctionDef | None, anchor: Span, names: list[str],
           known: dict[str, set[str]], anchor_conditions: tuple = ()) -> tuple[list[str], list[str]]:
    """Assignments (as written, plain and augmented) before the anchor that define `names`,
    transitively, stopping at names whose role is known. The statements are walked back from
    the anchor, as the value flows: the last assignment of a needed name whose branch agrees
    with the estimate's branch defines it, and one that reads the name it binds
    (`log_ratio = log_ratio.exp() - 1 - log_ratio`, `kl -= log_ratio`) needs the assignment
    before it too. Returns the setup in source order and the remaining free names."""
    if function is None or not isinstance(function.body, cst.IndentedBlock):
        return [], names
    statements: list = []
    _in_source_order(function.body.body, (), statements)
    needed = dict.fromkeys(name for name in names if name not in known)
    setup: list[cst.Assign | cst.AugAssign] = []
    free = {name for name in names if name in known}
    for node, branch in reversed(statements):
        if not isinstance(node, (cst.Assign, cst.AugAssign)) or not needed:
            continue
        bound = [name for name in _bound_names(node) if name in needed]
        if not bound or not _before(module.span(node), anchor) or not _consistent(branch, anchor_conditions):
            continue
        setup.append(node)
        if isinstance(node, cst.Assign):  # an augmented assignment reads its target: still needed
            for name in bound:
                del needed[name]
        for name in _free_names(node.value):
            if name in known:
                free.add(name)
            else:
                needed.setdefault(name)
    free.update(needed)
    setup.reverse()
    return [module.source(n).strip() for n in setup], _in_reading_order(names, setup, free)


def _in_reading_order(names: list[str], setup: list, free: set[str]) -> list[str]:
    """The free names breadth-first from the estimate's own names through the setup lines
    that bind them (the latest first), as the estimate is read."""
    defined: dict[str, list] = {}
    for node in reversed(setup):
        for name in _bound_names(node):
            defined.setdefault(name, []).append(node)
    order: list[str] = []
    pending, seen = list(names), set()
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name in free:
            order.append(name)
        for node in defined.get(name, ()):
            pending.extend(_free_names(node.value))
    return order


def _expression_source(node: cst.CSTNode, module: ModuleInfo) -> str:
    """The estimate's expression as written; an augmented assignment `kl -= log_ratio` (the
    anchor of an estimate it completes) as the expression it assigns, `kl - log_ratio`."""
    if isinstance(node, cst.AugAssign):
        operator = code_of(node.operator).strip()[:-1]
        target = module.source(node.target).strip()
        return f"{target} {operator} {atom(module.source(node.value).strip())}"
    return module.source(node).strip()


MODULE_ALIASES = ("torch", "F", "jnp", "jax", "np", "nn", "math", "optax")


def estimate_for(term: KLTerm, ctx: "RuleContext", usage: str) -> Estimate | None:
    """The estimate expression as written, with its setup and operand roles, for `--confirm`."""
    module = ctx.modules.get(term.anchor.path)
    if module is None or term.anchor.node is None:
        return None
    try:
        source = _expression_source(term.anchor.node, module)
    except Exception:  # noqa: BLE001
        return None
    function = module.function_at(term.anchor.span.line)
    known = ctx.name_roles.get((term.anchor.path, term.anchor.function), {})
    setup, free = _setup(module, function, term.anchor.span, _free_names(term.anchor.node), known,
                         term.anchor.conditions)

    role_map = []
    aliases = []
    for name in free:
        if name in module.imports or name in MODULE_ALIASES:
            aliases.append((name, module.imports.get(name, name)))
            continue
        seen = known.get(name, set())
        # a name seen with several roles (branches): the reference or live side is the KL's operand
        preferred = next((r for r in ("ref", "logp", "old", "logp_detached") if r in seen), "")
        role = ROLE_NAMES.get(preferred) or name_roles.logprob_role(name)
        if role is None and name_roles.is_mask_name(name):
            role = "mask"
        if role is not None:
            role_map.append((name, role))
    framework = "jax" if any(q.startswith("jax") for _, q in aliases) else "torch"
    granularity = "per-token" if term.per_token else "sequence"
    return Estimate(source, tuple(role_map), usage, granularity, tuple(setup), framework, tuple(aliases))


def role_names(term: KLTerm, ctx: "RuleContext") -> tuple[str | None, str | None, bool]:
    """The names a rewrite of `term` uses for the policy's and the reference's log-probs, and
    whether the code is JAX (None for a name the estimate does not show)."""
    estimate = estimate_for(term, ctx, "loss")
    if estimate is None:
        return None, None, False
    policy = next((n for n, r in estimate.roles if r in ("policy", "policy_detached")), None)
    reference = next((n for n, r in estimate.roles if r == "reference"), None)
    return policy, reference, estimate.framework == "jax"


def atom(text: str) -> str:
    """`text` as an operand of `.detach()` / `**`: parenthesized unless it already is an atom."""
    try:
        node = cst.parse_expression(text)
    except Exception:  # noqa: BLE001
        return f"({text})"
    if node.lpar or isinstance(node, (cst.Name, cst.Call, cst.Attribute, cst.Subscript)):
        return text
    return f"({text})"


def parenthesized(replacement: str, node: cst.CSTNode | None) -> str:
    """Parenthesize the replacement unless the replaced node's own parentheses stay around it
    (the span of a parenthesized expression excludes its parentheses)."""
    return replacement if getattr(node, "lpar", None) else f"({replacement})"


_EXP_LIKE = {"exp", "expm1", "abs", "absolute"}


def _strip_minus(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return expr.expression
    return expr


class _LogRatioFinder(cst.CSTVisitor):
    """Collects the operands `log_ratio_source` looks for, as written in `module`."""

    def __init__(self, module: ModuleInfo) -> None:
        super().__init__()
        self.module = module
        self.found: list[str] = []

    def visit_Call(self, call: cst.Call) -> bool:
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if name in _EXP_LIKE or name == "log":
            if isinstance(func, cst.Attribute) and not call.args:
                operand = func.value  # D.exp(), D.abs()
            elif call.args:
                operand = call.args[0].value
            else:
                return True
            text = self.module.source(_strip_minus(operand)).strip()
            self.found.append(self.module.source(call).strip() if name == "log" else text)
            return False
        if name in ("square", "pow") and isinstance(func, cst.Attribute) and not self.found:
            self.found.append(self.module.source(_strip_minus(func.value)).strip())
            return False
        return True

    def visit_BinaryOperation(self, op: cst.BinaryOperation) -> bool:
        if isinstance(op.operator, cst.Power) and not self.found:
            self.found.append(self.module.source(_strip_minus(op.left)).strip())
            return False
        return True


def log_ratio_source(node: cst.CSTNode, module: ModuleInfo) -> str | None:
    """The log-ratio an estimator expression is built on, as written: the argument of its
    `exp` / `abs` (`torch.exp(D)`, `D.exp()`, `jnp.abs(D)`), `log(r)` for `r - 1 - log(r)`, or
    the base of a square. None when no such operand is visible."""
    finder = _LogRatioFinder(module)  # module-level: a class defined here would be a reference cycle
    node.visit(finder)
    return finder.found[0] if finder.found else None


def _is_detached(expr: cst.BaseExpression) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
    return name in ("detach", "stop_gradient")


def detached_weight(node: cst.CSTNode | None, module: ModuleInfo) -> str | None:
    """`w.detach()` in `estimate * w.detach()` (or `jax.lax.stop_gradient(w) * estimate`)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        for side in (node.right, node.left):
            if _is_detached(side):
                return module.source(side).strip()
    return None
