"""Terms under test, built from an expression string or a Python function.

A term is a callable `roles -> values`: it receives the role tensors of `exact.ROLES`
(`[batch, tokens]` per token, `[batch]` per sequence) and returns per-token
`[batch, tokens]` or per-sequence `[batch]` values.
"""
from __future__ import annotations

import ast
import builtins
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from kllint.gradcheck.errors import GradcheckError
from kllint.gradcheck.exact import ROLES, Term

DEFAULT_NAMES = {
    "logp": "policy",
    "ref": "reference",
    "old": "old",
    "mask": "mask",
    "logp_all": "policy_dist",
    "ref_all": "reference_dist",
}
"""Names an expression may use without binding them (`--policy`, `--ref`, ... rename them)."""

_BUILTINS = set(dir(builtins))


@dataclass(frozen=True)
class ExpressionTerm:
    """A term from `setup` statements and an expression (evaluated with `eval`).

    Attributes:
        expression: the expression text, e.g. ``torch.exp(ref - logp) - (ref - logp) - 1``.
        bindings: free name -> role (`exact.ROLES`); names bound to `ones` are listed in `opaque`.
        keyed: names only read with string keys (`batch["ref_logp"]`), bound to a dict of
            key -> role (`key_role`).
        setup: statements executed first, in order (they may define intermediate names).
        modules: extra module aliases (name -> module object), on top of the backend's.
    """

    expression: str
    bindings: tuple[tuple[str, str], ...]
    setup: tuple[str, ...] = ()
    modules: tuple[tuple[str, Any], ...] = ()
    opaque: tuple[str, ...] = ()
    keyed: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def roles_used(self) -> set[str]:
        """Roles the term reads (decides the default sampling: `old` -> off-policy)."""
        return {role for _, role in self.bindings} | {role for _, keys in self.keyed for _, role in keys}

    def make(self, namespace: Mapping[str, Any]) -> Term:
        """The term callable, with `namespace` (the backend's module names) available."""
        from kllint.gradcheck.allowed import bounded_code

        try:  # powers, shifts and products of Python integers bounded (`10 ** int(x)` would hold the lock)
            code, guards = bounded_code(self.expression, "eval", "<gradcheck expression>")
            setup = [bounded_code(s, "exec", "<gradcheck setup>")[0] for s in self.setup]
        except SyntaxError as exc:
            raise GradcheckError(f"the code does not parse: {exc.msg}") from exc
        base = dict(namespace)
        base.update(self.modules)
        base.update(guards)
        bindings, keyed = self.bindings, self.keyed

        def term(roles: Mapping[str, Any]) -> Any:
            ns = dict(base)
            ns.update({name: roles[role] for name, role in bindings})
            ns.update({name: {key: roles[role] for key, role in keys} for name, keys in keyed})
            for statement in setup:
                exec(statement, ns)  # noqa: S102 - the user's own code, see `gradcheck --help`
            return eval(code, ns)  # noqa: S307

        return term


def _parse(expression: str, setup: Sequence[str]) -> list[ast.AST]:
    try:
        return [ast.parse(s, mode="exec") for s in setup] + [ast.parse(expression.strip(), mode="eval")]
    except SyntaxError as exc:
        raise GradcheckError(f"the code does not parse: {exc.msg}: {(exc.text or '').strip()!r}") from exc


def free_names(expression: str, setup: Sequence[str] = ()) -> list[str]:
    """Names read by `setup` + `expression` that neither assigns nor a builtin, in order of use.

    Raises:
        GradcheckError: the code does not parse.
    """
    trees = _parse(expression, setup)
    bound: set[str] = set()
    used: list[str] = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id not in bound and node.id not in _BUILTINS and node.id not in used:
                    used.append(node.id)
    return used


def called_names(expression: str, setup: Sequence[str] = ()) -> set[str]:
    """Bare names used as functions (`f(x)`) in `setup` + `expression`."""
    trees = _parse(expression, setup)
    return {node.func.id for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def expression_term(expression: str, names: Mapping[str, str] | None = None, setup: Sequence[str] = (),
                    modules: Mapping[str, Any] | None = None, module_names: Sequence[str] = ()) -> ExpressionTerm:
    """Bind an expression's free names to roles.

    Args:
        expression: Python expression over `[batch, tokens]` tensors.
        names: name -> role; default `DEFAULT_NAMES`. Free names not in `names`, not module
            aliases (`modules`, `module_names`) and not builtins are bound to ones (`opaque`).
        setup: statements run before the expression.

    Raises:
        GradcheckError: the code does not parse or a role is unknown.
    """
    names = dict(DEFAULT_NAMES if names is None else names)
    for name, role in names.items():
        if role not in ROLES:
            raise GradcheckError(f"unknown role {role!r} for {name!r} (choose from {', '.join(ROLES)})")
    modules = dict(modules or {})
    skip = set(modules) | set(module_names)
    bindings, opaque, keyed = [], [], []
    callees = called_names(expression, setup)
    keys = string_keys(expression, setup)
    for name in free_names(expression, setup):
        if name in skip:
            continue
        if name in names:
            bindings.append((name, names[name]))
        elif name in keys:
            keyed.append((name, tuple((key, key_role(key)) for key in keys[name])))
        elif name in callees:
            raise GradcheckError(f"the code calls {name!r}, which the checker cannot bind "
                                 "(only tensors, numbers and torch/jax/numpy modules are available)")
        else:
            bindings.append((name, "ones"))
            opaque.append(name)
    return ExpressionTerm(expression=expression.strip(), bindings=tuple(bindings), setup=tuple(setup),
                          modules=tuple(modules.items()), opaque=tuple(opaque), keyed=tuple(keyed))


def string_keys(expression: str, setup: Sequence[str] = ()) -> dict[str, list[str]]:
    """Names that are only read with constant string keys (`batch["ref_logp"]`) -> their keys."""
    keys: dict[str, list[str]] = {}
    other: set[str] = set()
    for tree in _parse(expression, setup):
        keyed_nodes = set()
        subscripts = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Subscript)),
                            key=lambda n: (n.lineno, n.col_offset))
        for node in subscripts:  # in source order
            if (isinstance(node.value, ast.Name)
                    and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
                keyed_nodes.add(id(node.value))
                found = keys.setdefault(node.value.id, [])
                if node.slice.value not in found:
                    found.append(node.slice.value)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and id(node) not in keyed_nodes:
                other.add(node.id)
    return {name: found for name, found in keys.items() if name not in other}


def key_role(key: str) -> str:
    """Role of a batch-dict entry from its key: `mask`; `old`/`behav`/`rollout`/`sampler` -> old;
    `ref`/`base`/`init` -> reference; other log-probs (`logprobs`) -> old (a batch holds
    rollout-time values); anything else -> ones."""
    lowered = key.lower()
    for role, hints in _ROLE_HINTS:
        if any(h in lowered for h in hints):
            return role
    if any(h in lowered for h in ("logp", "logprob", "log_prob")):
        return "old"
    return "ones"


_ROLE_HINTS = (
    ("mask", ("mask",)),
    ("old", ("old", "behav", "rollout", "sampler", "sampling")),
    ("reference", ("ref", "base", "init", "prior", "anchor")),
)


def infer_arguments(func: Callable[..., Any], given: Mapping[str, str], kwargs: Mapping[str, Any]) -> dict[str, str]:
    """Parameter -> role for a function: `given` first, then by parameter name.

    Required parameters not in `given` or `kwargs` get a role from their name (`mask`;
    `old`/`behav`/`rollout`/`sampler` -> old; `ref`/`base`/`init` -> reference); the first
    remaining one is the policy. Parameters with defaults are left alone.

    Raises:
        GradcheckError: a role is unknown, a name is not a parameter, or a role cannot be inferred.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None
    params = signature.parameters if signature else {}
    accepts_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for name, role in given.items():
        if role not in ROLES:
            raise GradcheckError(f"unknown role {role!r} for argument {name!r} (choose from {', '.join(ROLES)})")
        if signature is not None and name not in params and not accepts_var_kw:
            raise GradcheckError(f"{getattr(func, '__name__', func)!r} has no parameter {name!r} "
                                 f"(parameters: {', '.join(params)})")
    result = dict(given)
    if signature is None:
        if not result:
            raise GradcheckError("cannot read the function's signature: bind its arguments with --arg NAME=ROLE")
        return result
    pending = []
    for name, p in params.items():
        if name in result or name in kwargs or p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.default is not inspect.Parameter.empty:
            continue
        lowered = name.lower()
        for role, hints in _ROLE_HINTS:
            if any(h in lowered for h in hints):
                result[name] = role
                break
        else:
            pending.append(name)
    if pending and "policy" not in result.values():
        result[pending.pop(0)] = "policy"
    if pending:
        raise GradcheckError(f"cannot infer the role of parameter(s) {', '.join(pending)}: "
                             "bind them with --arg NAME=ROLE or give a value with --kwargs NAME=VALUE")
    if "policy" not in result.values() and "policy_dist" not in result.values():
        raise GradcheckError("no argument is bound to the live policy log-probs: use --arg NAME=policy")
    order = list(params)
    return dict(sorted(result.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))


@dataclass(frozen=True)
class FunctionTerm:
    """A term that calls `function(**{param: role tensor}, **kwargs)`.

    A tuple or list result is reduced to its first element (`notes` says so).
    """

    function: Callable[..., Any]
    arguments: tuple[tuple[str, str], ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    def roles_used(self) -> set[str]:
        """Roles bound to the function's arguments."""
        return {role for _, role in self.arguments}

    def make(self, namespace: Mapping[str, Any]) -> Term:
        """The term callable (`namespace` is unused: the function has its own globals)."""
        function, arguments, kwargs = self.function, self.arguments, dict(self.kwargs)

        def term(roles: Mapping[str, Any]) -> Any:
            out = function(**{name: roles[role] for name, role in arguments}, **kwargs)
            if isinstance(out, (tuple, list)) and out:
                out = out[0]
            return out

        return term
